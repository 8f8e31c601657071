"""A called block's ReLUs and adds writing into an input nobody else reads, while gradients are recorded.

torchvision's bottleneck writes ``relu(inplace=True)`` and ``out += identity`` into tensors it made itself;
a block hndl runs through its ``forward`` (checkpointed, hooked, sharded: :func:`._blocks.run_program`) ran
every step out of place, and ResNet-50 with every block recomputed took 5-7% longer a training step than
torchvision's under ``checkpoint_sequential`` (IMPLEMENTATION.md).

The rule is the fast path's (:mod:`._in_place`), applied to the block's program: :func:`in_place_operands`
chooses each step's operand once per program, from its steps (:func:`._in_place.chosen_operands`), keeping the
steps that may write while gradients are recorded; :func:`may_write` judges the layers and the operand on each
call (the layers are looked up as the block runs), as :func:`._in_place.write_modes`, :func:`._in_place.observed`
and :func:`._in_place.sole_owner_with_grad` (measured for an item of the step's argument list) say. Without
gradients a called block runs out of place: the fast path's own no-gradient writes are adds written out in its
generated call, which a called block does not have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .._plan import Step
from ._in_place import (
    ALONE_IN_A_LIST,
    chosen_operands,
    keeps_no_output,
    observed,
    sole_owner_with_grad,
    write_modes,
    writer_ops,
)

__all__ = ["in_place_operands", "may_write", "write"]


def in_place_operands(steps: Sequence[Step], inputs: Sequence[str], outputs: Sequence[str]) -> list[tuple[int, int]]:
    """Per step, ``(operand, producer)``: which input the step may write into while gradients are recorded and the
    position of the step that made it, or ``(-1, -1)``; the static half of the rule."""
    writers = writer_ops()
    return [
        (operand, producer)
        if operand >= 0 and step.node.op in writers and len(step.outputs) == 1 and keeps_no_output(steps[producer].node)
        else (-1, -1)
        for step, (operand, producer) in zip(steps, chosen_operands(steps, (*inputs, *outputs)))
    ]


def may_write(op: str, module: Any, producer: Any, args: list[Any], operand: int) -> bool:
    """Whether the step may write into ``args[operand]`` on this call: the run-time half of the rule. The
    caller has let go of the operand, so ``args`` is its only holder."""
    if not torch.is_grad_enabled() or observed(module) or observed(producer):
        return False
    if not write_modes(module, producer, True)[1]:  # the producer's op was judged by in_place_operands
        return False
    if not sole_owner_with_grad(args[operand], ALONE_IN_A_LIST):
        return False
    return len(args) != 2 or _same_layout(args[0], args[1])


def _same_layout(a: Any, b: Any) -> bool:
    """Whether an add may write into either operand: both tensors of the result's shape and dtype."""
    return isinstance(b, torch.Tensor) and isinstance(a, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype


def write(op: str, args: list[Any], operand: int) -> Any:
    """The step's result written into ``args[operand]``."""
    target = args[operand]
    if op == "relu":
        return torch.relu_(target)
    return target.add_(args[1 - operand])
