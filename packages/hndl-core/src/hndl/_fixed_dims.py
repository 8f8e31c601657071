"""Input dims that a node fixes to a number: ``x: [B, T, D]`` read by ``linear`` with ``in_features: 16`` can only
run with ``D = 16``.

Static matching accepts a symbol where a number is expected (the symbol may be that number when the model runs),
and nothing checked it then: a wrong ``D`` failed inside the layer (``E_RUNTIME``), and a ``pool_at_token`` whose
``T`` was fixed by another input could run silently on the wrong length while its indices stayed in range. The
checker now derives ``D = 16`` from the graph, as :mod:`hndl._position_limits` derives a position table's bound:
a range ``D = 16`` (from 16 to 16) of the top-level input contract that names ``D``, with the node that fixed it, which
every validating call checks with the other input checks (``E_INPUT`` naming the input, the dim, expected and
actual, and the node) before any layer runs. Two nodes that fix one symbol to two numbers, or a fixed number
outside a range given by hand, are reported statically (``E_SHAPE``). The range lives on
:attr:`CheckedGraph.contracts` only: a dumped spec does not write it, and loading the spec derives it again.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from ._contracts import Contract, SymbolRange
from ._dims import format_dim, free_symbols
from ._errors import Problem
from ._infer import FixedDim, fixed_dims

if TYPE_CHECKING:
    from ._checked import CheckedGraph, CheckedNode

__all__ = ["input_fixed_dims"]


def input_fixed_dims(checked: CheckedGraph) -> tuple[list[Contract], list[Problem]]:
    """The top-level input contracts of ``checked`` with a range ``n <= S <= n`` for each symbol ``S`` a node
    fixes to ``n``, and a problem for each symbol fixed to two numbers (or outside its given range)."""
    contracts = list(checked.contracts)
    problems: list[Problem] = []
    fixed_by: dict[str, tuple[CheckedNode, FixedDim]] = {}
    for node, fixed in _fixings(checked):
        k = next(
            (
                i
                for i, c in enumerate(contracts)
                if any(d is not None and fixed.symbol in free_symbols(d) for d in c.shape.dims)
            ),
            None,
        )
        if k is None:
            continue  # a symbol of no model input (made inside the graph): nothing to check at the call
        first = fixed_by.setdefault(fixed.symbol, (node, fixed))
        if first[1].size != fixed.size:
            problems.append(_clash(node, fixed, *first))
            continue
        if first[0] is not node or first[1] is not fixed:
            continue  # already held to this size
        contract = contracts[k]
        given = next((r for r in contract.ranges if r.symbol == fixed.symbol), None)
        if given is not None and not given.admits(fixed.size):
            problems.append(_outside(node, fixed, given))
            continue
        if given is not None and given.minimum == given.maximum == fixed.size:
            continue
        derived = SymbolRange(fixed.symbol, fixed.size, fixed.size, why=_why(node, fixed), hint=_hint(node, fixed))
        others = tuple(r for r in contract.ranges if r.symbol != fixed.symbol)
        contracts[k] = replace(contract, ranges=(*others, derived))
    return contracts, problems


def _fixings(checked: CheckedGraph) -> Iterator[tuple[CheckedNode, FixedDim]]:
    """Each node of ``checked`` and its subgraphs (checked with the caller's symbols) with each input dim it fixes."""
    for node in checked.nodes:
        for body in node.body:
            yield from _fixings(body)
        if node.body:
            continue  # a subgraph's ports are its nodes', walked above
        for fixed in fixed_dims(node.opdef, node.params, node.in_types):
            yield node, fixed


def _what(node: CheckedNode, fixed: FixedDim) -> str:
    """``linear 'fc' has in_features=16``, or ``pool_at_token 'pool' reads 'ids' dim 1 as T=16``."""
    entry = format_dim(fixed.entry)
    if entry in node.params:
        return f"{node.op} '{node.qualname}' has {entry}={fixed.size}"
    if entry == str(fixed.size):
        return f"{node.op} '{node.qualname}' takes {fixed.size} at dim {fixed.axis} of {fixed.port!r}"
    return f"{node.op} '{node.qualname}' reads dim {fixed.axis} of {fixed.port!r} as {entry}={fixed.size}"


def _why(node: CheckedNode, fixed: FixedDim) -> str:
    return _what(node, fixed)


def _hint(node: CheckedNode, fixed: FixedDim) -> str:
    return (
        f"pass {fixed.symbol}={fixed.size} ({node.op} '{node.qualname}' is built for it), or write {fixed.size} "
        f"for {fixed.symbol} in the input's shape so the contract says so"
    )


def _clash(node: CheckedNode, fixed: FixedDim, other: CheckedNode, first: FixedDim) -> Problem:
    return node.problem(
        "E_SHAPE",
        f"input dim {fixed.symbol} is {first.size} for {_what(other, first)}, and {fixed.size} for "
        f"{_what(node, fixed)}: no input runs both",
        port=fixed.port,
        expected=f"{fixed.symbol}={first.size}",
        actual=f"{fixed.symbol}={fixed.size}",
        hint=f"give both nodes the same size for {fixed.symbol}",
    )


def _outside(node: CheckedNode, fixed: FixedDim, given: SymbolRange) -> Problem:
    return node.problem(
        "E_SHAPE",
        f"input dim {fixed.symbol} must be {fixed.size} for {_what(node, fixed)}, outside its contract's range {given}",
        port=fixed.port,
        expected=str(given),
        actual=f"{fixed.symbol}={fixed.size}",
        hint=f"widen the range of {fixed.symbol}, or change the node's size",
    )
