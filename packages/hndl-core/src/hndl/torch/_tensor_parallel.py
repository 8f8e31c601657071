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

**Local shards in the checks.** With local outputs a column-parallel linear returns one ``world``-th of its
output features on each rank; the validation reads that through :mod:`._local_shards` (which the validator
imports instead of this planner). Nothing of this runs on the fast path.

Torch has no sharding rule for ``scaled_dot_product_attention`` on DTensors on the CPU: with
``use_local_output=False`` an attention layer gets DTensors and fails there; the default local outputs avoid it
(the error hint says so).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from torch import nn

from .._errors import HndlError, Problem
from .._plan import Step
from ._built import BuiltModel
from ._local_shards import keeps_shape

__all__ = ["tensor_parallel_plan"]


def _module_name(model: BuiltModel, step: Step, attr: str | None = None) -> str:
    parts = list(step.node.path)
    if attr:
        parts.append(attr)
    return ".".join(parts)


def tensor_parallel_plan(model: BuiltModel, world_size: int | None = None) -> dict[str, Any]:
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
