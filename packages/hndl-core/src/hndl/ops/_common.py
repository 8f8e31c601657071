"""Helpers the built-in ops share: dim indices, broadcasting, dtype promotion, window arithmetic.

Static shapes are tuples of dims (``int`` or symbolic), possibly holding one :class:`Variadic` (an open run
of dims whose count is only known at call time) or being ``None`` (rank unknown). Every helper here accepts
all three forms and answers "unknown" rather than "wrong" whenever the open part of a shape is involved.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from .._contracts import DTYPE_CATEGORIES, DTYPES, TensorType, Variadic, format_shape, never_equal, unknown_dim
from .._dims import Dim, dim_add, dim_floordiv, dim_mul, dim_sub, format_dim
from .._registry import InferError

Shape = tuple[Any, ...]


@dataclass(frozen=True)
class Requirement:
    """A bound a node's shape arithmetic imposes on a symbolic dim: ``dim >= minimum`` (``H >= 7`` for a 7x7
    kernel without padding). Inference cannot decide it for every value of the symbols; the validating call
    does, once the inputs bind them (``hndl.torch`` check_inputs)."""

    dim: Dim
    minimum: int
    what: str  # the dim in words, for the message: "height"

    def __str__(self) -> str:
        return f"{format_dim(self.dim)} >= {self.minimum}"


_requirements: ContextVar[list[Requirement] | None] = ContextVar("hndl_requirements", default=None)


class collect_requirements:  # a function to its callers: ``with collect_requirements() as found``
    """The requirements the inference run inside the ``with`` block records (the checker wraps each node).

    A class rather than a ``@contextmanager`` generator: the checker enters one per node, and a generator's
    setup costs about a microsecond per node of a large graph."""

    __slots__ = ("found", "token")

    def __enter__(self) -> list[Requirement]:
        self.found: list[Requirement] = []
        self.token = _requirements.set(self.found)
        return self.found

    def __exit__(self, *exc: object) -> None:
        _requirements.reset(self.token)


def require(dim: Dim, minimum: int, what: str) -> None:
    """Record ``dim >= minimum`` for the node being inferred; an int dim was decided by the caller already."""
    found = _requirements.get()
    if found is not None and not isinstance(dim, int):
        found.append(Requirement(dim, minimum, what))


def open_at(shape: Shape) -> int | None:
    """The index of the :class:`Variadic` entry of ``shape``, or ``None`` when the rank is known."""
    return next((i for i, d in enumerate(shape) if isinstance(d, Variadic)), None)


def shape_of_rank(t: TensorType, rank: int) -> Shape | None:
    """``t``'s shape when it is known to have ``rank`` dims (the port's pattern checked that), else ``None``."""
    if t.shape is None or open_at(t.shape) is not None or len(t.shape) != rank:
        return None
    return t.shape


def pair(value: Any) -> tuple[int, int]:
    """``3`` -> ``(3, 3)``; a pair stays a pair (defaults of ``int_or_pair`` params are not normalised)."""
    return (value, value) if isinstance(value, int) else (int(value[0]), int(value[1]))


def norm_dim(dim: int, rank: int, param: str = "dim", *, entry: bool = False) -> int:
    """``dim`` as an index into a rank-``rank`` shape (negative dims count from the end), as torch wraps it.

    ``entry`` says ``dim`` is one item of the list parameter ``param`` (``dims entry 3 is out of range``).

    Raises:
        InferError: E_PARAM naming ``param`` when ``dim`` is out of range, with the valid range.
    """
    size = max(rank, 1)  # torch treats a 0-d tensor as having one wrappable dim
    if not -size <= dim < size:
        raise InferError(
            f"{param + ' entry ' if entry else param + '='}{dim} is out of range for a rank-{rank} input",
            code="E_PARAM",
            param=param,
            expected=f"{-size} .. {size - 1}",
            actual=dim,
        )
    return dim + size if dim < 0 else dim


def distinct_dims(dims: Sequence[int], rank: int, param: str = "dims") -> list[int]:
    """``dims`` as indices into a rank-``rank`` shape, each once (``-1`` and the last dim are one), for the ops
    torch refuses a repeated dim in (``flip``, ``fill_region``).

    Raises:
        InferError: E_PARAM naming ``param`` for a dim outside the rank or one named twice.
    """
    index = [norm_dim(d, rank, param, entry=True) for d in dims]
    repeated = next((i for i in index if index.count(i) > 1), None)
    if repeated is not None:
        raise InferError(
            f"{param} {list(dims)} names dim {repeated} twice",
            code="E_PARAM",
            param=param,
            expected="each dim once",
            actual=list(dims),
        )
    return index


def open_index(shape: Shape, dim: int) -> int | None:
    """For a shape with an open run of dims, the tuple index ``dim`` refers to, if it lies outside the run."""
    k = open_at(shape)
    if k is None:
        return norm_dim(dim, len(shape))
    if dim >= 0:
        return dim if dim < k else None
    index = len(shape) + dim
    return index if index > k else None


def product(dims: Sequence[Dim]) -> Dim:
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


def provably_different(a: Dim, b: Dim) -> bool:
    """Two different ints, or two symbolic dims equal at most at isolated values (``H-2`` and ``H``)."""
    return (isinstance(a, int) and isinstance(b, int) and a != b) or never_equal(a, b)


# --- broadcasting ---------------------------------------------------------------------------------------


def broadcast_dim(a: Dim, b: Dim) -> Dim | None:
    """The broadcast of two dims, or ``None`` when they provably do not broadcast (two different ints, neither 1).

    Two different symbolic dims broadcast to a dim that is only known at call time (one of them is 1, or they
    are equal), so the result is an unknown dim, which the run-time check does not pin.
    """
    if a == b or b == 1:
        return a
    if a == 1:
        return b
    if (isinstance(a, int) and isinstance(b, int)) or never_equal(a, b):
        return None
    if isinstance(b, int):  # a symbolic: it must be 1 or b
        return b
    if isinstance(a, int):
        return a
    return unknown_dim()


def broadcast_shapes(a: Shape | None, b: Shape | None, names: tuple[str, str] = ("a", "b")) -> Shape | None:
    """Broadcast two static shapes by torch's rules (align from the right; equal dims, or one of them 1).

    Returns ``None`` when the result's rank is not known statically.

    Raises:
        InferError: E_SHAPE naming both ports when two dims are provably incompatible.
    """
    if a is None or b is None:
        return None
    ka, kb = open_at(a), open_at(b)
    # Only the dims right of an open run can be aligned statically.
    tail_a = a if ka is None else a[ka + 1 :]
    tail_b = b if kb is None else b[kb + 1 :]
    n = min(len(tail_a), len(tail_b))
    out: list[Dim] = []
    for i in range(1, n + 1):
        da, db = tail_a[-i], tail_b[-i]
        d = broadcast_dim(da, db)
        if d is None:
            raise InferError(
                f"'{names[0]}' {format_shape(a)} and '{names[1]}' {format_shape(b)} do not broadcast: dim {-i} is "
                f"{format_dim(da)} in '{names[0]}' and {format_dim(db)} in '{names[1]}'",
                port=names[1],
                expected=f"dim {-i} equal to {format_dim(da)}, or 1 (broadcast with '{names[0]}' {format_shape(a)})",
                actual=format_shape(b),
                hint=f"make dim {-i} of '{names[1]}' {format_dim(da)} (or 1, to broadcast), or that of "
                f"'{names[0]}' {format_dim(db)}",
            )
        out.append(d)
    out.reverse()
    if ka is None and kb is None:
        longer = a if len(a) >= len(b) else b
        return tuple(longer[: len(longer) - n]) + tuple(out)
    if kb is None and len(b) <= len(tail_a):
        return tuple(a[: len(a) - n]) + tuple(out)
    if ka is None and len(a) <= len(tail_b):
        return tuple(b[: len(b) - n]) + tuple(out)
    if a == b:
        return a
    return None


# --- dtypes ---------------------------------------------------------------------------------------------

_KIND = {"bool": 0, "int": 1, "float": 2}
_ORDER = {
    "bool": 0,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "int32": 3,
    "int64": 4,
    "float16": 1,
    "bfloat16": 1,
    "float32": 2,
    "float64": 3,
    "complex64": 1,
    "complex128": 2,
}


def _kind(dtype: str) -> int | None:
    if dtype in _KIND:
        return _KIND[dtype]
    for cat, members in DTYPE_CATEGORIES.items():
        if cat != "any" and dtype in members:
            return _KIND[cat]
    if dtype.startswith("complex"):
        return 3
    return None


def promote(a: str, b: str) -> str:
    """The dtype torch gives ``a <op> b`` for two tensors, on concrete dtypes or categories (``"float"``)."""
    if a == b:
        return a
    ka, kb = _kind(a), _kind(b)
    if ka is None or kb is None:  # "any" on either side
        return "any"
    if ka != kb:
        hi, lo = (a, b) if ka > kb else (b, a)
        if hi.startswith("complex") and lo in ("float64", "float"):
            return "complex128" if lo == "float64" else "any"
        return hi
    if a in DTYPE_CATEGORIES or b in DTYPE_CATEGORIES:
        return a if a in DTYPE_CATEGORIES else b
    if {a, b} == {"uint8", "int8"}:
        return "int16"
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return a if _ORDER[a] >= _ORDER[b] else b


#: torch's default dtypes, which inference assumes (``torch.set_default_dtype`` is not followed): what a Python
#: float joins a promotion as, and what ``exp`` or true division make of an integer tensor.
DEFAULT_FLOAT = "float32"
DEFAULT_INT = "int64"

#: An operand of an element-wise op: a tensor's dtype (a name or a category) or a Python number.
Operand = str | int | float


def promote_operands(operands: Sequence[Operand]) -> str:
    """The dtype torch gives an element-wise op on these operands (tensors' dtypes and Python numbers).

    Tensors promote among themselves (:func:`promote`); a number joins only when it is of a higher kind than
    every tensor (float over int over bool), and then as its kind's default dtype: ``int8 + 1000`` stays int8,
    ``int64 * 0.5`` is float32, ``float16 * 2.0`` float16, and numbers alone give int64 or float32.
    """
    tensors = [o for o in operands if isinstance(o, str)]
    numbers = [o for o in operands if not isinstance(o, str)]
    dtype = tensors[0] if tensors else "bool"
    for t in tensors[1:]:
        dtype = promote(dtype, t)
    kind = _kind(dtype)
    if kind is None:
        return "any"
    for n in numbers:
        n_kind = 2 if isinstance(n, float) else 1
        if n_kind > kind:
            dtype, kind = (DEFAULT_FLOAT if n_kind == 2 else DEFAULT_INT), n_kind
    return dtype


def to_floating(dtype: str) -> str:
    """``dtype`` as a floating op returns it: floating (and complex) dtypes are kept, integers and bool become
    :data:`DEFAULT_FLOAT` (``exp`` of an int64 tensor is float32)."""
    kind = _kind(dtype)
    if kind is None:
        return "any"
    return dtype if kind >= 2 else DEFAULT_FLOAT


@dataclass(frozen=True)
class DtypeRule:
    """How an element-wise op's output dtype follows from its operands (tensors' dtypes, Python numbers)."""

    name: str
    doc: str

    def result(self, operands: Sequence[Operand]) -> str:
        if self.name == "same":
            return operands[0] if isinstance(operands[0], str) else promote_operands(operands)
        if self.name == "bool":
            return "bool"
        promoted = promote_operands(operands)
        return to_floating(promoted) if self.name == "int_to_float" else promoted


#: The dtype behaviours element-wise ops declare by name (``ops/_elementwise_rows.py``), so no op needs its own
#: dtype inference. The output port's dtype rule each implies, for the docs: ``same:<first input>``,
#: ``any``, ``float``, ``bool``.
DTYPE_RULES: dict[str, DtypeRule] = {
    r.name: r
    for r in (
        DtypeRule("same", "the input's dtype"),
        DtypeRule("promote", "torch's type promotion of the operands (a number joins only as a higher kind)"),
        DtypeRule("int_to_float", "torch's type promotion of the operands, with integers and bool made float32"),
        DtypeRule("bool", "bool"),
    )
}


# --- sliding windows (conv, pool) -----------------------------------------------------------------------


def window_out(
    size: Dim,
    kernel: int,
    stride: int,
    padding: int,
    dilation: int,
    *,
    axis: str,
    ceil_mode: bool = False,
) -> Dim:
    """Output length of a sliding window over ``size`` (torch's conv/pool formula, ceil mode included).

    Raises:
        InferError: E_SHAPE when the padded input is shorter than the window (torch would raise too).
    """
    reach = dilation * (kernel - 1) + 1
    slack = stride - 1 if ceil_mode else 0  # ceil mode lets the last window hang over the end
    span = dim_sub(dim_add(size, 2 * padding), reach)
    if isinstance(span, int) and span + slack < 0:
        padded = f", padded to {format_dim(dim_add(size, 2 * padding))}" if padding else ""
        raise InferError(
            f"the input's {axis} ({format_dim(size)}{padded}) is smaller than the window "
            f"({reach} = dilation*(kernel_size-1)+1)",
            port="x",
            expected=f"{axis} >= {reach - 2 * padding - slack}",
            actual=format_dim(size),
            hint="use a smaller kernel_size or dilation, more padding, or a larger input",
        )
    if not isinstance(span, int) and reach - 2 * padding - slack > 0:
        require(size, reach - 2 * padding - slack, axis)
    if not ceil_mode:
        return dim_add(dim_floordiv(span, stride), 1)
    out = dim_add(dim_floordiv(dim_add(span, slack), stride), 1)
    # torch drops the last window when it would start inside the right padding only.
    if isinstance(out, int) and isinstance(size, int):
        return out - 1 if (out - 1) * stride >= size + padding else out
    if reach - padding >= stride:  # the last window can never start in the right padding
        return out
    return unknown_dim()


def check_window_padding(kernel: tuple[int, ...], padding: tuple[int, ...]) -> None:
    """Pools accept at most half the kernel size as padding (whatever the dilation), as torch does."""
    for k, p in zip(kernel, padding):
        if p > k // 2:
            raise InferError(
                f"padding {p} is more than half the kernel size {k}",
                code="E_PARAM",
                param="padding",
                expected=f"padding <= {k // 2}",
                actual=p,
                hint="torch pools pad each side with at most kernel_size // 2",
            )


def concrete_dtype(p: Any) -> str | None:
    """An op's ``dtype`` parameter, which must name a dtype (``float32``), not a category (``float``); ``None``
    when it is not given. Shared by the ops that take one (reductions, ``arange``, the ``*_like``/``new_*``
    tensors).

    Raises:
        InferError: E_PARAM for a category.
    """
    if p.dtype is None:
        return None
    if p.dtype not in DTYPES:
        raise InferError(
            f"dtype must be a concrete dtype, got the category {p.dtype!r}",
            code="E_PARAM",
            param="dtype",
            expected="a dtype such as float32, int64, bool",
            actual=p.dtype,
        )
    return str(p.dtype)


def torch_dtype(name: str | None) -> Any:
    """The torch dtype named ``name`` (``None`` for none), imported only when a builder asks."""
    import torch

    return None if name is None else getattr(torch, name)


__all__ = [
    "Requirement",
    "DEFAULT_FLOAT",
    "DEFAULT_INT",
    "DTYPE_RULES",
    "DtypeRule",
    "Operand",
    "broadcast_dim",
    "broadcast_shapes",
    "check_window_padding",
    "collect_requirements",
    "concrete_dtype",
    "norm_dim",
    "open_at",
    "open_index",
    "pair",
    "require",
    "product",
    "promote",
    "promote_operands",
    "provably_different",
    "shape_of_rank",
    "to_floating",
    "torch_dtype",
    "window_out",
]
