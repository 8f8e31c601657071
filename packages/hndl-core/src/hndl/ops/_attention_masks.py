"""Attention masks: what a mask of each rank means, the check of a mask against the attention scores (used by
``attention`` and ``sdpa``), the sliding-window rule, and the ``attention_mask`` op, which turns a padding mask
into the rank-4 mask every layer shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType, dtype_satisfies, format_shape, is_unknown
from .._dims import Dim, format_dim
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import broadcast_shapes, open_at

#: What a mask of each rank means: below rank 4 a mask always starts with the batch, and is read as rank 4 by
#: inserting the dims it lacks (torch's right-aligned broadcasting would read a padding mask ``[B, S]`` as
#: ``[T, S]``, which is silently wrong when ``B == T``).
MASK_FORMS = {2: "a padding mask [B, S]", 3: "[B, T, S]", 4: "broadcastable to [B, num_heads, T, S]"}

#: How a mask every row of the batch shares is given: at rank 4, where no dim is read as the batch.
SHARED_MASK_HINT = (
    "a mask below rank 4 starts with the batch; a mask the whole batch shares, [T, S], is given at rank 4: "
    "declare it [1, 1, T, S], or add {op: expand, shape: [1, 1, -1, -1]} before the attention"
)


def mask_as_rank4(shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """A static mask shape as the layer reads it: ``[B, S]`` -> ``[B, 1, 1, S]``, ``[B, T, S]`` -> ``[B, 1, T, S]``."""
    if len(shape) == 2:
        return (shape[0], 1, 1, shape[1])
    if len(shape) == 3:
        return (shape[0], 1, shape[1], shape[2])
    return shape


def check_mask(mask: TensorType, scores: tuple[Dim, ...] | None, *, port: str = "mask", additive: bool = False) -> None:
    """A mask (or, ``additive``, a score bias) against the attention scores ``[B, heads, T, S]``.

    A mask is bool (true: attend) or floating (added to the scores); a score bias is floating. Either has rank
    2 (``[B, S]``), 3 (``[B, T, S]``) or 4, and broadcasts to the scores once read as rank 4.

    Raises:
        InferError: E_DTYPE for another dtype, E_SHAPE for another rank or a shape that does not fit.
    """
    is_bool = dtype_satisfies(mask.dtype, "bool") is True
    if (additive and dtype_satisfies(mask.dtype, "float") is not True and mask.dtype != "any") or (
        not additive and not is_bool and dtype_satisfies(mask.dtype, "float") is False
    ):
        raise InferError(
            f"the {port}'s dtype is {mask.dtype}",
            code="E_DTYPE",
            port=port,
            expected="a float added to the scores"
            if additive
            else "bool (true: attend) or a float added to the scores",
            actual=mask.dtype,
            hint="pass mask.bool() for a 1/0 padding mask (transformers' attention_mask), and declare the input "
            "with dtype: bool"
            if not additive and dtype_satisfies(mask.dtype, "int") is True
            else None,
        )
    if mask.shape is None or open_at(mask.shape) is not None or scores is None:
        return
    rank = len(mask.shape)
    if rank not in MASK_FORMS:
        raise InferError(
            f"the {port} has rank {rank}",
            port=port,
            expected="rank 2 [B, S] (padding), rank 3 [B, T, S] or rank 4 broadcastable to [B, num_heads, T, S]",
            actual=format_shape(mask.shape),
            hint="a padding mask is [B, S]: true (or 0.0) where a key may be attended to",
        )
    _check_batch(mask.shape, scores, port)
    try:
        broadcast_shapes(scores, mask_as_rank4(mask.shape), ("scores", port))
    except InferError as exc:
        what = f"padding {port} " if rank == 2 else f"{port} "
        read = "" if rank == 4 else f" (read as {format_shape(mask_as_rank4(mask.shape))})"
        raise InferError(
            f"the {what}{format_shape(mask.shape)}{read} does not broadcast to the attention scores "
            f"[B, num_heads, T, S] = {format_shape(scores)}",
            port=port,
            expected=f"{MASK_FORMS[rank]}, with {format_shape(scores)} for [B, num_heads, T, S]",
            actual=format_shape(mask.shape),
            hint=SHARED_MASK_HINT,
        ) from exc


def _is_not_batch(first: Dim, batch: Dim) -> bool:
    """Whether a mask's dim 0 is a symbol other than the batch's: ``T`` where the batch is ``B``, which a call
    may bind to the same size and so pass a ``[T, T]`` mask off as ``[B, S]``. An int is left to broadcasting
    (statically against an int batch, at the call against a symbolic one), as is a dim inference does not know."""
    return not (isinstance(first, int) or first == batch or is_unknown(first) or is_unknown(batch))


def _check_batch(shape: tuple[Dim, ...], scores: tuple[Dim, ...], port: str) -> None:
    """A mask's dim 0 is the batch of the scores (the same symbol or size) or 1, at every rank: the rule that
    keeps a ``[T, S]`` mask from being read as a padding mask ``[B, S]`` whenever a call has ``B == T``."""
    first, batch = shape[0], scores[0]
    if not _is_not_batch(first, batch):
        return
    rank = len(shape)
    read = "" if rank == 4 else f" (as {format_shape(mask_as_rank4(shape))})"
    raise InferError(
        f"the {port} {format_shape(shape)} is read as {MASK_FORMS[rank]}{read}, and its dim 0 is "
        f"{format_dim(first)}, not the batch {format_dim(batch)}",
        port=port,
        expected=f"dim 0 the batch {format_dim(batch)} (or 1): {MASK_FORMS[rank]}",
        actual=format_shape(shape),
        hint=SHARED_MASK_HINT + ("; a causal mask is causal: true" if rank == 2 and shape[0] == shape[1] else ""),
    )


def check_window(p: Params) -> None:
    if p.window is not None and not p.causal:
        raise InferError(
            f"window={p.window} is a sliding window over earlier keys, and causal is false",
            code="E_PARAM",
            param="window",
            expected="causal: true with a window",
            actual=p.window,
            hint="set causal: true (Mistral's sliding window), or drop window",
        )


# --- attention_mask -------------------------------------------------------------------------------------


def _attention_mask_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    check_window(p)
    padding = inputs[0]
    shape = padding.shape
    if shape is None or open_at(shape) is not None:
        return [TensorType(None, "bool")]
    if len(shape) != 2:
        raise InferError(
            f"the padding mask has rank {len(shape)}",
            port="padding",
            expected="[B, S]",
            actual=format_shape(shape),
        )
    return [TensorType((shape[0], 1, shape[1], shape[1]), "bool")]


@op(
    "attention_mask",
    saves="none",
    returns="new",
    params=[
        Param("causal", "bool", default=False, doc="fold in the causal pattern: query i sees keys 0..i"),
        Param("window", "int", default=None, nullable=True, min=1, doc="with causal: only the window latest keys"),
    ],
    inputs=[Port("padding", ["B", "S"], dtype="bool", doc="true for a real token, false for padding")],
    outputs=[Port("y", ["B", 1, "S", "S"], dtype="bool")],
    infer=_attention_mask_infer,
    layer="hndl.torch.layers.AttentionMask",
    inference="window needs causal",
    example={"op": "attention_mask", "causal": True},
    input_shape_example=["B", "S"],
    error_example={"inputs": [{"shape": ["B", "S"], "dtype": "int64"}]},
)
def attention_mask(p: Params, inputs: Sequence[TensorType]) -> Any:
    """A padding mask ``[B, S]`` as self-attention's rank-4 bool mask ``[B, 1, S, S]``.

    Query ``i`` may attend to key ``j`` when ``j`` is a real token, and with ``causal`` when ``j <= i`` (with
    ``window``, also ``j > i - window``). Made once at the top of a model and passed to every layer (``masked``
    attention, through ``repeat``'s ``shared`` inputs), as transformers builds its mask once per forward. What a
    query row with no key allowed gives (left padding under ``causal``) is SDPA's answer: zeros with torch 2.13
    and 2.14.
    """
    return layer_of("attention_mask")(causal=p.causal, window=p.window)
