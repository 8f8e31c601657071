"""``flip``, ``repeat`` and ``stack``: elements reversed along dims, a tensor repeated along each dim, and tensors
of one shape joined along a new dim. ``flip`` and ``repeat`` build a ``hndl.torch.layers.Unary`` around
``torch.flip`` / ``torch.tile`` (``x.repeat(*r)`` where ``r`` has a count per dim, as ``repeat`` asks), ``stack``
a ``hndl.torch.layers.Stack``."""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import Dim, dim_mul
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import distinct_dims, norm_dim, open_at, promote
from ._shape import agree_with_first
from ._tril_triu_roll import IntOrInts

# --- flip -------------------------------------------------------------------------------------------------


def _flip_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    if x.shape is not None and open_at(x.shape) is None:
        distinct_dims(p.dims, len(x.shape))  # torch.flip refuses a repeated dim ("dims has duplicates")
    return [x]


@op(
    "flip",
    saves="none",
    params=[Param("dims", IntOrInts(), doc="the dims to reverse (an int or a list, each once)")],
    inputs=[Port("x", ["*shape"], dtype="any")],
    outputs=[Port("y", ["*shape"], dtype="same:x")],
    infer=_flip_infer,
    layer="hndl.torch.layers.Unary",
    inference="the shape and dtype of x; each dim within the input's rank, none twice",
    example={"op": "flip", "dims": -1},
    input_shape_example=["B", "T", 8],
    returns="new",
    error_example={"params": {"dims": [1, -1]}, "inputs": [["B", 8]]},
    imports={"aten.flip.default": "flip"},
)
def flip(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Reverse the order of elements along ``dims`` (``torch.flip``): a sequence read backwards, ``{op: flip,
    dims: 1}`` on ``[B, T, D]``, or an image mirrored, ``dims: -1``."""
    return layer_of("flip")("torch.flip", dims=p.dims)


# --- repeat -----------------------------------------------------------------------------------------------


def _repeat_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    if x.shape is None or open_at(x.shape) is not None:
        return [TensorType(None, x.dtype)]
    rank, counts = len(x.shape), list(p.repeats)
    if len(counts) < rank:  # torch: "Number of dimensions of repeat dims can not be smaller than ..."
        raise InferError(
            f"repeat takes a count for each of the input's {rank} dims, got {len(counts)}",
            code="E_PARAM",
            param="repeats",
            expected=f"{rank} counts or more (more add leading dims)",
            actual=counts,
            hint=f"give 1 for a dim to keep: repeats: {[1] * (rank - len(counts)) + counts}",
        )
    lead = len(counts) - rank
    out: list[Dim] = [*counts[:lead], *(dim_mul(d, c) for d, c in zip(x.shape, counts[lead:]))]
    return [TensorType(tuple(out), x.dtype)]


@op(
    "repeat",
    saves="none",
    passes_gradient=True,
    params=[
        Param("repeats", "ints", min=0, doc="how many copies along each dim; extra counts in front add leading dims")
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_repeat_infer,
    layer="hndl.torch.layers.Unary",
    inference="a count for each input dim (more add leading dims); each dim times its count (2*T)",
    example={"op": "repeat", "repeats": [1, 2, 1]},
    input_shape_example=["B", "T", 8],
    returns="new",
    error_example={"params": {"repeats": [2]}, "inputs": [["B", 8]]},
    imports={"aten.repeat.default": "repeat"},
)
def repeat(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Copies of ``x`` side by side along each dim (``x.repeat(*repeats)``, not ``repeat_interleave``): ``{op:
    repeat, repeats: [1, 1, 2]}`` makes ``[B, T, 8]`` into ``[B, T, 16]``, the two halves equal."""
    return layer_of("repeat")("torch.tile", dims=p.repeats)


# --- stack ------------------------------------------------------------------------------------------------


def _stack_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    dtype = reduce(promote, (t.dtype for t in inputs))
    shapes = [t.shape for t in inputs]
    if any(s is None or open_at(s) is not None for s in shapes):
        return [TensorType(None, dtype)]
    first = shapes[0]
    assert first is not None
    out = list(first)
    for i, s in enumerate(shapes[1:], start=1):
        assert s is not None
        if len(s) != len(first):
            raise InferError(
                f"input {i} has rank {len(s)} {format_shape(s)}, input 0 has rank {len(first)} {format_shape(first)}",
                port="inputs",
                expected=format_shape(first),
                actual=format_shape(s),
                hint="every input of stack has the same shape",
            )
        agree_with_first(
            out,
            first,
            s,
            i,
            skip=None,
            suffix="",
            hint="every input of stack has the same shape (concat joins along an existing dim)",
        )
    index = norm_dim(p.dim, len(first) + 1)
    out.insert(index, len(inputs))
    return [TensorType(tuple(out), dtype)]


@op(
    "stack",
    saves="none",
    passes_gradient=True,
    params=[Param("dim", "int", default=0, doc="where the new dim goes, in the result (negative counts from the end)")],
    inputs=[Port("inputs", None, dtype="any", doc="one or more tensors of one shape", variadic=True)],
    outputs=[Port("y", None, dtype="any")],
    infer=_stack_infer,
    layer="hndl.torch.layers.Stack",
    inference="all inputs share one shape; a new dim of size len(inputs) at dim; dtype: torch's promotion",
    example={"op": "stack", "dim": -1},
    input_shape_example=["B", "T", 4],
    returns="new",
    error_example={"inputs": [["B", 8], ["B", 9]]},
    imports={"aten.stack.default": "stack"},
)
def stack(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Join tensors of one shape along a new dim (``torch.stack``): ``{op: stack, in: [x2n, x1], dim: -1}`` then a
    ``flatten`` of the last two dims interleaves rotary halves as GPT-J writes them."""
    return layer_of("stack")(p.dim)
