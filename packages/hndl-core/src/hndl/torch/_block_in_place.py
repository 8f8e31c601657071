"""A called block's ReLUs and adds writing into an input nobody else reads, while gradients are recorded.

torchvision's bottleneck writes ``relu(inplace=True)`` and ``out += identity`` into tensors it made itself;
a block hndl runs through its ``forward`` (checkpointed, hooked, sharded: :func:`._blocks.run_program`) ran
every step out of place, and ResNet-50 with every block recomputed took 5-7% longer a training step than
torchvision's under ``checkpoint_sequential`` (IMPLEMENTATION.md). Writing in place is exact (the same
kernel's arithmetic into other memory; ``a + b`` and ``b + a`` are the same IEEE sum) and saves an
allocation and a pass over memory per step.

Autograd allows a write into a tensor only where no backward still needs it, so a step writes into its operand
only when all of these hold:

- statically (:func:`in_place_operands`, once per program): the step is a ``relu`` or an ``add``; the operand
  is made by an earlier step of the same program, read by this step alone, once, and is not one of the
  program's outputs (a block's inputs and outputs belong to its caller, and a checkpoint keeps the inputs to
  recompute from); the op that made it keeps nothing of its output for backward (``hndl._saved.saves``:
  ``none`` or ``inputs``, as a convolution, batch norm or add; not a ReLU or a softmax);
- on the call (:func:`may_write`): the layer and the operand's producer are exactly the built classes, with
  their classes' own ``forward`` (the producer one of ``_inline``'s layers that return a new tensor), and
  neither has a hook, nor is any global hook set (a hook may keep the output, and a full backward hook wraps
  it); gradients are recorded, no ``torch.func`` transform and no ``torch.compile`` trace is running; both
  operands are plain tensors of the result's shape and dtype, the written one not a leaf, and held by nothing
  but the running step (:func:`._inline.sole_owner`'s two counts, measured for the step's argument list).

Without gradients a called block runs out of place as before: the fast path's own no-grad rule
(``_inline.in_place_steps``) measured a ReLU written into its input as slower there.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .._plan import Step
from .._saved import saves
from . import layers
from ._guards import global_hooks_active, hook_dicts
from ._inline import _FRESH, KEEPS_NO_OUTPUT, _storage_users, _use_count
from ._tracing import transforms_active

__all__ = ["in_place_operands", "may_write", "write"]

#: The ops a step may write in place, with the class that runs each and the forward it was judged by.
_WRITERS: dict[str, tuple[type, Any]] = {
    "relu": (nn.ReLU, nn.ReLU.forward),
    "add": (layers.Add, layers.Add.forward),
}


def in_place_operands(steps: Sequence[Step], inputs: Sequence[str], outputs: Sequence[str]) -> list[tuple[int, int]]:
    """Per step, ``(operand, producer)``: which input the step may write into and the position of the step that
    made it, or ``(-1, -1)``; the static half of the rule in the module docstring."""
    readers = Counter(v for step in steps for v in step.inputs)
    made_by: dict[str, int] = {}
    caller = set(inputs) | set(outputs)
    found: list[tuple[int, int]] = []
    for position, step in enumerate(steps):
        choice = (-1, -1)
        if step.node.op in _WRITERS and len(step.outputs) == 1:
            for operand, value in enumerate(step.inputs):
                producer = made_by.get(value)
                if producer is None or value in caller or readers[value] != 1:
                    continue
                made = steps[producer]
                if len(made.outputs) == 1 and saves(made.node) in KEEPS_NO_OUTPUT:
                    choice = (operand, producer)
                    break
        found.append(choice)
        for value in step.outputs:
            made_by[value] = position
    return found


def _unobserved(module: Any) -> bool:
    return not any(hook_dicts(module)) and "forward" not in module.__dict__


def _held_by_list_alone() -> tuple[int, int] | None:
    """The reference and storage counts of a tensor that one list holds and nothing else, read as
    :func:`may_write` reads them (``sys.getrefcount(args[k])``); None on a torch without the storage count
    (then nothing is written in place)."""
    if _use_count is None:
        return None
    args = [torch.empty(1)]
    return sys.getrefcount(args[0]), _storage_users(args[0])


_ALONE = _held_by_list_alone()


def may_write(op: str, module: Any, producer: Any, args: list[Any], operand: int) -> bool:
    """Whether the step may write into ``args[operand]`` on this call: the run-time half of the rule. The
    caller has let go of the operand, so ``args`` is its only holder."""
    cls, forward = _WRITERS[op]
    made = type(producer)
    if type(module) is not cls or cls.forward is not forward or _FRESH.get(made) is not made.forward:
        return False
    if not (_unobserved(module) and _unobserved(producer)) or global_hooks_active():
        return False
    if not torch.is_grad_enabled() or transforms_active():
        return False
    if not all(type(a) is torch.Tensor for a in args):
        return False
    if _ALONE is None or sys.getrefcount(args[operand]) != _ALONE[0]:  # read before any local here holds it
        return False
    if len(args) == 2 and (args[0].shape != args[1].shape or args[0].dtype != args[1].dtype):
        return False
    if args[operand].is_leaf or args[operand]._base is not None:
        return False
    try:
        return _storage_users(args[operand]) == _ALONE[1]
    except Exception:  # a tensor without a plain storage: out of place
        return False


def write(op: str, args: list[Any], operand: int) -> Any:
    """The step's result written into ``args[operand]``."""
    target = args[operand]
    if op == "relu":
        return torch.relu_(target)
    return target.add_(args[1 - operand])
