"""The attention layers with fused projections: ``SelfAttention`` (one ``qkv`` linear, GPT-2 style) and
``CrossAttention`` (``q`` and a fused ``kv``), which the ``attention`` op builds for the node shapes they fit,
with the same state_dict keys and arithmetic as the models that use them (``hndl.ops._attention``; every other
attention node builds :class:`~hndl.torch._attention_layers.Attention`).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ._attention_layers import as_rank4

__all__ = ["CrossAttention", "SelfAttention"]


class SelfAttention(nn.Module):
    """Multi-head self-attention on ``[B, T, D]``, GPT-2 style.

    ``qkv`` (``Linear(D, 3D)``) projects to queries, keys and values, which are split into ``num_heads`` heads
    of ``D // num_heads`` and combined by :func:`torch.nn.functional.scaled_dot_product_attention`; ``proj``
    (``Linear(D, D)``) maps the heads back. Attention dropout applies in training mode only.
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, causal: bool = False, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.causal = causal
        self.dropout = dropout
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        if mask is None:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal
            )
        else:
            mask = as_rank4(mask)
            y = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=_with_causal(mask, t, t) if self.causal else mask,
                dropout_p=self.dropout if self.training else 0.0,
            )
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, causal={self.causal}, dropout={self.dropout}"


def _with_causal(mask: Tensor, t: int, s: int) -> Tensor:
    """``mask`` restricted to the causal pattern (query i sees keys 0..i), as ``is_causal`` would; SDPA
    takes either a mask or ``is_causal``, never both."""
    causal = torch.ones(t, s, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, float("-inf"))


class CrossAttention(nn.Module):
    """Multi-head attention of ``x`` ``[B, T, D]`` over ``kv`` ``[B, S, E]``.

    ``q`` (``Linear(D, D)``) projects the queries, ``kv`` (``Linear(E, 2D)``) the keys and values (in that
    order), heads of ``D // num_heads`` are combined by :func:`torch.nn.functional.scaled_dot_product_attention`
    with an optional mask (``[B, S]``, ``[B, T, S]`` or broadcastable to ``[B, num_heads, T, S]``, see
    :func:`as_rank4`), and ``proj`` (``Linear(D, D)``) maps the
    heads back.
    """

    def __init__(
        self,
        embed_dim: int,
        kdim: int,
        num_heads: int,
        *,
        causal: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.kdim = kdim
        self.num_heads = num_heads
        self.causal = causal
        self.dropout = dropout
        self.q = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.kv = nn.Linear(kdim, 2 * embed_dim, bias=bias)
        self.proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x: Tensor, kv: Tensor, mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        s = kv.shape[1]
        h = self.num_heads
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k, v = self.kv(kv).split(d, dim=2)
        k = k.view(b, s, h, d // h).transpose(1, 2)
        v = v.view(b, s, h, d // h).transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=self.causal)
        else:
            mask = as_rank4(mask)
            attn_mask = _with_causal(mask, t, s) if self.causal else mask
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, kdim={self.kdim}, num_heads={self.num_heads}, causal={self.causal}, "
            f"dropout={self.dropout}"
        )
