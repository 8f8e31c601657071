"""Element-wise math and logic: the families of :mod:`~hndl.ops._elementwise_rows` (unary functions, binary
arithmetic, comparisons and logic) registered from their rows, plus ``where``, ``clamp`` and ``cast``.

One helper per family turns a row into a registered op; the family's inference (broadcasting, dtype promotion,
bool refusal) and its layer classes (``hndl.torch.layers.Unary``, ``Binary``, ``TensorScalar``, ``ScalarTensor``)
are shared, so adding an op is adding a row.

**Numbers as operands.** An operand of a binary op (and either branch of ``where``) may be a number instead of
a tensor: the op's parameter named like the port holds it, and the port then takes no input:
``{op: sub, in: x, b: 1}`` is ``x - 1``, ``{op: sub, in: x, a: 1}`` is ``1 - x``, ``{op: pow, in: x, b: 2}`` is
``x ** 2``. The number promotes as a Python number does in torch (``int8 - 1`` stays int8, ``int64 * 0.5`` is
float32, ``float16 * 2.0`` float16): an integer written ``2`` and a float written ``2.0`` are different
operands. Ops that torch runs on tensors only (``minimum``, ``maximum``, the logical ones) take tensors only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import DTYPES, TensorType
from .._registry import ImportRow, InferError, Param, Params, Port, layer_of, op
from ._common import DTYPE_RULES, Operand, broadcast_shapes
from ._elementwise_rows import BINARY, UNARY, Row

_SHAPE = ["B", "T", 64]

#: The output port's dtype rule each dtype behaviour shows in the reference.
_OUT_RULE = {"same": "same:x", "promote": "any", "int_to_float": "float", "bool": "bool"}


# --- shared inference -------------------------------------------------------------------------------------


def _refuse_bools(row: Row, operands: Sequence[tuple[str, Operand]], result: str) -> None:
    """E_DTYPE where torch refuses bool tensors for ``row``."""
    if row.bools == "refused":
        port = next((name for name, o in operands if o == "bool"), None)
        if port is None:
            return
        message = f"{row.name} does not take a bool tensor (torch.{row.torch} refuses it)"
    elif row.bools == "result" and result == "bool":
        port = next(name for name, o in operands if isinstance(o, str))
        message = f"{row.name} of bool tensors is not defined (torch.{row.torch} refuses it)"
    else:
        return
    raise InferError(
        message,
        code="E_DTYPE",
        port=port,
        expected="a number dtype (integer or floating)",
        actual="bool",
        hint=row.bool_hint or "cast it to an integer or floating dtype first (op cast)",
    )


def _operands(p: Params, names: Sequence[str], inputs: Sequence[TensorType]) -> list[tuple[str, TensorType | Operand]]:
    """Each operand port with its value: the number its parameter holds, else the next input's type."""
    rest = iter(inputs)
    found: list[tuple[str, TensorType | Operand]] = []
    for name in names:
        number = p.get(name)
        found.append((name, next(rest) if number is None else number))
    return found


def _broadcast(tensors: Sequence[tuple[str, TensorType]]) -> Any:
    """The broadcast of the tensors' shapes, each pair checked by name (E_SHAPE naming both)."""
    for i, (na, a) in enumerate(tensors):
        for nb, b in tensors[i + 1 :]:
            broadcast_shapes(a.shape, b.shape, (na, nb))
    shape = tensors[0][1].shape
    for _, t in tensors[1:]:
        shape = broadcast_shapes(shape, t.shape)
    return shape


def _dtype_of(value: TensorType | Operand) -> Operand:
    return value.dtype if isinstance(value, TensorType) else value


def _elementwise_infer(row: Row, names: Sequence[str]) -> Any:
    rule = DTYPE_RULES[row.dtype]

    def infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
        operands = _operands(p, names, inputs)
        tensors = [(n, v) for n, v in operands if isinstance(v, TensorType)]
        if not tensors:
            raise InferError(
                f"{row.name} needs a tensor operand: {' and '.join(names)} are both numbers",
                code="E_PARAM",
                param=names[-1],
                expected="at least one input",
                actual="numbers only",
                hint=f"leave {names[-1]} out and wire its tensor in: in: [...]",
            )
        dtypes = [(n, _dtype_of(v)) for n, v in operands]
        result = rule.result([d for _, d in dtypes])
        _refuse_bools(row, dtypes, result)
        if row.check is not None:
            row.check(dtypes)
        return [TensorType(_broadcast(tensors), result)]

    return infer


# --- registration -----------------------------------------------------------------------------------------


def _documented(build: Any, doc: str) -> Any:
    """``build`` with ``doc`` as its docstring, which :func:`hndl.op` makes the op's documentation."""
    build.__doc__ = doc
    return build


def _register_unary(row: Row) -> None:
    def build(p: Params, inputs: Sequence[TensorType]) -> Any:
        return layer_of(row.name)(f"torch.{row.torch}")

    refused = row.bools == "refused"
    op(
        row.name,
        inputs=[Port("x", ["*shape"], dtype="any")],
        outputs=[Port("y", ["*shape"], dtype=_OUT_RULE[row.dtype])],
        infer=_elementwise_infer(row, ["x"]),
        layer="hndl.torch.layers.Unary",
        saves=row.saves,
        inference=f"dtype: {DTYPE_RULES[row.dtype].doc}"
        + ("; bool tensors are refused, as torch does" if refused else ""),
        example={"op": row.name},
        input_shape_example=_SHAPE,
        returns="new",
        aliases=row.aliases,
        error_example=(
            {"inputs": [{"shape": ["B", 8], "dtype": "bool"}]} if refused else {"inputs": [["B", 8], ["B", 8]]}
        ),
        imports=row.imports,
    )(_documented(build, f"{row.doc}\n\nComputes ``torch.{row.torch}(x)``."))


def _number_param(name: str, what: str, finite: bool = True) -> Param:
    doc = f"a number in place of input {what}" + ("" if finite else " (-inf and inf are allowed)")
    return Param(name, "float", default=None, nullable=True, finite=finite, doc=doc)


def _register_binary(row: Row) -> None:
    scalar = row.operator is not None

    def build(p: Params, inputs: Sequence[TensorType]) -> Any:
        from ..torch import layers

        a, b = p.get("a"), p.get("b")
        if b is not None:
            return layers.TensorScalar(f"operator.{row.operator}", b)
        if a is not None:
            return layers.ScalarTensor(f"operator.{row.operator}", a)
        return getattr(layers, row.layer)() if row.layer else layers.Binary(f"torch.{row.torch}")

    layer = (f"hndl.torch.layers.{row.layer or 'Binary'}",) + (
        ("hndl.torch.layers.TensorScalar", "hndl.torch.layers.ScalarTensor") if scalar else ()
    )
    inference = (
        "shapes broadcast by torch's rules (aligned from the right; each pair of dims equal, or one of them 1); "
        f"dtype: {DTYPE_RULES[row.dtype].doc}"
    )
    if row.bools == "refused":
        inference += "; bool tensors are refused, as torch does"
    elif row.bools == "result":
        inference += "; two bool tensors are refused, as torch does"
    doc = f"{row.doc}\n\nComputes ``torch.{row.torch}(a, b)``" + (
        f"; with a number for ``a`` or ``b``, Python's ``operator.{row.operator}`` (what ``1 - x`` runs)."
        if scalar
        else "; both operands are tensors, as torch requires."
    )
    op(
        row.name,
        params=[_number_param("a", "a"), _number_param("b", "b")] if scalar else [],
        inputs=[
            Port("a", None, dtype="any", doc="left operand", scalar=scalar),
            Port("b", None, dtype="any", doc="right operand", scalar=scalar),
        ],
        outputs=[Port("y", None, dtype=_OUT_RULE[row.dtype])],
        infer=_elementwise_infer(row, ["a", "b"]),
        layer=layer,
        saves=row.saves,
        passes_gradient=row.passes_gradient,
        inference=inference,
        example={"op": row.name},
        input_shape_example=_SHAPE,
        returns="new",
        aliases=row.aliases,
        error_example={"inputs": [["B", 3], ["B", 4]]},
        imports=row.imports,
    )(_documented(build, doc))


for _row in UNARY:
    _register_unary(_row)
for _row in BINARY:
    _register_binary(_row)


# --- where ------------------------------------------------------------------------------------------------


def _where_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    condition = inputs[0]
    branches = _operands(p, ["a", "b"], inputs[1:])
    tensors = [("condition", condition)] + [(n, v) for n, v in branches if isinstance(v, TensorType)]
    dtype = DTYPE_RULES["promote"].result([_dtype_of(v) for _, v in branches])
    return [TensorType(_broadcast(tensors), dtype)]


@op(
    "where",
    saves="none",
    # Not finite: -inf where a mask holds is how attention scores are masked (masked_fill(mask, -inf)).
    params=[_number_param("a", "a", finite=False), _number_param("b", "b", finite=False)],
    inputs=[
        Port("condition", None, dtype="bool", doc="where true, the result takes a; elsewhere b"),
        Port("a", None, dtype="any", doc="the value where condition holds", scalar=True),
        Port("b", None, dtype="any", doc="the value elsewhere", scalar=True),
    ],
    outputs=[Port("y", None, dtype="any")],
    infer=_where_infer,
    layer="hndl.torch.layers.Where",
    inference=(
        "condition, a and b broadcast by torch's rules; dtype: torch's type promotion of "
        "a and b (a number joins only as a higher kind; two numbers give int64 or float32)"
    ),
    example={"op": "where", "b": 0.0},
    input_shape_example=_SHAPE,
    returns="new",
    error_example={"inputs": [["B", 8], ["B", 8], ["B", 8]]},
    imports=dict.fromkeys(
        ("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar"), "where"
    ),
)
def where(p: Params, inputs: Sequence[TensorType]) -> Any:
    """``a`` where ``condition`` is true, else ``b`` (``torch.where``), with broadcasting.

    ``condition`` must be bool (a comparison's output). Either branch may be a number: ``{op: where, in: mask,
    a: -100.0, b: 0.0}`` makes Swin's attention mask from a bool mask. A number may be infinite (``a: -.inf`` in
    YAML, ``float("-inf")`` in Python): ``{op: where, in: [future, scores], a: -.inf}`` masks attention scores
    before a softmax.
    """
    return layer_of("where")(p.a, p.b)


# --- clamp ------------------------------------------------------------------------------------------------


def _clamp_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.min is None and p.max is None:
        raise InferError(
            "clamp needs a bound: min, max or both",
            code="E_PARAM",
            param="min",
            expected="min or max",
            actual="neither",
        )
    x = inputs[0]
    bounds = [v for v in (p.min, p.max) if v is not None]
    return [TensorType(x.shape, DTYPE_RULES["promote"].result([x.dtype, *bounds]))]


@op(
    "clamp",
    saves="inputs",
    params=[
        Param("min", "float", default=None, nullable=True, doc="the lower bound (null: none)"),
        Param("max", "float", default=None, nullable=True, doc="the upper bound (null: none)"),
    ],
    inputs=[Port("x", ["*shape"], dtype="any")],
    outputs=[Port("y", ["*shape"], dtype="any")],
    infer=_clamp_infer,
    layer="hndl.torch.layers.Unary",
    inference="at least one bound; dtype: torch's type promotion of x and the bounds (int64 with 0.5 is float32)",
    example={"op": "clamp", "min": 0.0, "max": 6.0},
    input_shape_example=_SHAPE,
    returns="new",
    aliases={"clip": {}},
    error_example={"params": {}, "inputs": [["B", 8]]},
    imports={
        "aten.clamp.default": ImportRow("clamp", {"bounds": ("min", "max")}),
        "aten.clamp_.default": ImportRow("clamp", {"bounds": ("min", "max")}),
        "aten.clamp_min.default": ImportRow("clamp", {"bounds": ("min",)}),
        "aten.clamp_max.default": ImportRow("clamp", {"bounds": ("max",)}),
    },
)
def clamp(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Each element limited to ``[min, max]`` (``torch.clamp``); a bound may be left out.

    With ``min > max`` every element becomes ``max``, as in torch. For floating inputs, ``hardtanh`` is the
    same function as an ``nn`` activation (``min_val``, ``max_val``).
    """
    return layer_of("clamp")("torch.clamp", min=p.min, max=p.max)


# --- cast -------------------------------------------------------------------------------------------------


def _cast_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.dtype not in DTYPES:
        raise InferError(
            f"cast needs a concrete dtype, got the category {p.dtype!r}",
            code="E_PARAM",
            param="dtype",
            expected="a dtype such as float32, int64 or bool",
            actual=p.dtype,
            hint="name the dtype to convert to: float32 for float, int64 for int",
        )
    return [TensorType(inputs[0].shape, p.dtype)]


@op(
    "cast",
    saves="none",
    params=[Param("dtype", "dtype", doc="the dtype to convert to (a concrete dtype: float32, int64, bool, ...)")],
    inputs=[Port("x", ["*shape"], dtype="any")],
    outputs=[Port("y", ["*shape"], dtype="any")],
    infer=_cast_infer,
    layer="hndl.torch.layers.Cast",
    inference="the output's dtype is the dtype parameter",
    example={"op": "cast", "dtype": "float32"},
    input_shape_example=["B", "T"],
    returns="input",
    aliases={"to": {}, "astype": {}},
    error_example={"params": {"dtype": "float"}, "inputs": [["B", 8]]},
)
def cast(p: Params, inputs: Sequence[TensorType]) -> Any:
    """The input converted to ``dtype`` (``x.to(dtype)``): a bool mask to float32, an index to int64.

    As ``Tensor.to``, it returns its input itself when the dtype is already ``dtype``.
    """
    return layer_of("cast")(p.dtype)


__all__ = ["BINARY", "UNARY", "Row"]
