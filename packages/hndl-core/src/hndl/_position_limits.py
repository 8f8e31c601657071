"""Sizes a learned position table allows: a ``positions`` node feeding an ``embedding`` of ``num_embeddings`` N
(GPT-2's ``wpe``, BERT's position embeddings) counts 0 .. n-1, so the dim it counts must be at most N.

Without this, a sequence longer than the table ran into the embedding and failed there (an IndexError, as
``E_RUNTIME``). The checker derives the bound from the graph itself, so no one types the table size twice: a
dim that is an int is checked statically (``E_SHAPE``); a dim that is a symbol of a model input's shape becomes a
range of that input's contract (SPEC §2.4.1), which every validating call checks with the other input checks
(``E_INPUT`` naming the limit and the table) before any layer runs. The range lives on
:attr:`CheckedGraph.contracts` only: a dumped spec does not write it, and loading the spec derives it again.
A dim that is an expression (``S+T``) is left to the layer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

from ._contracts import Contract, SymbolRange
from ._dims import Dim, format_dim, free_symbols
from ._errors import Problem

if TYPE_CHECKING:
    from ._checked import CheckedGraph, CheckedNode

__all__ = ["position_limits"]


def position_limits(checked: CheckedGraph) -> tuple[list[Contract], list[Problem]]:
    """The top-level input contracts of ``checked`` (a :class:`~hndl._checked.CheckedGraph`) with each derived
    position range added, and a problem for each int dim that is already too long."""
    contracts = list(checked.contracts)
    problems: list[Problem] = []
    for table, counter, size in _tables(checked):
        rows = int(table.params["num_embeddings"])
        if isinstance(size, int):
            if size > rows:
                problems.append(
                    table.problem(
                        "E_SHAPE",
                        f"positions '{counter.qualname}' count {size} positions (0 .. {size - 1}), and the table has "
                        f"{rows} rows",
                        port="x",
                        expected=f"at most {rows} positions (num_embeddings)",
                        actual=size,
                        hint=f"give the sequence at most {rows} positions, or give {table.op} '{table.qualname}' "
                        f"num_embeddings: {size}",
                    )
                )
            continue
        symbols = free_symbols(size)
        if len(symbols) != 1 or str(format_dim(size)) != next(iter(symbols)):
            continue  # an expression of the symbols: no single input dim to bound
        _bound(contracts, next(iter(symbols)), rows, table.qualname, counter.qualname)
    return contracts, problems


def _tables(checked: CheckedGraph) -> Iterator[tuple[CheckedNode, CheckedNode, Dim]]:
    """Each ``(embedding node, positions node, the size it counts)`` in ``checked`` and its subgraphs (a subgraph
    is checked with the caller's symbols, so its dims are the model inputs')."""
    nodes = checked.nodes
    made_by = {value: node for node in nodes for value in node.outputs}
    for node in nodes:
        for body in node.body:
            yield from _tables(body)
        if node.op != "embedding" or not node.inputs:
            continue
        counter = made_by.get(node.inputs[0])
        if counter is None or counter.op != "positions":
            continue
        shape = counter.out_types[0].shape if counter.out_types else None
        if shape is not None and len(shape) == 1:
            yield node, counter, shape[0]


def _bound(contracts: list[Contract], symbol: str, rows: int, table: str, counter: str) -> None:
    """Add ``symbol <= rows`` to the first input contract whose shape names ``symbol`` (a tighter range given by
    hand is kept)."""
    for k, contract in enumerate(contracts):
        if not any(d is not None and symbol in free_symbols(d) for d in contract.shape.dims):
            continue
        given = next((r for r in contract.ranges if r.symbol == symbol), None)
        if given is not None and given.maximum is not None and given.maximum <= rows:
            return
        derived = SymbolRange(
            symbol,
            None if given is None else given.minimum,
            rows,
            why=f"embedding '{table}' has {rows} rows, for the positions '{counter}' counts",
            hint=f"pass at most {rows} positions, or give embedding '{table}' more rows (num_embeddings)",
        )
        others = tuple(r for r in contract.ranges if r.symbol != symbol)
        contracts[k] = replace(contract, ranges=(*others, derived))
        return
