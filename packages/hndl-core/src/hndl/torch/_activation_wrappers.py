"""torch's activation wrappers (``checkpoint_wrapper``, ``offload_wrapper``) seen through, as their own tools do.

``torch.distributed.algorithms._checkpoint.checkpoint_wrapper.ActivationWrapper`` puts a layer under one child,
``_checkpoint_wrapped_module``, and hides that child from ``state_dict`` and from its own ``named_parameters``:
``apply_activation_checkpointing`` swaps layers for wrappers in place. A wrapper owns no parameter or buffer of
its own and changes only *how* its layer runs (recomputed in backward, saved tensors offloaded), never what it
computes, so hndl treats it as transparent: the built layer (or block) below it is what the state check compares,
and the wrapper is what the call runs.
"""

from __future__ import annotations

from typing import Any

from torch import nn

__all__ = ["WRAPPED", "is_activation_wrapper", "unwrap"]

#: The attribute under which an activation wrapper holds its layer (torch's ``_CHECKPOINT_WRAPPED_MODULE``).
WRAPPED = "_checkpoint_wrapped_module"


def _wrapper_class() -> type[nn.Module] | None:
    try:  # a torch built without torch.distributed has no wrappers to see through
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import ActivationWrapper
    except ImportError:
        return None
    return ActivationWrapper


_WRAPPER = _wrapper_class()


def is_activation_wrapper(module: Any) -> bool:
    """Whether ``module`` is one of torch's activation wrappers holding a module."""
    # The child slot first: a dict lookup that fails for nearly every module, where ``isinstance`` against
    # ``ActivationWrapper`` (an ABC) goes through ``ABCMeta.__instancecheck__``; a build asks this of every layer.
    state = getattr(module, "__dict__", None)
    children = state.get("_modules") if isinstance(state, dict) else None
    if not isinstance(children, dict) or not isinstance(children.get(WRAPPED), nn.Module):
        return False
    return _WRAPPER is not None and isinstance(module, _WRAPPER)


def unwrap(module: Any) -> Any:
    """The module below any activation wrappers around ``module`` (``module`` itself when there are none)."""
    while is_activation_wrapper(module):
        module = module._modules[WRAPPED]
    return module
