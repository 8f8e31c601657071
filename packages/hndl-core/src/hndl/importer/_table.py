"""What each traced torch operation becomes in hndl: two tables of rows.

``FUNCTIONS`` maps a traced ATen operation (``aten.relu.default``, as torch.export writes ``F.relu``,
``nn.ReLU`` and ``x.relu()`` alike) to a row: a function of the call :class:`Site` that returns the hndl node
(:class:`Emit`), says the value is its input (:class:`Alias`), or raises :class:`Unsupported` with the reason.
``MODULES`` maps a layer class (by its qualified name) to a row that turns the whole call into one node, for the
layers whose traced operations do not say all they do: a ``BatchNorm2d`` traced in eval mode shows only its
eval-mode arithmetic, not that it updates running statistics in training mode.

A new hndl op is a new row (``"aten.hardswish.default": unary("hardswish")``). ``PENDING`` lists the operations
common models use that no row takes yet, with what would take them, so an import that meets one says what it
waits on.
"""

from __future__ import annotations

from ._layer_rows import MODULES as MODULES
from ._layer_rows import Call as Call
from ._layer_rows import module_row as module_row
from ._rows import (
    _adaptive,
    _addmm,
    _binary,
    _clamp,
    _conv,
    _dropout,
    _elu,
    _embedding,
    _gelu,
    _glu,
    _group_norm,
    _hardtanh,
    _layer_norm,
    _linear,
    _logical,
    _pool,
    _power,
    _roll,
    _rsub,
    _sdpa,
    _times_constant,
    _triangle,
    _where,
    activation,
    unary,
)
from ._rows_shape import (
    _alias,
    _cat,
    _chunk,
    _expand,
    _flatten,
    _mean,
    _pad,
    _permute,
    _reshape,
    _select,
    _slice,
    _softmax,
    _split,
    _swapaxes,
    _t,
    _to,
    _transpose,
    _type_as,
    _upsample,
)
from ._rows_tensors import (
    _accumulating,
    _arange,
    _arg,
    _diff,
    _einsum,
    _full,
    _gather,
    _index,
    _like,
    _new,
    _norm,
    _unbind,
)
from ._site import Alias as Alias
from ._site import Emit as Emit
from ._site import Port as Port
from ._site import Row
from ._site import Site as Site
from ._site import Unsupported as Unsupported

__all__ = [
    "FUNCTIONS",
    "MODULES",
    "PENDING",
    "Alias",
    "Call",
    "Emit",
    "Port",
    "Site",
    "Unsupported",
    "module_row",
    "unary",
]


FUNCTIONS: dict[str, Row] = {
    # activations
    "aten.relu.default": unary("relu"),
    "aten.relu_.default": unary("relu"),
    "aten.sigmoid.default": unary("sigmoid"),
    "aten.sigmoid_.default": unary("sigmoid"),
    "aten.tanh.default": unary("tanh"),
    "aten.tanh_.default": unary("tanh"),
    "aten.silu.default": unary("silu"),
    "aten.silu_.default": unary("silu"),
    "aten.gelu.default": _gelu,
    "aten.gelu_.default": _gelu,
    "aten.softmax.int": _softmax("softmax"),
    "aten._softmax.default": _softmax("softmax"),
    "aten.log_softmax.int": _softmax("log_softmax"),
    "aten._log_softmax.default": _softmax("log_softmax"),
    "aten.hardtanh.default": _hardtanh,
    "aten.hardtanh_.default": _hardtanh,
    "aten.relu6.default": unary("relu6"),
    "aten.relu6_.default": unary("relu6"),
    "aten.hardswish.default": unary("hardswish"),
    "aten.hardswish_.default": unary("hardswish"),
    "aten.hardsigmoid.default": unary("hardsigmoid"),
    "aten.hardsigmoid_.default": unary("hardsigmoid"),
    "aten.mish.default": unary("mish"),
    "aten.mish_.default": unary("mish"),
    "aten.selu.default": unary("selu"),
    "aten.selu_.default": unary("selu"),
    "aten.leaky_relu.default": activation("leaky_relu", negative_slope="negative_slope"),
    "aten.leaky_relu_.default": activation("leaky_relu", negative_slope="negative_slope"),
    "aten.elu.default": _elu,
    "aten.elu_.default": _elu,
    "aten.celu.default": activation("celu", alpha="alpha"),
    "aten.celu_.default": activation("celu", alpha="alpha"),
    "aten.softplus.default": activation("softplus", beta="beta", threshold="threshold"),
    "aten.glu.default": _glu,
    "aten.log_sigmoid.default": unary("logsigmoid"),
    # element-wise math (each ``aten.<name>.default`` and its in-place ``<name>_`` is hndl's op of the name)
    **{
        f"aten.{name}{inplace}.default": unary(name)
        for name in (
            "neg",
            "abs",
            "sign",
            "floor",
            "ceil",
            "exp",
            "log",
            "log1p",
            "sqrt",
            "rsqrt",
            "reciprocal",
            "sin",
            "cos",
            "erf",
        )
        for inplace in ("", "_")
    },
    "aten.round.default": unary("round"),
    "aten.logical_not.default": unary("logical_not"),
    "aten.clamp.default": _clamp("min", "max"),
    "aten.clamp_.default": _clamp("min", "max"),
    "aten.clamp_min.default": _clamp("min"),
    "aten.clamp_max.default": _clamp("max"),
    # arithmetic (a number operand is the op's ``b`` parameter, or ``a`` on the left)
    "aten.add.Tensor": _binary("add"),
    "aten.add_.Tensor": _binary("add"),
    "aten.sub.Tensor": _binary("sub"),
    "aten.sub_.Tensor": _binary("sub"),
    "aten.rsub.Scalar": _rsub,
    "aten.rsub.Tensor": _rsub,
    "aten.mul.Tensor": _binary("mul", _times_constant),
    "aten.mul_.Tensor": _binary("mul", _times_constant),
    "aten.div.Tensor": _binary("div"),
    "aten.div_.Tensor": _binary("div"),
    "aten.pow.Tensor_Scalar": _power,
    "aten.pow.Tensor_Tensor": _power,
    "aten.pow.Scalar": _power,
    "aten.minimum.default": _binary("minimum", numbers=False),
    "aten.maximum.default": _binary("maximum", numbers=False),
    "aten.min.other": _binary("minimum", numbers=False),  # torch.min(a, b): T5's relative position buckets
    "aten.max.other": _binary("maximum", numbers=False),
    "aten.matmul.default": lambda site: Emit("matmul", [site.tensor("self"), site.tensor("other")]),
    # comparisons and logic
    **{
        f"aten.{name}.{kind}": _binary(name)
        for name in ("eq", "ne", "lt", "le", "gt", "ge")
        for kind in ("Tensor", "Scalar")
    },
    **{f"aten.logical_{name}.default": _binary(f"logical_{name}", numbers=False) for name in ("and", "or", "xor")},
    **{
        f"aten.{name}.Tensor": _logical(f"logical_{op}")
        for op in ("and", "or", "xor")
        for name in (f"__{op}__", f"bitwise_{op}")
    },
    "aten.bitwise_not.default": _logical("logical_not"),
    "aten.where.self": _where,
    "aten.where.ScalarSelf": _where,
    "aten.where.ScalarOther": _where,
    "aten.where.Scalar": _where,
    "aten.tril.default": _triangle("tril"),
    "aten.triu.default": _triangle("triu"),
    "aten.roll.default": _roll,
    # attention
    "aten.scaled_dot_product_attention.default": _sdpa,
    "aten.addmm.default": _addmm,
    # layers with weights (their parameters become the node's)
    "aten.linear.default": _linear,
    "aten.conv1d.default": _conv("conv1d", 1),
    "aten.conv2d.default": _conv("conv2d", 2),
    "aten.conv_transpose1d.default": _conv("conv_transpose1d", 1, transposed=True),
    "aten.conv_transpose2d.input": _conv("conv_transpose2d", 2, transposed=True),
    "aten.layer_norm.default": _layer_norm,
    "aten.group_norm.default": _group_norm,
    "aten.embedding.default": _embedding,
    # pooling and resampling
    "aten.max_pool1d.default": _pool("maxpool1d", 1),
    "aten.max_pool2d.default": _pool("maxpool2d", 2),
    "aten.avg_pool1d.default": _pool("avgpool1d", 1, average=True),
    "aten.avg_pool2d.default": _pool("avgpool2d", 2, average=True),
    "aten.adaptive_avg_pool1d.default": _adaptive("adaptive_avgpool1d", 1),
    "aten.adaptive_avg_pool2d.default": _adaptive("adaptive_avgpool2d", 2),
    "aten.upsample_nearest2d.vec": _upsample("nearest", 2),
    "aten.upsample_bilinear2d.vec": _upsample("bilinear", 2),
    "aten.pad.default": _pad,
    "aten.constant_pad_nd.default": _pad,
    # regularisation: identity in eval mode, hndl's dropout in training mode
    "aten.dropout.default": _dropout,
    "aten.dropout_.default": _dropout,
    # shapes
    "aten.view.default": _reshape,
    "aten.reshape.default": _reshape,
    "aten._unsafe_view.default": _reshape,
    "aten.unsqueeze.default": _reshape,
    "aten.squeeze.dim": _reshape,
    "aten.squeeze.dims": _reshape,
    "aten.squeeze.default": _reshape,
    "aten.unflatten.int": _reshape,
    "aten.flatten.using_ints": _flatten,
    "aten.permute.default": _permute,
    "aten.transpose.int": _transpose,
    "aten.swapaxes.default": _swapaxes,
    "aten.swapdims.default": _swapaxes,
    "aten.t.default": _t,
    "aten.expand.default": _expand,
    "aten.cat.default": _cat,
    "aten.concat.default": _cat,
    "aten.chunk.default": _chunk,
    "aten.split.Tensor": _split,
    "aten.split_with_sizes.default": _split,
    "aten.select.int": _select,
    "aten.slice.Tensor": _slice,
    "aten.mean.dim": _mean,
    "aten.mean.default": _mean,
    # the same values: copies, layout changes, conversions to what the value already is
    "aten.contiguous.default": _alias,
    "aten.clone.default": _alias,
    "aten.alias.default": _alias,
    "aten.detach.default": _alias,
    "aten.lift_fresh_copy.default": _alias,
    # conversions: the value itself at its own dtype, else ``cast``
    "aten.to.dtype": _to,
    "aten.to.dtype_layout": _to,
    "aten.to.device": _to,
    "aten._to_copy.default": _to,
    "aten.type_as.default": _type_as,
    # reductions and scans (issue 37)
    "aten.sum.dim_IntList": _accumulating("sum"),
    "aten.sum.default": _accumulating("sum"),
    "aten.cumsum.default": _accumulating("cumsum"),
    "aten.linalg_vector_norm.default": _norm,
    "aten.argmax.default": _arg("argmax"),
    "aten.argmin.default": _arg("argmin"),
    "aten.diff.default": _diff,
    # picking by integer tensors, taking apart, contracting
    "aten.gather.default": _gather,
    "aten.index.Tensor": _index,
    "aten.unbind.int": _unbind,
    "aten.einsum.default": _einsum,
    # tensors made at the call's sizes (a fixed size folds at import instead)
    "aten.arange.default": _arange,
    "aten.arange.start": _arange,
    "aten.arange.start_step": _arange,
    "aten.zeros_like.default": _like("zeros_like"),
    "aten.ones_like.default": _like("ones_like"),
    "aten.full_like.default": _like("full_like"),
    "aten.new_zeros.default": _new("new_zeros"),
    "aten.new_ones.default": _new("new_ones"),
    "aten.new_full.default": _new("new_full", "fill_value"),
    "aten.zeros.default": _full(0.0),
    "aten.ones.default": _full(1.0),
    "aten.full.default": _full(None),
}

#: Traced operations common models use that no row takes yet -> what would take them. Each hndl op of issues 21
#: and 22 that these models need has its row above; what is left has no hndl op, or an op whose meaning differs.
PENDING: dict[str, str] = {
    "aten.cumprod.default": "a cumprod op",
}
