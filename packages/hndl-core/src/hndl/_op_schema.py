"""The parts an op is declared from: its parameters (:class:`Param`), its ports (:class:`Port`), the validated
parameters its rules receive (:class:`Params`), and the error its inference rule raises (:class:`InferError`).

:mod:`hndl._registry` puts them together into an :class:`~hndl.OpDef` and keeps the registry; these are data
and checks only (no torch).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._contracts import ShapePattern
from ._param_types import ParamType, param_type
from .naming import excerpt

__all__ = ["REQUIRED", "InferError", "Param", "Params", "Port"]


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: Default of a parameter that must be given (unless it is ``inferred`` from shapes).
REQUIRED: Any = _Required()


class InferError(Exception):
    """Raised by an op's inference rule; the checker turns it into a located :class:`~hndl.Problem`."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "E_SHAPE",
        port: str | None = None,
        param: str | None = None,
        expected: Any = None,
        actual: Any = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.port = port
        self.param = param
        self.expected = expected
        self.actual = actual
        self.hint = hint


@dataclass(frozen=True, init=False)
class Param:
    """One parameter of an op.

    Attributes:
        name: the key in a spec file and the keyword in :meth:`Graph.add`.
        type: a :class:`~hndl.ParamType`; given as its name (``"int"``, ``"float"``, ``"bool"``, ``"str"``,
            ``"ints"``, ``"numbers"``, ``"int_or_pair"``, ``"shape"``, ``"dtype"``, ``"mapping"``, ``"graph"``) or as
            the object.
        default: the value when omitted; :data:`REQUIRED` if it must be given.
        doc: one line for the reference docs.
        min, max: inclusive bounds for numbers (and for each int of a list).
        choices: allowed values.
        inferred: the value follows from input shapes; it may be given, and must then agree.
        nullable: ``None`` is an allowed value.
        finite: a number must be finite: NaN and infinities (``.nan``, ``.inf`` in YAML) are refused. Turn it
            off only for a parameter where they mean something; bounds still refuse NaN.
    """

    name: str
    type: ParamType
    default: Any
    doc: str
    min: float | None
    max: float | None
    choices: tuple[Any, ...] | None
    inferred: bool
    nullable: bool
    finite: bool

    def __init__(
        self,
        name: str,
        type: str | ParamType,
        default: Any = REQUIRED,
        doc: str = "",
        min: float | None = None,
        max: float | None = None,
        choices: Sequence[Any] | None = None,
        inferred: bool = False,
        nullable: bool = False,
        finite: bool = True,
    ) -> None:
        fields = {
            "name": name,
            "type": param_type(type),
            "default": default,
            "doc": doc,
            "min": min,
            "max": max,
            "choices": None if choices is None else tuple(choices),
            "inferred": inferred,
            "nullable": nullable,
            "finite": finite,
        }
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    @property
    def required(self) -> bool:
        return self.default is REQUIRED and not self.inferred

    def validate(self, value: Any) -> tuple[Any, str]:
        """Normalise ``value``; returns ``(value, "")`` or ``(None, reason)``."""
        if value is None:
            return (None, "") if self.nullable else (None, "must not be null")
        value, reason = self.type.normalize(value)
        if reason:
            return None, reason
        if self.type.bounded:
            for v in self.type.bounded_items(value):
                if self.finite and isinstance(v, float) and not math.isfinite(v):
                    return None, f"must be a finite number, got {excerpt(value)}"
                # Written as "not within" so that NaN, which compares false with everything, is out of bounds.
                if self.min is not None and not v >= self.min:
                    return None, f"must be >= {_number(self.min)}, got {excerpt(value)}"
                if self.max is not None and not v <= self.max:
                    return None, f"must be <= {_number(self.max)}, got {excerpt(value)}"
        if self.choices is not None and value not in self.choices:
            options = ", ".join(repr(c) for c in self.choices)
            return None, f"must be one of {options}, got {excerpt(value)}"
        return value, ""

    def describe_default(self) -> str:
        """The default as the reference and ``hndl ops`` show it: ``required``, ``inferred``, or the value as
        YAML flow text (``[1, 1]``), with ``(or inferred)`` for an inferred parameter that has one."""
        from ._flow_yaml import flow_yaml

        if self.inferred:
            return "inferred" if self.default is REQUIRED else f"{flow_yaml(self.default)} (or inferred)"
        return "required" if self.default is REQUIRED else flow_yaml(self.default)

    def describe_constraints(self) -> str:
        """The bounds and choices in words (``>= 1; <= 10000``, ``one of 'mean', 'sum'``, ``may be null``), or
        ``""``: what the reference and ``hndl ops`` show beside the type."""
        from ._flow_yaml import flow_yaml

        rules = []
        if self.min is not None:
            rules.append(f">= {_number(self.min)}")
        if self.max is not None:
            rules.append(f"<= {_number(self.max)}")
        if self.choices is not None:
            rules.append("one of " + ", ".join(flow_yaml(c) for c in self.choices))
        if self.nullable:
            rules.append("may be null")
        return "; ".join(rules)

    def schema(self) -> dict[str, Any]:
        """The JSON Schema of this parameter's values: its type's fragment with bounds, choices and null."""
        bounds: dict[str, float] = {}
        if self.type.bounded and self.min is not None:
            bounds["minimum"] = self.min
        if self.type.bounded and self.max is not None:
            bounds["maximum"] = self.max
        s = self.type.schema(bounds)
        if self.choices is not None:
            s = {**s, "enum": [_plain(c) for c in self.choices]}
        if self.nullable:
            s = {"anyOf": [s, {"type": "null"}]}
        if self.doc:
            s = {"description": self.doc, **s}
        if self.default is not REQUIRED:
            s["default"] = _plain(self.default)
        return s


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _plain(value: Any) -> Any:
    """A default or choice as JSON data (tuples as lists)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Port:
    """An input or output port with its contract.

    Attributes:
        name: the port's name (output ports are referenced as ``node.name`` or ``node.index``).
        shape: a shape pattern; names of the op's parameters may appear in it (``["*batch", "in_features"]``).
            ``None`` accepts any shape.
        dtype: a dtype rule (``"float"``, ``"int"``, ``"any"``, a dtype, or ``"same:<input port>"``).
        doc: one line for the reference docs.
        variadic: an input port that takes one or more values (``concat``); must be the last input port.
        optional: an input port a node may leave out (``expand``'s reference tensor). The inputs a node gives
            fill the required ports first; the optional ones are filled in order from what is left.
        when: the name of a ``bool`` parameter; the port exists only when that parameter is true
            (``attention``'s ``mask`` when ``masked``), and is then required unless ``optional``.
        scalar: a number may stand for this input: the op's parameter of the port's name (a nullable
            ``float``) gives it, and the port then takes no value (``{op: sub, in: x, b: 1}`` is ``x - 1``).
    """

    name: str
    shape: Any = None
    dtype: str = "float"
    doc: str = ""
    variadic: bool = False
    optional: bool = False
    when: str | None = None
    scalar: bool = False

    def __post_init__(self) -> None:
        # Parsed once here: inference reads the pattern for every node that uses the op.
        object.__setattr__(self, "_pattern", None if self.shape is None else ShapePattern.parse(self.shape))

    @property
    def pattern(self) -> ShapePattern | None:
        # Set in __post_init__ past the frozen dataclass, deliberately not a field (kept out of eq, repr, fields()).
        return self._pattern  # type: ignore[attr-defined]


class Params(Mapping[str, Any]):
    """An op's validated parameters, readable as ``p.out_features`` or ``p["out_features"]``."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_values":
            # copy/pickle probe dunders on instances made without __init__; never recurse into _values.
            raise AttributeError(name)
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(f"no parameter {name!r}") from None

    def __reduce__(self) -> tuple[Any, ...]:
        return (Params, (self._values,))

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Params({self._values!r})"

    def replace(self, **changes: Any) -> Params:
        return Params({**self._values, **changes})
