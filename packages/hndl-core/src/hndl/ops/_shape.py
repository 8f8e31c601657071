"""Shape ops: concat, split, reshape, flatten, permute, transpose, mean.

Dims are torch dims: negative values count from the end, and a dim outside the input's rank is an E_PARAM
naming the rank. Sizes stay symbolic where they can (``concat`` of ``D`` and ``E`` is ``D+E``, ``flatten``
of ``C, H, W`` is ``C*H*W``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

from .._contracts import TensorType, format_shape, unknown_dim
from .._dims import Dim, dim_add, dim_floordiv, dim_mul, format_dim
from .._param_types import excerpt
from .._registry import InferError, Param, Params, Port, layer_of, op
from .._size_reads import SizeRead
from ._common import norm_dim, open_at, open_index, product, promote, provably_different
from ._tensor import _Sizes, plan_dim, resolve_sizes

# --- concat ---------------------------------------------------------------------------------------------


def _concat_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    dtype = reduce(promote, (t.dtype for t in inputs))
    shapes = [t.shape for t in inputs]
    if any(s is None for s in shapes):
        return [TensorType(None, dtype)]
    first = shapes[0]
    assert first is not None
    opened = [open_at(s) for s in shapes]  # type: ignore[arg-type]
    if any(k is not None for k in opened):
        # Open ranks line up only when every input has the same open run in the same place.
        if any(s is None or len(s) != len(first) or open_at(s) != opened[0] for s in shapes):
            return [TensorType(None, dtype)]
        if any(s[opened[0]] != first[opened[0]] for s in shapes):  # type: ignore[index]
            return [TensorType(None, dtype)]
        index = open_index(first, p.dim)
        if index is None:
            return [TensorType(None, dtype)]
    else:
        if len(first) == 0:
            raise InferError("cannot concatenate 0-d tensors", port="inputs", expected="rank >= 1", actual="[]")
        for i, s in enumerate(shapes[1:], start=1):
            assert s is not None
            if len(s) != len(first):
                raise InferError(
                    f"input {i} has rank {len(s)} {format_shape(s)}, input 0 has rank {len(first)} {format_shape(first)}",
                    port="inputs",
                    expected=f"rank {len(first)}",
                    actual=format_shape(s),
                    hint="every input of concat needs the same rank",
                )
        index = norm_dim(p.dim, len(first))
    out = list(first)
    total: Dim = 0
    for i, s in enumerate(shapes):
        assert s is not None
        agree_with_first(
            out,
            first,
            s,
            i,
            skip=index,
            suffix=", which is not the concat dim",
            hint=f"only dim {index} (dim={p.dim}) may differ between the inputs",
        )
        total = dim_add(total, s[index])
    out[index] = total
    return [TensorType(tuple(out), dtype)]


def agree_with_first(
    out: list[Dim], first: Sequence[Dim], s: Sequence[Dim], i: int, *, skip: int | None, suffix: str, hint: str
) -> None:
    """Check that input ``i`` (shape ``s``) of a join (``concat``, ``stack``) agrees with input 0 in every dim but
    ``skip``, and write into ``out`` the most precise size it gives (an int where ``out`` holds a symbol).

    Raises:
        InferError: E_SHAPE on port ``inputs`` naming the input and the first dim that provably differs.
    """
    for j, (a, b) in enumerate(zip(first, s)):
        if j == skip:
            continue
        if provably_different(a, b):
            raise InferError(
                f"input {i} {format_shape(s)} differs from input 0 {format_shape(first)} in dim {j}{suffix}",
                port="inputs",
                expected=f"dim {j} = {format_dim(a)}",
                actual=format_shape(s),
                hint=hint,
            )
        if isinstance(b, int) and not isinstance(out[j], int):
            out[j] = b


@op(
    "concat",
    saves="none",
    passes_gradient=True,
    params=[Param("dim", "int", default=-1, doc="the dim to join along (negative counts from the end)")],
    inputs=[Port("inputs", None, dtype="any", doc="two or more tensors of one rank", variadic=True)],
    outputs=[Port("y", None, dtype="any")],
    infer=_concat_infer,
    layer="hndl.torch.layers.Concat",
    inference="all inputs share their rank and every dim but dim; the output's dim is the sum (D+E)",
    example={"op": "concat", "dim": -1},
    input_shape_example=["B", 32],
    returns="new",
    aliases={"cat": {}, "concatenate": {}},
)
def concat(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Join tensors along ``dim`` (``torch.cat``)."""
    return layer_of("concat")(p.dim)


# --- split ----------------------------------------------------------------------------------------------


def _split_count(p: Mapping[str, Any]) -> int:
    sizes, sections = p.get("sizes"), p.get("sections")
    if sizes:
        return len(sizes)
    if sections is not None:
        return int(sections)
    raise ValueError("split needs sections or sizes")


#: The most parts a split or chunk makes: each part is a value of the graph, made before the dim is checked.
MAX_PARTS = 10_000


def _split_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if (p.sections is None) == (p.sizes is None):
        both = p.sections is not None
        raise InferError(
            "give exactly one of 'sections' and 'sizes'" + (", not both" if both else ""),
            code="E_PARAM",
            param="sizes" if both else None,
            hint="sections: 3 splits into 3 equal parts; sizes: [64, 32] into parts of those sizes",
        )
    if p.sizes is not None and len(p.sizes) == 0:
        raise InferError("'sizes' is empty", code="E_PARAM", param="sizes", expected="at least one size", actual="[]")
    t = inputs[0]
    count = _split_count(p)
    if t.shape is not None and len(t.shape) == 0:
        raise InferError("a 0-d input has no dim to split", port="x", expected="rank >= 1", actual="[]")
    index = None if t.shape is None else open_index(t.shape, p.dim)
    if t.shape is None or index is None:
        return [TensorType(None, t.dtype)] * count
    length = t.shape[index]
    parts: list[Dim]
    if p.sizes is not None:
        sizes: tuple[int, ...] = p.sizes  # an "ints" param: validated to a tuple of ints
        total = sum(sizes)
        parts = list(sizes)
        if isinstance(length, int) and total != length:
            raise InferError(
                f"sizes {list(sizes)} add up to {total}, but dim {index} of the input is {length}",
                port="x",
                expected=f"dim {index} = {total}",
                actual=format_shape(t.shape),
                hint="the sizes must add up to the length of the split dim",
            )
    else:
        if length == 0 and p.sections > 1:
            # torch.split returns one empty part, not ``sections`` of them: the node would lose outputs.
            raise InferError(
                f"dim {index} of the input has length 0, which cannot be split into {p.sections} sections",
                port="x",
                expected=f"dim {index} > 0",
                actual=format_shape(t.shape),
            )
        if isinstance(length, int) and length % p.sections:
            raise InferError(
                f"{p.sections} sections do not divide dim {index} of the input ({length})",
                port="x",
                expected=f"dim {index} divisible by {p.sections}",
                actual=format_shape(t.shape),
                hint="use sizes for unequal parts",
            )
        parts = [dim_floordiv(length, p.sections)] * p.sections
    out = []
    for part in parts:
        shape = list(t.shape)
        shape[index] = part
        out.append(TensorType(tuple(shape), t.dtype))
    return out


@op(
    "split",
    saves="none",
    passes_gradient=True,
    params=[
        Param(
            "sections",
            "int",
            default=None,
            nullable=True,
            min=1,
            max=MAX_PARTS,
            doc="number of equal parts (must divide the dim)",
        ),
        Param(
            "sizes", "ints", default=None, nullable=True, min=0, doc="the size of each part (must add up to the dim)"
        ),
        Param("dim", "int", default=-1, doc="the dim to split (negative counts from the end)"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("parts", None, dtype="same:x", doc="one output per part: node.0, node.1, ...")],
    infer=_split_infer,
    count_outputs=_split_count,
    layer="hndl.torch.layers.Split",
    inference="one output per part, each the input's shape with dim replaced by the part's size",
    example={"op": "split", "sections": 3, "dim": -1},
    input_shape_example=["B", "T", 192],
    returns="view",
    imports={"aten.split.Tensor": "split", "aten.split_with_sizes.default": "split"},
)
def split(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Split along ``dim`` into ``sections`` equal parts, or into parts of the given ``sizes``.

    Give exactly one of ``sections`` and ``sizes``. The node has one output per part: refer to them as
    ``node.0``, ``node.1``, ... (in Python: ``q, k, v = g.add("split", x, sections=3)``).
    """
    return layer_of("split")(sections=p.sections, sizes=None if p.sizes is None else list(p.sizes), dim=p.dim)


# --- reshape / flatten ----------------------------------------------------------------------------------


def _start(p: Params, rank: int) -> int:
    if not -rank <= p.start_dim <= rank:
        raise InferError(
            f"start_dim={p.start_dim} is out of range for a rank-{rank} input",
            code="E_PARAM",
            param="start_dim",
            expected=f"{-rank} .. {rank}",
            actual=p.start_dim,
        )
    return p.start_dim + rank if p.start_dim < 0 else p.start_dim


class _ReshapeSizes(_Sizes):
    """``reshape``'s target: sizes, ``-1`` once (the size that follows from the rest), or symbol names of a dim of
    an input (``T``), read on every call: ``[B*T, 192]`` to ``[B, T, 192]`` needs two sizes no -1 can give."""

    name, description = "reshape sizes", "list of sizes: integers, -1 once (the rest), or symbol names such as T"

    def normalize(self, value: Any) -> tuple[Any, str]:
        value, reason = super().normalize(value)
        if reason:
            return None, reason
        if sum(v == -1 for v in value) > 1:
            return None, f"may contain -1 at most once, got {excerpt(value)}"
        return value, ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {**super().schema(bounds), "not": {"contains": {"const": -1}, "minContains": 2}}


def _reshape_plan(p: Params, inputs: Sequence[TensorType]) -> list[tuple[str, int] | int | SizeRead]:
    """Each target size as an int (-1 included), the input dim a symbol or expression names (``("x", i)`` or
    ``("like", i)``), or a size computed per call from input dims (``8*h`` from a dim ``16*h``).

    Raises:
        InferError: E_PARAM for a size neither input's shape has or gives the symbols of.
    """
    x = inputs[0].shape or ()
    like = inputs[1].shape if len(inputs) > 1 else None
    return [d if isinstance(d, int) else resolve_sizes([d], x, like)[0] for d in p.shape]


def _reshape_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    target: list[Any] = list(p.shape)
    if t.shape is None:
        return [TensorType(None, t.dtype)]
    if any(isinstance(d, str) for d in target):
        like = inputs[1].shape if len(inputs) > 1 else None
        if open_at(t.shape) is not None or (like is not None and open_at(like) is not None):
            return [TensorType(None, t.dtype)]
        target = [plan_dim(d, t.shape, like) for d in _reshape_plan(p, inputs)]
    k = open_at(t.shape)
    if k is not None:
        if not 0 <= p.start_dim <= k:
            return [TensorType(None, t.dtype)]
        # The reshaped dims include the open run: their count, and so any -1, is known only at call time.
        head = t.shape[: p.start_dim]
        return [TensorType((*head, *(unknown_dim() if d == -1 else d for d in target)), t.dtype)]
    start = _start(p, len(t.shape))
    head, rest = t.shape[:start], t.shape[start:]
    total = product(rest)
    known = product([d for d in target if d != -1])
    if -1 in target:
        if known == 0:
            raise InferError(
                f"shape {target} has a 0 next to -1, so -1 could be any size",
                code="E_PARAM",
                param="shape",
                hint="write every size when one of them is 0",
            )
        fill = dim_floordiv(total, known)
        if dim_mul(fill, known) != total:
            symbolic = not isinstance(total, int)
            raise InferError(
                f"the reshaped dims {format_shape(rest)} hold {format_dim(total)} elements, "
                + (f"which cannot be shown to divide by {known}" if symbolic else f"which {known} does not divide"),
                port="x",
                expected=f"a multiple of {known} elements in dims {start}..",
                actual=format_shape(t.shape),
                hint=(
                    "give those input dims as ints, or write every size of shape"
                    if symbolic
                    else f"the sizes in shape must multiply to a divisor of {total}"
                ),
            )
        target = [fill if d == -1 else d for d in target]
    elif (isinstance(total, int) and total != known) or provably_different(total, known):
        raise InferError(
            f"the reshaped dims {format_shape(rest)} hold {total} elements, shape {list(p.shape)} holds {known}",
            port="x",
            expected=f"{known} elements in dims {start}..",
            actual=format_shape(t.shape),
            hint="use -1 once in shape for the size that follows from the rest",
        )
    return [TensorType((*head, *target), t.dtype)]


@op(
    "reshape",
    saves="none",
    passes_gradient=True,
    params=[
        Param(
            "shape",
            _ReshapeSizes(),
            doc="the new sizes of dims start_dim..; -1 once for the size that follows; a symbol or an expression "
            "(8*h) names a dim of x (or else of like), or is computed from the dims its symbols are read from "
            "(h from a dim 16*h), on every call",
        ),
        Param("start_dim", "int", default=0, doc="the first dim to reshape; earlier (batch) dims stay"),
    ],
    inputs=[
        Port("x", None, dtype="any"),
        Port("like", None, dtype="any", optional=True, doc="a tensor whose dims the symbols in shape name"),
    ],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_reshape_infer,
    layer="hndl.torch.layers.Reshape",
    inference=(
        "dims before start_dim stay, the rest become shape; -1 is the element count divided by the other "
        "sizes (symbolic when it divides exactly, e.g. 4*T // 4 = T); a known element count must match"
    ),
    example={"op": "reshape", "shape": [4, 16], "start_dim": 2},
    input_shape_example=["B", "T", 64],
    returns="view",
    aliases={"view": {}},
)
def reshape(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Reshape the dims from ``start_dim`` on into ``shape``, keeping the dims before it.

    ``reshape(shape=[4, 16], start_dim=2)`` turns ``[B, T, 64]`` into ``[B, T, 4, 16]``. A symbol in ``shape``
    names a dim of an input as the checker infers it, read on every call: ``{op: reshape, in: [h, input_ids],
    shape: [B, T, 192]}`` turns ``[B*T, 192]`` back into ``[B, T, 192]`` (what one -1 cannot say), and ``{op:
    reshape, in: mask, shape: [1, 1, T, T]}`` puts two dims in front of a ``[T, T]`` mask.
    """
    start = p.start_dim
    shape = inputs[0].shape if inputs else None
    if start < 0 and shape is not None and open_at(shape) is None:
        start += len(shape)
    return layer_of("reshape")(_reshape_plan(p, inputs), start)


def _flatten_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is None:
        return [TensorType(None, t.dtype)]
    k = open_at(t.shape)
    if k is None:
        rank = len(t.shape)
        s, e = norm_dim(p.start_dim, rank, "start_dim"), norm_dim(p.end_dim, rank, "end_dim")
        if rank == 0:
            return [TensorType((1,), t.dtype)]
    else:
        # The merge may start at the open run's first dim and end at its last; its size is then unknown.
        n = len(t.shape)
        if p.start_dim >= 0:
            s = p.start_dim if p.start_dim <= k else None  # type: ignore[assignment]
        else:
            s = n + p.start_dim if n + p.start_dim > k else None  # type: ignore[assignment]
        if p.end_dim >= 0:
            e = p.end_dim if p.end_dim < k else None  # type: ignore[assignment]
        else:
            e = n + p.end_dim if n + p.end_dim >= k else None  # type: ignore[assignment]
        if s is None or e is None:
            return [TensorType(None, t.dtype)]
    if s > e:
        raise InferError(
            f"start_dim={p.start_dim} comes after end_dim={p.end_dim} in a rank-{len(t.shape)} input",
            code="E_PARAM",
            param="start_dim",
            expected=f"start_dim <= end_dim (dims {s} and {e})",
            actual=p.start_dim,
        )
    merged = unknown_dim() if k is not None and s <= k <= e else product(t.shape[s : e + 1])
    return [TensorType((*t.shape[:s], merged, *t.shape[e + 1 :]), t.dtype)]


@op(
    "flatten",
    saves="none",
    passes_gradient=True,
    params=[
        Param("start_dim", "int", default=1, doc="first dim to merge"),
        Param("end_dim", "int", default=-1, doc="last dim to merge"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_flatten_infer,
    layer="torch.nn.Flatten",
    inference="dims start_dim..end_dim merge into their product ([N, C, H, W] -> [N, C*H*W])",
    example={"op": "flatten"},
    input_shape_example=["B", 64, 7, 7],
    returns="view",
    imports={"aten.flatten.using_ints": "flatten"},
)
def flatten(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Merge dims ``start_dim`` .. ``end_dim`` into one (by default all but the batch dim)."""
    import torch

    return torch.nn.Flatten(p.start_dim, p.end_dim)


# --- permute / transpose / mean -------------------------------------------------------------------------


def _permute_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is None or open_at(t.shape) is not None:
        return [TensorType(None, t.dtype)]
    rank = len(t.shape)
    if len(p.dims) != rank:
        raise InferError(
            f"dims {list(p.dims)} has {len(p.dims)} entries for a rank-{rank} input {format_shape(t.shape)}",
            code="E_PARAM",
            param="dims",
            expected=f"a permutation of 0..{rank - 1}",
            actual=list(p.dims),
        )
    order = [norm_dim(d, rank, "dims", entry=True) for d in p.dims]
    if sorted(order) != list(range(rank)):
        repeated = next(d for d in order if order.count(d) > 1)
        raise InferError(
            f"dims {list(p.dims)} names dim {repeated} twice",
            code="E_PARAM",
            param="dims",
            expected=f"a permutation of 0..{rank - 1}",
            actual=list(p.dims),
        )
    return [TensorType(tuple(t.shape[d] for d in order), t.dtype)]


@op(
    "permute",
    saves="none",
    passes_gradient=True,
    params=[Param("dims", "ints", doc="the input dim for each output dim (a permutation)")],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_permute_infer,
    layer="hndl.torch.layers.Permute",
    inference="output dim i is input dim dims[i]",
    example={"op": "permute", "dims": [0, 2, 3, 1]},
    input_shape_example=["B", 3, 32, 32],
    returns="view",
    imports={"aten.permute.default": "permute"},
)
def permute(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Reorder the dims (``x.permute(dims)``)."""
    return layer_of("permute")(list(p.dims))


def _transpose_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is None:
        return [TensorType(None, t.dtype)]
    if open_at(t.shape) is None:
        rank = len(t.shape)
        i, j = norm_dim(p.dim0, rank, "dim0"), norm_dim(p.dim1, rank, "dim1")
        if rank == 0:
            return [t]
    else:
        i, j = open_index(t.shape, p.dim0), open_index(t.shape, p.dim1)  # type: ignore[assignment]
        if i is None or j is None:
            return [TensorType(None, t.dtype)]
    shape = list(t.shape)
    shape[i], shape[j] = shape[j], shape[i]
    return [TensorType(tuple(shape), t.dtype)]


@op(
    "transpose",
    saves="none",
    passes_gradient=True,
    params=[Param("dim0", "int", doc="one dim to swap"), Param("dim1", "int", doc="the other dim to swap")],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_transpose_infer,
    layer="hndl.torch.layers.Transpose",
    inference="dims dim0 and dim1 swap places",
    example={"op": "transpose", "dim0": 1, "dim1": 2},
    input_shape_example=["B", 64, 49],
    returns="view",
    imports={
        "aten.transpose.int": "transpose",
        "aten.swapaxes.default": "swapaxes",
        "aten.swapdims.default": "swapaxes",
    },
)
def transpose(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Swap two dims (``x.transpose(dim0, dim1)``)."""
    return layer_of("transpose")(p.dim0, p.dim1)


def _mean_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if not p.dim:
        raise InferError("'dim' is empty", code="E_PARAM", param="dim", expected="at least one dim", actual="[]")
    if t.shape is None:
        return [TensorType(None, t.dtype)]
    if open_at(t.shape) is None:
        rank = len(t.shape)
        dims = [norm_dim(d, rank, "dim", entry=True) for d in p.dim]
        if rank == 0:
            return [t]
    else:
        dims = [open_index(t.shape, d) for d in p.dim]  # type: ignore[misc]
        if None in dims:
            return [TensorType(None, t.dtype)]
    repeated = [d for d in dims if dims.count(d) > 1]
    if repeated:
        raise InferError(
            f"dim {list(p.dim)} names dim {repeated[0]} twice",
            code="E_PARAM",
            param="dim",
            expected="distinct dims",
            actual=list(p.dim),
        )
    if p.keepdim:
        shape = tuple(1 if i in dims else d for i, d in enumerate(t.shape))
    else:
        shape = tuple(d for i, d in enumerate(t.shape) if i not in dims)
    return [TensorType(shape, t.dtype)]


@op(
    "mean",
    saves="none",
    params=[
        Param("dim", "ints", doc="the dims to average over"),
        Param("keepdim", "bool", default=False, doc="keep the averaged dims, with size 1"),
    ],
    inputs=[Port("x", None)],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_mean_infer,
    layer="hndl.torch.layers.Mean",
    inference="the dims in dim are removed (or become 1 with keepdim)",
    example={"op": "mean", "dim": [1]},
    input_shape_example=["B", "T", 64],
    returns="new",
    aliases={"reduce_mean": {}},
    imports={"aten.mean.dim": "mean", "aten.mean.default": "mean"},
)
def mean(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Average over one or more dims (``x.mean(dim, keepdim)``); the input must be floating point."""
    return layer_of("mean")(list(p.dim), p.keepdim)
