"""The module's buffers and constant tensors at import: what folding reads, and which stay state.

Folding (``_fold``) computes at import what no input can change, from the tensors the exported program holds.
A non-persistent buffer or a constant tensor is the same in every checkpoint, so a value computed from it is too.
A persistent buffer is state a checkpoint may change: read as it is, it becomes a persistent ``buffer`` node its
key loads into (so ``convert`` carries a trained value); a constant computed from it at import records the value
it used (``ImportedGraph.folded``), and ``convert`` refuses a checkpoint holding another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..naming import dtype_name
from ._fold import Folding
from ._imported import ImportedGraph
from ._table import Emit

__all__ = ["keep_state", "program_tensors"]


def program_tensors(program: Any) -> dict[str, Any]:
    """Placeholder name -> the tensor of each buffer and constant ``program`` holds (what folding reads)."""
    held = {**getattr(program, "constants", {}), **program.state_dict}
    signature = program.graph_signature
    sources = {}
    for name, key in {**signature.inputs_to_buffers, **signature.inputs_to_lifted_tensor_constants}.items():
        if key in held:
            sources[name] = held[key]
    return sources


def keep_state(
    folding: Folding, nodes: Sequence[Any], buffers: Mapping[str, str], state: Mapping[str, Any], graph: ImportedGraph
) -> None:
    """Make each persistent buffer that folds and is read as it is a persistent ``buffer`` node in ``folding``'s
    frontier, and record in ``graph.folded`` the value of each one an operation at import read.

    Args:
        nodes: the traced nodes ``folding`` was computed from.
        buffers: placeholder name -> buffer key, for the program's buffers.
        state: the module's state dict (a non-persistent buffer, not in it, is left alone).
    """
    for n in nodes:
        key = buffers.get(n.name) if n.op == "placeholder" else None
        if key is None or key not in state or n not in folding.folded:
            continue
        if n in folding.frontier:
            value = state[key]
            params = {
                "shape": [int(s) for s in value.shape],
                "dtype": dtype_name(value.dtype),
                "init": "zeros",
                "persistent": True,
            }
            folding.frontier[n] = Emit("buffer", [], params, {"value": key})
        if any(u in folding.folded for u in n.users):  # an operation at import read it
            graph.folded[key] = state[key].detach().clone()
