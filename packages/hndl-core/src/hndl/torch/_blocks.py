"""Subgraph uses as modules with a ``forward``: what FSDP2 shards per block and what a block's hooks see.

A ``graph`` node's layers live in one :class:`Block` per use (per repetition of a repeated subgraph): a
``ModuleDict`` keyed ``n_<name>`` as before, so ``state_dict`` keys are unchanged, whose ``forward`` runs exactly
the steps of its :class:`~hndl._plan.Group`. The GraphModule's generated call does not call blocks: it runs their
leaf layers itself, one line per step, as it always did. Only a block that has a forward hook or pre-hook (what
``fully_shard(block)`` registers; a user's feature hook) or was compiled with ``Module.compile()`` is called
through ``__call__`` as one step (:func:`collapse`), so the hooks fire once per repetition around its layers.

Inside a called block the steps run through each layer's ``__call__`` (a layer's own hooks fire as usual), the
values each step last reads are dropped after it, and a failing layer is ``E_RUNTIME`` naming that layer's node.
While the GraphModule validates, a called block runs its steps with the validation's per-node checks instead
(:data:`validating`), so a sharded block is checked with its parameters gathered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from torch import nn

from .._errors import HndlError, Problem
from .._plan import Group, Plan, Step
from ._block_in_place import in_place_operands, may_write, write

__all__ = [
    "Block",
    "Program",
    "collapse",
    "collapsed_plan",
    "install_programs",
    "program_for",
    "run_program",
    "validating",
]


@dataclass(frozen=True, eq=False)
class Program:
    """What a block's ``forward`` runs: the steps of its group, relative to the block.

    ``items`` are ``(path, inputs, outputs, drop, step)``: the layer's (or a nested block's) key path below the
    block, the value ids it reads and writes, the value ids no later item reads, and the plan step (its node
    names a failure). ``in_place`` has per item the operand it may write into while gradients are recorded
    and the item that made it, ``(-1, -1)`` for none (:mod:`._block_in_place`)."""

    qualname: str
    inputs: tuple[str, ...]
    items: tuple[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...], Step], ...]
    outputs: tuple[str, ...]
    in_place: tuple[tuple[int, int], ...]

    def __deepcopy__(self, memo: dict[int, Any]) -> Program:
        return self  # immutable, and the plan it points into is shared by every copy of the model


class Block(nn.ModuleDict):
    """The layers of one use of a subgraph (keys ``n_<name>``), and a ``forward`` that runs them in order.

    Called only when something observes it (a hook, ``fully_shard``, ``Module.compile()``): otherwise the
    GraphModule's generated call runs its layers directly. ``forward(*inputs)`` takes the subgraph's inputs in
    order and returns its output (several as a tuple)."""

    def forward(self, *inputs: Any) -> Any:
        program: Program | None = self.__dict__.get("_hndl_program")
        if program is None:
            raise HndlError(
                Problem(
                    "E_RUNTIME",
                    "this block was not made by hndl.build, so it has no steps to run",
                    expected="a block of a built GraphModule",
                    actual=type(self).__name__,
                )
            )
        if len(inputs) != len(program.inputs):
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"block '{program.qualname}' takes {len(program.inputs)} inputs, got {len(inputs)}",
                    node=program.qualname,
                    expected=str(len(program.inputs)),
                    actual=str(len(inputs)),
                )
            )
        checked = validating.get()
        if checked is not None:
            found = checked(self, program, inputs)
            if found is not NotImplemented:
                return found
        return run_program(self, program, inputs)


#: Set by a validating GraphModule while its layers run: ``(block, program, inputs) -> outputs`` runs a block's
#: steps with the validation's checks (``NotImplemented`` for a block of another model).
validating: ContextVar[Callable[[Block, Program, tuple[Any, ...]], Any] | None] = ContextVar(
    "hndl_validating_blocks", default=None
)


def run_program(block: nn.Module, program: Program, inputs: Sequence[Any]) -> Any:
    """Run ``program``'s steps below ``block``: each layer through ``__call__``, values dropped after their last
    reader; a layer that raises is ``E_RUNTIME`` naming its node (an ``HndlError`` and torch's control flow,
    ``_validate.CONTROL_FLOW``, pass as they are)."""
    from ._validate import CONTROL_FLOW, layer_failure

    values = dict(zip(program.inputs, inputs))
    ran: list[Any] = []  # each item's module: the in-place rule looks at an operand's producer
    for (path, ins, outs, drop, step), (operand, producer) in zip(program.items, program.in_place):
        module: Any = block
        for key in path:
            module = module._modules[key]
        ran.append(module)
        args = [values[v] for v in ins]
        try:
            if operand >= 0:
                del values[ins[operand]]  # read by this step alone: the argument list is left its only holder
                if may_write(step.node.op, module, ran[producer], args, operand):
                    result = write(step.node.op, args, operand)
                else:
                    result = module(*args)
            else:
                result = module(*args)
        except CONTROL_FLOW:
            raise
        except Exception as exc:
            raise layer_failure(step.node, args, exc) from exc
        if len(outs) == 1:
            values[outs[0]] = result
        else:
            values.update(zip(outs, result))
        for v in drop:
            values.pop(v, None)
        del args, result
    found = tuple(values[v] for v in program.outputs)
    return found[0] if len(found) == 1 else found


def group_step(plan: Plan, group: Group) -> Step:
    """A group as one step of its parent: the ``graph`` node renamed and typed as this use (repetition)."""
    body = group.node.body[group.repetition]
    node = dataclasses.replace(
        group.node,
        qualname=group.qualname,
        path=group.path,
        in_types=[body.types[v] for v in body.input_ids],
        out_types=[body.types[v] for v in body.output_ids],
        body=[],
    )
    return Step(node, group.inputs, group.outputs)


def _holds(outer: Group, inner: Group) -> bool:
    """Whether ``inner`` is a use nested, at any depth, in ``outer``: its block is registered below ``outer``'s.
    Told by module path, not by steps: a use whose steps are all one nested use's (a subgraph made of a single
    subgraph use, such as a downsample that is one convolution block) spans exactly the steps of that use, so its
    steps alone cannot say which of the two holds the other."""
    depth = len(outer.path)
    return len(inner.path) > depth and inner.path[:depth] == outer.path


def collapse(plan: Plan, start: int, stop: int, called: set[int], inside: int | None = None) -> list[Step]:
    """The steps ``plan.steps[start:stop]`` as they run: each outermost group in ``called`` (indices into
    ``plan.groups``) becomes one step calling its block. ``inside`` is the group being run (None: the whole
    plan): only the uses nested in it count, never the group itself nor one that holds it, which would call
    the block being run again (or its parent) from inside its own forward, without end."""
    outer = None if inside is None else plan.groups[inside]
    by_start: dict[int, list[int]] = {}
    for index, group in enumerate(plan.groups):
        # An empty use (its outputs are its inputs) has no steps to replace.
        if index in called and start <= group.start < group.stop <= stop and (outer is None or _holds(outer, group)):
            by_start.setdefault(group.start, []).append(index)
    steps: list[Step] = []
    i = start
    while i < stop:
        here = by_start.get(i)
        if here:
            # The uses starting here are nested one in another; the outermost has the shortest path (their spans
            # may be equal, see ``_holds``).
            group = plan.groups[min(here, key=lambda g: len(plan.groups[g].path))]
            steps.append(group_step(plan, group))
            i = group.stop
        else:
            steps.append(plan.steps[i])
            i += 1
    return steps


def collapsed_plan(plan: Plan, called: set[int]) -> Plan:
    """``plan`` with each outermost called group as one step, and each value's last use counted again."""
    steps = collapse(plan, 0, len(plan.steps), called)
    last_use: dict[str, int] = dict.fromkeys(plan.input_ids, -1)
    for index, step in enumerate(steps):
        for value in (*step.inputs, *step.outputs):
            last_use[value] = index
    for value in plan.output_ids:
        last_use[value] = len(steps)
    return dataclasses.replace(plan, steps=tuple(steps), last_use=last_use)


def program_for(
    steps: Sequence[Step],
    inputs: Sequence[str],
    outputs: Sequence[str],
    qualname: str,
    relative: Callable[[tuple[str, ...]], tuple[str, ...]],
) -> Program:
    """The program running ``steps`` from ``inputs`` to ``outputs``; ``relative`` turns a step's module path under
    the model's ``nodes`` into its key path below the module that runs the program."""
    last: dict[str, int] = {}
    for position, step in enumerate(steps):
        for v in step.inputs:
            last[v] = position
    keep = set(outputs)
    items = []
    for position, step in enumerate(steps):
        drop = tuple(v for v in dict.fromkeys((*step.inputs, *step.outputs)) if last.get(v, -1) <= position)
        items.append(
            (relative(step.node.path), step.inputs, step.outputs, tuple(v for v in drop if v not in keep), step)
        )
    in_place = tuple(in_place_operands(steps, inputs, outputs))
    return Program(qualname, tuple(inputs), tuple(items), tuple(outputs), in_place)


def _program(plan: Plan, index: int) -> Program:
    group = plan.groups[index]
    # Nested blocks are called through ``__call__`` from a called block, so their own hooks fire too.
    nested = {g for g, other in enumerate(plan.groups) if _holds(group, other)}
    steps = collapse(plan, group.start, group.stop, nested, inside=index)
    depth = len(group.path)
    return program_for(steps, group.inputs, group.outputs, group.qualname, lambda path: tuple(path[depth:]))


def install_programs(plan: Plan, blocks: Iterable[tuple[int, nn.Module | None]]) -> None:
    """Give each block (``(group index, module)``) the program of its group; what is not a :class:`Block` (a
    module a user put there) is left alone."""
    for index, module in blocks:
        if isinstance(module, Block):
            module.__dict__["_hndl_program"] = _program(plan, index)
