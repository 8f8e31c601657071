"""Reductions and scans: sum, norm, argmax, argmin, cumsum, diff.

Dims are torch dims (negative counts from the end). A reduced dim is removed, or kept with size 1 under
``keepdim``; sizes stay symbolic. The dtypes are torch's: ``sum`` and ``cumsum`` of bool or integers give int64
unless a ``dtype`` is named, ``argmax``/``argmin`` give int64 indices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import Dim, dim_sub
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import concrete_dtype, norm_dim, open_at, open_index, promote, require, torch_dtype

# --- shared ---------------------------------------------------------------------------------------------


def accumulated(dtype: str) -> str:
    """What ``sum``/``cumsum`` give by default: bool and integers accumulate in int64, floats keep theirs."""
    return promote(dtype, "int64")


def reduced_shape(t: TensorType, dims: Sequence[int] | None, keepdim: bool) -> tuple[Dim, ...] | None:
    """``t``'s shape with ``dims`` removed (or made 1 under ``keepdim``); ``None`` (every dim) reduces all.

    Returns ``None`` when the rank or a reduced dim's place is not known statically.

    Raises:
        InferError: E_PARAM for a dim outside the rank or named twice.
    """
    shape = t.shape
    if shape is None:
        return None
    if open_at(shape) is not None:
        if dims is None:
            return None
        found = [open_index(shape, d) for d in dims]
        if None in found:
            return None
        index: list[int] = [i for i in found if i is not None]
    else:
        if dims is None:
            return tuple(1 for _ in shape) if keepdim else ()
        index = [norm_dim(d, len(shape), "dim", entry=True) for d in dims]
        if len(shape) == 0:
            return ()
    repeated = [d for d in index if index.count(d) > 1]
    if repeated:
        raise InferError(
            f"dim {list(dims)} names dim {repeated[0]} twice",
            code="E_PARAM",
            param="dim",
            expected="distinct dims",
            actual=list(dims),
        )
    if keepdim:
        return tuple(1 if i in index else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in index)


def _dims_param(p: Params) -> tuple[int, ...] | None:
    if p.dim is not None and len(p.dim) == 0:
        # torch reads dim=[] as "every dim" for sum and as "no dim" elsewhere: say which one is meant.
        raise InferError(
            "'dim' is empty",
            code="E_PARAM",
            param="dim",
            expected="at least one dim, or null for every dim",
            actual="[]",
        )
    return None if p.dim is None else tuple(p.dim)


# --- sum, norm ------------------------------------------------------------------------------------------


def _sum_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    dtype = concrete_dtype(p) or accumulated(t.dtype)
    return [TensorType(reduced_shape(t, _dims_param(p), p.keepdim), dtype)]


_DIMS = Param("dim", "ints", default=None, nullable=True, doc="the dims to reduce (null: every dim)")
_KEEPDIM = Param("keepdim", "bool", default=False, doc="keep the reduced dims, with size 1")


@op(
    "sum",
    saves="none",
    params=[
        _DIMS,
        _KEEPDIM,
        Param("dtype", "dtype", default=None, nullable=True, doc="the dtype to sum in (null: torch's default)"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="any")],
    infer=_sum_infer,
    layer="hndl.torch.layers.Unary",
    inference=(
        "the dims in dim are removed (or become 1 with keepdim); dtype: bool and integers sum to int64, floats "
        "keep theirs, unless dtype is given"
    ),
    example={"op": "sum", "dim": [-1]},
    input_shape_example=["B", "T", 64],
    returns="new",
    aliases={"reduce_sum": {}},
    error_example={"params": {"dim": [1, -2]}, "inputs": [["B", "T", 64]]},
    imports={"aten.sum.dim_IntList": "accumulating", "aten.sum.default": "accumulating"},
)
def sum_(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Sum over one or more dims (``x.sum(dim, keepdim)``), or over every dim with ``dim: null``.

    Counting the real tokens of a padding mask: ``{op: sum, in: mask, dim: [-1]}`` on ``[B, T]`` gives ``[B]``
    (int64, as torch sums bool and integers).
    """
    kwargs: dict[str, Any] = {"dim": None if p.dim is None else tuple(p.dim), "keepdim": p.keepdim}
    if p.dtype is not None:
        kwargs["dtype"] = torch_dtype(p.dtype)
    return layer_of("sum")("torch.sum", **kwargs)


def _norm_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    return [TensorType(reduced_shape(t, _dims_param(p), p.keepdim), t.dtype)]


@op(
    "norm",
    saves="both",
    params=[
        Param("ord", "float", default=2.0, finite=False, doc="the order: 2 (Euclidean), 1, inf (largest), ..."),
        _DIMS,
        _KEEPDIM,
    ],
    inputs=[Port("x", None, doc="a floating tensor")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_norm_infer,
    layer="hndl.torch.layers.Unary",
    inference="the dims in dim are removed (or become 1 with keepdim)",
    example={"op": "norm", "dim": [-1], "keepdim": True},
    input_shape_example=["B", "T", 64],
    returns="new",
    aliases={"vector_norm": {}, "linalg_vector_norm": {}},
    error_example={"params": {"dim": [3]}, "inputs": [["B", "T", 64]]},
    imports={"aten.linalg_vector_norm.default": "norm"},
)
def norm(p: Params, inputs: Sequence[TensorType]) -> Any:
    """The vector norm over one or more dims (``torch.linalg.vector_norm(x, ord, dim, keepdim)``).

    ``{op: norm, dim: [-1], keepdim: true}`` is the length of each feature vector, which a ``div`` turns into
    unit vectors (CLIP's normalised embeddings). ``dim: null`` takes the norm of all elements at once.
    """
    return layer_of("norm")(
        "torch.linalg.vector_norm", ord=p.ord, dim=None if p.dim is None else tuple(p.dim), keepdim=p.keepdim
    )


# --- argmax, argmin -------------------------------------------------------------------------------------


def _arg_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is not None and open_at(t.shape) is None and p.dim is not None and len(t.shape) > 0:
        size = t.shape[norm_dim(p.dim, len(t.shape))]
        if size == 0:
            raise InferError(
                f"dim {p.dim} of {format_shape(t.shape)} is empty: there is no largest or smallest element",
                port="x",
                expected=f"dim {p.dim} of at least 1",
                actual=format_shape(t.shape),
            )
    return [TensorType(reduced_shape(t, None if p.dim is None else (p.dim,), p.keepdim), "int64")]


def _arg_op(name: str, which: str) -> None:
    def infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
        return _arg_infer(p, inputs)

    def build(p: Params, inputs: Sequence[TensorType]) -> Any:
        return layer_of(name)(f"torch.{name}", dim=p.dim, keepdim=p.keepdim)

    build.__doc__ = (
        f"The int64 position of the {which} element along ``dim`` (``x.{name}(dim, keepdim)``); of the flattened "
        f"input with ``dim: null``.\n\nTies give the first such position. CLIP's text model picks each sequence's "
        "end token by ``argmax`` of the token ids, then takes those rows with ``index``."
    )
    op(
        name,
        saves="none",
        params=[
            Param("dim", "int", default=None, nullable=True, doc="the dim to search (null: the flattened input)"),
            Param("keepdim", "bool", default=False, doc="keep the searched dim, with size 1"),
        ],
        inputs=[Port("x", None, dtype="any")],
        outputs=[Port("y", None, dtype="int64")],
        infer=infer,
        layer="hndl.torch.layers.Unary",
        inference="dim is removed (or becomes 1 with keepdim); dim: null gives a 0-d index (all 1s with keepdim)",
        example={"op": name, "dim": -1},
        input_shape_example=["B", "T"],
        returns="new",
        error_example={"params": {"dim": 2}, "inputs": [["B", "T"]]},
        imports={f"aten.{name}.default": "arg"},
    )(build)


_arg_op("argmax", "largest")
_arg_op("argmin", "smallest")


# --- cumsum, diff ---------------------------------------------------------------------------------------


def _scan_dim(t: TensorType, dim: int) -> int | None:
    """The index of ``dim`` in ``t``'s shape, ``None`` when unknown statically (a 0-d input has dim 0 or -1)."""
    if t.shape is None:
        return None
    if open_at(t.shape) is not None:
        return open_index(t.shape, dim)
    norm_dim(dim, len(t.shape))
    return None if len(t.shape) == 0 else norm_dim(dim, len(t.shape))


def _cumsum_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    _scan_dim(t, p.dim)  # validates the dim
    return [TensorType(t.shape, concrete_dtype(p) or accumulated(t.dtype))]


@op(
    "cumsum",
    saves="none",
    params=[
        Param("dim", "int", default=-1, doc="the dim to accumulate along"),
        Param("dtype", "dtype", default=None, nullable=True, doc="the dtype to sum in (null: torch's default)"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="any")],
    infer=_cumsum_infer,
    layer="hndl.torch.layers.Unary",
    inference="the input's shape; dtype: bool and integers sum to int64, floats keep theirs, unless dtype is given",
    example={"op": "cumsum", "dim": -1},
    input_shape_example=["B", "T"],
    returns="new",
    error_example={"params": {"dim": 2}, "inputs": [["B", "T"]]},
    imports={"aten.cumsum.default": "accumulating"},
)
def cumsum(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Running sums along ``dim`` (``x.cumsum(dim)``): element ``i`` is the sum of elements ``0 .. i``.

    Position ids from a left-padded mask are ``cumsum(mask) - 1``: ``{op: cumsum, in: mask, dim: -1}``.
    """
    kwargs: dict[str, Any] = {"dim": p.dim}
    if p.dtype is not None:
        kwargs["dtype"] = torch_dtype(p.dtype)
    return layer_of("cumsum")("torch.cumsum", **kwargs)


def _diff_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is not None and open_at(t.shape) is None and len(t.shape) == 0:
        raise InferError(
            "a 0-d input has no dim to take differences along", port="x", expected="rank >= 1", actual="[]"
        )
    index = _scan_dim(t, p.dim)
    if index is None:
        return [TensorType(None, t.dtype)]
    assert t.shape is not None
    size = t.shape[index]
    shape = list(t.shape)
    if isinstance(size, int):
        shape[index] = max(size - p.n, 0)  # torch gives an empty dim when n is at least its length
    else:
        require(size, p.n, f"dim {index}")
        shape[index] = dim_sub(size, p.n)
    return [TensorType(tuple(shape), t.dtype)]


@op(
    "diff",
    saves="none",
    params=[
        Param("n", "int", default=1, min=1, doc="how many times to take differences"),
        Param("dim", "int", default=-1, doc="the dim to take differences along"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_diff_infer,
    layer="hndl.torch.layers.Unary",
    inference=(
        "dim shrinks by n (T-n; an int dim no longer than n becomes 0, and a symbolic one must be at least n); "
        "bool inputs give bool (differences are exclusive or)"
    ),
    example={"op": "diff", "dim": -1},
    input_shape_example=["B", "T"],
    returns="new",
    error_example={"params": {"dim": -3}, "inputs": [["B", "T"]]},
)
def diff(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Differences of neighbours along ``dim`` (``torch.diff(x, n, dim)``): ``x[i+1] - x[i]``, ``n`` times over.

    Where position ids restart (packed sequences) is where ``diff`` of them is not 1.
    """
    return layer_of("diff")("torch.diff", n=p.n, dim=p.dim)


__all__ = ["accumulated", "reduced_shape"]
