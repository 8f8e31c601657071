"""The modules on the way to a layer placed by a node's ``module_path`` (``mlp`` of ``mlp.gate_proj``).

A :class:`Container` holds layers under plain names so that name-based tools read the paths they expect
(transformers' ``model.layers.0.mlp.gate_proj``); it runs nothing itself (the GraphModule or the block runs its
layers). It is built state like any other module: the build records it, and the stores record compares its
stores on every call, so a layer added to, removed from or replaced in it is found as on any module.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .._errors import HndlError, Problem

__all__ = ["Container", "place"]


class Container(nn.Module):
    """Layers under plain names on the way to a ``module_path``; has no forward of its own."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise HndlError(
            Problem(
                "E_RUNTIME",
                "a module_path container holds layers and runs nothing: call the GraphModule, or the layer itself",
                expected="a call of the model or of one of its layers",
                actual="Container.forward",
            )
        )


def place(holder: nn.Module, path: tuple[str, ...], module: nn.Module) -> None:
    """Register ``module`` at ``path`` below ``holder``, making a :class:`Container` for each missing name on the
    way (the check has refused overlapping paths, so each name on the way is a container or missing)."""
    for key in path[:-1]:
        child = holder._modules.get(key)
        if child is None:
            child = Container()
            holder.add_module(key, child)
        holder = child
    holder.add_module(path[-1], module)
