"""Layers whose ``forward`` the fast path writes out in place of calling it, and the adds and ReLUs among them
that may write into an input nobody else can see (:func:`in_place_steps`).

``torch.nn.Linear.forward`` is ``F.linear(input, self.weight, self.bias)``; called as a method it costs a
Python frame and, for each parameter, a trip through ``nn.Module.__getattr__``: about 0.4 us per linear layer,
as much as the whole stores comparison of a small model. For a few standard layers the generated call runs the
same functional call itself, reading the tensors from the layer's ``_parameters`` dict and its settings from
the layer's instance dict, where ``forward`` would have found them:

``F.linear(a0, p0['weight'], p0['bias']) if k0.forward is f0 else m0.forward(a0)``

``p0``/``d0`` are the layer's ``_parameters`` and ``__dict__``, bound when the stores record is taken (the record
compares them by identity on every call, so a replaced store dict never reaches this line). ``F`` is looked up
at call time, as ``forward`` does. The test ``k0.forward is f0`` keeps the class's current code authoritative: a
patched ``Linear.forward`` (or one patched before the build) runs instead. A layer is written out only when its
class is exactly one of the table's (a subclass, e.g. a parametrized or FSDP2 layer, calls its own
``forward``), it has no hook and was not compiled (those go through ``__call__``), its instance dict has no
``forward`` of its own, and each name the template reads is where ``forward`` would find it (a parameter
deleted and put back as a buffer is left to ``forward``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .. import ops as _ops  # noqa: F401  (the built-in ops, whose declarations _FRESH is derived from)
from .._plan import Plan
from .._registry import OpDef, registry
from .._saved import saves
from . import layers
from ._tracing import transforms_active

__all__ = ["InPlace", "Inline", "in_place_steps", "inline_for", "sole_owner", "sole_owner_with_grad"]


@dataclass(frozen=True)
class Inline:
    """How one layer class's ``forward`` reads, over ``{x}`` (the inputs, comma-separated; ``{x0}``, ``{x1}`` each
    one), ``{p}`` (``_parameters``) and ``{d}`` (the instance dict); ``original`` is the ``forward`` the template
    was written from, ``tensors`` and
    ``settings`` the names it reads from each."""

    template: str
    original: Any
    tensors: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    #: The form that may write into operand ``{t}`` (the other is ``{o}``) where ``{may}`` holds (see
    #: :func:`in_place_steps`); None for a layer that never does.
    in_place: str | None = None
    #: Whether that form also writes with no gradient recorded (ReLU's does not: see its row).
    in_place_without_grad: bool = True
    arity: int = 1  # how many inputs forward takes

    def reads_what_forward_reads(self, module: Any) -> bool:
        """Whether ``self.<name>`` in ``forward`` would find exactly what the template reads: each tensor in
        ``_parameters`` and not shadowed by an instance attribute (a buffer or plain tensor put in a deleted
        parameter's place is found by ``nn.Module.__getattr__`` elsewhere), each setting in the instance dict."""
        state = module.__dict__
        params = state.get("_parameters", {})
        return all(n in params and n not in state for n in self.tensors) and all(n in state for n in self.settings)


# Each template is its class's forward with ``self.<tensor>`` read from ``_parameters`` and ``self.<setting>``
# from the instance dict (torch 2.4-2.14 all define them so; a torch whose forward differs fails the identity
# test against the function captured here only if it was patched, so the templates are pinned by a test that
# compares their results with the class's forward).
_TABLE: dict[type, Inline] = {
    nn.Linear: Inline("F.linear({x}, {p}['weight'], {p}['bias'])", nn.Linear.forward, ("weight", "bias")),
    # ReLU writes in place only while gradients are recorded. Without them, written into its input, conv_stack
    # at batch 16 ran 6-15% slower (CPU time, the relu's input then lives on through the max-pool, and the next
    # convolution's output needs fresh memory), while ResNet-50 gained only 2% more than from its adds alone
    # (IMPLEMENTATION.md). With them the output lives on anyway (ReLU's backward keeps it), so in place saves
    # an allocation and a pass over memory, as torchvision's ``inplace=True``.
    nn.ReLU: Inline(
        "F.relu({x}, inplace={d}['inplace'])",
        nn.ReLU.forward,
        settings=("inplace",),
        in_place="(F.relu({t}, inplace=True) if ({may}) else F.relu({x}, inplace={d}['inplace']))",
        in_place_without_grad=False,
    ),
    layers.Add: Inline(
        "{x0} + {x1}",
        layers.Add.forward,
        in_place="({t}.add_({o}) if ({may}) and {t}.shape == {o}.shape and {t}.dtype == {o}.dtype else {x0} + {x1})",
        arity=2,
    ),
    nn.GELU: Inline("F.gelu({x}, approximate={d}['approximate'])", nn.GELU.forward, settings=("approximate",)),
    nn.LayerNorm: Inline(
        "F.layer_norm({x}, {d}['normalized_shape'], {p}['weight'], {p}['bias'], {d}['eps'])",
        nn.LayerNorm.forward,
        ("weight", "bias"),
        ("normalized_shape", "eps"),
    ),
    # The element-wise families (ops/_elementwise.py): one class per shape of forward, the function in its dict.
    layers.Mul: Inline("{x0} * {x1}", layers.Mul.forward, arity=2),
    layers.Unary: Inline("{d}['fn']({x}, **{d}['kwargs'])", layers.Unary.forward, settings=("fn", "kwargs")),
    layers.Binary: Inline("{d}['fn']({x0}, {x1})", layers.Binary.forward, settings=("fn",), arity=2),
    layers.TensorScalar: Inline(
        "{d}['fn']({x}, {d}['scalar'])", layers.TensorScalar.forward, settings=("fn", "scalar")
    ),
    layers.ScalarTensor: Inline(
        "{d}['fn']({d}['scalar'], {x})", layers.ScalarTensor.forward, settings=("fn", "scalar")
    ),
    # Activations of the vision models: a squeeze-and-excitation block runs one per block.
    nn.Sigmoid: Inline("{x}.sigmoid()", nn.Sigmoid.forward),
    nn.Tanh: Inline("{x}.tanh()", nn.Tanh.forward),
    nn.SiLU: Inline("F.silu({x}, inplace={d}['inplace'])", nn.SiLU.forward, settings=("inplace",)),
    nn.Hardswish: Inline("F.hardswish({x}, {d}['inplace'])", nn.Hardswish.forward, settings=("inplace",)),
    nn.Hardsigmoid: Inline("F.hardsigmoid({x}, {d}['inplace'])", nn.Hardsigmoid.forward, settings=("inplace",)),
    nn.ReLU6: Inline(
        "F.hardtanh({x}, {d}['min_val'], {d}['max_val'], {d}['inplace'])",
        nn.ReLU6.forward,
        settings=("min_val", "max_val", "inplace"),
    ),
    nn.Hardtanh: Inline(
        "F.hardtanh({x}, {d}['min_val'], {d}['max_val'], {d}['inplace'])",
        nn.Hardtanh.forward,
        settings=("min_val", "max_val", "inplace"),
    ),
    nn.LeakyReLU: Inline(
        "F.leaky_relu({x}, {d}['negative_slope'], {d}['inplace'])",
        nn.LeakyReLU.forward,
        settings=("negative_slope", "inplace"),
    ),
    nn.ELU: Inline("F.elu({x}, {d}['alpha'], {d}['inplace'])", nn.ELU.forward, settings=("alpha", "inplace")),
    nn.Mish: Inline("F.mish({x}, inplace={d}['inplace'])", nn.Mish.forward, settings=("inplace",)),
    layers.LayerNorm2d: Inline(
        "F.layer_norm({x}.permute(0, 2, 3, 1), {d}['normalized_shape'], {p}['weight'], {p}['bias'], "
        "{d}['eps']).permute(0, 3, 1, 2)",
        layers.LayerNorm2d.forward,
        ("weight", "bias"),
        ("normalized_shape", "eps"),
    ),
}


def inline_for(module: Any) -> Inline | None:
    """The template for ``module``'s forward, or None when it must be called (not exactly a table class, its
    class's ``forward`` is not the one the template was written from, or ``forward`` set on the instance)."""
    found = _TABLE.get(type(module))
    if found is None or type(module).forward is not found.original or "forward" in module.__dict__:
        return None
    # The record holds these dicts' names and the layer's attribute count from now on, so what is true here
    # stays true until the next install.
    return found if found.reads_what_forward_reads(module) else None


# --- writing into a value nobody else reads, when no gradient is recorded ---------------------------------------

# Layers whose forward returns a new tensor: never one of its inputs, a view of one, or a registered tensor
# (dropout returns its input in eval mode, a view op a view, a ``parameter`` node the weight itself). Derived from
# the built-in ops' declarations (``OpDef.returns``, see :func:`fresh_layers`). Layers with an ``inplace`` flag a
# user may set, and those returning their input, pass their input's privacy on instead (:func:`passing_layers`).
_FRESH: dict[type, Any] = {}


def layer_classes(paths: str | Sequence[str]) -> list[type]:
    """The classes an op's :attr:`hndl.OpDef.layer` names (one dotted path, or a tuple of them). Only ``torch``
    and ``hndl`` paths are resolved (nothing else is imported here); a path that does not resolve to a class
    names none."""
    found: list[type] = []
    for part in (paths,) if isinstance(paths, str) else paths:
        path, _, name = part.rpartition(".")
        if path.split(".")[0] not in ("torch", "hndl"):
            return []
        try:
            cls = getattr(importlib.import_module(path), name)
        except (ImportError, AttributeError, ValueError):
            return []
        if not isinstance(cls, type):
            return []
        found.append(cls)
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
_FRESH.update(fresh_layers(_BUILT_IN))
_PASSING: dict[type, Any] = passing_layers(_BUILT_IN)


#: What a producer's backward may keep (``hndl._saved.saves``) for its output to be written while gradients are
#: recorded: nothing of it.
KEEPS_NO_OUTPUT = ("none", "inputs")


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
    plan: Plan, leaves: Sequence[Any], forms: Sequence[Any], observed: Sequence[bool]
) -> dict[int, InPlace]:
    """The steps whose written-out form may write into an input, as torchvision's ``relu(inplace=True)`` and
    ``out += identity`` do, and in which modes.

    A step qualifies when its form has an in-place variant (hndl's Add, ReLU) and one input is *private*: made
    by an earlier step whose layer returns a new tensor and is not observed (``observed[i]``: the layer runs
    through ``nn.Module.__call__`` because a forward hook, a global module hook or ``compile()`` may see or
    replace its output), read by this step alone, and not a graph output. A layer that returns a new tensor or
    its input itself (a ReLU a user may set ``inplace``, dropout and ``drop_path`` in eval mode:
    :func:`passing_layers`) makes its output private when its input is. An add writes only where the operands
    already have the result's shape and dtype (checked on each call: under autocast the static dtypes do not
    hold), and every write only where, on that call, nothing but the generated frame holds the tensor or its
    memory (:func:`sole_owner`: a patched ``torch.nn.functional`` that returns its input or a weight).

    The modes:

    - ``without_grad`` (``torch.no_grad``, ``inference_mode``): adds, not ReLUs (slower in place there).
    - ``with_grad``: autograd may have kept the operand for backward, so the operand's producer must be one of
      the layers that return a new tensor (not one passing its input on) and its op must keep nothing of its
      output (``hndl._saved.saves``: ``none`` or ``inputs``, as a convolution, batch norm, linear or add; not a
      ReLU, sigmoid or softmax). No other op can have kept it: this step is its only reader. On the call,
      :func:`sole_owner_with_grad` adds that no ``torch.func`` transform or compile trace runs and that the
      tensor is a plain one autograd lets be written (not a view, not a leaf that requires grad).
    """
    readers = Counter(v for step in plan.steps for v in step.inputs)
    outputs = set(plan.output_ids)
    producer: dict[str, int] = {v: i for i, step in enumerate(plan.steps) for v in step.outputs}
    private: set[str] = set()  # values made new and read once, in step order

    def is_private(value: str) -> bool:
        return value in private and readers[value] == 1 and value not in outputs

    found: dict[int, InPlace] = {}
    for i, (step, module, form) in enumerate(zip(plan.steps, leaves, forms)):
        kind = type(module)
        if len(step.outputs) == 1 and module is not None and not observed[i]:
            fresh = _FRESH.get(kind) is kind.forward
            if _PASSING.get(kind) is kind.forward:
                fresh = len(step.inputs) == 1 and is_private(step.inputs[0])
            if fresh and "forward" not in module.__dict__:
                private.add(step.outputs[0])
        if not isinstance(form, Inline) or form.in_place is None:
            continue
        for operand, value in enumerate(step.inputs):
            if is_private(value) and step.inputs.count(value) == 1:
                made = producer[value]
                made_by = type(leaves[made])
                fresh_maker = _FRESH.get(made_by) is made_by.forward
                with_grad = fresh_maker and saves(plan.steps[made].node) in KEEPS_NO_OUTPUT
                if form.in_place_without_grad or with_grad:
                    found[i] = InPlace(operand, made_by, made_by.forward, form.in_place_without_grad, with_grad)
                    break
    return found


# --- is a tensor held by nobody but the generated call? -------------------------------------------------------

# The rule above is judged at install time from classes; a call can still break its premise without changing any
# class: a patched ``torch.nn.functional`` function returning its input (then the "new" value is the caller's
# tensor) or a weight, or returning a view or ``detach()`` of one, or keeping the result it returns. So the written
# operand is also checked on the call itself, by two counts that need no knowledge of how it was made:
# - Python references: a private value is held by the generated frame's local alone. The count that means
#   "alone" is measured once here, through the same call shape the generated line uses (a function's local passed
#   to a function that counts), so it follows the interpreter's own conventions for stack references.
# - Storage users: another tensor on the same memory (a view, ``detach()``, ``.data``) is one more user of the
#   storage than a tensor that owns its memory alone, measured the same way.
# Either count above its "alone" value means someone else can see the tensor: the add then runs out of place.


def _references(t: Any) -> int:
    return sys.getrefcount(t)


_use_count: Any = getattr(torch._C, "_storage_Use_Count", None)


def _storage_users(t: Any) -> int:
    return int(_use_count(t.untyped_storage()._cdata))


def _alone_counts() -> tuple[int, int] | None:
    if _use_count is None:  # a torch without the storage count: never write in place
        return None
    t = torch.empty(1)  # a local, as a value is in the generated call
    return _references(t), _storage_users(t)


_ALONE = _alone_counts()


def sole_owner(t: Any) -> bool:
    """Whether ``t`` (a local of the generated call) is held by that frame alone: no other Python reference to it,
    and no other tensor on its memory. Anything unusual (a tensor subclass without a plain storage) answers
    False, which only means out of place."""
    if _ALONE is None or sys.getrefcount(t) != _ALONE[0]:
        return False
    try:
        return _storage_users(t) == _ALONE[1]
    except Exception:
        return False


def sole_owner_with_grad(t: Any) -> bool:
    """:func:`sole_owner` while gradients are recorded, for a value whose producer keeps nothing of it: also a
    plain tensor, not a view (a write into one rebases autograd's record of its base), not a leaf that requires
    grad (autograd refuses the write), and no ``torch.func`` transform or compile trace running (its tensors are
    wrappers or stand-ins, whose counts mean something else)."""
    # The reference count is read first, before any other name here holds the tensor (the count sole_owner is
    # calibrated by: a local passed to a function that reads it).
    if _ALONE is None or sys.getrefcount(t) != _ALONE[0]:
        return False
    if type(t) is not torch.Tensor or transforms_active() or t._base is not None or (t.is_leaf and t.requires_grad):
        return False
    try:
        return _storage_users(t) == _ALONE[1]
    except Exception:
        return False
