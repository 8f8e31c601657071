"""The vocabulary of the facts an op declares about its layer for the estimates, and the rules the built-in ops
share: what backward keeps (:attr:`hndl.OpDef.saves`), what a layer keeps inside it (``inner_memory``) and what
it costs in multiply-adds (``macs``).

A rule is a function of one checked node, read only through ``node.params``, ``node.in_types`` and
``node.out_types`` (:class:`FactNode`), so this module sits below both the registry and the checker: the ops
declare rules from here, and :mod:`hndl._check`, which imports the ops, hands the rules its
:class:`~hndl._checked.CheckedNode`. No torch here.

Multiply-adds are counted for the products that ``torch.utils.flop_counter.FlopCounterMode`` counts (matrix
products and convolutions, FLOPs = 2 x MACs), so the two agree; an op without a rule counts 0, as element-wise
ops, norms, pooling and lookups do there. Every count is a :data:`~hndl._dims.Dim` over the graph inputs'
symbols.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import Any, Protocol

from ._contracts import TensorType, Variadic
from ._dims import Dim, Poly, dim_add, dim_mul
from ._errors import HndlError, Problem
from .naming import excerpt

__all__ = [
    "SAVES",
    "FactNode",
    "apply_rule",
    "InnerRule",
    "MacsRule",
    "conv_macs",
    "conv_transpose_macs",
    "linear_macs",
    "mask_memory",
    "matmul_macs",
    "numel",
    "pool_indices_memory",
    "recurrent_macs",
    "sdpa_macs",
]

#: What an op's backward keeps of its forward (:attr:`hndl.OpDef.saves`): its floating ``inputs``, its
#: ``output``, ``both``, ``none`` (it needs only shapes, integer indices or registered tensors, whose memory is not
#: an activation's), or ``unknown`` (not declared: counted as its output, the cautious guess).
SAVES = ("inputs", "output", "both", "none", "unknown")


class FactNode(Protocol):
    """What a rule reads of a checked node (:class:`hndl._checked.CheckedNode` is one)."""

    @property
    def params(self) -> Any: ...

    @property
    def in_types(self) -> Sequence[TensorType]: ...

    @property
    def out_types(self) -> Sequence[TensorType]: ...


#: ``macs(node) -> Dim | None``: the node's multiply-adds, ``None`` when a shape it needs is unknown.
MacsRule = Callable[[Any], "Dim | None"]

#: ``inner_memory(node) -> [(elements, dtype), ...] | None``: what the layer keeps inside it for backward besides
#: its inputs and output (``"float"`` stands for the model's floating dtype), ``None`` when a shape is unknown.
InnerRule = Callable[[Any], "list[tuple[Dim, str]] | None"]


#: What each rule counts, for the message when one fails.
_WHAT = {"macs": "the multiply-adds", "inner_memory": "the memory its layer keeps inside for backward"}


def _is_dim(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, Poly)


def _valid(what: str, value: Any) -> bool:
    if value is None:
        return True
    if what == "macs":
        return _is_dim(value)
    return isinstance(value, list) and all(
        isinstance(item, tuple) and len(item) == 2 and _is_dim(item[0]) and isinstance(item[1], str) for item in value
    )


def apply_rule(node: Any, what: str, rule: Callable[[Any], Any]) -> Any:
    """``rule(node)``, the op's ``what`` rule (``"macs"``, ``"inner_memory"``); a rule that raises or answers
    something else than its declared form is the op's bug, reported as E_OP naming the node and the op (a
    plugin's rule must not surface as a bare TypeError from inside hndl)."""
    try:
        value = rule(node)
        error = None if _valid(what, value) else f"it returned {excerpt(value)}"
    except HndlError:
        raise
    except Exception as exc:
        error = f"it raised {type(exc).__name__}: {excerpt(str(exc))}"
    if error is None:
        return value
    expected = (
        "a dim (an int, or a Dim over the symbols) or None"
        if what == "macs"
        else ("a list of (elements, dtype) pairs, or None")
    )
    raise HndlError(
        Problem(
            "E_OP",
            f"op {node.opdef.name!r} could not count {_WHAT[what]} of the node: {error}",
            node=getattr(node, "qualname", None),
            op=node.opdef.name,
            expected=expected,
            hint=f"fix the op's {what} rule (hndl.OpDef.{what}): it gets the checked node (params, in_types, "
            "out_types); combine symbolic dims with hndl._dims.dim_mul and dim_add",
        )
    ) from None


def numel(shape: Sequence[Any] | None) -> Dim | None:
    """The element count of a static shape; a ``*batch`` run counts as the opaque factor ``prod(batch)``."""
    if shape is None:
        return None
    total: Dim = 1
    for d in shape:
        # An atom that no symbol can bind: the count of a variadic run stays symbolic even when dims are given.
        factor = Poly((((f"prod({d.name})",), 1),)) if isinstance(d, Variadic) else d
        total = dim_mul(total, factor)
    return total


def _ints(value: Any) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),)


def _times(count: Dim | None, factor: Dim) -> Dim | None:
    return None if count is None else dim_mul(count, factor)


# --- multiply-adds ---------------------------------------------------------------------------------------------


def linear_macs(node: FactNode) -> Dim | None:
    """addmm: every output element is a dot product of length ``in_features``."""
    return _times(numel(node.out_types[0].shape), node.params.in_features)


def conv_macs(node: FactNode) -> Dim | None:
    """Every output element sums ``in_channels / groups`` x kernel products."""
    p = node.params
    return _times(numel(node.out_types[0].shape), (p.in_channels // p.groups) * prod(_ints(p.kernel_size)))


def conv_transpose_macs(node: FactNode) -> Dim | None:
    """The transpose scatters: every *input* element meets ``out_channels / groups`` x kernel weights."""
    p = node.params
    return _times(numel(node.in_types[0].shape), (p.out_channels // p.groups) * prod(_ints(p.kernel_size)))


def matmul_macs(node: FactNode) -> Dim | None:
    """The contracted dim is the first operand's last; every output element is one dot product over it."""
    a = node.in_types[0].shape
    if not a:
        return None
    return _times(numel(node.out_types[0].shape), a[-1])


def sdpa_macs(node: FactNode) -> Dim | None:
    """``q @ k^T``: B x H x T x S dot products of length D; ``weights @ v``: B x H x T x Dv of length S."""
    q, k, v = (t.shape for t in node.in_types[:3])
    if q is None or k is None or v is None or len(q) != 4 or len(k) != 4 or len(v) != 4:
        return None
    rows = dim_mul(dim_mul(q[0], q[1]), dim_mul(q[2], k[2]))
    return dim_mul(rows, dim_add(q[3], v[3]))


def recurrent_macs(gates: int) -> MacsRule:
    """An LSTM (4 gates) or GRU (3): the input and hidden projections to every gate, per step and direction."""

    def rule(node: FactNode) -> Dim | None:
        p = node.params
        x = node.in_types[0].shape
        if x is None or len(x) != 3:
            return None
        steps = dim_mul(x[0], x[1])
        directions = 2 if p.bidirectional else 1
        per_step = 0
        for layer in range(p.num_layers):
            width = p.input_size if layer == 0 else p.hidden_size * directions
            per_step += directions * gates * p.hidden_size * (width + p.hidden_size)
        return dim_mul(steps, per_step)

    return rule


# --- what a layer keeps inside it ------------------------------------------------------------------------------


def mask_memory(node: FactNode) -> list[tuple[Dim, str]] | None:
    """Dropout's boolean mask over the output, kept while training with ``p > 0``."""
    if not node.params.get("p"):
        return []
    count = numel(node.out_types[0].shape)
    return None if count is None else [(count, "bool")]


def pool_indices_memory(node: FactNode) -> list[tuple[Dim, str]] | None:
    """Max pooling keeps the argmax of every output element, as int64, besides its input."""
    count = numel(node.out_types[0].shape)
    return None if count is None else [(count, "int64")]
