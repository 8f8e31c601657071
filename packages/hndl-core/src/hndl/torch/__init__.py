"""The torch backend: turning a checked graph into a :class:`GraphModule`.

This subpackage imports torch; the rest of hndl does not.
"""

from ._build import build_module as build_module
from ._module import GraphModule as GraphModule

__all__ = ["GraphModule", "build_module"]
