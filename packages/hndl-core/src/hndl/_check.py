"""Static checking: everything that can be known about a graph before any tensor exists.

:func:`check` walks the graph, subgraphs included: for each node in topological order it resolves the op,
parameters and references (:mod:`hndl._resolve`), then infers its output types (:mod:`hndl._infer`); this
module holds the walk and the checking of subgraph nodes. It never stops at the first problem: a node whose
inputs already failed is skipped (so one mistake does not cascade), everything else is still checked, and all
problems are raised together in one :class:`HndlError`.

The result, :class:`CheckedGraph`, is what the torch builder consumes: every node with its validated and
inferred parameters and the types of its inputs and outputs. Lowering it into the steps that run it is
:mod:`._plan`'s job.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from ._checked import CheckedGraph as CheckedGraph
from ._checked import CheckedNode as CheckedNode
from ._checked import DeclaredOutput as DeclaredOutput
from ._checked import repetition_inputs as repetition_inputs
from ._contracts import Contract, ShapePattern, TensorType, dtype_satisfies, format_shape
from ._dims import DimError, format_dim, free_symbols
from ._errors import Problem, ProblemList
from ._fixed_dims import input_fixed_dims
from ._graph import Graph, Node, OutputSpec, split_ref
from ._graph_params import (
    ValueBudget,
    bind_contract,
    bind_node,
    compute_params,
    is_reference,
    repetition_params,
    repetition_uses,
    resolve,
    seed_env,
    whole_keys,
)
from ._hints import fix_candidates, node_hint, shape_fix
from ._infer import BoundPorts, Report, active_ports, bind_ports, infer_node, input_count_words
from ._meaning import HndlWarning, meaning_warnings
from ._module_paths import check_module_paths, relative_path
from ._position_limits import position_limits
from ._registry import OpDef, Params, registry
from ._resolve import (
    MAX_NESTING,
    check_subgraph_uses,
    order_nodes,
    output_count,
    resolve_op,
    resolve_ref,
    validate_params,
)
from .naming import excerpt, suggestion
from .ops._common import collect_requirements

__all__ = [
    "MAX_CHECKED_DIMS",
    "MAX_EXPANDED_NODES",
    "MAX_META_DIMS",
    "MAX_META_NODES",
    "MAX_RANK",
    "CheckedGraph",
    "CheckedNode",
    "DeclaredOutput",
    "check",
    "meta_build_problem",
    "repetition_inputs",
]


#: The most nodes a graph may expand to: its leaf nodes with subgraph repetitions expanded, and each repetition
#: itself (a subgraph without nodes still costs a walk). ``repeat`` is at most 1,000 per node, but repetitions
#: nest, and three levels of 1,000 would be a billion nodes to check and build. Checking costs about 40 us per
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


class _TooLarge(Exception):
    """The walk met more than :data:`MAX_EXPANDED_NODES` nodes; carries the qualified name it stopped at."""


class _TooManyDims(Exception):
    """The values inferred hold more than :data:`MAX_CHECKED_DIMS` dims; carries the qualified name it stopped at."""


class _Checker:
    def __init__(self, root: Graph) -> None:
        self.root = root
        self.expanded = 0  # nodes the walk has met, repetitions included (bounded by MAX_EXPANDED_NODES)
        self.problems = ProblemList()
        self.library: dict[str, Graph] = dict(root.graphs)
        self.active: list[str] = []  # subgraphs being checked, to catch a graph that uses itself
        self.budget = ValueBudget()  # what graph parameters may still expand to (MAX_BOUND_VALUES in all)
        self.dims = 0  # dims of the values inferred so far (bounded by MAX_CHECKED_DIMS)
        self.producers: dict[str, CheckedNode] = {}  # value id -> the leaf node that makes it

    def check_root(self) -> CheckedGraph | None:
        g = self.root
        # Both before any walk: the count below recurses once per level of subgraphs.
        if not check_subgraph_uses(g, self.problems) or not self._within_node_limit():
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
            if len(contract.shape.entries) > MAX_RANK:
                types[name] = None
                self.problems.add(
                    "E_SHAPE",
                    f"the shape has {len(contract.shape.entries):,} dims, more than the {MAX_RANK} a shape may have",
                    node=name,
                    op="input",
                    location=spec.location,
                )
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
        except _TooLarge as stop:
            # The count before the walk reads repeats as written; one given by a graph parameter ("$depth") is
            # only known as the walk binds it, so the walk keeps its own count and stops at the same limit.
            self._report_too_large(
                self.root.nodes.get(str(stop).split(".")[0]),
                f" (stopped at {excerpt(str(stop))})",
                "repetitions multiply when subgraphs nest, including repeats given by a graph parameter",
            )
            return None
        except _TooManyDims as stop:
            node = self.root.nodes.get(str(stop).split(".")[0])
            self.problems.add(
                "E_SHAPE",
                f"the values of graph '{self.root.name}' hold more than {MAX_CHECKED_DIMS:,} dims in all "
                f"(nodes times dims, repetitions included; stopped at {excerpt(str(stop))})",
                node=node.name if node is not None else None,
                op=node.op if node is not None else None,
                location=node.location if node is not None else self.root.location,
                hint="repeat fewer times, or keep fewer dims per value",
            )
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
            node = self._bind(written, node_bindings, qual, unknown)
            in_ids: list[str | None] = []
            missing: list[int] = []  # positions of inputs that name a node left out
            for i, ref in enumerate(written.inputs):
                if absent and isinstance(ref, str) and ref not in ids and split_ref(ref)[0] in absent:
                    missing.append(i)
                    in_ids.append(None)
                else:
                    in_ids.append(resolve_ref(g, written, ref, ids, ports, prefix, self.problems))
            if node is not None and (node.when is not True or node.otherwise is not None):
                present = self._present(node, qual, in_ids, missing)
                # A node that reads one left out takes its other branch when it has one: its 'otherwise'.
                if present is False or (present and missing and node.otherwise is not None):
                    # A node left out passes its input through: the one 'otherwise' names, or its only one that
                    # exists; with none, it is not there either.
                    passed = self._passed_through(node, missing)
                    if passed is None or passed in missing:
                        absent[written.name] = self._why_absent(written, passed, missing if present else None)
                    else:
                        ports[written.name] = [in_ids[passed]]  # type: ignore[list-item]
                    continue
                if present is None:
                    node = None
            if node is not None and missing:
                self._report_absent_reads(written, qual, missing, absent)
                node = None
            opdef = resolve_op(written, qual, self.problems) if node is not None else None
            if opdef is not None and not opdef.runs_subgraph:  # leaves, as the count before the walk counts them
                self.expanded += 1
                if self.expanded > MAX_EXPANDED_NODES:
                    raise _TooLarge(qual)
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
                and None not in in_types
            ):
                try:
                    checked = self._check_node(node, opdef, params, in_ids, in_types, out_ids, prefix, path)  # type: ignore[arg-type]
                except DimError as exc:  # a dim past the bounds of _dims (too large, too many terms, too deep)
                    self.problems.add("E_SHAPE", str(exc), node=qual, op=opdef.name, location=node.where("in"))
                if checked is not None and node.tie:
                    checked.ties = self._ties(g, node, qual, prefix)
            if checked is None:
                failed = True
                for v in out_ids:
                    types[v] = None
                continue
            if not checked.body and not self._within_rank(checked, node):  # type: ignore[arg-type]
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
        env = self._graph_env(g, ids, types, bindings)
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
            outcome = self._check_output(g.output_name(i), spec, out_id, out_type, env, bindings)
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

    # -- output contracts ------------------------------------------------------------------------------------

    @staticmethod
    def _graph_env(
        g: Graph, ids: Mapping[str, str], types: Mapping[str, TensorType | None], bindings: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The graph's symbols bound to what its inputs are (at the top level each symbol to itself; in a
        subgraph repetition to the outer dims), with its integer parameters: what output contracts match in."""
        env: dict[str, Any] = seed_env(bindings)
        for name, spec in g.inputs.items():
            t = types.get(ids[name])
            if t is not None and t.shape is not None:
                spec.contract.shape.match(t.shape, env)  # a mismatch here was reported where the input is used
        return env

    def _check_output(
        self, label: str, spec: OutputSpec, out_id: str, t: TensorType, env: dict[str, Any], bindings: Mapping[str, Any]
    ) -> DeclaredOutput | None:
        """Hold output ``out_id`` (inferred type ``t``) to its declared contract; ``None`` once a problem is
        reported (E_SHAPE or E_DTYPE at the node that made the shape, with the edit that fixes it when one is
        found). Symbols the inputs bind must agree; a new symbol binds here, once for all outputs."""
        origin, via = self._origin(out_id)
        node = origin if origin is not None else self.producers.get(out_id)
        where = f"output '{label}'"

        def report(code: str, message: str, **fields: Any) -> None:
            self.problems.add(
                code,
                message,
                node=node.qualname if node is not None else label,
                op=node.op if node is not None else "output",
                location=node.location if node is not None else spec.location,
                **fields,
            )

        pattern = spec.shape
        if pattern is not None:
            pattern, reason = _bind_output_pattern(pattern, bindings)
            if reason:
                report("E_PARAM", f"{where}: shape {spec.shape}: {reason}")
                return None
        before = dict(env)
        proven = True
        expected_shape: tuple[Any, ...] | None = None
        if pattern is not None and t.shape is not None:
            reason = pattern.match(t.shape, env)
            if reason:
                made = "it is" if node is None else "this node makes it"
                through = f" (through '{via[-1]}')" if via else ""
                # A rank mismatch is plain from the two shapes; a dim mismatch says which dim.
                detail = "" if reason.startswith("expected rank") else f": {reason}"
                report(
                    "E_SHAPE",
                    f"{where} is declared {pattern}, but {made} {format_shape(t.shape)}{through}{detail}",
                    port=label,
                    expected=str(pattern),
                    actual=format_shape(t.shape),
                    hint=self._output_fix(pattern, t, before, node),
                )
                return None
            proven = pattern.match(t.shape, dict(before), strict=True) == ""
            expected_shape = pattern.instantiate(env)
        elif pattern is not None:
            proven = False  # the rank is not known statically: the call decides
            expected_shape = pattern.instantiate(before)
        rule = spec.dtype or "any"
        satisfied = dtype_satisfies(t.dtype, rule)
        if satisfied is False:
            report(
                "E_DTYPE",
                f"{where} is declared {rule}, but it is {t.dtype}",
                port=label,
                expected=rule,
                actual=t.dtype,
                hint="declare the dtype the graph makes, or convert inside the graph",
            )
            return None
        return DeclaredOutput(
            label,
            TensorType(expected_shape, rule),
            proven and satisfied is True,
            node,
            spec.location,
        )

    def _output_fix(
        self, pattern: ShapePattern, t: TensorType, env: Mapping[str, Any], node: CheckedNode | None
    ) -> str | None:
        """The edit that makes an output meet its declared shape: applied to the output itself, or else to the
        input of a node before it, the nodes from there on re-inferred (a ``flatten`` forgotten before a
        ``linear``). Of the nodes where an edit works, the first that changes a shape is named: a flatten before
        a classifier's first linear, not before its last."""
        assert t.shape is not None
        named = f"{node.op} '{node.qualname}'" if node is not None else "it"
        fix = shape_fix(pattern, t.shape, env)
        if fix is not None:
            return node_hint(fix, where=f"after {named}")
        chain = self._chain_to(node)
        for start, before in enumerate(chain):
            if before.in_types[0].shape == before.out_types[0].shape:
                continue  # an edit before a node that keeps shapes is an edit before the next one
            given = before.in_types[0]
            for candidate in fix_candidates(tuple(given.shape or ())):
                after = _reinfer(chain[start:], TensorType(candidate.result, given.dtype))
                if after is None or after.shape is None:
                    continue
                if pattern.match(after.shape, dict(env), strict=True) == "":
                    text = node_hint(candidate, where=f"before {before.op} '{before.qualname}'")
                    return None if text is None else f"{text}, and the output is then {format_shape(after.shape)}"
        return None

    def _chain_to(self, node: CheckedNode | None) -> list[CheckedNode]:
        """The nodes of one input each that lead to ``node`` (``node`` last), as far back as they go (at most
        16): where a forgotten edit may be."""
        chain: list[CheckedNode] = []
        while node is not None and len(chain) < 16 and len(node.inputs) == 1 and not node.body and node.out_types:
            if node.in_types[0].shape is None:
                break
            chain.append(node)
            node = self.producers.get(node.inputs[0])
        return chain[::-1]

    def _bind(self, node: Node, bindings: Mapping[str, Any], qual: str, unknown: Mapping[str, str]) -> Node | None:
        """``node`` with its graph-parameter references replaced by their values; ``None`` once reported.
        ``unknown`` says why a symbol of the inputs' shapes that is no number cannot be used (a reason each)."""
        opdef = registry.find(node.op) if isinstance(node.op, str) else None
        bound, problems = bind_node(node, bindings, self.budget, unknown, whole_keys(opdef))
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

    @staticmethod
    def _passed_through(node: Node, missing: Sequence[int]) -> int | None:
        """The position of the input a node left out passes through: the one ``otherwise`` names, else its only
        one that exists (``None``: it has none)."""
        if node.otherwise is not None:
            return node.inputs.index(node.otherwise)
        there = [i for i in range(len(node.inputs)) if i not in missing]
        return there[0] if there else None

    @staticmethod
    def _why_absent(written: Node, passed: int | None, missing: Sequence[int] | None) -> str:
        """Why a node left out is not there at all, worded to follow ``which``. ``missing``: the inputs that are
        not there, when that (not its ``when``) is what left it out."""
        if missing:  # left out for reading a node that is not there, so its 'otherwise' is what it passes
            assert passed is not None
            return f"is not there: its 'otherwise', {excerpt(written.inputs[passed])}, is not there either"
        when = str(written.when).lower() if isinstance(written.when, bool) else excerpt(written.when)
        left_out = f"is left out (when: {when})"
        if not written.inputs:
            return f"{left_out} and has no input to pass through"
        if passed is not None:
            return f"{left_out} and so is {excerpt(written.inputs[passed])}, the input it would pass through"
        return f"{left_out} and so are all its inputs"

    def _report_absent_reads(self, written: Node, qual: str, missing: Sequence[int], absent: Mapping[str, str]) -> None:
        """E_REF for each input of a node that exists but reads a node left out with nothing to pass through."""
        for i in missing:
            ref = written.inputs[i]
            self.problems.add(
                "E_REF",
                f"reads {excerpt(ref)}, which {absent[split_ref(ref)[0]]}",
                node=qual,
                op=written.op,
                location=written.where("in"),
                hint=f"give {written.name!r} an 'otherwise' (the input it passes through when {excerpt(ref)} is "
                "not there), or read a value that is always there",
            )

    def _present(self, node: Node, qual: str, in_ids: list[str | None], missing: Sequence[int] = ()) -> bool | None:
        """Whether a node with a ``when`` exists (``None`` once a problem is reported). ``missing`` are the
        positions of inputs that name nodes left out: a node left out passes through its only other one."""
        if not isinstance(node.when, bool):
            self.problems.add(
                "E_PARAM",
                f"'when' must be true, false or a bool graph parameter ('$name'), got {excerpt(node.when)}",
                node=qual,
                op=node.op,
                location=node.where("when"),
            )
            return None
        if node.otherwise is not None and node.otherwise not in node.inputs:
            self.problems.add(
                "E_PARAM",
                f"'otherwise' names {excerpt(node.otherwise)}, which is not an input of the node",
                node=qual,
                op=node.op,
                location=node.where("otherwise"),
                expected="one of " + ", ".join(repr(r) for r in node.inputs) if node.inputs else "an input",
                actual=node.otherwise,
                hint=suggestion(node.otherwise, node.inputs),
            )
            return None
        there = len(in_ids) - len(missing)
        if not node.when and node.otherwise is None and there > 1:
            gone = f" (and {len(missing)} left out)" if missing else ""
            self.problems.add(
                "E_PARAM",
                f"a node left out by 'when' passes its input through, so it needs one input; it has {there}{gone}",
                node=qual,
                op=node.op,
                location=node.where("when"),
                hint="say which passes through: otherwise: <one of its inputs>",
            )
            return None
        return node.when

    def _ties(self, g: Graph, node: Node, qual: str, prefix: str) -> dict[str, str]:
        """``node``'s ties with qualified targets; a target that names no node of ``g`` is reported (E_REF).
        Empty when the tie's ``when`` (bound by then) is false; one that is no bool is reported (E_PARAM).

        Whether the parameters exist and agree in shape is known once the layers are built: the builder checks it.
        """
        ties: dict[str, str] = {}
        when = node.tie.get("when", True)
        if not isinstance(when, bool):
            written = g.nodes[node.name].tie.get("when") if node.name in g.nodes else None
            source = f" (from {excerpt(written)})" if written != when and isinstance(written, str) else ""
            self.problems.add(
                "E_PARAM",
                f"the tie's 'when' must be true, false or a bool graph parameter ('$name'), got {excerpt(when)}"
                + source,
                node=qual,
                op=node.op,
                location=node.where("tie"),
                hint="e.g. tie: {weight: embed_tokens.weight, when: $tie_word_embeddings}, the parameter true or false",
            )
            return ties
        if not when:  # the tie is off: the layer keeps its own parameters
            return ties
        for own, target in node.tie.items():
            if own == "when":
                continue
            target_node = target.partition(".")[0] if isinstance(target, str) else None
            if not isinstance(own, str) or not own or not isinstance(target, str) or "." not in target:
                self.problems.add(
                    "E_SPEC",
                    f"tie {excerpt(own)}: {excerpt(target)} must map a parameter of this node to 'node.parameter'",
                    node=qual,
                    op=node.op,
                    location=node.where("tie"),
                    hint="e.g. tie: {weight: wte.weight}",
                )
            elif target_node == node.name or target_node not in g.nodes:
                self.problems.add(
                    "E_REF",
                    f"tie {own!r} refers to {excerpt(target)}, but "
                    + (
                        "a node cannot share its own parameter"
                        if target_node == node.name
                        else f"{target_node!r} is no node of graph {g.name!r}"
                    ),
                    node=qual,
                    op=node.op,
                    location=node.where("tie"),
                    hint=suggestion(target_node or "", [n for n in g.nodes if n != node.name]),
                )
            else:
                ties[own] = prefix + target
        return ties

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
                message, fields = _name_wired_inputs(message, fields, ports, node.inputs)
            if code == "E_SHAPE" and len(in_ids) > 1:
                message, cause = self._explain_inputs(message, node, in_ids)
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
        with collect_requirements() as checked.requires:
            inferred = infer_node(opdef, params, node.params.keys(), ports, report)
        if inferred is None:
            return None
        checked.params, checked.out_types = inferred
        if len(checked.out_types) != len(out_ids):
            report("E_SHAPE", f"inference produced {len(checked.out_types)} outputs, expected {len(out_ids)}")
            return None
        return checked

    def _origin(self, value: str) -> tuple[CheckedNode | None, list[str]]:
        """The node where ``value``'s shape was last changed, and the shape-keeping nodes passed on the way."""
        via: list[str] = []
        node = self.producers.get(value)
        while node is not None and len(node.inputs) == 1 and node.in_types[0].shape == node.out_types[0].shape:
            via.append(node.qualname)
            before = self.producers.get(node.inputs[0])
            if before is None:
                return node, via[:-1]
            node = before
        return node, via

    def _explain_inputs(self, message: str, node: Node, in_ids: list[str]) -> tuple[str, str | None]:
        """A shape mismatch between a node's inputs, with where each input's shape comes from and, when one of
        them was changed by a padded window op without padding, that probable cause."""
        parts: list[str] = []
        cause = None
        passed_through = False
        for ref, value in zip(node.inputs, in_ids):
            origin, via = self._origin(value)
            passed_through = passed_through or bool(via)
            if origin is None:
                parts.append(f"'{ref}'")
                continue
            through = f" through '{via[-1]}'" if via else ""
            parts.append(f"{origin.op} '{origin.qualname}'{through}")
            padding = origin.params.get("padding") if "padding" in origin.params else None
            kernel = origin.params.get("kernel_size")
            if cause is None and padding in (0, (0, 0)) and kernel not in (None, 1, (1, 1)):
                k = kernel if isinstance(kernel, int) else max(kernel)
                cause = (
                    f"probable cause: {origin.op} '{origin.qualname}' has no padding, so its kernel of {kernel} "
                    f"shrinks the size by {k - 1}; padding: {(k - 1) // 2} keeps it"
                )
        if not passed_through and cause is None:
            return message, None  # each input is what the node names: nothing to add
        return f"{message} (inputs from {' and '.join(parts)})", cause

    def _check_subgraph(
        self, node: Node, checked: CheckedNode, ports: BoundPorts, report: Report
    ) -> CheckedNode | None:
        """A node of an op that runs a subgraph (``graph``): the subgraph checked once per repetition, each
        repetition fed the previous one's outputs."""
        name = checked.params["graph"]
        sub = self.library.get(name)
        if sub is None:
            report(
                "E_REF",
                f"unknown graph {excerpt(name)}",
                key="graph",
                hint=suggestion(name, self.library) or "define it under 'graphs:'",
            )
            return None
        if not sub.outputs:
            # As for the top-level graph: a subgraph that returns nothing gives its node no output, and a node
            # reading that node would otherwise be left unchecked with nothing said.
            report(
                "E_REF",
                f"graph {excerpt(name)} declares no outputs",
                key="graph",
                hint=f"add an 'outputs:' list to graph {excerpt(name)}",
            )
            return None
        if name in self.active:  # a use through a graph parameter ('graph: $g'); written names were seen before
            report("E_CYCLE", "graph uses itself: " + " -> ".join([*self.active, name]), key="graph")
            return None
        if len(self.active) >= MAX_NESTING:
            report(
                "E_PARAM",
                f"subgraphs nest more than {MAX_NESTING} levels deep here (graph {excerpt(name)} at level "
                f"{len(self.active) + 1})",
                key="graph",
                hint="flatten some levels into one graph",
            )
            return None
        repeat = checked.params.get("repeat", 1)
        checked.indexed = "repeat" in node.params
        values, reason, hint = repetition_params(sub, checked.params.get("params"), repeat, self.budget)
        if reason:
            report("E_PARAM", reason, key="params", hint=hint)
            return None
        if len(ports) != len(sub.inputs):
            report(
                "E_REF",
                f"graph {name!r} takes {len(sub.inputs)} input{'' if len(sub.inputs) == 1 else 's'}, got {len(ports)}",
                expected=", ".join(sub.inputs) or "none",
                actual=", ".join(node.inputs) or "none",
            )
            return None
        shared = checked.params.get("shared") or ()
        unknown = [s for s in shared if s not in sub.inputs]
        if unknown:
            report(
                "E_REF",
                f"shared names {excerpt(unknown[0])}, which is no input of graph {name!r}",
                key="shared",
                expected="names of " + ", ".join(sub.inputs),
                actual=list(shared),
                hint=suggestion(unknown[0], list(sub.inputs)),
            )
            return None
        checked.shared = tuple(n in shared for n in sub.inputs) if shared else ()
        carried = [n for n in sub.inputs if n not in shared]
        if repeat > 1 and not sub.inputs:
            report(
                "E_PARAM",
                f"graph {name!r} takes no inputs, so its repetitions have nothing to pass from one to the next; "
                f"repeat must be 1, got {repeat}",
                key="repeat",
                hint="use it once (each use has its own parameters), or give the graph an input each repetition "
                "passes on",
            )
            return None
        if repeat > 1 and len(sub.outputs) != len(carried):
            what = f"inputs not shared ({', '.join(carried) or 'none'})" if shared else "inputs"
            report(
                "E_PARAM",
                f"repeat needs graph {name!r} to have as many outputs as {what}, it has {len(sub.outputs)} and "
                f"{len(carried)}",
                key="repeat",
                hint="each repetition's outputs feed the next one's inputs; name the inputs every repetition "
                "reads unchanged in shared",
            )
            return None
        self.active.append(name)
        try:
            outer = [t for _, t in ports]
            previous: list[TensorType] | None = None
            for r in range(repeat):
                self.expanded += 1  # a repetition counts as a node, as in the count before the walk
                if self.expanded > MAX_EXPANDED_NODES:
                    raise _TooLarge(f"{checked.qualname}.{r}" if checked.indexed else checked.qualname)
                current = repetition_inputs(checked, outer, previous)
                if not self._match_subgraph_inputs(name, sub, current, r, report, values[r]):
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

    def _within_rank(self, checked: CheckedNode, node: Node) -> bool:
        """Whether ``checked``'s outputs have at most :data:`MAX_RANK` dims (reported if not); counts them
        towards :data:`MAX_CHECKED_DIMS`, raising :class:`_TooManyDims` past it."""
        ranks = [len(t.shape) for t in checked.out_types if t.shape is not None]
        if any(rank > MAX_RANK for rank in ranks):
            self.problems.add(
                "E_SHAPE",
                f"the output would have {max(ranks):,} dims, more than the {MAX_RANK} a shape may have",
                node=checked.qualname,
                op=checked.op,
                location=node.where("in"),
            )
            return False
        self.dims += sum(ranks) + 1  # a value without dims still costs as much as one
        if self.dims > MAX_CHECKED_DIMS:
            raise _TooManyDims(checked.qualname)
        return True

    def _within_node_limit(self) -> bool:
        """Whether the root expands to at most :data:`MAX_EXPANDED_NODES` leaf nodes (reported if not), counted
        from the nodes as written before anything is checked, so a nest of repetitions costs nothing. A repeat
        given by a graph parameter (``repeat: $depth``) counts at its value under the parameters each use
        passes; a graph is counted once per distinct integer configuration, at most :data:`_MAX_CONFIGURATIONS`
        of them (past that the spec counts as too large)."""
        sizes: dict[tuple[str, tuple[tuple[str, int], ...]], int] = {}

        def size(g: Graph, active: tuple[str, ...], bindings: Mapping[str, Any]) -> int:
            return min(sum(node_size(n, active, bindings) for n in g.nodes.values()), MAX_EXPANDED_NODES + 1)

        def bound(value: Any, bindings: Mapping[str, Any]) -> Any:
            return resolve(value, bindings)[0] if is_reference(value) else value  # read, not copied

        def node_size(node: Node, active: tuple[str, ...], bindings: Mapping[str, Any]) -> int:
            name, repeat = node.params.get("graph"), bound(node.params.get("repeat", 1), bindings)
            opdef = registry.find(node.op) if isinstance(node.op, str) else None
            if opdef is None or not opdef.runs_subgraph or not isinstance(name, str) or name not in self.library:
                return 1
            if name in active:  # a cycle: reported by the walk
                return 1
            sub = self.library[name]
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

        bindings = dict(self.root.params)
        contributions = [(node_size(n, (), bindings), n) for n in self.root.nodes.values()]
        total = sum(c for c, _ in contributions)
        if total <= MAX_EXPANDED_NODES:
            return True
        _, largest = max(contributions, key=lambda cn: cn[0])
        self._report_too_large(largest, "", "repetitions multiply when subgraphs nest; repeat fewer times")
        return False

    def _report_too_large(self, node: Node | None, detail: str, hint: str) -> None:
        """E_PARAM: the root expands past :data:`MAX_EXPANDED_NODES`, at ``node``'s ``repeat`` (a top-level node)."""
        self.problems.add(
            "E_PARAM",
            f"graph '{self.root.name}' expands to more than {MAX_EXPANDED_NODES:,} nodes with its subgraphs"
            f" repeated{detail}",
            node=node.name if node is not None else None,
            op=node.op if node is not None else None,
            location=node.where("repeat") if node is not None else self.root.location,
            hint=hint,
        )

    @staticmethod
    def _match_subgraph_inputs(
        name: str, sub: Graph, types: list[TensorType], repetition: int, report: Report, bindings: Mapping[str, Any]
    ) -> bool:
        """Whether the values entering one repetition meet the subgraph's input contracts (reported if not); a
        dim that names an integer graph parameter must equal the parameter's value."""
        env: dict[str, Any] = seed_env(bindings)
        for (in_name, spec), t in zip(sub.inputs.items(), types):
            c = spec.contract
            if dtype_satisfies(t.dtype, c.dtype) is False:
                report(
                    "E_DTYPE",
                    f"repetition {repetition}: input {in_name!r} of graph {name!r} needs dtype {c.dtype}",
                    port=in_name,
                    expected=c.dtype,
                    actual=t.dtype,
                )
                return False
            if t.shape is not None:
                reason = c.shape.match(t.shape, env)
                if reason:
                    report(
                        "E_SHAPE",
                        f"repetition {repetition}: input {in_name!r} of graph {name!r}: {reason}",
                        port=in_name,
                        expected=str(c.shape),
                        actual=format_shape(t.shape),
                    )
                    return False
            for limit in c.ranges:
                # A subgraph's ranges are held statically: an int size must be inside; a symbolic one cannot be
                # shown to be, and no run-time check sees a subgraph's inputs.
                size = env.get(limit.symbol)
                if size is None or (isinstance(size, int) and limit.admits(size)):
                    continue
                report(
                    "E_SHAPE",
                    f"repetition {repetition}: input {in_name!r} of graph {name!r} needs {limit}, got "
                    + (f"{limit.symbol} = {size}" if isinstance(size, int) else f"{limit.symbol} = {size}, symbolic"),
                    port=in_name,
                    expected=str(limit),
                    actual=str(size),
                    hint=None
                    if isinstance(size, int)
                    else "a subgraph's ranges hold for int sizes only; declare the range on the model's own input",
                )
                return False
        return True


def _name_wired_inputs(
    message: str, fields: dict[str, Any], ports: BoundPorts, refs: Sequence[str]
) -> tuple[str, dict[str, Any]]:
    """``message`` and the texts in ``fields`` with each quoted port name (``'a'``) replaced by the reference
    wired into that port (``'hidden'``): ops phrase problems between their inputs in port names, but the user
    wrote the references. The problem's ``port`` field still names the port."""
    wired = {port.name: ref for (port, _), ref in zip(ports, refs) if not port.variadic and port.name != ref}
    if not wired:
        return message, fields
    pattern = re.compile("'(" + "|".join(re.escape(name) for name in wired) + ")'")

    def rename(text: str) -> str:
        return pattern.sub(lambda m: repr(wired[m.group(1)]), text)

    renamed = {
        k: rename(v) if k in ("expected", "actual", "hint") and isinstance(v, str) else v for k, v in fields.items()
    }
    return rename(message), renamed


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


def _inferred(opdef: OpDef, name: str) -> bool:
    return any(p.name == name and p.inferred for p in opdef.params)


def _bind_output_pattern(pattern: ShapePattern, bindings: Mapping[str, Any]) -> tuple[ShapePattern, str]:
    """An output's declared shape with the dims that name integer graph parameters replaced by their values."""
    contract, reason = bind_contract(Contract(pattern, "any"), bindings)
    return contract.shape, reason


def _reinfer(chain: Sequence[CheckedNode], given: TensorType) -> TensorType | None:
    """The type that comes out of ``chain`` (nodes of one input each, in order) when its first node gets
    ``given``: each node inferred again with its inferred parameters (``in_features``) following its new input;
    ``None`` when a node does not take it."""

    def ignore(code: str, message: str, *, key: str | None = "in", **fields: Any) -> None:
        return None

    current = given
    for node in chain:
        params = Params({k: (None if _inferred(node.opdef, k) else v) for k, v in node.params.items()})
        ports = bind_ports(node.opdef, [current], params)
        if ports is None:
            return None
        try:
            with collect_requirements():
                inferred = infer_node(node.opdef, params, (), ports, ignore)
        except DimError:
            return None
        if inferred is None or len(inferred[1]) != 1:
            return None
        current = inferred[1][0]
    return current
