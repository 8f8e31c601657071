"""The torch backend: turning a checked graph into a :class:`GraphModule`.

This subpackage imports torch; the rest of hndl does not.
"""

from ._blocks import Block as Block
from ._build import build_module as build_module
from ._export import EXPORT_STATIC as EXPORT_STATIC
from ._export import dynamic_shapes as dynamic_shapes
from ._export import example_inputs as example_inputs
from ._export import symbol_ranges as symbol_ranges
from ._module import GraphModule as GraphModule
from ._state import BuildState as BuildState
from ._state import ModuleSlot as ModuleSlot
from ._state import TensorSlot as TensorSlot

__all__ = [
    "EXPORT_STATIC",
    "Block",
    "BuildState",
    "GraphModule",
    "ModuleSlot",
    "TensorSlot",
    "build_module",
    "dynamic_shapes",
    "example_inputs",
    "symbol_ranges",
]
