"""A built model's layers by node name: finding one (``GraphModule.layer``/``layer_name``) and putting another
module in its place (``GraphModule.replace_layer``, SPEC 11.2).

A node is named by its qualified name, as errors name it (``"hidden"``, ``"layers.0.gate_proj"``); a subgraph use
(``"layers.0"``) or a repeated ``graph`` node (``"layers"``) names its block. Each function takes the model (a
:class:`._built.BuiltModel` with its runtime started) first.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .._errors import HndlError, Problem
from ..naming import suggestion
from ._activation_wrappers import unwrap
from ._built import BuiltModel
from ._guards import bump
from ._per_step import adopt
from ._runtime import runtime_of

__all__ = ["layer", "node_path", "replace_layer"]


def _some(names: list[str]) -> str:
    return ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")


def node_path(model: BuiltModel, node: str) -> tuple[tuple[str, ...], Any]:
    """The path from ``model`` to node ``node``'s layer (``step.node.path``, a group's path) and the checked node.

    Raises:
        HndlError: E_REF when no node or subgraph use has that name (with the closest name).
    """
    plan = model.plan
    for step in plan.steps:
        if step.node.qualname == node:
            return step.node.path, step.node
    for group in plan.groups:
        if group.qualname == node:
            return group.path, group.node
        if group.node.qualname == node:
            return group.node.path, group.node
    names = [s.node.qualname for s in plan.steps] + [g.qualname for g in plan.groups]
    raise HndlError(
        Problem(
            "E_REF",
            f"graph '{model.graph.name}' has no node {node!r}",
            node=node if isinstance(node, str) else None,
            expected="a node's qualified name: " + _some(names),
            actual=repr(node),
            hint=suggestion(node, names) if isinstance(node, str) else None,
        )
    )


def layer(model: BuiltModel, node: str) -> nn.Module:
    """The live layer of node ``node``, wherever it is registered (see ``GraphModule.layer``).

    Raises:
        HndlError: E_REF for an unknown node; E_RUNTIME when its layer, or a module on the way, was removed.
    """
    path, checked = node_path(model, node)
    found = model.node_module(path)
    if found is None:
        raise HndlError(
            checked.problem("E_RUNTIME", f"the layer at '{'.'.join(path)}' (or a module on the way) was removed")
        )
    return found


def replace_layer(model: BuiltModel, node: str, module: nn.Module) -> None:
    """Make ``module`` node ``node``'s layer and its build (see ``GraphModule.replace_layer``): the next call
    validates, as the registration bumps the state version.

    Raises:
        HndlError: E_RUNTIME when no leaf node has that name (with the closest name), or the module holding its
            layer was removed.
    """
    step = next((s for s in model.plan.steps if s.node.qualname == node), None)
    if step is None:
        names = [s.node.qualname for s in model.plan.steps]
        raise HndlError(
            Problem(
                "E_RUNTIME",
                f"graph '{model.graph.name}' has no node {node!r} to replace",
                node=node,
                expected="a node name: " + _some(names),
                actual=node,
                hint=suggestion(node, names),
            )
        )
    path = step.node.path
    parent = unwrap(model.node_module(path[:-1]))
    if parent is None:
        raise HndlError(
            step.node.problem(
                "E_RUNTIME", f"the module holding this node's layer ('{'.'.join(path[:-1])}') was removed"
            )
        )
    runtime = runtime_of(model)
    with runtime.lock:
        adopt(module.modules(), runtime.per_step)  # it shares the model's per-step values
        model.build_state.adopt(".".join(path), module, step.node.qualname, step.node.op)
        parent.add_module(path[-1], module)  # PyTorch's registration hook gives a new state version
        bump(model)
