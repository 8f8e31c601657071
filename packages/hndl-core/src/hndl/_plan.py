"""Lowering: a checked graph, once, as the flat list of leaf steps that runs it.

The checker proves a graph right and keeps its nesting (a ``graph`` node holds one checked subgraph per
repetition). Everything that *runs* a graph wants it flat: the GraphModule's validation and generated code, the
``hndl`` command's node table, hndl-func's parameter check. :func:`lower` flattens it once into a
:class:`Plan`; they all read that plan. Subgraph inputs and outputs are aliases, not values: a step's inputs
and the plan's outputs name the values they finally refer to. No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._checked import CheckedGraph, CheckedNode, repetition_inputs

__all__ = ["Group", "Plan", "Step", "lower"]


@dataclass(frozen=True)
class Step:
    """One leaf node to run: its checked node, and the value ids it reads and writes."""

    node: CheckedNode
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True)
class Group:
    """One use of a subgraph (one repetition of a repeated one): the contiguous run of steps it lowers to.

    Its layers live in one module (at ``path`` from the GraphModule); that module's ``forward`` runs
    exactly these steps, which is what lets a hook on it (FSDP2's ``fully_shard`` per block, a user's hook)
    see one call per repetition (``hndl.torch`` blocks).

    Attributes:
        node: the ``graph`` node this is a use of.
        qualname: the name messages use (``blocks.3``, or ``stem`` for a subgraph used without ``repeat``).
        path: the module path from the GraphModule (``("nodes", "n_blocks", "3")``).
        repetition: which repetition of ``node`` (0 without ``repeat``).
        start, stop: the steps ``plan.steps[start:stop]``.
        inputs, outputs: the value ids the subgraph's inputs and outputs stand for (an output may be an input).
    """

    node: CheckedNode
    qualname: str
    path: tuple[str, ...]
    repetition: int
    start: int
    stop: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, eq=False)
class Plan:
    """A checked graph lowered to the leaf steps that run it, in order (read-only).

    Attributes:
        checked: the checked graph this plan was lowered from (its ``graph`` is the model's :class:`~hndl.Graph`).
        steps: the leaf nodes in execution order; ``graph`` nodes and repeats are flattened away.
        input_names: the graph's input names, in call order.
        input_ids: the value ids of the inputs, in the same order.
        output_ids: the value ids the graph returns, resolved through subgraph aliases (an output may be an
            input).
        last_use: for every value (each input and each step output), the index of the last step that reads it;
            after that step nothing needs it. The graph's outputs live to the end (``len(steps)``); a value
            nothing reads has the index of the step that makes it (``-1`` for an input).
        locations: each leaf node's spec location (``file:line:col`` or ``None``), by qualified name.
        groups: every subgraph use and repetition, outer ones before the ones they hold.
    """

    checked: CheckedGraph
    steps: tuple[Step, ...]
    input_names: tuple[str, ...]
    input_ids: tuple[str, ...]
    output_ids: tuple[str, ...]
    last_use: Mapping[str, int]
    locations: Mapping[str, str | None]
    groups: tuple[Group, ...] = ()


def lower(checked: CheckedGraph) -> Plan:
    """Flatten ``checked`` into its :class:`Plan`: steps, input and output value ids, each value's last use."""
    steps: list[Step] = []
    alias: dict[str, str] = {}
    groups: list[Group] = []
    _flatten_into(checked, alias, steps, groups)
    output_ids = tuple(alias.get(v, v) for v in checked.output_ids)
    last_use: dict[str, int] = dict.fromkeys(checked.input_ids, -1)
    for index, step in enumerate(steps):
        for value in step.inputs:
            last_use[value] = index
        for value in step.outputs:
            last_use[value] = index
    for value in output_ids:
        last_use[value] = len(steps)
    return Plan(
        checked=checked,
        steps=tuple(steps),
        input_names=tuple(checked.input_names),
        input_ids=tuple(checked.input_ids),
        output_ids=output_ids,
        last_use=last_use,
        locations={step.node.qualname: step.node.location for step in steps},
        groups=tuple(groups),
    )


def _flatten_into(cg: CheckedGraph, alias: dict[str, str], steps: list[Step], groups: list[Group]) -> None:
    """Append ``cg``'s leaf steps and subgraph groups; record in ``alias`` what each ``graph`` node's outputs
    finally refer to."""

    def resolve(v: str) -> str:
        return alias.get(v, v)

    for node in cg.nodes:
        if node.body:
            outer = [resolve(v) for v in node.inputs]
            previous: list[str] | None = None
            for repetition, sub in enumerate(node.body):
                current = repetition_inputs(node, outer, previous)
                inner_alias = dict(zip(sub.input_ids, current))
                at = len(groups)
                groups.append(None)  # type: ignore[arg-type]  # filled below: outer groups come first
                start = len(steps)
                _flatten_into(sub, inner_alias, steps, groups)
                previous = [inner_alias.get(v, v) for v in sub.output_ids]
                path = (*node.path, str(repetition)) if node.indexed else node.path
                qualname = f"{node.qualname}.{repetition}" if node.indexed else node.qualname
                groups[at] = Group(node, qualname, path, repetition, start, len(steps), tuple(current), tuple(previous))
            for out_id, value in zip(node.outputs, previous or []):
                alias[out_id] = value
        else:
            steps.append(Step(node, tuple([alias.get(v, v) for v in node.inputs]), tuple(node.outputs)))
