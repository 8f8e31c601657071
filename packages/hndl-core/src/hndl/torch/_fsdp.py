"""FSDP2's mixed precision as the runtime check sees it.

``fully_shard(module, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))`` keeps each parameter sharded
in its original dtype between calls and, while the unit runs, registers the unsharded parameter in
``param_dtype`` under the same name (a hookless ``_parameters`` write), after casting the unit's floating inputs to
that dtype. To the build those are the same parameters, computed in another dtype on purpose: the state check
accepts a managed parameter in its unit's ``param_dtype`` as well as the built dtype, and the input check accepts
inputs in it. Everything else (a parameter removed, set to ``None``, of another shape, or of a third dtype) is
still a change. FSDP is only looked at when the process imported it: a model that was never sharded pays nothing.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

__all__ = ["cast_dtypes", "fsdp_module_class", "reshard_after_failure"]


def fsdp_module_class() -> type | None:
    """FSDP2's ``FSDPModule`` class, when the process imported FSDP2 (None otherwise)."""
    for name in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        found = getattr(sys.modules.get(name), "FSDPModule", None)
        if isinstance(found, type):
            return found
    return None


def _param_dtype(unit: Any) -> torch.dtype | None:
    try:
        policy = unit._get_fsdp_state()._mp_policy
    except Exception:  # a torch whose FSDP2 keeps its policy elsewhere: no cast is assumed
        return None
    dtype = getattr(policy, "param_dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def cast_dtypes(root: nn.Module) -> dict[int, torch.dtype]:
    """``id(module) -> dtype`` for every module of ``root``'s tree whose parameters an FSDP2 unit registers in
    another dtype while it runs (the unit's ``MixedPrecisionPolicy.param_dtype``; a nested unit's own policy
    governs its subtree). Empty when FSDP2 was never imported or no unit casts."""
    fsdp_module = fsdp_module_class()
    if fsdp_module is None:
        return {}
    found: dict[int, torch.dtype] = {}
    stack: list[tuple[nn.Module, torch.dtype | None]] = [(root, None)]
    while stack:
        module, inherited = stack.pop()
        dtype = _param_dtype(module) if isinstance(module, fsdp_module) else inherited
        if dtype is not None:
            found[id(module)] = dtype
        stack.extend((child, dtype) for child in module._modules.values() if child is not None)
    return found


def reshard_after_failure(root: nn.Module) -> None:
    """Put back the sharded parameters of the FSDP2 units of ``root``'s tree after a call that raised.

    A unit's pre-forward hook registers the gathered (unsharded) parameters, and only its post-forward hook, which
    a raising forward never reaches, puts the sharded ones back: after an ``E_INPUT`` the model's ``parameters()``
    would be the gathered copies, and an optimizer or ``get_state_dict`` made then would hold the wrong tensors.
    hndl promises that an error leaves the model as it was, so it does what FSDP documents for an exception
    (``reset_iter_state()`` on the root unit, torch 2.13 and later; before that, each unit's ``reshard()``). When
    the FSDP root is a module above the GraphModule, hndl cannot reach it: call its ``reset_iter_state()``."""
    fsdp_module = fsdp_module_class()
    if fsdp_module is None:
        return
    for module in root.modules():
        if not isinstance(module, fsdp_module):
            continue
        unit: Any = module
        try:
            state = unit._get_fsdp_state()
            if hasattr(unit, "reset_iter_state"):
                if getattr(state, "_is_root", False):
                    unit.reset_iter_state()
            else:
                unit.reshard()
        except Exception:  # a unit FSDP never initialised (the call failed before its lazy init)
            pass
