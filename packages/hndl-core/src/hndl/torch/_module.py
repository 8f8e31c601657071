"""GraphModule: the ``torch.nn.Module`` a graph builds into.

(Foundation version: plain interpretation of the checked graph. The checked runtime replaces ``forward``.)
"""

from __future__ import annotations

from typing import Any

from torch import nn

from .._check import CheckedGraph, flatten, resolve_outputs
from .._errors import HndlError, Problem
from .._graph import Graph
from ._state import BuildState


class GraphModule(nn.Module):
    """A built graph: ``nodes`` holds one torch module per node (key ``n_<name>``)."""

    def __init__(self, graph: Graph, checked: CheckedGraph, nodes: nn.ModuleDict) -> None:
        super().__init__()
        self.nodes = nodes
        self.graph = graph
        self._checked = checked
        self._steps = flatten(checked)
        self._input_names = tuple(checked.input_names)
        self._output_ids = tuple(resolve_outputs(checked))
        self._build_state = BuildState.take(self, checked)

    def _module_at(self, path: tuple[str, ...]) -> nn.Module:
        module: Any = self.nodes
        for key in path:
            module = module[int(key)] if isinstance(module, nn.ModuleList) else module[key]
        return module

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        names = self._input_names
        if len(args) > len(names):
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"graph '{self.graph.name}' takes {len(names)} inputs, got {len(args)}",
                    expected=", ".join(names),
                    actual=f"{len(args)} positional",
                )
            )
        values = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise HndlError(Problem("E_INPUT", f"unknown input {key!r}", node=key, expected=", ".join(names)))
            if key in values:
                raise HndlError(Problem("E_INPUT", f"input {key!r} given twice", node=key))
            values[key] = value
        missing = [n for n in names if n not in values]
        if missing:
            raise HndlError(
                Problem("E_INPUT", f"missing input {missing[0]!r}", node=missing[0], expected=", ".join(names))
            )
        return tuple(values[n] for n in names)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        inputs = self._bind(args, kwargs)
        env: dict[str, Any] = dict(zip(self._checked.input_ids, inputs))
        for step in self._steps:
            module = self._module_at(step.node.path)
            result = module(*(env[v] for v in step.inputs))
            if len(step.outputs) == 1:
                env[step.outputs[0]] = result
            else:
                env.update(zip(step.outputs, result))
        outs = tuple(env[v] for v in self._output_ids)
        return outs[0] if len(outs) == 1 else outs


__all__ = ["GraphModule"]
