"""Normalisation layers: batchnorm1d, batchnorm2d, layernorm, layernorm2d, rmsnorm, groupnorm, grn, grn2d."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import format_dim
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import open_at, provably_different

_EPS = Param("eps", "float", default=1e-5, min=0, doc="added to the variance for numerical stability")


def _bn_params() -> list[Param]:
    return [
        Param("num_features", "int", min=1, inferred=True, doc="number of channels (inferred from dim 1)"),
        _EPS,
        Param(
            "momentum",
            "float",
            default=0.1,
            min=0,
            max=1,
            nullable=True,
            doc="weight of the newest batch in the running statistics (null: a cumulative average)",
        ),
        Param("affine", "bool", default=True, doc="learn a per-channel scale and shift"),
        Param("track_running_stats", "bool", default=True, doc="keep running statistics for eval mode"),
    ]


def _check_bn_eps(p: Params) -> None:
    if p.eps <= 0:
        # torch's batch_norm refuses eps 0 in training mode, so the model would fail on its first call.
        raise InferError(
            f"eps must be > 0 for batch normalisation, got {p.eps}",
            code="E_PARAM",
            param="eps",
            expected="> 0",
            actual=p.eps,
            hint="torch refuses eps 0 in training; the default is 1e-5",
        )


def _bn2d_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    _check_bn_eps(p)
    return [inputs[0]]


def _bn1d_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    _check_bn_eps(p)
    t = inputs[0]
    if t.shape is not None and open_at(t.shape) is None and len(t.shape) not in (2, 3):
        raise InferError(
            f"batchnorm1d takes a rank-2 or rank-3 input, got rank {len(t.shape)} {format_shape(t.shape)}",
            port="x",
            expected="[N, C] or [N, C, L]",
            actual=format_shape(t.shape),
            hint="use batchnorm2d for [N, C, H, W]" if len(t.shape) == 4 else None,
        )
    return [t]


def _bn_build(cls_name: str, p: Params) -> Any:
    import torch

    cls = getattr(torch.nn, cls_name)
    return cls(
        p.num_features,
        eps=p.eps,
        momentum=p.momentum,
        affine=p.affine,
        track_running_stats=p.track_running_stats,
    )


@op(
    "batchnorm1d",
    saves="inputs",
    params=_bn_params(),
    inputs=[Port("x", ["N", "num_features", "*rest"], doc="[N, C] or [N, C, L]")],
    outputs=[Port("y", ["N", "num_features", "*rest"], dtype="same:x")],
    infer=_bn1d_infer,
    layer="torch.nn.BatchNorm1d",
    inference="the input has rank 2 ([N, C]) or 3 ([N, C, L]); eps must be > 0",
    example={"op": "batchnorm1d"},
    input_shape_example=["B", 64],
    returns="new",
)
def batchnorm1d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Batch normalisation over ``[N, C]`` or ``[N, C, L]``, per channel.

    ``num_features`` follows from the input's channel dim (dim 1).
    """
    return _bn_build("BatchNorm1d", p)


@op(
    "batchnorm2d",
    saves="inputs",
    params=_bn_params(),
    inputs=[Port("x", ["N", "num_features", "H", "W"], doc="batch, channels, height, width")],
    outputs=[Port("y", ["N", "num_features", "H", "W"], dtype="same:x")],
    infer=_bn2d_infer,
    layer="torch.nn.BatchNorm2d",
    inference="eps must be > 0",
    example={"op": "batchnorm2d"},
    input_shape_example=["B", 64, 32, 32],
    returns="new",
)
def batchnorm2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Batch normalisation over ``[N, C, H, W]``, per channel.

    ``num_features`` follows from the input's channel dim (dim 1).
    """
    return _bn_build("BatchNorm2d", p)


def _trailing_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    """Check that the input ends with ``normalized_shape``; the output has the input's type."""
    t = inputs[0]
    ns = tuple(p.normalized_shape)
    if not ns:
        raise InferError(
            "normalized_shape is empty",
            code="E_PARAM",
            param="normalized_shape",
            expected="at least one dim",
            actual="[]",
            hint="omit it to normalise over the last dim",
        )
    if t.shape is None:
        return [t]
    k = open_at(t.shape)
    tail = t.shape if k is None else t.shape[k + 1 :]
    if k is None and len(tail) < len(ns):
        raise InferError(
            f"normalized_shape {list(ns)} has {len(ns)} dims, the input only {len(tail)}",
            port="x",
            expected=f"[..., {', '.join(map(str, ns))}]",
            actual=format_shape(t.shape),
        )
    got = tail[len(tail) - min(len(ns), len(tail)) :]
    if any(provably_different(a, b) for a, b in zip(reversed(ns), reversed(got))):
        raise InferError(
            f"the input's last {len(ns)} dims do not match normalized_shape {list(ns)}",
            port="x",
            expected=f"[..., {', '.join(map(str, ns))}]",
            actual=format_shape(t.shape),
            hint="normalized_shape names the input's trailing dims; omit it to normalise over the last dim",
        )
    return [t]


_NORMALIZED_SHAPE = Param(
    "normalized_shape",
    "ints",
    min=1,
    inferred=True,
    doc="the trailing dims to normalise over (inferred: the input's last dim)",
)
_TRAILING_INFERENCE = "the input must end with normalized_shape"


@op(
    "layernorm",
    saves="inputs",
    params=[
        _NORMALIZED_SHAPE,
        _EPS,
        Param("elementwise_affine", "bool", default=True, doc="learn a per-element scale (and shift)"),
        Param("bias", "bool", default=True, doc="learn the shift too (with elementwise_affine)"),
    ],
    inputs=[Port("x", ["*batch", "normalized_shape"], doc="normalised over its trailing dims")],
    outputs=[Port("y", ["*batch", "normalized_shape"], dtype="same:x")],
    infer=_trailing_infer,
    layer="torch.nn.LayerNorm",
    inference=_TRAILING_INFERENCE,
    example={"op": "layernorm"},
    input_shape_example=["B", "T", 768],
    returns="new",
    aliases={"LayerNormalization": {}},
    imports={"aten.layer_norm.default": "layer_norm"},
)
def layernorm(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Layer normalisation: zero mean and unit variance over the trailing dims, then a learned affine map.

    ``normalized_shape`` defaults to the input's last dim.
    """
    import torch

    return torch.nn.LayerNorm(list(p.normalized_shape), eps=p.eps, elementwise_affine=p.elementwise_affine, bias=p.bias)


@op(
    "layernorm2d",
    saves="inputs",
    params=[
        Param("num_channels", "int", min=1, inferred=True, doc="number of channels (inferred from dim 1)"),
        _EPS,
        Param("elementwise_affine", "bool", default=True, doc="learn a per-channel scale (and shift)"),
        Param("bias", "bool", default=True, doc="learn the shift too (with elementwise_affine)"),
    ],
    inputs=[Port("x", ["N", "num_channels", "H", "W"], doc="batch, channels, height, width")],
    outputs=[Port("y", ["N", "num_channels", "H", "W"], dtype="same:x")],
    layer="hndl.torch.layers.LayerNorm2d",
    example={"op": "layernorm2d", "eps": 1e-6},
    input_shape_example=["B", 96, 56, 56],
    returns="new",
    aliases={"ChannelsFirstLayerNorm": {}, "LayerNormChannelsFirst": {}},
    error_example={"inputs": [["B", 56, 96]]},
)
def layernorm2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Layer normalisation of ``[N, C, H, W]`` over the channels, at every position: ConvNeXt's ``LayerNorm2d``.

    Computed as torchvision and timm do (channels moved last, ``layer_norm``, moved back), so results match
    theirs bit for bit, and its ``state_dict`` holds theirs (``weight``, ``bias``, ``[C]``). Unlike ``layernorm``,
    which normalises over the *last* dim (the width of an NCHW map), it normalises dim 1.
    """
    return layer_of("layernorm2d")(p.num_channels, eps=p.eps, elementwise_affine=p.elementwise_affine, bias=p.bias)


def _rmsnorm_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.weight_offset != 0 and not p.elementwise_affine:
        raise InferError(
            f"weight_offset {p.weight_offset} offsets a learned scale, but elementwise_affine is false",
            code="E_PARAM",
            param="weight_offset",
            expected="elementwise_affine: true, or weight_offset: 0",
            actual=p.weight_offset,
            hint="Gemma's (1 + weight) is weight_offset: 1.0 with the default elementwise_affine: true",
        )
    return _trailing_infer(p, inputs)


@op(
    "rmsnorm",
    saves="inputs",
    params=[
        _NORMALIZED_SHAPE,
        Param(
            "eps",
            "float",
            default=None,
            nullable=True,
            min=0,
            doc="added to the mean square for stability (null: the dtype's machine epsilon)",
        ),
        Param("elementwise_affine", "bool", default=True, doc="learn a per-element scale"),
        Param(
            "weight_offset",
            "float",
            default=0.0,
            doc="added to the learned scale: 1.0 for Gemma's (1 + weight), computed as GemmaRMSNorm computes it",
        ),
    ],
    inputs=[Port("x", ["*batch", "normalized_shape"], doc="normalised over its trailing dims")],
    outputs=[Port("y", ["*batch", "normalized_shape"], dtype="same:x")],
    infer=_rmsnorm_infer,
    layer=("torch.nn.RMSNorm", "hndl.torch.layers.OffsetRMSNorm"),
    inference=_TRAILING_INFERENCE + "; a weight_offset needs elementwise_affine",
    example={"op": "rmsnorm", "eps": 1e-6},
    input_shape_example=["B", "T", 4096],
    returns="new",
    aliases={"GemmaRMSNorm": {"weight_offset": 1.0}},
    error_example={"params": {"elementwise_affine": False, "weight_offset": 1.0}, "inputs": [["B", "T", 64]]},
)
def rmsnorm(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Root-mean-square normalisation over the trailing dims, then a learned scale.

    ``normalized_shape`` defaults to the input's last dim. With ``weight_offset`` 0 (the default) it is
    ``torch.nn.RMSNorm``. With a ``weight_offset`` the scale is ``weight_offset + weight``, computed as
    transformers' ``GemmaRMSNorm`` computes it (``weight_offset: 1.0``), so results equal Gemma's bit for bit:
    in float32 (float64 stays float64), scaled before the cast back to the input's dtype. The ``weight`` is then
    stored as Gemma's checkpoints store it, without the offset, and starts at ``1 - weight_offset`` (a scale of
    1).
    """
    import torch

    if p.weight_offset != 0:
        from ..torch.layers import OffsetRMSNorm

        return OffsetRMSNorm(p.normalized_shape, p.eps, p.weight_offset)
    return torch.nn.RMSNorm(list(p.normalized_shape), eps=p.eps, elementwise_affine=p.elementwise_affine)


def _groupnorm_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.num_channels % p.num_groups:
        raise InferError(
            f"num_groups={p.num_groups} does not divide the {p.num_channels} channels",
            port="x",
            expected=f"channels divisible by num_groups ({p.num_groups})",
            actual=format_dim(p.num_channels),
            hint="choose num_groups to divide the channel count (dim 1)",
        )
    return [inputs[0]]


@op(
    "groupnorm",
    saves="inputs",
    params=[
        Param("num_groups", "int", min=1, doc="number of channel groups; must divide the channels"),
        Param("num_channels", "int", min=1, inferred=True, doc="number of channels (inferred from dim 1)"),
        _EPS,
        Param("affine", "bool", default=True, doc="learn a per-channel scale and shift"),
    ],
    inputs=[Port("x", ["N", "num_channels", "*rest"], doc="batch, channels, any further dims")],
    outputs=[Port("y", ["N", "num_channels", "*rest"], dtype="same:x")],
    infer=_groupnorm_infer,
    layer="torch.nn.GroupNorm",
    inference="num_groups must divide the channels (dim 1)",
    example={"op": "groupnorm", "num_groups": 32},
    input_shape_example=["B", 256, 16, 16],
    returns="new",
    imports={"aten.group_norm.default": "group_norm"},
)
def groupnorm(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Group normalisation: channels split into ``num_groups`` groups, each normalised on its own.

    Each group is normalised over its channels and all remaining dims.

    ``num_channels`` follows from the input's channel dim (dim 1).
    """
    import torch

    return torch.nn.GroupNorm(p.num_groups, p.num_channels, eps=p.eps, affine=p.affine)


def _grn_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.eps <= 0:
        # The channels' mean norm of an all-zero map is 0: without eps the layer divides by it.
        raise InferError(
            f"eps must be > 0 for global response normalisation, got {p.eps}",
            code="E_PARAM",
            param="eps",
            expected="> 0",
            actual=p.eps,
            hint="it is added to the mean of the channels' norms before dividing; timm's default is 1e-6",
        )
    return [inputs[0]]


def _grn_params() -> list[Param]:
    return [
        Param("num_channels", "int", min=1, inferred=True, doc="number of channels (inferred from the input)"),
        Param("eps", "float", default=1e-6, doc="added to the mean of the channels' norms before dividing"),
    ]


@op(
    "grn",
    saves="inputs",
    params=_grn_params(),
    inputs=[Port("x", ["N", "H", "W", "num_channels"], doc="batch, height, width, channels (channels last)")],
    outputs=[Port("y", ["N", "H", "W", "num_channels"], dtype="same:x")],
    infer=_grn_infer,
    layer="hndl.torch.layers.GlobalResponseNorm",
    inference="eps must be > 0",
    example={"op": "grn"},
    input_shape_example=["B", 56, 56, 384],
    returns="new",
    aliases={"GlobalResponseNorm": {}, "ConvNextV2GRN": {}},
    error_example={"inputs": [["B", 384, 56]]},
)
def grn(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Global response normalisation of a channels-last ``[N, H, W, C]`` map: ConvNeXt-V2's GRN.

    Each channel's L2 norm over the spatial dims, divided by the mean of those norms over the channels (plus
    ``eps``), gives ``n``; the output is ``x + bias + weight * (x * n)``. Computed as timm's
    ``GlobalResponseNorm`` computes it, so results equal timm's bit for bit. Its ``state_dict`` holds timm's
    ``weight`` and ``bias`` (``[C]``, starting at 0: the layer starts as the identity); transformers'
    ``ConvNextV2GRN`` holds them as ``[1, 1, 1, C]``, which load with the ``flatten`` layout.
    """
    return layer_of("grn")(p.num_channels, eps=p.eps, channels_last=True)


@op(
    "grn2d",
    saves="inputs",
    params=_grn_params(),
    inputs=[Port("x", ["N", "num_channels", "H", "W"], doc="batch, channels, height, width")],
    outputs=[Port("y", ["N", "num_channels", "H", "W"], dtype="same:x")],
    infer=_grn_infer,
    layer="hndl.torch.layers.GlobalResponseNorm",
    inference="eps must be > 0",
    example={"op": "grn2d"},
    input_shape_example=["B", 384, 56, 56],
    returns="new",
    error_example={"params": {"eps": 0.0}, "inputs": [["B", 384, 56, 56]]},
)
def grn2d(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Global response normalisation of ``[N, C, H, W]``: ``grn`` for channels-first maps (timm's ConvNeXt-V2
    with ``conv_mlp``, atto to nano).

    Each channel's L2 norm over the spatial dims, divided by the mean of those norms over the channels (plus
    ``eps``), gives ``n``; the output is ``x + bias + weight * (x * n)``. Computed as timm's
    ``GlobalResponseNorm`` computes it, so results equal timm's bit for bit. Its ``state_dict`` holds timm's
    ``weight`` and ``bias`` (``[C]``, starting at 0: the layer starts as the identity); transformers'
    ``ConvNextV2GRN`` holds them as ``[1, 1, 1, C]``, which load with the ``flatten`` layout.
    """
    return layer_of("grn2d")(p.num_channels, eps=p.eps, channels_last=False)
