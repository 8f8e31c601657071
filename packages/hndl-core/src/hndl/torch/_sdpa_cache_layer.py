"""The layer of an ``sdpa`` node with a key/value cache (``cache`` or ``past``): the new keys and values written
into the caller's cache in place, or returned after the past ones, then :func:`attend` over every slot, query
``i`` at slot ``offset + i`` -- what ``Attention`` does after its projections and rotations, which in an imported
decoder are nodes of their own."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._attention_layers import SDPA, _aliased_caches, _combine, attend, caches_overlap, grouped_sdpa
from ._per_step import shared

__all__ = ["CachedSDPA"]


class CachedSDPA(SDPA):
    """``forward(q, k, v, [mask], cache_k, cache_v, offset)`` (static) or ``forward(q, k, v, [mask], past_k,
    past_v)`` (``past``: returns ``y``, the past and new keys and values, and ``k``, ``v``)."""

    def __init__(
        self,
        *,
        causal: bool = True,
        window: int | None = None,
        scale: float | None = None,
        dropout: float = 0.0,
        past: bool = False,
    ) -> None:
        super().__init__(causal=causal, window=window, scale=scale, dropout=dropout)
        self.past = past

    def forward(self, q: Tensor, k: Tensor, v: Tensor, *inputs: Tensor) -> Any:  # type: ignore[override]
        masked = len(inputs) > (2 if self.past else 3)  # the mask comes before the cache's inputs
        mask, rest = (inputs[0], inputs[1:]) if masked else (None, inputs)
        dropout = self.dropout if self.training else 0.0
        if self.past:
            past_k, past_v = rest
            s = past_k.shape[2]
            new_k, new_v = k.to(past_k.dtype), v.to(past_v.dtype)
            keys, values = torch.cat((past_k, new_k), dim=2), torch.cat((past_v, new_v), dim=2)
            # Query i sits at slot s + i; with a bool mask the offset also lets a padded query see its own slot.
            offset = s if (s or mask is not None) else None
            y = attend(
                q,
                keys,
                values,
                mask,
                causal=self.causal,
                window=self.window,
                scale=self.scale,
                dropout=dropout,
                offset=offset,
                store=self.per_step,
            )
            return y, keys, values, new_k, new_v
        cache_k, cache_v, position = rest
        if caches_overlap(cache_k, cache_v):
            raise _aliased_caches()
        t, s = q.shape[2], cache_k.shape[2]
        # The new tokens' slots (query i at slot position + i) and SDPA's mask over every slot (padding, causal
        # pattern, window) are the same for every layer of a decoding step: one entry of the model's store, made
        # by the first layer (_per_step), where attend() would look up its mask and this layer its slots apart.
        # The layer's own causal and window are in the key: a model may give its layers different windows.
        slots, attn_mask = shared(
            self.per_step,
            "cache_step",
            (mask, t, s, position, self.causal, self.window, q.dtype, q.device),
            lambda: self._step_values(mask, t, s, q, position),
        )
        # The cache is the caller's (hndl.generate reads it on the next step); the runtime never writes an input.
        cache_k.index_copy_(2, slots, k if k.dtype == cache_k.dtype else k.to(cache_k.dtype))
        cache_v.index_copy_(2, slots, v if v.dtype == cache_v.dtype else v.to(cache_v.dtype))
        return grouped_sdpa(q, cache_k, cache_v, attn_mask, scale=self.scale, dropout=dropout)

    def _step_values(self, mask: Tensor | None, t: int, s: int, q: Tensor, position: Tensor) -> tuple[Tensor, Any]:
        """The slots ``position .. position+t-1`` and the mask :func:`attend` would make for a cache of ``s``."""
        slots = torch.arange(t, device=position.device) + position
        attn_mask = _combine(mask, None, t, s, self.causal, self.window, q, position, self.per_step)
        return slots, attn_mask

    def extra_repr(self) -> str:
        return super().extra_repr() + (", past=True" if self.past else ", cache=True")
