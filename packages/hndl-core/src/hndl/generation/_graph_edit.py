"""Small edits of a Graph that the cached variant is made with: fresh node and symbol names, nodes put in
order, references renamed; the readers of each value; the refusal every part of ``with_kv_cache`` raises."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from .._contracts import Contract
from .._dims import free_symbols
from .._errors import HndlError, Problem
from .._graph import Graph, Node, split_ref

__all__ = [
    "checked_by_name",
    "consumers_of",
    "contract_of",
    "fresh_name",
    "fresh_symbols",
    "has_t",
    "insert_nodes",
    "new_node",
    "refuse",
    "rename_refs",
    "subgraph_uses",
    "symbol_of",
]


def refuse(message: str, node: str | None = None, hint: str | None = None, expected: str | None = None) -> HndlError:
    """The ``E_INPUT`` of a graph whose cached variant would compute something else, naming ``node``."""
    return HndlError(
        Problem(
            "E_INPUT",
            "with_kv_cache cannot make the cached variant: " + message,
            node=node,
            expected=expected
            or "a decoder whose attention is causal self-attention (attention nodes, or sdpa nodes over the "
            "projected keys and values), every other node acting on each token alone",
            hint=hint
            or "the cached variant runs only the new tokens through the graph: a node that reads the sequence "
            "another way would compute something else",
        )
    )


def checked_by_name(nodes: Any) -> dict[str, Any]:
    return {n.name: n for n in nodes}


def consumers_of(graph: Graph) -> dict[str, list[tuple[Node, int]]]:
    found: dict[str, list[tuple[Node, int]]] = {}
    for node in graph.nodes.values():
        for index, ref in enumerate(node.inputs):
            found.setdefault(split_ref(ref)[0], []).append((node, index))
    return found


def has_t(dim: Any, t: str) -> bool:
    try:
        return t in free_symbols(dim)
    except Exception:  # an open run or an unknown dim: not provably free of T
        return not isinstance(dim, int)


def subgraph_uses(graph: Graph) -> dict[str, int]:
    uses: dict[str, int] = {}
    for g in itertools.chain([graph], graph.graphs.values()):
        for node in g.nodes.values():
            if node.op == "graph" and isinstance(node.params.get("graph"), str):
                uses[node.params["graph"]] = uses.get(node.params["graph"], 0) + 1
    return uses


def symbol_of(name: str) -> Any:
    from .._dims import symbol

    return symbol(name)


def fresh_name(graph: Graph, base: str) -> str:
    if base not in graph.nodes and base not in graph.inputs:
        return base
    for i in itertools.count(1):
        if f"{base}_{i}" not in graph.nodes and f"{base}_{i}" not in graph.inputs:
            return f"{base}_{i}"
    raise AssertionError


def symbols_in(graph: Graph) -> set[str]:
    taken = set(graph.params)
    for spec in graph.inputs.values():
        for entry in spec.contract.shape.entries:
            if isinstance(entry, str):
                taken.update(entry.replace("*", " ").replace("+", " ").replace("/", " ").split())
    return taken


def fresh_symbols(graph: Graph, *bases: str) -> list[str]:
    taken = symbols_in(graph)
    out = []
    for base in bases:
        name = base
        i = 1
        while name in taken:
            name, i = f"{base}{i}", i + 1
        taken.add(name)
        out.append(name)
    return out


def insert_nodes(graph: Graph, before: str | None, nodes: list[Node], after: bool = False) -> None:
    """Put ``nodes`` before (or after) node ``before`` (``None``: at the end), keeping the order of the rest."""
    items = list(graph.nodes.items())
    at = len(items) if before is None else [k for k, _ in items].index(before) + int(after)
    graph.nodes = dict(items[:at] + [(n.name, n) for n in nodes] + items[at:])


def rewrite_refs(graph: Graph, move: Callable[[str], str]) -> None:
    """Rewrite every reference of ``graph`` (node inputs, ``otherwise``, the outputs) as ``move`` gives it."""
    for node in graph.nodes.values():
        node.inputs = [move(r) for r in node.inputs]
        if node.otherwise is not None:
            node.otherwise = move(node.otherwise)
    graph.outputs = [move(r) for r in graph.outputs]


def rename_refs(graph: Graph, mapping: dict[str, str]) -> None:
    """Rewrite references: a whole reference found in ``mapping`` becomes its value."""
    rewrite_refs(graph, lambda r: mapping.get(r, r))


def new_node(graph: Graph, op: str, base: str, inputs: list[str], **params: Any) -> Node:
    return Node(fresh_name(graph, base), op, inputs, params)


def contract_of(shape: list[Any], dtype: str | None = None) -> Contract:
    return Contract.make(shape, dtype)
