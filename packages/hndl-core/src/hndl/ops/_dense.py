"""Dense layers and pass-throughs: linear, embedding, dropout, identity."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import INT_DTYPES, TensorType
from .._op_facts import linear_macs, mask_memory
from .._registry import InferError, Param, Params, Port, layer_of, op

# The affine maps' parameters: linear (weight [out, in]) and linear_in_out (weight [in, out]) alike.
_LINEAR_PARAMS = [
    Param("out_features", "int", min=1, doc="size of each output sample"),
    Param("in_features", "int", min=1, inferred=True, doc="size of each input sample (inferred)"),
    Param("bias", "bool", default=True, doc="learn an additive bias"),
]


@op(
    "linear",
    saves="inputs",
    macs=linear_macs,
    params=_LINEAR_PARAMS,
    inputs=[Port("x", ["*batch", "in_features"], doc="features in the last dim")],
    outputs=[Port("y", ["*batch", "out_features"], dtype="same:x")],
    layer="torch.nn.Linear",
    example={"op": "linear", "out_features": 128},
    input_shape_example=["B", 784],
    returns="new",
    aliases={"Dense": {}},
    imports={"aten.linear.default": "linear"},
)
def linear(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Affine map of the last dim: ``y = x @ W.T + b``.

    ``in_features`` follows from the input's last dim and is never written by hand.
    """
    import torch

    return torch.nn.Linear(p.in_features, p.out_features, bias=p.bias)


@op(
    "linear_in_out",
    saves="inputs",
    macs=linear_macs,
    params=_LINEAR_PARAMS,
    inputs=[Port("x", ["*batch", "in_features"], doc="features in the last dim")],
    outputs=[Port("y", ["*batch", "out_features"], dtype="same:x")],
    layer="hndl.torch.layers.LinearInOut",
    example={"op": "linear_in_out", "out_features": 192},
    input_shape_example=["B", "T", 64],
    returns="new",
    aliases={"Conv1D": {}},
    error_example={"params": {"out_features": 192}, "inputs": [[]]},
    imports={"aten.addmm.default": "addmm"},
)
def linear_in_out(p: Params, inputs: Sequence[TensorType]) -> Any:
    """``linear`` with its weight stored ``[in_features, out_features]``: ``y = x @ W + b``.

    transformers' GPT-2 ``Conv1D`` (and Keras's and Flax's ``Dense``) keep the weight this way round, the
    transpose of ``torch.nn.Linear``'s; the layer computes as ``Conv1D`` does, ``torch.addmm(b, x2d, W)`` on the
    input flattened to two dims, so its outputs equal ``Conv1D``'s bit for bit and its state dict takes
    ``Conv1D``'s as it is.
    """
    return layer_of("linear_in_out")(p.in_features, p.out_features, bias=p.bias)


def _embedding_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.padding_idx is not None and not -p.num_embeddings <= p.padding_idx < p.num_embeddings:
        raise InferError(
            f"padding_idx {p.padding_idx} is not an index into {p.num_embeddings} embeddings",
            code="E_PARAM",
            param="padding_idx",
            expected=f"{-p.num_embeddings} .. {p.num_embeddings - 1}",
            actual=p.padding_idx,
        )
    if inputs[0].dtype in INT_DTYPES and inputs[0].dtype not in ("int32", "int64"):
        # The port takes any integer dtype (the run-time check decides for "int"), but torch's embedding
        # takes only int32 and int64 indices: a declared int8 or uint8 input would fail at every call.
        raise InferError(
            f"embedding takes int32 or int64 indices, got {inputs[0].dtype}",
            code="E_DTYPE",
            port="x",
            expected="int32 or int64",
            actual=inputs[0].dtype,
            hint="declare the input int64 (or convert it with .long())",
        )
    shape = inputs[0].shape
    return [TensorType(None if shape is None else (*shape, p.embedding_dim), "float")]  # the weight's dtype


@op(
    "embedding",
    saves="none",
    params=[
        Param("num_embeddings", "int", min=1, doc="size of the vocabulary (indices run 0 .. num_embeddings-1)"),
        Param("embedding_dim", "int", min=1, doc="size of each embedding vector"),
        Param(
            "padding_idx",
            "int",
            default=None,
            nullable=True,
            doc="an index whose vector stays zero and gets no gradient (negative counts from the end)",
        ),
    ],
    inputs=[Port("x", ["*batch"], dtype="int", doc="integer indices, any shape")],
    outputs=[Port("y", ["*batch", "embedding_dim"], dtype="float")],
    infer=_embedding_infer,
    layer="torch.nn.Embedding",
    example={"op": "embedding", "num_embeddings": 50257, "embedding_dim": 768},
    input_shape_example=["B", "T"],
    returns="new",
    imports={"aten.embedding.default": "embedding"},
)
def embedding(p: Params, inputs: Sequence[TensorType]) -> Any:
    """A lookup table: each integer index becomes a learned vector of ``embedding_dim`` floats.

    The input must be declared with an integer dtype (``dtype: int64``).
    """
    import torch

    return torch.nn.Embedding(p.num_embeddings, p.embedding_dim, padding_idx=p.padding_idx)


@op(
    "dropout",
    saves="none",
    inner_memory=mask_memory,
    params=[
        Param("p", "float", default=0.5, min=0, max=1, doc="probability of zeroing an element in training"),
        Param(
            "always",
            "bool",
            default=False,
            doc="drop in eval mode too (Monte Carlo dropout: F.dropout(x, p, training=True))",
        ),
    ],
    inputs=[Port("x", ["*shape"])],
    outputs=[Port("y", ["*shape"], dtype="same:x")],
    layer="torch.nn.Dropout",
    example={"op": "dropout", "p": 0.1},
    input_shape_example=["B", 128],
    returns="input",
)
def dropout(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Zero each element with probability ``p`` in training mode and scale the rest by ``1/(1-p)``.

    In eval mode it passes its input through unchanged, unless ``always`` is true: then it drops in eval mode as
    well, as ``F.dropout(x, p, training=True)`` does (Monte Carlo dropout, which samples a model's uncertainty at
    inference); with the same seed it zeroes the same elements as that call.
    """
    import torch

    if p.always:
        from ..torch.layers import AlwaysDropout

        return AlwaysDropout(p.p)
    return torch.nn.Dropout(p.p)


@op(
    "identity",
    saves="none",
    passes_gradient=True,
    inputs=[Port("x", ["*shape"], dtype="any")],
    outputs=[Port("y", ["*shape"], dtype="same:x")],
    layer="torch.nn.Identity",
    example={"op": "identity"},
    input_shape_example=["B", 16],
    returns="input",
)
def identity(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Return the input unchanged (a named tap point in a graph)."""
    import torch

    return torch.nn.Identity()


@op(
    "drop_path",
    saves="none",
    params=[
        Param("p", "float", min=0, max=1, doc="probability of dropping a sample's path (or the batch's) in training"),
        Param(
            "mode",
            "str",
            default="row",
            choices=("row", "batch"),
            doc="'row': each sample on its own (dim 0); 'batch': the whole batch at once",
        ),
    ],
    inputs=[Port("x", ["N", "*rest"], doc="a residual branch's output; dim 0 is the batch")],
    outputs=[Port("y", ["N", "*rest"], dtype="same:x")],
    layer="hndl.torch.layers.DropPath",
    example={"op": "drop_path", "p": 0.1},
    input_shape_example=["B", 96, 56, 56],
    returns="input",
    aliases={"StochasticDepth": {"mode": "row"}, "stochastic_depth": {}},
    error_example={"params": {"p": 1.5}, "inputs": [["B", 96, 56, 56]]},
)
def drop_path(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Stochastic depth: in training, drop a residual branch for a random part of the batch.

    With probability ``p`` a sample's branch output (``mode: row``; the whole batch with ``mode: batch``)
    becomes zero, and what is kept is scaled by ``1/(1-p)``; in eval mode, or with ``p`` 0, the input passes
    through unchanged. This is torchvision's ``StochasticDepth(p, mode)`` and timm's ``DropPath``; it draws the
    same random numbers, so with one seed both give the same result bit for bit. It is not ``dropout``, which
    zeroes single elements. A schedule that grows with depth is one expression over graph parameters:
    ``p: "$rate * ($first + $repetition) / ($blocks - 1)"`` (SPEC 1.6).
    """
    return layer_of("drop_path")(p.p, p.mode)
