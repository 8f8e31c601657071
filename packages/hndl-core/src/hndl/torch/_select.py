"""The wrapper op ``module`` puts around a class whose result is a tuple, so the node gives tensors."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = ["OutputIndexError", "SelectOutputs", "flatten_result"]


class OutputIndexError(IndexError):
    """The module returned fewer values than ``output`` selects: the declaration is wrong (E_CONTRACT)."""


def flatten_result(result: Any) -> list[Any]:
    """The values of a module's result in order, nested tuples and lists flattened (LSTM: output, h_n, c_n)."""
    if isinstance(result, (tuple, list)):
        return [value for item in result for value in flatten_result(item)]
    return [result]


class SelectOutputs(nn.Module):
    """Runs ``module`` and gives the value(s) of its flattened result at ``index`` (an int: one tensor; a
    tuple: a tuple). The wrapped module's parameters are under ``module.``."""

    def __init__(self, module: nn.Module, index: int | tuple[int, ...]) -> None:
        super().__init__()
        self.module = module
        self.index = index

    def forward(self, *inputs: torch.Tensor) -> Any:
        values = flatten_result(self.module(*inputs))
        wanted = (self.index,) if isinstance(self.index, int) else self.index
        if max(wanted) >= len(values):
            raise OutputIndexError(
                f"output index {max(wanted)} is out of range: the module returned {len(values)} values"
            )
        if isinstance(self.index, int):
            return values[self.index]
        return tuple(values[i] for i in self.index)

    def extra_repr(self) -> str:
        return f"index={self.index!r}"
