"""What a graph builds into, as everything but the checked call reads it: the layers, the graph, the plan.

:class:`BuiltModel` is the part of a :class:`~hndl.torch.GraphModule` that the capabilities
(:mod:`hndl.torch.interop`, checkpointing, the summary) and the runtime (:mod:`._runtime`) depend on. They take
it as their type, so none of them imports ``_module``, not even for the type checker: the GraphModule imports
them, never the other way round.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from .._graph import Graph
from .._plan import Plan
from ._activation_wrappers import WRAPPED, unwrap
from ._state import BuildState

__all__ = ["BuiltModel"]


class BuiltModel(nn.Module):
    """A graph's layers (``nodes``, one module per node under ``n_<name>``, and the layers of nodes with a
    ``module_path`` at that path), the graph and its plan."""

    graph: Graph
    _plan: Plan
    _build_state: BuildState
    # Set by GraphModule (hndl/torch/_module.py), read by the runtime and the checkpointing capability.
    validations: int
    _checkpointed: frozenset[int]

    def __init__(self, plan: Plan, layers: nn.Module) -> None:
        super().__init__()
        # ``layers`` holds what the build placed at the root (``_build.build_nodes``): ``nodes`` first, then the
        # first names of the ``module_path`` of the root graph's nodes (``model``, ``lm_head``).
        for name, module in layers._modules.items():
            self.add_module(name, module)
        self.graph = plan.checked.graph
        self._plan = plan
        self._build_state = BuildState.take(self, plan)

    @property
    def plan(self) -> Plan:
        """The :class:`~hndl.Plan` this model runs: its leaf steps in order, input and output value ids, each
        value's last use and each node's spec location. Shared by the CLI and hndl-func; never changes."""
        return self._plan

    @property
    def build_state(self) -> BuildState:
        """What the build registered: every module, parameter and buffer with its shape, dtype and owning node.

        A validation compares the live tree with it (``E_RUNTIME`` on a mismatch); :func:`hndl.func.functional_call`
        checks parameter dicts against it. Dtypes follow a conversion of the whole model.
        """
        return self._build_state

    def node_module(self, path: Sequence[str]) -> nn.Module | None:
        """The live module at a node's path from this model (``step.node.path`` of a :attr:`plan` step:
        ``("nodes", "n_hidden")``, or a ``module_path``'s ``("model", "layers", "0", "mlp", "gate_proj")``), or
        ``None`` when something on the way was removed or set to ``None``. An activation wrapper on the way
        (``checkpoint_wrapper`` around a block) is seen through; one at the end is what is returned: it is what
        runs that node."""
        module: Any = self
        for key in path:
            if module is None:
                return None
            children = module._modules
            if WRAPPED in children:  # only then can it be a wrapper: the full test is for those few
                children = unwrap(module)._modules
            module = children.get(key)
        return module
