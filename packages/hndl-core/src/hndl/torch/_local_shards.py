"""The validation's view of tensor-parallel local shards (``hndl/torch/_tensor_parallel.py`` makes the plan).

With local outputs a column-parallel linear returns ``[B, out / world]`` on each rank, a plain tensor, where the
graph says ``[B, out]``. The validation (once per signature) checks the logical shape: a step whose layer holds
a ``DTensor`` weight sharded by rows (a column-parallel linear) and returns a plain tensor makes a value whose
last dim is local, one ``world``-th of it (:func:`local_factor`); a step whose output has its inputs' shape
(:func:`keeps_shape`) keeps that; the check multiplies the last dim back before comparing. Nothing of this runs on
the fast path. It lives apart from the planner so the validator does not import the planner.
"""

from __future__ import annotations

import sys
from typing import Any

from torch import nn

from .._plan import Step
from ._fsdp import fsdp_module_class

__all__ = ["SDPA_ON_DTENSOR_HINT", "keeps_shape", "local_factor"]

#: The hint for a layer that failed on DTensors in scaled_dot_product_attention (no CPU sharding rule in torch).
SDPA_ON_DTENSOR_HINT = (
    "torch has no sharding rule for scaled_dot_product_attention on DTensors on the CPU: keep the plan's local "
    "outputs (ColwiseParallel()/RowwiseParallel() as hndl.torch.tensor_parallel_plan gives them)"
)


def keeps_shape(step: Step) -> bool:
    """Whether the step is element-wise in shape: one output, with the static shape of each tensor input."""
    node = step.node
    if len(node.out_types) != 1 or not node.in_types:
        return False
    out = node.out_types[0].shape
    return out is not None and all(t.shape == out for t in node.in_types)


def _dtensor_class() -> type | None:
    for name in ("torch.distributed.tensor", "torch.distributed._tensor"):
        found = getattr(sys.modules.get(name), "DTensor", None)
        if isinstance(found, type):
            return found
    return None


def local_factor(module: Any, output: Any) -> int:
    """How many ranks share a column-parallel layer's output dim: the size of the mesh its weight is sharded
    over by rows, when ``output`` is the plain local tensor (1 otherwise)."""
    dtensor = _dtensor_class()
    if dtensor is None or isinstance(output, dtensor):
        return 1
    weight: Any = getattr(module, "_parameters", {}).get("weight")
    if not isinstance(weight, dtensor) or not isinstance(module, (nn.Linear, nn.Embedding)):
        return 1
    fsdp = fsdp_module_class()
    if fsdp is not None and isinstance(module, fsdp):
        return 1  # FSDP2 shards a weight by rows too, but gathers it for the call: the output is whole
    dim = 0 if isinstance(module, nn.Linear) else 1  # the weight dim that holds the output features
    sharded: Any = weight
    factor = 1
    for mesh_dim, placement in enumerate(sharded.placements):
        if getattr(placement, "dim", None) == dim and placement.is_shard():
            factor *= sharded.device_mesh.size(mesh_dim)
    return factor
