"""Ops that make spatial dims larger: conv_transpose1d, conv_transpose2d, upsample.

A transposed convolution's length is ``(L-1)*stride - 2*padding + dilation*(kernel_size-1) + output_padding
+ 1``, symbolic when ``L`` is (``2*H`` for kernel 2, stride 2); ``upsample`` by an integer factor gives
``2*H`` too, so a UNet's skip connections line up statically.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType, format_shape, unknown_dim
from .._dims import Dim, dim_add, dim_mul, format_dim
from .._op_facts import conv_transpose_macs
from .._registry import ImportRow, InferError, Param, Params, Port, op
from ._common import open_at, pair, shape_of_rank
from ._conv import _check_groups

_OUT_EXPR = "(L-1)*stride{s}-2*padding{s}+dilation{s}*(kernel{s}-1)+output_padding{s}+1"


def _params(kernel_type: str) -> list[Param]:
    return [
        Param("out_channels", "int", min=1, doc="number of output channels"),
        Param("kernel_size", kernel_type, min=1, doc="size of the convolving kernel"),
        Param("stride", kernel_type, default=1, min=1, doc="step between input positions in the output"),
        Param("padding", kernel_type, default=0, min=0, doc="dilation*(kernel_size-1)-padding zeros per side"),
        Param(
            "output_padding",
            kernel_type,
            default=0,
            min=0,
            doc="extra size on one side of the output; smaller than stride or dilation",
        ),
        Param("groups", "int", default=1, min=1, doc="blocked connections; must divide both channel counts"),
        Param("bias", "bool", default=True, doc="learn an additive bias"),
        Param("dilation", kernel_type, default=1, min=1, doc="spacing between kernel elements"),
        Param("in_channels", "int", min=1, inferred=True, doc="number of input channels (inferred)"),
    ]


def transposed_length(size: Dim, kernel: int, stride: int, padding: int, out_pad: int, dilation: int, axis: str) -> Dim:
    """torch's output length of a transposed convolution.

    Raises:
        InferError: E_PARAM when ``output_padding`` is not smaller than ``stride`` or ``dilation`` (torch
            refuses it), E_SHAPE when an int length comes out negative.
    """
    if out_pad >= stride and out_pad >= dilation:
        raise InferError(
            f"output_padding {out_pad} is not smaller than stride ({stride}) or dilation ({dilation})",
            code="E_PARAM",
            param="output_padding",
            expected=f"< {max(stride, dilation)}",
            actual=out_pad,
        )
    out = dim_add(dim_mul(dim_add(size, -1), stride), -2 * padding + dilation * (kernel - 1) + out_pad + 1)
    if isinstance(out, int) and out < 0:  # torch returns an empty tensor for 0, and refuses less
        raise InferError(
            f"the output {axis} would be {out} for an input {axis} of {format_dim(size)}",
            port="x",
            expected=f"output {axis} >= 0",
            actual=out,
            hint="use less padding or a larger kernel_size or input",
        )
    return out


def _derive_2d(p: Params) -> Mapping[str, Any]:
    out: dict[str, Any] = {}
    for param, short in (
        ("kernel_size", "kernel"),
        ("stride", "stride"),
        ("padding", "padding"),
        ("output_padding", "output_padding"),
        ("dilation", "dilation"),
    ):
        out[f"{short}_h"], out[f"{short}_w"] = pair(p[param])
    return out


def _infer_1d(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    _check_groups(p)
    shape = shape_of_rank(inputs[0], 3)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, _, length = shape
    out = transposed_length(length, p.kernel_size, p.stride, p.padding, p.output_padding, p.dilation, "length")
    return [TensorType((n, p.out_channels, out), inputs[0].dtype)]


@op(
    "conv_transpose1d",
    saves="inputs",
    macs=conv_transpose_macs,
    params=_params("int"),
    inputs=[Port("x", ["N", "in_channels", "L"], doc="batch, channels, length")],
    outputs=[
        Port(
            "y",
            ["N", "out_channels", "(L-1)*stride-2*padding+dilation*(kernel_size-1)+output_padding+1"],
            dtype="same:x",
        )
    ],
    infer=_infer_1d,
    layer="torch.nn.ConvTranspose1d",
    inference="groups must divide both channel counts; output_padding must be smaller than stride or dilation",
    example={"op": "conv_transpose1d", "out_channels": 32, "kernel_size": 2, "stride": 2},
    input_shape_example=["B", 64, "L"],
    returns="new",
    aliases={"Conv1DTranspose": {}},
    imports={"aten.conv_transpose1d.default": ImportRow("conv", {"dims": 1, "transposed": True})},
)
def conv_transpose1d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """1-d transposed convolution over ``[N, C, L]`` (the gradient of ``conv1d``): with ``kernel_size: 2,
    stride: 2`` it doubles the length. ``in_channels`` follows from the input's channel dim."""
    import torch

    return torch.nn.ConvTranspose1d(
        p.in_channels,
        p.out_channels,
        p.kernel_size,
        stride=p.stride,
        padding=p.padding,
        output_padding=p.output_padding,
        groups=p.groups,
        bias=p.bias,
        dilation=p.dilation,
    )


def _infer_2d(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    _check_groups(p)
    shape = shape_of_rank(inputs[0], 4)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, _, h, w = shape
    k, s, pad, op_, d = (pair(p[k]) for k in ("kernel_size", "stride", "padding", "output_padding", "dilation"))
    oh = transposed_length(h, k[0], s[0], pad[0], op_[0], d[0], "height")
    ow = transposed_length(w, k[1], s[1], pad[1], op_[1], d[1], "width")
    return [TensorType((n, p.out_channels, oh, ow), inputs[0].dtype)]


@op(
    "conv_transpose2d",
    saves="inputs",
    macs=conv_transpose_macs,
    params=_params("int_or_pair"),
    inputs=[Port("x", ["N", "in_channels", "H", "W"], doc="batch, channels, height, width")],
    outputs=[
        Port(
            "y",
            [
                "N",
                "out_channels",
                _OUT_EXPR.format(s="_h").replace("(L-1)", "(H-1)"),
                _OUT_EXPR.format(s="_w").replace("(L-1)", "(W-1)"),
            ],
            dtype="same:x",
        )
    ],
    infer=_infer_2d,
    derive=_derive_2d,
    layer="torch.nn.ConvTranspose2d",
    inference=(
        "kernel_h and kernel_w are kernel_size's entries, and so on for stride, padding, output_padding and "
        "dilation; groups must divide both channel counts; output_padding must be smaller than stride or dilation"
    ),
    example={"op": "conv_transpose2d", "out_channels": 64, "kernel_size": 2, "stride": 2},
    input_shape_example=["B", 128, "H", "W"],
    returns="new",
    aliases={"Conv2DTranspose": {}},
    imports={"aten.conv_transpose2d.input": ImportRow("conv", {"dims": 2, "transposed": True})},
)
def conv_transpose2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """2-d transposed convolution over ``[N, C, H, W]``: with ``kernel_size: 2, stride: 2`` it doubles height
    and width (a UNet's up path). Pair-valued parameters take an int or ``[h, w]``."""
    import torch

    return torch.nn.ConvTranspose2d(
        p.in_channels,
        p.out_channels,
        pair(p.kernel_size),
        stride=pair(p.stride),
        padding=pair(p.padding),
        output_padding=pair(p.output_padding),
        groups=p.groups,
        bias=p.bias,
        dilation=pair(p.dilation),
    )


# --- upsample -------------------------------------------------------------------------------------------

_SPATIAL_RANKS = {"nearest": (3, 4, 5), "linear": (3,), "bilinear": (4,)}


def _scaled(size: Dim, factor: float) -> Dim:
    if float(factor).is_integer():
        return dim_mul(size, int(factor))
    if isinstance(size, int):
        return math.floor(size * factor)
    return unknown_dim()


def _upsample_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if (p.size is None) == (p.scale_factor is None):
        both = p.size is not None
        raise InferError(
            "give exactly one of 'size' and 'scale_factor'" + (", not both" if both else ""),
            code="E_PARAM",
            param="scale_factor" if both else None,
            hint="scale_factor: 2 doubles each spatial dim; size: [64, 64] sets them",
        )
    if p.align_corners is not None and p.mode == "nearest":
        raise InferError(
            "align_corners only applies to modes linear and bilinear",
            code="E_PARAM",
            param="align_corners",
            expected="null",
            actual=p.align_corners,
        )
    ranks = _SPATIAL_RANKS[p.mode]
    if t.shape is None or open_at(t.shape) is not None:
        return [TensorType(None, t.dtype)]
    if len(t.shape) not in ranks:
        raise InferError(
            f"mode {p.mode!r} takes a rank-{' or rank-'.join(map(str, ranks))} input [N, C, ...], "
            f"got rank {len(t.shape)}",
            port="x",
            expected=f"rank {' or '.join(map(str, ranks))}",
            actual=format_shape(t.shape),
            hint="linear is for [N, C, L], bilinear for [N, C, H, W]; nearest takes either",
        )
    spatial = t.shape[2:]
    if p.size is not None:
        if len(p.size) not in (1, len(spatial)):
            raise InferError(
                f"size {list(p.size)} has {len(p.size)} entries for {len(spatial)} spatial dims",
                code="E_PARAM",
                param="size",
                expected=f"1 or {len(spatial)} entries",
                actual=list(p.size),
            )
        out = list(p.size) * (len(spatial) // len(p.size))
    else:
        out = [_scaled(d, p.scale_factor) for d in spatial]
        for d in out:
            if isinstance(d, int) and d < 1:
                raise InferError(
                    f"scale_factor {p.scale_factor} makes a spatial dim {d}",
                    code="E_PARAM",
                    param="scale_factor",
                    expected="a factor that leaves every spatial dim >= 1",
                    actual=p.scale_factor,
                )
    return [TensorType((*t.shape[:2], *out), t.dtype)]


@op(
    "upsample",
    saves="none",
    params=[
        Param("scale_factor", "float", default=None, nullable=True, min=0, doc="multiplier of each spatial dim"),
        Param("size", "ints", default=None, nullable=True, min=1, doc="the output's spatial dims (one int: all)"),
        Param("mode", "str", default="nearest", choices=tuple(_SPATIAL_RANKS), doc="how new values are computed"),
        Param(
            "align_corners",
            "bool",
            default=None,
            nullable=True,
            doc="linear modes: align the corner pixels of input and output (torch's default: false)",
        ),
    ],
    inputs=[Port("x", None, doc="[N, C, L] or [N, C, H, W] (nearest also [N, C, D, H, W])")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_upsample_infer,
    layer="torch.nn.Upsample",
    inference=(
        "N and C stay; each spatial dim becomes size, or floor(dim*scale_factor) (2*H for an integer factor; "
        "unknown for a fractional factor on a symbolic dim)"
    ),
    example={"op": "upsample", "scale_factor": 2, "mode": "nearest"},
    input_shape_example=["B", 64, "H", "W"],
    returns="new",
    aliases={"interpolate": {}, "UpSampling2D": {}},
    imports={
        "aten.upsample_nearest2d.vec": ImportRow("upsample", {"mode": "nearest", "dims": 2}),
        "aten.upsample_bilinear2d.vec": ImportRow("upsample", {"mode": "bilinear", "dims": 2}),
    },
)
def upsample(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Resize the spatial dims by ``scale_factor`` or to ``size`` (``torch.nn.Upsample``); exactly one of the
    two. ``nearest`` repeats values; ``linear`` ([N, C, L]) and ``bilinear`` ([N, C, H, W]) interpolate."""
    import torch

    size = None if p.size is None else (p.size[0] if len(p.size) == 1 else tuple(p.size))
    return torch.nn.Upsample(size=size, scale_factor=p.scale_factor, mode=p.mode, align_corners=p.align_corners)
