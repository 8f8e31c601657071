"""Nodes that run a subgraph (op ``graph``): what the walk of :mod:`hndl._check` holds a use to before it checks
the subgraph's body once per repetition.

:func:`subgraph_use` checks the use itself: the graph exists and returns something, does not use itself and
nests within :data:`~hndl._resolve.MAX_NESTING` levels, and its parameters per repetition, its inputs,
``shared`` and ``repeat`` agree. :func:`match_subgraph_inputs` holds the values entering one repetition to the
subgraph's input contracts. The walk feeds each repetition the previous one's outputs
(:func:`~hndl._checked.repetition_inputs`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._checked import CheckedNode
from ._contracts import TensorType, dtype_satisfies, format_shape
from ._graph import Graph, Node
from ._graph_params import repetition_params, seed_env
from ._infer import BoundPorts, Report
from ._param_binding import ValueBudget
from ._resolve import MAX_NESTING
from .naming import excerpt, suggestion

__all__ = ["match_subgraph_inputs", "subgraph_use"]


def subgraph_use(
    node: Node,
    checked: CheckedNode,
    ports: BoundPorts,
    report: Report,
    library: dict[str, Graph],
    active: Sequence[str],
    budget: ValueBudget,
) -> tuple[Graph, list[dict[str, Any]]] | None:
    """The subgraph ``checked`` runs and the graph parameters of each of its repetitions, or ``None`` once a
    problem with the use is reported. Sets ``checked.indexed`` (whether repetitions are numbered) and
    ``checked.shared`` (which inputs every repetition reads unchanged).

    Args:
        node: the node as written, its graph parameters bound.
        checked: the node being checked; its ``params`` validated.
        ports: the values it is given, matched to its ports.
        report: reports a problem at the node.
        library: the subgraphs by name.
        active: the subgraphs being checked, outermost first (a use of one of them is a cycle).
        budget: what graph parameters may still expand to.
    """
    name = checked.params["graph"]
    sub = library.get(name)
    if sub is None:
        report(
            "E_REF",
            f"unknown graph {excerpt(name)}",
            key="graph",
            hint=suggestion(name, library) or "define it under 'graphs:'",
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
    if name in active:  # a use through a graph parameter ('graph: $g'); written names were seen before
        report("E_CYCLE", "graph uses itself: " + " -> ".join([*active, name]), key="graph")
        return None
    if len(active) >= MAX_NESTING:
        report(
            "E_PARAM",
            f"subgraphs nest more than {MAX_NESTING} levels deep here (graph {excerpt(name)} at level "
            f"{len(active) + 1})",
            key="graph",
            hint="flatten some levels into one graph",
        )
        return None
    repeat = checked.params.get("repeat", 1)
    checked.indexed = "repeat" in node.params
    values, reason, hint = repetition_params(sub, checked.params.get("params"), repeat, budget)
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
            hint="use it once (each use has its own parameters), or give the graph an input each repetition passes on",
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
    return sub, values


def match_subgraph_inputs(
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
