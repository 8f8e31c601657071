"""Modules whose import fails in the ways tests/core/test_import_messages.py reads the messages of: two missing
operations repeated in many nested layers, and CNNs whose dynamic H and W need a lower bound."""

from __future__ import annotations

import torch
from torch import nn

#: The traced operations hndl has no row for that :class:`Net` uses.
MISSING = ("aten.logcumsumexp.default", "aten.cumprod.default")


class Mix(nn.Module):
    """Two operations hndl has no op for; its constructor argument is not kept, so it cannot be a module node."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.scale = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mixed = torch.logcumsumexp(self.proj(x), dim=1) * self.scale
        return torch.cumprod(mixed, dim=1)


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.mix = Mix(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mix(self.norm(x))


class Stage(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(width) for _ in range(depth)])
        self.gain = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x * self.gain


class Net(nn.Module):
    """4 stages of 5 blocks: each missing operation in 20 layers, each problem with a chain of three layers."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.stages = nn.ModuleList([Stage(width, 5) for _ in range(4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage in self.stages:
            x = stage(x)
        return x


class StridedCNN(nn.Module):
    """Five stride-2 convolutions, then a pooling to 1x1: the trace needs H and W of 33 or more (below, a
    feature map is 1x1 and the pooling is the identity, which the trace cannot cover)."""

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(5):
            layers += [nn.Conv2d(3 if i == 0 else 8, 8, 3, stride=2, padding=1), nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.features(x)).flatten(1))


class ValidCNN(nn.Module):
    """Unpadded stride-2 convolutions and a 3x3 max pooling: the sizes the trace takes start at 111, where
    torch.export's own suggestion says 63 (at 63 to 110 the pooled map is 1x1 and the trace fails again)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(*[nn.Conv2d(3 if i == 0 else 8, 8, 3, stride=2) for i in range(4)])
        self.pool = nn.MaxPool2d(3)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.features(x)).mean((2, 3)))
