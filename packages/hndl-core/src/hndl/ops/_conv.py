"""Convolutions and pooling: conv1d, conv2d, maxpool1d/2d, avgpool1d/2d, adaptive_avgpool1d/2d.

Output lengths follow torch's formula ``(L + 2*padding - dilation*(kernel_size-1) - 1) // stride + 1`` on
symbolic dims too (``(H-1)//2+1``); an input provably shorter than its window is an E_SHAPE at check time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType
from .._dims import format_dim
from .._op_facts import conv_macs, pool_indices_memory
from .._registry import ImportRow, InferError, Param, Params, Port, op
from ._common import check_window_padding, pair, shape_of_rank, window_out

_OUT_EXPR = "({x}+2*padding{s}-dilation{s}*(kernel{s}-1)-1)//stride{s}+1"


def _conv_params(kernel_type: str) -> list[Param]:
    return [
        Param("out_channels", "int", min=1, doc="number of output channels"),
        Param("kernel_size", kernel_type, min=1, doc="size of the convolving kernel"),
        Param("stride", kernel_type, default=1, min=1, doc="step between windows"),
        Param("padding", kernel_type, default=0, min=0, doc="zeros added to both sides of each spatial dim"),
        Param("dilation", kernel_type, default=1, min=1, doc="spacing between kernel elements"),
        Param("groups", "int", default=1, min=1, doc="blocked connections; must divide both channel counts"),
        Param("bias", "bool", default=True, doc="learn an additive bias"),
        Param("in_channels", "int", min=1, inferred=True, doc="number of input channels (inferred)"),
    ]


def _check_groups(p: Params) -> None:
    if p.out_channels % p.groups:
        raise InferError(
            f"groups={p.groups} does not divide out_channels={p.out_channels}",
            code="E_PARAM",
            param="groups",
            expected=f"a divisor of out_channels ({p.out_channels})",
            actual=p.groups,
            hint="choose out_channels and groups so that out_channels % groups == 0",
        )
    if p.in_channels % p.groups:
        raise InferError(
            f"groups={p.groups} does not divide the input's {p.in_channels} channels",
            port="x",
            expected=f"channels divisible by groups ({p.groups})",
            actual=p.in_channels,
            hint="choose groups to divide the input's channel count",
        )


def _conv1d_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    _check_groups(p)
    shape = shape_of_rank(inputs[0], 3)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, _, length = shape
    out = window_out(length, p.kernel_size, p.stride, p.padding, p.dilation, axis="length")
    return [TensorType((n, p.out_channels, out), inputs[0].dtype)]


@op(
    "conv1d",
    saves="inputs",
    macs=conv_macs,
    params=_conv_params("int"),
    inputs=[Port("x", ["N", "in_channels", "L"], doc="batch, channels, length")],
    outputs=[Port("y", ["N", "out_channels", "(L+2*padding-dilation*(kernel_size-1)-1)//stride+1"], dtype="same:x")],
    infer=_conv1d_infer,
    layer="torch.nn.Conv1d",
    inference="groups must divide both channel counts",
    example={"op": "conv1d", "out_channels": 32, "kernel_size": 3, "padding": 1},
    input_shape_example=["B", 16, 100],
    returns="new",
    imports={"aten.conv1d.default": ImportRow("conv", {"dims": 1})},
)
def conv1d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """1-d convolution over ``[N, C, L]``.

    ``in_channels`` follows from the input's channel dim.
    """
    import torch

    return torch.nn.Conv1d(
        p.in_channels,
        p.out_channels,
        p.kernel_size,
        stride=p.stride,
        padding=p.padding,
        dilation=p.dilation,
        groups=p.groups,
        bias=p.bias,
    )


def _derive_conv2d(p: Params) -> Mapping[str, Any]:
    """``kernel_h``, ``kernel_w``, ``stride_h``, ...: the entries of the pair-valued parameters, which the
    output pattern uses."""
    out: dict[str, Any] = {}
    for param, short in (
        ("kernel_size", "kernel"),
        ("stride", "stride"),
        ("padding", "padding"),
        ("dilation", "dilation"),
    ):
        out[f"{short}_h"], out[f"{short}_w"] = pair(p[param])
    return out


_HW_OUT = [_OUT_EXPR.format(x="H", s="_h"), _OUT_EXPR.format(x="W", s="_w")]


def _conv2d_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    _check_groups(p)
    shape = shape_of_rank(inputs[0], 4)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, _, h, w = shape
    k, s, pad, d = pair(p.kernel_size), pair(p.stride), pair(p.padding), pair(p.dilation)
    oh = window_out(h, k[0], s[0], pad[0], d[0], axis="height")
    ow = window_out(w, k[1], s[1], pad[1], d[1], axis="width")
    return [TensorType((n, p.out_channels, oh, ow), inputs[0].dtype)]


@op(
    "conv2d",
    saves="inputs",
    macs=conv_macs,
    params=_conv_params("int_or_pair"),
    inputs=[Port("x", ["N", "in_channels", "H", "W"], doc="batch, channels, height, width")],
    outputs=[Port("y", ["N", "out_channels", *_HW_OUT], dtype="same:x")],
    infer=_conv2d_infer,
    derive=_derive_conv2d,
    layer="torch.nn.Conv2d",
    inference=(
        "kernel_h and kernel_w are kernel_size's entries, and so on for stride, padding and dilation; "
        "groups must divide both channel counts"
    ),
    example={"op": "conv2d", "out_channels": 64, "kernel_size": 3, "padding": 1},
    input_shape_example=["B", 3, 32, 32],
    returns="new",
    imports={"aten.conv2d.default": ImportRow("conv", {"dims": 2})},
)
def conv2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """2-d convolution over ``[N, C, H, W]``.

    ``kernel_size``, ``stride``, ``padding`` and ``dilation`` take an int or a ``[h, w]`` pair.
    ``in_channels`` follows from the input's channel dim.
    """
    import torch

    return torch.nn.Conv2d(
        p.in_channels,
        p.out_channels,
        pair(p.kernel_size),
        stride=pair(p.stride),
        padding=pair(p.padding),
        dilation=pair(p.dilation),
        groups=p.groups,
        bias=p.bias,
    )


# --- pooling --------------------------------------------------------------------------------------------


def _pool_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    shape = shape_of_rank(inputs[0], 4)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, c, h, w = shape
    k = pair(p.kernel_size)
    s = k if p.stride is None else pair(p.stride)
    pad = pair(p.padding)
    d = pair(p.get("dilation", 1))
    check_window_padding(k, pad)
    oh = window_out(h, k[0], s[0], pad[0], d[0], axis="height", ceil_mode=p.ceil_mode)
    ow = window_out(w, k[1], s[1], pad[1], d[1], axis="width", ceil_mode=p.ceil_mode)
    for size, name in ((oh, "height"), (ow, "width")):
        if isinstance(size, int) and size < 1:
            raise InferError(f"the output {name} would be {size}", expected=f"{name} >= 1", actual=size)
    return [TensorType((n, c, oh, ow), inputs[0].dtype)]


_POOL_COMMON = [
    Param("kernel_size", "int_or_pair", min=1, doc="size of the pooling window"),
    Param(
        "stride", "int_or_pair", default=None, nullable=True, min=1, doc="step between windows (default: kernel_size)"
    ),
    Param("padding", "int_or_pair", default=0, min=0, doc="implicit padding on both sides; at most kernel_size // 2"),
]
_CEIL = Param("ceil_mode", "bool", default=False, doc="round the output size up instead of down")
_POOL_IN = [Port("x", ["N", "C", "H", "W"], doc="batch, channels, height, width")]
# No pattern can say how ceil_mode rounds (torch drops a last window that would start in the right padding),
# so the output dims are names the inference text explains.
_POOL_OUT = [Port("y", ["N", "C", "H_out", "W_out"], dtype="same:x")]
_POOL_INFERENCE = (
    "H_out = ({window})//stride_h+1 and W_out likewise: torch's window formula, with kernel_h, stride_h, "
    "padding_h{dilation} the first entries of the pair-valued parameters and stride defaulting to kernel_size; "
    "rounded up in ceil_mode, where a last window that would start in the right padding is dropped"
)


@op(
    "maxpool2d",
    saves="inputs",
    inner_memory=pool_indices_memory,
    params=[
        *_POOL_COMMON,
        Param("dilation", "int_or_pair", default=1, min=1, doc="spacing between window elements"),
        _CEIL,
    ],
    inputs=_POOL_IN,
    outputs=_POOL_OUT,
    infer=_pool_infer,
    layer="torch.nn.MaxPool2d",
    inference=_POOL_INFERENCE.format(window="H+2*padding_h-dilation_h*(kernel_h-1)-1", dilation=", dilation_h"),
    example={"op": "maxpool2d", "kernel_size": 2},
    input_shape_example=["B", 16, 32, 32],
    returns="new",
    aliases={"MaxPooling2D": {}},
    imports={"aten.max_pool2d.default": ImportRow("pool", {"dims": 2})},
)
def maxpool2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """2-d max pooling over ``[N, C, H, W]``: the maximum of each window."""
    import torch

    return torch.nn.MaxPool2d(
        pair(p.kernel_size),
        stride=None if p.stride is None else pair(p.stride),
        padding=pair(p.padding),
        dilation=pair(p.dilation),
        ceil_mode=p.ceil_mode,
    )


@op(
    "avgpool2d",
    saves="inputs",
    params=[
        *_POOL_COMMON,
        _CEIL,
        Param("count_include_pad", "bool", default=True, doc="count the zero padding in each window's average"),
    ],
    inputs=_POOL_IN,
    outputs=_POOL_OUT,
    infer=_pool_infer,
    layer="torch.nn.AvgPool2d",
    inference=_POOL_INFERENCE.format(window="H+2*padding_h-kernel_h", dilation=""),
    example={"op": "avgpool2d", "kernel_size": 2},
    input_shape_example=["B", 16, 32, 32],
    returns="new",
    aliases={"AveragePooling2D": {}},
    imports={"aten.avg_pool2d.default": ImportRow("pool", {"dims": 2, "average": True})},
)
def avgpool2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """2-d average pooling over ``[N, C, H, W]``: the mean of each window."""
    import torch

    return torch.nn.AvgPool2d(
        pair(p.kernel_size),
        stride=None if p.stride is None else pair(p.stride),
        padding=pair(p.padding),
        ceil_mode=p.ceil_mode,
        count_include_pad=p.count_include_pad,
    )


def _derive_adaptive(p: Params) -> Mapping[str, Any]:
    oh, ow = pair(p.output_size)
    return {"out_h": oh, "out_w": ow}


def _adaptive_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    shape = shape_of_rank(inputs[0], 4)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, c, h, w = shape
    for size, name in ((h, "height"), (w, "width")):
        if isinstance(size, int) and size < 1:
            raise InferError(
                f"the input's {name} is {format_dim(size)}", port="x", expected=f"{name} >= 1", actual=size
            )
    oh, ow = pair(p.output_size)
    return [TensorType((n, c, oh, ow), inputs[0].dtype)]


@op(
    "adaptive_avgpool2d",
    saves="none",
    params=[
        Param(
            "output_size",
            "int_or_pair",
            min=1,
            doc="the output's height and width, out_h and out_w (one int for a square)",
        )
    ],
    inputs=_POOL_IN,
    outputs=[Port("y", ["N", "C", "out_h", "out_w"], dtype="same:x")],
    infer=_adaptive_infer,
    derive=_derive_adaptive,
    layer="torch.nn.AdaptiveAvgPool2d",
    example={"op": "adaptive_avgpool2d", "output_size": 1},
    input_shape_example=["B", 512, 7, 7],
    returns="new",
    aliases={"GlobalAveragePooling2D": {"output_size": 1}},
    imports={"aten.adaptive_avg_pool2d.default": ImportRow("adaptive", {"dims": 2})},
)
def adaptive_avgpool2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """2-d average pooling to a fixed output size, whatever the input's height and width."""
    import torch

    return torch.nn.AdaptiveAvgPool2d(pair(p.output_size))


# --- 1-d pooling ----------------------------------------------------------------------------------------


def _pool1d_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    shape = shape_of_rank(inputs[0], 3)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, c, length = shape
    stride = p.kernel_size if p.stride is None else p.stride
    check_window_padding((p.kernel_size,), (p.padding,))
    out = window_out(
        length, p.kernel_size, stride, p.padding, p.get("dilation", 1), axis="length", ceil_mode=p.ceil_mode
    )
    if isinstance(out, int) and out < 1:
        raise InferError(f"the output length would be {out}", expected="length >= 1", actual=out)
    return [TensorType((n, c, out), inputs[0].dtype)]


_POOL1D_COMMON = [
    Param("kernel_size", "int", min=1, doc="size of the pooling window"),
    Param("stride", "int", default=None, nullable=True, min=1, doc="step between windows (default: kernel_size)"),
    Param("padding", "int", default=0, min=0, doc="implicit padding on both sides; at most kernel_size // 2"),
]
_POOL1D_IN = [Port("x", ["N", "C", "L"], doc="batch, channels, length")]
_POOL1D_OUT = [Port("y", ["N", "C", "L_out"], dtype="same:x")]
_POOL1D_INFERENCE = (
    "L_out = ({window})//stride+1, torch's window formula with stride defaulting to kernel_size; rounded up "
    "in ceil_mode, where a last window that would start in the right padding is dropped"
)


@op(
    "maxpool1d",
    saves="inputs",
    inner_memory=pool_indices_memory,
    params=[
        *_POOL1D_COMMON,
        Param("dilation", "int", default=1, min=1, doc="spacing between window elements"),
        _CEIL,
    ],
    inputs=_POOL1D_IN,
    outputs=_POOL1D_OUT,
    infer=_pool1d_infer,
    layer="torch.nn.MaxPool1d",
    inference=_POOL1D_INFERENCE.format(window="L+2*padding-dilation*(kernel_size-1)-1"),
    example={"op": "maxpool1d", "kernel_size": 2},
    input_shape_example=["B", 16, 100],
    returns="new",
    aliases={"MaxPooling1D": {}},
    imports={"aten.max_pool1d.default": ImportRow("pool", {"dims": 1})},
)
def maxpool1d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """1-d max pooling over ``[N, C, L]``: the maximum of each window."""
    import torch

    return torch.nn.MaxPool1d(
        p.kernel_size, stride=p.stride, padding=p.padding, dilation=p.dilation, ceil_mode=p.ceil_mode
    )


@op(
    "avgpool1d",
    saves="inputs",
    params=[
        *_POOL1D_COMMON,
        _CEIL,
        Param("count_include_pad", "bool", default=True, doc="count the zero padding in each window's average"),
    ],
    inputs=_POOL1D_IN,
    outputs=_POOL1D_OUT,
    infer=_pool1d_infer,
    layer="torch.nn.AvgPool1d",
    inference=_POOL1D_INFERENCE.format(window="L+2*padding-kernel_size"),
    example={"op": "avgpool1d", "kernel_size": 2},
    input_shape_example=["B", 16, 100],
    returns="new",
    aliases={"AveragePooling1D": {}},
    imports={"aten.avg_pool1d.default": ImportRow("pool", {"dims": 1, "average": True})},
)
def avgpool1d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """1-d average pooling over ``[N, C, L]``: the mean of each window."""
    import torch

    return torch.nn.AvgPool1d(
        p.kernel_size,
        stride=p.stride,
        padding=p.padding,
        ceil_mode=p.ceil_mode,
        count_include_pad=p.count_include_pad,
    )


def _adaptive1d_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    shape = shape_of_rank(inputs[0], 3)
    if shape is None:
        return [TensorType(None, inputs[0].dtype)]
    n, c, length = shape
    if isinstance(length, int) and length < 1:
        raise InferError(f"the input's length is {length}", port="x", expected="length >= 1", actual=length)
    return [TensorType((n, c, p.output_size), inputs[0].dtype)]


@op(
    "adaptive_avgpool1d",
    saves="none",
    params=[Param("output_size", "int", min=1, doc="the output's length")],
    inputs=_POOL1D_IN,
    outputs=[Port("y", ["N", "C", "output_size"], dtype="same:x")],
    infer=_adaptive1d_infer,
    layer="torch.nn.AdaptiveAvgPool1d",
    example={"op": "adaptive_avgpool1d", "output_size": 1},
    input_shape_example=["B", 64, 50],
    returns="new",
    aliases={"GlobalAveragePooling1D": {"output_size": 1}},
    imports={"aten.adaptive_avg_pool1d.default": ImportRow("adaptive", {"dims": 1})},
)
def adaptive_avgpool1d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """1-d average pooling to a fixed output length, whatever the input's length."""
    import torch

    return torch.nn.AdaptiveAvgPool1d(p.output_size)
