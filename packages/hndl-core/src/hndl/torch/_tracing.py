"""Whether a ``torch.func`` transform or a ``torch.compile`` trace is running: the runtime's shortcuts that read
a tensor's identity, version or reference count (the per-step tables, the in-place writes) step aside then,
because the tensors they see are a transform's wrappers or a tracer's stand-ins.

A leaf module (torch alone) so that layers and the generated call can both import it.
"""

from __future__ import annotations

import torch

__all__ = ["transforms_active"]

_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", None)
_compiling = getattr(torch.compiler, "is_compiling", None)


def transforms_active() -> bool:
    """True under ``torch.compile`` (or export) tracing or a ``torch.func`` transform, and on a torch that cannot
    tell (then the caller takes its plain path)."""
    # Compiling is asked first: Dynamo reads is_compiling() as a constant, while tracing the functorch query
    # (torch 2.4) is a graph break.
    return (_compiling is not None and _compiling()) or _functorch_active is None or _functorch_active()
