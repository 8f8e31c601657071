"""Attention: the high-level ``attention`` (projections, positions, the attention itself), the low-level
``sdpa`` on heads. Masks (and the ``attention_mask`` op) are :mod:`._attention_masks`, the key/value caches
:mod:`._attention_cache`, where each input of a node sits :mod:`._attention_ports`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import Dim
from .._op_facts import sdpa_macs
from .._param_types import ParamType, describe_value, excerpt
from .._registry import InferError, Param, Params, Port, op
from ._attention_cache import check_cache, check_past, past_outputs
from ._attention_facts import attention_macs, attention_memory
from ._attention_masks import check_mask, check_window
from ._attention_ports import AttentionPorts
from ._common import open_at
from ._positions import ROPE, check_rope
from ._sdpa_cache import sdpa_cache_outputs, sdpa_outputs

#: The projections a ``bias`` list may name, in order.
PROJECTIONS = ("q", "k", "v", "o")


def _divisors_near(n: int, of: int) -> list[int]:
    """The two divisors of ``of`` nearest ``n`` (searched outward from it: ``of`` may be as large as 2**63)."""
    window = range(max(1, n - 1000), min(of, n + 1000) + 1)
    divisors = [h for h in window if of % h == 0] or [1]
    return sorted(sorted(divisors, key=lambda h: (abs(h - n), -h))[:2])


def _check_heads(heads: Dim, kv_heads: Dim, *, param: str | None, port: str | None) -> None:
    """Key/value heads must divide the query heads (each key/value head serves ``heads // kv_heads`` of them)."""
    if isinstance(heads, int) and isinstance(kv_heads, int) and (kv_heads == 0 or heads % kv_heads):
        near = _divisors_near(kv_heads, heads)
        raise InferError(
            f"{kv_heads} key/value heads do not divide {heads} query heads",
            code="E_PARAM" if param else "E_SHAPE",
            param=param,
            port=port,
            expected=f"a divisor of {heads}",
            actual=kv_heads,
            hint="each key/value head serves a whole group of query heads: try "
            + ("kv_heads=" if param else "")
            + " or ".join(str(h) for h in near),
        )


# --- attention ------------------------------------------------------------------------------------------


class _ProjectionBias(ParamType):
    """Which projections have a bias: true (all), false (none), or a list of q, k, v, o."""

    name, description = "projection_bias", "true, false, or a list of the projections q, k, v, o with a bias"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if isinstance(value, bool):
            return (PROJECTIONS if value else ()), ""
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            return None, f"must be true, false or a list of q, k, v, o, got {describe_value(value)}"
        unknown = [v for v in value if v not in PROJECTIONS]
        if unknown:
            return None, f"names projection {excerpt(unknown[0])}: the projections are q, k, v, o"
        if len(set(value)) != len(value):
            return None, f"names a projection twice, got {excerpt(value)}"
        return tuple(v for v in PROJECTIONS if v in value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {
            "anyOf": [
                {"type": "boolean"},
                {"type": "array", "items": {"enum": list(PROJECTIONS)}, "uniqueItems": True},
            ]
        }


def projection_bias(value: Any) -> tuple[str, ...]:
    """The projections with a bias: ``bias`` as validated, or its default ``True``."""
    normal, _ = _ProjectionBias().normalize(value)
    return tuple(normal)


def _attention_inputs(p: Params, inputs: Sequence[TensorType]) -> tuple[TensorType | None, TensorType | None]:
    """The ``kv`` and ``score_bias`` inputs of an attention node, by the ports its parameters open."""
    ports = AttentionPorts.of(p, len(inputs))
    return ports.pick(inputs, "kv"), ports.pick(inputs, "score_bias")


def _attention_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.head_dim is None and p.embed_dim % p.num_heads:
        raise InferError(
            f"embed_dim {p.embed_dim} is not divisible by num_heads={p.num_heads}",
            code="E_PARAM",
            param="num_heads",
            expected=f"a divisor of embed_dim ({p.embed_dim})",
            actual=p.num_heads,
            hint="num_heads must divide the input's last dim: try num_heads="
            + " or ".join(str(h) for h in _divisors_near(p.num_heads, p.embed_dim))
            + ", or give head_dim",
        )
    kv_heads = p.num_heads if p.kv_heads is None else p.kv_heads
    _check_heads(p.num_heads, kv_heads, param="kv_heads", port=None)
    head_dim = p.embed_dim // p.num_heads if p.head_dim is None else p.head_dim
    bias_on = projection_bias(p.bias)
    if p.fused and len({name in bias_on for name in "qkv"}) != 1:
        raise InferError(
            f"bias {list(bias_on)} gives q, k and v different biases, and fused holds them in one projection",
            code="E_PARAM",
            param="bias",
            expected="q, k and v all with a bias or all without, when fused",
            actual=list(bias_on),
            hint="set fused: false (q_proj, k_proj, v_proj, o_proj) for a bias on some of them",
        )
    if p.rope is not None:
        check_rope(p.rope, head_dim, "rope")
    if p.position_ids and p.rope is None:
        raise InferError(
            "position_ids is true and the node has no rope: the positions would be read by nothing",
            code="E_PARAM",
            param="position_ids",
            expected="rope with position_ids",
            actual=True,
            hint="give rope ({} for the defaults), or feed the positions to a position embedding instead (GPT-2's wpe)",
        )
    check_window(p)
    check_cache(p, inputs, kv_heads, head_dim)
    check_past(p, inputs, kv_heads, head_dim)
    x = inputs[0]
    ports = AttentionPorts.of(p, len(inputs))
    kv, bias = ports.pick(inputs, "kv"), ports.pick(inputs, "score_bias")
    if kv is not None and kv.shape is not None and open_at(kv.shape) is None and not isinstance(kv.shape[2], int):
        raise InferError(
            f"the width of kv {format_shape(kv.shape)} is not a fixed number",
            port="kv",
            expected="[B, S, an int]",
            actual=format_shape(kv.shape),
            hint="give the last dim of the keys-and-values input as an int: the kv projection is sized by it",
        )
    scores = None
    if x.shape is not None and open_at(x.shape) is None:
        keys = x.shape if kv is None or kv.shape is None or open_at(kv.shape) is not None else kv.shape
        scores = (x.shape[0], p.num_heads, x.shape[1], keys[1])
        if p.cache:
            cache = ports.take(inputs, "cache_k").shape
            # With a cache the keys are its M slots, the new tokens' written among them.
            scores = None if cache is None or open_at(cache) is not None else (*scores[:3], cache[2])
    outputs = past_outputs(p, x, inputs, kv_heads, head_dim) if p.past else [x]
    if p.past and scores is not None:
        # With a past the keys are its S slots and the T new ones, in that order.
        total = outputs[1].shape
        scores = None if total is None else (*scores[:3], total[2])
    if p.masked:
        check_mask(ports.take(inputs, "mask"), scores)
    if bias is not None:
        check_mask(bias, scores, port="score_bias", additive=True)
    return outputs


def _attention_outputs(p: Mapping[str, Any]) -> int:
    """One output, or five with a growing cache (``past``): y, keys, values, new keys, new values."""
    return 5 if p.get("past") is True else 1


def _is_legacy(p: Params) -> bool:
    """Whether a node uses only what ``attention`` had before it took grouped heads, separate projections,
    positions, scales, windows and score biases: it then builds the same layer as then (the same class, the same
    state_dict keys, the same code, bit for bit)."""
    return (
        p.fused
        and p.kv_heads in (None, p.num_heads)
        and p.head_dim is None
        and projection_bias(p.bias) in ((), PROJECTIONS)
        and p.scale is None
        and p.rope is None
        and p.window is None
        and not p.score_bias
        and not p.cache
        and not p.past
        and not p.position_ids
    )


@op(
    "attention",
    saves="inputs",
    inner_memory=attention_memory,
    macs=attention_macs,
    returns="new",
    params=[
        Param("num_heads", "int", min=1, doc="number of query heads"),
        Param("embed_dim", "int", min=1, inferred=True, doc="model width D (inferred from the input's last dim)"),
        Param(
            "kv_heads",
            "int",
            default=None,
            nullable=True,
            min=1,
            doc="key/value heads (grouped-query attention: fewer than num_heads, dividing it); null: num_heads",
        ),
        Param(
            "head_dim", "int", default=None, nullable=True, min=1, doc="width of one head; null: embed_dim // num_heads"
        ),
        Param(
            "fused",
            "bool",
            default=True,
            doc="one projection for queries, keys and values (qkv, proj: GPT-2); false: q_proj, k_proj, v_proj, o_proj",
        ),
        Param(
            "bias", _ProjectionBias(), default=True, doc="biases: on every projection, none, or a list of q, k, v, o"
        ),
        Param(
            "scale", "float", default=None, nullable=True, doc="factor on the scores q @ k^T; null: 1/sqrt(head_dim)"
        ),
        Param("causal", "bool", default=False, doc="each position attends only to itself and earlier positions"),
        Param(
            "window",
            "int",
            default=None,
            nullable=True,
            min=1,
            doc="with causal: attend only to the window latest keys, the query's own included (Mistral)",
        ),
        Param(
            "rope",
            ROPE,
            default=None,
            nullable=True,
            doc="rotary embeddings on queries and keys: the rotary op's "
            "theta, dims, scaling, interleaved ({} for the defaults)",
        ),
        Param("dropout", "float", default=0.0, min=0, max=1, doc="dropout on the attention weights, in training only"),
        Param("masked", "bool", default=False, doc="an input after x (and kv) is an attention mask"),
        Param(
            "score_bias", "bool", default=False, doc="the last input is a float added to the scores (T5's positions)"
        ),
        Param(
            "cache",
            "bool",
            default=False,
            doc="a static key/value cache: inputs cache_k, cache_v [B, kv_heads, M, head_dim] and offset, the new "
            "keys and values written into them in place at slots offset .. offset+T-1",
        ),
        Param(
            "past",
            "bool",
            default=False,
            doc="a growing key/value cache: inputs past_k, past_v [B, kv_heads, S, head_dim] (S may be 0); "
            "outputs y, the keys and values past and new [B, kv_heads, S+T, head_dim] (node.1, node.2) and the new "
            "ones alone [B, kv_heads, T, head_dim] (node.3, node.4)",
        ),
        Param(
            "position_ids",
            "bool",
            default=False,
            doc="the last input gives each query's position [B, T] for rope (left-padded rows); otherwise the "
            "positions are offset .. offset+T-1 (with past: S .. S+T-1)",
        ),
    ],
    inputs=[
        Port("x", ["B", "T", "embed_dim"], doc="batch, sequence, features: the queries (and keys and values)"),
        Port("kv", ["B", "S", "kdim"], optional=True, doc="cross-attention: the sequence keys and values come from"),
        Port(
            "mask",
            None,
            dtype="any",
            when="masked",
            doc="bool (true: attend) or additive float: [B, S] (padding), [B, T, S], or rank 4; dim 0 the batch or 1",
        ),
        Port(
            "score_bias",
            None,
            dtype="any",
            when="score_bias",
            doc="float added to the scores, [1, num_heads, T, S] (T5) or any form a mask takes",
        ),
        Port(
            "cache_k",
            ["B", "Hkv", "M", "Dh"],
            dtype="same:x",
            when="cache",
            doc="the cached keys of M slots, written in place at slots offset .. offset+T-1",
        ),
        Port("cache_v", ["B", "Hkv", "M", "Dh"], dtype="same:x", when="cache", doc="the cached values, as cache_k"),
        Port("offset", [], dtype="int64", when="cache", doc="0-d: the cache slot of the first of the T new tokens"),
        Port(
            "past_k",
            ["B", "Hkv", "S", "Dh"],
            dtype="same:x",
            when="past",
            doc="the keys of the S earlier tokens (S may be 0): an earlier call's node.1",
        ),
        Port(
            "past_v", ["B", "Hkv", "S", "Dh"], dtype="same:x", when="past", doc="their values: an earlier call's node.2"
        ),
        Port("positions", ["B", "T"], dtype="int64", when="position_ids", doc="each query's position, for rope"),
    ],
    outputs=[
        Port("y", ["B", "T", "embed_dim"], dtype="same:x", doc="the attention's output (node.0 with past)"),
        Port("keys", ["B", "Hkv", "S+T", "Dh"], dtype="same:x", doc="with past, node.1: the past and new keys"),
        Port("values", ["B", "Hkv", "S+T", "Dh"], dtype="same:x", doc="with past, node.2: the past and new values"),
        Port("new_keys", ["B", "Hkv", "T", "Dh"], dtype="same:x", doc="with past, node.3: the new tokens' keys"),
        Port("new_values", ["B", "Hkv", "T", "Dh"], dtype="same:x", doc="with past, node.4: their values"),
    ],
    infer=_attention_infer,
    count_outputs=_attention_outputs,
    layer=("hndl.torch.layers.SelfAttention", "hndl.torch.layers.CrossAttention", "hndl.torch.layers.Attention"),
    inference=(
        "num_heads must divide embed_dim unless head_dim is given; kv_heads must divide num_heads; kdim (the kv "
        "input's width) must be an int; the mask is [B, S] (padding), [B, T, S] or of rank 4 broadcastable to "
        "[B, num_heads, T, S] (S = T without kv; S = M with a cache; S+T with a past), its dim 0 the batch of x "
        "or 1 (a [T, S] mask is given as [1, 1, T, S]), the score bias too; rope's "
        "dims even and at most head_dim; window needs causal; a cache or a past needs causal self-attention, and "
        "its Hkv and Dh are kv_heads and head_dim; with past, five outputs: y, the keys and values [B, kv_heads, "
        "S+T, head_dim], the new ones [B, kv_heads, T, head_dim]; position_ids needs rope"
    ),
    example={"op": "attention", "num_heads": 12, "causal": True},
    input_shape_example=["B", "T", 768],
    error_example={"params": {"num_heads": 12, "kv_heads": 5}, "inputs": [["B", "T", 768]]},
)
def attention(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Multi-head attention over ``[B, T, D]``, built on ``scaled_dot_product_attention``.

    Projections. By default (``fused``) one ``qkv`` (``Linear(D, 3D)``: queries, keys, values in that order)
    and ``proj`` (``Linear(D, D)``), the GPT-2 layout; with a second input ``kv`` (``[B, S, E]``, any width
    ``E``) it is cross-attention: ``q`` (``Linear(D, D)``) projects ``x``, ``kv`` (``Linear(E, 2D)``, keys then
    values) the second input, then ``proj``. With ``fused: false``: ``q_proj``, ``k_proj``, ``v_proj``,
    ``o_proj`` (LLaMA, Mistral, Whisper; BERT's and T5's weights map onto them). ``bias`` puts a bias on every
    projection, on none, or on those it lists (Whisper: ``[q, v, o]``).

    Heads. ``num_heads`` query heads of ``head_dim`` (``D // num_heads`` by default); ``kv_heads`` key/value
    heads (grouped-query attention: each serves ``num_heads // kv_heads`` query heads). ``rope`` rotates queries
    and keys by their positions as the ``rotary`` op does (``{theta: 500000.0}``). ``scale`` replaces
    ``1/sqrt(head_dim)`` (T5: 1.0).

    Masks. ``causal`` lets position ``i`` see keys ``0..i``; ``window`` (with ``causal``) only the latest
    ``window`` of those. With ``masked: true`` an input after ``x`` (and ``kv``) is a mask: bool (true where a
    query may attend) or a float added to the scores. A mask of rank 2 is a padding mask ``[B, S]`` (read as
    ``[B, 1, 1, S]``), one of rank 3 is ``[B, T, S]`` (read as ``[B, 1, T, S]``), one of rank 4 broadcasts to
    ``[B, num_heads, T, S]``; a mask below rank 4 always starts with the batch, even where ``B`` and ``T`` are
    equal. So a mask's dim 0 is ``x``'s batch (the same symbol or size) or 1: a ``[T, T]`` mask, which a call
    with ``B == T`` would read as ``[B, S]``, is refused statically (``E_SHAPE`` saying what it was read as). A
    mask the whole batch shares, ``[T, S]``, is given at rank 4: declare it ``[1, 1, T, S]``, or widen it with
    ``{op: expand, shape: [1, 1, -1, -1]}``; a causal mask is simply ``causal: true``. With ``score_bias: true`` the last input is a float added to the scores (T5's relative position bias
    ``[1, num_heads, T, S]``). ``causal``, ``window``, the mask and the score bias combine. ``embed_dim`` follows
    from ``x``'s last dim.

    Cache. With ``cache: true`` (causal self-attention only) three more inputs are a static key/value cache:
    ``cache_k`` and ``cache_v`` ``[B, kv_heads, M, head_dim]`` and ``offset``, a 0-d int64 tensor. The ``T`` new
    keys and values are written into the cache *in place* at slots ``offset .. offset+T-1`` (the caller owns the
    cache and sees the write), and the queries attend over the ``M`` slots: query ``i`` sees slots up to
    ``offset+i`` (with ``window``, the ``window`` latest of them), so slots not yet written are never read. The
    mask, if any, is then over the slots: ``[B, M]`` padding. Rotary positions are ``offset .. offset+T-1``, or,
    with ``position_ids: true``, the last input ``[B, T]`` (rows with left padding start later).
    :func:`hndl.generate` drives it.

    Growing cache. With ``past: true`` (causal self-attention only, not with ``cache``) two more inputs are the
    keys and values of the ``S`` earlier tokens, ``past_k`` and ``past_v`` ``[B, kv_heads, S, head_dim]`` (``S``
    may be 0: ``torch.zeros(B, kv_heads, 0, head_dim)`` before the prompt), and the node has five outputs:
    ``node.0`` the attention's output, ``node.1`` and ``node.2`` the keys and values past and new concatenated,
    ``[B, kv_heads, S+T, head_dim]`` (the next call's past; ``S+T`` is inferred), ``node.3`` and ``node.4`` the
    ``T`` new ones alone ``[B, kv_heads, T, head_dim]`` (what a repeated block collects, cheaply, across its
    layers). Query ``i`` sits at slot ``S+i``: it sees the past and the new tokens up to itself (with ``window``,
    the ``window`` latest). The mask, if any, is over the ``S+T`` slots: ``[B, S+T]`` padding. Rotary positions
    are ``S .. S+T-1``, or the ``position_ids`` input. Nothing is written in place; the concatenation copies
    the past once per call, as transformers' dynamic cache does. ``S`` and ``T`` are symbols, so one validation
    serves every step.

    A node that uses none of ``kv_heads``, ``head_dim``, ``fused: false``, a partial ``bias``, ``scale``,
    ``rope``, ``window``, ``score_bias``, ``cache``, ``past`` and ``position_ids`` builds the layer of earlier
    releases (``SelfAttention`` or ``CrossAttention``), with the same state_dict keys.
    """
    from ..torch.layers import Attention, CrossAttention, SelfAttention

    kv, _ = _attention_inputs(p, inputs)
    kdim = None if kv is None else int(kv.shape[-1])  # type: ignore[index]
    if _is_legacy(p):
        bias = bool(projection_bias(p.bias))
        if kdim is not None:
            return CrossAttention(p.embed_dim, kdim, p.num_heads, causal=p.causal, dropout=p.dropout, bias=bias)
        return SelfAttention(p.embed_dim, p.num_heads, causal=p.causal, dropout=p.dropout, bias=bias)
    return Attention(
        p.embed_dim,
        p.num_heads,
        kv_heads=p.kv_heads,
        head_dim=p.head_dim,
        kdim=kdim,
        fused=p.fused,
        bias=projection_bias(p.bias),
        scale=p.scale,
        causal=p.causal,
        window=p.window,
        dropout=p.dropout,
        rope=p.rope,
        masked=p.masked,
        score_bias=p.score_bias,
        cache=p.cache,
        past=p.past,
        position_ids=p.position_ids,
    )


# --- sdpa -----------------------------------------------------------------------------------------------


def _sdpa_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    q, k, v = inputs[:3]
    check_window(p)
    if q.shape is not None and k.shape is not None and open_at(q.shape) is None and open_at(k.shape) is None:
        _check_heads(q.shape[1], k.shape[1], param=None, port="k")
    scores = None
    if q.shape is not None and k.shape is not None and open_at(q.shape) is None and open_at(k.shape) is None:
        scores = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    keys, past = sdpa_cache_outputs(p, inputs)  # with a cache the scores run over its slots
    if scores is not None and (p.cache or p.past):
        scores = None if keys is None else (*scores[:3], keys)
    if p.masked:
        check_mask(inputs[3], scores)
    if past is not None:
        return past
    if q.shape is None or v.shape is None or open_at(q.shape) is not None or open_at(v.shape) is not None:
        return [TensorType(None, q.dtype)]
    return [TensorType((*q.shape[:3], v.shape[3]), q.dtype)]


@op(
    "sdpa",
    saves="both",
    macs=sdpa_macs,
    returns="new",
    params=[
        Param("causal", "bool", default=False, doc="query i attends only to keys 0..i"),
        Param("window", "int", default=None, nullable=True, min=1, doc="with causal: only the window latest keys"),
        Param("scale", "float", default=None, nullable=True, doc="factor on q @ k^T; null: 1/sqrt(D)"),
        Param("dropout", "float", default=0.0, min=0, max=1, doc="dropout on the attention weights, in training only"),
        Param("masked", "bool", default=False, doc="a fourth input is a mask"),
        Param(
            "cache",
            "bool",
            default=False,
            doc="a static key/value cache: inputs cache_k, cache_v [B, Hkv, M, D] and offset, k and v written "
            "into them in place at slots offset .. offset+T-1",
        ),
        Param(
            "past",
            "bool",
            default=False,
            doc="a growing key/value cache: inputs past_k, past_v [B, Hkv, P, D]; outputs y, the keys and values "
            "past and new (node.1, node.2) and the new ones (node.3, node.4)",
        ),
    ],
    inputs=[
        Port("q", ["B", "H", "T", "D"], doc="queries: batch, heads, positions, head width"),
        Port("k", ["B", "Hkv", "S", "D"], dtype="same:q", doc="keys: Hkv heads (dividing H), S positions"),
        Port("v", ["B", "Hkv", "S", "Dv"], dtype="same:q", doc="values, one per key"),
        Port(
            "mask",
            None,
            dtype="any",
            when="masked",
            doc="bool (true: attend) or additive float: [B, S] (padding), [B, T, S], or rank 4",
        ),
        Port("cache_k", ["B", "Hkv", "M", "D"], dtype="same:q", when="cache", doc="the cached keys of M slots"),
        Port("cache_v", ["B", "Hkv", "M", "Dv"], dtype="same:q", when="cache", doc="the cached values"),
        Port("offset", [], dtype="int64", when="cache", doc="0-d: the cache slot of the first of the T new tokens"),
        Port("past_k", ["B", "Hkv", "P", "D"], dtype="same:q", when="past", doc="the keys of the P earlier tokens"),
        Port("past_v", ["B", "Hkv", "P", "Dv"], dtype="same:q", when="past", doc="their values"),
    ],
    outputs=[
        Port("y", ["B", "H", "T", "Dv"], dtype="same:q", doc="the attention's output (node.0 with past)"),
        Port("keys", ["B", "Hkv", "P+T", "D"], dtype="same:q", doc="with past, node.1: the past and new keys"),
        Port("values", ["B", "Hkv", "P+T", "Dv"], dtype="same:q", doc="with past, node.2: the past and new values"),
        Port("new_keys", ["B", "Hkv", "T", "D"], dtype="same:q", doc="with past, node.3: k"),
        Port("new_values", ["B", "Hkv", "T", "Dv"], dtype="same:q", doc="with past, node.4: v"),
    ],
    infer=_sdpa_infer,
    count_outputs=sdpa_outputs,
    layer=("hndl.torch.layers.SDPA", "hndl.torch.layers.CachedSDPA"),
    inference="Hkv must divide H; the mask is [B, S], [B, T, S] or broadcastable to [B, H, T, S] (S = M with a "
    "cache, P+T with a past); window needs causal; a cache or a past needs causal and k of the queries' T tokens",
    example={"op": "sdpa", "causal": True},
    input_shape_example=["B", 8, "T", 64],
    error_example={"inputs": [["B", 8, "T", 64], ["B", 3, "T", 64], ["B", 3, "T", 64]]},
)
def sdpa(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Scaled dot-product attention on heads: ``softmax(q @ k^T * scale + mask) @ v``.

    ``q`` is ``[B, H, T, D]``, ``k`` and ``v`` ``[B, Hkv, S, D]`` and ``[B, Hkv, S, Dv]``; with fewer key/value
    heads than query heads (grouped-query attention) each serves ``H // Hkv`` query heads in turn. ``causal``,
    ``window`` (Mistral's sliding window: query ``i`` sees keys ``i-window+1 .. i``) and the mask (as
    ``attention``'s: ``[B, S]``, ``[B, T, S]`` or rank 4, bool or additive) combine. Runs
    ``torch.nn.functional.scaled_dot_product_attention``; the key/value heads are repeated, or left to its
    ``enable_gqa`` where torch has it (2.5 and later) and there is no mask.

    Caches, as ``attention``'s (causal self-attention only: ``k`` and ``v`` are the ``T`` new tokens'). With
    ``cache: true`` three more inputs, ``cache_k``, ``cache_v`` ``[B, Hkv, M, D]`` and a 0-d int64 ``offset``:
    ``k`` and ``v`` are written into them in place at slots ``offset .. offset+T-1`` and the queries attend over
    the ``M`` slots, query ``i`` up to slot ``offset+i``; the mask is then over the slots (``[B, M]``). With
    ``past: true`` two more inputs, ``past_k``, ``past_v`` ``[B, Hkv, P, D]`` (``P`` may be 0), and five outputs:
    ``y``, the keys and values past and new ``[B, Hkv, P+T, D]`` and ``k``, ``v`` themselves; query ``i`` sits at
    slot ``P+i`` and the mask is over the ``P+T`` slots. :func:`hndl.generation.with_kv_cache` gives them to the
    ``sdpa`` nodes of an imported decoder.
    """
    from ..torch.layers import SDPA, CachedSDPA

    if p.cache or p.past:
        return CachedSDPA(causal=p.causal, window=p.window, scale=p.scale, dropout=p.dropout, past=p.past)
    return SDPA(causal=p.causal, window=p.window, scale=p.scale, dropout=p.dropout)
