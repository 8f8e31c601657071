"""The layers of the attention vocabulary: scaled dot-product attention with grouped key/value heads, attention
masks, and the attention with separate or fused projections that puts them together (the position layers it
uses, rotary embeddings and T5's relative position bias, are ``_position_layers``).

Each layer holds only its configuration (and, for rotary, the inverse frequencies it computes at build) and does
tensor work in ``forward``. The attention layer's forward runs in three steps a key/value cache can later sit
between: the projections (:meth:`Attention.project`), the rotation of queries and keys by their positions
(:meth:`Attention.rotate`), and :func:`attend`.

The arithmetic follows transformers' op for op where hndl's zoo reproduces it: the rotary tables are
``positions * inv_freq`` then ``cos``/``sin`` of ``cat(freqs, freqs)``, applied as ``x * cos + rotate_half(x) *
sin`` (LLaMA); the relative position buckets are T5's; the grouped key/value heads are repeated as
``repeat_kv`` does, or left to SDPA's ``enable_gqa`` where there is no mask and the torch has it (2.5 and later).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .._errors import HndlError, Problem
from ._per_step import PerStep, shared
from ._position_layers import RelativePositionBias as RelativePositionBias  # pickles made before the split name it here
from ._position_layers import Rotary

__all__ = [
    "Attention",
    "AttentionMask",
    "SDPA",
    "allowed_pattern",
    "as_rank4",
    "attend",
    "grouped_sdpa",
]

# SDPA takes enable_gqa from torch 2.5 on; hndl supports 2.4, where the key/value heads are repeated instead.
_GQA_NATIVE = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


def as_rank4(mask: Tensor) -> Tensor:
    """A mask read as rank 4 against the scores ``[B, H, T, S]``: a padding mask ``[B, S]`` becomes
    ``[B, 1, 1, S]`` and ``[B, T, S]`` becomes ``[B, 1, T, S]``. Below rank 4 a mask starts with the batch;
    torch's right-aligned broadcasting would read ``[B, S]`` as ``[T, S]``, silently wrong when ``B == T``."""
    if mask.dim() == 2:
        return mask[:, None, None, :]
    if mask.dim() == 3:
        return mask[:, None]
    if mask.dim() != 4:
        raise ValueError(f"a mask has rank 2 [B, S], 3 [B, T, S] or 4, got shape {list(mask.shape)}")
    return mask


def allowed_pattern(
    t: int, s: int, window: int | None, device: torch.device, offset: Tensor | int | None = None
) -> Tensor:
    """``[t, s]`` bool, true where query ``i`` may see key ``j``: ``j <= i`` (causal, top-left aligned as
    ``is_causal``), and with a window also ``j > i - window`` (the ``window`` latest keys, the query's own
    included: Mistral's sliding window). With ``offset`` (a 0-d tensor: a cache's slot of the first query) query
    ``i`` is at ``offset + i``."""
    query = torch.arange(t, device=device)[:, None]
    if offset is not None:
        query = query + offset
    key = torch.arange(s, device=device)[None, :]
    allowed = key <= query
    if window is not None:
        allowed = allowed & (key > query - window)
    return allowed


def _combine(
    mask: Tensor | None,
    bias: Tensor | None,
    t: int,
    s: int,
    causal: bool,
    window: int | None,
    like: Tensor,
    offset: Tensor | int | None = None,
    store: PerStep | None = None,
) -> Tensor | None:
    """One ``attn_mask`` for SDPA from a mask (bool: true attends; float: added), an additive score bias and the
    causal or sliding-window pattern (queries from slot ``offset`` on), on ``like``'s device (the queries');
    ``None`` when there is nothing to apply."""
    pattern = None
    if causal:
        key = (t, s, window, like.device, offset)  # the same for every layer of a decoding step: made once
        pattern = shared(store, "pattern", key, lambda: allowed_pattern(t, s, window, like.device, offset))
    if mask is not None:
        mask = as_rank4(mask)
    if bias is None:
        if mask is None:
            return pattern
        if pattern is None:
            return mask
        if mask.dtype == torch.bool and offset is not None:
            # With a cache a padded query (left padding) has no real key at all. Its own slot is allowed: SDPA
            # gives NaN for a row with nothing allowed on some releases (2.4), and a NaN written into the cache
            # poisons every later row's softmax-weighted sum (0 * NaN), though the padded slot is masked there.
            own = torch.arange(t, device=like.device)[:, None] + offset == torch.arange(s, device=like.device)
            return (mask & pattern) | own
        return mask & pattern if mask.dtype == torch.bool else mask.masked_fill(~pattern, float("-inf"))
    allowed = pattern
    if mask is not None and mask.dtype == torch.bool:
        allowed = mask if allowed is None else mask & allowed
    elif mask is not None:
        bias = bias + mask
    if allowed is None:
        return bias
    # The dtype's lowest value, not -inf, as transformers does: a row with no allowed key stays finite.
    return torch.where(allowed, bias, torch.finfo(like.dtype).min)


def repeat_kv(x: Tensor, groups: int) -> Tensor:
    """``[B, Hkv, S, D]`` -> ``[B, Hkv * groups, S, D]``, each key/value head repeated for its ``groups`` query
    heads in turn (``repeat_interleave`` on dim 1, written as transformers' ``repeat_kv``)."""
    b, heads, s, d = x.shape
    return x[:, :, None, :, :].expand(b, heads, groups, s, d).reshape(b, heads * groups, s, d)


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    bias: Tensor | None = None,
    *,
    causal: bool = False,
    window: int | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
    offset: Tensor | int | None = None,
    store: PerStep | None = None,
) -> Tensor:
    """Scaled dot-product attention of ``q`` ``[B, H, T, D]`` over ``k`` ``[B, Hkv, S, D]`` and ``v``
    ``[B, Hkv, S, Dv]`` (``Hkv`` divides ``H``), giving ``[B, H, T, Dv]``.

    Args:
        mask: bool (true: may attend) or float (added to the scores), ``[B, S]``, ``[B, T, S]`` or rank 4
            (:func:`as_rank4`).
        bias: a float added to the scores (T5's relative positions), broadcastable to ``[B, H, T, S]``.
        causal: query ``i`` sees keys ``0..i`` only.
        window: with ``causal``, only the ``window`` latest keys (:func:`allowed_pattern`).
        scale: the factor on ``q @ k^T``; ``None`` is ``1/sqrt(D)``.
        dropout: on the attention weights (the caller passes 0 in eval mode).
        offset: with ``causal``, the keys' slot of the first query (0-d; a static cache): query ``i`` sees keys
            ``0 .. offset+i``.
        store: where a mask and pattern the same for every layer of a step are kept (the layer's ``per_step``).
    """
    t, s = q.shape[2], k.shape[2]
    if mask is None and bias is None and window is None and offset is None:
        attn_mask, is_causal = None, causal
    else:
        if bias is None:  # a mask and a pattern the same for every layer of a step (_per_step): combined once
            key = (mask, t, s, causal, window, q.device, q.dtype, offset)
            attn_mask = shared(
                store, "attn_mask", key, lambda: _combine(mask, None, t, s, causal, window, q, offset, store)
            )
        else:
            attn_mask = _combine(mask, bias, t, s, causal, window, q, offset, store)
        is_causal = False
    return grouped_sdpa(q, k, v, attn_mask, is_causal=is_causal, scale=scale, dropout=dropout)


def grouped_sdpa(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    attn_mask: Tensor | None,
    *,
    is_causal: bool = False,
    scale: float | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """SDPA of ``q`` ``[B, H, T, D]`` over ``k``, ``v`` ``[B, Hkv, S, D]`` (``Hkv`` divides ``H``) with SDPA's own
    ``attn_mask`` and ``is_causal``: the last step of :func:`attend`, for a caller that made the mask itself."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        if _GQA_NATIVE and (attn_mask is None or q.device.type == "cpu"):
            # Without a mask SDPA's own grouping keeps the fused kernels; with a mask it sends CUDA to the math
            # kernel (repeated heads keep the memory-efficient one), while the CPU's flash kernel takes both: there
            # the grouping saves repeating a layer's keys and values (a decoding step over a 256-slot cache: 2.3x
            # faster attention, and no transient the size of the repeated keys and values).
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=is_causal, scale=scale, enable_gqa=True
            )
        k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=attn_mask, dropout_p=dropout, is_causal=is_causal, scale=scale
    )


class SDPA(nn.Module):
    """:func:`attend` as a layer (the ``sdpa`` op): ``forward(q, k, v, mask=None)``; dropout in training only."""

    def __init__(
        self, *, causal: bool = False, window: int | None = None, scale: float | None = None, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.causal = causal
        self.window = window
        self.scale = scale
        self.dropout = dropout
        self.per_step = PerStep()  # its store of values made once per step (hndl/torch/_per_step.py)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
        return attend(
            q,
            k,
            v,
            mask,
            causal=self.causal,
            window=self.window,
            scale=self.scale,
            dropout=self.dropout if self.training else 0.0,
            store=self.per_step,
        )

    def extra_repr(self) -> str:
        return f"causal={self.causal}, window={self.window}, scale={self.scale}, dropout={self.dropout}"


class AttentionMask(nn.Module):
    """A padding mask ``[B, S]`` (bool, true: a real token) as the rank-4 bool mask ``[B, 1, S, S]`` of
    self-attention, with the causal or sliding-window pattern folded in: made once, shared by every layer."""

    def __init__(self, *, causal: bool = False, window: int | None = None) -> None:
        super().__init__()
        self.causal = causal
        self.window = window

    def forward(self, padding: Tensor) -> Tensor:
        s = padding.shape[1]
        mask = padding[:, None, None, :].expand(-1, 1, s, s)
        if self.causal:
            mask = mask & allowed_pattern(s, s, self.window, padding.device)
        return mask

    def extra_repr(self) -> str:
        return f"causal={self.causal}, window={self.window}"


# --- attention with its projections ----------------------------------------------------------------------

#: The projections of :class:`Attention`, in the order a ``bias`` list names them.
PROJECTIONS = ("q", "k", "v", "o")


def _extent(t: Tensor) -> int:
    """Bytes from ``t``'s first element to just past its last (its elements lie within them)."""
    return (1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride()) if n > 0)) * t.element_size()


def caches_overlap(cache_k: Tensor, cache_v: Tensor) -> bool:
    """Whether one layer's key and value caches share memory (``cache_k is cache_v``, or views of one buffer
    whose byte ranges meet), which would make each write of the values overwrite keys: checked on every call (a
    couple of pointer comparisons, well under a microsecond a layer). Disjoint parts of one buffer (``buf[0]``
    and ``buf[1]``) do not overlap; layouts that interleave keys and values within one range are refused with the
    aliased ones, their ranges meeting. Not checked while tracing (``torch.compile``, no data pointers) nor on
    the meta device."""
    if torch.compiler.is_compiling() or cache_k.is_meta:
        return False
    try:
        k, v = cache_k.data_ptr(), cache_v.data_ptr()
    except RuntimeError:  # a tensor without storage (a functorch wrapper): nothing to compare
        return False
    if cache_k.is_contiguous() and cache_v.is_contiguous():  # what hndl.generate and most callers pass
        return k < v + cache_v.nbytes and v < k + cache_k.nbytes
    if not cache_k.numel() or not cache_v.numel():
        return False
    # A negative stride puts elements below the first one's pointer: not a range from it; refused as unsure.
    if min(cache_k.stride(), default=0) < 0 or min(cache_v.stride(), default=0) < 0:
        return True
    return k < v + _extent(cache_v) and v < k + _extent(cache_k)


def _aliased_caches() -> HndlError:
    return HndlError(
        Problem(
            "E_INPUT",
            "cache_k and cache_v share memory: writing the new values would overwrite the keys",
            expected="two tensors that do not overlap (separate tensors, or disjoint parts of one buffer: buf[0], "
            "buf[1])",
            actual="overlapping caches",
            hint="cache_v = torch.zeros_like(cache_k), not cache_k itself",
        )
    )


class Attention(nn.Module):
    """Multi-head attention on ``[B, T, D]`` with ``kv_heads`` key/value heads (grouped-query attention when
    fewer than ``num_heads``), heads of ``head_dim``, optional rotary embeddings, and a scale, causal or
    sliding-window pattern, mask and score bias as :func:`attend` takes them.

    Projections, ``fused=False``: ``q_proj`` (``D -> num_heads*head_dim``), ``k_proj`` and ``v_proj``
    (``E -> kv_heads*head_dim``, ``E`` the keys' width: ``D`` in self-attention), ``o_proj`` back to ``D``: the
    layout of LLaMA, Mistral and Whisper. ``fused=True``: ``qkv`` (queries, keys, values stacked) and ``proj``, the
    GPT-2 layout; in cross-attention ``q`` on ``x`` and ``kv`` (keys then values) on the second input. ``bias``
    names the projections with a bias (Whisper's ``k_proj`` has none).

    ``forward(x, *inputs)`` takes, in order and as built: the keys' and values' input ``[B, S, E]``
    (cross-attention), the mask, the score bias; with ``cache`` the static cache's ``cache_k``, ``cache_v`` and
    ``offset``; with ``past`` the growing cache's ``past_k`` and ``past_v`` ``[B, kv_heads, S, head_dim]``; with
    ``position_ids`` the positions. With ``past`` it returns five tensors: the output, the keys and values past
    and new ``[B, kv_heads, S+T, head_dim]`` (the next call's past), and the new tokens' own ``[B, kv_heads, T,
    head_dim]``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kv_heads: int | None = None,
        head_dim: int | None = None,
        kdim: int | None = None,
        fused: bool = False,
        bias: Sequence[str] = PROJECTIONS,
        scale: float | None = None,
        causal: bool = False,
        window: int | None = None,
        dropout: float = 0.0,
        rope: Mapping[str, Any] | None = None,
        masked: bool = False,
        score_bias: bool = False,
        cache: bool = False,
        past: bool = False,
        position_ids: bool = False,
    ) -> None:
        super().__init__()
        kv_heads = num_heads if kv_heads is None else kv_heads
        head_dim = embed_dim // num_heads if head_dim is None else head_dim
        if num_heads % kv_heads:
            raise ValueError(f"kv_heads {kv_heads} does not divide num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.cross = kdim is not None
        self.fused = fused
        self.scale = scale
        self.causal = causal
        self.window = window
        self.dropout = dropout
        self.masked = masked
        self.score_bias = score_bias
        self.cache = cache
        self.past = past
        self.position_ids = position_ids
        width = embed_dim if kdim is None else kdim
        q_out, kv_out = num_heads * head_dim, kv_heads * head_dim
        has = {name: name in bias for name in PROJECTIONS}
        if fused and not self.cross:
            self.qkv = nn.Linear(embed_dim, q_out + 2 * kv_out, bias=has["q"])
        elif fused:
            self.q = nn.Linear(embed_dim, q_out, bias=has["q"])
            self.kv = nn.Linear(width, 2 * kv_out, bias=has["k"])
        else:
            self.q_proj = nn.Linear(embed_dim, q_out, bias=has["q"])
            self.k_proj = nn.Linear(width, kv_out, bias=has["k"])
            self.v_proj = nn.Linear(width, kv_out, bias=has["v"])
        out = nn.Linear(q_out, embed_dim, bias=has["o"])
        if fused:
            self.proj = out
        else:
            self.o_proj = out
        self.rotary = None if rope is None else Rotary(head_dim, **rope)
        self.per_step = PerStep()

    def project(self, x: Tensor, source: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Queries ``[B, num_heads, T, head_dim]`` from ``x``, keys and values ``[B, kv_heads, S, head_dim]`` from
        ``source`` (``x`` itself in self-attention)."""
        b, t = x.shape[0], x.shape[1]
        s = source.shape[1]
        hd = self.head_dim
        if self.fused and not self.cross:
            q_out, kv_out = self.num_heads * hd, self.kv_heads * hd
            q, k, v = self.qkv(x).split([q_out, kv_out, kv_out], dim=2)
        elif self.fused:
            q = self.q(x)
            k, v = self.kv(source).split(self.kv_heads * hd, dim=2)
        else:
            q, k, v = self.q_proj(x), self.k_proj(source), self.v_proj(source)
        q = q.view(b, t, -1, hd).transpose(1, 2)
        k = k.view(b, s, -1, hd).transpose(1, 2)
        v = v.view(b, s, -1, hd).transpose(1, 2)
        return q, k, v

    def rotate(
        self, q: Tensor, k: Tensor, positions: Tensor | None = None, *, start: int | None = None
    ) -> tuple[Tensor, Tensor]:
        """Queries and keys rotated by their positions ``0 .. T-1`` and ``0 .. S-1`` (one table when equal), or
        both by ``positions`` (an offset, ``[T]`` or ``[B, T]``: :meth:`Rotary.positions_for`), or, with ``start``
        and no ``positions``, both by ``start .. start+T-1`` (a growing cache's new keys)."""
        if self.rotary is None:
            return q, k
        rotary = self.rotary
        t = q.shape[-2]

        def table() -> tuple[Tensor, Tensor]:
            if positions is None and start is not None:
                return rotary.tables(torch.arange(start, start + t, device=q.device), q.dtype)
            return rotary.tables(rotary.positions_for(q, positions), q.dtype)

        # The same for every layer of a step, whose position ids or offset are one graph input: made once.
        key = (positions, start, t, q.dtype, q.device, rotary.interleaved, rotary.inv_freq)
        cos, sin = shared(self.per_step, "rotary", key, table)
        q = rotary.rotate(q, cos, sin)
        if positions is None and start is None and k.shape[2] != q.shape[2]:
            cos, sin = self.rotary.tables(self.rotary.positions_for(k, None), k.dtype)
        return q, self.rotary.rotate(k, cos, sin)

    def forward(self, x: Tensor, *inputs: Tensor) -> Any:
        source = inputs[0] if self.cross else x
        mask = inputs[int(self.cross)] if self.masked else None
        tail = 3 * self.cache + 2 * self.past + self.position_ids
        body = inputs[: len(inputs) - tail]
        bias = body[-1] if self.score_bias else None
        positions = inputs[-1] if self.position_ids else None
        offset: Any = None
        q, k, v = self.project(x, source)
        if self.past:
            past_k, past_v = inputs[len(inputs) - tail : len(inputs) - tail + 2]
            s, t = past_k.shape[2], x.shape[1]
            q, new_k = self.rotate(q, k, positions, start=s)  # without position ids: queries at s .. s+t-1
            new_k, new_v = new_k.to(past_k.dtype), v.to(past_v.dtype)
            # Growing: this call's keys and values are the past ones and the new ones, concatenated (a copy, as
            # transformers' DynamicCache makes); the caller passes them back as the next call's past.
            k, v = torch.cat((past_k, new_k), dim=2), torch.cat((past_v, new_v), dim=2)
            # Query i sits at slot s + i. With a bool mask the offset also lets a padded query see its own slot
            # (see _combine); with neither a past nor a mask the plain causal pattern is SDPA's is_causal.
            offset = s if (s or mask is not None) else None
            causal = self.causal
            if s and t == 1 and mask is None and bias is None and self.window is None:
                causal, offset = False, None  # one query, at the last slot: it sees every key, no pattern needed
            y = attend(
                q,
                k,
                v,
                mask,
                bias,
                causal=causal,
                window=self.window,
                scale=self.scale,
                dropout=self.dropout if self.training else 0.0,
                offset=offset,
                store=self.per_step,
            )
            y = y.transpose(1, 2).reshape(x.shape[0], t, -1)
            return (self.proj if self.fused else self.o_proj)(y), k, v, new_k, new_v
        if self.cache:
            cache_k, cache_v, offset = inputs[len(inputs) - tail : len(inputs) - tail + 3]
            if caches_overlap(cache_k, cache_v):
                raise _aliased_caches()
            q, k = self.rotate(q, k, offset if positions is None else positions)
            # The cache is the caller's: the new keys and values are written into it in place, where the caller
            # (hndl.generate) reads them on the next step. The runtime never writes into an input itself.
            t = x.shape[1]
            slots = shared(self.per_step, "slots", (t, offset), lambda: torch.arange(t, device=offset.device) + offset)
            cache_k.index_copy_(2, slots, k.to(cache_k.dtype))
            cache_v.index_copy_(2, slots, v.to(cache_v.dtype))
            k, v = cache_k, cache_v
        else:
            q, k = self.rotate(q, k, positions)
        y = attend(
            q,
            k,
            v,
            mask,
            bias,
            causal=self.causal,
            window=self.window,
            scale=self.scale,
            dropout=self.dropout if self.training else 0.0,
            offset=offset,
            store=self.per_step,
        )
        # -1, not num_heads * head_dim: under tensor parallelism a rank holds num_heads / world of the heads.
        y = y.transpose(1, 2).reshape(x.shape[0], x.shape[1], -1)
        return (self.proj if self.fused else self.o_proj)(y)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_heads={self.kv_heads}, "
            f"head_dim={self.head_dim}, fused={self.fused}, scale={self.scale}, causal={self.causal}, "
            f"window={self.window}, dropout={self.dropout}"
            + (", cache=True" if self.cache else "")
            + (", past=True" if self.past else "")
        )
