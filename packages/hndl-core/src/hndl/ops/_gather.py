"""Ops that pick elements by integer tensors, or take a tensor apart: gather, index, unbind.

The picked positions are data, so inference checks what the shapes can say (ranks, which dims broadcast) and the
run decides the rest: an index out of range is torch's error at run time, named by the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import Dim
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import broadcast_shapes, norm_dim, open_at, open_index
from ._shape import MAX_PARTS

#: The integer dtypes torch indexes with (a uint8 or bool index is a mask, whose result's size is data).
INDEX_DTYPES = ("int64", "int32")


def _check_index_dtype(t: TensorType, port: str) -> None:
    if t.dtype not in INDEX_DTYPES and t.dtype not in ("int", "any"):
        raise InferError(
            f"'{port}' is {t.dtype}; torch indexes with int64 or int32 tensors",
            code="E_DTYPE",
            port=port,
            expected="int64 or int32",
            actual=t.dtype,
            hint="cast the index to int64 ({op: cast, dtype: int64}); a bool mask selects a data-dependent count",
        )


# --- gather ---------------------------------------------------------------------------------------------


def _gather_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x, index = inputs
    if index.dtype not in ("int64", "int", "any"):
        raise InferError(
            f"gather's index is {index.dtype}; torch.gather takes int64 indices",
            code="E_DTYPE",
            port="index",
            expected="int64",
            actual=index.dtype,
            hint="cast the index to int64 ({op: cast, dtype: int64})",
        )
    if x.shape is None or index.shape is None or open_at(x.shape) is not None or open_at(index.shape) is not None:
        if x.shape is not None and open_at(x.shape) is None:
            norm_dim(p.dim, len(x.shape))
        return [TensorType(index.shape, x.dtype)]
    rank = len(x.shape)
    d = norm_dim(p.dim, rank)
    if len(index.shape) != rank and not (rank <= 1 and len(index.shape) <= 1):
        raise InferError(
            f"index {format_shape(index.shape)} has rank {len(index.shape)}, x {format_shape(x.shape)} rank {rank}",
            port="index",
            expected=f"rank {rank}",
            actual=format_shape(index.shape),
            hint="gather's index has the input's rank; unsqueeze or expand it (take_along_dim broadcasts)",
        )
    for i, (a, b) in enumerate(zip(x.shape, index.shape)):
        if i != d and isinstance(a, int) and isinstance(b, int) and b > a:
            raise InferError(
                f"dim {i} of the index is {b}, larger than the input's {a} (only dim {d}, the gathered one, may be)",
                port="index",
                expected=f"dim {i} <= {a}",
                actual=format_shape(index.shape),
            )
    return [TensorType(index.shape, x.dtype)]


@op(
    "gather",
    saves="none",
    params=[Param("dim", "int", default=-1, doc="the dim the index picks positions along")],
    inputs=[
        Port("x", None, dtype="any", doc="the tensor to pick from"),
        Port("index", None, dtype="int", doc="int64 positions along dim, of x's rank"),
    ],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_gather_infer,
    layer="hndl.torch.layers.Gather",
    inference=("the output has the index's shape; the index has x's rank, and each of its dims but dim is at most x's"),
    example={"op": "gather", "dim": -1},
    input_shape_example=["B", 8],
    returns="new",
    aliases={"take_along_dim": {}, "take_along_axis": {}},
    error_example={"params": {"dim": 0}, "inputs": [["B", 8], {"shape": ["B", 8, 1], "dtype": "int64"}]},
    imports={"aten.gather.default": "gather"},
)
def gather(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Pick, along ``dim``, the positions an int64 tensor names (``torch.gather(x, dim, index)``):
    ``y[b, t] = x[b, index[b, t]]`` for ``dim: 1``.

    The output has the index's shape. ``torch.take_along_dim`` is ``gather`` after broadcasting the two to each
    other; write the broadcast with ``expand`` (the importer reads it from the trace).
    """
    return layer_of("gather")(p.dim)


# --- index ----------------------------------------------------------------------------------------------


def _index_dims(p: Params, count: int) -> tuple[int, ...]:
    dims = tuple(range(count)) if p.dims is None else tuple(p.dims)
    if len(dims) != count:
        raise InferError(
            f"dims {list(dims)} names {len(dims)} dims for {count} index tensor(s)",
            code="E_PARAM",
            param="dims",
            expected=f"{count} dims, one per index",
            actual=list(dims),
        )
    if any(b <= a for a, b in pairwise(dims)):
        raise InferError(
            f"dims {list(dims)} is not increasing",
            code="E_PARAM",
            param="dims",
            expected="distinct dims in increasing order (x[i, :, j] is dims [0, 2])",
            actual=list(dims),
        )
    return dims


def _index_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x, indices = inputs[0], inputs[1:]
    for i, t in enumerate(indices):
        _check_index_dtype(t, f"indices.{i}")
    dims = _index_dims(p, len(indices))
    picked: Any = indices[0].shape
    for i, t in enumerate(indices[1:], start=1):
        picked = broadcast_shapes(picked, t.shape, (f"indices.{i - 1}", f"indices.{i}"))
    if x.shape is None:
        return [TensorType(None, x.dtype)]
    k = open_at(x.shape)
    if k is None and dims[-1] >= len(x.shape):
        raise InferError(
            f"dims {list(dims)} indexes dim {dims[-1]} of a rank-{len(x.shape)} input {format_shape(x.shape)}",
            code="E_PARAM",
            param="dims",
            expected=f"dims below {len(x.shape)}",
            actual=list(dims),
        )
    if picked is None or k is not None:
        return [TensorType(None, x.dtype)]
    rest = [d for i, d in enumerate(x.shape) if i not in dims]
    if dims[-1] - dims[0] + 1 == len(dims):  # adjacent: the picked dims take the place of the indexed ones
        shape = (*x.shape[: dims[0]], *picked, *x.shape[dims[-1] + 1 :])
    else:  # torch puts them first when other dims lie between the indexed ones
        shape = (*picked, *rest)
    return [TensorType(tuple(shape), x.dtype)]


@op(
    "index",
    saves="none",
    params=[
        Param(
            "dims",
            "ints",
            default=None,
            nullable=True,
            min=0,
            doc="the dim each index tensor indexes, increasing (null: 0, 1, ...: x[i0, i1, ...])",
        )
    ],
    inputs=[
        Port("x", None, dtype="any", doc="the tensor to index"),
        Port("indices", None, dtype="int", variadic=True, doc="int64 (or int32) index tensors, broadcast together"),
    ],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_index_infer,
    layer="hndl.torch.layers.Index",
    inference=(
        "the index tensors broadcast to one shape I; with adjacent dims, I takes their place in x's shape "
        "(x[:, i] of [B, T, D] with i [N] is [B, N, D]); with other dims between them, I comes first, then the "
        "dims of x not indexed (torch's advanced indexing)"
    ),
    example={"op": "index"},
    input_shape_example=[16, 8],
    returns="new",
    error_example={
        "params": {"dims": [0, 1]},
        "inputs": [[8, 6, 64], {"shape": [4], "dtype": "int64"}, {"shape": [3], "dtype": "int64"}],
    },
    imports={"aten.index.Tensor": "index"},
)
def index(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Index by integer tensors (torch's advanced indexing): ``x[idx]``, ``x[:, idx]``, ``x[rows, cols]``.

    ``{op: index, in: [h, rows, eos], dims: [0, 1]}`` with ``rows`` the batch positions (``arange``) and ``eos``
    ``[B]`` the end-token positions (``argmax``) is CLIP's ``h[arange(B), eos]``: one ``[D]`` row per sequence,
    ``[B, D]``. An embedding-style lookup ``table[ids]`` is ``{op: index, in: [table, ids]}``. A bool mask as an
    index selects a number of elements only the data knows, which no contract can state: it is refused (use
    ``where``).
    """
    return layer_of("index")(list(_index_dims(p, len(inputs) - 1)))


# --- unbind ---------------------------------------------------------------------------------------------


def _unbind_count(p: Mapping[str, Any]) -> int:
    return int(p["size"])


def _unbind_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is None:
        return [TensorType(None, t.dtype)] * p.size
    if open_at(t.shape) is None and len(t.shape) == 0:
        raise InferError("a 0-d input has no dim to unbind", port="x", expected="rank >= 1", actual="[]")
    at = open_index(t.shape, p.dim)
    if at is None:
        return [TensorType(None, t.dtype)] * p.size
    length: Dim = t.shape[at]
    if isinstance(length, int) and length != p.size:
        raise InferError(
            f"dim {at} of the input is {length}, but size is {p.size}",
            port="x",
            expected=f"dim {at} = {p.size}",
            actual=format_shape(t.shape),
            hint=f"size is the number of outputs and must equal the dim's length: size: {length}",
        )
    shape = tuple(d for i, d in enumerate(t.shape) if i != at)
    return [TensorType(shape, t.dtype)] * p.size


@op(
    "unbind",
    saves="none",
    passes_gradient=True,
    params=[
        Param("dim", "int", default=0, doc="the dim to take apart"),
        Param("size", "int", min=1, max=MAX_PARTS, doc="the dim's length: the number of outputs"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("parts", None, dtype="same:x", doc="one output per position: node.0, node.1, ...")],
    infer=_unbind_infer,
    count_outputs=_unbind_count,
    layer="hndl.torch.layers.Unbind",
    inference="size outputs, each the input's shape without dim; an int dim must equal size",
    example={"op": "unbind", "dim": 0, "size": 3},
    input_shape_example=[3, "B", 4, "T", 16],
    returns="view",
    error_example={"params": {"dim": 0, "size": 2}, "inputs": [[3, "B", "T", 64]]},
    imports={"aten.unbind.int": "unbind"},
)
def unbind(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Take ``dim`` apart into its ``size`` slices, each without that dim (``x.unbind(dim)``): ``node.0``, ...

    A ViT's ``q, k, v = qkv.unbind(0)`` on ``[3, B, H, T, d]`` is ``{op: unbind, dim: 0, size: 3}`` and three
    ``[B, H, T, d]`` outputs. ``size`` states the number of outputs, which the graph needs before any shape is
    known; it must equal the dim's length (checked statically for an int dim, on every call otherwise).
    """
    return layer_of("unbind")(p.dim, p.size)


__all__ = ["INDEX_DTYPES"]
