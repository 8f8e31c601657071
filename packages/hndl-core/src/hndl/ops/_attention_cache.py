"""Key/value caches of ``attention``: the static cache (``cache``: ``cache_k``, ``cache_v`` written in place at
an ``offset``) and the growing one (``past``: ``past_k``, ``past_v`` in, past and new keys and values out) --
their checks against the node's heads and head dim, the causal self-attention they need, and the growing cache's
outputs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .._contracts import TensorType, format_shape
from .._dims import dim_add
from .._registry import InferError, Params
from ._attention_ports import AttentionPorts
from ._common import open_at


def check_cache(p: Params, inputs: Sequence[TensorType], kv_heads: int, head_dim: int) -> None:
    """A static key/value cache: ``cache_k`` and ``cache_v`` ``[B, kv_heads, M, head_dim]`` (their ``B`` and
    ``M`` agree through the port patterns), an integer offset; only for causal self-attention."""
    if not p.cache:
        return
    _causal_self_attention(p, inputs, "cache", "the cached ones", "[B, M] over the cache's slots")
    ports = AttentionPorts.of(p, len(inputs))
    _check_cache_heads(
        ((port, ports.take(inputs, port)) for port in ("cache_k", "cache_v")),
        kv_heads,
        head_dim,
        "M",
        "make the cache with the node's kv_heads and head_dim: [B, kv_heads, max_length, head_dim]",
    )


def _check_cache_heads(
    caches: Iterable[tuple[str, TensorType]], kv_heads: int, head_dim: int, length: str, hint: str
) -> None:
    """Each cache input ``[B, kv_heads, <length>, head_dim]`` (a static cache's ``M`` slots, a growing one's ``S``
    past tokens) has the node's key/value heads and head dim where its shape says them."""
    for port, cache in caches:
        shape = cache.shape
        if shape is None or open_at(shape) is not None or len(shape) != 4:
            continue
        for axis, what, want in ((1, "key/value heads", kv_heads), (3, "head dim", head_dim)):
            if isinstance(shape[axis], int) and shape[axis] != want:
                raise InferError(
                    f"the {port} {format_shape(shape)} has {shape[axis]} as its {what}, and the node has {want}",
                    port=port,
                    expected=f"[B, {kv_heads}, {length}, {head_dim}] ([B, kv_heads, {length}, head_dim])",
                    actual=format_shape(shape),
                    hint=hint,
                )


def _causal_self_attention(p: Params, inputs: Sequence[TensorType], param: str, seen: str, mask: str) -> None:
    """A key/value cache (``param``: ``cache`` or ``past``) is for causal self-attention: each new token attends
    to ``seen`` and itself, and the padding mask spans ``mask``."""
    if not p.causal:
        raise InferError(
            f"{param} is true and causal is false",
            code="E_PARAM",
            param=param,
            expected=f"causal: true with a {param} (each new token attends to {seen} and itself)",
            actual=p[param],
            hint=f"set causal: true, and pass the padding mask {mask} as the mask",
        )
    if AttentionPorts.of(p, len(inputs)).kv is not None:
        raise InferError(
            f"a {'growing ' if param == 'past' else ''}key/value cache is for self-attention, and this node has a "
            "kv input",
            code="E_PARAM",
            param=param,
            expected=f"no kv input with {param}: true",
            actual="a kv input",
        )


def _past_of(p: Params, inputs: Sequence[TensorType]) -> tuple[TensorType, TensorType]:
    """The ``past_k`` and ``past_v`` inputs of a node with ``past: true``."""
    ports = AttentionPorts.of(p, len(inputs))
    return ports.take(inputs, "past_k"), ports.take(inputs, "past_v")


def check_past(p: Params, inputs: Sequence[TensorType], kv_heads: int, head_dim: int) -> None:
    """A growing key/value cache: ``past_k`` and ``past_v`` ``[B, kv_heads, S, head_dim]`` (``S`` may be 0; their
    ``B`` and ``S`` agree through the port patterns); only for causal self-attention, and not with ``cache``."""
    if not p.past:
        return
    if p.cache:
        raise InferError(
            "cache and past are both true: a node has one key/value cache, static or growing",
            code="E_PARAM",
            param="past",
            expected="cache: true (a static cache written in place) or past: true (a growing one), not both",
            actual=True,
            hint="a static cache preallocates max_length slots; a growing one returns past and new concatenated",
        )
    _causal_self_attention(p, inputs, "past", "the past ones", "[B, S+T] over the past and new slots")
    _check_cache_heads(
        zip(("past_k", "past_v"), _past_of(p, inputs)),
        kv_heads,
        head_dim,
        "S",
        "the past keys and values are an earlier call's node.1 and node.2: [B, kv_heads, S, head_dim], S = 0 "
        "before the first call",
    )


def past_outputs(
    p: Params, x: TensorType, inputs: Sequence[TensorType], kv_heads: int, head_dim: int
) -> list[TensorType]:
    """The outputs of a node with ``past: true``: ``y``, the keys and values past and new ``[B, kv_heads, S+T,
    head_dim]``, and the new tokens' own ``[B, kv_heads, T, head_dim]``."""
    past_k, past_v = _past_of(p, inputs)
    batch = length = total = None
    if x.shape is not None and open_at(x.shape) is None and len(x.shape) == 3:
        batch, length = x.shape[0], x.shape[1]
    for past in (past_k, past_v):
        if past.shape is not None and open_at(past.shape) is None and len(past.shape) == 4 and length is not None:
            total = dim_add(past.shape[2], length)
            break
    if batch is None or total is None:
        unknown = TensorType(None, x.dtype)
        return [x, unknown, unknown, unknown, unknown]
    full = TensorType((batch, kv_heads, total, head_dim), x.dtype)
    new = TensorType((batch, kv_heads, length, head_dim), x.dtype)
    return [x, full, full, new, new]
