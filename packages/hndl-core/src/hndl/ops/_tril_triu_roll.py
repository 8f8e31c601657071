"""``tril``, ``triu`` and ``roll``: a triangle of the last two dims kept (the rest zero), and elements shifted along
dims with wrap-around. Each builds a ``hndl.torch.layers.Unary`` around its torch function."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType
from .._param_types import ParamType, describe_value
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import norm_dim, open_at


def _register_triangle(name: str, keeps: str) -> None:
    def build(p: Params, inputs: Sequence[TensorType]) -> Any:
        return layer_of(name)(f"torch.{name}", diagonal=p.diagonal)

    # The docstring is the op's documentation (hndl.op reads it).
    build.__doc__ = (
        f"The {keeps} triangle of the last two dims (``torch.{name}``), the rest zero (false for bool).\n\n"
        f"``{{op: {name}, diagonal: {1 if name == 'triu' else 0}}}`` on a ``buffer`` of ones makes a "
        + ("causal mask's complement." if name == "triu" else "causal mask (query i sees keys 0..i).")
    )
    op(
        name,
        params=[
            Param(
                "diagonal",
                "int",
                default=0,
                doc="which diagonal bounds the kept part: 0 the main one, 1 the one above, -1 the one below",
            )
        ],
        inputs=[Port("x", ["*batch", "rows", "cols"], dtype="any", doc="matrices in its last two dims")],
        outputs=[Port("y", ["*batch", "rows", "cols"], dtype="same:x")],
        layer="hndl.torch.layers.Unary",
        saves="none",
        example={"op": name, "diagonal": 1 if name == "triu" else 0},
        input_shape_example=["T", "T"],
        returns="new",
        error_example={"inputs": [["T"]]},
        imports={f"aten.{name}.default": "triangle"},
    )(build)


_register_triangle("tril", "lower")
_register_triangle("triu", "upper")


# --- roll -------------------------------------------------------------------------------------------------


class IntOrInts(ParamType):
    """An integer or a list of integers (``shifts: 3`` or ``shifts: [3, 3]``), kept as a tuple."""

    name, description, bounded = "int_or_ints", "integer, or a list of integers", True

    def normalize(self, value: Any) -> tuple[Any, str]:
        items = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
            return None, f"must be an integer or a list of integers, got {describe_value(value)}"
        return tuple(items), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        item = {"type": "integer", **bounds}
        return {"anyOf": [item, {"type": "array", "items": item}]}


def _roll_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    if p.dims is None:
        if len(p.shifts) != 1:
            raise InferError(
                f"without dims, roll takes one shift (over the flattened input), got {len(p.shifts)}",
                code="E_PARAM",
                param="shifts",
                expected="one shift",
                actual=list(p.shifts),
                hint="give dims, one per shift",
            )
        return [x]
    if len(p.shifts) != len(p.dims):
        raise InferError(
            f"roll takes one shift per dim: {len(p.shifts)} shifts for {len(p.dims)} dims",
            code="E_PARAM",
            param="shifts",
            expected=f"{len(p.dims)} shifts",
            actual=list(p.shifts),
        )
    if x.shape is not None and open_at(x.shape) is None:
        for d in p.dims:
            norm_dim(d, len(x.shape), "dims", entry=True)
    return [x]


@op(
    "roll",
    saves="none",
    params=[
        Param("shifts", IntOrInts(), doc="how far to shift, per dim (negative: towards the start)"),
        Param("dims", IntOrInts(), default=None, nullable=True, doc="the dims to shift (null: the flattened input)"),
    ],
    inputs=[Port("x", ["*shape"], dtype="any")],
    outputs=[Port("y", ["*shape"], dtype="same:x")],
    infer=_roll_infer,
    layer="hndl.torch.layers.Unary",
    inference="one shift per dim; each dim within the input's rank",
    example={"op": "roll", "shifts": [-3, -3], "dims": [1, 2]},
    input_shape_example=["B", 56, 56, 96],
    returns="new",
    error_example={"params": {"shifts": [3], "dims": [2]}, "inputs": [["B", 8]]},
    imports={"aten.roll.default": "roll"},
)
def roll(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Shift elements along dims, wrapping around (``torch.roll``): Swin's cyclic window shift.

    ``{op: roll, shifts: [-3, -3], dims: [1, 2]}`` moves a ``[B, H, W, C]`` map 3 up and 3 left.
    """
    return layer_of("roll")("torch.roll", shifts=p.shifts, dims=p.dims)
