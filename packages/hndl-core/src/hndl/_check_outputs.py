"""Output contracts: a graph's declared outputs (``outputs: {logits: {from: head, shape: [B, 10]}}``) held to
the types the walk of :mod:`hndl._check` inferred for them.

A mismatch is reported at the node that made the shape, with the edit that fixes it when one is found: applied
to the output itself, or to the input of a node some steps back, the nodes from there on inferred again
(:func:`hndl._infer.infer_node`) to see that the output then fits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._check_messages import origin
from ._checked import CheckedNode, DeclaredOutput
from ._contracts import Contract, ShapePattern, TensorType, dtype_satisfies, format_shape
from ._dims import DimError
from ._errors import ProblemList
from ._graph import Graph, OutputSpec
from ._graph_params import bind_contract, seed_env
from ._hints import fix_candidates, node_hint, shape_fix
from ._infer import bind_ports, infer_node
from ._registry import OpDef, Params
from .ops._common import collect_requirements

__all__ = ["check_output", "graph_env"]


def graph_env(
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


def check_output(
    problems: ProblemList,
    producers: Mapping[str, CheckedNode],
    label: str,
    spec: OutputSpec,
    out_id: str,
    t: TensorType,
    env: dict[str, Any],
    bindings: Mapping[str, Any],
) -> DeclaredOutput | None:
    """Hold output ``out_id`` (inferred type ``t``) to its declared contract; ``None`` once a problem is
    reported (E_SHAPE or E_DTYPE at the node that made the shape, with the edit that fixes it when one is
    found). Symbols the inputs bind must agree; a new symbol binds here, once for all outputs.
    ``producers``: value id -> the leaf node that makes it."""
    made_by, via = origin(producers, out_id)
    node = made_by if made_by is not None else producers.get(out_id)
    where = f"output '{label}'"

    def report(code: str, message: str, **fields: Any) -> None:
        problems.add(
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
                hint=_output_fix(producers, pattern, t, before, node),
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
    producers: Mapping[str, CheckedNode],
    pattern: ShapePattern,
    t: TensorType,
    env: Mapping[str, Any],
    node: CheckedNode | None,
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
    chain = _chain_to(producers, node)
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


def _chain_to(producers: Mapping[str, CheckedNode], node: CheckedNode | None) -> list[CheckedNode]:
    """The nodes of one input each that lead to ``node`` (``node`` last), as far back as they go (at most
    16): where a forgotten edit may be."""
    chain: list[CheckedNode] = []
    while node is not None and len(chain) < 16 and len(node.inputs) == 1 and not node.body and node.out_types:
        if node.in_types[0].shape is None:
            break
        chain.append(node)
        node = producers.get(node.inputs[0])
    return chain[::-1]


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
