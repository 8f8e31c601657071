"""Variants of ``torch.nn`` layers for the ops whose reference computes a little differently: transformers'
``Conv1D`` (``LinearInOut``), ConvNeXt's channels-first ``LayerNorm2d``, dropout in eval mode too
(``AlwaysDropout``), stochastic depth (``DropPath``), and ``LSTM``/``GRU`` that return what the node's ``output``
names (``hndl.ops._dense``, ``_norm``, ``_recurrent``). Each keeps the state_dict keys of the layer it varies.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

__all__ = ["GRU", "LSTM", "AlwaysDropout", "DropPath", "LayerNorm2d", "LinearInOut"]


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


class LayerNorm2d(nn.LayerNorm):
    """Layer normalisation of ``[N, C, H, W]`` over the channels, as torchvision's ConvNeXt (and timm) compute
    it: moved channels-last, ``F.layer_norm``, moved back. Its parameters are ``nn.LayerNorm``'s (``weight``,
    ``bias`` of shape ``[C]``), so a ``LayerNorm2d`` state_dict loads as it is."""

    def forward(self, x: Tensor) -> Tensor:
        x = x.permute(0, 2, 3, 1)
        x = F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


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
