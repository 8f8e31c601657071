"""Parameter types: what values an op parameter takes, said once for the checker, the docs and the JSON Schema.

Each type is one :class:`ParamType` object. It normalises a value (``int_or_pair`` turns ``3`` into
``(3, 3)``) or gives the reason it cannot, names itself for the reference docs, and emits the JSON Schema
fragment that accepts exactly the values it accepts. :class:`~hndl.Param` adds what belongs to one parameter
(bounds, choices, null) on top; ``Param("factor", "float")`` names a type by its :attr:`ParamType.name`.

One difference is left to the schema language: JSON Schema counts ``2.0`` as an integer, while hndl reads
numbers as written, so ``2.0`` is refused where an integer is expected. Validators that distinguish the two
(the tests use one) agree with hndl exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._contracts import parse_dtype_rule
from .naming import excerpt

__all__ = ["PARAM_TYPES", "ParamType", "param_type"]


def describe_value(value: Any) -> str:
    """How a message names a value of the wrong type: ``string 'ten'``, ``list [3, 3]``, ``boolean True``."""
    kind = {str: "string", bool: "boolean", list: "list", tuple: "list", dict: "mapping", float: "number"}.get(
        type(value), type(value).__name__
    )
    return f"{kind} {excerpt(value)}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_list(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_is_int(v) for v in value)


class ParamType:
    """A kind of parameter value.

    Attributes:
        name: how :class:`~hndl.Param` names it (``"int"``, ``"int_or_pair"``).
        description: the value in words, for the docs and for messages (``"list of integers"``).
        bounded: whether a parameter's ``min``/``max`` apply (to the number, or to each integer of a list).
    """

    name: str = ""
    description: str = ""
    bounded: bool = False

    def normalize(self, value: Any) -> tuple[Any, str]:
        """``(normal form, "")`` for a value of this type, or ``(None, reason)``. ``value`` is never None."""
        raise NotImplementedError

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        """The JSON Schema fragment for this type; ``bounds`` holds ``minimum``/``maximum`` for bounded types."""
        raise NotImplementedError

    def bounded_items(self, value: Any) -> tuple[Any, ...]:
        """The numbers of a normalised value that ``min``/``max`` apply to."""
        return value if isinstance(value, tuple) else (value,)

    def from_dim(self, dim: int) -> Any:
        """The value of an inferred parameter whose pattern bound it to one dim (a list type holds the dim)."""
        return dim

    def __repr__(self) -> str:
        return f"ParamType({self.name!r})"


class _Integer(ParamType):
    name, description, bounded = "int", "integer", True

    def normalize(self, value: Any) -> tuple[Any, str]:
        if _is_int(value):
            return value, ""
        return None, f"must be {self.description}, got {describe_value(value)}"

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "integer", **bounds}


class _Number(ParamType):
    name, description, bounded = "float", "number", True

    def normalize(self, value: Any) -> tuple[Any, str]:
        if _is_int(value) or isinstance(value, float):
            return value, ""
        return None, f"must be {self.description}, got {describe_value(value)}"

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "number", **bounds}


class _Boolean(ParamType):
    name, description = "bool", "true or false"

    def normalize(self, value: Any) -> tuple[Any, str]:
        return (value, "") if isinstance(value, bool) else (None, f"must be true or false, got {excerpt(value)}")

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "boolean"}


class _String(ParamType):
    name, description = "str", "string"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if isinstance(value, str):
            return value, ""
        return None, f"must be a string, got {describe_value(value)}"

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "string"}


class _GraphName(_String):
    # Any string: whether a graph of that name exists is the checker's question (E_REF, with a did-you-mean).
    name, description = "graph", "name of a graph in the spec's graphs section"


class _Dtype(_String):
    name, description = "dtype", "dtype name such as float32"

    def normalize(self, value: Any) -> tuple[Any, str]:
        value, reason = super().normalize(value)
        if reason:
            return None, reason
        try:
            return parse_dtype_rule(value), ""
        except ValueError as exc:
            return None, str(exc)

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"$ref": "#/$defs/dtype"}


class _IntegerList(ParamType):
    name, description, bounded = "ints", "list of integers", True

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not _int_list(value):
            return None, f"must be a list of integers, got {excerpt(value)}"
        return tuple(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "array", "items": {"type": "integer", **bounds}}

    def from_dim(self, dim: int) -> Any:
        return (dim,)


class _NumberList(ParamType):
    name, description, bounded = "numbers", "list of numbers", False

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, (list, tuple)) or not all(_is_int(v) or isinstance(v, float) for v in value):
            return None, f"must be a list of numbers, got {excerpt(value)}"
        return tuple(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "array", "items": {"type": "number"}}


class _IntegerOrPair(ParamType):
    name, description, bounded = "int_or_pair", "integer, or a list of two integers", True

    def normalize(self, value: Any) -> tuple[Any, str]:
        if _is_int(value):
            value = (value, value)
        if not _int_list(value) or len(value) != 2:
            return None, f"must be an integer or a list of two integers, got {excerpt(value)}"
        return tuple(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        item = {"type": "integer", **bounds}
        return {"anyOf": [item, {"type": "array", "items": item, "minItems": 2, "maxItems": 2}]}


class _Shape(_IntegerList):
    # A target shape (reshape, view): sizes, one of which may be -1 for "the rest". min/max do not apply.
    name, description, bounded = "shape", "list of integers (-1 once, for 'the rest')", False

    def normalize(self, value: Any) -> tuple[Any, str]:
        value, reason = super().normalize(value)
        if reason:
            return None, reason
        if sum(v == -1 for v in value) > 1:
            return None, f"may contain -1 at most once, got {excerpt(value)}"
        if any(v < -1 for v in value):
            return None, f"entries must be sizes (0 or more) or -1, got {excerpt(value)}"
        return value, ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {
            "type": "array",
            "items": {"type": "integer", "minimum": -1},
            "not": {"contains": {"const": -1}, "minContains": 2},
        }


class _KeywordMapping(ParamType):
    name, description = "mapping", "mapping of keyword arguments"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            return None, f"must be a mapping with string keys, got {excerpt(value)}"
        return dict(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        # JSON keys are always strings; a YAML key need not be (``{1: 2}``), and a keyword argument must be.
        return {"type": "object", "propertyNames": {"type": "string"}}


#: Every parameter type by name, in the order the docs list them.
PARAM_TYPES: dict[str, ParamType] = {
    t.name: t
    for t in (
        _Integer(),
        _Number(),
        _Boolean(),
        _String(),
        _IntegerList(),
        _NumberList(),
        _IntegerOrPair(),
        _Shape(),
        _Dtype(),
        _KeywordMapping(),
        _GraphName(),
    )
}


def param_type(kind: str | ParamType) -> ParamType:
    """The :class:`ParamType` for a name in :data:`PARAM_TYPES` (or the object itself).

    Raises:
        ValueError: for a name that is not a parameter type.
    """
    if isinstance(kind, ParamType):
        return kind
    found = PARAM_TYPES.get(kind) if isinstance(kind, str) else None
    if found is None:
        raise ValueError(f"unknown parameter type {kind!r}; use one of {', '.join(PARAM_TYPES)}")
    return found
