"""What a node as written refers to: the order nodes run in, its op, its parameters and the values it reads.

The first half of checking a graph; the second, inference, is :mod:`hndl._infer`. Each function here appends
what is wrong to a :class:`ProblemList` and returns ``None`` for what it could not resolve, so the checker
carries on with the rest of the graph and reports everything at once.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ._errors import ProblemList
from ._graph import Graph, Node, split_ref
from ._param_binding import UNKNOWN_SIZE_HINT
from ._param_expressions import NUMERIC_PARAM_TYPES, expression_hint
from ._registry import REQUIRED, OpDef, Param, Params, registry
from .naming import EXCERPT_LIMIT, excerpt, suggestion

__all__ = [
    "IMPORTS_HINT",
    "MAX_NESTING",
    "check_subgraph_uses",
    "order_nodes",
    "resolve_op",
    "resolve_ref",
    "validate_params",
]

#: The hint of a node refused because its graph was loaded without ``allow_imports`` (the command, which takes
#: ``--allow-imports``, words it its own way).
IMPORTS_HINT = "pass allow_imports=True to hndl.load (or hndl.load_model) if you trust this file"

#: How many levels of subgraphs may nest below the top graph (a ``graph`` node in a graph run by a ``graph``
#: node counts two). Every walk over a model's subgraphs (checking, lowering, building, the summary, drawing)
#: goes one level deeper per level, so this bounds them all far from Python's recursion limit; real models
#: nest two or three levels.
MAX_NESTING = 32


def check_subgraph_uses(root: Graph, problems: ProblemList) -> bool:
    """Whether ``root``'s subgraphs can be walked: none uses itself, directly or through others (E_CYCLE), and
    they nest at most :data:`MAX_NESTING` levels below ``root`` (E_PARAM); each violation is reported.

    Reads only the uses written as names (``graph: block``); a use through a graph parameter (``graph: $g``) is
    known once the checker binds it, and the checker's walk bounds those the same way. Iterative, so it is
    safe before any recursive walk: each graph reachable from ``root`` is visited once.
    """
    library = root.graphs
    children: dict[int, list[tuple[Node, Graph]]] = {}

    def uses(g: Graph) -> list[tuple[Node, Graph]]:
        if id(g) not in children:
            found = []
            for node in g.nodes.values():
                name = node.params.get("graph")
                if not isinstance(name, str) or name not in library:
                    continue  # no subgraph use (nearly every node): asked before the op is looked up
                opdef = registry.find(node.op) if isinstance(node.op, str) else None
                if opdef is not None and opdef.runs_subgraph:
                    found.append((node, library[name]))
            children[id(g)] = found
        return children[id(g)]

    ok = True
    height: dict[int, int] = {}  # id of a finished graph -> levels of graphs from it down, itself included
    deepest: dict[int, tuple[Node, Graph] | None] = {}  # id -> the use its height comes through
    frames: list[list[Any]] = [[root, 0]]  # graph, index of its next use
    on_path: list[Graph] = [root]
    while frames:
        frame = frames[-1]
        g, i = frame
        found = uses(g)
        if i < len(found):
            frame[1] += 1
            node, sub = found[i]
            if any(sub is p for p in on_path):
                ok = False
                cycle = [p.name for p in on_path[[id(p) for p in on_path].index(id(sub)) :]] + [sub.name]
                problems.add(
                    "E_CYCLE",
                    f"graph {excerpt(sub.name)} uses itself: {_chain(cycle)}",
                    node=node.name,
                    op=node.op,
                    location=node.where("graph"),
                    hint="a graph cannot run itself; to stack a block several times, give its node 'repeat'",
                )
            elif id(sub) not in height:
                frames.append([sub, 0])
                on_path.append(sub)
            continue
        frames.pop()
        on_path.pop()
        below = [(height[id(sub)], node, sub) for node, sub in found if id(sub) in height]
        best = max(below, key=lambda hns: hns[0], default=None)
        height[id(g)] = 1 + (best[0] if best else 0)
        deepest[id(g)] = (best[1], best[2]) if best else None
    if height.get(id(root), 1) - 1 > MAX_NESTING:
        ok = False
        chain, g, use = [root.name], root, deepest[id(root)]
        while use is not None and len(chain) <= MAX_NESTING:
            chain.append(use[1].name)
            g, use = use[1], deepest[id(use[1])]
        assert use is not None  # the chain goes deeper than the limit
        node, sub = use
        problems.add(
            "E_PARAM",
            f"subgraphs nest more than {MAX_NESTING} levels deep: {_chain([*chain, sub.name])}",
            node=node.name,
            op=node.op,
            location=node.where("graph"),
            hint=f"graph {excerpt(g.name)} runs graph {excerpt(sub.name)} at level {MAX_NESTING + 1}; "
            "flatten some levels into one graph",
        )
    return ok


def _chain(names: list[str]) -> str:
    """``a -> b -> c`` for a chain of graph names, the middle left out of a long one, each name cut short."""
    shown = [n if len(n) <= 40 else n[:37] + "..." for n in names]
    if len(shown) > 8:
        shown = [*shown[:4], "...", *shown[-3:]]
    return " -> ".join(shown)


def order_nodes(g: Graph, prefix: str, problems: ProblemList) -> list[Node]:
    """``g``'s nodes in a topological order that keeps insertion order where it can; reports each cycle.

    A node on a cycle is left out of the order, so nothing that depends on it is inferred.
    """
    deps: dict[str, list[str]] = {}
    for node in g.nodes.values():
        # ``r.partition(".")[0]`` is split_ref's node name, without a call per reference.
        deps[node.name] = [d for d in [r.partition(".")[0] for r in node.inputs] if d in g.nodes]
    order: list[Node] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    for start in g.nodes:
        if state.get(start):
            continue
        # Between two searches nothing is on the stack: a node whose dependencies are all done (in a graph
        # written in order, every node) is what the search below would find at once, without one.
        for dep in deps[start]:
            if state.get(dep) != 2:
                break
        else:
            state[start] = 2
            order.append(g.nodes[start])
            continue
        # Iterative DFS: a 10,000-node chain must not hit the recursion limit.
        stack: list[tuple[str, int]] = [(start, 0)]
        state[start] = 1
        while stack:
            name, i = stack[-1]
            if i < len(deps[name]):
                stack[-1] = (name, i + 1)
                dep = deps[name][i]
                if state.get(dep) == 1:
                    cycle = [n for n, _ in stack[[n for n, _ in stack].index(dep) :]] + [dep]
                    problems.add(
                        "E_CYCLE",
                        "the graph has a cycle: " + " -> ".join(f"{prefix}{c}" for c in cycle),
                        node=f"{prefix}{dep}",
                        op=g.nodes[dep].op,
                        location=g.nodes[dep].where("in"),
                        hint="a node may only use inputs and nodes that do not depend on it",
                    )
                    continue
                if not state.get(dep):
                    state[dep] = 1
                    stack.append((dep, 0))
            else:
                stack.pop()
                state[name] = 2
                order.append(g.nodes[name])
    return order


def resolve_op(node: Node, qualname: str, problems: ProblemList) -> OpDef | None:
    """The registered op ``node`` names, or ``None`` after reporting E_OP (with a did-you-mean)."""
    if not isinstance(node.op, str) or not node.op:
        problems.add(
            "E_OP", f"op must be a non-empty string, got {excerpt(node.op)}", node=qualname, location=node.where("op")
        )
        return None
    opdef = registry.find(node.op)
    if opdef is None:
        problems.add(
            "E_OP",
            f"unknown op {excerpt(node.op)}",
            node=qualname,
            location=node.where("op"),
            hint=registry.unknown_op_hint(node.op) or "`hndl ops` lists the ops",
        )
    return opdef


def validate_params(
    node: Node,
    opdef: OpDef,
    qualname: str,
    problems: ProblemList,
    *,
    allow_imports: bool,
    sizes: Mapping[str, int] | None = None,
    unknown: Mapping[str, str] | None = None,
) -> Params | None:
    """``node``'s parameters checked against ``opdef``'s schema, defaults filled in.

    ``allow_imports`` is the flag of the graph the node belongs to: an op that imports code by name
    (:attr:`OpDef.imports_code`) is refused in a graph loaded without it. ``sizes`` are the symbols the graph's
    input shapes bind to numbers here (``C`` of ``[B, C, H, W]``): a value the parameter refuses as written that
    names one, as the whole value or an item of a list (``out_channels: C``, ``kernel_size: [K, K]``), takes its
    number; ``unknown`` names the symbols that are no number here, each with why (for the message).

    Returns ``None`` after reporting E_PARAM for every unknown, missing or invalid parameter.
    """
    ok = True
    values: dict[str, Any] = {}
    # Unknown keys first; a node that writes no parameter (most nodes of a large graph) has none to look up.
    known = {p.name for p in opdef.params} if node.params else set()
    for key in node.params:
        if key not in known:
            ok = False
            hint = suggestion(key, sorted(known)) or (
                f"{opdef.name} takes: {', '.join(sorted(known))}" if known else f"{opdef.name} takes no parameters"
            )
            message = f"unknown parameter {excerpt(key)}"
            if key == "checkpoint":  # activation checkpointing marks a segment: a subgraph use, not one layer
                message = f"{message}: only a graph node (a subgraph use or repeat) can be checkpointed"
                hint = (
                    "put the nodes to recompute in a graph under graphs: and use it with {op: graph, graph: NAME, "
                    "checkpoint: true}"
                )
            problems.add(
                "E_PARAM",
                message,
                node=qualname,
                op=opdef.name,
                location=node.where(key),
                hint=hint,
            )
    for p in opdef.params:
        if p.name in node.params:
            written = node.params[p.name]
            value, reason = p.validate(written)
            if reason and sizes:
                sized = _with_sizes(written, sizes)
                if sized is not written:
                    value, sized_reason = p.validate(sized)
                    reason = sized_reason and f"{sized_reason} (with the sizes of the inputs' shapes)"
            if reason:
                ok = False
                symbol = _unknown_size(written, unknown) if unknown else None
                problems.add(
                    "E_PARAM",
                    f"parameter {p.name!r} {reason}"
                    + (f"; {symbol!r} {unknown[symbol]}" if symbol is not None and unknown else ""),
                    node=qualname,
                    op=opdef.name,
                    location=node.where(p.name),
                    hint=UNKNOWN_SIZE_HINT if symbol is not None else _param_hint(p, written),
                )
            else:
                values[p.name] = value
        elif p.required:
            ok = False
            problems.add(
                "E_PARAM",
                f"missing required parameter {p.name!r}",
                node=qualname,
                op=opdef.name,
                location=node.location,
                hint=f"{p.name}: {p.doc}" if p.doc else None,
            )
        elif p.default is not REQUIRED:
            default = p.default
            values[p.name] = _own_copy(default) if isinstance(default, (dict, list, set)) else default
    if not ok:
        return None
    if opdef.imports_code and not allow_imports:
        what = excerpt(values["target"]) if "target" in values else f"code for op {opdef.name!r}"
        problems.add(
            "E_PARAM",
            f"importing {what} is refused: this spec was loaded without allow_imports",
            node=qualname,
            op=opdef.name,
            location=node.where("target"),
            hint=IMPORTS_HINT,
        )
        return None
    return Params(values)


def _with_sizes(value: Any, sizes: Mapping[str, int]) -> Any:
    """``value`` with a string that names a size (or a list item that does) replaced by the size's number;
    ``value`` itself when nothing is replaced."""
    if isinstance(value, str):
        return sizes.get(value, value)
    if isinstance(value, (list, tuple)) and any(isinstance(v, str) and v in sizes for v in value):
        items = [sizes.get(v, v) if isinstance(v, str) else v for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _unknown_size(value: Any, unknown: Mapping[str, str]) -> str | None:
    """The symbol of ``unknown`` that ``value`` names, as the whole value or a list item, if any."""
    items = value if isinstance(value, (list, tuple)) else [value]
    return next((v for v in items if isinstance(v, str) and v in unknown), None)


def _param_hint(p: Param, value: Any) -> str | None:
    """The closest allowed choice for a misspelt one, how to write an expression for a number written as one
    (docs/spec-files.md#expressions), else what the parameter is."""
    computed = expression_hint(value) if p.type.name in NUMERIC_PARAM_TYPES else None
    if computed is not None:
        return computed
    if p.choices is not None and isinstance(value, str):
        close = suggestion(value, [c for c in p.choices if isinstance(c, str)])
        if close:
            return close
    return f"{p.name}: {p.doc}" if p.doc else None


def _own_copy(default: Any) -> Any:
    """A default that is a container is copied per node: one node's value must not be another's."""
    return copy.deepcopy(default) if isinstance(default, (dict, list, set)) else default


def output_count(opdef: OpDef | None, params: Params | None, library: Mapping[str, Graph]) -> int:
    """How many outputs a node has; 1 when its op or parameters are unknown (already reported)."""
    if opdef is None or params is None:
        return 1
    if opdef.runs_subgraph:
        sub = library.get(params["graph"])
        return max(len(sub.outputs), 1) if sub is not None else 1
    try:
        return opdef.output_count(params)
    except Exception:
        return 1


def resolve_ref(
    g: Graph,
    node: Node | None,
    ref: Any,
    ids: Mapping[str, str],
    ports: Mapping[str, list[str]],
    prefix: str,
    problems: ProblemList,
    location: str | None = None,
) -> str | None:
    """The value id a reference string denotes: a graph input, a node's only output, or one of its ports.

    ``node`` is the node that reads the value (``None`` for the graph's outputs, located at ``location``);
    ``ids`` maps input names to value ids and ``ports`` maps each node already ordered to its output ids.
    Returns ``None`` after reporting E_REF (with a did-you-mean), or silently for a node on a cycle.
    """
    qual = prefix + node.name if node is not None else None
    op = node.op if node is not None else None
    where = node.where("in") if node is not None else location
    if not isinstance(ref, str):
        problems.add("E_REF", f"a reference must be a string, got {excerpt(ref)}", node=qual, op=op, location=where)
        return None
    name, port = split_ref(ref)
    if name in ids and port is None:
        return ids[name]
    if name in g.nodes:
        if name not in ports:  # part of a cycle, already reported
            return None
        outs = ports[name]
        if port is None:
            if len(outs) == 1:
                return outs[0]
            problems.add(
                "E_REF",
                f"{excerpt(name)} has {len(outs)} outputs; refer to one of them",
                node=qual,
                op=op,
                location=where,
                hint=f"write {name}.0 ... {name}.{len(outs) - 1}",
            )
            return None
        index = _port_index(g.nodes[name], port, len(outs))
        if index is None:
            problems.add(
                "E_REF",
                f"{excerpt(name)} has no output port {excerpt(port)}",
                node=qual,
                op=op,
                location=where,
                expected=" or ".join(_port_names(g.nodes[name], len(outs))),
                actual=port if len(port) <= EXCERPT_LIMIT else excerpt(port),
                hint=suggestion(port, _port_names(g.nodes[name], len(outs))),
            )
            return None
        return outs[index]
    subject = "refers" if qual else "outputs refer"
    problems.add(
        "E_REF",
        f"{subject} to unknown input or node {excerpt(ref)}",
        node=qual,
        op=op,
        location=where,
        hint=suggestion(name, [*ids, *g.nodes]) or _known_names([*ids, *g.nodes], node),
    )
    return None


def _known_names(names: list[str], reader: Node | None) -> str:
    """The names a reference could use, for a misspelling with no close match (a node cannot read itself)."""
    names = [n for n in names if reader is None or n != reader.name]
    shown = ", ".join(repr(n) for n in names[:8]) + (", ..." if len(names) > 8 else "")
    return f"the graph has {shown}" if names else "the graph has no inputs or nodes yet"


def _named_ports(node: Node, count: int) -> list[str]:
    """The op's output port names, when they name ``node``'s outputs: the op declares as many output ports as
    the node has outputs (not so for ops whose output count depends on their parameters)."""
    opdef = registry.find(node.op) if isinstance(node.op, str) else None
    if opdef is not None and opdef.count_outputs is None and len(opdef.outputs) == count:
        return [p.name for p in opdef.outputs]
    return []


def _port_names(node: Node, count: int) -> list[str]:
    """What a message offers as ``node``'s ports: the indices, and the names when there are several."""
    return [str(i) for i in range(count)] + (_named_ports(node, count) if count > 1 else [])


def _port_index(node: Node, port: str, count: int) -> int | None:
    if port.isdigit():
        i = int(port)
        return i if i < count else None
    names = _named_ports(node, count)
    return names.index(port) if port in names else None
