"""Layers for the ops that reproduce one library's own arithmetic: Gemma's RMSNorm, transformers' written-out
tanh GELU and quick GELU, CLIP's pooling at the end-of-text token, ConvNeXt-V2's global response normalisation.

Each ``forward`` is the reference's expression, in the reference's order of operations, so that the results are
equal to the reference's bit for bit (floating-point arithmetic is not associative: the same formula written in
another order differs in the last place). The reference is named on each class; change a forward only with a
test against it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

__all__ = ["GELUTanhFormula", "GlobalResponseNorm", "OffsetRMSNorm", "PoolAtToken", "QuickGELU"]


class OffsetRMSNorm(nn.Module):
    """RMS normalisation whose scale is ``offset + weight``: Gemma's ``GemmaRMSNorm`` with ``offset`` 1.0.

    Computed as transformers' ``GemmaRMSNorm`` computes it: in float32 (float64 stays float64), scaled by
    ``offset + weight`` before the result is cast back to the input's dtype (LLaMA's RMSNorm casts first). The
    weight starts at ``1 - offset``, so a new layer scales by 1; its ``state_dict`` holds ``weight`` with the
    normalised shape, as Gemma's checkpoints store it (the offset is not in the weight).
    """

    def __init__(self, normalized_shape: Sequence[int], eps: float | None, offset: float) -> None:
        super().__init__()
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.offset = offset
        self.weight = nn.Parameter(torch.full(self.normalized_shape, 1.0 - offset))
        # One trailing dim is reduced as `mean(-1)`, as Gemma writes it.
        self._dims: int | tuple[int, ...] = (
            -1 if len(self.normalized_shape) == 1 else tuple(range(-len(self.normalized_shape), 0))
        )

    def forward(self, x: Tensor) -> Tensor:
        dtype = torch.promote_types(x.dtype, torch.float32)
        eps = torch.finfo(x.dtype).eps if self.eps is None else self.eps
        h = x.to(dtype)
        h = h * torch.rsqrt(h.pow(2).mean(self._dims, keepdim=True) + eps)
        h = h * (self.offset + self.weight.to(dtype))
        return h.type_as(x)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, offset={self.offset}"


class GELUTanhFormula(nn.Module):
    """The tanh approximation of GELU written out as transformers' ``NewGELUActivation`` (``gelu_new``, GPT-2,
    Phi) writes it: ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``.

    ``torch.nn.GELU(approximate="tanh")`` is the same formula in one kernel, whose results differ from this one in
    the last place (about 1e-6).
    """

    def forward(self, x: Tensor) -> Tensor:
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class QuickGELU(nn.Module):
    """``x * sigmoid(1.702 * x)``: transformers' ``QuickGELUActivation`` (CLIP, OpenAI's ``QuickGELU``)."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)


class PoolAtToken(nn.Module):
    """Each sequence's vector at one position picked by its token ids: CLIP's text pooler.

    With ``token_id`` None, the position of the largest id (the first of equal ones): ``x[arange(B),
    ids.argmax(-1)]``, where the end-of-text token is the largest id of the vocabulary. With a ``token_id``, the
    first position holding it (``(ids == token_id).int().argmax(-1)``; position 0 for a sequence without it, as in
    transformers).
    """

    def __init__(self, token_id: int | None = None) -> None:
        super().__init__()
        self.token_id = token_id

    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        if self.token_id is None:
            positions = ids.argmax(dim=-1)
        else:
            positions = (ids == self.token_id).int().argmax(dim=-1)
        return x[torch.arange(x.shape[0], device=x.device), positions.to(x.device)]

    def extra_repr(self) -> str:
        return "token_id=largest" if self.token_id is None else f"token_id={self.token_id}"


class GlobalResponseNorm(nn.Module):
    """ConvNeXt-V2's global response normalisation, computed as timm's ``GlobalResponseNorm``.

    ``x + bias + weight * (x * n)``, where ``n`` is each channel's L2 norm over the spatial dims divided by the
    mean of those norms over the channels (plus ``eps``). ``channels_last``: ``[N, H, W, C]`` (timm's default,
    transformers' ``ConvNextV2GRN``); otherwise ``[N, C, H, W]``. ``weight`` and ``bias`` are ``[C]``, timm's
    names and shape (transformers holds them as ``[1, 1, 1, C]``).
    """

    def __init__(self, num_channels: int, eps: float = 1e-6, channels_last: bool = True) -> None:
        super().__init__()
        self.eps = eps
        self.channels_last = channels_last
        self.spatial_dims = (1, 2) if channels_last else (2, 3)
        self.channel_dim = -1 if channels_last else 1
        self.param_shape = (1, 1, 1, -1) if channels_last else (1, -1, 1, 1)
        self.weight = nn.Parameter(torch.zeros(num_channels))
        self.bias = nn.Parameter(torch.zeros(num_channels))

    def forward(self, x: Tensor) -> Tensor:
        x_g = x.norm(p=2, dim=self.spatial_dims, keepdim=True)
        x_n = x_g / (x_g.mean(dim=self.channel_dim, keepdim=True) + self.eps)
        return x + torch.addcmul(self.bias.view(self.param_shape), self.weight.view(self.param_shape), x * x_n)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, channels_last={self.channels_last}"
