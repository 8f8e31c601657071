"""The torch backend: turning a checked graph into a :class:`GraphModule`.

This subpackage imports torch; the rest of hndl does not.
"""

from . import interop as interop
from ._blocks import Block as Block
from ._build import build_module as build_module
from ._module import GraphModule as GraphModule
from ._state import BuildState as BuildState
from ._state import ModuleSlot as ModuleSlot
from ._state import TensorSlot as TensorSlot
from .interop import EXPORT_STATIC as EXPORT_STATIC
from .interop import Stage as Stage
from .interop import dynamic_shapes as dynamic_shapes
from .interop import example_inputs as example_inputs
from .interop import pipeline_stages as pipeline_stages
from .interop import shard_units as shard_units
from .interop import symbol_ranges as symbol_ranges
from .interop import tensor_parallel_plan as tensor_parallel_plan

__all__ = [
    "EXPORT_STATIC",
    "Block",
    "BuildState",
    "GraphModule",
    "ModuleSlot",
    "Stage",
    "TensorSlot",
    "build_module",
    "dynamic_shapes",
    "example_inputs",
    "interop",
    "pipeline_stages",
    "shard_units",
    "symbol_ranges",
    "tensor_parallel_plan",
]
