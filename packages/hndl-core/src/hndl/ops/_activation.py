"""Elementwise activations (relu, gelu, silu, tanh, sigmoid) and the normalising ones (softmax, log_softmax)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType
from .._registry import Param, Params, Port, op
from ._common import open_index

_SAME_IN = [Port("x", ["*shape"])]
_SAME_OUT = [Port("y", ["*shape"], dtype="same:x")]


@op("relu", inputs=_SAME_IN, outputs=_SAME_OUT, module="torch.nn.ReLU", example={"op": "relu"})
def relu(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Rectified linear unit, ``max(x, 0)``, elementwise."""
    import torch

    return torch.nn.ReLU()


@op(
    "gelu",
    params=[
        Param(
            "approximate",
            "str",
            default="none",
            choices=("none", "tanh"),
            doc="'none' for the exact erf form, 'tanh' for the tanh approximation (GPT-2)",
        )
    ],
    inputs=_SAME_IN,
    outputs=_SAME_OUT,
    module="torch.nn.GELU",
    example={"op": "gelu", "approximate": "tanh"},
)
def gelu(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Gaussian error linear unit, ``x * Phi(x)``, elementwise."""
    import torch

    return torch.nn.GELU(approximate=p.approximate)


@op("silu", inputs=_SAME_IN, outputs=_SAME_OUT, module="torch.nn.SiLU", example={"op": "silu"})
def silu(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Sigmoid linear unit (swish), ``x * sigmoid(x)``, elementwise."""
    import torch

    return torch.nn.SiLU()


@op("tanh", inputs=_SAME_IN, outputs=_SAME_OUT, module="torch.nn.Tanh", example={"op": "tanh"})
def tanh(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Hyperbolic tangent, elementwise."""
    import torch

    return torch.nn.Tanh()


@op("sigmoid", inputs=_SAME_IN, outputs=_SAME_OUT, module="torch.nn.Sigmoid", example={"op": "sigmoid"})
def sigmoid(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Logistic sigmoid, ``1 / (1 + exp(-x))``, elementwise."""
    import torch

    return torch.nn.Sigmoid()


def _along_dim_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is not None:
        open_index(t.shape, p.dim)  # validates the dim whenever the rank allows it
    return [t]


_DIM = Param("dim", "int", default=-1, doc="the dim to normalise over (negative counts from the end)")


@op(
    "softmax",
    params=[_DIM],
    inputs=_SAME_IN,
    outputs=_SAME_OUT,
    infer=_along_dim_infer,
    module="torch.nn.Softmax",
    inference="dim must be within the input's rank",
    example={"op": "softmax", "dim": -1},
)
def softmax(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Softmax along ``dim``: exponentials normalised to sum to one."""
    import torch

    return torch.nn.Softmax(dim=p.dim)


@op(
    "log_softmax",
    params=[_DIM],
    inputs=_SAME_IN,
    outputs=_SAME_OUT,
    infer=_along_dim_infer,
    module="torch.nn.LogSoftmax",
    inference="dim must be within the input's rank",
    example={"op": "log_softmax", "dim": -1},
)
def log_softmax(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Logarithm of the softmax along ``dim``, computed stably."""
    import torch

    return torch.nn.LogSoftmax(dim=p.dim)
