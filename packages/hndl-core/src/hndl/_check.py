"""Static checking: everything that can be known about a graph before any tensor exists.

:func:`check` walks the graph, subgraphs included: for each node in topological order it resolves the op,
parameters and references (:mod:`hndl._resolve`), then infers its output types (:mod:`hndl._infer`). This
module holds the walk: the top level's parameters and inputs, each graph's nodes in order, and the repetitions
of subgraph nodes. What it holds each piece to lives beside it: the bounds on its size
(:mod:`hndl._check_limits`), ``when``/``otherwise`` and ``tie`` (:mod:`hndl._check_node_keys`), a subgraph
use (:mod:`hndl._check_subgraphs`), declared outputs (:mod:`hndl._check_outputs`) and the wording of
problems between a node's inputs (:mod:`hndl._check_messages`). It never stops at the first problem: a node
whose inputs already failed is skipped (so one mistake does not cascade), everything else is still checked,
and all problems are raised together in one :class:`HndlError`.

The result, :class:`~hndl._checked.CheckedGraph`, is what the torch builder consumes: every node with its
validated and inferred parameters and the types of its inputs and outputs. Lowering it into the steps that
run it is :mod:`._plan`'s job.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from ._check_limits import (
    TooLarge,
    TooManyDims,
    WalkSize,
    input_rank_ok,
    report_too_large,
    report_too_many_dims,
    within_node_limit,
)
from ._check_messages import explain_inputs, name_wired_inputs
from ._check_node_keys import is_present, node_ties, passed_through, report_absent_reads, why_absent
from ._check_outputs import check_output, graph_env
from ._check_subgraphs import match_subgraph_inputs, subgraph_use
from ._checked import CheckedGraph, CheckedNode, DeclaredOutput, repetition_inputs
from ._contracts import Contract, TensorType
from ._dims import DimError, format_dim, free_symbols
from ._errors import ProblemList
from ._fixed_dims import input_fixed_dims
from ._graph import Graph, Node, split_ref
from ._graph_params import bind_contract, seed_env
from ._infer import BoundPorts, Report, active_ports, bind_ports, infer_node, input_count_words
from ._meaning import HndlWarning, meaning_warnings
from ._module_paths import check_module_paths, relative_path
from ._param_binding import ValueBudget, bind_node, compute_params, whole_keys
from ._position_limits import position_limits
from ._registry import OpDef, Params, registry
from ._resolve import check_subgraph_uses, order_nodes, output_count, resolve_op, resolve_ref, validate_params
from .naming import excerpt
from .ops._common import collect_requirements

__all__ = ["check"]


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
    result.warnings = meaning_warnings(result)
    for problem in result.warnings:
        warnings.warn(HndlWarning(problem), stacklevel=2)
    return result


class _Checker:
    """One check of ``root``: the walk over its graphs, and what it has found and met so far."""

    def __init__(self, root: Graph) -> None:
        self.root = root
        self.size = WalkSize()  # nodes met and dims inferred (bounded by MAX_EXPANDED_NODES, MAX_CHECKED_DIMS)
        self.problems = ProblemList()
        self.library: dict[str, Graph] = dict(root.graphs)
        self.active: list[str] = []  # subgraphs being checked, to catch a graph that uses itself
        self.budget = ValueBudget()  # what graph parameters may still expand to (MAX_BOUND_VALUES in all)
        self.producers: dict[str, CheckedNode] = {}  # value id -> the leaf node that makes it
        self.whole: dict[str, frozenset[str]] = {}  # op name -> whole_keys of its OpDef (the same for every node)

    def check_root(self) -> CheckedGraph | None:
        """The top-level graph checked: its parameters and inputs, then the walk; ``None`` once a problem is
        reported. The contracts of its inputs are those the graph's own nodes imply as well as those declared."""
        g = self.root
        # Both before any walk: the count below recurses once per level of subgraphs.
        if not check_subgraph_uses(g, self.problems) or not within_node_limit(g, self.library, self.problems):
            return None
        # The top level's inputs follow its configuration as a subgraph's do: a dim that names an integer
        # parameter is that parameter's value, statically and in the run-time check (``CheckedGraph.contracts``).
        # Parameters computed from others ("$hidden_size // num_heads") first: everything else reads the values.
        params, param_problems = compute_params(g.params, self.budget)
        for name, reason, hint in param_problems:
            self.problems.add(
                "E_PARAM",
                f"parameter {name!r} of graph {g.name!r}: {reason}",
                location=g.param_locations.get(name, g.location),
                hint=hint,
            )
        if param_problems:  # the nodes that read them would only repeat it
            return None
        contracts: list[Contract] = []
        types: dict[str, TensorType | None] = {}
        for name, spec in g.inputs.items():
            contract, reason = bind_contract(spec.contract, params)
            contracts.append(contract)
            if not input_rank_ok(name, contract, spec.location, self.problems):
                types[name] = None
                continue
            types[name] = None if reason else contract.static_type()  # None: nodes it feeds are not checked
            if reason:
                self.problems.add(
                    "E_PARAM",
                    f"shape {contract.shape}: {reason}",
                    node=name,
                    op="input",
                    location=spec.location,
                    hint="a dim that names an integer graph parameter takes its value",
                )
        if not g.outputs:
            self.problems.add(
                "E_REF",
                f"graph '{g.name}' declares no outputs",
                location=g.location,
                hint="call g.output(...) or add an 'outputs:' list",
            )
        check_module_paths(g, self.problems)
        try:
            checked = self.check_graph(g, types, prefix="", path=(), bindings=params)
        except TooLarge as stop:
            # The count before the walk reads repeats as written; one given by a graph parameter ("$depth") is
            # only known as the walk binds it, so the walk keeps its own count and stops at the same limit.
            report_too_large(
                self.problems,
                self.root,
                self.root.nodes.get(str(stop).split(".")[0]),
                f" (stopped at {excerpt(str(stop))})",
                "repetitions multiply when subgraphs nest, including repeats given by a graph parameter",
            )
            return None
        except TooManyDims as stop:
            report_too_many_dims(self.problems, self.root, stop)
            return None
        if checked is not None:
            checked.contracts = contracts
            # A position table bounds the sequence it is indexed by: a range of the inputs, checked with them.
            checked.contracts, too_long = position_limits(checked)
            self.problems.problems.extend(too_long)
            # A node that meets an input's symbol with a number (in_features 16 for D) holds the call to it.
            checked.contracts, clashes = input_fixed_dims(checked)
            self.problems.problems.extend(clashes)
        return checked

    def check_graph(
        self,
        g: Graph,
        input_types: Mapping[str, TensorType | None],
        *,
        prefix: str,
        path: tuple[str, ...],
        bindings: Mapping[str, Any],
    ) -> CheckedGraph | None:
        """One graph's nodes checked in order, then its outputs; ``None`` when anything in it failed.

        Args:
            g: the graph (the top level, or one repetition of a subgraph).
            input_types: the type of each of its inputs by name (``None``: unknown, already reported).
            prefix: what its value ids and qualified names start with (``"block.0."``).
            path: where its nodes' modules sit in the built model.
            bindings: its graph parameters' values.
        """
        ids = {name: f"{prefix}{name}" for name in g.inputs}
        types: dict[str, TensorType | None] = {ids[n]: t for n, t in input_types.items()}
        nodes: list[CheckedNode] = []
        ports: dict[str, list[str]] = {}  # node name -> output value ids (for port resolution)
        # Node name -> why it is not there: left out by its 'when' with nothing to pass through (pattern 1 of
        # SPEC 1.6: an optional parameter); a reference to it reads nothing.
        absent: dict[str, str] = {}
        failed = False
        # A symbol an input's shape binds to a number (C of [B, C, H, W] given [B, 64, H, W]) is a size known
        # at build time: nodes may use it as a parameter (SPEC 1.6.2). Declared parameters come first.
        sizes, unknown = self._input_sizes(g, ids, types, bindings)
        node_bindings = {**sizes, **bindings} if sizes else bindings
        for written in order_nodes(g, prefix, self.problems):
            qual = prefix + written.name
            found = registry.find(written.op) if isinstance(written.op, str) else None
            node = self._bind(written, found, node_bindings, qual, unknown)
            in_ids: list[str | None] = []
            missing: list[int] = []  # positions of inputs that name a node left out
            for i, ref in enumerate(written.inputs):
                # The common references answered as resolve_ref answers them, without the call: an input by name,
                # then a node with one output (``ports`` holds only nodes that are there, never one left out).
                if type(ref) is str and "." not in ref and (ref in ids or len(ports.get(ref, ())) == 1):
                    in_ids.append(ids[ref] if ref in ids else ports[ref][0])
                elif absent and isinstance(ref, str) and ref not in ids and split_ref(ref)[0] in absent:
                    missing.append(i)
                    in_ids.append(None)
                else:
                    in_ids.append(resolve_ref(g, written, ref, ids, ports, prefix, self.problems))
            if node is not None and (node.when is not True or node.otherwise is not None):
                present = is_present(self.problems, node, qual, in_ids, missing)
                # A node that reads one left out takes its other branch when it has one: its 'otherwise'.
                if present is False or (present and missing and node.otherwise is not None):
                    # A node left out passes its input through: the one 'otherwise' names, or its only one that
                    # exists; with none, it is not there either.
                    passed = passed_through(node, missing)
                    if passed is None or passed in missing:
                        absent[written.name] = why_absent(written, passed, missing if present else None)
                    else:
                        ports[written.name] = [in_ids[passed]]  # type: ignore[list-item]
                    continue
                if present is None:
                    node = None
            if node is not None and missing:
                report_absent_reads(self.problems, written, qual, missing, absent)
                node = None
            # The op was looked up for the binding already; resolve_op looks again only to report it.
            opdef = None if node is None else found if found is not None else resolve_op(written, qual, self.problems)
            if opdef is not None and not opdef.runs_subgraph:  # leaves, as the count before the walk counts them
                self.size.count_node(qual)
            params = None
            if node is not None and opdef is not None:
                params = validate_params(
                    node, opdef, qual, self.problems, allow_imports=g.allow_imports, sizes=sizes, unknown=unknown
                )
            count = output_count(opdef, params, self.library)
            out_ids = [qual] if count == 1 else [f"{qual}.{i}" for i in range(count)]
            ports[written.name] = out_ids
            checked = None
            in_types = [types.get(v) for v in in_ids if v is not None]
            if (
                node is not None
                and opdef is not None
                and params is not None
                and None not in in_ids
                # By identity: ``in`` would call TensorType's dataclass __eq__ once per input.
                and not any(t is None for t in in_types)
            ):
                try:
                    checked = self._check_node(node, opdef, params, in_ids, in_types, out_ids, prefix, path)  # type: ignore[arg-type]
                except DimError as exc:  # a dim past the bounds of _dims (too large, too many terms, too deep)
                    self.problems.add("E_SHAPE", str(exc), node=qual, op=opdef.name, location=node.where("in"))
                if checked is not None and node.tie:
                    checked.ties = node_ties(self.problems, g, node, qual, prefix)
            if checked is None:
                failed = True
                for v in out_ids:
                    types[v] = None
                continue
            if not checked.body and not self.size.within_rank(checked, node, self.problems):  # type: ignore[arg-type]
                failed = True
                for v in out_ids:
                    types[v] = None
                continue
            for v, t in zip(out_ids, checked.out_types):
                types[v] = t
                self.producers[v] = checked
            nodes.append(checked)
        output_ids: list[str] = []
        declared: list[DeclaredOutput | None] = []
        env = graph_env(g, ids, types, bindings)
        for i, ref in enumerate(g.outputs):
            loc = g.output_locations[i] if i < len(g.output_locations) else None
            if isinstance(ref, str) and ref not in ids and split_ref(ref)[0] in absent:
                label = g.output_name(i)
                subject = f"output {excerpt(label)} of graph {excerpt(g.name)}"
                subject += f" reads {excerpt(ref)}, which" if label != ref else ""
                self.problems.add(
                    "E_REF",
                    f"{subject} {absent[split_ref(ref)[0]]}",
                    location=loc or g.location,
                    hint="a graph's outputs exist in every configuration: return a value that is always there, "
                    "or a node with the same 'when' and an 'otherwise'",
                )
                failed = True
                continue
            out_id = resolve_ref(g, None, ref, ids, ports, prefix, self.problems, location=loc or g.location)
            if out_id is None:
                failed = True
                continue
            output_ids.append(out_id)
            spec = g.output_specs[i] if i < len(g.output_specs) else None
            out_type = types.get(out_id)
            if spec is None or not spec.declares or out_type is None:
                declared.append(None)
                continue
            outcome = check_output(
                self.problems, self.producers, g.output_name(i), spec, out_id, out_type, env, bindings
            )
            failed = failed or outcome is None
            declared.append(outcome)
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
            declared_outputs=declared,
        )

    def _bind(
        self, node: Node, opdef: OpDef | None, bindings: Mapping[str, Any], qual: str, unknown: Mapping[str, str]
    ) -> Node | None:
        """``node`` (of op ``opdef``, ``None`` when unknown) with its graph-parameter references replaced by their
        values; ``None`` once reported. ``unknown`` says why a symbol of the inputs' shapes that is no number cannot
        be used (a reason each)."""
        if node.when is True and not node.tie and not node.params:
            return node  # nothing that could hold a reference (bind_node's own first test; most nodes of a graph)
        if opdef is None:
            whole = whole_keys(None)
        else:
            whole = self.whole.get(opdef.name)  # type: ignore[assignment]
            if whole is None:
                whole = self.whole[opdef.name] = whole_keys(opdef)
        bound, problems = bind_node(node, bindings, self.budget, unknown, whole)
        for key, reason, hint in problems:
            self.problems.add("E_PARAM", reason, node=qual, op=node.op, location=node.where(key), hint=hint)
        return None if problems else bound

    @staticmethod
    def _input_sizes(
        g: Graph, ids: Mapping[str, str], types: Mapping[str, TensorType | None], bindings: Mapping[str, Any]
    ) -> tuple[dict[str, int], dict[str, str]]:
        """The symbols ``g``'s input shapes name: ``(sizes, unknown)``, ``sizes`` those bound to a number here
        (by this use's inputs, this repetition's, or an integer graph parameter of that name), ``unknown`` the
        others, each with why it is no number (for messages)."""
        env: dict[str, Any] = seed_env(bindings)
        sizes: dict[str, int] = {}
        unknown: dict[str, str] = {}
        for name, spec in g.inputs.items():
            t = types.get(ids[name])
            if t is None or t.shape is None:
                continue
            pattern = spec.contract.shape
            before = set(env)
            pattern.match(t.shape, env)  # a mismatch was reported where the graph is used
            for d in pattern.dims:
                for symbol in free_symbols(d) if d is not None else ():
                    if symbol in before and type(env[symbol]) is int:
                        sizes[symbol] = env[symbol]  # an integer graph parameter the shape names
            for symbol in env.keys() - before:
                value = env[symbol]
                if symbol in bindings or isinstance(value, tuple):
                    continue
                if type(value) is int:
                    sizes[symbol] = value
                else:
                    here = "" if format_dim(value) == symbol else f", here {format_dim(value)},"
                    unknown[symbol] = (
                        f"is a size of input {name!r} ({pattern}){here} only known when the model runs, not a "
                        "number the layers can be built with"
                    )
        return sizes, unknown

    def _check_node(
        self,
        node: Node,
        opdef: OpDef,
        params: Params,
        in_ids: list[str],
        in_types: list[TensorType],
        out_ids: list[str],
        prefix: str,
        path: tuple[str, ...],
    ) -> CheckedNode | None:
        """Infer one node whose op, parameters and inputs resolved; ``None`` once its problems are reported."""
        qual = prefix + node.name

        def report(code: str, message: str, *, key: str | None = "in", **fields: Any) -> None:
            fields.setdefault("location", node.where(key))
            if ports is not None and len(in_ids) > 1:
                message, fields = name_wired_inputs(message, fields, ports, node.inputs)
            if code == "E_SHAPE" and len(in_ids) > 1:
                message, cause = explain_inputs(self.producers, message, node, in_ids)
                if cause:
                    fields["hint"] = cause
            self.problems.add(code, message, node=qual, op=opdef.name, **fields)

        ports: BoundPorts | None = None
        # A subgraph without inputs (a table computed from positions and parameters) is used with none; how
        # many a subgraph takes is its own to say (_check_subgraph).
        ports = [] if opdef.runs_subgraph and not in_types else bind_ports(opdef, in_types, params)
        if ports is None:
            report(
                "E_REF",
                f"{opdef.name} takes {input_count_words(opdef, params)}, got {len(in_types)}",
                expected=", ".join(
                    p.name + ("..." if p.variadic else "?" if p.optional else "") for p in active_ports(opdef, params)
                )
                or "none",
                actual=", ".join(node.inputs) or "none",
            )
            return None
        checked = CheckedNode(
            name=node.name,
            qualname=qual,
            path=(*path, *relative_path(node, root=not path)),
            opdef=opdef,
            params=params,
            inputs=in_ids,
            outputs=out_ids,
            in_types=in_types,
            out_types=[],
            location=node.location,
        )
        if opdef.runs_subgraph:
            return self._check_subgraph(node, checked, ports, report)
        if opdef.infer is None and opdef.derive is None:
            # Only an op's own infer or derive records a requirement (ops._common.require); matching its ports'
            # patterns never does, so such an op (every element-wise one) keeps the empty list it was made with.
            inferred = infer_node(opdef, params, node.params.keys(), ports, report)
        else:
            with collect_requirements() as checked.requires:
                inferred = infer_node(opdef, params, node.params.keys(), ports, report)
        if inferred is None:
            return None
        checked.params, checked.out_types = inferred
        if len(checked.out_types) != len(out_ids):
            report("E_SHAPE", f"inference produced {len(checked.out_types)} outputs, expected {len(out_ids)}")
            return None
        return checked

    def _check_subgraph(
        self, node: Node, checked: CheckedNode, ports: BoundPorts, report: Report
    ) -> CheckedNode | None:
        """A node of an op that runs a subgraph (``graph``): the use checked (:func:`subgraph_use`), then the
        subgraph checked once per repetition, each repetition fed the previous one's outputs."""
        use = subgraph_use(node, checked, ports, report, self.library, self.active, self.budget)
        if use is None:
            return None
        sub, values = use
        name, repeat = checked.params["graph"], checked.params.get("repeat", 1)
        self.active.append(name)
        try:
            outer = [t for _, t in ports]
            previous: list[TensorType] | None = None
            for r in range(repeat):
                # A repetition counts as a node, as in the count before the walk.
                self.size.count_node(f"{checked.qualname}.{r}" if checked.indexed else checked.qualname)
                current = repetition_inputs(checked, outer, previous)
                if not match_subgraph_inputs(name, sub, current, r, report, values[r]):
                    return None
                types = dict(zip(sub.inputs, current))
                level = (str(r),) if checked.indexed else ()
                body = self.check_graph(
                    sub,
                    types,
                    prefix=".".join((checked.qualname, *level)) + ".",
                    path=(*checked.path, *level),
                    bindings=values[r],
                )
                if body is None:
                    return None
                checked.body.append(body)
                previous = body.output_types
        finally:
            self.active.pop()
        checked.out_types = list(previous or [])
        return checked
