"""Multi-head self-attention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType
from .._registry import InferError, Param, Params, Port, op


def _attention_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.embed_dim % p.num_heads:
        divisors = [h for h in range(1, p.embed_dim + 1) if p.embed_dim % h == 0]
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
    return [inputs[0]]


@op(
    "attention",
    params=[
        Param("num_heads", "int", min=1, doc="number of attention heads; must divide embed_dim"),
        Param("embed_dim", "int", min=1, inferred=True, doc="model width D (inferred from the input's last dim)"),
        Param("causal", "bool", default=False, doc="each position attends only to itself and earlier positions"),
        Param("dropout", "float", default=0.0, min=0, max=1, doc="dropout on the attention weights, in training only"),
        Param("bias", "bool", default=True, doc="learn biases in the qkv and output projections"),
    ],
    inputs=[Port("x", ["B", "T", "embed_dim"], doc="batch, sequence, features")],
    outputs=[Port("y", ["B", "T", "embed_dim"], dtype="same:x")],
    infer=_attention_infer,
    module="hndl.torch.layers.SelfAttention",
    inference="num_heads must divide embed_dim",
    example={"op": "attention", "num_heads": 12, "causal": True},
    input_shape_example=["B", "T", 768],
)
def attention(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Multi-head self-attention over ``[B, T, D]``, built on ``scaled_dot_product_attention``.

    The module holds ``qkv`` (``Linear(D, 3D)``, queries, keys and values in that order) and ``proj``
    (``Linear(D, D)``), the GPT-2 layout. ``embed_dim`` follows from the input's last dim.
    """
    from ..torch.layers import SelfAttention

    return SelfAttention(p.embed_dim, p.num_heads, causal=p.causal, dropout=p.dropout, bias=p.bias)
