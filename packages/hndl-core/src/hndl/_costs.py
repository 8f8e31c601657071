"""What one node costs to run, from its checked types alone: multiply-adds and the size of its outputs.

Multiply-adds (MACs) are counted for the products that ``torch.utils.flop_counter.FlopCounterMode`` counts
(matrix products and convolutions, FLOPs = 2 x MACs), so the two agree; element-wise ops, norms, pooling,
resampling and lookups cost 0 here as they do there. Each count is a :data:`~hndl._dims.Dim` over the graph
inputs' symbols, so it stays symbolic until the caller binds the dims (``B=8``). No torch here.

One table, :data:`MACS`, op name -> ``macs(node) -> Dim``; an op missing from it counts 0 (every element-wise op,
activation and constant), except an op that imports code hndl cannot see (:attr:`hndl.OpDef.imports_code`, the
``module`` op), whose cost is unknown (``None``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any

from ._check import CheckedNode
from ._contracts import Variadic
from ._dims import Dim, Poly, dim_add, dim_mul
from .ops._attention_ports import AttentionPorts

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


def numel(shape: Sequence[Any] | None) -> Dim | None:
    """The element count of a static shape; a ``*batch`` run counts as the opaque factor ``prod(batch)``."""
    if shape is None:
        return None
    total: Dim = 1
    for d in shape:
        # An atom that no symbol can bind: the count of a variadic run stays symbolic even when dims are given.
        factor = Poly((((f"prod({d.name})",), 1),)) if isinstance(d, Variadic) else d
        total = dim_mul(total, factor)
    return total


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
    rule = MACS.get(node.op)
    return 0 if rule is None else rule(node)


def _add(a: Dim, b: Dim) -> Dim:
    return dim_add(a, b)


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),)


def _out(node: CheckedNode, index: int = 0) -> Dim | None:
    return numel(node.out_types[index].shape)


def _times(count: Dim | None, factor: Dim) -> Dim | None:
    return None if count is None else dim_mul(count, factor)


def _linear(node: CheckedNode) -> Dim | None:
    # addmm: every output element is a dot product of length in_features.
    return _times(_out(node), node.params.in_features)


def _conv(node: CheckedNode) -> Dim | None:
    # Every output element sums in_channels/groups x kernel products.
    p = node.params
    return _times(_out(node), (p.in_channels // p.groups) * prod(_ints(p.kernel_size)))


def _conv_transpose(node: CheckedNode) -> Dim | None:
    # The transpose scatters: every *input* element meets out_channels/groups x kernel weights.
    p = node.params
    return _times(numel(node.in_types[0].shape), (p.out_channels // p.groups) * prod(_ints(p.kernel_size)))


def _matmul(node: CheckedNode) -> Dim | None:
    a = node.in_types[0].shape
    if not a:
        return None
    # The contracted dim is a's last; every output element is one dot product over it.
    return _times(_out(node), a[-1])


def _attention(node: CheckedNode) -> Dim | None:
    p = node.params
    x = node.in_types[0].shape
    if x is None or len(x) != 3:
        return None
    b, t, d = x
    kv_type = AttentionPorts.of(p, len(node.in_types)).pick(node.in_types, "kv")
    kv = None if kv_type is None else kv_type.shape
    heads = p.num_heads
    kv_heads = p.get("kv_heads") or heads
    head_dim = p.get("head_dim") or d // heads
    q_width, kv_width = heads * head_dim, kv_heads * head_dim
    tokens = dim_mul(b, t)
    if kv is None:
        s: Dim = t
        sources, width = tokens, d
    else:
        s = kv[1]
        sources, width = dim_mul(b, s), kv[2]
    # Queries and the output projection on x; keys and values on the source (x itself, or the kv input).
    projections = _add(dim_mul(tokens, 2 * d * q_width), dim_mul(sources, dim_mul(width, 2 * kv_width)))
    # scaled_dot_product_attention: scores q @ k^T and weights @ v, each B x heads x T x S x head_dim.
    return _add(projections, dim_mul(dim_mul(tokens, s), 2 * q_width))


def _sdpa(node: CheckedNode) -> Dim | None:
    q, k, v = (t.shape for t in node.in_types[:3])
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    # q @ k^T: B x H x T x S dot products of length D; weights @ v: B x H x T x Dv of length S.
    rows = dim_mul(dim_mul(q[0], q[1]), dim_mul(q[2], k[2]))
    return dim_mul(rows, _add(q[3], v[3]))


def _recurrent(gates: int) -> Callable[[CheckedNode], Dim | None]:
    def rule(node: CheckedNode) -> Dim | None:
        p = node.params
        x = node.in_types[0].shape
        if x is None or len(x) != 3:
            return None
        steps = dim_mul(x[0], x[1])
        directions = 2 if p.bidirectional else 1
        per_step = 0
        for layer in range(p.num_layers):
            width = p.input_size if layer == 0 else p.hidden_size * directions
            # Input and hidden projections to every gate, for every direction.
            per_step += directions * gates * p.hidden_size * (width + p.hidden_size)
        return dim_mul(steps, per_step)

    return rule


MACS: dict[str, Callable[[CheckedNode], Dim | None]] = {
    "linear": _linear,
    "linear_in_out": _linear,
    "conv1d": _conv,
    "conv2d": _conv,
    "conv_transpose1d": _conv_transpose,
    "conv_transpose2d": _conv_transpose,
    "matmul": _matmul,
    "attention": _attention,
    "sdpa": _sdpa,
    "lstm": _recurrent(4),
    "gru": _recurrent(3),
}
