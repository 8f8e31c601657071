"""Tensor parallelism read off the graph: the textbook plan, and the validation's view of local shards.

**The plan.** Megatron's split of a block: the linears that feed an MLP's element-wise middle are cut by output
features (column-parallel), and the one linear that reads it back is cut by input features (row-parallel), so
the only communication is one all-reduce after the row-parallel linear. The graph says which linears those are:
a row-parallel candidate is a ``linear`` whose input is made, through element-wise steps only (a step whose
output has its inputs' shape: an activation, a ``mul`` of two branches as in SwiGLU, dropout), by other
``linear`` steps and nothing else, none of those values read outside the group. An ``attention`` node with
separate projections (``fused: false``) is cut the same way inside: ``q_proj``, ``k_proj`` and ``v_proj``
column-parallel, ``o_proj`` row-parallel, each rank holding ``num_heads / world`` query heads (and as many
key/value heads); its forward reads the head count from the projections' output, not from its settings.
GPT-2's fused ``qkv`` cannot be cut by columns (each rank would get part of q and k), so such a node is left
whole. :func:`tensor_parallel_plan` returns ``{module name: ColwiseParallel() | RowwiseParallel()}`` for
``torch.distributed.tensor.parallel.parallelize_module``, with torch's default local outputs.

**Local shards in the checks.** With local outputs a column-parallel linear returns ``[B, out / world]`` on each
rank, a plain tensor, where the graph says ``[B, out]``. The validation (once per signature) checks the logical
shape: a step whose layer holds a ``DTensor`` weight sharded by rows (a column-parallel linear) and returns a
plain tensor makes a value whose last dim is local, one ``world``-th of it; a step whose output has its inputs'
shape keeps that; the check multiplies the last dim back before comparing (:func:`local_factor`). Nothing of
this runs on the fast path.

Torch has no sharding rule for ``scaled_dot_product_attention`` on DTensors on the CPU: with
``use_local_output=False`` an attention layer gets DTensors and fails there; the default local outputs avoid it
(the error hint says so).
"""

from __future__ import annotations

import sys
from collections import Counter
from typing import TYPE_CHECKING, Any

from torch import nn

from .._errors import HndlError, Problem
from .._plan import Step
from ._fsdp import fsdp_module_class

if TYPE_CHECKING:
    from ._module import GraphModule

__all__ = ["SDPA_ON_DTENSOR_HINT", "keeps_shape", "local_factor", "tensor_parallel_plan"]

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


def _module_name(model: GraphModule, step: Step, attr: str | None = None) -> str:
    parts = ["nodes", *step.node.path]
    if attr:
        parts.append(attr)
    return ".".join(parts)


def tensor_parallel_plan(model: GraphModule, world_size: int | None = None) -> dict[str, Any]:
    """The tensor-parallel plan of ``model`` for ``parallelize_module``: see the module docstring.

    Args:
        world_size: the tensor-parallel degree; when given, every size that is cut must divide by it.

    Raises:
        HndlError: ``E_PARAM`` naming the node when a cut size does not divide by ``world_size``.
    """
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    plan = model.plan
    steps = plan.steps
    made_by = {v: i for i, s in enumerate(steps) for v in s.outputs}
    readers = Counter(v for s in steps for v in s.inputs)
    outputs = set(plan.output_ids)
    modules: list[Any] = [model.node_module(s.node.path) for s in steps]
    found: dict[str, Any] = {}
    problems: list[Problem] = []

    def check_divides(step: Step, size: int, what: str) -> None:
        if world_size is not None and size % world_size:
            problems.append(
                step.node.problem(
                    "E_PARAM",
                    f"its {what} ({size}) do not divide by the tensor-parallel degree {world_size}",
                    expected=f"a multiple of {world_size}",
                    actual=str(size),
                )
            )

    for index, (step, module) in enumerate(zip(steps, modules)):
        if type(module) is nn.Linear and len(step.inputs) == 1:
            sources: set[int] = set()
            middle: set[int] = set()
            frontier = [step.inputs[0]]
            ok = True
            while frontier and ok:
                value = frontier.pop()
                producer = made_by.get(value)
                if producer is None or value in outputs:
                    ok = False
                    break
                if type(modules[producer]) is nn.Linear:
                    sources.add(producer)
                elif keeps_shape(steps[producer]):
                    middle.add(producer)
                    frontier.extend(steps[producer].inputs)
                else:
                    ok = False
            if not ok or not sources:
                continue
            group = sources | middle
            values = {v for i in group for v in steps[i].outputs}
            # Every value of the group is read inside it (or by the row-parallel linear) only once per reader.
            inside_reads = Counter(v for i in (group | {index}) for v in steps[i].inputs)
            if any(readers[v] != inside_reads[v] or v in outputs for v in values):
                continue
            if any(_module_name(model, steps[i]) in found for i in group):
                continue
            for i in sorted(sources):
                found[_module_name(model, steps[i])] = ColwiseParallel()
                check_divides(steps[i], modules[i].out_features, "output features")
            found[_module_name(model, step)] = RowwiseParallel()
        elif step.node.op == "attention" and getattr(module, "fused", True) is False and not module.cross:
            for name in ("q_proj", "k_proj", "v_proj"):
                found[_module_name(model, step, name)] = ColwiseParallel()
            found[_module_name(model, step, "o_proj")] = RowwiseParallel()
            check_divides(step, module.num_heads, "query heads")
            check_divides(step, module.kv_heads, "key/value heads")
    if problems:
        raise HndlError(problems, title=f"tensor-parallel plan of graph '{model.graph.name}'")
    return found


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
