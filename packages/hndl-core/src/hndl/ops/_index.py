"""Indexing ops: select, slice, chunk, pad, fill_region.

Dims are torch dims (negative counts from the end). A length that depends on a symbolic dim is written in
that symbol where the formula holds for every size the dim can take (``x[:, 1:]`` of ``[B, T]`` is
``[B, T-1]``) and is unknown (``?``) otherwise, so the run-time check decides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType, format_shape, unknown_dim
from .._dims import Dim, dim_add, dim_floordiv, format_dim
from .._param_types import ParamType, excerpt
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import distinct_dims, norm_dim, open_at, open_index
from ._shape import MAX_PARTS, _split_infer

# --- select ---------------------------------------------------------------------------------------------


def _dim_index(t: TensorType, dim: int) -> int | None:
    """The tuple index of ``dim`` in ``t``'s shape, or ``None`` when an open run hides it.

    Raises:
        InferError: E_PARAM for a dim outside the rank; E_SHAPE for a 0-d input (it has no dim to index).
    """
    assert t.shape is not None
    if open_at(t.shape) is not None:
        return open_index(t.shape, dim)
    if len(t.shape) == 0:
        raise InferError("a 0-d input has no dim to index", port="x", expected="rank >= 1", actual="[]")
    return norm_dim(dim, len(t.shape))


def _select_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is None:
        return [TensorType(None, t.dtype)]
    index = _dim_index(t, p.dim)
    if index is None:
        return [TensorType(None, t.dtype)]
    size = t.shape[index]
    if isinstance(size, int) and not -size <= p.index < size:
        raise InferError(
            f"index {p.index} is out of range for dim {index} of size {size}",
            port="x",
            expected=f"dim {index} larger than {p.index if p.index >= 0 else -p.index - 1}",
            actual=format_shape(t.shape),
            hint=f"index must lie in {-size} .. {size - 1}",
        )
    return [TensorType(t.shape[:index] + t.shape[index + 1 :], t.dtype)]


@op(
    "select",
    saves="none",
    passes_gradient=True,
    params=[
        Param("dim", "int", default=1, doc="the dim to index (1: x[:, i])"),
        Param("index", "int", default=0, doc="the position to take (negative counts from the end)"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_select_infer,
    layer="hndl.torch.layers.Select",
    inference="the input's shape without dim; an int dim must be larger than the index",
    example={"op": "select", "dim": 1, "index": 0},
    input_shape_example=["B", "T", 768],
    returns="view",
    imports={"aten.select.int": "select"},
)
def select(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Take one position of a dim, removing it (``x.select(dim, index)``; ``x[:, 0]`` for the class token)."""
    return layer_of("select")(p.dim, p.index)


# --- slice ----------------------------------------------------------------------------------------------


def slice_length(size: Dim, start: int, end: int | None, step: int) -> Dim:
    """The length of ``x[start:end:step]`` along a dim of ``size``: exact for an int size; for a symbolic
    one, written in the symbol when the formula holds for every size >= 1, else unknown."""
    if isinstance(size, int):
        return len(range(*slice(start, end, step).indices(size)))
    if start in (0, 1) and (end is None or (end < 0 and start - end <= 1)):
        # n - start (or n + end - start) elements, never negative for n >= 1
        stop: Dim = size if end is None else dim_add(size, end)
        return dim_floordiv(dim_add(stop, step - 1 - start), step)
    if start >= 0 and end is not None and end >= 0 and end <= start:
        return 0
    return unknown_dim()


def _slice_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is None:
        return [TensorType(None, t.dtype)]
    index = _dim_index(t, p.dim)
    if index is None:
        return [TensorType(None, t.dtype)]
    shape = list(t.shape)
    shape[index] = slice_length(shape[index], p.start, p.end, p.step)
    return [TensorType(tuple(shape), t.dtype)]


@op(
    "slice",
    saves="none",
    passes_gradient=True,
    params=[
        Param("dim", "int", default=1, doc="the dim to slice"),
        Param("start", "int", default=0, doc="the first position (negative counts from the end)"),
        Param("end", "int", default=None, nullable=True, doc="one past the last position (null: to the end)"),
        Param("step", "int", default=1, min=1, doc="the stride between taken positions"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_slice_infer,
    layer="hndl.torch.layers.Slice",
    inference=(
        "dim becomes the length of Python's slice start:end:step over it (T-1 for start 1 on T); on a symbolic "
        "dim the length is unknown unless that formula holds for every size"
    ),
    example={"op": "slice", "dim": 1, "start": 1},
    input_shape_example=["B", "T", 768],
    returns="view",
)
def slice_(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Take every ``step``-th position from ``start`` up to ``end`` along ``dim`` (``x[:, start:end:step]``)."""
    return layer_of("slice")(p.dim, p.start, p.end, p.step)


# --- chunk ----------------------------------------------------------------------------------------------


def _chunk_count(p: Mapping[str, Any]) -> int:
    return int(p["chunks"])


def _chunk_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    return _split_infer(Params({"sections": p.chunks, "sizes": None, "dim": p.dim}), inputs)


@op(
    "chunk",
    saves="none",
    passes_gradient=True,
    params=[
        Param("chunks", "int", min=1, max=MAX_PARTS, doc="the number of equal parts (must divide the dim)"),
        Param("dim", "int", default=-1, doc="the dim to cut"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("parts", None, dtype="same:x", doc="one output per chunk: node.0, node.1, ...")],
    infer=_chunk_infer,
    count_outputs=_chunk_count,
    layer="hndl.torch.layers.Split",
    inference="chunks outputs, each the input's shape with dim divided by chunks (D//2 on a symbolic dim)",
    example={"op": "chunk", "chunks": 2, "dim": -1},
    input_shape_example=["B", "T", 1024],
    returns="view",
    imports={"aten.chunk.default": "chunk"},
)
def chunk(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Cut ``dim`` into ``chunks`` equal parts (``x.chunk(chunks, dim)``), one output each: ``node.0``, ...

    Unlike ``torch.chunk``, which quietly returns fewer parts when they do not divide the dim, the number of
    outputs is always ``chunks``: a dim they do not divide is ``E_SHAPE`` at check time, or an error at run
    time for a symbolic dim.
    """
    return layer_of("chunk")(sections=p.chunks, dim=p.dim)


# --- pad ------------------------------------------------------------------------------------------------

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def _pad_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if len(p.pad) % 2 or not p.pad:
        raise InferError(
            f"pad has {len(p.pad)} entries; it needs pairs (left, right), last dim first",
            code="E_PARAM",
            param="pad",
            expected="an even number of entries, at least 2",
            actual=list(p.pad),
        )
    if p.mode != "constant" and p.value != 0:
        raise InferError(
            f"value={p.value} only applies in mode 'constant', not {p.mode!r}",
            code="E_PARAM",
            param="value",
            expected="0",
            actual=p.value,
        )
    if p.mode != "constant" and any(v < 0 for v in p.pad):
        raise InferError(
            f"mode {p.mode!r} cannot crop: pad {list(p.pad)} has a negative entry",
            code="E_PARAM",
            param="pad",
            expected="entries >= 0",
            actual=list(p.pad),
            hint="negative padding (cropping) works in mode 'constant'",
        )
    if t.shape is None or open_at(t.shape) is not None:
        return [TensorType(None, t.dtype)]
    rank, n = len(t.shape), len(p.pad) // 2
    ranks = (n + 1, n + 2) if p.mode != "constant" else tuple(range(n, max(rank, n) + 1))
    if rank not in ranks:
        raise InferError(
            f"pad of {n} dims in mode {p.mode!r} needs a rank-{' or rank-'.join(map(str, ranks))} input, got rank {rank}",
            port="x",
            expected=f"rank {' or '.join(map(str, ranks))}",
            actual=format_shape(t.shape),
            hint="non-constant modes pad the last dims of a [N, C, ...] or [C, ...] input",
        )
    shape = list(t.shape)
    for i in range(n):
        before, after = p.pad[2 * i], p.pad[2 * i + 1]
        d = rank - 1 - i
        size = shape[d]
        limit = {"reflect": 1, "circular": 0}.get(p.mode)
        if limit is not None and isinstance(size, int) and max(before, after) > size - limit:
            raise InferError(
                f"mode {p.mode!r} pads dim {d} of size {size} by {max(before, after)}",
                port="x",
                expected=f"dim {d} of at least {max(before, after) + limit}",
                actual=format_shape(t.shape),
                hint="reflect padding must be smaller than the dim; circular at most the dim",
            )
        # torch crops before it pads: the negative entries alone must leave a non-negative length.
        cropped = dim_add(size, min(before, 0) + min(after, 0))
        if isinstance(cropped, int) and cropped < 0:
            raise InferError(
                f"padding {before}, {after} crops dim {d} of size {format_dim(size)} by more than its length",
                port="x",
                expected=f"dim {d} of at least {-(min(before, 0) + min(after, 0))}",
                actual=format_shape(t.shape),
            )
        grown = dim_add(size, before + after)
        if isinstance(grown, int) and grown < (1 if p.mode != "constant" else 0):
            raise InferError(
                f"padding {before}, {after} leaves dim {d} of size {format_dim(size)} with {grown} elements",
                port="x",
                expected=f"dim {d} of at least {-(before + after)}",
                actual=format_shape(t.shape),
            )
        shape[d] = grown
    return [TensorType(tuple(shape), t.dtype)]


@op(
    "pad",
    saves="none",
    params=[
        Param("pad", "ints", doc="(left, right) pairs, last dim first, as torch.nn.functional.pad"),
        Param("mode", "str", default="constant", choices=_PAD_MODES, doc="how the new elements are filled"),
        Param("value", "float", default=0.0, doc="the fill value in mode constant"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_pad_infer,
    layer="hndl.torch.layers.Pad",
    inference=(
        "the i-th last dim grows by pad[2i] + pad[2i+1] (negative entries crop in mode constant); modes other "
        "than constant need 1 or 2 leading dims and, for reflect, padding smaller than the dim"
    ),
    example={"op": "pad", "pad": [1, 1, 1, 1]},
    input_shape_example=["B", 3, 32, 32],
    returns="new",
    imports={"aten.pad.default": "pad", "aten.constant_pad_nd.default": "pad"},
)
def pad(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Pad the last dims (``torch.nn.functional.pad``): ``pad: [1, 2]`` adds one element before and two after
    along the last dim; ``[1, 1, 1, 1]`` adds a border of one to height and width."""
    return layer_of("pad")(list(p.pad), p.mode, p.value)


# --- fill_region ----------------------------------------------------------------------------------------


class _Ends(ParamType):
    """Where each slice of a region ends: an integer (negative counts from the end) or null (to the end)."""

    name, description = "ends", "list of integers or nulls (null: to the end)"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, (list, tuple)) or not all(
            v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in value
        ):
            return None, f"must be a list of integers or nulls, got {excerpt(value)}"
        return tuple(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "array", "items": {"type": ["integer", "null"]}}


def _fill_region_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    for name in ("start", "end", "step"):
        given = getattr(p, name)
        if given is not None and len(given) != len(p.dims):
            raise InferError(
                f"{name} has {len(given)} entries for {len(p.dims)} dims",
                code="E_PARAM",
                param=name,
                expected=f"one entry per dim of dims {list(p.dims)}",
                actual=list(given),
            )
    if p.step is not None and any(s < 1 for s in p.step):
        raise InferError(
            f"step {list(p.step)} has an entry below 1",
            code="E_PARAM",
            param="step",
            expected="steps >= 1",
            actual=list(p.step),
        )
    if t.shape is None or open_at(t.shape) is not None:
        return [t]
    distinct_dims(p.dims, len(t.shape))
    return [t]


@op(
    "fill_region",
    saves="none",
    passes_gradient=True,
    params=[
        Param("dims", "ints", doc="the dims the region is sliced along; the others are taken whole"),
        Param("start", "ints", doc="per dim of dims, the region's first position (negative counts from the end)"),
        Param(
            "end",
            _Ends(),
            doc="per dim of dims, one past its last position (negative counts from the end; null: to the end)",
        ),
        Param("step", "ints", default=None, nullable=True, doc="per dim of dims, the stride (null: 1 each)"),
        Param("value", "float", doc="the value written into the region"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_fill_region_infer,
    layer="hndl.torch.layers.FillRegion",
    inference="the output has x's shape and dtype; each dim of dims must exist and appear once",
    example={"op": "fill_region", "dims": [0, 1], "start": [-2, -1], "end": [None, None], "value": 2.0},
    input_shape_example=["H", "W"],
    returns="new",
    error_example={"params": {"dims": [0, 0], "start": [0, 1], "end": [1, 2], "value": 1.0}, "inputs": [["H", "W"]]},
)
def fill_region(p: Params, inputs: Sequence[TensorType]) -> Any:
    """A copy of ``x`` with ``value`` written into a region of slices (``y = x.clone(); y[a:b, c:d] = value``),
    out of place: the nodes that read ``x`` still see it unchanged.

    ``{op: fill_region, in: mask, dims: [0, 1], start: [-2, -1], end: [-1, null], value: 4}`` is
    ``mask[-2:-1, -1:] = 4`` (Swin's shifted-window mask is written region by region so). The bounds are Python's
    slice bounds, so a region follows the sizes of a symbolic dim (``-2`` is the second-to-last position at any
    size). A value written into an integer tensor is cut toward zero, as torch's assignment does.
    """
    return layer_of("fill_region")(
        list(p.dims), list(p.start), list(p.end), None if p.step is None else list(p.step), p.value
    )
