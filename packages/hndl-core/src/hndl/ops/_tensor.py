"""Tensors that are not a function of the data alone: parameter, expand, scale, type_as.

``parameter`` is a learned tensor of a fixed shape with no inputs (a class token, a position embedding, a layer
scale); its constant twin is ``buffer`` (``_constant``). ``expand`` broadcasts to a shape whose symbolic sizes are
read, at run time, from the tensors that carry them. (``positions``, a dim's indices, is in ``_positions``.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import SYMBOL_RE, Dim, DimError, format_dim, free_symbols, parse_dim, symbol
from .._param_types import ParamType, excerpt
from .._registry import InferError, Param, Params, Port, layer_of, op
from .._size_reads import SizeRead, plan_size_read
from ._common import DTYPE_RULES, open_at, provably_different

# --- parameter ------------------------------------------------------------------------------------------


def _parameter_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.value != 0.0 and p.init != "full":
        raise InferError(
            f"value is the constant of init 'full'; init is {p.init!r}",
            code="E_PARAM",
            param="value",
            expected="init: full",
            actual=p.init,
            hint="write init: full to start every element at value",
        )
    if p.init in ("normal", "trunc_normal") and p.std <= 0:
        raise InferError(
            f"init={p.init!r} needs a positive std, got {p.std}",
            code="E_PARAM",
            param="std",
            expected="std > 0",
            actual=p.std,
        )
    return [TensorType(tuple(p.shape), "float")]  # the model's floating dtype: .double() converts it


@op(
    "parameter",
    saves="none",
    params=[
        Param("shape", "ints", min=1, doc="the tensor's shape, e.g. [1, 1, 768] for a class token"),
        Param(
            "init",
            "str",
            default="normal",
            choices=("zeros", "ones", "full", "normal", "trunc_normal"),
            doc="initial values: zeros, ones, value (full), normal(0, std), or normal(0, std) truncated to +-2 std",
        ),
        Param("std", "float", default=0.02, min=0, doc="standard deviation of the normal and trunc_normal inits"),
        Param("value", "float", default=0.0, doc="every element's initial value, with init: full"),
    ],
    inputs=[],
    outputs=[Port("y", None, dtype="float")],
    infer=_parameter_infer,
    layer="hndl.torch.layers.LearnedTensor",
    inference="the output's shape is the shape parameter",
    example={"op": "parameter", "shape": [1, 1, 768], "init": "zeros"},
    returns="state",
    aliases={"Parameter": {}},
    error_example={"params": {"shape": [96, 1, 1], "value": 1e-6}, "inputs": []},
)
def parameter(p: Params, inputs: Sequence[TensorType]) -> Any:
    """A learned tensor of a fixed shape, with no inputs: a class token, a position embedding.

    The module holds it as ``weight`` (``nodes.n_<name>.weight`` in the state_dict). It is a float32
    tensor, as every torch parameter is by default; combine it with the data by ``add``, ``mul``, ``concat``
    or ``expand``. ConvNeXt's layer scale is ``{op: parameter, shape: [96, 1, 1], init: full, value: 1e-6}``
    times the block's output. For a tensor that is not learned, see ``buffer``.
    """
    return layer_of("parameter")(list(p.shape), init=p.init, std=p.std, value=p.value)


# --- scale ----------------------------------------------------------------------------------------------


def _scale_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    return [TensorType(x.shape, DTYPE_RULES["promote"].result([x.dtype, p.factor]))]


@op(
    "scale",
    saves="none",
    params=[Param("factor", "float", doc="the constant to multiply by (an integer keeps an integer input's dtype)")],
    inputs=[Port("x", ["*shape"], dtype="any")],
    outputs=[Port("y", ["*shape"], dtype="any")],
    infer=_scale_infer,
    layer="hndl.torch.layers.Scale",
    inference="dtype: as torch's x * factor: an integer factor keeps the input's dtype, a float one makes "
    "integers float32",
    example={"op": "scale", "factor": 0.125},
    input_shape_example=["B", "T", 64],
    returns="new",
    error_example={"params": {"factor": float("inf")}, "inputs": [["B", 8]]},
)
def scale(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Multiply by a constant (``x * factor``), e.g. ``1/sqrt(d)`` before a softmax.

    The dtype follows torch's rule for a Python number: ``factor: 3`` on int64 indices stays int64 (a window
    index times a row length), ``factor: 0.5`` makes them float32, and a float16 input stays float16.
    """
    return layer_of("scale")(p.factor)


# --- expand ---------------------------------------------------------------------------------------------


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Sizes(ParamType):
    """``expand``'s and ``new_*``'s target: sizes (ints), ``-1`` (keep the input's dim), symbol names (``B``) or
    expressions over them (``8*h``)."""

    name, description = "sizes", "list of sizes: integers, -1 (keep), symbols such as B, or expressions such as 8*h"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, (list, tuple)):
            return None, f"must be a list of sizes, got {excerpt(value)}"
        for item in value:
            if _is_size(item):
                if item < -1:
                    return None, f"sizes must be 0 or more, or -1 to keep a dim, got {excerpt(value)}"
            elif not isinstance(item, str):
                return None, f"entries must be integers, symbols or expressions over them, got {excerpt(value)}"
            else:
                try:
                    size = parse_dim(item)
                except DimError as exc:
                    return None, f"entry {excerpt(item)} is not a size expression: {exc}"
                if isinstance(size, int):
                    return None, f"entry {excerpt(item)} is a number written as text; write {size}"
        return tuple(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {
            "type": "array",
            "items": {
                "anyOf": [
                    {"type": "integer", "minimum": -1},
                    # A letter somewhere: text with none is a number ("0", "2*3"), written as an integer.
                    # The pattern cannot see the expression's grammar (SPEC 4.9); the parser does.
                    {"type": "string", "pattern": r"^[0-9*+\-/() ]*[A-Za-z_][A-Za-z0-9_*+\-/() ]*$"},
                ]
            },
        }


def resolve_sizes(
    sizes: Sequence[Any], x: Sequence[Dim], like: Sequence[Dim] | None
) -> list[tuple[str, int] | int | SizeRead]:
    """Where each target size comes from: ``("x", i)`` / ``("like", i)`` (a dim of an input), an int, or a
    :class:`~hndl._size_reads.SizeRead` (computed per call from input dims).

    A symbol or an expression (``8*h``) is looked up in ``x``'s static shape, then in ``like``'s; one that is
    neither's dim is computed from the dims its symbols can be read back from (``h`` from a dim ``16*h``). ``-1``
    keeps ``x``'s aligned dim. The run-time layer reads the same dims, so the plan is made once, at build time.

    Raises:
        InferError: E_PARAM for a size neither input carries nor gives the symbols of, or a -1 with no input dim
        to keep.
    """
    offset = len(sizes) - len(x)
    plan: list[tuple[str, int] | int | SizeRead] = []
    for i, size in enumerate(sizes):
        if _is_size(size) and size >= 0:
            plan.append(size)
        elif size == -1:
            if i < offset:
                raise InferError(
                    f"shape entry {i} is -1, but the input has no dim there (rank {len(x)}, target rank {len(sizes)})",
                    code="E_PARAM",
                    param="shape",
                    expected="a size or a symbol for each new leading dim",
                    actual=list(sizes),
                )
            plan.append(("x", i - offset))
        else:
            plan.append(_size_source(size, x, like, sizes))
    return plan


def _size_source(
    size: str, x: Sequence[Dim], like: Sequence[Dim] | None, sizes: Sequence[Any]
) -> tuple[str, int] | SizeRead:
    wanted = parse_dim(size)
    source: tuple[str, int] | SizeRead | None = next((("x", j) for j, d in enumerate(x) if d == wanted), None)
    if source is None and like is not None:
        source = next((("like", j) for j, d in enumerate(like) if d == wanted), None)
    if source is None:
        source = plan_size_read(wanted, {"x": x, "like": like})
    if source is None:
        shapes = f"{format_shape(tuple(x))}" + ("" if like is None else f" or {format_shape(tuple(like))}")
        missing = sorted(s for s in free_symbols(wanted) if plan_size_read(symbol(s), {"x": x, "like": like}) is None)
        if SYMBOL_RE.match(size):
            message = f"symbol {size!r} is not a dim of {shapes}"
        else:
            message = (
                f"size {size!r} is not a dim of {shapes}, and {', '.join(missing) or 'its symbols'} cannot be read "
                "from one (a dim c*s+k gives s)"
            )
        raise InferError(
            message,
            code="E_PARAM",
            param="shape",
            expected="sizes, -1, or symbols and expressions over the symbols of an input's shape",
            actual=list(sizes),
            hint="pass a tensor that has this dim as a second input (in: [x, like])"
            if like is None
            else "use a symbol of either input's shape, or an int",
        )
    return source


def plan_dim(entry: tuple[str, int] | int | SizeRead, x: Sequence[Dim], like: Sequence[Dim] | None) -> Dim:
    """The size a plan entry of :func:`resolve_sizes` gives, as the checker infers it."""
    if isinstance(entry, int):
        return entry
    if isinstance(entry, SizeRead):
        return entry.expr
    held = x if entry[0] == "x" else like
    assert held is not None
    return held[entry[1]]


def _expand_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    like = inputs[1].shape if len(inputs) > 1 else None
    if x.shape is None or open_at(x.shape) is not None or (like is not None and open_at(like) is not None):
        return [TensorType(None, x.dtype)]
    if len(p.shape) < len(x.shape):
        raise InferError(
            f"shape {list(p.shape)} has {len(p.shape)} entries for a rank-{len(x.shape)} input",
            code="E_PARAM",
            param="shape",
            expected=f"at least {len(x.shape)} entries",
            actual=list(p.shape),
        )
    plan = resolve_sizes(p.shape, x.shape, like)
    out: list[Dim] = []
    offset = len(p.shape) - len(x.shape)
    for i, source in enumerate(plan):
        target = plan_dim(source, x.shape, like)
        if i >= offset:
            have = x.shape[i - offset]
            if have != 1 and provably_different(have, target):
                raise InferError(
                    f"dim {i - offset} of the input is {format_dim(have)}, which cannot expand to {format_dim(target)}",
                    port="x",
                    expected=f"dim {i - offset} equal to {format_dim(target)}, or 1",
                    actual=format_shape(x.shape),
                    hint="expand only repeats dims of size 1; use a size equal to the input's, or -1",
                )
            if isinstance(have, int) and have != 1 and not isinstance(target, int):
                target = have  # the input pins it
        out.append(target)
    return [TensorType(tuple(out), x.dtype)]


@op(
    "expand",
    saves="none",
    params=[
        Param(
            "shape",
            _Sizes(),
            doc="the target shape: ints, -1 to keep a dim, symbols of an input's shape ([B, 1, D]), or expressions "
            "over them (8*h)",
        )
    ],
    inputs=[
        Port("x", None, dtype="any", doc="the tensor to broadcast; its dims of size 1 repeat"),
        Port("like", None, dtype="any", optional=True, doc="a tensor whose dims the symbols in shape name"),
    ],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_expand_infer,
    layer="hndl.torch.layers.Expand",
    inference=(
        "the output has shape's sizes: an int as written, -1 the input's dim, a symbol the dim of x (or else "
        "of like) that the checker inferred to be that symbol; each dim of x must be 1 or equal its target"
    ),
    example={"op": "expand", "shape": [4, 1, -1]},
    input_shape_example=[1, 1, 768],
    returns="view",
    imports={"aten.expand.default": "expand"},
)
def expand(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Broadcast to a larger shape without copying (``x.expand(...)``): a class token ``[1, 1, D]`` becomes
    ``[B, 1, D]``.

    A symbol in ``shape`` names a dim of an input as the checker infers it: ``{op: expand, in: [cls, x],
    shape: [B, 1, -1]}`` reads ``B`` from ``x`` ``[B, T, D]`` on every call.
    """
    like = inputs[1].shape if len(inputs) > 1 else None
    return layer_of("expand")(resolve_sizes(p.shape, inputs[0].shape or (), like))


# --- type_as --------------------------------------------------------------------------------------------


@op(
    "type_as",
    saves="none",
    inputs=[
        Port("x", ["*shape"], dtype="any", doc="the tensor to convert"),
        Port("like", None, dtype="any", doc="the tensor whose dtype the result takes (its shape is not read)"),
    ],
    outputs=[Port("y", ["*shape"], dtype="same:like")],
    layer="hndl.torch.layers.TypeAs",
    inference="the output has x's shape and like's dtype",
    example={"op": "type_as"},
    input_shape_example=["B", "T"],
    returns="input",
    imports={"aten.type_as.default": "type_as"},
)
def type_as(p: Params, inputs: Sequence[TensorType]) -> Any:
    """``x`` converted to the dtype of ``like`` (``x.type_as(like)``), read on every call: a constant that takes
    the dtype of the activations it meets, float32 in one call, bfloat16 under autocast, float64 after
    ``.double()``.

    As ``Tensor.type_as``, it returns its input itself when the dtypes already agree. The importer writes a
    constant the module made in an activation's dtype (``torch.arange(n, dtype=h.dtype)``,
    ``torch.tensor(2.0, dtype=x.dtype)``, ``cos.to(x.dtype)``) as its ``buffer`` node through a ``type_as``.
    """
    return layer_of("type_as")()
