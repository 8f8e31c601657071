"""Static checking: everything that can be known about a graph before any tensor exists.

:func:`check` resolves ops, validates parameters, resolves references, orders nodes topologically (finding
cycles), and infers every value's :class:`TensorType` through the whole graph, subgraphs included. It never
stops at the first problem: a node whose inputs already failed is skipped (so one mistake does not cascade),
everything else is still checked, and all problems are raised together in one :class:`HndlError`.

The result, :class:`CheckedGraph`, is what the torch builder consumes: every node with its validated and
inferred parameters and the types of its inputs and outputs. Lowering it into the steps that run it is
:mod:`._plan`'s job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._contracts import Contract, TensorType, dtype_satisfies, format_shape, is_unknown, unknown_dim
from ._dims import Poly, format_dim, free_symbols
from ._errors import Problem, ProblemList
from ._graph import Graph, Node, split_ref
from ._registry import REQUIRED, InferError, OpDef, Params, registry

__all__ = ["CheckedGraph", "CheckedNode", "check"]

GRAPH_OP = "graph"


@dataclass
class CheckedNode:
    """A node after checking. ``path`` is its key path under the GraphModule's ``nodes`` dict."""

    name: str
    qualname: str
    path: tuple[str, ...]
    opdef: OpDef
    params: Params
    inputs: list[str]  # value ids
    outputs: list[str]  # value ids
    in_types: list[TensorType]
    out_types: list[TensorType]
    location: str | None
    body: list[CheckedGraph] = field(default_factory=list)  # op 'graph': one checked subgraph per repetition

    @property
    def op(self) -> str:
        return self.opdef.name

    def problem(self, code: str, message: str, **fields: Any) -> Problem:
        """A problem about this node, named and located the standard way (for build and run-time checks)."""
        return Problem(code, message, node=self.qualname, op=self.op, location=self.location, **fields)


@dataclass
class CheckedGraph:
    """A graph after checking: inputs with their contracts and static types, nodes in execution order."""

    graph: Graph
    input_names: list[str]
    input_ids: list[str]  # value ids of the inputs (same as names at the top level)
    contracts: list[Contract]
    nodes: list[CheckedNode]
    output_ids: list[str]
    types: dict[str, TensorType]  # value id -> type

    @property
    def output_types(self) -> list[TensorType]:
        return [self.types[v] for v in self.output_ids]


def check(graph: Graph) -> CheckedGraph:
    """Check ``graph`` completely and infer every type.

    Raises:
        HndlError: listing every problem found, each with its code, node, port, expected vs actual and
            spec location.
    """
    checker = _Checker(graph)
    result = checker.check_root()
    checker.problems.raise_if_any(title=f"graph '{graph.name}'")
    assert result is not None
    return result


class _Checker:
    def __init__(self, root: Graph) -> None:
        self.root = root
        self.problems = ProblemList()
        self.library: dict[str, Graph] = dict(root.graphs)
        self.active: list[str] = []  # subgraphs being checked, to catch a graph that uses itself

    # -- entry points ------------------------------------------------------------------------------------

    def check_root(self) -> CheckedGraph | None:
        g = self.root
        types: dict[str, TensorType] = {}
        for name, spec in g.inputs.items():
            types[name] = spec.contract.static_type()
        if not g.outputs:
            self.problems.add(
                "E_REF",
                f"graph '{g.name}' declares no outputs",
                location=g.location,
                hint="call g.output(...) or add an 'outputs:' list",
            )
        return self.check_graph(g, types, prefix="", path=())

    def check_graph(
        self, g: Graph, input_types: Mapping[str, TensorType], *, prefix: str, path: tuple[str, ...]
    ) -> CheckedGraph | None:
        ids = {name: f"{prefix}{name}" for name in g.inputs}
        types: dict[str, TensorType | None] = {ids[n]: t for n, t in input_types.items()}
        order = self._order(g, prefix)
        nodes: list[CheckedNode] = []
        ports: dict[str, list[str]] = {}  # node name -> output value ids (for port resolution)
        failed = False
        for node in order:
            opdef = self._resolve_op(node, prefix)
            params = self._validate_params(node, opdef, prefix) if opdef is not None else None
            in_ids = [self._resolve_ref(g, node, ref, ids, ports, prefix) for ref in node.inputs]
            count = self._output_count(node, opdef, params)
            out_ids = [f"{prefix}{node.name}"] if count == 1 else [f"{prefix}{node.name}.{i}" for i in range(count)]
            ports[node.name] = out_ids
            ok = opdef is not None and params is not None and None not in in_ids
            in_types = [types.get(v) for v in in_ids if v is not None]
            if ok and all(t is not None for t in in_types):
                checked = self._infer(g, node, opdef, params, in_ids, in_types, out_ids, prefix, path)  # type: ignore[arg-type]
            else:
                checked = None
            if checked is None:
                failed = True
                for v in out_ids:
                    types[v] = None
                continue
            for v, t in zip(out_ids, checked.out_types):
                types[v] = t
            nodes.append(checked)
        output_ids: list[str] = []
        for i, ref in enumerate(g.outputs):
            loc = g.output_locations[i] if i < len(g.output_locations) else None
            out_id = self._resolve_ref(g, None, ref, ids, ports, prefix, location=loc or g.location)
            if out_id is None:
                failed = True
            else:
                output_ids.append(out_id)
        if failed or any(types.get(v) is None for v in output_ids):
            return None
        return CheckedGraph(
            graph=g,
            input_names=list(g.inputs),
            input_ids=[ids[n] for n in g.inputs],
            contracts=[s.contract for s in g.inputs.values()],
            nodes=nodes,
            output_ids=output_ids,
            types={k: v for k, v in types.items() if v is not None},
        )

    # -- structure ---------------------------------------------------------------------------------------

    def _order(self, g: Graph, prefix: str) -> list[Node]:
        """Nodes in a topological order that keeps insertion order where it can; reports cycles."""
        deps: dict[str, list[str]] = {}
        for node in g.nodes.values():
            deps[node.name] = [split_ref(r)[0] for r in node.inputs if split_ref(r)[0] in g.nodes]
        order: list[Node] = []
        state: dict[str, int] = {}  # 1 = on the stack, 2 = done
        for start in g.nodes:
            if state.get(start):
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
                        self.problems.add(
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

    def _resolve_op(self, node: Node, prefix: str) -> OpDef | None:
        if not isinstance(node.op, str) or not node.op:
            self.problems.add(
                "E_OP",
                f"op must be a non-empty string, got {node.op!r}",
                node=prefix + node.name,
                location=node.where("op"),
            )
            return None
        opdef = registry.find(node.op)
        if opdef is None:
            suggestion = registry.suggest(node.op)
            self.problems.add(
                "E_OP",
                f"unknown op {node.op!r}",
                node=prefix + node.name,
                location=node.where("op"),
                hint=f"did you mean {suggestion!r}?" if suggestion else "see `python -m hndl.docs` for the ops",
            )
        return opdef

    def _validate_params(self, node: Node, opdef: OpDef, prefix: str) -> Params | None:
        qual = prefix + node.name
        ok = True
        values: dict[str, Any] = {}
        known = {p.name for p in opdef.params}
        for key in node.params:
            if key not in known:
                ok = False
                import difflib

                close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
                hint = (
                    f"did you mean {close[0]!r}?"
                    if close
                    else (
                        f"{opdef.name} takes: {', '.join(sorted(known))}"
                        if known
                        else f"{opdef.name} takes no parameters"
                    )
                )
                self.problems.add(
                    "E_PARAM",
                    f"unknown parameter {key!r}",
                    node=qual,
                    op=opdef.name,
                    location=node.where(key),
                    hint=hint,
                )
        for p in opdef.params:
            if p.name in node.params:
                value, reason = p.validate(node.params[p.name])
                if reason:
                    ok = False
                    self.problems.add(
                        "E_PARAM",
                        f"parameter {p.name!r} {reason}",
                        node=qual,
                        op=opdef.name,
                        location=node.where(p.name),
                    )
                else:
                    values[p.name] = value
            elif p.required:
                ok = False
                self.problems.add(
                    "E_PARAM",
                    f"missing required parameter {p.name!r}",
                    node=qual,
                    op=opdef.name,
                    location=node.location,
                    hint=f"{p.name}: {p.doc}" if p.doc else None,
                )
            elif p.default is not REQUIRED:
                values[p.name] = p.default
        if not ok:
            return None
        if opdef.name == "module" and not self.root.allow_imports:
            self.problems.add(
                "E_PARAM",
                f"importing {values.get('target')!r} is refused: this spec was loaded without allow_imports",
                node=qual,
                op=opdef.name,
                location=node.where("target"),
                hint="pass allow_imports=True to hndl.load if you trust this file",
            )
            return None
        return Params(values)

    def _output_count(self, node: Node, opdef: OpDef | None, params: Params | None) -> int:
        if opdef is None or params is None:
            return 1
        if opdef.name == GRAPH_OP:
            sub = self.library.get(params.get("graph", ""))
            return max(len(sub.outputs), 1) if sub is not None else 1
        try:
            return opdef.output_count(params)
        except Exception:
            return 1

    def _resolve_ref(
        self,
        g: Graph,
        node: Node | None,
        ref: Any,
        ids: Mapping[str, str],
        ports: Mapping[str, list[str]],
        prefix: str,
        location: str | None = None,
    ) -> str | None:
        qual = prefix + node.name if node is not None else None
        op = node.op if node is not None else None
        where = node.where("in") if node is not None else location
        if not isinstance(ref, str):
            self.problems.add("E_REF", f"a reference must be a string, got {ref!r}", node=qual, op=op, location=where)
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
                self.problems.add(
                    "E_REF",
                    f"{name!r} has {len(outs)} outputs; refer to one of them",
                    node=qual,
                    op=op,
                    location=where,
                    hint=f"write {name}.0 ... {name}.{len(outs) - 1}",
                )
                return None
            index = self._port_index(g.nodes[name], port, len(outs))
            if index is None:
                self.problems.add(
                    "E_REF",
                    f"{name!r} has no output port {port!r}",
                    node=qual,
                    op=op,
                    location=where,
                    expected=" or ".join(self._port_names(g.nodes[name], len(outs))),
                    actual=port,
                )
                return None
            return outs[index]
        import difflib

        close = difflib.get_close_matches(name, [*ids, *g.nodes], n=1, cutoff=0.6)
        subject = "refers" if qual else "outputs refer"
        self.problems.add(
            "E_REF",
            f"{subject} to unknown input or node {ref!r}",
            node=qual,
            op=op,
            location=where,
            hint=f"did you mean {close[0]!r}?" if close else None,
        )
        return None

    def _port_names(self, node: Node, count: int) -> list[str]:
        names = [str(i) for i in range(count)]
        opdef = registry.find(node.op) if isinstance(node.op, str) else None
        if opdef is not None and opdef.count_outputs is None and len(opdef.outputs) == count and count > 1:
            names += [p.name for p in opdef.outputs]
        return names

    def _port_index(self, node: Node, port: str, count: int) -> int | None:
        if port.isdigit():
            i = int(port)
            return i if i < count else None
        opdef = registry.find(node.op) if isinstance(node.op, str) else None
        if opdef is not None and opdef.count_outputs is None and len(opdef.outputs) == count:
            for i, p in enumerate(opdef.outputs):
                if p.name == port:
                    return i
        return None

    # -- inference ---------------------------------------------------------------------------------------

    def _infer(
        self,
        g: Graph,
        node: Node,
        opdef: OpDef,
        params: Params,
        in_ids: list[str],
        in_types: list[TensorType],
        out_ids: list[str],
        prefix: str,
        path: tuple[str, ...],
    ) -> CheckedNode | None:
        qual = prefix + node.name
        node_path = (*path, f"n_{node.name}")

        def problem(code: str, message: str, **fields: Any) -> None:
            fields.setdefault("location", node.where("in"))
            self.problems.add(code, message, node=qual, op=opdef.name, **fields)

        ports = self._bind_ports(opdef, in_types)
        if ports is None:
            expected = ", ".join(p.name + ("..." if p.variadic else "") for p in opdef.inputs) or "none"
            problem(
                "E_REF",
                f"{opdef.name} takes {_count_words(opdef)}, got {len(in_types)}",
                expected=expected,
                actual=", ".join(node.inputs) or "none",
            )
            return None

        if opdef.name == GRAPH_OP:
            return self._infer_subgraph(node, opdef, params, in_ids, in_types, out_ids, qual, node_path, problem)

        env: dict[str, Any] = {}
        for p in opdef.params:
            value = params.get(p.name)
            if isinstance(value, int) and not isinstance(value, bool):
                env[p.name] = value
        if opdef.derive is not None:
            try:
                env.update(opdef.derive(params))
            except InferError as exc:
                problem(exc.code, exc.message, port=exc.port, expected=exc.expected, actual=exc.actual, hint=exc.hint)
                return None
        given = set(node.params)
        for port, t in ports:
            reason = self._dtype_reason(opdef, port, t, ports)
            if reason:
                problem("E_DTYPE", reason, port=port.name, expected=port.dtype, actual=t.dtype, hint=_dtype_hint(port))
                return None
            pattern = port.pattern
            if pattern is None or t.shape is None:
                continue
            reason = pattern.match(t.shape, env)
            if reason:
                hint = None
                inferred_given = [p.name for p in opdef.params if p.inferred and p.name in given and p.name in reason]
                if inferred_given:
                    hint = f"drop {inferred_given[0]}: hndl infers it from the input"
                problem(
                    "E_SHAPE",
                    reason,
                    port=port.name,
                    expected=str(pattern),
                    actual=format_shape(t.shape),
                    hint=hint,
                )
                return None
        values = dict(params)
        for p in opdef.params:
            if p.inferred and values.get(p.name) is None:
                bound = env.get(p.name)
                if isinstance(bound, int):
                    # A list-typed parameter (layernorm's normalized_shape) inferred from one dim is that dim.
                    values[p.name] = (bound,) if p.type in ("ints", "shape") else bound
                    continue
                if bound is None:
                    problem(
                        "E_PARAM",
                        f"parameter {p.name!r} could not be inferred from the inputs",
                        location=node.location,
                        hint=f"set {p.name} explicitly",
                    )
                else:
                    problem(
                        "E_SHAPE",
                        f"parameter {p.name!r} follows from an input dim that is not a fixed number",
                        expected="an int",
                        actual="?" if is_unknown(bound) else format_dim(bound),
                        location=node.location,
                        hint=f"give that input dim as an int in the input's shape, or set {p.name}",
                    )
                return None
        params = Params(values)
        if opdef.infer is not None:
            try:
                out_types = list(opdef.infer(params, in_types))
            except InferError as exc:
                where = node.where(exc.param) if exc.param else node.where("in")
                problem(
                    exc.code,
                    exc.message,
                    port=exc.port,
                    expected=exc.expected,
                    actual=exc.actual,
                    hint=exc.hint,
                    location=where,
                )
                return None
        else:
            out_types = []
            for port in opdef.outputs:
                dtype = self._out_dtype(port.dtype, ports)
                pattern = port.pattern
                if pattern is None:
                    out_types.append(TensorType(None, dtype))
                    continue
                for d in pattern.dims:
                    for s in free_symbols(d) if d is not None else ():
                        env.setdefault(s, unknown_dim())
                if pattern.variadic_name is not None and pattern.variadic_name not in env:
                    out_types.append(TensorType(None, dtype))
                    continue
                out_types.append(TensorType(pattern.instantiate(env), dtype))
        if len(out_types) != len(out_ids):
            problem("E_SHAPE", f"inference produced {len(out_types)} outputs, expected {len(out_ids)}")
            return None
        return CheckedNode(
            name=node.name,
            qualname=qual,
            path=node_path,
            opdef=opdef,
            params=params,
            inputs=in_ids,
            outputs=out_ids,
            in_types=in_types,
            out_types=out_types,
            location=node.location,
        )

    def _infer_subgraph(
        self,
        node: Node,
        opdef: OpDef,
        params: Params,
        in_ids: list[str],
        in_types: list[TensorType],
        out_ids: list[str],
        qual: str,
        node_path: tuple[str, ...],
        problem: Any,
    ) -> CheckedNode | None:
        name = params["graph"]
        sub = self.library.get(name)
        if sub is None:
            import difflib

            close = difflib.get_close_matches(name, list(self.library), n=1, cutoff=0.6)
            problem(
                "E_REF",
                f"unknown graph {name!r}",
                location=node.where("graph"),
                hint=f"did you mean {close[0]!r}?" if close else "define it under 'graphs:'",
            )
            return None
        if name in self.active:
            problem("E_CYCLE", "graph uses itself: " + " -> ".join([*self.active, name]), location=node.where("graph"))
            return None
        repeat = params.get("repeat", 1)
        if len(in_types) != len(sub.inputs):
            problem(
                "E_REF",
                f"graph {name!r} takes {len(sub.inputs)} inputs, got {len(in_types)}",
                expected=", ".join(sub.inputs),
                actual=", ".join(node.inputs) or "none",
            )
            return None
        if repeat > 1 and len(sub.outputs) != len(sub.inputs):
            problem(
                "E_PARAM",
                f"repeat needs graph {name!r} to have as many outputs as inputs, it has {len(sub.outputs)} and {len(sub.inputs)}",
                location=node.where("repeat"),
            )
            return None
        self.active.append(name)
        try:
            body: list[CheckedGraph] = []
            current = list(in_types)
            for r in range(repeat):
                env: dict[str, Any] = {}
                for (in_name, spec), t in zip(sub.inputs.items(), current):
                    c = spec.contract
                    verdict = dtype_satisfies(t.dtype, c.dtype)
                    if verdict is False:
                        problem(
                            "E_DTYPE",
                            f"repetition {r}: input {in_name!r} of graph {name!r} needs dtype {c.dtype}",
                            port=in_name,
                            expected=c.dtype,
                            actual=t.dtype,
                        )
                        return None
                    if t.shape is not None:
                        reason = c.shape.match(t.shape, env)
                        if reason:
                            problem(
                                "E_SHAPE",
                                f"repetition {r}: input {in_name!r} of graph {name!r}: {reason}",
                                port=in_name,
                                expected=str(c.shape),
                                actual=format_shape(t.shape),
                            )
                            return None
                types = dict(zip(sub.inputs, current))
                checked = self.check_graph(sub, types, prefix=f"{qual}.{r}.", path=(*node_path, str(r)))
                if checked is None:
                    return None
                body.append(checked)
                current = checked.output_types
        finally:
            self.active.pop()
        return CheckedNode(
            name=node.name,
            qualname=qual,
            path=node_path,
            opdef=opdef,
            params=params,
            inputs=in_ids,
            outputs=out_ids,
            in_types=in_types,
            out_types=list(current),
            location=node.location,
            body=body,
        )

    @staticmethod
    def _bind_ports(opdef: OpDef, in_types: Sequence[TensorType]) -> list[tuple[Any, TensorType]] | None:
        ports = list(opdef.inputs)
        if ports and ports[-1].variadic:
            fixed = len(ports) - 1
            if len(in_types) < len(ports):
                return None
            return [(ports[min(i, fixed)], t) for i, t in enumerate(in_types)]
        if len(in_types) != len(ports):
            return None
        return list(zip(ports, in_types))

    @staticmethod
    def _dtype_reason(opdef: OpDef, port: Any, t: TensorType, ports: Sequence[tuple[Any, TensorType]]) -> str:
        rule = port.dtype
        if rule.startswith("same:"):
            other = next((ot for p, ot in ports if p.name == rule[5:]), None)
            if other is None or other is t:
                return ""
            if dtype_satisfies(t.dtype, other.dtype) is False and dtype_satisfies(other.dtype, t.dtype) is False:
                return f"dtype must match port {rule[5:]!r} ({other.dtype}), got {t.dtype}"
            return ""
        if dtype_satisfies(t.dtype, rule) is False:
            return f"needs dtype {rule}, got {t.dtype}"
        return ""

    @staticmethod
    def _out_dtype(rule: str, ports: Sequence[tuple[Any, TensorType]]) -> str:
        if rule.startswith("same:"):
            return next((t.dtype for p, t in ports if p.name == rule[5:]), "any")
        return rule


def _count_words(opdef: OpDef) -> str:
    n = len(opdef.inputs)
    if opdef.inputs and opdef.inputs[-1].variadic:
        return f"{n} or more inputs"
    return f"{n} input" + ("" if n == 1 else "s")


def _dtype_hint(port: Any) -> str | None:
    if port.dtype in ("int", "int64"):
        return "declare the input's dtype, e.g. dtype: int64"
    return None


def is_symbolic(d: Any) -> bool:
    return isinstance(d, Poly)
