"""Dense layers: linear."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType
from .._registry import Param, Params, Port, op


@op(
    "linear",
    params=[
        Param("out_features", "int", min=1, doc="size of each output sample"),
        Param("in_features", "int", min=1, inferred=True, doc="size of each input sample (inferred)"),
        Param("bias", "bool", default=True, doc="learn an additive bias"),
    ],
    inputs=[Port("x", ["*batch", "in_features"], doc="features in the last dim")],
    outputs=[Port("y", ["*batch", "out_features"], dtype="same:x")],
    module="torch.nn.Linear",
    example={"op": "linear", "out_features": 128},
    input_shape_example=["B", 784],
)
def linear(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Affine map of the last dim: ``y = x @ W.T + b``.

    ``in_features`` follows from the input's last dim and is never written by hand.
    """
    import torch

    return torch.nn.Linear(p.in_features, p.out_features, bias=p.bias)
