"""The layers whose forward is one torch function or Python operator on their inputs: the element-wise families
(``Unary``, ``Binary``, ``TensorScalar``, ``ScalarTensor``, with ``Add`` and ``Mul`` written out), ``Where``,
``Cast``, ``TypeAs``, ``Scale``, ``MatMul`` and ``Mean`` (``hndl.ops._elementwise``, ``_tensor``, ``_matmul``,
``_shape``).

A function is named by a dotted string (``"torch.exp"``, ``"operator.sub"``), resolved once at construction by
:func:`function`, so the layer's repr says what it computes and the fast path can write the call out. All but
``Where`` are written out (:mod:`._inline`'s table): a change to one of their ``forward`` methods is a change to
its template there too (``tests/core/test_runtime_inline.py`` compares the two).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

__all__ = [
    "Add",
    "Binary",
    "Cast",
    "MatMul",
    "Mean",
    "Mul",
    "ScalarTensor",
    "Scale",
    "TensorScalar",
    "TypeAs",
    "Unary",
    "Where",
    "function",
]


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


class Add(nn.Module):
    """``a + b`` with broadcasting."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a + b


class Mul(nn.Module):
    """``a * b`` (elementwise) with broadcasting."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return a * b


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


class Scale(nn.Module):
    """``x * factor`` for a constant ``factor``."""

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        return x * self.factor

    def extra_repr(self) -> str:
        return f"factor={self.factor}"


class MatMul(nn.Module):
    """``torch.matmul(a, b)``."""

    def forward(self, a: Tensor, b: Tensor) -> Tensor:
        return torch.matmul(a, b)


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
