"""When a step may write its result into an operand's storage, as torchvision's ``relu(inplace=True)`` and
``out += identity`` do: the one rule that the fast path's generated call (:func:`in_place_steps`, written out by
``_codegen``) and a block run through its ``forward`` (``_block_in_place``, checkpointed or hooked) both follow.

Writing in place is exact (the same kernel's arithmetic into other memory; ``a + b`` and ``b + a`` are the same
IEEE sum) and saves an allocation and a pass over memory per step. It is allowed only where nobody else can see
the operand, judged in three parts:

- **Which operand** (:func:`chosen_operands`, from the steps alone): one the step reads alone, once, made by an
  earlier step with one output, and not on the boundary (a graph's or block's inputs and outputs belong to the
  caller; a checkpoint keeps a block's inputs to recompute from). Of several, the first whose producer keeps
  nothing of its output for backward (:func:`keeps_no_output`), so that the step may write into it while gradients
  are recorded too; else the first.
- **In which modes** (:func:`write_modes`, from the layers): the step's layer is a :data:`WRITERS` class with its
  class's own ``forward``. With no gradient recorded (``torch.no_grad``, ``inference_mode``) an add writes, a ReLU
  does not: written into its input it ran 6-15% slower there (IMPLEMENTATION.md). While gradients are recorded,
  autograd may have kept the operand for backward, so its producer must be a layer that returns a new tensor
  (:data:`FRESH`, not one passing its input on) whose op keeps nothing of its output (``none`` or ``inputs``: a
  convolution, batch norm, linear or add; not a ReLU, sigmoid or softmax). No other op can have kept it: the step
  is its only reader. Neither layer may be observed: a hook may keep the output, a full backward hook wraps it.
- **On the call** (:func:`sole_owner`, :func:`sole_owner_with_grad`): nothing but the running frame holds the
  tensor or its memory (a patched ``torch.nn.functional`` may return its input, a view or a weight), and while
  gradients are recorded it is a plain tensor autograd lets be written, with no ``torch.func`` transform or
  compile trace running. An add also needs both operands of the result's shape and dtype (under autocast the
  static dtypes do not hold).

The fast path judges the layers once per generated call (any change to them generates it again); a block judges
them on every call, since its layers are looked up as it runs. A block writes only while gradients are recorded.
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import torch
from torch import nn

from .. import ops as _ops  # noqa: F401  (the built-in ops, whose declarations FRESH is derived from)
from .._autograd_facts import saves
from .._checked import CheckedNode
from .._op_imports import layer_class
from .._plan import Plan, Step
from .._registry import OpDef, registry
from . import layers
from ._guards import global_hooks_active, hook_dicts
from ._tracing import transforms_active

__all__ = [
    "FRESH",
    "KEEPS_NO_OUTPUT",
    "PASSING",
    "WRITERS",
    "InPlace",
    "chosen_operands",
    "fresh_layers",
    "in_place_steps",
    "keeps_no_output",
    "layer_classes",
    "makes_new",
    "observed",
    "passing_layers",
    "sole_owner",
    "sole_owner_with_grad",
    "write_modes",
    "writer_ops",
]

#: The layers whose step may write its result into an operand: ``{class: (the forward the rule was judged by,
#: whether it writes with no gradient recorded too)}``. A ReLU does not (see the module docstring).
WRITERS: dict[type, tuple[Any, bool]] = {
    nn.ReLU: (nn.ReLU.forward, False),
    layers.Add: (layers.Add.forward, True),
}

#: What a producer's backward may keep (``hndl._autograd_facts.saves``) for its output to be written while
#: gradients are recorded: nothing of it.
KEEPS_NO_OUTPUT = ("none", "inputs")


# --- which layers return a new tensor -----------------------------------------------------------------------------


def layer_classes(paths: str | Sequence[str]) -> list[type]:
    """The classes an op's :attr:`hndl.OpDef.layer` names (one dotted path, or a tuple of them). Only ``torch``
    and ``hndl`` paths are resolved (nothing else is imported here); a path that does not resolve to a class
    names none."""
    found: list[type] = []
    for part in (paths,) if isinstance(paths, str) else paths:
        if part.split(".")[0] not in ("torch", "hndl"):
            return []
        try:
            found.append(layer_class(part))  # the builders' own resolver, cached
        except (ImportError, AttributeError, ValueError):
            return []
    return found


def _returns_by_class(opdefs: Sequence[OpDef]) -> dict[type, set[str]]:
    facts: dict[type, set[str]] = {}
    for opdef in opdefs:
        for cls in layer_classes(opdef.layer_paths):
            facts.setdefault(cls, set()).add(opdef.returns)
    return facts


def fresh_layers(opdefs: Sequence[OpDef]) -> dict[type, Any]:
    """``{class: class.forward}`` for the layer classes that return a new tensor: built by ops that declare
    ``returns="new"`` and by no op that declares anything else, and without an ``inplace`` flag a user may set."""
    return {
        cls: cls.forward  # type: ignore[attr-defined]  # layer classes: nn.Module subclasses
        for cls, returns in _returns_by_class(opdefs).items()
        if returns == {"new"} and "inplace" not in inspect.signature(cls).parameters
    }


def passing_layers(opdefs: Sequence[OpDef]) -> dict[type, Any]:
    """``{class: class.forward}`` for the layer classes whose one output is a new tensor or their input itself:
    built by ops that declare ``returns="input"`` (dropout and ``drop_path`` in eval mode, ``identity``, a
    ``cast`` to the same dtype), or ``returns="new"`` with an ``inplace`` flag a user may set (ReLU, Hardswish,
    ...). Their output is private exactly when their input is."""
    return {
        cls: cls.forward  # type: ignore[attr-defined]
        for cls, returns in _returns_by_class(opdefs).items()
        if returns <= {"input", "new"} and ("input" in returns or "inplace" in inspect.signature(cls).parameters)
    }


# Built-in ops only: a plugin's ops may or may not be loaded when this module is imported, and its layers are
# called, never written into, which is always safe.
_BUILT_IN = [o for o in registry.registered() if o.build.__module__.startswith("hndl.ops.")]
#: The layers that return a new tensor: never one of their inputs, a view of one, or a registered tensor (dropout
#: returns its input in eval mode, a view op a view, a ``parameter`` node the weight itself).
FRESH: dict[type, Any] = fresh_layers(_BUILT_IN)
#: The layers that return a new tensor or their input, passing their input's privacy on.
PASSING: dict[type, Any] = passing_layers(_BUILT_IN)
#: The ops whose built-in layer may write in place (by their declared layer classes): a block's static filter.
_WRITER_OPS = frozenset(o.name for o in _BUILT_IN if set(layer_classes(o.layer_paths)) & set(WRITERS))
#: The ops whose every declared layer returns a new tensor.
_FRESH_OPS = frozenset(
    o.name for o in _BUILT_IN if (found := layer_classes(o.layer_paths)) and all(c in FRESH for c in found)
)


def makes_new(module: Any) -> bool:
    """Whether ``module`` is exactly one of the :data:`FRESH` classes, with its class's own ``forward``."""
    made = type(module)
    return FRESH.get(made) is getattr(made, "forward", None) and "forward" not in getattr(module, "__dict__", {})


def keeps_no_output(node: CheckedNode) -> bool:
    """Whether ``node``'s op returns a new tensor and keeps nothing of it for backward: its output may be written
    while gradients are recorded, by the step that alone reads it."""
    return node.op in _FRESH_OPS and saves(node) in KEEPS_NO_OUTPUT


# --- which operand ------------------------------------------------------------------------------------------------


def reader_counts(steps: Sequence[Step]) -> Counter[str]:
    """How many step inputs read each value."""
    return Counter(chain.from_iterable(step.inputs for step in steps))


def chosen_operands(
    steps: Sequence[Step],
    boundary: Sequence[str],
    usable: Callable[[int], bool] | None = None,
    readers: Counter[str] | None = None,
) -> list[tuple[int, int]]:
    """Per step, ``(operand, producer)``: the input it would write into and the position of the step that made
    it, or ``(-1, -1)`` (the first part of the rule in the module docstring). ``usable(producer)`` may rule out a
    producer the caller already knows to be observed; ``readers``: :func:`reader_counts` of ``steps``, where
    the caller has it."""
    if readers is None:
        readers = reader_counts(steps)
    outside = set(boundary)
    made_by: dict[str, int] = {}
    found: list[tuple[int, int]] = []
    for position, step in enumerate(steps):
        candidates = [
            (operand, made_by[value])
            for operand, value in enumerate(step.inputs)
            if value in made_by
            and value not in outside
            and readers[value] == 1
            and len(steps[made_by[value]].outputs) == 1
            and (usable is None or usable(made_by[value]))
        ]
        best = next((c for c in candidates if keeps_no_output(steps[c[1]].node)), None)
        found.append(best or (candidates[0] if candidates else (-1, -1)))
        for value in step.outputs:
            made_by[value] = position
    return found


def writer_ops() -> frozenset[str]:
    """The built-in ops whose layer may write in place (``relu``, ``add``)."""
    return _WRITER_OPS


# --- in which modes -----------------------------------------------------------------------------------------------


def write_modes(writer: Any, producer: Any, producer_keeps_no_output: bool) -> tuple[bool, bool]:
    """``(with no gradient recorded, while gradients are recorded)``: whether the step whose layer is ``writer``
    may write into the operand ``producer`` made (the second part of the rule). ``producer_keeps_no_output`` is
    :func:`keeps_no_output` of the producer's node; the caller has checked that neither layer is observed
    (:func:`observed`) and that the operand is private."""
    entry = WRITERS.get(type(writer))
    if entry is None or type(writer).forward is not entry[0] or "forward" in writer.__dict__:
        return False, False
    return entry[1], producer_keeps_no_output and makes_new(producer)


def observed(module: Any) -> bool:
    """Whether a call of ``module`` may be seen: it runs through ``nn.Module.__call__`` because of a forward or
    backward hook (its own or a global one) or ``compile()``, or has a ``forward`` of its own. The fast path
    reads the same facts once per generated call (``_runtime``'s ``hooked``); a block asks on every call."""
    return (
        global_hooks_active()
        or any(hook_dicts(module))
        or module.__dict__.get("_compiled_call_impl") is not None
        or "forward" in module.__dict__
    )


@dataclass(frozen=True)
class InPlace:
    """A step that may write into one of its inputs: which one, the producer of that input (its class and the
    ``forward`` it was judged by, compared again on every call: a class patched to return its input then stops
    the write), and in which of the two modes it may."""

    operand: int
    producer: type
    producer_forward: Any
    without_grad: bool = True  # with no gradient recorded
    with_grad: bool = False  # while gradients are recorded


def in_place_steps(
    plan: Plan, leaves: Sequence[Any], forms: Sequence[Any], observed_steps: Sequence[bool]
) -> dict[int, InPlace]:
    """The fast path's steps that may write into an input, and in which modes: those whose form has an in-place
    variant (``forms[i].in_place``: hndl's Add, ReLU) and whose chosen operand is *private*: made by an earlier
    step whose layer returns a new tensor and is not observed (``observed_steps[i]``, :func:`observed`: the layer runs through
    ``nn.Module.__call__`` because a forward hook, a global module hook or ``compile()`` may see or replace its
    output). A layer that returns a new tensor or its input itself (a ReLU a user may set ``inplace``, dropout and
    ``drop_path`` in eval mode: :func:`passing_layers`) makes its output private when its input is; such a
    producer allows the write with no gradient recorded only."""
    readers = reader_counts(plan.steps)
    private = _private_values(plan, leaves, observed_steps, readers)
    boundary = (*plan.input_ids, *plan.output_ids)
    chosen = chosen_operands(plan.steps, boundary, lambda p: plan.steps[p].outputs[0] in private, readers)
    found: dict[int, InPlace] = {}
    for i, (operand, producer) in enumerate(chosen):
        if operand < 0 or getattr(forms[i], "in_place", None) is None or observed_steps[i]:
            continue
        made = plan.steps[producer].node
        without_grad, with_grad = write_modes(leaves[i], leaves[producer], keeps_no_output(made))
        if without_grad or with_grad:
            made_by = type(leaves[producer])
            found[i] = InPlace(operand, made_by, made_by.forward, without_grad, with_grad)
    return found


def _private_values(
    plan: Plan, leaves: Sequence[Any], observed_steps: Sequence[bool], readers: Counter[str]
) -> set[str]:
    """The values made new (or passed on from a private value) by an unobserved layer and read once, by a step
    that is not a graph output: in step order, so a passing layer sees its input's answer."""
    outputs = set(plan.output_ids)
    private: set[str] = set()
    for i, (step, module) in enumerate(zip(plan.steps, leaves)):
        if len(step.outputs) != 1 or module is None or observed_steps[i] or "forward" in module.__dict__:
            continue
        kind = type(module)
        fresh = FRESH.get(kind) is kind.forward
        if PASSING.get(kind) is kind.forward:
            (value,) = step.inputs if len(step.inputs) == 1 else ("",)
            fresh = value in private and readers[value] == 1 and value not in outputs
        if fresh:
            private.add(step.outputs[0])
    return private


# --- is a tensor held by nobody but the running frame? -------------------------------------------------------------

# The rule above is judged from classes; a call can still break its premise without changing any class: a patched
# ``torch.nn.functional`` function returning its input (then the "new" value is the caller's tensor) or a weight,
# or returning a view or ``detach()`` of one, or keeping the result it returns. So the written operand is also
# checked on the call itself, by two counts that need no knowledge of how it was made:
# - Python references: a private value is held by the running frame alone (a local of the generated call, an item
#   of a block's argument list). The count that means "alone" is measured once here, through the same call shape
#   the caller uses, so it follows the interpreter's own conventions for stack references.
# - Storage users: another tensor on the same memory (a view, ``detach()``, ``.data``) is one more user of the
#   storage than a tensor that owns its memory alone, measured the same way.
# Either count above its "alone" value means someone else can see the tensor: the step then runs out of place.


def _references(t: Any) -> int:
    return sys.getrefcount(t)


_use_count: Any = getattr(torch._C, "_storage_Use_Count", None)


def _storage_users(t: Any) -> int:
    return int(_use_count(t.untyped_storage()._cdata))


def _alone_as_local() -> tuple[int, int] | None:
    if _use_count is None:  # a torch without the storage count: never write in place
        return None
    t = torch.empty(1)  # a local, as a value is in the generated call
    return _references(t), _storage_users(t)


def _alone_in_a_list() -> tuple[int, int] | None:
    if _use_count is None:
        return None
    args = [torch.empty(1)]  # an item of the argument list, as a block holds its step's operands
    return _references(args[0]), _storage_users(args[0])


#: The counts of a tensor held by one local, and by one list item, alone, read by a function it is passed to.
ALONE_AS_LOCAL = _alone_as_local()
ALONE_IN_A_LIST = _alone_in_a_list()


def sole_owner(t: Any, alone: tuple[int, int] | None = ALONE_AS_LOCAL) -> bool:
    """Whether ``t`` (a local of the generated call; with ``alone`` :data:`ALONE_IN_A_LIST`, an item of a list) is
    held by that frame alone: no other Python reference to it, and no other tensor on its memory. Anything unusual
    (a tensor subclass without a plain storage) answers False, which only means out of place."""
    if alone is None or sys.getrefcount(t) != alone[0]:
        return False
    try:
        return _storage_users(t) == alone[1]
    except Exception:
        return False


def sole_owner_with_grad(t: Any, alone: tuple[int, int] | None = ALONE_AS_LOCAL) -> bool:
    """:func:`sole_owner` while gradients are recorded, for a value whose producer keeps nothing of it: also a
    plain tensor, not a view (a write into one rebases autograd's record of its base), not a leaf that requires
    grad (autograd refuses the write), and no ``torch.func`` transform or compile trace running (its tensors are
    wrappers or stand-ins, whose counts mean something else)."""
    # The reference count is read first, before any other name here holds the tensor (the count is calibrated
    # so: a local, or a list item, passed to a function that reads it).
    if alone is None or sys.getrefcount(t) != alone[0]:
        return False
    if type(t) is not torch.Tensor or transforms_active() or t._base is not None or (t.is_leaf and t.requires_grad):
        return False
    try:
        return _storage_users(t) == alone[1]
    except Exception:
        return False
