"""How large a check may grow: the bounds that keep a hostile spec of a few lines cheap to check and describe.

Repetitions nest and shapes may be long, so a short spec can ask for billions of nodes or dims. This module
holds each bound and everything that reads one: the count before the walk (:func:`within_node_limit`, from
the nodes as written), the count the walk of :mod:`hndl._check` keeps as it goes (:class:`WalkSize`), the
problems reported when either stops, and the bound on a graph built on the meta device only to be described
(:func:`meta_build_problem`). Reading the bounds here only means a test that lowers one patches this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._checked import CheckedGraph, CheckedNode
from ._contracts import Contract
from ._errors import Problem, ProblemList
from ._graph import Graph, Node
from ._graph_params import repetition_uses
from ._param_binding import resolve
from ._param_expressions import is_reference
from ._registry import registry
from .naming import excerpt

__all__ = [
    "MAX_CHECKED_DIMS",
    "MAX_EXPANDED_NODES",
    "MAX_META_DIMS",
    "MAX_META_NODES",
    "MAX_RANK",
    "TooLarge",
    "TooManyDims",
    "WalkSize",
    "input_rank_ok",
    "meta_build_problem",
    "report_too_large",
    "report_too_many_dims",
    "within_node_limit",
]

#: The most nodes a graph may expand to: its leaf nodes with subgraph repetitions expanded, and each repetition
#: itself (a subgraph without nodes still costs a walk). ``repeat`` is at most 1,000 per node, but repetitions
#: nest, and three levels of 1,000 would be a billion nodes to check and build. Checking costs 10-20 us per
#: node and a hostile spec of a few lines reaches the limit, so it is kept where a check takes well under a
#: second; real models expand to hundreds or a few thousand nodes.
MAX_EXPANDED_NODES = 20_000
#: The most dims a shape may have, inputs and inferred values alike (numpy's limit too): a ``reshape`` to a
#: list of thousands of sizes would otherwise be carried through every node after it.
MAX_RANK = 64
#: The most dims the values a check infers may hold together (each node's outputs, every repetition): the
#: work of checking, and of everything that walks the checked graph, grows with it.
MAX_CHECKED_DIMS = 1_000_000
#: The most leaf nodes, and dims of their outputs, of a graph built on the meta device only to be described
#: (``hndl.summary`` of a graph, ``hndl summary``, ``hndl check --build``): a layer costs 50-190 us and ~30 KB
#: to build, a summary row a few us per dim, and a spec of a few lines reaches MAX_EXPANDED_NODES.
MAX_META_NODES = 5_000
MAX_META_DIMS = 50_000
#: The most distinct integer configurations of subgraphs the count before the walk evaluates.
_MAX_CONFIGURATIONS = 10_000


class TooLarge(Exception):
    """The walk met more than :data:`MAX_EXPANDED_NODES` nodes; carries the qualified name it stopped at."""


class TooManyDims(Exception):
    """The values inferred hold more than :data:`MAX_CHECKED_DIMS` dims; carries the qualified name it stopped at."""


class WalkSize:
    """What the walk has met so far: nodes (repetitions included) and the dims of the values it inferred.

    The count before the walk reads repeats as written; one given by a graph parameter (``$depth``) is only
    known as the walk binds it, so the walk keeps this count of its own and stops at the same limit.
    """

    def __init__(self) -> None:
        self.expanded = 0  # nodes the walk has met, repetitions included (bounded by MAX_EXPANDED_NODES)
        self.dims = 0  # dims of the values inferred so far (bounded by MAX_CHECKED_DIMS)

    def count_node(self, qualname: str) -> None:
        """Count one leaf node or one repetition; raises :class:`TooLarge` (``qualname``) past the limit."""
        self.expanded += 1
        if self.expanded > MAX_EXPANDED_NODES:
            raise TooLarge(qualname)

    def within_rank(self, checked: CheckedNode, node: Node, problems: ProblemList) -> bool:
        """Whether ``checked``'s outputs have at most :data:`MAX_RANK` dims (reported if not); counts them
        towards :data:`MAX_CHECKED_DIMS`, raising :class:`TooManyDims` past it."""
        total = highest = 0
        for t in checked.out_types:
            if t.shape is not None:
                rank = len(t.shape)
                total += rank
                highest = max(highest, rank)
        if highest > MAX_RANK:
            problems.add(
                "E_SHAPE",
                f"the output would have {highest:,} dims, more than the {MAX_RANK} a shape may have",
                node=checked.qualname,
                op=checked.op,
                location=node.where("in"),
            )
            return False
        self.dims += total + 1  # a value without dims still costs as much as one
        if self.dims > MAX_CHECKED_DIMS:
            raise TooManyDims(checked.qualname)
        return True


def input_rank_ok(name: str, contract: Contract, location: str | None, problems: ProblemList) -> bool:
    """Whether the shape of top-level input ``name`` has at most :data:`MAX_RANK` dims (E_SHAPE if not)."""
    if len(contract.shape.entries) <= MAX_RANK:
        return True
    problems.add(
        "E_SHAPE",
        f"the shape has {len(contract.shape.entries):,} dims, more than the {MAX_RANK} a shape may have",
        node=name,
        op="input",
        location=location,
    )
    return False


def within_node_limit(root: Graph, library: Mapping[str, Graph], problems: ProblemList) -> bool:
    """Whether ``root`` expands to at most :data:`MAX_EXPANDED_NODES` leaf nodes (reported if not), counted
    from the nodes as written before anything is checked, so a nest of repetitions costs nothing. A repeat
    given by a graph parameter (``repeat: $depth``) counts at its value under the parameters each use
    passes; a graph is counted once per distinct integer configuration, at most :data:`_MAX_CONFIGURATIONS`
    of them (past that the spec counts as too large). ``library``: the subgraphs by name."""
    sizes: dict[tuple[str, tuple[tuple[str, int], ...]], int] = {}

    def size(g: Graph, active: tuple[str, ...], bindings: Mapping[str, Any]) -> int:
        return min(sum(node_size(n, active, bindings) for n in g.nodes.values()), MAX_EXPANDED_NODES + 1)

    def bound(value: Any, bindings: Mapping[str, Any]) -> Any:
        return resolve(value, bindings)[0] if is_reference(value) else value  # read, not copied

    def node_size(node: Node, active: tuple[str, ...], bindings: Mapping[str, Any]) -> int:
        name = node.params.get("graph")
        if not isinstance(name, str) or name not in library:
            return 1  # no subgraph use (nearly every node): asked first, before the op is looked up
        opdef = registry.find(node.op) if isinstance(node.op, str) else None
        if opdef is None or not opdef.runs_subgraph:
            return 1
        repeat = bound(node.params.get("repeat", 1), bindings)
        if name in active:  # a cycle: reported by the walk
            return 1
        sub = library[name]
        times = repeat if isinstance(repeat, int) and not isinstance(repeat, bool) and repeat > 0 else 1
        passed = node.params.get("params")
        # A list longer than repeat+1 is the walk's to report; counted, its extra mappings serve no one.
        uses = passed[: times + 1] if isinstance(passed, list) and passed else [passed]
        total = 0
        for use, count in repetition_uses(uses, times):
            if count:
                # Each repetition counts as a node of its own: a subgraph with no nodes still costs a walk.
                total += count * (1 + sub_size(sub, (*active, name), use, bindings))
            if total > MAX_EXPANDED_NODES:
                break
        return min(total, MAX_EXPANDED_NODES + 1)

    def sub_size(sub: Graph, active: tuple[str, ...], use: Any, outer: Mapping[str, Any]) -> int:
        inner = dict(sub.params)
        if isinstance(use, Mapping):
            inner.update({k: bound(v, outer) for k, v in use.items() if isinstance(k, str)})
        key = (sub.name, tuple(sorted((k, v) for k, v in inner.items() if type(v) is int)))
        if key not in sizes:
            if len(sizes) >= _MAX_CONFIGURATIONS:
                return MAX_EXPANDED_NODES + 1
            sizes[key] = size(sub, active, inner)
        return sizes[key]

    bindings = dict(root.params)
    contributions = [(node_size(n, (), bindings), n) for n in root.nodes.values()]
    total = sum(c for c, _ in contributions)
    if total <= MAX_EXPANDED_NODES:
        return True
    _, largest = max(contributions, key=lambda cn: cn[0])
    report_too_large(problems, root, largest, "", "repetitions multiply when subgraphs nest; repeat fewer times")
    return False


def report_too_large(problems: ProblemList, root: Graph, node: Node | None, detail: str, hint: str) -> None:
    """E_PARAM: ``root`` expands past :data:`MAX_EXPANDED_NODES`, at ``node``'s ``repeat`` (a top-level node)."""
    problems.add(
        "E_PARAM",
        f"graph '{root.name}' expands to more than {MAX_EXPANDED_NODES:,} nodes with its subgraphs repeated{detail}",
        node=node.name if node is not None else None,
        op=node.op if node is not None else None,
        location=node.where("repeat") if node is not None else root.location,
        hint=hint,
    )


def report_too_many_dims(problems: ProblemList, root: Graph, stop: TooManyDims) -> None:
    """E_SHAPE: the values of ``root`` hold more than :data:`MAX_CHECKED_DIMS` dims; ``stop`` says where the
    walk stopped, and the top-level node it is in is the one named."""
    node = root.nodes.get(str(stop).split(".")[0])
    problems.add(
        "E_SHAPE",
        f"the values of graph '{root.name}' hold more than {MAX_CHECKED_DIMS:,} dims in all "
        f"(nodes times dims, repetitions included; stopped at {excerpt(str(stop))})",
        node=node.name if node is not None else None,
        op=node.op if node is not None else None,
        location=node.location if node is not None else root.location,
        hint="repeat fewer times, or keep fewer dims per value",
    )


def meta_build_problem(checked: CheckedGraph) -> Problem | None:
    """Why ``checked`` is too large to build on the meta device only to describe it (more than
    :data:`MAX_META_NODES` leaf nodes or :data:`MAX_META_DIMS` dims of their outputs), or ``None``."""
    nodes = dims = 0
    stack = [checked]
    while stack:
        for node in stack.pop().nodes:
            if node.body:
                stack.extend(node.body)
                continue
            nodes += 1
            dims += sum(len(t.shape) for t in node.out_types if t.shape is not None)
    name = checked.graph.name
    if nodes > MAX_META_NODES:
        what = f"{nodes:,} nodes, more than the {MAX_META_NODES:,}"
    elif dims > MAX_META_DIMS:
        what = f"outputs of {dims:,} dims in all, more than the {MAX_META_DIMS:,}"
    else:
        return None
    return Problem(
        "E_PARAM",
        f"graph '{name}' has {what} hndl builds on the meta device to describe a graph",
        location=checked.graph.location,
        hint="build the model yourself (hndl.build) and call model.summary(), or describe a smaller configuration",
    )
