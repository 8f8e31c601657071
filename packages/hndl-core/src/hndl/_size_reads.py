"""Sizes computed on every call from the dims of a layer's inputs: ``8*h`` when the input is ``[B, 16*h, ...]``.

A shape entry of ``reshape``, ``expand`` or ``new_*`` that is a dim of an input is read from that dim. One that is
not (``8*h``, ``B*h*w``) is computed from the input dims its symbols can be read back from: a dim ``c*s + k`` of
an input gives ``s = (size - k) // c``. The contract checked on the graph's inputs makes every such dim ``c*s +
k`` for a whole ``s``, so the division is exact; the plan of which dim gives which symbol is made once, when the
layer is built, and the arithmetic per call is a few integer operations (symbolic ones under torch.export).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._dims import Dim, evaluate, free_symbols

__all__ = ["SizeRead", "linear_in_one_symbol", "plan_entry", "plan_size_read", "read_size"]


@dataclass(frozen=True)
class SizeRead:
    """A size computed per call: ``expr`` with each symbol read from an input dim.

    Attributes:
        expr: the size, over symbols.
        reads: per symbol, ``(symbol, source, dim, coeff, offset)``: the symbol is ``(source.shape[dim] - offset)
            // coeff``, ``source`` being ``"x"`` or ``"like"``.
    """

    expr: Dim
    reads: tuple[tuple[str, str, int, int, int], ...]

    def value(self, x: Any, like: Any = None) -> Any:
        """The size for this call's ``x`` (and ``like``): an int, or a SymInt while torch traces."""
        env: dict[str, Any] = {}
        for name, source, dim, coeff, offset in self.reads:
            held = like if source == "like" and like is not None else x
            env[name] = (held.shape[dim] - offset) // coeff
        return evaluate(self.expr, env)

    def __str__(self) -> str:
        return str(self.expr)


def linear_in_one_symbol(d: Dim) -> tuple[str, int, int] | None:
    """``(s, c, k)`` when ``d`` is ``c*s + k`` for one symbol ``s`` and ints ``c != 0``, ``k``; else ``None``."""
    if isinstance(d, int):
        return None
    found: tuple[str, int] | None = None
    offset = 0
    for monomial, coeff in d.terms:
        if monomial == ():
            offset = coeff
        elif len(monomial) == 1 and isinstance(monomial[0], str) and found is None:
            found = (monomial[0], coeff)
        else:
            return None
    if found is None:
        return None
    return found[0], found[1], offset


def plan_size_read(expr: Dim, sources: Mapping[str, Sequence[Dim] | None]) -> SizeRead | None:
    """How to compute ``expr`` per call from the dims of ``sources`` (``{"x": shape, "like": shape}``, looked up in
    that order): each symbol from the first dim that is ``c*s + k`` in it alone, or ``None`` when a symbol is in
    no such dim."""
    reads: list[tuple[str, str, int, int, int]] = []
    for name in sorted(free_symbols(expr)):
        read = None
        for source, shape in sources.items():
            for j, d in enumerate(shape or ()):
                linear = linear_in_one_symbol(d)
                if linear is not None and linear[0] == name:
                    read = (name, source, j, linear[1], linear[2])
                    break
            if read is not None:
                break
        if read is None:
            return None
        reads.append(read)
    return SizeRead(expr, tuple(reads))


def plan_entry(entry: int | tuple[str, int] | SizeRead) -> int | tuple[str, int] | SizeRead:
    """A plan entry of ``resolve_sizes`` as a layer keeps it: an int, a ``SizeRead``, or ``(source, dim)``."""
    if isinstance(entry, (int, SizeRead)):
        return entry
    return (str(entry[0]), int(entry[1]))


def read_size(read: tuple[str, int] | SizeRead, x: Any, like: Any = None) -> Any:
    """A size a plan reads for this call: a dim of ``x`` or ``like`` (``x`` when no ``like`` is passed), or one
    computed from their dims (``Reshape``, ``Expand`` and ``NewFull`` share it)."""
    if isinstance(read, SizeRead):
        return read.value(x, like)
    return (x if read[0] == "x" or like is None else like).shape[read[1]]
