"""The layers of the ops that pick, take apart, contract and make tensors: gather, index, unbind, einsum,
arange, the ``*_like`` and ``new_*`` fills, a dim's positions, and the tensors a node holds (a learned one, a
constant buffer) (``hndl.ops._gather``, ``_einsum``, ``_creation``, ``_tensor``, ``_constant``).

Everything is fixed at construction; a size that follows the call is read from an input's shape in ``forward``.
The fast path writes out ``LearnedTensor``'s and ``FixedTensor``'s ``forward`` (:mod:`._inline`'s table): a
change to either is a change to its template there too.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .._size_reads import SizeRead, plan_entry, read_size

__all__ = [
    "Arange",
    "Einsum",
    "FixedTensor",
    "FullLike",
    "Gather",
    "Index",
    "LearnedTensor",
    "NewFull",
    "Positions",
    "Unbind",
]


class Gather(nn.Module):
    """``torch.gather(x, dim, index)``."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor, index: Tensor) -> Tensor:
        return torch.gather(x, self.dim, index)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Index(nn.Module):
    """``x[..., i0, ..., i1]``: advanced indexing by integer tensors at the dims ``dims`` (increasing)."""

    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.dims = tuple(dims)
        self.width = self.dims[-1] + 1 if self.dims else 0

    def forward(self, x: Tensor, *indices: Tensor) -> Tensor:
        key: list[Any] = [slice(None)] * self.width
        for d, i in zip(self.dims, indices):
            key[d] = i
        return x[tuple(key)]

    def extra_repr(self) -> str:
        return f"dims={list(self.dims)}"


class Unbind(nn.Module):
    """``x.unbind(dim)`` into exactly ``size`` parts (a tensor, not a 1-tuple, when ``size`` is 1)."""

    def __init__(self, dim: int, size: int) -> None:
        super().__init__()
        self.dim = dim
        self.size = size

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, ...]:
        parts = x.unbind(self.dim)
        if len(parts) != self.size:
            # The node has size outputs: another count would hand later nodes the wrong tensors.
            raise ValueError(f"dim {self.dim} has size {len(parts)}, not the {self.size} the node declares")
        return parts[0] if self.size == 1 else parts

    def extra_repr(self) -> str:
        return f"dim={self.dim}, size={self.size}"


class Einsum(nn.Module):
    """``torch.einsum(equation, *operands)``."""

    def __init__(self, equation: str) -> None:
        super().__init__()
        self.equation = equation

    def forward(self, *operands: Tensor) -> Tensor:
        return torch.einsum(self.equation, *operands)

    def extra_repr(self) -> str:
        return repr(self.equation)


class Arange(nn.Module):
    """``torch.arange(start, x.shape[dim], step)`` on ``x``'s device (int64 unless ``dtype``)."""

    def __init__(self, dim: int, start: int = 0, step: int = 1, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.dim = dim
        self.start = start
        self.step = step
        self.dtype = dtype

    def forward(self, x: Tensor) -> Tensor:
        return torch.arange(self.start, x.shape[self.dim], self.step, dtype=self.dtype, device=x.device)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, start={self.start}, step={self.step}, dtype={self.dtype}"


class FullLike(nn.Module):
    """``torch.full_like(x, value, dtype=dtype)``: x's shape and device, x's dtype unless ``dtype``."""

    def __init__(self, value: float, dtype: torch.dtype | None = None) -> None:
        super().__init__()
        self.value = value
        self.dtype = dtype

    def forward(self, x: Tensor) -> Tensor:
        return torch.full_like(x, self.value, dtype=self.dtype)

    def extra_repr(self) -> str:
        return f"value={self.value}, dtype={self.dtype}"


class NewFull(nn.Module):
    """``x.new_full(sizes, value, dtype=dtype)``, each size an int, read on every call from a dim of ``x`` or of
    a second tensor ``like`` (a plan entry ``("x", i)`` or ``("like", i)``), or computed from such dims (a
    :class:`~hndl._size_reads.SizeRead`)."""

    def __init__(
        self, plan: list[tuple[str, int] | int | SizeRead], value: float, dtype: torch.dtype | None = None
    ) -> None:
        super().__init__()
        self.plan = [plan_entry(entry) for entry in plan]
        self.value = value
        self.dtype = dtype

    def forward(self, x: Tensor, like: Tensor | None = None) -> Tensor:
        sizes = [e if isinstance(e, int) else read_size(e, x, like) for e in self.plan]
        return x.new_full(sizes, self.value, dtype=self.dtype)

    def extra_repr(self) -> str:
        plan = [str(e) if isinstance(e, SizeRead) else e for e in self.plan]
        return f"plan={plan}, value={self.value}, dtype={self.dtype}"


class LearnedTensor(nn.Module):
    """A learned tensor of a fixed shape, returned by ``forward()`` (no inputs): a class token, a position
    embedding, a layer scale. Held as ``weight``; ``init`` is ``zeros``, ``ones``, ``full`` (every element
    ``value``), ``normal`` or ``trunc_normal`` (normal with ``std``, cut at two standard deviations)."""

    def __init__(self, shape: list[int], init: str = "normal", std: float = 0.02, value: float = 0.0) -> None:
        super().__init__()
        if init not in ("zeros", "ones", "full", "normal", "trunc_normal"):
            raise ValueError(f"unknown init {init!r}")
        self.init = init
        self.std = std
        self.value = value
        self.weight = nn.Parameter(torch.empty(shape))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            if self.init == "zeros":
                self.weight.zero_()
            elif self.init == "ones":
                self.weight.fill_(1.0)
            elif self.init == "full":
                self.weight.fill_(self.value)
            elif self.init == "normal":
                self.weight.normal_(0.0, self.std)
            else:
                nn.init.trunc_normal_(self.weight, std=self.std, a=-2 * self.std, b=2 * self.std)

    def forward(self) -> Tensor:
        return self.weight

    def extra_repr(self) -> str:
        what = f"value={self.value}" if self.init == "full" else f"std={self.std}"
        return f"shape={list(self.weight.shape)}, init={self.init!r}, {what}"


class FixedTensor(nn.Module):
    """A constant tensor, registered as the buffer ``value`` and returned by ``forward()`` (no inputs): a
    position table, an index, a mask. It moves with ``.to()`` and is in the ``state_dict`` when
    ``persistent``, like any buffer; the optimiser never sees it."""

    def __init__(self, value: Tensor, persistent: bool = True) -> None:
        super().__init__()
        self.register_buffer("value", value, persistent=persistent)

    value: Tensor

    def forward(self) -> Tensor:
        return self.value

    def extra_repr(self) -> str:
        return f"shape={list(self.value.shape)}, dtype={self.value.dtype}"


class Positions(nn.Module):
    """``torch.arange(x.shape[dim])`` on ``x``'s device: the int64 positions of one dim."""

    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return torch.arange(x.shape[self.dim], device=x.device)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"
