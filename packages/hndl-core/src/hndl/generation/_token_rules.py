"""Which nodes act on each token alone: the cached variant runs only the new tokens through every node but
attention, so a node that mixes tokens any other way (a mean over T, a convolution, a recurrent op, an op not
known here) would compute something else. The op families and the checks on their sequence dim."""

from __future__ import annotations

from typing import Any

from .._graph import Node
from ._graph_edit import has_t, refuse

__all__ = ["ALONG_DIM", "BEFORE_LAST", "LAYOUT", "NORMS", "PER_TOKEN", "check_along", "check_layout"]

#: Ops that act on each token alone whatever their parameters (elementwise, or over the features only).
PER_TOKEN = frozenset(
    [
        "abs",
        "add",
        "cast",
        "ceil",
        "celu",
        "clamp",
        "cos",
        "div",
        "drop_path",
        "dropout",
        "elu",
        "eq",
        "erf",
        "exp",
        "floor",
        "ge",
        "gelu",
        "gt",
        "hardsigmoid",
        "hardswish",
        "hardtanh",
        "identity",
        "le",
        "leaky_relu",
        "linear",
        "linear_in_out",
        "log",
        "log1p",
        "logical_and",
        "logical_not",
        "logical_or",
        "logical_xor",
        "logsigmoid",
        "lt",
        "maximum",
        "minimum",
        "mish",
        "mul",
        "ne",
        "neg",
        "pow",
        "reciprocal",
        "relu",
        "relu6",
        "round",
        "rsqrt",
        "scale",
        "selu",
        "sigmoid",
        "sign",
        "silu",
        "sin",
        "softplus",
        "softsign",
        "sqrt",
        "sub",
        "tanh",
        "type_as",
        "where",
        "embedding",
        "parameter",
        "buffer",
    ]
)
#: Ops that act along one dim (``dim``): per token when that dim is not the sequence's.
ALONG_DIM = frozenset(["chunk", "split", "concat", "select", "slice", "softmax", "log_softmax", "glu", "mean"])
#: Ops that rearrange a tensor: per token when every dim up to the sequence's is left as it is.
LAYOUT = frozenset(["reshape", "flatten", "permute", "transpose"])
#: Norms over the last ``len(normalized_shape)`` dims.
NORMS = frozenset({"layernorm", "rmsnorm"})
#: Per-token ops of one input the last token's ``select`` may move before (the final norm and the head).
BEFORE_LAST = frozenset(
    [
        "linear",
        "linear_in_out",
        "layernorm",
        "rmsnorm",
        "dropout",
        "identity",
        "scale",
        "gelu",
        "relu",
        "silu",
        "tanh",
        "sigmoid",
        "cast",
    ]
)


def check_along(node: Node, c: Any, where: str, t: str) -> None:
    """Refuse ``node`` (an ALONG_DIM op or a norm) when it acts along the sequence dim ``t``."""
    for typ in c.in_types:
        shape = typ.shape
        if shape is None:
            raise refuse(f"node {where!r} (op {node.op!r}) has an input of unknown shape", where)
        rank = len(shape)
        if node.op in NORMS:
            dims = list(range(rank - len(c.params.normalized_shape), rank))
        else:
            dim = c.params.dim
            dims = list(dim) if isinstance(dim, (list, tuple)) else [dim] if dim is not None else list(range(rank))
            dims = [d % rank if rank else 0 for d in dims]
        if any(d < rank and has_t(shape[d], t) for d in dims):
            raise refuse(
                f"node {where!r} (op {node.op!r}) acts along the sequence dim {t} of its input "
                f"{list(map(str, shape))}; the cached variant gives it only the new tokens",
                where,
            )


def check_layout(node: Node, c: Any, where: str, t: str, *, moves: bool = False) -> None:
    """Refuse ``node`` (a LAYOUT op, or ``expand``) when it merges the sequence dim ``t`` with another, or, unless
    ``moves`` (the sdpa pattern's heads, ``[B, T, H, D] -> [B, H, T, D]``), moves it or changes a dim before it."""
    before, after = c.in_types[0].shape, c.out_types[0].shape
    at = None if before is None else next((i for i, d in enumerate(before) if has_t(d, t)), None)
    if at is None:
        return
    if moves and sum(has_t(d, t) for d in before) == 1:
        kept = after is not None and sum(str(d) == str(before[at]) for d in after) == 1
        if kept and sum(has_t(d, t) for d in after) == 1:
            return
    if after is None or len(after) <= at or [str(d) for d in before[: at + 1]] != [str(d) for d in after[: at + 1]]:
        raise refuse(
            f"node {where!r} (op {node.op!r}) moves or merges the sequence dim {t}: "
            f"{list(map(str, before))} -> {list(map(str, after or ()))}",
            where,
        )
