"""The layers that rearrange, cut, join and pad tensors: concat, split, reshape, permute, transpose, expand,
select, slice, pad (``hndl.ops._shape``, ``_index``, ``_tensor``). Each holds its dims and sizes, fixed at
construction; a size that follows the call is read from an input's shape in ``forward``.

The fast path writes out the ``forward`` of all but ``Split`` (:mod:`._inline`'s table, reading the settings
from the instance dict per call; a ``Concat`` of two inputs, a ``Reshape`` with no size read per call, an
``Expand`` of one input): a change to one of these ``forward`` methods is a change to its template there too
(``tests/core/test_runtime_inline.py`` compares the two).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from .._size_reads import SizeRead, plan_entry, read_size

__all__ = ["Concat", "Expand", "Pad", "Permute", "Reshape", "Select", "Slice", "Split", "Stack", "Transpose"]


class Concat(nn.Module):
    """``torch.cat(inputs, dim)``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, *inputs: Tensor) -> Tensor:
        return torch.cat(inputs, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Stack(nn.Module):
    """``torch.stack(inputs, dim)``."""

    def __init__(self, dim: int = 0) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, *inputs: Tensor) -> Tensor:
        return torch.stack(inputs, dim=self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Split(nn.Module):
    """Split along ``dim`` into ``sections`` equal parts, or into parts of the given ``sizes``.

    Returns a tuple of the parts, or the only part itself when there is one.
    """

    def __init__(self, sections: int | None = None, sizes: list[int] | None = None, dim: int = -1) -> None:
        super().__init__()
        if (sections is None) == (sizes is None):
            raise ValueError("give exactly one of sections and sizes")
        self.sections = sections
        self.sizes = None if sizes is None else list(sizes)
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, ...]:
        if self.sizes is not None:
            parts = tuple(torch.split(x, self.sizes, dim=self.dim))
        else:
            assert self.sections is not None
            length = x.shape[self.dim]
            if length % self.sections:
                # torch.split would quietly return a different number of parts.
                raise ValueError(f"dim {self.dim} has size {length}, which {self.sections} sections do not divide")
            parts = tuple(torch.split(x, length // self.sections, dim=self.dim))
        # A node with one output produces a tensor, not a 1-tuple.
        return parts[0] if len(parts) == 1 else parts

    def extra_repr(self) -> str:
        what = f"sections={self.sections}" if self.sizes is None else f"sizes={self.sizes}"
        return f"{what}, dim={self.dim}"


class Reshape(nn.Module):
    """Reshape the dims from ``start_dim`` on into ``shape`` (``-1`` once for the rest); earlier dims stay. A size
    may be read on every call from a dim of ``x`` or of a second tensor ``like`` (a plan entry ``("x", i)`` or
    ``("like", i)``), or computed from such dims (a :class:`~hndl._size_reads.SizeRead`: ``8*h`` from ``16*h``)."""

    def __init__(self, shape: list[int | tuple[str, int] | SizeRead], start_dim: int = 0) -> None:
        super().__init__()
        plan = [plan_entry(s) for s in shape]
        self.shape = tuple(s if isinstance(s, int) else -1 for s in plan)
        self.start_dim = start_dim
        # (position in shape, what gives it): the sizes filled in per call
        self.reads = [(i, s) for i, s in enumerate(plan) if not isinstance(s, int)]

    def forward(self, x: Tensor, like: Tensor | None = None) -> Tensor:
        shape: tuple[int, ...] = self.shape
        if self.reads:
            sizes = list(shape)
            for i, read in self.reads:
                sizes[i] = read_size(read, x, like)
            shape = tuple(sizes)
        if self.start_dim == 0:
            return x.reshape(shape)
        return x.reshape(x.shape[: self.start_dim] + shape)

    def extra_repr(self) -> str:
        reads = (
            f", reads={[(i, str(r) if isinstance(r, SizeRead) else r) for i, r in self.reads]}" if self.reads else ""
        )
        return f"shape={list(self.shape)}, start_dim={self.start_dim}{reads}"


class Permute(nn.Module):
    """``x.permute(dims)``."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = tuple(dims)

    def forward(self, x: Tensor) -> Tensor:
        return x.permute(self.dims)

    def extra_repr(self) -> str:
        return f"dims={list(self.dims)}"


class Transpose(nn.Module):
    """``x.transpose(dim0, dim1)``."""

    def __init__(self, dim0: int, dim1: int) -> None:
        super().__init__()
        self.dim0 = dim0
        self.dim1 = dim1

    def forward(self, x: Tensor) -> Tensor:
        return x.transpose(self.dim0, self.dim1)

    def extra_repr(self) -> str:
        return f"dim0={self.dim0}, dim1={self.dim1}"


class Expand(nn.Module):
    """``x.expand(sizes)``, each size an int, read on every call from a dim of ``x`` or of a second tensor
    ``like`` (a plan entry ``("x", i)`` or ``("like", i)``), or computed from such dims (a
    :class:`~hndl._size_reads.SizeRead`)."""

    def __init__(self, plan: list[tuple[str, int] | int | SizeRead]) -> None:
        super().__init__()
        self.plan = [plan_entry(entry) for entry in plan]
        # x.expand keeps a dim given as -1; the dims read from like, and those computed, are filled in per call
        self.sizes = [e if isinstance(e, int) else -1 for e in self.plan]
        self.from_like = [
            (i, e)
            for i, e in enumerate(self.plan)
            if isinstance(e, SizeRead) or (isinstance(e, tuple) and e[0] == "like")
        ]
        # without like, only computed sizes need filling in (decided here, not on every call)
        self.computes = any(isinstance(e, SizeRead) for _, e in self.from_like)

    def forward(self, x: Tensor, like: Tensor | None = None) -> Tensor:
        if not self.from_like or (like is None and not self.computes):
            return x.expand(self.sizes)
        sizes = list(self.sizes)
        for i, read in self.from_like:
            sizes[i] = read_size(read, x, like)
        return x.expand(sizes)

    def extra_repr(self) -> str:
        return f"plan={[str(e) if isinstance(e, SizeRead) else e for e in self.plan]}"


class Select(nn.Module):
    """``x.select(dim, index)``: one position of ``dim``, which is removed."""

    def __init__(self, dim: int, index: int) -> None:
        super().__init__()
        self.dim = dim
        self.index = index

    def forward(self, x: Tensor) -> Tensor:
        return x.select(self.dim, self.index)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, index={self.index}"


class Slice(nn.Module):
    """``x[..., start:end:step, ...]`` along ``dim``."""

    def __init__(self, dim: int, start: int = 0, end: int | None = None, step: int = 1) -> None:
        super().__init__()
        self.dim = dim
        self.start = start
        self.end = end
        self.step = step

    def forward(self, x: Tensor) -> Tensor:
        index = [slice(None)] * (self.dim % x.dim()) + [slice(self.start, self.end, self.step)]
        return x[tuple(index)]

    def extra_repr(self) -> str:
        return f"dim={self.dim}, start={self.start}, end={self.end}, step={self.step}"


class FillRegion(nn.Module):
    """A copy of ``x`` with ``value`` written into the region ``x[..., start:end:step, ...]`` along ``dims``."""

    def __init__(
        self, dims: list[int], start: list[int], end: list[int | None], step: list[int] | None, value: float
    ) -> None:
        super().__init__()
        self.dims = tuple(dims)
        steps = step if step is not None else [1] * len(dims)
        self.slices = tuple(slice(s, e, k) for s, e, k in zip(start, end, steps, strict=True))
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        index: list[Any] = [slice(None)] * x.dim()
        for d, part in zip(self.dims, self.slices):
            index[d % x.dim()] = part
        y = x.clone()
        y[tuple(index)] = self.value
        return y

    def extra_repr(self) -> str:
        return f"dims={list(self.dims)}, slices={list(self.slices)}, value={self.value}"


class Pad(nn.Module):
    """``torch.nn.functional.pad(x, pad, mode, value)``."""

    def __init__(self, pad: list[int], mode: str = "constant", value: float = 0.0) -> None:
        super().__init__()
        self.pad = tuple(pad)
        self.mode = mode
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        if self.mode == "constant":
            return F.pad(x, self.pad, value=self.value)
        return F.pad(x, self.pad, mode=self.mode)

    def extra_repr(self) -> str:
        return f"pad={list(self.pad)}, mode={self.mode!r}, value={self.value}"
