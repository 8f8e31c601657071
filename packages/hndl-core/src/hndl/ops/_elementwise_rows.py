"""The element-wise families' rows: one :class:`Row` per op of :data:`UNARY` (functions of one tensor) and
:data:`BINARY` (arithmetic, comparisons and logic of two operands).

A row says what differs between two ops of a family: the torch function that computes it, its dtype behaviour
(a name in :data:`~hndl.ops._common.DTYPE_RULES`), whether it takes bool tensors, the Python operator that
computes it when an operand is a number, its docs. :mod:`hndl.ops._elementwise` turns each row into a registered
op, so adding an op is adding a row here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._contracts import INT_DTYPES
from .._registry import ImportRow, InferError
from ._common import Operand

# --- the families' rows -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One element-wise op.

    Attributes:
        name: the op's name.
        torch: the function in torch's namespace that computes it on tensors (``"exp"`` is ``torch.exp``).
        dtype: its dtype behaviour, a key of :data:`~hndl.ops._common.DTYPE_RULES`.
        doc: the op's documentation; its first line is the summary.
        operator: the function of Python's :mod:`operator` module that computes it when an operand is a number
            (``"sub"``: ``1 - x`` is ``operator.sub(1, x)``, what a hand-written ``1 - x`` runs); ``None`` for an
            op torch runs on tensors only.
        bools: ``"ok"``, ``"refused"`` (torch refuses a bool operand: ``-mask``) or ``"result"`` (torch
            refuses only when the result would be bool: ``pow`` of two bool tensors).
        bool_hint: the hint for a refused bool operand.
        layer: the ``hndl.torch.layers`` class for tensor operands when it is not the family's (``Add``, whose
            forward the fast path writes out and may run in place).
        aliases: other libraries' names for it (:attr:`hndl.OpDef.aliases`).
        check: a refusal torch makes on the operands' values, not their dtypes (an integer to a negative
            integer power), raising :class:`InferError`.
        saves: what its backward keeps (:attr:`hndl.OpDef.saves`): ``none`` where the gradient needs only the
            output's shape or a constant (``neg``, a comparison), ``inputs`` or ``output`` as torch's derivative
            reads them (``sin`` its input, ``exp`` its output).
        passes_gradient: its backward hands the gradient on as it is (:attr:`hndl.OpDef.passes_gradient`).
        imports: the traced ATen operations that import as it (:attr:`hndl.OpDef.imports`): ``binary`` reads a
            number operand as its ``a`` or ``b``, ``logical`` takes torch's bitwise operations of bool tensors.
    """

    name: str
    torch: str
    dtype: str
    doc: str
    operator: str | None = None
    bools: str = "ok"
    bool_hint: str | None = None
    layer: str = ""
    aliases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    check: Callable[[Sequence[tuple[str, Operand]]], None] | None = None
    saves: str = "unknown"
    passes_gradient: bool = False
    imports: Sequence[str] | Mapping[str, ImportRow | str] = ()


def _integer_power(operands: Sequence[tuple[str, Operand]]) -> None:
    """torch refuses an integer (or bool) tensor to a negative integer power: the result would not be one."""
    (_, base), (_, exponent) = operands
    if isinstance(base, str) and base in (*INT_DTYPES, "int", "bool") and isinstance(exponent, int) and exponent < 0:
        raise InferError(
            f"an integer tensor to a negative integer power ({exponent}) is not an integer (torch.pow refuses it)",
            code="E_PARAM",
            param="b",
            expected="an exponent >= 0, or a float exponent",
            actual=exponent,
            hint=f"write b: {float(exponent)} for a float result, or cast the base to a floating dtype first",
        )


#: The importer's row for an op of two tensors only (``minimum``: torch.minimum takes no number).
_TENSORS = ImportRow("binary", {"numbers": False})

_MASK_HINT = "for a mask, use logical_not (not), logical_xor (differs) or cast it to an integer dtype first"

#: Functions of one tensor.
UNARY: tuple[Row, ...] = (
    Row(
        "neg",
        "neg",
        "same",
        "Negation ``-x``.",
        bools="refused",
        bool_hint=_MASK_HINT,
        aliases={"negative": {}},
        saves="none",
        imports=("aten.neg.default", "aten.neg_.default"),
    ),
    Row(
        "abs",
        "abs",
        "same",
        "Absolute value ``|x|``.",
        bools="refused",
        aliases={"absolute": {}},
        saves="inputs",
        imports=("aten.abs.default", "aten.abs_.default"),
    ),
    Row(
        "sign",
        "sign",
        "same",
        "Sign of each element: -1, 0 or 1 (false/true for bool).",
        saves="none",
        imports=("aten.sign.default", "aten.sign_.default"),
    ),
    Row(
        "floor",
        "floor",
        "same",
        "Largest integer not above each element (integers are kept).",
        bools="refused",
        saves="none",
        imports=("aten.floor.default", "aten.floor_.default"),
    ),
    Row(
        "ceil",
        "ceil",
        "same",
        "Smallest integer not below each element (integers are kept).",
        bools="refused",
        saves="none",
        imports=("aten.ceil.default", "aten.ceil_.default"),
    ),
    Row(
        "round",
        "round",
        "same",
        "Each element rounded to the nearest integer, halves to even.",
        bools="refused",
        saves="none",
        imports=("aten.round.default",),
    ),
    Row(
        "exp",
        "exp",
        "int_to_float",
        "Exponential ``e ** x``.",
        saves="output",
        imports=("aten.exp.default", "aten.exp_.default"),
    ),
    Row(
        "log",
        "log",
        "int_to_float",
        "Natural logarithm (``-inf`` at 0, NaN below).",
        saves="inputs",
        imports=("aten.log.default", "aten.log_.default"),
    ),
    Row(
        "log1p",
        "log1p",
        "int_to_float",
        "``log(1 + x)``, accurate for small ``x``.",
        saves="inputs",
        imports=("aten.log1p.default", "aten.log1p_.default"),
    ),
    Row(
        "sqrt",
        "sqrt",
        "int_to_float",
        "Square root (NaN below 0).",
        saves="output",
        imports=("aten.sqrt.default", "aten.sqrt_.default"),
    ),
    Row(
        "rsqrt",
        "rsqrt",
        "int_to_float",
        "Reciprocal square root ``1 / sqrt(x)``.",
        saves="output",
        imports=("aten.rsqrt.default", "aten.rsqrt_.default"),
    ),
    Row(
        "reciprocal",
        "reciprocal",
        "int_to_float",
        "Reciprocal ``1 / x``.",
        saves="output",
        imports=("aten.reciprocal.default", "aten.reciprocal_.default"),
    ),
    Row(
        "sin",
        "sin",
        "int_to_float",
        "Sine (radians).",
        saves="inputs",
        imports=("aten.sin.default", "aten.sin_.default"),
    ),
    Row(
        "cos",
        "cos",
        "int_to_float",
        "Cosine (radians).",
        saves="inputs",
        imports=("aten.cos.default", "aten.cos_.default"),
    ),
    Row(
        "erf",
        "erf",
        "int_to_float",
        "The error function.",
        saves="inputs",
        imports=("aten.erf.default", "aten.erf_.default"),
    ),
    Row(
        "logical_not",
        "logical_not",
        "bool",
        "Logical not: true where ``x`` is zero (false).",
        saves="none",
        imports={"aten.logical_not.default": "unary", "aten.bitwise_not.default": "logical"},
    ),
)

#: Functions of two operands, tensors or (with ``operator``) a tensor and a number.
BINARY: tuple[Row, ...] = (
    Row(
        "add",
        "add",
        "promote",
        "Elementwise sum ``a + b`` with broadcasting (a residual connection: ``in: [x, block]``).",
        operator="add",
        layer="Add",
        saves="none",
        passes_gradient=True,
        imports={"aten.add.Tensor": "binary", "aten.add_.Tensor": "binary"},
    ),
    Row(
        "sub",
        "sub",
        "promote",
        "Elementwise difference ``a - b`` with broadcasting.",
        operator="sub",
        bools="refused",
        bool_hint=_MASK_HINT,
        aliases={"subtract": {}},
        saves="none",
        imports={
            "aten.sub.Tensor": "binary",
            "aten.sub_.Tensor": "binary",
            "aten.rsub.Scalar": "rsub",
            "aten.rsub.Tensor": "rsub",
        },
    ),
    Row(
        "mul",
        "mul",
        "promote",
        "Elementwise product ``a * b`` with broadcasting (gating: ``in: [x, gate]``; an integer times a "
        "constant: ``{op: mul, in: i, b: 3}``).",
        operator="mul",
        layer="Mul",
        aliases={"multiply": {}},
        saves="inputs",
    ),
    Row(
        "div",
        "div",
        "int_to_float",
        "True division ``a / b`` with broadcasting: integers divide to float32, as in torch.",
        operator="truediv",
        aliases={"divide": {}, "true_divide": {}},
        saves="inputs",
        imports={"aten.div.Tensor": "binary", "aten.div_.Tensor": "binary"},
    ),
    Row(
        "pow",
        "pow",
        "promote",
        "Power ``a ** b`` with broadcasting (``{op: pow, in: x, b: 2}`` squares).",
        operator="pow",
        bools="result",
        aliases={"power": {}},
        check=_integer_power,
        saves="inputs",
        imports=dict.fromkeys(("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar"), "power"),
    ),
    Row(
        "minimum",
        "minimum",
        "promote",
        "Elementwise minimum of two tensors (for a number bound, use clamp).",
        saves="inputs",
        imports=dict.fromkeys(("aten.minimum.default", "aten.min.other"), _TENSORS),
    ),
    Row(
        "maximum",
        "maximum",
        "promote",
        "Elementwise maximum of two tensors (for a number bound, use clamp).",
        saves="inputs",
        imports=dict.fromkeys(("aten.maximum.default", "aten.max.other"), _TENSORS),
    ),
    Row(
        "eq",
        "eq",
        "bool",
        "``a == b``, elementwise, as bool.",
        operator="eq",
        saves="none",
        imports={"aten.eq.Tensor": "binary", "aten.eq.Scalar": "binary"},
    ),
    Row(
        "ne",
        "ne",
        "bool",
        "``a != b``, elementwise, as bool.",
        operator="ne",
        aliases={"not_equal": {}},
        saves="none",
        imports={"aten.ne.Tensor": "binary", "aten.ne.Scalar": "binary"},
    ),
    Row(
        "lt",
        "lt",
        "bool",
        "``a < b``, elementwise, as bool.",
        operator="lt",
        aliases={"less": {}},
        saves="none",
        imports={"aten.lt.Tensor": "binary", "aten.lt.Scalar": "binary"},
    ),
    Row(
        "le",
        "le",
        "bool",
        "``a <= b``, elementwise, as bool.",
        operator="le",
        aliases={"less_equal": {}},
        saves="none",
        imports={"aten.le.Tensor": "binary", "aten.le.Scalar": "binary"},
    ),
    Row(
        "gt",
        "gt",
        "bool",
        "``a > b``, elementwise, as bool.",
        operator="gt",
        aliases={"greater": {}},
        saves="none",
        imports={"aten.gt.Tensor": "binary", "aten.gt.Scalar": "binary"},
    ),
    Row(
        "ge",
        "ge",
        "bool",
        "``a >= b``, elementwise, as bool.",
        operator="ge",
        aliases={"greater_equal": {}},
        saves="none",
        imports={"aten.ge.Tensor": "binary", "aten.ge.Scalar": "binary"},
    ),
    Row(
        "logical_and",
        "logical_and",
        "bool",
        "Logical and of two tensors (nonzero is true), as bool.",
        saves="none",
        imports={
            "aten.logical_and.default": _TENSORS,
            "aten.__and__.Tensor": "logical",
            "aten.bitwise_and.Tensor": "logical",
        },
    ),
    Row(
        "logical_or",
        "logical_or",
        "bool",
        "Logical or of two tensors (nonzero is true), as bool.",
        saves="none",
        imports={
            "aten.logical_or.default": _TENSORS,
            "aten.__or__.Tensor": "logical",
            "aten.bitwise_or.Tensor": "logical",
        },
    ),
    Row(
        "logical_xor",
        "logical_xor",
        "bool",
        "Logical exclusive or of two tensors (nonzero is true), as bool.",
        saves="none",
        imports={
            "aten.logical_xor.default": _TENSORS,
            "aten.__xor__.Tensor": "logical",
            "aten.bitwise_xor.Tensor": "logical",
        },
    ),
)


__all__ = ["BINARY", "UNARY", "Row"]
