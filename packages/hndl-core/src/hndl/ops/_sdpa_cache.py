"""Key/value caches of ``sdpa`` (the low-level attention on heads), as ``attention`` has them: the static cache
(``cache``: ``cache_k``, ``cache_v`` written in place at an ``offset``) and the growing one (``past``:
``past_k``, ``past_v`` in, past and new keys and values out). ``with_kv_cache`` gives them to the ``sdpa``
nodes of an imported decoder, whose projections and rotations are nodes of their own. No torch here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import dim_add
from .._registry import InferError, Params
from ._common import open_at

__all__ = ["sdpa_cache_outputs", "sdpa_outputs", "sdpa_ports"]

#: The inputs an ``sdpa`` node's cache opens after q, k, v (and the mask), by the flag that opens them.
_CACHE_PORTS = {"cache": ("cache_k", "cache_v", "offset"), "past": ("past_k", "past_v")}


def sdpa_outputs(p: Mapping[str, Any]) -> int:
    """One output, or five with a growing cache (``past``): y, keys, values, new keys, new values."""
    return 5 if p.get("past") is True else 1


def sdpa_ports(p: Mapping[str, Any]) -> dict[str, int]:
    """The index of each cache input of an ``sdpa`` node with params ``p`` (none without a cache)."""
    at = 3 + bool(p.get("masked"))
    found: dict[str, int] = {}
    for flag, names in _CACHE_PORTS.items():
        if p.get(flag) is True:
            for name in names:
                found[name] = at
                at += 1
    return found


def _fixed(shape: Any) -> bool:
    return shape is not None and open_at(shape) is None and len(shape) == 4


def sdpa_cache_outputs(p: Params, inputs: Sequence[TensorType]) -> tuple[Any, list[TensorType] | None]:
    """The keys' length the scores of a cached ``sdpa`` run over (``M`` slots, or the past's ``S`` and the new
    ``T``; ``None`` when unknown or without a cache) and, with ``past``, its five outputs.

    Raises:
        InferError: ``cache`` and ``past`` together, either without ``causal``, or new keys that are not the
            queries' own tokens (a cache is for causal self-attention).
    """
    if not (p.cache or p.past):
        return None, None
    flag = "cache" if p.cache else "past"
    if p.cache and p.past:
        raise InferError(
            "cache and past are both true: a node has one key/value cache, static or growing",
            code="E_PARAM",
            param="past",
            expected="cache: true (written in place) or past: true (returned), not both",
            actual=True,
        )
    if not p.causal:
        raise InferError(
            f"{flag} is true and causal is false",
            code="E_PARAM",
            param=flag,
            expected=f"causal: true with {flag} (each new token attends to the cached ones and itself)",
            actual=p[flag],
            hint="set causal: true, and pass the padding mask over the cache's slots as the mask",
        )
    q, k, v = inputs[:3]
    if _fixed(q.shape) and _fixed(k.shape) and str(q.shape[2]) != str(k.shape[2]):  # type: ignore[index]
        raise InferError(
            f"the new keys {format_shape(k.shape)} are not of the queries' {q.shape[2]} tokens",  # type: ignore[index]
            port="k",
            expected=f"[B, Hkv, {q.shape[2]}, D]: a cache holds self-attention's keys",  # type: ignore[index]
            actual=format_shape(k.shape),
        )
    ports = sdpa_ports(p)
    if p.cache:
        cache = inputs[ports["cache_k"]].shape
        return (cache[2] if _fixed(cache) else None), None  # type: ignore[index]
    past_k = inputs[ports["past_k"]]
    unknown = TensorType(None, q.dtype)
    if not (_fixed(k.shape) and _fixed(v.shape) and _fixed(past_k.shape)):
        return None, [TensorType(None, q.dtype), unknown, unknown, unknown, unknown]
    total = dim_add(past_k.shape[2], k.shape[2])  # type: ignore[index]
    keys = TensorType((*k.shape[:2], total, k.shape[3]), k.dtype)  # type: ignore[index]
    values = TensorType((*v.shape[:2], total, v.shape[3]), v.dtype)  # type: ignore[index]
    y = TensorType((*q.shape[:3], v.shape[3]), q.dtype) if _fixed(q.shape) else unknown  # type: ignore[index]
    return total, [y, keys, values, k, v]
