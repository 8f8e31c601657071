"""Small ``torch.nn.Module`` classes for the built-in ops torch has no module for.

Each holds only its configuration, fixed at construction (the op's parameters, already validated by the
checker), and its ``forward`` runs tensor operations only: no Python state is read or written per call
beyond plain attributes, so the layers trace, compile and vmap like hand-written code.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from ._attention_layers import SDPA, Attention, AttentionMask, RelativePositionBias, Rotary, as_rank4
from ._extra_layers import GELUTanhFormula, GlobalResponseNorm, OffsetRMSNorm, PoolAtToken, QuickGELU  # noqa: F401
from ._tensor_layers import Arange, Einsum, FullLike, Gather, Index, NewFull, Unbind  # noqa: F401

__all__ = [
    "Add",
    "AlwaysDropout",
    "Attention",
    "AttentionMask",
    "Binary",
    "Cast",
    "Concat",
    "CrossAttention",
    "DropPath",
    "FixedTensor",
    "GRU",
    "LSTM",
    "Expand",
    "LayerNorm2d",
    "LearnedTensor",
    "LinearInOut",
    "MatMul",
    "Mean",
    "Mul",
    "Pad",
    "Permute",
    "Positions",
    "RelativePositionBias",
    "Reshape",
    "Rotary",
    "SDPA",
    "Scale",
    "ScalarTensor",
    "Select",
    "SelfAttention",
    "Slice",
    "Split",
    "TensorScalar",
    "Transpose",
    "TypeAs",
    "Unary",
    "Where",
]


class Add(nn.Module):
    """``a + b`` with broadcasting."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a + b


class Mul(nn.Module):
    """``a * b`` (elementwise) with broadcasting."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a * b


def function(name: str) -> Callable[..., Any]:
    """The function a dotted name refers to, in torch or Python's :mod:`operator` module: ``"torch.exp"``,
    ``"torch.nn.functional.hardswish"``, ``"operator.sub"``.

    Raises:
        ValueError: for any other name.
    """
    root_name, _, path = name.partition(".")
    roots = {"torch": torch, "operator": operator}
    if root_name not in roots or not path:
        raise ValueError(f"{name!r} is not a function of torch or operator")
    found: Any = roots[root_name]
    try:
        for part in path.split("."):
            found = getattr(found, part)
    except AttributeError:
        raise ValueError(f"{name!r} is not a function of torch or operator") from None
    if not callable(found):
        raise ValueError(f"{name!r} is not a function")
    return found


class Unary(nn.Module):
    """``fn(x, **kwargs)`` for a function of one tensor named at construction: ``Unary("torch.exp")``,
    ``Unary("torch.roll", shifts=(3,), dims=(1,))``. The name stays readable as ``function``."""

    def __init__(self, function_name: str, **kwargs: Any) -> None:
        super().__init__()
        self.function = function_name
        self.fn = function(function_name)
        self.kwargs = kwargs

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x, **self.kwargs)

    def extra_repr(self) -> str:
        return ", ".join([self.function, *(f"{k}={v!r}" for k, v in self.kwargs.items())])


class Binary(nn.Module):
    """``fn(a, b)`` for a function of two tensors named at construction: ``Binary("torch.sub")``."""

    def __init__(self, function_name: str) -> None:
        super().__init__()
        self.function = function_name
        self.fn = function(function_name)

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return self.fn(a, b)

    def extra_repr(self) -> str:
        return self.function


class TensorScalar(nn.Module):
    """``fn(x, scalar)``: a binary function with a number as its right operand (``TensorScalar("operator.sub",
    1)`` is ``x - 1``). The number promotes as a Python number does in torch."""

    def __init__(self, function_name: str, scalar: float) -> None:
        super().__init__()
        self.function = function_name
        self.fn = function(function_name)
        self.scalar = scalar

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(x, self.scalar)

    def extra_repr(self) -> str:
        return f"{self.function}, scalar={self.scalar!r}"


class ScalarTensor(nn.Module):
    """``fn(scalar, x)``: a binary function with a number as its left operand (``ScalarTensor("operator.sub",
    1)`` is ``1 - x``, which torch runs as ``torch.rsub(x, 1)``)."""

    def __init__(self, function_name: str, scalar: float) -> None:
        super().__init__()
        self.function = function_name
        self.fn = function(function_name)
        self.scalar = scalar

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(self.scalar, x)

    def extra_repr(self) -> str:
        return f"{self.function}, scalar={self.scalar!r}"


class Where(nn.Module):
    """``torch.where(condition, a, b)``; ``a`` or ``b`` given at construction is a number and is not passed:
    the inputs are then ``(condition, the other branch)`` or ``(condition,)``."""

    def __init__(self, a: float | None = None, b: float | None = None) -> None:
        super().__init__()
        self.a = a
        self.b = b

    def forward(self, condition: Tensor, x: Tensor | None = None, y: Tensor | None = None) -> Tensor:
        if self.a is None:
            return torch.where(condition, x, y if self.b is None else self.b)  # type: ignore[arg-type]
        return torch.where(condition, self.a, x if self.b is None else self.b)  # type: ignore[arg-type]

    def extra_repr(self) -> str:
        return f"a={self.a!r}, b={self.b!r}"


class Cast(nn.Module):
    """``x.to(dtype)``: the input itself when it already has that dtype, as ``Tensor.to`` does."""

    def __init__(self, dtype: str | torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype).removeprefix("torch."))

    def forward(self, x: Tensor) -> Tensor:
        return x.to(self.dtype)

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}"


class TypeAs(nn.Module):
    """``x.type_as(like)``: ``x`` in ``like``'s dtype, read on every call; ``x`` itself when they agree."""

    def forward(self, x: Tensor, like: Tensor) -> Tensor:
        return x.type_as(like)


class AlwaysDropout(nn.Dropout):
    """Dropout in eval mode too (Monte Carlo dropout): ``F.dropout(x, p, training=True)`` whatever the mode."""

    def forward(self, x: Tensor) -> Tensor:
        return nn.functional.dropout(x, self.p, True, self.inplace)


class DropPath(nn.Module):
    """Stochastic depth (torchvision's ``StochasticDepth``, timm's ``DropPath``): in training mode, zero whole
    samples (``mode="row"``) or the whole batch (``"batch"``) with probability ``p`` and scale what is kept by
    ``1 / (1 - p)``; the input itself in eval mode or with ``p`` 0. Draws the same random numbers as
    ``torchvision.ops.stochastic_depth``, so with the same seed the two agree bit for bit."""

    def __init__(self, p: float, mode: str = "row") -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
        if mode not in ("row", "batch"):
            raise ValueError(f"mode has to be either 'batch' or 'row', but got {mode}")
        self.p = p
        self.mode = mode

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        survival = 1.0 - self.p
        size = [x.shape[0]] + [1] * (x.ndim - 1) if self.mode == "row" else [1] * x.ndim
        noise = torch.empty(size, dtype=x.dtype, device=x.device).bernoulli_(survival)
        if survival > 0.0:
            noise.div_(survival)
        return x * noise

    def extra_repr(self) -> str:
        return f"p={self.p}, mode={self.mode!r}"


class LayerNorm2d(nn.LayerNorm):
    """Layer normalisation of ``[N, C, H, W]`` over the channels, as torchvision's ConvNeXt (and timm) compute
    it: moved channels-last, ``F.layer_norm``, moved back. Its parameters are ``nn.LayerNorm``'s (``weight``,
    ``bias`` of shape ``[C]``), so a ``LayerNorm2d`` state_dict loads as it is."""

    def forward(self, x: Tensor) -> Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


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

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        h = self.num_heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        if mask is None:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal
            )
        else:
            mask = as_rank4(mask)
            y = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=_with_causal(mask, t, t) if self.causal else mask,
                dropout_p=self.dropout if self.training else 0.0,
            )
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, causal={self.causal}, dropout={self.dropout}"


def _with_causal(mask: Tensor, t: int, s: int) -> Tensor:
    """``mask`` restricted to the causal pattern (query i sees keys 0..i), as ``is_causal`` would; SDPA
    takes either a mask or ``is_causal``, never both."""
    causal = torch.ones(t, s, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, float("-inf"))


class CrossAttention(nn.Module):
    """Multi-head attention of ``x`` ``[B, T, D]`` over ``kv`` ``[B, S, E]``.

    ``q`` (``Linear(D, D)``) projects the queries, ``kv`` (``Linear(E, 2D)``) the keys and values (in that
    order), heads of ``D // num_heads`` are combined by :func:`torch.nn.functional.scaled_dot_product_attention`
    with an optional mask (``[B, S]``, ``[B, T, S]`` or broadcastable to ``[B, num_heads, T, S]``, see
    :func:`as_rank4`), and ``proj`` (``Linear(D, D)``) maps the
    heads back.
    """

    def __init__(
        self,
        embed_dim: int,
        kdim: int,
        num_heads: int,
        *,
        causal: bool = False,
        dropout: float = 0.0,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}")
        self.embed_dim = embed_dim
        self.kdim = kdim
        self.num_heads = num_heads
        self.causal = causal
        self.dropout = dropout
        self.q = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.kv = nn.Linear(kdim, 2 * embed_dim, bias=bias)
        self.proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x: Tensor, kv: Tensor, mask: Tensor | None = None) -> Tensor:
        b, t, d = x.shape
        s = kv.shape[1]
        h = self.num_heads
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k, v = self.kv(kv).split(d, dim=2)
        k = k.view(b, s, h, d // h).transpose(1, 2)
        v = v.view(b, s, h, d // h).transpose(1, 2)
        dropout = self.dropout if self.training else 0.0
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=self.causal)
        else:
            mask = as_rank4(mask)
            attn_mask = _with_causal(mask, t, s) if self.causal else mask
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, kdim={self.kdim}, num_heads={self.num_heads}, causal={self.causal}, "
            f"dropout={self.dropout}"
        )


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


class LinearInOut(nn.Module):
    """An affine map whose weight is ``[in_features, out_features]`` (the ``linear_in_out`` op): transformers'
    ``Conv1D``, computed as it does (``torch.addmm`` on the input flattened to two dims)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None
        # nn.Linear's initialisation, of the transposed weight.
        nn.init.kaiming_uniform_(self.weight.T, a=5**0.5)
        if self.bias is not None:
            bound = 1 / in_features**0.5 if in_features > 0 else 0.0
            nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)
        y = flat @ self.weight if self.bias is None else torch.addmm(self.bias, flat, self.weight)
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


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


class Scale(nn.Module):
    """``x * factor`` for a constant ``factor``."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor}"


class Expand(nn.Module):
    """``x.expand(sizes)``, each size an int or read on every call from a dim of ``x`` or of a second
    tensor ``like``: a plan entry ``("x", i)`` or ``("like", i)``."""

    def __init__(self, plan: list[tuple[str, int] | int]) -> None:
        super().__init__()
        self.plan = [entry if isinstance(entry, int) else (str(entry[0]), int(entry[1])) for entry in plan]
        # x.expand keeps a dim given as -1; the dims read from like are filled in per call
        self.sizes = [e if isinstance(e, int) else -1 for e in self.plan]
        self.from_like = [(i, e[1]) for i, e in enumerate(self.plan) if isinstance(e, tuple) and e[0] == "like"]

    def forward(self, x: Tensor, like: Tensor | None = None) -> Tensor:
        if like is None or not self.from_like:
            return x.expand(self.sizes)
        sizes = list(self.sizes)
        for i, j in self.from_like:
            sizes[i] = like.shape[j]
        return x.expand(sizes)

    def extra_repr(self) -> str:
        return f"plan={self.plan}"


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


def _last_hidden(h_n: Tensor, directions: int) -> Tensor:
    """The last layer's final hidden state, directions side by side: ``[layers*D, B, H]`` -> ``[B, D*H]``."""
    last = h_n[-directions:]
    return last.transpose(0, 1).reshape(last.shape[1], -1)


class LSTM(nn.LSTM):
    """``torch.nn.LSTM`` with ``batch_first=True`` that returns what ``output`` names: ``"sequence"``
    (``[B, T, D*H]``), ``"last"`` (``[B, D*H]``) or ``"both"`` (a pair). Its parameters are ``nn.LSTM``'s."""

    def __init__(self, input_size: int, hidden_size: int, *, output: str = "sequence", **kwargs: Any) -> None:
        super().__init__(input_size, hidden_size, batch_first=True, **kwargs)
        if output not in ("sequence", "last", "both"):
            raise ValueError(f"unknown output {output!r}")
        self.output = output

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:  # type: ignore[override]
        sequence, (h_n, _) = super().forward(x)
        if self.output == "sequence":
            return sequence
        last = _last_hidden(h_n, 2 if self.bidirectional else 1)
        return last if self.output == "last" else (sequence, last)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, output={self.output!r}"


class GRU(nn.GRU):
    """``torch.nn.GRU`` with ``batch_first=True`` that returns what ``output`` names, as :class:`LSTM` does.
    Its parameters are ``nn.GRU``'s."""

    def __init__(self, input_size: int, hidden_size: int, *, output: str = "sequence", **kwargs: Any) -> None:
        super().__init__(input_size, hidden_size, batch_first=True, **kwargs)
        if output not in ("sequence", "last", "both"):
            raise ValueError(f"unknown output {output!r}")
        self.output = output

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, Tensor]:  # type: ignore[override]
        sequence, h_n = super().forward(x)
        if self.output == "sequence":
            return sequence
        last = _last_hidden(h_n, 2 if self.bidirectional else 1)
        return last if self.output == "last" else (sequence, last)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, output={self.output!r}"
