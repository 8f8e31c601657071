"""Small ``torch.nn.Module`` classes for the built-in ops torch has no module for.

Each holds only its configuration, fixed at construction (the op's parameters, already validated by the
checker), and its ``forward`` runs tensor operations only: no Python state is read or written per call
beyond plain attributes, so the layers trace, compile and vmap like hand-written code.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = [
    "Add",
    "Concat",
    "MatMul",
    "Mean",
    "Mul",
    "Permute",
    "Reshape",
    "SelfAttention",
    "Split",
    "Transpose",
]


class Add(nn.Module):
    """``a + b`` with broadcasting."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a + b


class Mul(nn.Module):
    """``a * b`` (elementwise) with broadcasting."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a * b


class MatMul(nn.Module):
    """``torch.matmul(a, b)``."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.matmul(a, b)


class Concat(nn.Module):
    """``torch.cat(inputs, dim)``."""

    def __init__(self, dim: int = -1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, *inputs: Tensor) -> Tensor:
        return torch.cat(inputs, dim=self.dim)

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
    """Reshape the dims from ``start_dim`` on into ``shape`` (``-1`` once for the rest); earlier dims stay."""

    def __init__(self, shape: list[int], start_dim: int = 0) -> None:
        super().__init__()
        self.shape = tuple(shape)
        self.start_dim = start_dim

    def forward(self, x: Tensor) -> Tensor:
        if self.start_dim == 0:
            return x.reshape(self.shape)
        return x.reshape(x.shape[: self.start_dim] + self.shape)

    def extra_repr(self) -> str:
        return f"shape={list(self.shape)}, start_dim={self.start_dim}"


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


class Mean(nn.Module):
    """``x.mean(dim, keepdim)`` over one or more dims."""

    def __init__(self, dim: list[int], keepdim: bool = False) -> None:
        super().__init__()
        self.dim = tuple(dim)
        self.keepdim = keepdim

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=self.dim, keepdim=self.keepdim)

    def extra_repr(self) -> str:
        return f"dim={list(self.dim)}, keepdim={self.keepdim}"


class SelfAttention(nn.Module):
    """Multi-head self-attention on ``[B, T, D]``, GPT-2 style.

    ``qkv`` (``Linear(D, 3D)``) projects to queries, keys and values, which are split into ``num_heads`` heads
    of ``D // num_heads`` and combined by :func:`torch.nn.functional.scaled_dot_product_attention`; ``proj``
    (``Linear(D, D)``) maps the heads back. Attention dropout applies in training mode only.
    """

    def __init__(
        self, embed_dim: int, num_heads: int, *, causal: bool = False, dropout: float = 0.0, bias: bool = True
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.causal = causal
        self.dropout = dropout
        self.qkv = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal
        )
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, causal={self.causal}, dropout={self.dropout}"
