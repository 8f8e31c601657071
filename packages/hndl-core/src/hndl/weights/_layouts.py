"""Layouts: the ways a checkpoint can store a tensor differently from the model that loads it.

A layout is an object with two methods that always agree: :meth:`Layout.expected_shape` says, from the
checkpoint tensors' shapes alone, what shape the model's tensor gets (or why it cannot be read that way), and
:meth:`Layout.convert` does it to the values. The loader checks every shape with the first before it reads any
value, and runs the second once on meta tensors to confirm, so a layout written by a user is held to what it
claims. A new way of storing a tensor (a rotary q/k permutation) is a new object, not a branch in the loader.

Nothing here imports torch at module level: key maps are declared where torch is not loaded (``hndl.zoo``).
"""

from __future__ import annotations

import itertools
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch

__all__ = ["Chain", "Concat", "Flatten", "Layout", "PerHead", "Rows", "Same", "Transpose", "as_layout"]

Shape = tuple[int, ...]


class Layout(ABC):
    """How one model tensor is made from one (or, for :class:`Concat`, several) checkpoint tensors.

    Subclass it for a layout hndl does not have: set :attr:`inputs`, implement both methods so that
    ``convert(*tensors).shape == expected_shape(*shapes)``, and give it a ``__str__`` for reports. Make it a
    frozen dataclass so equal layouts compare equal.
    """

    #: How many checkpoint tensors the layout takes: 1, or None for one or more (a concatenation).
    inputs: ClassVar[int | None] = 1

    @abstractmethod
    def expected_shape(self, *shapes: Shape) -> Shape:
        """The model tensor's shape when the checkpoint tensors have ``shapes``.

        Raises:
            ValueError: with the reason, when tensors of these shapes cannot be read this way.
        """

    @abstractmethod
    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        """The model tensor's values (a view where possible: the loader copies it into the model)."""


@dataclass(frozen=True)
class Same(Layout):
    """The tensor as it is."""

    def expected_shape(self, *shapes: Shape) -> Shape:
        return shapes[0]

    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        return tensors[0]

    def __str__(self) -> str:
        return "same"


@dataclass(frozen=True)
class Transpose(Layout):
    """Dimensions ``dim0`` and ``dim1`` swapped: transformers' GPT-2 ``Conv1D`` holds ``[in, out]`` where
    ``torch.nn.Linear`` holds ``[out, in]``."""

    dim0: int = 0
    dim1: int = 1

    def expected_shape(self, *shapes: Shape) -> Shape:
        shape = list(shapes[0])
        if not (-len(shape) <= self.dim0 < len(shape) and -len(shape) <= self.dim1 < len(shape)):
            raise ValueError(f"a {len(shape)}-d tensor has no dims {self.dim0} and {self.dim1} to swap")
        shape[self.dim0], shape[self.dim1] = shape[self.dim1], shape[self.dim0]
        return tuple(shape)

    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        return tensors[0].transpose(self.dim0, self.dim1)

    def __str__(self) -> str:
        return "transpose" if (self.dim0, self.dim1) == (0, 1) else f"transpose {self.dim0},{self.dim1}"


def _fraction(text: str | int | Fraction) -> Fraction:
    value = Fraction(text)
    if not 0 <= value <= 1:
        raise ValueError(f"a row fraction must be between 0 and 1, got {text}")
    return value


@dataclass(frozen=True)
class Rows(Layout):
    """A part of a fused tensor: rows ``start`` to ``stop`` (fractions of the whole) along ``dim``.

    ``torch.nn.MultiheadAttention``'s ``in_proj_weight`` stacks the queries', keys' and values' projections:
    ``Rows(0, Fraction(1, 3))`` is the queries'. :meth:`split` makes the parts for any sizes, so grouped-query
    attention's ``[H*D + 2*KV*D, E]`` is ``Rows.split(H, KV, KV)``.
    """

    start: Fraction
    stop: Fraction
    dim: int = 0

    def __post_init__(self) -> None:
        start, stop = _fraction(self.start), _fraction(self.stop)
        if start >= stop:
            raise ValueError(f"rows {start}..{stop} is empty: start must be below stop")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "stop", stop)

    @classmethod
    def split(cls, *sizes: int, dim: int = 0) -> tuple[Rows, ...]:
        """One :class:`Rows` per part of a tensor fused from parts in proportion ``sizes`` (``split(1, 1, 1)``:
        thirds; ``split(32, 8, 8)``: grouped-query attention's q, k, v with 32 query and 8 key/value heads)."""
        if not sizes or any(not isinstance(s, int) or s <= 0 for s in sizes):
            raise ValueError(f"split sizes must be positive integers, got {list(sizes)}")
        total = sum(sizes)
        edges = (0, *itertools.accumulate(sizes))
        return tuple(cls(Fraction(a, total), Fraction(b, total), dim) for a, b in itertools.pairwise(edges))

    def span(self, total: int) -> tuple[int, int]:
        """The row range this part takes of ``total`` rows.

        Raises:
            ValueError: when ``total`` does not divide at the part's edges.
        """
        a, b = total * self.start, total * self.stop
        if a.denominator != 1 or b.denominator != 1:
            raise ValueError(f"{total} rows do not split at {self.start} and {self.stop}")
        return int(a), int(b)

    def expected_shape(self, *shapes: Shape) -> Shape:
        shape = list(shapes[0])
        if not -len(shape) <= self.dim < len(shape):
            raise ValueError(f"a {len(shape)}-d tensor has no dim {self.dim} to take rows of")
        a, b = self.span(shape[self.dim])
        shape[self.dim] = b - a
        return tuple(shape)

    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        tensor = tensors[0]
        a, b = self.span(tensor.shape[self.dim])
        return tensor.narrow(self.dim, a, b - a)

    def __str__(self) -> str:
        where = "" if self.dim == 0 else f" of dim {self.dim}"
        return f"rows {self.start}..{self.stop}{where}"


@dataclass(frozen=True)
class PerHead(Layout):
    """A part of a tensor fused head by head: along ``dim``, ``heads`` blocks one after the other, and rows
    ``start`` to ``stop`` (fractions of one block) of each, joined.

    GPT-NeoX's ``query_key_value.weight`` is ``[H * 3 * Dh, D]`` laid out as ``[H, 3, Dh, D]``: each head's
    query, key and value rows together, where :class:`Rows` would read all the queries first. Its queries' part
    is ``PerHead(0, Fraction(1, 3), heads=H)``, in a rule ``"per_head(0, 3, heads=H)"``. :meth:`split` makes the
    parts for unequal sizes: a grouped layout that stores, per key/value group, its ``g`` query heads then one
    key and one value head is ``PerHead.split(g, 1, 1, heads=groups)``.
    """

    start: Fraction
    stop: Fraction
    heads: int
    dim: int = 0

    def __post_init__(self) -> None:
        start, stop = _fraction(self.start), _fraction(self.stop)
        if start >= stop:
            raise ValueError(f"rows {start}..{stop} of each head is empty: start must be below stop")
        if isinstance(self.heads, bool) or not isinstance(self.heads, int) or self.heads < 1:
            raise ValueError(f"heads must be a positive integer, got {self.heads!r}")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "stop", stop)

    @classmethod
    def split(cls, *sizes: int, heads: int, dim: int = 0) -> tuple[PerHead, ...]:
        """One :class:`PerHead` per part of each head's block, the parts in proportion ``sizes``
        (``split(1, 1, 1, heads=8)``: GPT-NeoX's query, key and value of 8 heads)."""
        return tuple(cls(r.start, r.stop, heads, dim) for r in Rows.split(*sizes))

    def _block(self, shape: Shape) -> tuple[int, int, int, int]:
        """``(dim, block, a, b)``: the dim normalised, one head's block size and the rows taken of each block."""
        if not -len(shape) <= self.dim < len(shape):
            raise ValueError(f"a {len(shape)}-d tensor has no dim {self.dim} to take heads of")
        dim = self.dim % len(shape)
        if shape[dim] % self.heads:
            raise ValueError(f"{shape[dim]} rows do not split into {self.heads} heads")
        block = shape[dim] // self.heads
        a, b = block * self.start, block * self.stop
        if a.denominator != 1 or b.denominator != 1:
            raise ValueError(f"a head's {block} rows do not split at {self.start} and {self.stop}")
        return dim, block, int(a), int(b)

    def expected_shape(self, *shapes: Shape) -> Shape:
        shape = list(shapes[0])
        dim, _block, a, b = self._block(shapes[0])
        shape[dim] = self.heads * (b - a)
        return tuple(shape)

    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        tensor = tensors[0]
        dim, block, a, b = self._block(tuple(tensor.shape))
        return tensor.unflatten(dim, (self.heads, block)).narrow(dim + 1, a, b - a).flatten(dim, dim + 1)

    def __str__(self) -> str:
        where = "" if self.dim == 0 else f" of dim {self.dim}"
        return f"rows {self.start}..{self.stop} of each of {self.heads} heads{where}"


@dataclass(frozen=True)
class Flatten(Layout):
    """All dims in one: transformers' ConvNeXt-V2 keeps its GRN's ``weight`` as ``[1, 1, 1, C]``, hndl's ``grn``
    (and timm) as ``[C]``."""

    def expected_shape(self, *shapes: Shape) -> Shape:
        size = 1
        for n in shapes[0]:
            size *= n
        return (size,)

    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        return tensors[0].reshape(-1)

    def __str__(self) -> str:
        return "flatten"


@dataclass(frozen=True)
class Concat(Layout):
    """Several checkpoint tensors joined along ``dim``, in the rule's order: separate ``q_proj``, ``k_proj`` and
    ``v_proj`` weights into one fused ``qkv``."""

    dim: int = 0
    inputs: ClassVar[int | None] = None

    def expected_shape(self, *shapes: Shape) -> Shape:
        first = shapes[0]
        if not -len(first) <= self.dim < len(first):
            raise ValueError(f"a {len(first)}-d tensor has no dim {self.dim} to join along")
        dim = self.dim % len(first)
        for shape in shapes[1:]:
            if len(shape) != len(first) or any(a != b for i, (a, b) in enumerate(zip(shape, first)) if i != dim):
                shown = ", ".join(str(list(s)) for s in shapes)
                raise ValueError(f"shapes {shown} differ outside dim {self.dim}")
        return tuple(sum(s[dim] for s in shapes) if i == dim else n for i, n in enumerate(first))

    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        import torch

        return torch.cat(tensors, dim=self.dim)

    def __str__(self) -> str:
        return f"concat dim {self.dim}"


@dataclass(frozen=True)
class Chain(Layout):
    """Layouts applied in turn: ``Chain(Transpose(), Rows(0, Fraction(1, 3)))`` reads the queries' part of a
    fused ``Conv1D`` weight. Only the first may take several tensors."""

    layouts: tuple[Layout, ...]

    def __init__(self, *layouts: Layout | str) -> None:
        parsed = tuple(as_layout(layout) for layout in layouts)
        if not parsed:
            raise ValueError("a chain needs at least one layout")
        if any(layout.inputs != 1 for layout in parsed[1:]):
            raise ValueError("only the first layout of a chain may take several tensors")
        object.__setattr__(self, "layouts", parsed)

    @property
    def inputs(self) -> int | None:  # type: ignore[override]  # a property where the base has a class attribute
        return self.layouts[0].inputs

    def expected_shape(self, *shapes: Shape) -> Shape:
        shape = self.layouts[0].expected_shape(*shapes)
        for layout in self.layouts[1:]:
            shape = layout.expected_shape(shape)
        return shape

    def convert(self, *tensors: torch.Tensor) -> torch.Tensor:
        tensor = self.layouts[0].convert(*tensors)
        for layout in self.layouts[1:]:
            tensor = layout.convert(tensor)
        return tensor

    def __str__(self) -> str:
        return ", then ".join(str(layout) for layout in self.layouts)


_ROWS = re.compile(r"rows (\d+)/(\d+)\.\.(\d+)/(\d+)")
_PER_HEAD = re.compile(r"per_head\(\s*(\d+)\s*,\s*(\d+)\s*,\s*heads\s*=\s*(\d+)\s*\)")


def as_layout(value: Layout | str) -> Layout:
    """A layout object from itself or its short name: ``"same"``, ``"transpose"``, ``"concat"``, ``"flatten"``,
    ``"rows i/n..j/n"`` (:class:`Rows`), ``"per_head(i, n, heads=H)"`` (part ``i`` of ``n`` equal parts of each of
    ``H`` heads' blocks: :class:`PerHead`).

    Raises:
        ValueError: for anything else.
    """
    if isinstance(value, Layout):
        return value
    if value == "same":
        return Same()
    if value == "transpose":
        return Transpose()
    if value == "concat":
        return Concat()
    if value == "flatten":
        return Flatten()
    m = _ROWS.fullmatch(value) if isinstance(value, str) else None
    if m is not None:
        a, n, b, d = map(int, m.groups())
        if n == 0 or d == 0:
            raise ValueError(f"layout {value!r} divides by zero")
        return Rows(Fraction(a, n), Fraction(b, d))
    m = _PER_HEAD.fullmatch(value) if isinstance(value, str) else None
    if m is not None:
        part, parts, heads = map(int, m.groups())
        if not part < parts:
            raise ValueError(f"layout {value!r}: part {part} of {parts} parts does not exist (parts count from 0)")
        try:
            return PerHead(Fraction(part, parts), Fraction(part + 1, parts), heads)
        except ValueError as exc:
            raise ValueError(f"layout {value!r}: {exc}") from None
    if isinstance(value, str) and value.startswith("per_head"):
        raise ValueError(
            f"layout {value!r} is not 'per_head(i, n, heads=H)' with whole numbers: part i of n equal parts of each "
            "of H heads (GPT-NeoX's query_key_value: per_head(0, 3, heads=H) for the queries)"
        )
    raise ValueError(
        f"unknown layout {value!r}: same, transpose, concat, flatten, 'rows i/n..j/n', 'per_head(i, n, heads=H)' or "
        "a hndl.weights.Layout object"
    )


def shapes_text(shapes: Sequence[Shape]) -> str:
    """``[3, 4]`` or ``[3, 4], [3, 4]``: checkpoint shapes as messages show them."""
    return ", ".join(str(list(s)) for s in shapes)
