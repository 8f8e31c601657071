"""Tensors made from another tensor's sizes, dtype and device: arange, the ``*_like`` fills, the ``new_*`` fills.

None of them reads the values of its input: they exist so that a graph can make a mask, a range of positions or
a tensor of ones at the sizes of the call (symbolic ``B`` and ``T``), on the input's device, where a ``buffer``
would fix the sizes when the model is built. Their dtype follows the input's unless one is named, as torch's
``new_ones`` and ``zeros_like`` do, so a model converted with ``.half()`` makes float16 fills.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType
from .._dims import Dim, dim_add, dim_floordiv, dim_sub
from .._registry import ImportRow, InferError, Param, Params, Port, layer_of, op
from ._common import concrete_dtype, norm_dim, open_at, open_index, require, torch_dtype
from ._tensor import _Sizes, plan_dim, resolve_sizes


def _dtype(p: Params, default: str) -> str:
    """The ``dtype`` parameter (a concrete dtype), or ``default`` when it is not given."""
    return concrete_dtype(p) or default


# --- arange ---------------------------------------------------------------------------------------------


def arange_length(size: Dim, start: int, step: int) -> Dim:
    """The length of ``arange(start, size, step)``, symbolic where ``size`` is.

    Raises:
        InferError: E_SHAPE when an int ``size`` lies on the wrong side of ``start`` for the step's sign (torch
            refuses it too).
    """
    if isinstance(size, int):
        if (size - start) * step < 0:
            raise InferError(
                f"arange from {start} to {size} by {step} runs the wrong way",
                port="x",
                expected=f"a dim {'>=' if step > 0 else '<='} {start}",
                actual=size,
            )
        return len(range(start, size, step))
    if step > 0:
        if start > 0:
            require(size, start, "the arange's end")
        return dim_floordiv(dim_add(dim_sub(size, start), step - 1), step)
    return dim_floordiv(dim_add(dim_sub(start, size), -step - 1), -step)


def _arange_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.step == 0:
        raise InferError("step is 0", code="E_PARAM", param="step", expected="a nonzero step", actual=0)
    dtype = _dtype(p, "int64")
    shape = inputs[0].shape
    if shape is None:
        return [TensorType(None, dtype)]
    if open_at(shape) is not None:
        index = open_index(shape, p.dim)
        if index is None:
            return [TensorType(None, dtype)]
    else:
        if len(shape) == 0:
            raise InferError(
                "a 0-d input has no dim to read a length from", port="x", expected="rank >= 1", actual="[]"
            )
        index = norm_dim(p.dim, len(shape))
    return [TensorType((arange_length(shape[index], p.start, p.step),), dtype)]


@op(
    "arange",
    saves="none",
    params=[
        Param("dim", "int", default=1, doc="the dim of x whose size is the end (1: the T of [B, T])"),
        Param("start", "int", default=0, doc="the first value"),
        Param("step", "int", default=1, doc="the difference between neighbours (nonzero)"),
        Param("dtype", "dtype", default=None, nullable=True, doc="the result's dtype (null: int64)"),
    ],
    inputs=[Port("x", None, dtype="any", doc="any tensor: only the size of dim and the device are read")],
    outputs=[Port("y", ["n"], dtype="any")],
    infer=_arange_infer,
    layer="hndl.torch.layers.Arange",
    inference="n is the length of range(start, x's dim, step): the dim itself (T) for start 0, step 1",
    example={"op": "arange", "dim": 1},
    input_shape_example=["B", "T"],
    returns="new",
    error_example={"params": {"dim": 1, "start": 8}, "inputs": [["B", 4]]},
    imports=dict.fromkeys(("aten.arange.default", "aten.arange.start", "aten.arange.start_step"), "arange"),
)
def arange(p: Params, inputs: Sequence[TensorType]) -> Any:
    """The values ``start, start + step, ...`` up to (not including) the size of ``x``'s dim ``dim``
    (``torch.arange(start, x.shape[dim], step)``), made on ``x``'s device on every call.

    Its length follows the call: ``{op: arange, in: input_ids, dim: 1}`` on ``[B, T]`` gives ``[T]``, the
    positions a causal mask compares (``le`` of the positions and the positions reshaped to a column), so an
    imported decoder keeps a symbolic ``T``. For a range of a fixed length, use a ``buffer`` with ``init:
    arange``.
    """
    return layer_of("arange")(p.dim, p.start, p.step, torch_dtype(p.dtype))


# --- zeros_like, ones_like, full_like -------------------------------------------------------------------


def _like_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    return [TensorType(x.shape, _dtype(p, x.dtype))]


_DTYPE = Param("dtype", "dtype", default=None, nullable=True, doc="the result's dtype (null: x's)")
_VALUE = Param("value", "float", finite=False, doc="every element's value (-inf and inf are allowed)")


def _fill_text(value: float | None) -> str:
    return "``value``" if value is None else f"{int(value)}"


def _like_op(name: str, value: float | None) -> None:
    def build(p: Params, inputs: Sequence[TensorType]) -> Any:
        return layer_of(name)(p.value if value is None else value, torch_dtype(p.dtype))

    build.__doc__ = (
        f"A tensor of x's shape filled with {_fill_text(value)} (``torch.{name}(x)``), in x's dtype unless "
        "``dtype`` is given, on x's device.\n\nOnly x's shape, dtype and device are read: the fill has the sizes of "
        "each call, where a ``buffer`` has the sizes the model was built with."
        + ("\n\nAn additive mask starts as ``{op: full_like, in: scores, value: -.inf}``." if value is None else "")
    )
    params = [_DTYPE] if value is not None else [_VALUE, _DTYPE]
    op(
        name,
        saves="none",
        params=params,
        inputs=[Port("x", ["*shape"], dtype="any", doc="the tensor whose shape, dtype and device the result takes")],
        outputs=[Port("y", ["*shape"], dtype="any")],
        infer=_like_infer,
        layer="hndl.torch.layers.FullLike",
        inference="the output has x's shape, and x's dtype unless dtype is given",
        example={"op": name, "value": -1.0} if value is None else {"op": name, "dtype": "float32"},
        input_shape_example=["B", "T"],
        returns="new",
        error_example={
            "params": {"value": 0.0, "dtype": "float"} if value is None else {"dtype": "int"},
            "inputs": [["B", 8]],
        },
        imports={f"aten.{name}.default": "like"},
    )(build)


for _name, _value in (("zeros_like", 0.0), ("ones_like", 1.0), ("full_like", None)):
    _like_op(_name, _value)


# --- new_zeros, new_ones, new_full ----------------------------------------------------------------------


def _new_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    like = inputs[1].shape if len(inputs) > 1 else None
    dtype = _dtype(p, x.dtype)
    plain = all(isinstance(s, int) and s >= 0 for s in p.shape)
    if not plain and (
        x.shape is None or open_at(x.shape) is not None or (like is not None and open_at(like) is not None)
    ):
        return [TensorType(None, dtype)]
    plan = resolve_sizes(p.shape, x.shape or (), like) if not plain else list(p.shape)
    return [TensorType(tuple(plan_dim(source, x.shape or (), like) for source in plan), dtype)]


def _new_op(name: str, value: float | None) -> None:
    def build(p: Params, inputs: Sequence[TensorType]) -> Any:
        like = inputs[1].shape if len(inputs) > 1 else None
        plan = resolve_sizes(p.shape, inputs[0].shape or (), like)
        return layer_of(name)(plan, p.value if value is None else value, torch_dtype(p.dtype))

    build.__doc__ = (
        f"A tensor of ``shape`` filled with {_fill_text(value)} (``x.{name}(shape)``), in x's dtype unless "
        "``dtype`` is given, on x's device.\n\nA symbol in ``shape`` names a dim of x (or else of ``like``) as the "
        "checker infers it and is read on every call: ``{op: new_ones, in: input_ids, shape: [B, T], dtype: "
        "int64}`` is the attention mask of an unpadded batch, whatever its size."
    )
    params = [
        Param(
            "shape",
            _Sizes(),
            doc="the sizes: ints, -1 for x's aligned dim, symbols of an input's shape ([B, T]), or expressions "
            "over them (8*h: computed from a dim 16*h on every call)",
        )
    ]
    params += [_DTYPE] if value is not None else [_VALUE, _DTYPE]
    op(
        name,
        saves="none",
        params=params,
        inputs=[
            Port("x", None, dtype="any", doc="the tensor whose dtype and device the result takes"),
            Port("like", None, dtype="any", optional=True, doc="a tensor whose dims the symbols in shape name"),
        ],
        outputs=[Port("y", None, dtype="any")],
        infer=_new_infer,
        layer="hndl.torch.layers.NewFull",
        inference="the output has shape's sizes (-1: x's dim aligned from the right, as expand's; a symbol or an "
        "expression: the dim of x, or else of like, it names, or its value), and x's dtype unless dtype is given",
        example={"op": name, "shape": [1, -1, -1], **({"value": 2.0} if value is None else {})},
        input_shape_example=["B", "T"],
        returns="new",
        error_example={
            "params": {"shape": ["B", "S"], **({"value": 2.0} if value is None else {})},
            "inputs": [["B", "T"]],
        },
        # new_full's row reads the call's fill_value as the op's value
        imports={f"aten.{name}.default": ImportRow("new", {"value": "fill_value"} if value is None else {})},
    )(build)


for _name, _value in (("new_zeros", 0.0), ("new_ones", 1.0), ("new_full", None)):
    _new_op(_name, _value)


__all__ = ["arange_length"]
