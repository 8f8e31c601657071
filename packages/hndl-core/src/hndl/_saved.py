"""What backward keeps of each op's forward: the rows the training-memory estimate (:mod:`hndl._memory`) reads.

Autograd keeps a tensor for backward when the derivative of the op that read or made it needs it: a linear
layer keeps its input (the weight's gradient is ``grad^T @ x``), ReLU its output (the gradient passes where
it is positive), an addition nothing. So an activation costs memory in a training step when its producer keeps
its output, or when any op that reads it keeps its inputs, and not otherwise: the logits of a language model
head, read by nothing but the loss, are freed as soon as the loss is made. Each op here says which of the two it
keeps (torch's derivative formulas, ``tools/autograd/derivatives.yaml``), and a layer that makes tensors inside
it (attention's projected queries, keys and values) says how many elements it keeps besides.

One table, :data:`SAVES`, op name -> what it keeps; an op missing from it keeps its output (the cautious
guess: a layer hndl does not know, a ``module`` node). :data:`INNER` gives the extra elements of the layers
that hold some. No torch here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from ._check import CheckedNode
from ._costs import numel
from ._dims import Dim, dim_add, dim_mul
from .ops._attention_ports import AttentionPorts

__all__ = ["INNER", "PASSES_GRADIENT", "SAVES", "inner", "saves"]

#: What the op's backward keeps: its floating ``inputs``, its ``output``, ``both``, or ``none`` (it needs only
#: shapes, integer indices or registered tensors: their memory is not an activation's).
SAVES: Mapping[str, str] = {
    **dict.fromkeys(
        (
            # Gradients that need only the output's shape, or a constant.
            *("add", "sub", "neg", "concat", "reshape", "permute", "transpose", "flatten", "slice", "select"),
            *("split", "chunk", "expand", "identity", "pad", "roll", "tril", "triu", "cast", "scale", "mean"),
            *("adaptive_avgpool1d", "adaptive_avgpool2d", "upsample", "embedding", "index", "where"),
            *("eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor", "logical_not"),
            *("round", "floor", "ceil", "sign", "positions", "attention_mask", "buffer", "parameter"),
            # The registered cos/sin tables, or a per-sample noise of B elements: not activations.
            *("rotary", "drop_path"),
            # A lookup of a learned table by integer buckets (an embedding's backward needs only the indices).
            "relative_position_bias",
        ),
        "none",
    ),
    **dict.fromkeys(
        (
            *("linear", "linear_in_out", "conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d", "matmul"),
            *("mul", "div"),
            *("layernorm", "layernorm2d", "rmsnorm", "batchnorm1d", "batchnorm2d", "groupnorm"),
            *("gelu", "silu", "mish", "softplus", "hardswish", "hardsigmoid", "hardtanh", "relu6"),
            *("leaky_relu", "elu", "selu", "celu", "prelu", "glu", "logsigmoid", "softsign", "erf", "log"),
            *("log1p", "pow", "sin", "cos", "abs", "clamp", "minimum", "maximum"),
            *("avgpool1d", "avgpool2d", "maxpool1d", "maxpool2d"),
        ),
        "inputs",
    ),
    **dict.fromkeys(
        ("relu", "sigmoid", "tanh", "softmax", "log_softmax", "exp", "sqrt", "rsqrt", "reciprocal"), "output"
    ),
    # scaled_dot_product_attention keeps the queries, keys, values and its output (and a log-sum-exp row).
    "sdpa": "both",
    # The recurrent layers keep their input and every step's hidden (and cell) state, which make the output.
    "lstm": "both",
    "gru": "both",
    # Attention keeps its input (the projections read it); what it makes inside is INNER's row.
    "attention": "inputs",
    # The dropout mask, one byte per element, is INNER's row; the output itself is kept by whoever needs it.
    "dropout": "none",
}


#: Ops whose backward hands their output's gradient to their inputs as it is, or as views of it: no new memory.
PASSES_GRADIENT = frozenset(
    ("add", "reshape", "permute", "transpose", "flatten", "slice", "select", "split", "chunk", "identity", "concat")
)


def _attention(node: CheckedNode) -> list[tuple[Dim, str]] | None:
    """The projected queries, keys and values and the attention's output before its projection: what the
    projections' and scaled_dot_product_attention's backward keep inside the layer (rotary embedding keeps
    another copy of the queries and keys, rotated)."""
    p = node.params
    x = node.in_types[0].shape
    if x is None or len(x) != 3:
        return None
    b, t, d = x
    heads = p.num_heads
    kv_heads = p.get("kv_heads") or heads
    head_dim = p.get("head_dim") or d // heads
    tokens = dim_mul(b, t)
    # q and the output at T tokens; k and v at the source's (x itself, or the kv input's S tokens).
    kv_type = AttentionPorts.of(p, len(node.in_types)).pick(node.in_types, "kv")
    kv = None if kv_type is None else kv_type.shape
    sources = tokens if kv is None or len(kv) != 3 else dim_mul(kv[0], kv[1])
    copies = 2 if p.get("rope") else 1
    queries = dim_mul(tokens, (copies + 1) * heads * head_dim)
    keys = dim_mul(sources, (copies + 1) * kv_heads * head_dim)
    return [(dim_add(queries, keys), "float")]


def _dropout(node: CheckedNode) -> list[tuple[Dim, str]] | None:
    """A boolean mask over the output, kept while training with ``p > 0``."""
    if not node.params.get("p"):
        return []
    count = numel(node.out_types[0].shape)
    return None if count is None else [(count, "bool")]


def _pool_indices(node: CheckedNode) -> list[tuple[Dim, str]] | None:
    """Max pooling keeps the argmax of every output element, as int64, besides its input."""
    count = numel(node.out_types[0].shape)
    return None if count is None else [(count, "int64")]


#: Op name -> what the layer keeps inside it besides its inputs and output: (elements, dtype) pairs, ``float``
#: standing for the model's floating dtype.
INNER: Mapping[str, Callable[[CheckedNode], list[tuple[Dim, str]] | None]] = {
    "attention": _attention,
    "dropout": _dropout,
    "maxpool1d": _pool_indices,
    "maxpool2d": _pool_indices,
}


def saves(node: CheckedNode) -> str:
    """What ``node``'s backward keeps (a value of :data:`SAVES`); its output for an op hndl does not know."""
    if node.opdef.imports_code:
        return "output"
    return SAVES.get(node.op, "output")


def inner(node: CheckedNode) -> list[tuple[Dim, str]] | None:
    """What ``node`` keeps inside it for backward, as (elements, dtype) pairs (none for most ops; None when
    its input's shape is unknown)."""
    rule = INNER.get(node.op)
    return [] if rule is None else rule(node)
