"""What one node costs to run, from its checked types alone: multiply-adds and the size of its outputs.

Multiply-adds (MACs) are each op's own rule (:attr:`hndl.OpDef.macs`; the built-in ops' shared rules are in
:mod:`hndl._op_facts`), counted for the products that ``torch.utils.flop_counter.FlopCounterMode`` counts
(matrix products and convolutions, FLOPs = 2 x MACs), so the two agree; an op without a rule counts 0 (every
element-wise op, activation and constant), except an op that imports code hndl cannot see
(:attr:`hndl.OpDef.imports_code`, the ``module`` op), whose cost is unknown (``None``). Each count is a
:data:`~hndl._dims.Dim` over the graph inputs' symbols, so it stays symbolic until the caller binds the dims
(``B=8``). :data:`MACS` is the rules as a table, a view of the registry. No torch here.
"""

from __future__ import annotations

from ._checked import CheckedNode
from ._dims import Dim, dim_add, dim_mul
from ._op_facts import apply_rule, numel
from ._registry import FactTable

__all__ = ["MACS", "DTYPE_BYTES", "macs", "numel", "output_bytes"]

# Bytes per element; a dtype category ("float", "any") counts as float32, the default dtype.
DTYPE_BYTES = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "complex64": 8,
    "complex128": 16,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "bool": 1,
}


def output_bytes(node: CheckedNode) -> Dim | None:
    """The bytes of ``node``'s outputs (``None`` when a rank is unknown)."""
    total: Dim = 0
    for t in node.out_types:
        count = numel(t.shape)
        if count is None:
            return None
        total = _add(total, dim_mul(count, DTYPE_BYTES.get(t.dtype, 4)))
    return total


def macs(node: CheckedNode) -> Dim | None:
    """The multiply-adds of one leaf node, or ``None`` when hndl cannot know them: its op imports code by name
    (``module``), so its layer is not one hndl knows."""
    if node.opdef.imports_code:
        return None
    rule = node.opdef.macs
    return 0 if rule is None else apply_rule(node, "macs", rule)


def _add(a: Dim, b: Dim) -> Dim:
    return dim_add(a, b)


#: Op name -> ``macs(node) -> Dim | None`` (:attr:`hndl.OpDef.macs`) for the registered ops that declare one.
MACS = FactTable(lambda o: o.macs, lambda rule: rule is not None)
