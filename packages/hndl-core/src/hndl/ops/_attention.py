"""Multi-head attention: self-attention, or cross-attention on a second input, with an optional mask."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType, dtype_satisfies, format_shape
from .._registry import InferError, Param, Params, Port, op
from ._common import broadcast_shapes, open_at


def _attention_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.embed_dim % p.num_heads:
        # The divisors nearest num_heads, searched outward from it: embed_dim may be as large as 2**63.
        window = range(max(1, p.num_heads - 1000), min(p.embed_dim, p.num_heads + 1000) + 1)
        divisors = [h for h in window if p.embed_dim % h == 0] or [1]
        near = sorted(divisors, key=lambda h: (abs(h - p.num_heads), -h))[:2]
        raise InferError(
            f"embed_dim {p.embed_dim} is not divisible by num_heads={p.num_heads}",
            code="E_PARAM",
            param="num_heads",
            expected=f"a divisor of embed_dim ({p.embed_dim})",
            actual=p.num_heads,
            hint="num_heads must divide the input's last dim: try num_heads="
            + " or ".join(str(h) for h in sorted(near)),
        )
    x = inputs[0]
    kv = inputs[1] if len(inputs) == 3 or (len(inputs) == 2 and not p.masked) else None
    if kv is not None and kv.shape is not None and open_at(kv.shape) is None and not isinstance(kv.shape[2], int):
        raise InferError(
            f"the width of kv {format_shape(kv.shape)} is not a fixed number",
            port="kv",
            expected="[B, S, an int]",
            actual=format_shape(kv.shape),
            hint="give the last dim of the keys-and-values input as an int: the kv projection is sized by it",
        )
    if p.masked:
        _check_mask(p, x, kv, inputs[-1])
    return [x]


#: What a mask of each rank means: below rank 4 a mask always starts with the batch, and is read as rank 4 by
#: inserting the dims it lacks (torch's right-aligned broadcasting would read a padding mask ``[B, S]`` as
#: ``[T, S]``, which is silently wrong when ``B == T``).
MASK_FORMS = {2: "a padding mask [B, S]", 3: "[B, T, S]", 4: "broadcastable to [B, num_heads, T, S]"}


def mask_as_rank4(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """A static mask shape as the layer reads it: ``[B, S]`` -> ``[B, 1, 1, S]``, ``[B, T, S]`` -> ``[B, 1, T, S]``."""
    if len(shape) == 2:
        return (shape[0], 1, 1, shape[1])
    if len(shape) == 3:
        return (shape[0], 1, shape[1], shape[2])
    return shape


def _check_mask(p: Params, x: TensorType, kv: TensorType | None, mask: TensorType) -> None:
    """A mask must be bool or x's floating dtype, of rank 2 (``[B, S]``), 3 (``[B, T, S]``) or 4, and cover the
    scores ``[B, num_heads, T, S]``."""
    if dtype_satisfies(mask.dtype, "bool") is not True and dtype_satisfies(mask.dtype, "float") is False:
        raise InferError(
            f"the mask's dtype is {mask.dtype}",
            code="E_DTYPE",
            port="mask",
            expected="bool (true: attend) or a float added to the scores",
            actual=mask.dtype,
        )
    if x.shape is None or mask.shape is None or open_at(x.shape) is not None or open_at(mask.shape) is not None:
        return
    keys = x.shape if kv is None or kv.shape is None or open_at(kv.shape) is not None else kv.shape
    scores = (x.shape[0], p.num_heads, x.shape[1], keys[1])
    rank = len(mask.shape)
    if rank not in MASK_FORMS:
        raise InferError(
            f"the mask has rank {rank}",
            port="mask",
            expected="rank 2 [B, S] (padding), rank 3 [B, T, S] or rank 4 broadcastable to [B, num_heads, T, S]",
            actual=format_shape(mask.shape),
            hint="a padding mask is [B, S]: true (or 0.0) where a key may be attended to",
        )
    try:
        broadcast_shapes(scores, mask_as_rank4(mask.shape), ("scores", "mask"))
    except InferError as exc:
        what = {2: "padding mask ", 3: "mask ", 4: "mask "}[rank]
        read = "" if rank == 4 else f" (read as {format_shape(mask_as_rank4(mask.shape))})"
        raise InferError(
            f"the {what}{format_shape(mask.shape)}{read} does not broadcast to the attention scores "
            f"[B, num_heads, T, S] = {format_shape(scores)}",
            port="mask",
            expected=f"{MASK_FORMS[rank]}, with {format_shape(scores)} for [B, num_heads, T, S]",
            actual=format_shape(mask.shape),
            hint="a mask below rank 4 starts with the batch: [B, S] (padding) or [B, T, S]",
        ) from exc


@op(
    "attention",
    params=[
        Param("num_heads", "int", min=1, doc="number of attention heads; must divide embed_dim"),
        Param("embed_dim", "int", min=1, inferred=True, doc="model width D (inferred from the input's last dim)"),
        Param("causal", "bool", default=False, doc="each position attends only to itself and earlier positions"),
        Param("dropout", "float", default=0.0, min=0, max=1, doc="dropout on the attention weights, in training only"),
        Param("bias", "bool", default=True, doc="learn biases in the projections"),
        Param("masked", "bool", default=False, doc="the last input is an attention mask"),
    ],
    inputs=[
        Port("x", ["B", "T", "embed_dim"], doc="batch, sequence, features: the queries (and keys and values)"),
        Port("kv", ["B", "S", "kdim"], optional=True, doc="cross-attention: the sequence keys and values come from"),
        Port(
            "mask",
            None,
            dtype="any",
            when="masked",
            doc="bool (true: attend) or additive float: [B, S] (padding), [B, T, S], or rank 4",
        ),
    ],
    outputs=[Port("y", ["B", "T", "embed_dim"], dtype="same:x")],
    infer=_attention_infer,
    module="hndl.torch.layers.SelfAttention or CrossAttention",
    inference=(
        "num_heads must divide embed_dim; kdim (the kv input's width) must be an int; the mask is [B, S] "
        "(padding), [B, T, S] or of rank 4 broadcastable to [B, num_heads, T, S] (S = T without kv)"
    ),
    example={"op": "attention", "num_heads": 12, "causal": True},
    input_shape_example=["B", "T", 768],
)
def attention(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Multi-head attention over ``[B, T, D]``, built on ``scaled_dot_product_attention``.

    With one input it is self-attention: the module holds ``qkv`` (``Linear(D, 3D)``, queries, keys and
    values in that order) and ``proj`` (``Linear(D, D)``), the GPT-2 layout. With a second input ``kv``
    (``[B, S, E]``, any width ``E``) it is cross-attention: ``q`` (``Linear(D, D)``) projects ``x``, ``kv``
    (``Linear(E, 2D)``, keys then values) the second input, then ``proj``. With ``masked: true`` the last
    input is a mask: bool (true where a query may attend) or a float added to the scores. A mask of rank 2 is a
    padding mask ``[B, S]`` (read as ``[B, 1, 1, S]``), one of rank 3 is ``[B, T, S]`` (read as ``[B, 1, T, S]``),
    one of rank 4 broadcasts to ``[B, num_heads, T, S]``; a mask below rank 4 always starts with the batch, even
    where ``B`` and ``T`` are equal. ``causal`` combines with a mask. ``embed_dim`` follows from ``x``'s last dim.
    """
    from ..torch.layers import CrossAttention, SelfAttention

    cross = len(inputs) == 3 or (len(inputs) == 2 and not p.masked)
    if cross:
        kv_shape = inputs[1].shape
        assert kv_shape is not None
        return CrossAttention(
            p.embed_dim, int(kv_shape[-1]), p.num_heads, causal=p.causal, dropout=p.dropout, bias=p.bias
        )
    return SelfAttention(p.embed_dim, p.num_heads, causal=p.causal, dropout=p.dropout, bias=p.bias)
