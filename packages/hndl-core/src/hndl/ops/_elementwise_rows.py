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
from .._registry import InferError
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
    ),
    Row("abs", "abs", "same", "Absolute value ``|x|``.", bools="refused", aliases={"absolute": {}}, saves="inputs"),
    Row("sign", "sign", "same", "Sign of each element: -1, 0 or 1 (false/true for bool).", saves="none"),
    Row(
        "floor",
        "floor",
        "same",
        "Largest integer not above each element (integers are kept).",
        bools="refused",
        saves="none",
    ),
    Row(
        "ceil",
        "ceil",
        "same",
        "Smallest integer not below each element (integers are kept).",
        bools="refused",
        saves="none",
    ),
    Row(
        "round",
        "round",
        "same",
        "Each element rounded to the nearest integer, halves to even.",
        bools="refused",
        saves="none",
    ),
    Row("exp", "exp", "int_to_float", "Exponential ``e ** x``.", saves="output"),
    Row("log", "log", "int_to_float", "Natural logarithm (``-inf`` at 0, NaN below).", saves="inputs"),
    Row("log1p", "log1p", "int_to_float", "``log(1 + x)``, accurate for small ``x``.", saves="inputs"),
    Row("sqrt", "sqrt", "int_to_float", "Square root (NaN below 0).", saves="output"),
    Row("rsqrt", "rsqrt", "int_to_float", "Reciprocal square root ``1 / sqrt(x)``.", saves="output"),
    Row("reciprocal", "reciprocal", "int_to_float", "Reciprocal ``1 / x``.", saves="output"),
    Row("sin", "sin", "int_to_float", "Sine (radians).", saves="inputs"),
    Row("cos", "cos", "int_to_float", "Cosine (radians).", saves="inputs"),
    Row("erf", "erf", "int_to_float", "The error function.", saves="inputs"),
    Row("logical_not", "logical_not", "bool", "Logical not: true where ``x`` is zero (false).", saves="none"),
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
    ),
    Row(
        "minimum",
        "minimum",
        "promote",
        "Elementwise minimum of two tensors (for a number bound, use clamp).",
        saves="inputs",
    ),
    Row(
        "maximum",
        "maximum",
        "promote",
        "Elementwise maximum of two tensors (for a number bound, use clamp).",
        saves="inputs",
    ),
    Row("eq", "eq", "bool", "``a == b``, elementwise, as bool.", operator="eq", saves="none"),
    Row(
        "ne", "ne", "bool", "``a != b``, elementwise, as bool.", operator="ne", aliases={"not_equal": {}}, saves="none"
    ),
    Row("lt", "lt", "bool", "``a < b``, elementwise, as bool.", operator="lt", aliases={"less": {}}, saves="none"),
    Row(
        "le", "le", "bool", "``a <= b``, elementwise, as bool.", operator="le", aliases={"less_equal": {}}, saves="none"
    ),
    Row("gt", "gt", "bool", "``a > b``, elementwise, as bool.", operator="gt", aliases={"greater": {}}, saves="none"),
    Row(
        "ge",
        "ge",
        "bool",
        "``a >= b``, elementwise, as bool.",
        operator="ge",
        aliases={"greater_equal": {}},
        saves="none",
    ),
    Row("logical_and", "logical_and", "bool", "Logical and of two tensors (nonzero is true), as bool.", saves="none"),
    Row("logical_or", "logical_or", "bool", "Logical or of two tensors (nonzero is true), as bool.", saves="none"),
    Row(
        "logical_xor",
        "logical_xor",
        "bool",
        "Logical exclusive or of two tensors (nonzero is true), as bool.",
        saves="none",
    ),
)


__all__ = ["BINARY", "UNARY", "Row"]
