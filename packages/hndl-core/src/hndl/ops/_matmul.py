"""Matrix products: matmul (torch.matmul rules, batch dims broadcast). Element-wise arithmetic is in
``_elementwise``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import format_dim
from .._op_facts import matmul_macs
from .._registry import ImportRow, InferError, Params, Port, layer_of, op
from ._common import Shape, broadcast_shapes, open_at, promote, provably_different


def _split_matrix(shape: Shape, port: str) -> tuple[Shape, list[Any]] | None:
    """``(batch dims, [rows, cols])`` of a matmul operand (one core dim for a vector); ``None`` when open."""
    k = open_at(shape)
    if k is None:
        if len(shape) == 0:
            raise InferError(
                "matmul needs operands with at least 1 dim, got a 0-d tensor",
                port=port,
                expected="rank >= 1",
                actual=format_shape(shape),
            )
        core = 1 if len(shape) == 1 else 2
        return tuple(shape[: len(shape) - core]), list(shape[len(shape) - core :])
    if k < len(shape) - 2:
        return tuple(shape[:-2]), list(shape[-2:])
    return None


def _matmul_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    a, b = inputs
    dtype = a.dtype if a.dtype == b.dtype or b.dtype == "any" else promote(a.dtype, b.dtype)
    if a.shape is None or b.shape is None:
        return [TensorType(None, dtype)]
    sa, sb = _split_matrix(a.shape, "a"), _split_matrix(b.shape, "b")
    if sa is None or sb is None:
        return [TensorType(None, dtype)]
    (batch_a, core_a), (batch_b, core_b) = sa, sb
    inner_a = core_a[-1]
    inner_b = core_b[0]
    if provably_different(inner_a, inner_b):
        where_b = "dim 0" if len(core_b) == 1 else "dim -2"
        raise InferError(
            f"'a' {format_shape(a.shape)} and 'b' {format_shape(b.shape)} cannot be multiplied: the last dim of 'a' "
            f"({format_dim(inner_a)}) must equal {where_b} of 'b' ({format_dim(inner_b)})",
            port="b",
            expected=f"{where_b} = {format_dim(inner_a)}",
            actual=format_shape(b.shape),
            hint="transpose one operand, or check which dim holds the features",
        )
    rows = core_a[:-1]  # [] for a vector
    cols = core_b[1:]
    if not batch_a and not batch_b:
        return [TensorType((*rows, *cols), dtype)]
    try:
        batch = broadcast_shapes(batch_a, batch_b)
    except InferError as exc:
        raise InferError(
            f"the batch dims of 'a' {format_shape(a.shape)} and 'b' {format_shape(b.shape)} do not broadcast",
            port="b",
            expected=exc.expected,
            actual=format_shape(b.shape),
            hint="batch dims (all but the last two) must be equal, or 1",
        ) from None
    if batch is None:
        return [TensorType(None, dtype)]
    return [TensorType((*batch, *rows, *cols), dtype)]


@op(
    "matmul",
    saves="inputs",
    macs=matmul_macs,
    inputs=[Port("a", None, dtype="any", doc="left operand"), Port("b", None, dtype="same:a", doc="right operand")],
    outputs=[Port("y", None, dtype="same:a")],
    infer=_matmul_infer,
    layer="hndl.torch.layers.MatMul",
    inference=(
        "torch.matmul rules: [..., n, k] @ [..., k, m] -> [..., n, m] with the batch dims broadcast; a 1-d "
        "operand is a vector (its dim is dropped from the result); both operands share one dtype"
    ),
    example={"op": "matmul"},
    input_shape_example=["B", 64, 64],
    returns="new",
    error_example={"inputs": [["B", 64, 32], ["B", 64, 32]]},
    aliases={"mm": {}, "bmm": {}},
    imports={"aten.matmul.default": ImportRow("binary", {"numbers": False})},
)
def matmul(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Matrix product ``torch.matmul(a, b)``, batched over leading dims."""
    return layer_of("matmul")()
