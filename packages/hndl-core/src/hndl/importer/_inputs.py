"""The traced program's inputs as the graph's, with the sizes the trace assumed.

Each user input becomes a graph input whose contract names the caller's ``Dim``s (``[B, 3, 224, 224]``; a
floating input takes the graph's dtype, any other keeps its own). A graph computes what the module does only
where the trace was right, so each symbol's range from the program's ``range_constraints`` (a ``Dim``'s min/max,
a guard a branch on a size added) goes on the first input that names it. A guard that orders two input dims
(``x.shape[0] > y.shape[0]`` decided a branch) is refused: a contract cannot keep such a relation, and a call that
breaks it would compute the other branch.
Every other guard is held against the sizes the contract takes by :mod:`._guards`, which narrows a dim made
dynamic without a name and refuses the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import Problem
from .._graph import Handle
from ..naming import dtype_name
from ._guards import RELATION, held_ranges
from ._imported import ImportedGraph
from ._symbols import NotExpressible, Symbols, symbol_ranges

__all__ = ["add_inputs", "input_specs"]


def input_specs(dynamic_shapes: Any, names: Sequence[str]) -> list[Any]:
    """Each input's ``dynamic_shapes`` entry, in input order."""
    if dynamic_shapes is None:
        return [None] * len(names)
    if isinstance(dynamic_shapes, Mapping):
        return [dynamic_shapes.get(name) for name in names]
    specs = list(dynamic_shapes)
    return (specs + [None] * len(names))[: len(names)]


def add_inputs(
    graph: ImportedGraph, program: Any, user_inputs: Sequence[Any], symbols: Symbols
) -> tuple[dict[Any, Handle], list[Problem]]:
    """Add each of ``user_inputs`` (the program's traced input nodes) to ``graph`` as an input.

    Returns:
        The handle of each input added, by traced node, in input order; and an ``E_IMPORT`` problem for each input
        that cannot be one (not a tensor, a size no input symbol expresses) and for each guard that orders two
        input dims.
    """
    import torch

    handles: dict[Any, Handle] = {}
    problems: list[Problem] = []
    ranges = symbol_ranges(getattr(program, "range_constraints", {}) or {}, symbols)
    problems.extend(held_ranges(program, user_inputs, symbols, ranges))
    for n in user_inputs:
        value = n.meta.get("val")
        if not isinstance(value, torch.Tensor):
            problems.append(Problem("E_IMPORT", f"input {n.name!r} is not a tensor ({type(value).__name__})"))
            continue
        try:
            shape = symbols.shape(value)
        except NotExpressible as exc:
            problems.append(Problem("E_IMPORT", f"input {n.name!r}: {exc}"))
            continue
        dtype = None if value.is_floating_point() else dtype_name(value.dtype)
        mine = {name: ranges.pop(name) for name in sorted(_symbols_in(shape) & ranges.keys())}
        handles[n] = graph.input(n.name, shape, dtype=dtype, ranges=mine or None)
    problems.extend(_relations(program, user_inputs, symbols))
    return handles, problems


def _relations(program: Any, user_inputs: Sequence[Any], symbols: Symbols) -> list[Problem]:
    """An ``E_IMPORT`` for each guard the trace added that orders two input dims."""
    dims: dict[tuple[str, int], str] = {}
    for n in user_inputs:
        value = n.meta.get("val")
        for axis, size in enumerate(getattr(value, "shape", ())):
            plain = symbols.plain(size) if not isinstance(size, int) else None
            if isinstance(plain, str):
                dims[(n.name, axis)] = plain
    problems = []
    for guard in getattr(program, "_guards_code", None) or ():
        match = RELATION.match(str(guard).strip())
        if match is None:
            continue
        a, b = dims.get((match[1], int(match[2]))), dims.get((match[4], int(match[5])))
        if a is None or b is None or a == b:
            continue
        problems.append(
            Problem(
                "E_IMPORT",
                f"the trace assumed {a} {match[3]} {b} (dim {match[2]} of {match[1]!r} against dim {match[5]} of "
                f"{match[4]!r}): a branch on sizes decided it, and an input contract cannot keep such a relation",
                hint="make one of the two dims static, or compute both branches and select with a mask",
            )
        )
    return problems


def _symbols_in(shape: Sequence[Any]) -> set[str]:
    """The symbols of a shape's entries (``2*B`` names ``B``)."""
    from .._dims import free_symbols, parse_dim

    found: set[str] = set()
    for entry in shape:
        if isinstance(entry, str):
            found |= set(free_symbols(parse_dim(entry)))
    return found
