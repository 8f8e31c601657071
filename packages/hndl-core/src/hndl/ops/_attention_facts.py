"""What an ``attention`` node costs and keeps for backward (its :attr:`hndl.OpDef.macs` and ``inner_memory``),
from its checked types: the projections and ``scaled_dot_product_attention`` inside the layer. Each input is
found through :class:`~._attention_ports.AttentionPorts`, as inference and the layer find it. No torch here.
"""

from __future__ import annotations

from typing import Any

from .._dims import Dim, dim_add, dim_mul
from .._op_facts import FactNode
from ._attention_ports import AttentionPorts

__all__ = ["attention_macs", "attention_memory"]


def _shapes(node: FactNode) -> tuple[tuple[Any, Any, Any], tuple[Any, ...] | None] | None:
    """``x``'s ``(B, T, D)`` and the ``kv`` input's shape (``None`` for self-attention); ``None`` when ``x``'s rank
    is unknown."""
    x = node.in_types[0].shape
    if x is None or len(x) != 3:
        return None
    kv_type = AttentionPorts.of(node.params, len(node.in_types)).pick(node.in_types, "kv")
    kv = None if kv_type is None or kv_type.shape is None else tuple(kv_type.shape)
    return (x[0], x[1], x[2]), kv


def attention_macs(node: FactNode) -> Dim | None:
    """The projections (queries and output on ``x``; keys and values on the source: ``x`` itself, or the ``kv``
    input) and the attention's two products, scores ``q @ k^T`` and ``weights @ v``."""
    found = _shapes(node)
    if found is None:
        return None
    (b, t, d), kv = found
    p = node.params
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
    projections = dim_add(dim_mul(tokens, 2 * d * q_width), dim_mul(sources, dim_mul(width, 2 * kv_width)))
    # scaled_dot_product_attention: scores and weights @ v, each B x heads x T x S x head_dim.
    return dim_add(projections, dim_mul(dim_mul(tokens, s), 2 * q_width))


def attention_memory(node: FactNode) -> list[tuple[Dim, str]] | None:
    """The projected queries, keys and values and the attention's output before its projection: what the
    projections' and scaled_dot_product_attention's backward keep inside the layer (rotary embedding keeps
    another copy of the queries and keys, rotated)."""
    found = _shapes(node)
    if found is None:
        return None
    (b, t, d), kv = found
    p = node.params
    heads = p.num_heads
    kv_heads = p.get("kv_heads") or heads
    head_dim = p.get("head_dim") or d // heads
    tokens = dim_mul(b, t)
    # q and the output at T tokens; k and v at the source's (x itself, or the kv input's S tokens).
    sources = tokens if kv is None or len(kv) != 3 else dim_mul(kv[0], kv[1])
    copies = 2 if p.get("rope") else 1
    queries = dim_mul(tokens, (copies + 1) * heads * head_dim)
    keys = dim_mul(sources, (copies + 1) * kv_heads * head_dim)
    return [(dim_add(queries, keys), "float")]
