"""Activations, declared as rows: each builds the ``torch.nn`` class of its name with torch's parameters, so a
layer's settings, ``state_dict`` (``prelu``'s ``weight``) and results are torch's own.

Two build hndl's layers instead, for transformers' formulas written out (their results differ from torch's
kernels in the last place, and a model is held to its reference bit for bit): ``gelu`` with ``approximate:
tanh_formula`` (``gelu_new``) and ``quick_gelu``.

A row holds the op's name, the ``torch.nn`` class, the parameters the class takes (with torch's names and
defaults, ``inplace`` left out: the fast path decides what may run in place), the docs and, where the class
constrains its input or parameters beyond "a floating tensor, any shape", the rule that checks it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import dim_floordiv, format_dim
from .._layer_copies import make_layer
from .._op_imports import layer_class
from .._registry import ImportRow, InferError, Param, Params, Port, layer_of, op
from ._common import open_at, open_index, provably_different

InferFn = Callable[[Params, Sequence[TensorType]], list[TensorType]]


@dataclass(frozen=True)
class Activation:
    """One activation op.

    Attributes:
        name: the op's name.
        cls: the ``torch.nn`` class it builds, with the op's parameters as keyword arguments.
        doc: the op's documentation; its first line is the summary.
        params: the class's parameters (torch's names and defaults), ``inplace`` left out.
        example: the docs example's parameters.
        infer: a shape rule for classes that change the shape or constrain it (``glu``, ``prelu``); the rest
            keep the input's type.
        inference: the rule in words, for the docs.
        error_example: a node the op refuses (:attr:`hndl.OpDef.error_example`); the default is an integer
            input.
        aliases: other libraries' names for it (:attr:`hndl.OpDef.aliases`).
        saves: what its backward keeps (:attr:`hndl.OpDef.saves`): its input for most (the derivative of
            ``gelu(x)`` is a function of ``x``), its output for those whose derivative is one of the output
            (``relu``, ``sigmoid``, ``tanh``, ``softmax``, ``log_softmax``).
        variants: parameter values that build an hndl layer (taking no arguments) instead of torch's class,
            ``{(parameter, value): "hndl.torch.layers.Class"}``: ``gelu``'s ``approximate: tanh_formula`` is
            transformers' formula written out, which torch's class does not compute bit for bit.
        imports: the traced ATen operations that import as this op (:attr:`hndl.OpDef.imports`).
    """

    name: str
    cls: str
    doc: str
    params: tuple[Param, ...] = ()
    example: Mapping[str, Any] = field(default_factory=dict)
    infer: InferFn | None = None
    inference: str = ""
    error_example: Mapping[str, Any] | None = None
    aliases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    saves: str = "inputs"
    variants: Mapping[tuple[str, Any], str] = field(default_factory=dict)
    imports: Sequence[str] | Mapping[str, ImportRow | str] = ()

    @property
    def layers(self) -> tuple[str, ...]:
        """Every class the row may build, torch's first."""
        return (f"torch.nn.{self.cls}", *self.variants.values())


_INT_INPUT = {"inputs": [{"shape": ["B", 8], "dtype": "int64"}]}


def _hardtanh_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if not p.max_val > p.min_val:
        raise InferError(
            f"max_val ({p.max_val}) must be greater than min_val ({p.min_val})",
            code="E_PARAM",
            param="max_val",
            expected=f"> {p.min_val}",
            actual=p.max_val,
        )
    return [inputs[0]]


def _celu_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.alpha == 0:
        raise InferError(
            "alpha cannot be 0 for celu (it divides by alpha)", code="E_PARAM", param="alpha", expected="!= 0", actual=0
        )
    return [inputs[0]]


def _along_dim_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is not None:
        open_index(t.shape, p.dim)  # validates the dim whenever the rank allows it
    return [t]


def _glu_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if t.shape is None:
        return [t]
    if open_at(t.shape) is None and len(t.shape) == 0:
        raise InferError("glu needs a dim to halve, got a 0-d tensor", port="x", expected="rank >= 1", actual="[]")
    index = open_index(t.shape, p.dim)
    if index is None:
        return [TensorType(None, t.dtype)]
    size = t.shape[index]
    if isinstance(size, int) and size % 2:
        raise InferError(
            f"glu halves dim {p.dim}, which has the odd size {size}",
            port="x",
            expected=f"an even size at dim {p.dim}",
            actual=format_shape(t.shape),
            hint="glu splits that dim into a value half and a gate half: its size must be even",
        )
    return [TensorType((*t.shape[:index], dim_floordiv(size, 2), *t.shape[index + 1 :]), t.dtype)]


def _prelu_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    t = inputs[0]
    if p.num_parameters == 1 or t.shape is None:
        return [t]
    if open_at(t.shape) is None and len(t.shape) < 2:
        raise InferError(
            f"prelu with num_parameters={p.num_parameters} learns one slope per channel (dim 1), but the input "
            f"has rank {len(t.shape)}",
            port="x",
            expected="rank >= 2: [N, C, ...]",
            actual=format_shape(t.shape),
            hint="use num_parameters: 1 for one shared slope",
        )
    index = open_index(t.shape, 1)
    if index is not None and provably_different(t.shape[index], p.num_parameters):
        raise InferError(
            f"prelu learns {p.num_parameters} slopes, one per channel, but the input has "
            f"{format_dim(t.shape[index])} channels (dim 1)",
            port="x",
            expected=f"dim 1 = {p.num_parameters}",
            actual=format_shape(t.shape),
            hint=f"set num_parameters to the channel count ({format_dim(t.shape[index])}), or 1",
        )
    return [t]


_DIM = Param("dim", "int", default=-1, doc="the dim to normalise over (negative counts from the end)")

ACTIVATIONS: tuple[Activation, ...] = (
    Activation(
        "relu",
        "ReLU",
        "Rectified linear unit, ``max(x, 0)``, elementwise.",
        saves="output",
        imports=("aten.relu.default", "aten.relu_.default"),
    ),
    Activation(
        "relu6",
        "ReLU6",
        "``min(max(x, 0), 6)``, elementwise (MobileNetV2).",
        imports=("aten.relu6.default", "aten.relu6_.default"),
    ),
    Activation(
        "leaky_relu",
        "LeakyReLU",
        "``x`` where positive, ``negative_slope * x`` elsewhere.",
        (Param("negative_slope", "float", default=0.01, doc="the slope for negative inputs"),),
        {"negative_slope": 0.2},
        imports={
            "aten.leaky_relu.default": ImportRow("activation", {"negative_slope": "negative_slope"}),
            "aten.leaky_relu_.default": ImportRow("activation", {"negative_slope": "negative_slope"}),
        },
    ),
    Activation(
        "elu",
        "ELU",
        "Exponential linear unit: ``x`` where positive, ``alpha * (exp(x) - 1)`` elsewhere.",
        (Param("alpha", "float", default=1.0, doc="the value approached for large negative inputs"),),
        imports={"aten.elu.default": "elu", "aten.elu_.default": "elu"},
    ),
    Activation(
        "selu",
        "SELU",
        "Scaled ELU with the self-normalising constants (alpha 1.6733, scale 1.0507).",
        imports=("aten.selu.default", "aten.selu_.default"),
    ),
    Activation(
        "celu",
        "CELU",
        "Continuously differentiable ELU: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``.",
        (Param("alpha", "float", default=1.0, doc="the scale of the negative part; not 0"),),
        infer=_celu_infer,
        inference="alpha must not be 0",
        error_example={"params": {"alpha": 0.0}, "inputs": [["B", 8]]},
        imports={
            "aten.celu.default": ImportRow("activation", {"alpha": "alpha"}),
            "aten.celu_.default": ImportRow("activation", {"alpha": "alpha"}),
        },
    ),
    Activation(
        "gelu",
        "GELU",
        "Gaussian error linear unit, ``x * Phi(x)``, elementwise.",
        (
            Param(
                "approximate",
                "str",
                default="none",
                choices=("none", "tanh", "tanh_formula"),
                doc="'none' for the exact erf form; 'tanh' for torch's tanh approximation (transformers' "
                "gelu_pytorch_tanh); 'tanh_formula' for the same approximation written out as transformers' "
                "gelu_new (NewGELUActivation: GPT-2, Phi), equal to it bit for bit",
            ),
        ),
        {"approximate": "tanh"},
        aliases={
            "gelu_new": {"approximate": "tanh_formula"},
            "gelu_pytorch_tanh": {"approximate": "tanh"},
            "gelu_tanh": {"approximate": "tanh"},
            "GELUTanh": {"approximate": "tanh"},
            "NewGELUActivation": {"approximate": "tanh_formula"},
            "PytorchGELUTanh": {"approximate": "tanh"},
            "GELUActivation": {},
        },
        variants={("approximate", "tanh_formula"): "hndl.torch.layers.GELUTanhFormula"},
        imports={"aten.gelu.default": "gelu", "aten.gelu_.default": "gelu"},
    ),
    Activation(
        "silu",
        "SiLU",
        "Sigmoid linear unit (swish), ``x * sigmoid(x)``, elementwise.",
        aliases={"swish": {}, "SiLUActivation": {}},
        imports=("aten.silu.default", "aten.silu_.default"),
    ),
    Activation(
        "mish",
        "Mish",
        "``x * tanh(softplus(x))``, elementwise.",
        imports=("aten.mish.default", "aten.mish_.default"),
    ),
    Activation(
        "hardswish",
        "Hardswish",
        "``x * relu6(x + 3) / 6``, elementwise (MobileNetV3).",
        imports=("aten.hardswish.default", "aten.hardswish_.default"),
    ),
    Activation(
        "hardsigmoid",
        "Hardsigmoid",
        "``relu6(x + 3) / 6``, a piecewise-linear sigmoid (MobileNetV3's squeeze-and-excitation gate).",
        imports=("aten.hardsigmoid.default", "aten.hardsigmoid_.default"),
    ),
    Activation(
        "hardtanh",
        "Hardtanh",
        "``x`` clipped to ``[min_val, max_val]`` (for any dtype and open bounds, see clamp).",
        (
            Param("min_val", "float", default=-1.0, doc="the lower bound"),
            Param("max_val", "float", default=1.0, doc="the upper bound; above min_val"),
        ),
        {"min_val": -2.0, "max_val": 2.0},
        infer=_hardtanh_infer,
        inference="max_val must be greater than min_val",
        error_example={"params": {"min_val": 1.0, "max_val": 1.0}, "inputs": [["B", 8]]},
    ),
    Activation(
        "softplus",
        "Softplus",
        "``log(1 + exp(beta * x)) / beta``, linear above ``threshold`` (for stability).",
        (
            Param("beta", "float", default=1.0, doc="the sharpness"),
            Param("threshold", "float", default=20.0, doc="above beta * x > threshold, the input is returned"),
        ),
        imports={"aten.softplus.default": ImportRow("activation", {"beta": "beta", "threshold": "threshold"})},
    ),
    Activation("softsign", "Softsign", "``x / (1 + |x|)``, elementwise."),
    Activation(
        "tanh",
        "Tanh",
        "Hyperbolic tangent, elementwise.",
        saves="output",
        imports=("aten.tanh.default", "aten.tanh_.default"),
    ),
    Activation(
        "sigmoid",
        "Sigmoid",
        "Logistic sigmoid, ``1 / (1 + exp(-x))``, elementwise.",
        saves="output",
        imports=("aten.sigmoid.default", "aten.sigmoid_.default"),
    ),
    Activation(
        "logsigmoid", "LogSigmoid", "``log(sigmoid(x))``, computed stably.", imports=("aten.log_sigmoid.default",)
    ),
    Activation(
        "prelu",
        "PReLU",
        "Leaky ReLU with a learned negative slope: one shared, or one per channel (dim 1).\n\nThe slopes are the "
        "layer's ``weight`` (``[num_parameters]``), as in ``torch.nn.PReLU``.",
        (
            Param("num_parameters", "int", default=1, min=1, doc="1, or the input's channel count (dim 1)"),
            Param("init", "float", default=0.25, doc="the slopes' initial value"),
        ),
        {"num_parameters": 1},
        infer=_prelu_infer,
        inference="num_parameters is 1 or the input's dim 1",
        error_example={"params": {"num_parameters": 3}, "inputs": [["B", 4, 8]]},
    ),
    Activation(
        "glu",
        "GLU",
        "Gated linear unit: ``x`` split in two halves along ``dim``, the first times the sigmoid of the second.",
        (Param("dim", "int", default=-1, doc="the dim to halve (negative counts from the end)"),),
        infer=_glu_infer,
        inference="dim within the input's rank, its size even; the output has half of it",
        error_example={"inputs": [["B", 7]]},
        imports={"aten.glu.default": "glu"},
    ),
    Activation(
        "softmax",
        "Softmax",
        "Softmax along ``dim``: exponentials normalised to sum to one.",
        (_DIM,),
        {"dim": -1},
        infer=_along_dim_infer,
        inference="dim must be within the input's rank",
        saves="output",
        error_example={"params": {"dim": 2}, "inputs": [["B", 8]]},
        imports={"aten.softmax.int": "softmax", "aten._softmax.default": "softmax"},
    ),
    Activation(
        "log_softmax",
        "LogSoftmax",
        "Logarithm of the softmax along ``dim``, computed stably.",
        (_DIM,),
        {"dim": -1},
        infer=_along_dim_infer,
        inference="dim must be within the input's rank",
        saves="output",
        error_example={"params": {"dim": 2}, "inputs": [["B", 8]]},
        imports={"aten.log_softmax.int": "softmax", "aten._log_softmax.default": "softmax"},
    ),
)


def _register(row: Activation) -> None:
    names = [param.name for param in row.params]  # made once per row, not per built layer

    def build(p: Params, inputs: Sequence[TensorType]) -> Any:
        for (name, value), path in row.variants.items():
            if p[name] == value:
                return make_layer(layer_class(path))
        return make_layer(layer_class(row.layers[0]), **{name: p[name] for name in names})

    build.__doc__ = row.doc
    changes_shape = row.name == "glu"
    op(
        row.name,
        params=list(row.params),
        inputs=[Port("x", ["*shape"])],
        outputs=[Port("y", None if changes_shape else ["*shape"], dtype="same:x")],
        infer=row.infer,
        layer=row.layers if row.variants else row.layers[0],
        saves=row.saves,
        inference=row.inference,
        example={"op": row.name, **row.example},
        returns="new",
        aliases=row.aliases,
        error_example=row.error_example or _INT_INPUT,
        imports=row.imports,
    )(build)


for _row in ACTIVATIONS:
    _register(_row)


@op(
    "quick_gelu",
    saves="inputs",
    params=[],
    inputs=[Port("x", ["*shape"])],
    outputs=[Port("y", ["*shape"], dtype="same:x")],
    layer="hndl.torch.layers.QuickGELU",
    example={"op": "quick_gelu"},
    input_shape_example=["B", "T", 512],
    returns="new",
    aliases={"QuickGELUActivation": {}, "gelu_quick": {}},
    error_example=_INT_INPUT,
)
def quick_gelu(p: Params, inputs: Sequence[TensorType]) -> Any:
    """``x * sigmoid(1.702 * x)``, elementwise: the sigmoid approximation of GELU (CLIP's ``quick_gelu``).

    Computed as transformers' ``QuickGELUActivation`` computes it, so results equal its bit for bit. It is not
    ``gelu``: the two differ by up to about 0.02.
    """
    return layer_of("quick_gelu")()


__all__ = ["ACTIVATIONS", "Activation"]
