"""torch.export's symbolic sizes as hndl dims.

torch.export writes a dynamic size as a sympy expression over its own symbols (``s77``, ``2*s77``,
``((s53 - 1)//2) + 1``). The importer names each symbol after the ``Dim`` the caller gave for it (``B``), or after
the input and axis it first appears on (``x_dim2``) for a dim made dynamic without a name (``Dim.AUTO``). A size
then reads as an int, a symbol name or an expression text in hndl's dim syntax, and evaluates to the example's
number, which is how the importer holds hndl's inferred shapes to the traced ones.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ASSUMED_MINIMUM", "NotExpressible", "Symbols", "symbol_ranges"]

#: The least size torch.export takes every dynamic dim to have when it decides a branch (its 0/1 specialisation),
#: ``Dim.AUTO``'s range starting there. Its own exported program accepts smaller sizes all the same, and every
#: imported model would refuse a batch of one if this bound were kept; a lower bound above it is the trace's own.
ASSUMED_MINIMUM = 2

#: Sizes at or beyond this are unbounded (torch's ``int_oo``, or a ``Dim``'s default max).
_NO_MAXIMUM = 2**63 - 1


class NotExpressible(ValueError):
    """A traced size that hndl's dim syntax cannot write (a ``Mod``, a ``Max``, a data-dependent size)."""


class Symbols:
    """The names and example values of the traced symbols.

    Args:
        names: torch's symbol -> hndl symbol name.
        hints: torch's symbol -> its value in the example inputs.
        automatic: the names made up for dims made dynamic without a name (``Dim.AUTO``: ``x_dim2``), whose
            range is whatever the trace needs, against the ``Dim``s the caller named, whose range is the caller's.
    """

    def __init__(
        self,
        names: Mapping[Any, str],
        hints: Mapping[Any, int],
        automatic: frozenset[str] = frozenset(),
        declared_min: Mapping[str, int] | None = None,
    ) -> None:
        self.names = dict(names)
        self.hints = dict(hints)
        self.automatic = automatic
        #: the ``min`` the caller gave a named ``Dim`` (torch's default is 0), by hndl name
        self.declared_min = dict(declared_min or {})

    def examples(self) -> dict[str, int]:
        """Each named symbol's value in the example inputs, by hndl name."""
        return {name: self.hints[sym] for sym, name in self.names.items() if sym in self.hints}

    @staticmethod
    def expr(size: Any) -> Any:
        """A size as a sympy expression or an int (``SymInt`` -> its expression; a traced size, the ``torch.fx``
        node of a ``sym_size`` or of arithmetic on sizes, -> its value's)."""
        if hasattr(size, "meta") and hasattr(size, "op"):
            size = size.meta.get("val")
        node = getattr(size, "node", None)
        if node is not None:
            return node.expr
        return int(size)

    def value(self, size: Any) -> int:
        """The size's value in the example inputs."""
        e = self.expr(size)
        if isinstance(e, int):
            return e
        try:
            return int(e.xreplace({s: self.hints[s] for s in e.free_symbols}))
        except (KeyError, TypeError) as exc:
            raise NotExpressible(f"size {e} has no example value") from exc

    def entry(self, size: Any) -> int | str:
        """The size as a shape entry: an int, a symbol name, or an expression (``2*B``, ``(H-1)//2+1``)."""
        e = self.expr(size)
        if isinstance(e, int):
            return e
        return self._text(e, top=True)

    def plain(self, size: Any) -> int | str | None:
        """The size as an int or a bare symbol name, or ``None`` when it is an expression."""
        e = self.expr(size)
        if isinstance(e, int):
            return e
        if e.is_Integer:
            return int(e)
        if e.is_Symbol:
            return self._name(e)
        return None

    def shape(self, tensor: Any) -> list[int | str]:
        return [self.entry(s) for s in tensor.shape]

    def values(self, tensor: Any) -> list[int]:
        return [self.value(s) for s in tensor.shape]

    def same(self, a: Any, b: Any) -> bool:
        """Whether two sizes are the same expression (not merely equal in the example)."""
        ea, eb = self.expr(a), self.expr(b)
        if isinstance(ea, int) or isinstance(eb, int):
            try:
                return bool(int(ea) == int(eb))
            except TypeError:
                return False
        return bool(ea == eb)

    def _name(self, sym: Any) -> str:
        try:
            return self.names[sym]
        except KeyError:
            raise NotExpressible(f"symbol {sym} is not a dim of an input (a size computed from data)") from None

    def _text(self, e: Any, top: bool = False) -> str:
        from torch.utils._sympy.functions import FloorDiv

        if e.is_Integer:
            return str(int(e))
        if e.is_Symbol:
            return self._name(e)
        if e.is_Add:
            terms = sorted(e.args, key=lambda t: (t.is_Number, str(t)))
            text = ""
            for t in terms:
                part = self._text(t)
                if part.startswith("-"):
                    text += part
                else:
                    text += ("+" if text else "") + part
            return text if top else f"({text})"
        if e.is_Mul:
            factors = sorted(e.args, key=lambda t: (not t.is_Number, str(t)))
            if factors[0] == -1:
                return "-" + "*".join(self._text(f) for f in factors[1:])
            return "*".join(self._text(f) for f in factors)
        if isinstance(e, FloorDiv):
            base, divisor = e.args
            text = f"{self._text(base)}//{self._text(divisor)}"
            return text if top else f"({text})"
        if type(e).__name__ in ("Mod", "PythonMod") and len(e.args) == 2 and e.args[1].is_positive:
            # sizes are not negative, so p mod q is p - q*(p//q) (Swin pads a map by (window - H % window) % window,
            # which hndl's dims simplify to 0 where H is a multiple of the window)
            base, divisor = (self._text(a) for a in e.args)
            text = f"{base}-{divisor}*({base}//{divisor})"
            return text if top else f"({text})"
        raise NotExpressible(f"size {e} cannot be written as an hndl dim (only +, *, // and mod are)")

    def dim(self, size: Any) -> Any:
        """The size as an hndl dim, simplified by hndl's rules (``2*H - 2*(H//1)`` is 0): an int or a ``Poly``."""
        from .._dims import DimError, parse_dim

        try:
            return parse_dim(self.entry(size))
        except DimError as exc:
            raise NotExpressible(f"size {self.entry(size)} cannot be read as an hndl dim: {exc}") from None


def name_symbols(placeholders: Sequence[tuple[str, Any]], specs: Sequence[Any], example: Sequence[Any]) -> Symbols:
    """The hndl names of the symbols in the inputs' traced shapes.

    Args:
        placeholders: ``(input name, traced value)`` of each user input, in order.
        specs: each input's ``dynamic_shapes`` entry as torch.export takes it (``None``, ``{axis: Dim}``, or a
            list/tuple per axis), in the same order.
        example: the example tensors, for the symbols' values.
    """
    names: dict[Any, str] = {}
    hints: dict[Any, int] = {}
    taken: set[str] = set()
    automatic: set[str] = set()
    declared: dict[str, int] = {}
    for (input_name, value), spec, tensor in zip(placeholders, specs, example, strict=True):
        shape = getattr(value, "shape", None)
        if shape is None:
            continue
        axes = _axes(spec)
        for axis, size in enumerate(shape):
            e = Symbols.expr(size)
            if isinstance(e, int):
                continue
            dim = axes.get(axis)
            if not e.is_Symbol:
                # a derived Dim (``32*Dim("h")``, as torch.export writes a size that must be a multiple): its one
                # symbol is the root Dim's, named after it, its example value the trace's own
                root = getattr(dim, "root", None)
                if root is None or len(e.free_symbols) != 1:
                    continue
                e = next(iter(e.free_symbols))
                dim = root
                value = _traced_value(size, e)
                if value is None:
                    continue
                hints.setdefault(e, value)
            else:
                hints.setdefault(e, int(tensor.shape[axis]))
            if e in names:
                continue
            given = _dim_name(dim)
            name = given or f"{input_name}_dim{axis}"
            while name in taken:  # two different torch symbols must not share a name
                name += "_"
            names[e] = name
            taken.add(name)
            if given is None:
                automatic.add(name)
            else:
                least = getattr(dim, "min", None)
                if isinstance(least, int):
                    declared[name] = least
    return Symbols(names, hints, frozenset(automatic), declared)


def _traced_value(size: Any, sym: Any) -> int | None:
    """The example value torch's shape environment holds for ``sym`` (a root of a derived size), or None."""
    env = getattr(getattr(size, "node", None), "shape_env", None)
    # torch 2.14 renamed var_to_val (the old name warns)
    table = getattr(env, "backed_var_to_val", None)
    if table is None:
        table = getattr(env, "var_to_val", {})
    value = table.get(sym)
    try:
        return None if value is None else int(value)
    except TypeError:
        return None


def _axes(spec: Any) -> dict[int, Any]:
    if isinstance(spec, Mapping):
        return {int(k): v for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return dict(enumerate(spec))
    return {}


def _dim_name(dim: Any) -> str | None:
    """The name of a ``torch.export.Dim`` (``Dim("B")`` -> ``"B"``), or None for ``Dim.AUTO`` and the like."""
    name = getattr(dim, "__name__", None)
    if isinstance(name, str) and name.isidentifier() and not name.startswith("_"):
        return name
    return None


def symbol_ranges(range_constraints: Mapping[Any, Any], symbols: Symbols) -> dict[str, dict[str, int]]:
    """The range each input symbol's trace assumed, hndl name -> ``{"min": .., "max": ..}`` (the bounds that
    narrow it only), from an exported program's ``range_constraints``: a ``Dim("B", min=5)``, or a guard the trace
    added (``if x.shape[0] > 4`` under ``Dim.AUTO`` makes ``B >= 5``; ``x[:, :3]`` makes ``C >= 3``).

    A lower bound up to :data:`ASSUMED_MINIMUM` and an infinite upper bound do not narrow.
    """
    out: dict[str, dict[str, int]] = {}
    for sym, bounds in range_constraints.items():
        name = symbols.names.get(sym)
        if name is None:
            continue  # a derived expression (2*s0) or a symbol made from data: ranged through its symbols
        entry = {}
        low = _integer(getattr(bounds, "lower", None))
        high = _integer(getattr(bounds, "upper", None))
        if low is not None and (low > ASSUMED_MINIMUM or (low > 1 and symbols.declared_min.get(name, 0) > 1)):
            entry["min"] = low  # torch takes every dynamic dim to be 2 or more; a min the caller gave, it keeps
        if high is not None and 0 <= high < _NO_MAXIMUM:
            entry["max"] = high
        if entry:
            out[name] = entry
    return out


def _integer(value: Any) -> int | None:
    """A sympy bound as an int; ``None`` for an infinity (``int_oo``) or anything else."""
    if isinstance(value, int):
        return value
    if getattr(value, "is_Integer", False) is True:
        return int(value)
    return None
