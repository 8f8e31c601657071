"""A built model handed to PyTorch's export and distributed tools, as free functions (SPEC.md section 13).

Each takes the model first, reads what it needs off the graph and the plan, and changes nothing; each is also a
one-line method of :class:`~hndl.torch.GraphModule` (``model.pipeline_stages(...)`` is
``pipeline_stages(model, ...)``). The GraphModule imports this module and none of these imports the
GraphModule: they take a :class:`._built.BuiltModel`.

Export (``torch.export``, ONNX):
    :func:`example_inputs`, :func:`dynamic_shapes`, :func:`symbol_ranges`, :data:`EXPORT_STATIC`.
Distributed:
    :func:`shard_units` (FSDP2's ``fully_shard``), :func:`tensor_parallel_plan` (``parallelize_module``),
    :func:`pipeline_stages` (``torch.distributed.pipelining``, each a :class:`Stage`).
"""

from __future__ import annotations

from ._export import EXPORT_STATIC as EXPORT_STATIC
from ._export import dynamic_shapes as dynamic_shapes
from ._export import example_inputs as example_inputs
from ._export import symbol_ranges as symbol_ranges
from ._pipeline import Stage as Stage
from ._pipeline import pipeline_stages as pipeline_stages
from ._shard import shard_units as shard_units
from ._tensor_parallel import tensor_parallel_plan as tensor_parallel_plan

__all__ = [
    "EXPORT_STATIC",
    "Stage",
    "dynamic_shapes",
    "example_inputs",
    "pipeline_stages",
    "shard_units",
    "symbol_ranges",
    "tensor_parallel_plan",
]
