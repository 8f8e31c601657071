"""``buffer``: a constant tensor computed once, when the model is built, from a formula the op documents.

The formulas are a table (:data:`FORMULAS`): each row checks the shape and parameters it is given (no torch)
and computes the tensor (torch imported inside), so the checker, the docs and the builder read one row.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .._contracts import DTYPES, TensorType
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import DEFAULT_FLOAT, DEFAULT_INT, pair, product


@dataclass(frozen=True)
class Formula:
    """One way to fill a buffer.

    Attributes:
        name: the value of ``init``.
        doc: the formula, for the docs (the element at each index, or the reference it reproduces).
        reads: the parameters it reads besides ``shape`` and ``dtype``.
        dtype: the dtype when ``dtype`` is null: a dtype, or ``"number"`` (int64 when the numbers it reads are
            integers, else float32, as ``torch.arange`` and ``torch.full`` choose).
        check: raises :class:`InferError` for a shape or parameters the formula cannot fill.
        make: ``make(shape, params, dtype) -> Tensor`` (imports torch).
    """

    name: str
    doc: str
    reads: tuple[str, ...]
    dtype: str
    check: Callable[[tuple[int, ...], Params], None]
    make: Callable[[tuple[int, ...], Params, Any], Any]

    def default_dtype(self, p: Params) -> str:
        if self.dtype != "number":
            return self.dtype
        numbers = [n for name in self.reads for n in (p[name] if isinstance(p[name], (list, tuple)) else [p[name]])]
        return DEFAULT_INT if all(isinstance(n, int) for n in numbers) else DEFAULT_FLOAT


def _any_shape(shape: tuple[int, ...], p: Params) -> None:
    return None


def _table_shape(shape: tuple[int, ...], p: Params, smallest: int) -> None:
    """A position table is ``[positions, channels]``, with an even channel count of at least ``smallest``."""
    if len(shape) != 2 or shape[1] % 2 or shape[1] < smallest:
        raise InferError(
            f"init {p.init!r} makes a [positions, channels] table with an even channel count of at least "
            f"{smallest}, got shape {list(shape)}",
            code="E_PARAM",
            param="shape",
            expected=f"[T, D] with D even and D >= {smallest}",
            actual=list(shape),
        )


def _window(p: Params) -> tuple[int, int]:
    if p.window is None:
        raise InferError(
            "init 'relative_position_index' needs the window size",
            code="E_PARAM",
            param="window",
            expected="window: 7 (or [7, 7])",
            actual="null",
        )
    return pair(p.window)


def _index_shape(shape: tuple[int, ...], p: Params) -> None:
    wh, ww = _window(p)
    n = wh * ww
    if product(shape) != n * n:
        raise InferError(
            f"a window of {wh}x{ww} has {n} positions, so the index has {n}x{n} = {n * n} entries; shape "
            f"{list(shape)} holds {product(shape)}",
            code="E_PARAM",
            param="shape",
            expected=f"[{n * n}] (torchvision) or [{n}, {n}]",
            actual=list(shape),
        )


def _values_shape(shape: tuple[int, ...], p: Params) -> None:
    if p["values"] is None:
        raise InferError(
            "init 'values' needs the values",
            code="E_PARAM",
            param="values",
            expected=f"values: a list of {product(shape)} numbers",
            actual="null",
        )
    if len(p["values"]) != product(shape):
        raise InferError(
            f"shape {list(shape)} holds {product(shape)} elements, but values has {len(p['values'])}",
            code="E_PARAM",
            param="values",
            expected=f"{product(shape)} numbers (row-major)",
            actual=len(p["values"]),
        )


def _values(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    values = list(p["values"])
    if dtype.is_floating_point:
        # Through float64, which holds every float32, float16 and bfloat16 exactly: one rounding, to dtype.
        return torch.tensor(values, dtype=torch.float64).to(dtype).reshape(shape)
    return torch.tensor(values, dtype=torch.int64).to(dtype).reshape(shape)


def _zeros(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    return torch.zeros(shape, dtype=dtype)


def _ones(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    return torch.ones(shape, dtype=dtype)


def _full(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    return torch.full(shape, p.value, dtype=dtype)


def _arange(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    n = product(shape)
    # torch.arange(start, end, step) computes start + i * step; the end is past the last element by a whole
    # step, so rounding in the length calculation can add an element but never drop one.
    values = torch.arange(p.start, p.start + n * p.step, p.step, dtype=dtype)[:n]
    return values.reshape(shape)


def _sinusoidal(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    length, channels = shape
    # "Attention is all you need" (section 3.5), written as PyTorch's tutorial and the annotated transformer do.
    position = torch.arange(length).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, channels, 2) * (-math.log(p.base) / channels))
    table = torch.zeros(length, channels)
    table[:, 0::2] = torch.sin(position * div_term)
    table[:, 1::2] = torch.cos(position * div_term)
    return table.to(dtype)


def _sinusoidal_whisper(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    length, channels = shape
    # Whisper's sinusoids() (OpenAI's and transformers' modeling_whisper): sines, then cosines.
    log_timescale_increment = math.log(p.base) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)
    return torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1).to(dtype)


def _relative_position_index(shape: tuple[int, ...], p: Params, dtype: Any) -> Any:
    import torch

    wh, ww = pair(p.window)
    # Swin's define_relative_position_index (torchvision's SwinTransformer, Microsoft's original).
    coords = torch.stack(torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij"))
    coords_flatten = torch.flatten(coords, 1)
    relative = (coords_flatten[:, :, None] - coords_flatten[:, None, :]).permute(1, 2, 0).contiguous()
    relative[:, :, 0] += wh - 1
    relative[:, :, 1] += ww - 1
    relative[:, :, 0] *= 2 * ww - 1
    return relative.sum(-1).reshape(shape).to(dtype)


#: Every ``init`` of ``buffer``, by name.
FORMULAS: dict[str, Formula] = {
    f.name: f
    for f in (
        Formula("zeros", "0 everywhere", (), DEFAULT_FLOAT, _any_shape, _zeros),
        Formula("ones", "1 everywhere", (), DEFAULT_FLOAT, _any_shape, _ones),
        Formula("full", "`value` everywhere", ("value",), "number", _any_shape, _full),
        Formula(
            "arange",
            "`start + i * step` at flat index `i` (row-major), as `torch.arange(start, end, step)` reshaped",
            ("start", "step"),
            "number",
            _any_shape,
            _arange,
        ),
        Formula(
            "sinusoidal",
            "shape `[T, D]`: at position `t`, channel `2i` is `sin(t / base**(2i/D))` and channel `2i+1` is "
            "`cos(t / base**(2i/D))` (Vaswani et al. 2017, interleaved; computed as PyTorch's tutorial does)",
            ("base",),
            DEFAULT_FLOAT,
            lambda shape, p: _table_shape(shape, p, 2),
            _sinusoidal,
        ),
        Formula(
            "sinusoidal_whisper",
            "shape `[T, D]`: channel `i < D/2` is `sin(t * base**(-i/(D/2-1)))`, channel `D/2+i` the cosine "
            "(Whisper's `sinusoids(T, D)`: sines, then cosines)",
            ("base",),
            DEFAULT_FLOAT,
            lambda shape, p: _table_shape(shape, p, 4),
            _sinusoidal_whisper,
        ),
        Formula(
            "relative_position_index",
            "for a `window` of `h x w` positions, entry `(i, j)` is `(dy + h-1) * (2w-1) + (dx + w-1)`, where "
            "`(dy, dx)` is position `i`'s offset from `j`: the row of Swin's relative position bias table; shape "
            "`[(h*w)**2]` (torchvision) or `[h*w, h*w]`",
            ("window",),
            DEFAULT_INT,
            _index_shape,
            _relative_position_index,
        ),
        Formula(
            "values",
            "the numbers `values`, row-major (`torch.tensor(values).reshape(shape)`; 0 and 1 for a bool mask)",
            ("values",),
            "number",
            _values_shape,
            _values,
        ),
    )
}

#: Parameters only some formulas read, with the value that means "not given".
_READ_BY = {
    "value": 0.0,
    "start": 0,
    "step": 1,
    "base": 10000.0,
    "window": None,
    "values": None,
}


def _buffer_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    formula = FORMULAS[p.init]
    shape = tuple(p.shape)
    for name, unset in _READ_BY.items():
        if p[name] != unset and name not in formula.reads:
            users = [f.name for f in FORMULAS.values() if name in f.reads]
            raise InferError(
                f"init {p.init!r} does not read {name}",
                code="E_PARAM",
                param=name,
                expected=f"init: {' or '.join(users)}",
                actual=p.init,
                hint=f"drop {name}, or choose the init that reads it",
            )
    if p.init == "arange" and p.step == 0:
        raise InferError("arange needs a step other than 0", code="E_PARAM", param="step", expected="!= 0", actual=0)
    formula.check(shape, p)
    dtype = p.dtype if p.dtype is not None else formula.default_dtype(p)
    if p.init == "values" and dtype not in FLOATING and not all(isinstance(v, int) for v in p["values"]):
        raise InferError(
            f"a buffer of dtype {dtype} holds integers, but values has fractions",
            code="E_PARAM",
            param="values",
            expected="integers (or a floating dtype)",
            actual=next(v for v in p["values"] if not isinstance(v, int)),
        )
    if p.init == "values" and dtype == "bool" and not set(p["values"]) <= {0, 1}:
        raise InferError(
            "a bool buffer's values are 0 (false) and 1 (true)",
            code="E_PARAM",
            param="values",
            expected="0s and 1s",
            actual=sorted(set(p["values"]) - {0, 1})[:3],
        )
    if dtype not in DTYPES:
        raise InferError(
            f"a buffer needs a concrete dtype, got the category {dtype!r}",
            code="E_PARAM",
            param="dtype",
            expected="a dtype such as float32 or int64",
            actual=dtype,
        )
    # A floating buffer follows the model's conversions (``.double()``, FSDP's mixed precision): its dtype is the
    # model's floating dtype, whichever that is; an integer or bool one keeps its own.
    return [TensorType(shape, "float" if dtype in FLOATING else dtype)]


FLOATING = ("float16", "bfloat16", "float32", "float64")


@op(
    "buffer",
    saves="none",
    params=[
        Param("shape", "ints", min=0, doc="the tensor's shape ([] for a single number)"),
        Param("init", "str", default="zeros", choices=tuple(FORMULAS), doc="the formula that fills it (see below)"),
        Param("value", "float", default=0.0, doc="init full: every element's value"),
        Param("start", "float", default=0, doc="init arange: the first value"),
        Param("step", "float", default=1, doc="init arange: the difference between neighbours"),
        Param(
            "base", "float", default=10000.0, min=1, doc="init sinusoidal, sinusoidal_whisper: the largest wavelength"
        ),
        Param(
            "window", "int_or_pair", default=None, nullable=True, min=1, doc="init relative_position_index: the window"
        ),
        Param(
            "dtype",
            "dtype",
            default=None,
            nullable=True,
            doc="its dtype (null: int64 for integer arange, full and values and for the index, else float32)",
        ),
        Param(
            "values",
            "numbers",
            default=None,
            nullable=True,
            doc="init values: the elements, row-major (0 and 1 for bool)",
        ),
        Param("persistent", "bool", default=True, doc="whether it is in the state_dict, as torch's register_buffer"),
    ],
    inputs=[],
    outputs=[Port("y", None, dtype="any")],
    infer=_buffer_infer,
    layer="hndl.torch.layers.FixedTensor",
    inference="the output's shape is the shape parameter; its dtype the dtype parameter, or the formula's own",
    example={"op": "buffer", "shape": [64, 128], "init": "sinusoidal"},
    returns="state",
    aliases={"register_buffer": {}, "constant": {}},
    error_example={"params": {"shape": [64, 127], "init": "sinusoidal"}, "inputs": []},
)
def buffer(p: Params, inputs: Sequence[TensorType]) -> Any:
    """A constant tensor, computed when the model is built: a position table, an index, a mask.

    The layer registers it as the buffer ``value`` (``nodes.n_<name>.value`` in the state_dict unless
    ``persistent`` is false): it moves with ``.to()``, loads with the weights, and is never trained. ``init``
    names the formula:

    - ``zeros``, ``ones``; ``full``: ``value`` everywhere;
    - ``arange``: ``start + i * step`` at flat index ``i`` (``{op: buffer, shape: [56], init: arange}`` is
      ``torch.arange(56)``, int64);
    - ``sinusoidal``: the ``[T, D]`` position table of "Attention is all you need" (sine and cosine
      interleaved, wavelengths up to ``base``), bit for bit as PyTorch's transformer tutorial computes it;
    - ``sinusoidal_whisper``: Whisper's ``[T, D]`` table (sines, then cosines), as its ``sinusoids``;
    - ``relative_position_index``: Swin's index into its relative position bias table for a ``window``,
      as torchvision's ``relative_position_index`` (``[N*N]`` or ``[N, N]``, ``N = h*w``); an ``embedding``
      of it is the bias (``in: index``, ``num_embeddings: (2h-1)*(2w-1)``, ``embedding_dim``: the heads);
    - ``values``: the numbers ``values``, row-major (0 and 1 for bool: false and true; int64 when all are
      integers, else float32, unless ``dtype`` says): a small index, mask or table written out, as
      ``hndl.from_module`` writes a constant it computed at import
      (``{op: buffer, shape: [2, 2], init: values, values: [1, 0, 1, 1], dtype: bool}``).
    """
    import torch

    formula = FORMULAS[p.init]
    dtype = p.dtype if p.dtype is not None else formula.default_dtype(p)
    return layer_of("buffer")(formula.make(tuple(p.shape), p, getattr(torch, dtype)), persistent=p.persistent)


__all__ = ["FORMULAS", "Formula"]
