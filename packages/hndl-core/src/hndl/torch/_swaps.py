"""Layer swaps that well-known tools make in a built layer's place, taken as deliberate swaps (SPEC 11.2).

PEFT puts a tuner layer (``lora.Linear``) where a model had its ``nn.Linear``, ``quantize_dynamic`` a quantized
Linear, ``merge_and_unload`` the plain layer back. None of them knows about ``model.replace_layer``; without
this module each one was ``E_RUNTIME`` ("was replaced") at the first call. :func:`judge` asks each *acceptor*
of :data:`ACCEPTORS` (one function per family of tools) about a module of another class than the build's:

- ``None``: not of its family (the next acceptor is asked);
- a :class:`Verdict` whose ``refusal`` is ``None``: accepted, the module keeps the built layer's contract;
- a :class:`Verdict` with a ``refusal``: of its family, and why it does not keep the contract.

An acceptor recognises a family by what the layer exposes (a ``base_layer`` child; a callable ``weight()`` and
``in_features``/``out_features``), not by class names, so a tool's new layer class of the same shape is taken
too. *Keeps the contract* means, for every family: the layer still takes and gives what the built one did (the
same ``in_features`` and ``out_features``, read from the built tensors' shapes), computes in the dtype the build
gave (the built tensors' dtypes, which follow a conversion of the whole model), and, for a wrapper, the built
layer is reachable through it unchanged. A swap accepted here is adopted as the node's build (``BuildState.
adopt``, as ``replace_layer`` does) by the validation that found it, which then runs every node with its outputs
checked against the contracts; later edits are compared against the adopted record.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..naming import dtype_name

__all__ = ["ACCEPTORS", "Built", "Verdict", "class_name", "judge"]


@dataclass(frozen=True)
class Built:
    """What the build made at one path, as an acceptor reads it: the class, and each registered tensor's
    ``(shape, dtype)`` by its local name (``(None, None)`` where the build registered ``None``)."""

    type: type[nn.Module]
    tensors: Mapping[str, tuple[tuple[int, ...] | None, torch.dtype | None]]


@dataclass(frozen=True)
class Verdict:
    """An acceptor's answer for a module of its family.

    Attributes:
        family: the family's name, as messages say it ("a PEFT tuner layer").
        refusal: why the module does not keep the built layer's contract; ``None`` when it is accepted.
        held: the dotted path, inside the module, of the built layer it wraps (``"base_layer"``), or ``None``
            for a layer that stands alone. What lies there stays held to the build; a wrapper may later gain or
            drop whole entries of its own dict containers (PEFT's ``load_adapter``, ``delete_adapter``).
    """

    family: str
    refusal: str | None
    held: str | None = None


Acceptor = Callable[[Built, nn.Module], Verdict | None]


def class_name(cls: type) -> str:
    """``cls`` named so that a reader can tell two classes of one name apart: a torch class by its public name
    (``torch.nn.Linear``, ``torch.ao.nn.quantized.dynamic.Linear``: the shortest module path that exports it,
    as PyTorch's documentation names it), any other by where it is defined (``peft.tuners.lora.layer.Linear``)."""
    module, qualname = getattr(cls, "__module__", None) or "", cls.__qualname__
    if module == "torch" or module.startswith("torch."):
        parts = module.split(".")
        for end in range(1, len(parts)):
            if parts[end - 1].startswith("_"):
                break
            exported = sys.modules.get(".".join(parts[:end]))
            if exported is not None and getattr(exported, qualname, None) is cls:
                return f"{'.'.join(parts[:end])}.{qualname}"
    return f"{module}.{qualname}" if module else qualname


def _tensor(module: nn.Module, name: str) -> Any:
    """``module``'s registered tensor ``name`` as the layer reads it (a parametrized weight is computed)."""
    for store in (module._parameters, module._buffers):
        if name in store:
            return store[name]
    return getattr(module, name, _ABSENT)


_ABSENT: Any = object()


def _same_tensors(built: Built, module: nn.Module, whose: str) -> str | None:
    """Why ``module``'s tensors are not the built ones (by name, shape and dtype), or None when they are."""
    for name, (shape, dtype) in built.tensors.items():
        value = _tensor(module, name)
        if value is _ABSENT:
            return f"{whose} has no {name!r}"
        if shape is None:
            if value is not None:
                return f"{whose} has a {name!r} where the build had None"
            continue
        if not isinstance(value, torch.Tensor):
            return f"{whose} has no tensor {name!r}"
        if tuple(torch.Tensor.size(value)) != shape:
            return f"{whose} {name!r} has shape {list(torch.Tensor.size(value))}, the build made {list(shape)}"
        if dtype is not None and value.dtype != dtype:
            return f"{whose} {name!r} has dtype {dtype_name(value.dtype)}, the build made {dtype_name(dtype)}"
    return None


def _features(built: Built) -> tuple[int, int] | None:
    """The built layer's ``(in_features, out_features)``, read from its 2-d ``weight``; None without one."""
    shape = built.tensors.get("weight", (None, None))[0]
    return (shape[1], shape[0]) if shape is not None and len(shape) == 2 else None


def _advertised(module: nn.Module, features: tuple[int, int] | None) -> str | None:
    """Why ``module``'s own ``in_features``/``out_features`` (where it has them) are not the built layer's."""
    if features is None:
        return None
    for name, wanted in zip(("in_features", "out_features"), features):
        value = module.__dict__.get(name)
        if isinstance(value, int) and value != wanted:
            return f"it has {name}={value}, the build made {wanted}"
    return None


def tuner_layer(built: Built, module: nn.Module) -> Verdict | None:
    """PEFT's tuner layers (``peft.tuners.tuners_utils.BaseTunerLayer``: LoRA, IA3, ...) and any wrapper like
    them: a ``base_layer`` child holding the built layer, the wrapper adding its own modules beside it.

    Keeps the contract when the base layer (followed through nested wrappers, as PEFT's ``get_base_layer``
    does) is an instance of the built class with the built tensors' names, shapes and dtypes, and the wrapper's
    own ``in_features``/``out_features``, where it has them, are the built layer's."""
    base = module._modules.get("base_layer")
    if not isinstance(base, nn.Module):
        return None
    family = "a wrapper around the built layer (PEFT's tuner layers: base_layer)"
    held = "base_layer"
    inner = base._modules.get("base_layer")
    while isinstance(inner, nn.Module):  # a wrapper of a wrapper: PEFT's get_base_layer follows the chain too
        base, held, inner = inner, held + ".base_layer", inner._modules.get("base_layer")
    if not isinstance(base, built.type):
        return Verdict(family, f"its {held} is a {class_name(type(base))}", held)
    reason = _same_tensors(built, base, f"its {held}") or _advertised(module, _features(built))
    return Verdict(family, reason, held)


def quantized_linear(built: Built, module: nn.Module) -> Verdict | None:
    """A quantized Linear (``torch.ao.nn.quantized.Linear``, ``torch.ao.nn.quantized.dynamic.Linear``, as
    ``quantize_dynamic`` and eager-mode ``convert`` make them) or any layer like them: ``in_features``,
    ``out_features``, a callable ``weight()`` and ``bias()``.

    Keeps the contract in place of a linear layer (``nn.Linear`` or a subclass) with the same ``in_features``
    and ``out_features``, a bias where the build had one (none where it had none), and a float32 weight in the
    build: the quantized kernels take and give float32 (a dynamic layer) or quantized tensors (a static one,
    whose neighbours must quantize and dequantize; the validation's contract checks find a graph where they do
    not)."""
    kind = type(module)
    if not (
        callable(getattr(kind, "weight", None))
        and callable(getattr(kind, "bias", None))
        and isinstance(getattr(module, "in_features", None), int)
        and isinstance(getattr(module, "out_features", None), int)
    ):
        return None
    family = "a quantized linear layer"
    if not issubclass(built.type, nn.Linear):
        return Verdict(family, f"it stands for a linear layer, the build made {class_name(built.type)}")
    features = _features(built)
    assert features is not None  # an nn.Linear registers a 2-d weight
    got = (module.in_features, module.out_features)
    if got != features:
        return Verdict(family, f"it maps {got[0]} to {got[1]} features, the build made {features[0]} to {features[1]}")
    bias = module.bias()  # type: ignore[operator]
    if (bias is None) != (built.tensors.get("bias", (None, None))[0] is None):
        had = "no bias" if bias is None else "a bias"
        return Verdict(family, f"it has {had}, the build made {'one' if had == 'no bias' else 'none'}")
    dtype = built.tensors["weight"][1]
    if dtype is not None and dtype != torch.float32:
        return Verdict(
            family,
            f"its kernels compute in float32, the build's weight is {dtype_name(dtype)} (quantize a float32 model)",
        )
    return Verdict(family, None)


def unwrapped(built: Built, module: nn.Module, base: Built | None) -> Verdict | None:
    """The layer a wrapper held, put back in the wrapper's place (PEFT's ``merge_and_unload``, ``unload``):
    keeps the contract when it is an instance of the held layer's class with its tensors' names, shapes and
    dtypes. ``base`` is the held layer's record (None where the build at this path wraps nothing)."""
    if base is None or not isinstance(module, base.type):
        return None
    return Verdict("the layer its wrapper held", _same_tensors(base, module, "it"))


#: The acceptors :func:`judge` asks in turn, one per family (``unwrapped`` is asked first, with the held record).
ACCEPTORS: tuple[Acceptor, ...] = (tuner_layer, quantized_linear)


def judge(built: Built, module: nn.Module, base: Built | None = None) -> Verdict | None:
    """The first family's verdict on ``module`` in place of ``built`` (``base``: the layer a wrapper adopted
    there holds), or None when no family recognises it."""
    verdict = unwrapped(built, module, base)
    if verdict is not None:
        return verdict
    for acceptor in ACCEPTORS:
        verdict = acceptor(built, module)
        if verdict is not None:
            return verdict
    return None
