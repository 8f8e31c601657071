"""Contracts: shape patterns, dtype rules, and the static types inference computes.

A *shape pattern* is a sequence of entries: an ``int``, a symbol (``"B"``), a variadic symbol (``"*batch"``,
at most one per pattern) or an expression (``"C*H*W"``). Matching a pattern against a shape binds symbols
in an environment; a symbol already bound must agree. The same matcher serves static inference (dims may be
symbolic there, and anything not provably different is accepted) and the run-time check (dims are ints).

Checkers return ``""`` when a check passes and a short reason otherwise, so the passing path costs nothing
and the caller adds the node/port context once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._dims import MAX_DIM, Dim, DimError, FloorDiv, Poly, dim_sub, format_dim, free_symbols, parse_dim, substitute
from .naming import dtype_name, excerpt

__all__ = [
    "DTYPES",
    "DTYPE_CATEGORIES",
    "Contract",
    "ShapePattern",
    "SymbolRange",
    "TensorType",
    "Variadic",
    "dtype_satisfies",
    "is_unknown",
    "parse_dtype_rule",
    "parse_ranges",
    "unknown_dim",
]

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("uint8", "int8", "int16", "int32", "int64")
#: Concrete dtype names a contract may use (torch names without the ``torch.`` prefix).
DTYPES: tuple[str, ...] = (*FLOAT_DTYPES, *INT_DTYPES, "bool", "complex64", "complex128")
#: Dtype categories: a rule naming one accepts any of its members.
DTYPE_CATEGORIES: dict[str, tuple[str, ...]] = {"float": FLOAT_DTYPES, "int": INT_DTYPES, "any": DTYPES}

_unknown_counter = itertools.count(1)


def unknown_dim() -> Poly:
    """A fresh dimension that static inference could not determine; the run-time check skips it."""
    return Poly(((((f"?{next(_unknown_counter)}",)), 1),))


def is_unknown(d: Any) -> bool:
    """Whether ``d`` depends on a dimension inference could not determine (a symbol named ``?<n>``).

    Walks the terms without collecting ``free_symbols``' set: a build asks this of every dim of every step."""
    if not isinstance(d, Poly):
        return False
    for monomial, _ in d.terms:
        for atom in monomial:
            if isinstance(atom, str):
                if atom.startswith("?"):
                    return True
            elif is_unknown(atom.num) or is_unknown(atom.den):
                return True
    return False


def never_equal(a: Any, b: Any) -> bool:
    """Whether two symbolic dims can be equal for no value of their symbols, or only at isolated values.

    True when their difference is a nonzero constant (``H-2`` against ``H``), or a nonzero polynomial in one
    symbol without floor divisions (``2*T`` against ``T``: equal only at ``T = 0``); such dims also broadcast
    only at isolated values (``H-2`` is 1 only at ``H = 3``). A dim against an int is never claimed: pinning a
    size is how a user says they mean it, and the call checks it. Unknown dims are never claimed either.
    """
    if isinstance(a, int) or isinstance(b, int) or a == b or is_unknown(a) or is_unknown(b):
        return False
    difference = dim_sub(a, b)
    if isinstance(difference, int):
        return difference != 0
    has_division = any(isinstance(atom, FloorDiv) for mono, _ in difference.terms for atom in mono)
    return not has_division and len(free_symbols(difference)) == 1


# --- dtype rules ----------------------------------------------------------------------------------------


def parse_dtype_rule(rule: Any, *, ports: Iterable[str] = ()) -> str:
    """Validate a dtype rule and return it normalised.

    A rule is a concrete dtype (``"float32"``, also ``"torch.float32"``), a category (``"float"``, ``"int"``,
    ``"any"``) or, on an op's port, ``"same:<port>"``.

    Raises:
        ValueError: with a reason naming the accepted forms.
    """
    if not isinstance(rule, str):
        raise ValueError(f"a dtype must be a string such as 'float32', not {type(rule).__name__} {rule!r}")
    text = dtype_name(rule)
    if text in DTYPES or text in DTYPE_CATEGORIES:
        return text
    ports = tuple(ports)
    if text.startswith("same:") and text[5:] in ports:
        return text
    allowed = ", ".join([*DTYPE_CATEGORIES, *DTYPES])
    raise ValueError(f"unknown dtype {rule!r}; use one of {allowed}")


def dtype_satisfies(actual: str, rule: str) -> bool | None:
    """Whether a value of (possibly categorical) dtype ``actual`` meets ``rule``.

    Returns ``True`` (it does), ``False`` (it cannot) or ``None`` (not decidable statically, e.g. an input
    declared "any float" against a port that needs ``float32``; the run-time check decides).
    """
    if rule == "any" or actual == rule:
        return True
    rule_members = DTYPE_CATEGORIES.get(rule, (rule,))
    actual_members = DTYPE_CATEGORIES.get(actual, (actual,))
    if set(actual_members) <= set(rule_members):
        return True
    if set(actual_members) & set(rule_members):
        return None
    return False


# --- shape patterns -------------------------------------------------------------------------------------

Entry = int | str  # as written: 784, "B", "*batch", "C*H*W"


@dataclass(frozen=True)
class Variadic:
    """Inside a static shape: the dims a graph input's ``*name`` entry stands for, count unknown until a call.

    A static shape holds at most one. At run time the environment binds ``name`` to the actual dims.
    """

    name: str

    def __str__(self) -> str:
        return f"*{self.name}"


@dataclass(frozen=True)
class ShapePattern:
    """A parsed shape pattern. Build with :meth:`parse`."""

    entries: tuple[Entry, ...]  # as written, normalised (ints stay ints)
    dims: tuple[Dim | None, ...]  # parsed entry, None at the variadic position
    variadic: int | None  # index of the ``*name`` entry
    variadic_name: str | None

    @classmethod
    def parse(cls, spec: Any) -> ShapePattern:
        """Parse a pattern from a list/tuple of entries, or a string of entries separated by spaces/commas.

        Raises:
            ValueError: with a reason (bad entry, two variadics, ...).
        """
        if isinstance(spec, ShapePattern):
            return spec
        if isinstance(spec, str):
            raw: list[Any] = [t for t in spec.replace(",", " ").split() if t]
        elif isinstance(spec, (list, tuple)):
            raw = list(spec)
        else:
            raise ValueError(f"a shape must be a list such as [B, 784], not {type(spec).__name__} {excerpt(spec)}")
        entries: list[Entry] = []
        dims: list[Dim | None] = []
        variadic = None
        variadic_name = None
        for i, item in enumerate(raw):
            if isinstance(item, str) and item.startswith("*"):
                if variadic is not None:
                    raise ValueError(f"shape {_show_raw(raw)} has two variadic entries; at most one is allowed")
                name = item[1:]
                try:
                    parse_dim(name)
                except DimError:
                    raise ValueError(f"{excerpt(item)} is not a valid variadic entry; write '*name'") from None
                variadic, variadic_name = i, name
                entries.append(item)
                dims.append(None)
                continue
            try:
                d = parse_dim(item)
            except DimError as exc:
                raise ValueError(f"bad shape entry {excerpt(item)}: {exc}") from None
            if isinstance(d, int) and d < 0:
                raise ValueError(f"shape entry {excerpt(item)} is negative")
            entries.append(d if isinstance(d, int) else str(item).strip())
            dims.append(d)
        return cls(tuple(entries), tuple(dims), variadic, variadic_name)

    @property
    def min_rank(self) -> int:
        return len(self.entries) - (self.variadic is not None)

    def __str__(self) -> str:
        return "[" + ", ".join(str(e) for e in self.entries) + "]"

    def to_spec(self) -> list[Entry]:
        return list(self.entries)

    def match(self, shape: Sequence[Dim], env: MutableMapping[str, Any], *, strict: bool = False) -> str:
        """Bind the pattern's symbols against ``shape`` in ``env``.

        ``env`` maps a symbol to a :data:`Dim` and a variadic name to a tuple of dims. With ``strict`` (the
        run-time check), dims are ints and must be equal; otherwise two dims conflict only when they are
        provably different (two different ints, or a symbol already bound to a different int).

        Returns:
            ``""`` on success, else the reason. ``env`` may be partly updated on failure.
        """
        open_at = next((i for i, d in enumerate(shape) if isinstance(d, Variadic)), None)
        if open_at is not None:
            return self._match_open(shape, open_at, env)
        rank = len(shape)
        if self.variadic is None:
            if rank != len(self.entries):
                return f"expected rank {len(self.entries)} {self}, got rank {rank} {format_shape(shape)}"
            pairs = list(zip(self.dims, shape))
        else:
            if rank < self.min_rank:
                return f"expected rank >= {self.min_rank} {self}, got rank {rank} {format_shape(shape)}"
            k = self.variadic
            tail = len(self.entries) - k - 1
            var = tuple(shape[k : rank - tail])
            name = self.variadic_name
            assert name is not None
            if name in env:
                bound = env[name]
                if len(bound) != len(var) or any(_conflict(a, b, strict) for a, b in zip(bound, var)):
                    return (
                        f"*{name} was bound to {format_shape(bound)}, here it is {format_shape(var)}"
                        f" (in {format_shape(shape)})"
                    )
            else:
                env[name] = var
            pairs = list(zip(self.dims[:k], shape[:k])) + list(zip(self.dims[k + 1 :], shape[rank - tail :]))
        return self._match_pairs(pairs, rank, env, strict)

    def _match_open(self, shape: Sequence[Any], open_at: int, env: MutableMapping[str, Any]) -> str:
        """Static matching against a shape whose rank is open (it holds a graph input's ``*name``)."""
        prefix, suffix = list(shape[:open_at]), list(shape[open_at + 1 :])
        if self.variadic is not None:
            k = self.variadic
            head, tail = list(self.dims[:k]), list(self.dims[k + 1 :])
            if len(head) <= len(prefix) and len(tail) <= len(suffix):
                var = (*tuple(prefix[len(head) :]), shape[open_at], *tuple(suffix[: len(suffix) - len(tail)]))
                name = self.variadic_name
                assert name is not None
                if name not in env:
                    env[name] = var
                pairs = list(zip(head, prefix)) + list(zip(tail, suffix[len(suffix) - len(tail) :]))
                return self._match_pairs(pairs, len(shape), env, False)
        elif len(self.dims) >= len(prefix) + len(suffix):
            # The open dims might fill the gap: check the ends, leave the rest to the run-time check.
            pairs = list(zip(self.dims, prefix)) + list(zip(reversed(self.dims), reversed(suffix)))
            reason = self._match_pairs(pairs, len(shape), env, False)
            if reason:
                return reason
        else:
            return f"expected rank {len(self.entries)} {self}, got rank >= {len(shape) - 1} {format_shape(shape)}"
        # Whatever could not be aligned stays unknown rather than wrong.
        for d in self.dims:
            name = _bare_symbol(d) if d is not None else None
            if name is not None and name not in env:
                env[name] = unknown_dim()
        if self.variadic_name is not None and self.variadic_name not in env:
            env[self.variadic_name] = (Variadic(f"?{self.variadic_name}"),)
        return ""

    def _match_pairs(
        self, pairs: list[tuple[Dim | None, Any]], rank: int, env: MutableMapping[str, Any], strict: bool
    ) -> str:
        deferred: list[tuple[int, Dim, Dim]] = []
        for index, (pat, actual) in enumerate(pairs):
            assert pat is not None
            if isinstance(pat, int):
                if _conflict(pat, actual, strict):
                    return f"dim {self._position(index, rank)} expected {pat}, got {format_dim(actual)}"
                continue
            name = _bare_symbol(pat)
            if name is None:
                deferred.append((index, pat, actual))
                continue
            if name in env:
                if _conflict(env[name], actual, strict):
                    return (
                        f"dim {self._position(index, rank)} is {name}, bound to {format_dim(env[name])},"
                        f" but got {format_dim(actual)}"
                    )
            else:
                env[name] = actual
        for index, pat, actual in deferred:
            value = substitute(pat, {k: v for k, v in env.items() if not isinstance(v, tuple)})
            solved = _solve_linear(value, actual)
            if solved is not None:
                symbol, size, reason = solved
                if reason:
                    return f"dim {self._position(index, rank)} expected {pat}, got {format_dim(actual)} ({reason})"
                env[symbol] = size
                continue
            if _conflict(value, actual, strict):
                return (
                    f"dim {self._position(index, rank)} expected {pat} = {format_dim(value)}, got {format_dim(actual)}"
                )
        return ""

    def _position(self, index: int, rank: int) -> int:
        # ``index`` counts over non-variadic entries; turn it into the tensor dim it checked.
        if self.variadic is None or index < self.variadic:
            return index
        tail = len(self.entries) - self.variadic - 1
        return rank - tail + (index - self.variadic)

    def instantiate(self, env: Mapping[str, Any]) -> tuple[Dim, ...]:
        """The shape this pattern denotes under ``env``; unbound symbols stay symbolic."""
        out: list[Dim] = []
        scalars = {k: v for k, v in env.items() if not isinstance(v, tuple)}
        for i, d in enumerate(self.dims):
            if i == self.variadic:
                out.extend(env.get(self.variadic_name or "", ()))
            else:
                assert d is not None
                out.append(substitute(d, scalars))
        return tuple(out)


def _solve_linear(pattern: Dim, actual: Any) -> tuple[str, int, str] | None:
    """For a dim written ``a*S + b`` whose one symbol ``S`` is still unbound, met by an int: ``(S, size, "")``
    when ``a*size + b`` is the int for some size >= 0, else ``(S, 0, reason)``. None for anything else (the
    dim is then compared as usual). This is what lets an input say what it needs: ``[B, 3, 16*h, 16*w]``
    accepts 224 (``h = 14``) and refuses 230."""
    if not isinstance(pattern, Poly) or isinstance(actual, bool) or not isinstance(actual, int):
        return None
    scale = offset = 0
    symbol: str | None = None
    for monomial, coeff in pattern.terms:
        if not monomial:
            offset = coeff
        elif len(monomial) == 1 and isinstance(monomial[0], str) and symbol in (None, monomial[0]):
            symbol, scale = monomial[0], coeff
        else:
            return None
    if symbol is None or scale <= 0:
        return None
    size, rest = divmod(actual - offset, scale)
    if rest:
        what = f"a multiple of {scale}" if not offset else f"{offset} more than a multiple of {scale}"
        return symbol, 0, f"{pattern} needs {what}"
    if size < 0:
        return symbol, 0, f"{pattern} needs {symbol} >= 0"
    return symbol, size, ""


def _bare_symbol(d: Dim) -> str | None:
    if isinstance(d, Poly) and len(d.terms) == 1:
        mono, coeff = d.terms[0]
        if coeff == 1 and len(mono) == 1 and isinstance(mono[0], str):
            return mono[0]
    return None


def _conflict(a: Dim, b: Dim, strict: bool) -> bool:
    if a == b:
        return False
    if strict:
        return True
    # Statically, two different constants are a proven conflict, and so are two symbolic dims that agree at most at
    # isolated values (H-2 and H); anything else is checked at run time.
    return (isinstance(a, int) and isinstance(b, int)) or never_equal(a, b)


def _show_raw(raw: Sequence[Any]) -> str:
    return "[" + ", ".join(str(x) for x in raw) + "]"


def format_shape(shape: Sequence[Dim] | None) -> str:
    """``[B, 784]``; ``[?]`` style dims for unknowns; ``[...]`` for an unknown rank."""
    if shape is None:
        return "[...]"
    return "[" + ", ".join(_format_entry(d) for d in shape) + "]"


def _format_entry(d: Any) -> str:
    if isinstance(d, Variadic):
        return "..." if d.name.startswith("?") else str(d)
    if isinstance(d, tuple):
        return format_shape(d)
    return "?" if is_unknown(d) else str(format_dim(d))


# --- static types ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorType:
    """What static inference knows about a value: its shape (dims may be symbolic) and dtype (concrete or a
    category). ``shape=None`` means the rank is unknown."""

    shape: tuple[Any, ...] | None  # Dim entries, and at most one Variadic
    dtype: str = "float"

    def __str__(self) -> str:
        return f"{format_shape(self.shape)} {self.dtype}"

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)


@dataclass(frozen=True)
class SymbolRange:
    """The sizes a symbol of an input's shape may take: ``minimum <= symbol <= maximum`` (``None``: unbounded).

    A model imported with ``torch.export`` is right only for the sizes its trace assumed (a ``Dim("B", min=5)``,
    a branch on ``x.shape[0] > 4``); the input contract keeps them, and a call outside is ``E_INPUT``.
    """

    symbol: str
    minimum: int | None = None
    maximum: int | None = None
    #: For a range the checker derives from the graph (a position table's rows), what it follows from and how to
    #: meet it; neither is written back to a spec (the range is derived again when the spec is loaded).
    why: str | None = field(default=None, compare=False)
    hint: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        if self.minimum is not None and self.minimum == self.maximum:
            text = f"{self.symbol} = {self.minimum}"
        elif self.minimum is not None and self.maximum is not None:
            text = f"{self.minimum} <= {self.symbol} <= {self.maximum}"
        elif self.minimum is not None:
            text = f"{self.symbol} >= {self.minimum}"
        else:
            text = f"{self.symbol} <= {self.maximum}"
        return text if self.why is None else f"{text} ({self.why})"

    def admits(self, size: int) -> bool:
        return (self.minimum is None or size >= self.minimum) and (self.maximum is None or size <= self.maximum)

    def to_spec(self) -> dict[str, int]:
        out = {}
        if self.minimum is not None:
            out["min"] = self.minimum
        if self.maximum is not None:
            out["max"] = self.maximum
        return out


def parse_ranges(ranges: Any, pattern: ShapePattern) -> tuple[SymbolRange, ...]:
    """``{B: {min: 5, max: 512}}`` as :class:`SymbolRange` s, each a symbol of ``pattern``'s dims.

    Raises:
        ValueError: with a reason (not a mapping, an unknown symbol, a bound that is not a size, min > max).
    """
    if ranges is None:
        return ()
    if not isinstance(ranges, Mapping):
        raise ValueError(f"ranges must be a mapping such as {{B: {{min: 1, max: 64}}}}, not {excerpt(ranges)}")
    symbols = {s for d in pattern.dims if d is not None for s in free_symbols(d)}
    out = []
    for symbol, bounds in ranges.items():
        if symbol not in symbols:
            known = ", ".join(sorted(symbols)) or "none"
            raise ValueError(f"ranges names {excerpt(symbol)}, which is no symbol of the shape (its symbols: {known})")
        if not isinstance(bounds, Mapping) or not bounds or set(bounds) - {"min", "max"}:
            raise ValueError(f"the range of {symbol} must be {{min: N}}, {{max: N}} or both, not {excerpt(bounds)}")
        values = [bounds.get("min"), bounds.get("max")]
        for key, v in zip(("min", "max"), values):
            if v is not None and (type(v) is not int or not 0 <= v <= MAX_DIM):
                raise ValueError(f"the {key} of {symbol}'s range must be a size (an int from 0), not {excerpt(v)}")
        if values[0] is not None and values[1] is not None and values[0] > values[1]:
            raise ValueError(f"the range of {symbol} is empty: min {values[0]} > max {values[1]}")
        out.append(SymbolRange(str(symbol), values[0], values[1]))
    return tuple(out)


@dataclass(frozen=True)
class Contract:
    """A graph input's contract: shape pattern, dtype rule, optional device (``"cpu"``, ``"cuda"``), and the
    range of sizes each of some of its symbols may take."""

    shape: ShapePattern
    dtype: str = "float"
    device: str | None = None
    ranges: tuple[SymbolRange, ...] = ()

    @classmethod
    def make(cls, shape: Any, dtype: Any = None, device: Any = None, ranges: Any = None) -> Contract:
        """Build from user input. Raises ``ValueError`` with a reason on bad input."""
        pattern = ShapePattern.parse(shape)
        rule = "float" if dtype is None else parse_dtype_rule(dtype)
        if device is not None and not isinstance(device, str):
            raise ValueError(f"device must be a string such as 'cpu' or 'cuda', not {device!r}")
        return cls(pattern, rule, device, parse_ranges(ranges, pattern))

    def range_reason(self, env: Mapping[str, Any]) -> tuple[SymbolRange, int] | None:
        """The first range a bound symbol breaks, with its size (``None`` when every bound one is inside)."""
        for r in self.ranges:
            size = env.get(r.symbol)
            if isinstance(size, int) and not r.admits(size):
                return r, size
        return None

    def static_type(self) -> TensorType:
        """The type inference starts from: the pattern itself, a ``*name`` entry kept as an open run of dims."""
        env: dict[str, Any] = {}
        if self.shape.variadic_name is not None:
            env[self.shape.variadic_name] = (Variadic(self.shape.variadic_name),)
        return TensorType(self.shape.instantiate(env), self.dtype)

    def to_spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"shape": self.shape.to_spec()}
        if self.dtype != "float":
            out["dtype"] = self.dtype
        if self.device is not None:
            out["device"] = self.device
        if self.ranges:
            out["ranges"] = {r.symbol: r.to_spec() for r in self.ranges}
        return out
