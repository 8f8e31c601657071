"""The next token from the last position's logits: greedy, or sampled after temperature, top-k and top-p, in
the order transformers applies them (so a seed means the same thing to a reader of either)."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["next_tokens"]


def _top_k(scores: Tensor, k: int) -> Tensor:
    k = min(k, scores.shape[-1])
    kth = torch.topk(scores, k, dim=-1).values[..., -1, None]
    return scores.masked_fill(scores < kth, float("-inf"))


def _top_p(scores: Tensor, p: float) -> Tensor:
    # The smallest set of tokens whose probability reaches p, the most likely always kept.
    ordered, order = torch.sort(scores, descending=False, dim=-1)
    cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
    drop = cumulative <= 1 - p
    drop[..., -1:] = False
    return scores.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def next_tokens(
    logits: Tensor,
    *,
    do_sample: bool,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generator: torch.Generator | None,
) -> Tensor:
    """``[B]`` token ids from ``logits`` ``[B, V]`` (computed in float32)."""
    scores = logits.float()
    if not do_sample:
        return scores.argmax(dim=-1)
    if temperature != 1.0:
        scores = scores / temperature
    if top_k is not None:
        scores = _top_k(scores, top_k)
    if top_p is not None and top_p < 1.0:
        scores = _top_p(scores, top_p)
    return torch.multinomial(scores.softmax(dim=-1), 1, generator=generator).squeeze(1)
