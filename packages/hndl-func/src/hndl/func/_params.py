"""What a parameter dict for a model must look like: shapes from the build, for hypernetworks and friends."""

from __future__ import annotations

import torch
from torch import nn

from hndl.torch import GraphModule

__all__ = ["param_shapes"]


def param_shapes(model: nn.Module, *, buffers: bool = False) -> dict[str, torch.Size]:
    """The shape of every parameter (and buffer) a dict for :func:`hndl.func.functional_call` must hold.

    For a GraphModule the shapes come from the build, so they hold for the ``meta`` base of an ensemble
    and for a model whose tensors are swapped out. Tied tensors appear once, under their first name (with
    ``tie_weights=True`` that value stands for every name). The order is ``named_parameters()`` order, then
    buffers, so a hypernetwork can split one flat output vector in that order.

    Args:
        model: a GraphModule, or any ``nn.Module`` (then the live shapes are used).
        buffers: include buffers after the parameters.

    Returns:
        ``{name: torch.Size}``.

    Example:
        >>> shapes = hndl.func.param_shapes(model)  # doctest: +SKIP
        >>> sizes = [s.numel() for s in shapes.values()]  # doctest: +SKIP
        >>> params = dict(zip(shapes, (c.view(s) for c, s in zip(flat.split(sizes), shapes.values()))))  # doctest: +SKIP
    """
    state = model.build_state if isinstance(model, GraphModule) else None
    items: list[tuple[str, torch.Tensor]] = list(model.named_parameters())
    if buffers:
        items += list(model.named_buffers())
    shapes: dict[str, torch.Size] = {}
    for name, tensor in items:
        slot = state.tensors.get(name) if state is not None else None
        shape = slot.shape if slot is not None and slot.shape is not None else tuple(tensor.shape)
        shapes[name] = torch.Size(shape)
    return shapes
