"""The position layers of the attention vocabulary: rotary position embeddings (``Rotary``, its inverse
frequencies ``rope_frequencies`` with LLaMA 3.1's scaling) and T5's relative position bias (``relative_buckets``,
``RelativePositionBias``). Each computes its tables as transformers does, op for op, so the zoo's models equal
transformers' bit for bit; the attention layer (``_attention_layers.Attention``) holds a ``Rotary``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["RelativePositionBias", "Rotary", "relative_buckets", "rope_frequencies"]


# --- rotary position embeddings ---------------------------------------------------------------------------


def rope_frequencies(dims: int, theta: float, scaling: Mapping[str, Any] | None = None) -> Tensor:
    """RoPE's inverse frequencies ``1 / theta**(2i/dims)`` (``dims // 2`` of them, float32), as transformers
    computes them, optionally scaled: ``linear`` divides them by ``factor``; ``llama3`` divides the low
    frequencies by ``factor`` and blends the middle band (LLaMA 3.1's ``rope_scaling``)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, dims, 2, dtype=torch.int64).to(dtype=torch.float) / dims))
    kind = (scaling or {}).get("rope_type", "default")
    if kind == "linear":
        return inv_freq / scaling["factor"]  # type: ignore[index]
    if kind != "llama3":
        return inv_freq
    assert scaling is not None
    factor = scaling["factor"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    old_context = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_context / low, old_context / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, scaled)


class Rotary(nn.Module):
    """Rotary position embeddings on ``[..., T, D]`` (queries or keys, ``[B, H, T, D]``).

    The first ``dims`` channels (all ``D`` by default; partial rotary with fewer) are rotated by angles
    ``position * inv_freq``; the rest pass through. ``inv_freq`` is a non-persistent buffer computed at build
    (so a state_dict has no key for it, as transformers' has none) and kept float32 through conversions.
    Layouts: the half rotation of LLaMA and GPT-NeoX (channel ``i`` pairs with ``i + dims/2``), or with
    ``interleaved`` GPT-J's (channel ``2i`` pairs with ``2i+1``).

    ``forward(x, positions=None)``: ``positions`` is an integer offset (0-d: positions ``offset .. offset+T-1``,
    for decoding after a cache), position ids ``[T]``, or per-batch position ids ``[B, T]``; without it,
    ``0 .. T-1``.
    """

    def __init__(
        self,
        head_dim: int,
        *,
        dims: int | None = None,
        theta: float = 10000.0,
        scaling: Mapping[str, Any] | None = None,
        interleaved: bool = False,
    ) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.dims = head_dim if dims is None else dims
        if self.dims % 2 or not 0 < self.dims <= head_dim:
            raise ValueError(f"rotary dims {self.dims} must be even and at most the head dim {head_dim}")
        self.theta = theta
        self.scaling = dict(scaling) if scaling else None
        self.interleaved = interleaved
        self.inv_freq: Tensor
        self.register_buffer("inv_freq", rope_frequencies(self.dims, theta, self.scaling), persistent=False)

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        # A conversion (.half(), .double()) would round the frequencies; positions times a rounded frequency drift
        # by whole radians at long contexts. Recomputed in float32 on the buffer's new device instead.
        result = super()._apply(fn, *args, **kwargs)
        if self.inv_freq.dtype != torch.float32:
            fresh = rope_frequencies(self.dims, self.theta, self.scaling)
            self.inv_freq = fresh.to(self.inv_freq.device)
        return result

    def tables(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin`` for integer ``positions`` (``[T]`` or ``[B, T]``), ``[..., T, dims]`` in ``dtype``."""
        freqs = positions[..., None].float() * self.inv_freq.float()
        if self.interleaved:
            emb = torch.repeat_interleave(freqs, 2, dim=-1)
        else:
            emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def positions_for(self, x: Tensor, positions: Tensor | None) -> Tensor:
        """The position of each of ``x``'s ``T`` rows (see the class docstring for the forms of ``positions``)."""
        t = x.shape[-2]
        if positions is None:
            return torch.arange(t, device=x.device)
        if positions.dim() == 0:
            return torch.arange(t, device=x.device) + positions
        return positions

    def rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """``x`` rotated by the tables; ``[B, T, dims]`` tables are aligned with ``[B, H, T, D]`` by a head dim."""
        if cos.dim() == 3 and x.dim() == 4:
            cos, sin = cos[:, None], sin[:, None]
        if self.dims == x.shape[-1]:
            return x * cos + self._turn(x) * sin
        rot, rest = x[..., : self.dims], x[..., self.dims :]
        return torch.cat((rot * cos + self._turn(rot) * sin, rest), dim=-1)

    def _turn(self, x: Tensor) -> Tensor:
        if self.interleaved:
            return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    def forward(self, x: Tensor, positions: Tensor | None = None) -> Tensor:
        cos, sin = self.tables(self.positions_for(x, positions), x.dtype)
        return self.rotate(x, cos, sin)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, dims={self.dims}, theta={self.theta}, scaling={self.scaling}, "
            f"interleaved={self.interleaved}"
        )


# --- relative position bias (T5) --------------------------------------------------------------------------


def relative_buckets(relative: Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """T5's bucket of each relative position ``key - query``: exact buckets for small distances, logarithmically
    wider ones up to ``max_distance``, beyond it the last; bidirectional halves the buckets by sign, otherwise
    keys after the query share bucket 0."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).to(torch.long) * num_buckets
        relative = torch.abs(relative)
    else:
        relative = -torch.min(relative, torch.zeros_like(relative))
    exact = num_buckets // 2
    small = relative < exact
    large = exact + (torch.log(relative.float() / exact) / math.log(max_distance / exact) * (num_buckets - exact)).to(
        torch.long
    )
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(small, relative, large)


class RelativePositionBias(nn.Module):
    """T5's relative position bias: ``[1, num_heads, T, S]`` from a learned ``weight`` ``[num_buckets,
    num_heads]``, one value per head for each bucket of ``key - query`` (:func:`relative_buckets`).

    ``forward(x, kv=None)`` reads ``T`` from ``x`` ``[B, T, ...]`` and ``S`` from ``kv`` (``x`` again without it).
    """

    def __init__(self, num_heads: int, *, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True):
        super().__init__()
        self.num_heads = num_heads
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.bidirectional = bidirectional
        self.weight = nn.Parameter(torch.empty(num_buckets, num_heads))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)  # as torch.nn.Embedding; T5 checkpoints bring their own

    def forward(self, x: Tensor, kv: Tensor | None = None) -> Tensor:
        t = x.shape[1]
        s = t if kv is None else kv.shape[1]
        query = torch.arange(t, dtype=torch.long, device=self.weight.device)[:, None]
        key = torch.arange(s, dtype=torch.long, device=self.weight.device)[None, :]
        buckets = relative_buckets(
            key - query, bidirectional=self.bidirectional, num_buckets=self.num_buckets, max_distance=self.max_distance
        )
        return F.embedding(buckets, self.weight).permute([2, 0, 1]).unsqueeze(0)

    def extra_repr(self) -> str:
        return (
            f"num_heads={self.num_heads}, num_buckets={self.num_buckets}, max_distance={self.max_distance}, "
            f"bidirectional={self.bidirectional}"
        )
