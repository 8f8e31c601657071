"""Positions: a dim's indices (``positions``, for learned position embeddings), and positions inside attention:
rotary embeddings (``rotary``) and T5's relative position bias (``relative_position_bias``).

``rotary``'s parameters are also what ``attention`` takes as its ``rope`` mapping: :data:`ROPE` is one
:class:`Record` type made from the same :class:`~hndl.Param` objects, so the two cannot disagree about a key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType, dtype_satisfies, format_shape, unknown_dim
from .._param_types import ParamType, describe_value, excerpt
from .._registry import REQUIRED, InferError, Param, Params, Port, layer_of, op
from ._common import norm_dim, open_at, open_index, provably_different


class Record(ParamType):
    """A mapping of named fields, each one checked by its own :class:`~hndl.Param` (defaults filled in).

    A spec writes it as a flow mapping (``rope: {theta: 500000.0}``); the normal form is a dict holding every
    field.
    """

    bounded = False

    def __init__(self, name: str, description: str, fields: Sequence[Param]) -> None:
        self.name = name
        self.description = description
        self.fields = tuple(fields)

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            return None, f"must be a mapping of {', '.join(f.name for f in self.fields)}, got {describe_value(value)}"
        known = {f.name: f for f in self.fields}
        unknown = [k for k in value if k not in known]
        if unknown:
            return None, f"has no key {excerpt(unknown[0])}: its keys are {', '.join(known)}"
        out: dict[str, Any] = {}
        for f in self.fields:
            if f.name not in value:
                if f.default is REQUIRED:
                    return None, f"needs the key {f.name!r}"
                out[f.name] = f.default
                continue
            normal, reason = f.validate(value[f.name])
            if reason:
                return None, f"{f.name} {reason}"
            out[f.name] = normal
        return out, ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {f.name: f.schema() for f in self.fields},
            "propertyNames": {"enum": [f.name for f in self.fields]},
            "additionalProperties": False,
            **({"required": required} if (required := [f.name for f in self.fields if f.required]) else {}),
        }


# --- rotary ---------------------------------------------------------------------------------------------

#: RoPE frequency scaling, as transformers' ``rope_scaling`` (``rope_parameters``) names it.
SCALING = Record(
    "rope_scaling",
    "mapping of rope_type (default, linear, llama3), factor, low_freq_factor, high_freq_factor, "
    "original_max_position_embeddings",
    [
        Param("rope_type", "str", default="default", choices=("default", "linear", "llama3"), doc="the scaling"),
        Param("factor", "float", default=1.0, min=0, doc="how many times longer the context gets"),
        Param("low_freq_factor", "float", default=1.0, min=0, doc="llama3: wavelengths above context/this are scaled"),
        Param("high_freq_factor", "float", default=4.0, min=0, doc="llama3: wavelengths below context/this are kept"),
        Param(
            "original_max_position_embeddings",
            "int",
            default=8192,
            min=1,
            doc="llama3: the context the model was trained with",
        ),
    ],
)

#: The rotary settings: ``rotary``'s parameters, and the keys of ``attention``'s ``rope``.
ROPE_FIELDS = (
    Param("theta", "float", default=10000.0, min=0, doc="the base of the frequencies (transformers' rope_theta)"),
    Param(
        "dims",
        "int",
        default=None,
        nullable=True,
        min=1,
        doc="how many channels of each head rotate (partial rotary); null: all; even, at most the head dim",
    ),
    Param("scaling", SCALING, default=None, nullable=True, doc="frequency scaling: linear, or LLaMA 3.1's llama3"),
    Param("interleaved", "bool", default=False, doc="GPT-J's layout (channel 2i pairs with 2i+1), not LLaMA's halves"),
)

ROPE = Record("rope", "mapping of theta, dims, scaling, interleaved (the rotary op's parameters)", ROPE_FIELDS)


def check_rope(rope: Mapping[str, Any], head_dim: int, param: str) -> None:
    """The rotary settings against the head dim they rotate (``InferError`` E_PARAM on ``param``)."""
    dims = head_dim if rope["dims"] is None else rope["dims"]
    if rope["theta"] <= 0:
        raise InferError(
            f"theta must be positive, got {rope['theta']}", code="E_PARAM", param=param, expected="theta > 0"
        )
    if dims > head_dim:
        raise InferError(
            f"rotary dims {dims} are more than the head dim {head_dim}",
            code="E_PARAM",
            param=param,
            expected=f"an even number <= {head_dim}",
            actual=dims,
            hint=f"rotate at most the whole head: dims {head_dim} (or null)",
        )
    if dims % 2:
        raise InferError(
            f"rotary dims {dims} is odd",
            code="E_PARAM",
            param=param,
            expected="an even number: RoPE rotates pairs of channels",
            actual=dims,
            hint=f"use dims {dims - 1} or {dims + 1}" if dims + 1 <= head_dim else f"use dims {dims - 1}",
        )
    scaling = rope["scaling"]
    if scaling is not None and scaling["rope_type"] != "default" and scaling["factor"] <= 0:
        raise InferError(
            f"rope scaling {scaling['rope_type']!r} needs a positive factor, got {scaling['factor']}",
            code="E_PARAM",
            param=param,
            expected="factor > 0",
        )
    if (
        scaling is not None
        and scaling["rope_type"] == "llama3"
        and not 0 < scaling["low_freq_factor"] < scaling["high_freq_factor"]
    ):
        raise InferError(
            "llama3 scaling needs 0 < low_freq_factor < high_freq_factor, got "
            f"{scaling['low_freq_factor']} and {scaling['high_freq_factor']}",
            code="E_PARAM",
            param=param,
            expected="0 < low_freq_factor < high_freq_factor (LLaMA 3.1: 1 and 4)",
        )


def _rotary_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    x = inputs[0]
    check_rope(p, p.head_dim, "dims")
    if len(inputs) == 2:
        positions = inputs[1]
        if dtype_satisfies(positions.dtype, "int") is False:
            raise InferError(
                f"positions have dtype {positions.dtype}",
                code="E_DTYPE",
                port="positions",
                expected="an integer dtype (int64)",
                actual=positions.dtype,
                hint="declare the positions input with dtype: int64",
            )
        shape = positions.shape
        if shape is not None and open_at(shape) is None and x.shape is not None and open_at(x.shape) is None:
            t, b = x.shape[-2], x.shape[0]
            wanted = {0: (), 1: (t,), 2: (b, t)}.get(len(shape))
            if wanted is None or any(provably_different(a, w) for a, w in zip(shape, wanted)):
                raise InferError(
                    f"positions {format_shape(shape)} do not fit x {format_shape(x.shape)}",
                    port="positions",
                    expected=f"[] (an offset), [T] or [B, T] position ids: [], {format_shape((t,))} or "
                    f"{format_shape((b, t))}",
                    actual=format_shape(shape),
                    hint="an offset is a 0-d int64 tensor; position ids have one entry per row of x",
                )
    return [x]


@op(
    "rotary",
    saves="none",
    returns="new",
    params=[
        *ROPE_FIELDS,
        Param("head_dim", "int", min=1, inferred=True, doc="the last dim D (inferred from the input)"),
    ],
    inputs=[
        Port("x", ["*batch", "T", "head_dim"], doc="queries or keys, [B, heads, T, head_dim]"),
        Port(
            "positions",
            None,
            dtype="int",
            optional=True,
            doc="an int64 offset (0-d: positions offset..offset+T-1), or position ids [T] or [B, T]",
        ),
    ],
    outputs=[Port("y", ["*batch", "T", "head_dim"], dtype="same:x")],
    infer=_rotary_infer,
    layer="hndl.torch.layers.Rotary",
    inference="dims must be even and at most head_dim; positions are [], [T] or [B, T] of an integer dtype",
    example={"op": "rotary", "theta": 10000.0},
    input_shape_example=["B", 8, "T", 64],
    error_example={"params": {"dims": 65}, "inputs": [["B", 8, "T", 64]]},
)
def rotary(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Rotary position embeddings (RoPE) on queries or keys ``[B, heads, T, head_dim]``.

    Channel pairs of each head turn by ``position * theta**(-2i/dims)``: the LLaMA/GPT-NeoX layout pairs channel
    ``i`` with ``i + dims/2`` (``x * cos + rotate_half(x) * sin``), ``interleaved`` pairs ``2i`` with ``2i+1``
    (GPT-J). ``dims`` rotates only the first channels (partial rotary); ``scaling`` stretches the frequencies
    (``linear``, or LLaMA 3.1's ``llama3`` with ``factor``, ``low_freq_factor``, ``high_freq_factor`` and
    ``original_max_position_embeddings``). The positions are ``0 .. T-1``, or given by a second input: a 0-d
    offset (decoding after ``offset`` cached tokens) or position ids ``[T]`` / ``[B, T]``. The frequencies are
    a non-persistent buffer computed at build, so the state_dict has no key for them; the cos/sin tables are
    computed from them on each call, as transformers does, which keeps results bit-identical to it.
    """
    return layer_of("rotary")(p.head_dim, dims=p.dims, theta=p.theta, scaling=p.scaling, interleaved=p.interleaved)


# --- relative position bias (T5) ------------------------------------------------------------------------


def _relative_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    least = 4 if p.bidirectional else 2
    if p.num_buckets < least:
        raise InferError(
            f"num_buckets {p.num_buckets} leaves no exact buckets",
            code="E_PARAM",
            param="num_buckets",
            expected=f">= {least}" + (" (half of them per direction)" if p.bidirectional else ""),
            actual=p.num_buckets,
        )
    exact = p.num_buckets // 2 // (2 if p.bidirectional else 1)
    if p.max_distance <= exact:
        raise InferError(
            f"max_distance {p.max_distance} is within the {exact} exact buckets",
            code="E_PARAM",
            param="max_distance",
            expected=f"> {exact}",
            actual=p.max_distance,
            hint="T5 uses num_buckets 32 and max_distance 128",
        )
    x = inputs[0]
    keys = inputs[1] if len(inputs) == 2 else x
    return [TensorType((1, p.num_heads, _dim(x.shape, 1), _dim(keys.shape, 1)), "float")]


def _dim(shape: tuple[Any, ...] | None, index: int) -> Any:
    """Dim ``index`` of a static shape, unknown where the shape is (or an open run starts before it)."""
    if shape is None or (open_at(shape) is not None and open_at(shape) <= index):  # type: ignore[operator]
        return unknown_dim()
    return shape[index]


@op(
    "relative_position_bias",
    saves="none",
    returns="new",
    params=[
        Param("num_heads", "int", min=1, doc="attention heads: one bias per head"),
        Param("num_buckets", "int", default=32, min=1, doc="buckets of relative positions (T5: 32)"),
        Param("max_distance", "int", default=128, min=1, doc="distances from here on share the last bucket (T5: 128)"),
        Param("bidirectional", "bool", default=True, doc="keys after the query get their own buckets (encoders)"),
    ],
    inputs=[
        Port("x", ["B", "T", "*rest"], dtype="any", doc="the queries' sequence; only T is read"),
        Port("kv", ["B", "S", "*rest_kv"], dtype="any", optional=True, doc="the keys' sequence (S); x without it"),
    ],
    outputs=[Port("y", [1, "num_heads", "T", "S"], dtype="float")],
    infer=_relative_infer,
    layer="hndl.torch.layers.RelativePositionBias",
    inference="S is T without kv; num_buckets and max_distance must leave exact and logarithmic buckets",
    example={"op": "relative_position_bias", "num_heads": 8},
    input_shape_example=["B", "T", 512],
    error_example={"params": {"num_heads": 8, "num_buckets": 32, "max_distance": 8}, "inputs": [["B", "T", 512]]},
)
def relative_position_bias(p: Params, inputs: Sequence[TensorType]) -> Any:
    """T5's relative position bias ``[1, num_heads, T, S]``, added to the attention scores.

    Each relative position ``key - query`` falls in one of ``num_buckets`` buckets, exact for small distances and
    logarithmically wider up to ``max_distance`` (bidirectional: half the buckets per sign; otherwise later keys
    share one bucket), and each bucket has a learned value per head (``weight`` ``[num_buckets, num_heads]``, which
    is transformers' ``relative_attention_bias.weight``). Compute it once and pass it to every layer's
    ``attention`` (``score_bias: true``), as T5 does: through ``repeat``'s ``shared`` inputs.
    """
    return layer_of("relative_position_bias")(
        p.num_heads, num_buckets=p.num_buckets, max_distance=p.max_distance, bidirectional=p.bidirectional
    )


# --- positions ------------------------------------------------------------------------------------------


def _positions_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    shape = inputs[0].shape
    if shape is None:
        return [TensorType((unknown_dim(),), "int64")]
    if open_at(shape) is not None:
        index = open_index(shape, p.dim)
        return [TensorType((unknown_dim() if index is None else shape[index],), "int64")]
    if len(shape) == 0:
        raise InferError("a 0-d input has no dim to count", port="x", expected="rank >= 1", actual="[]")
    return [TensorType((shape[norm_dim(p.dim, len(shape))],), "int64")]


@op(
    "positions",
    saves="none",
    params=[Param("dim", "int", default=1, doc="the dim whose positions are counted (1: the T of [B, T, D])")],
    inputs=[Port("x", None, dtype="any", doc="any tensor; only the size of dim is read")],
    outputs=[Port("y", ["n"], dtype="int64")],
    infer=_positions_infer,
    layer="hndl.torch.layers.Positions",
    inference="n is the size of the input's dim dim",
    example={"op": "positions", "dim": 1},
    input_shape_example=["B", "T"],
    returns="new",
)
def positions(p: Params, inputs: Sequence[TensorType]) -> Any:
    """The int64 positions ``0 .. n-1`` of one dim of the input, for position embeddings.

    ``[B, T]`` token ids give ``[T]``; an ``embedding`` of them gives ``[T, D]``, which ``add`` broadcasts
    onto ``[B, T, D]``. The positions are made on the input's device.
    """
    return layer_of("positions")(p.dim)
