"""Regressions of hndl.from_module met importing vision models at symbolic resolutions (issue 37)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import hndl
from hndl.importer import MIN_TORCH

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)


class Strided(nn.Module):
    """A strided conv and a global pool: takes any H, W, as convolutional networks do."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x))).flatten(1)


def test_an_input_dim_given_as_a_multiple_of_a_dim_was_not_a_dim_of_an_input() -> None:
    # torch.export writes `8 * Dim("h")` as the size 8*s0; the importer named only bare symbols, so every such
    # input failed with "symbol s0 is not a dim of an input". The root Dim's name is the symbol now.
    torch.manual_seed(0)
    net = Strided().eval()
    graph = hndl.from_module(
        net, torch.randn(2, 3, 16, 24), dynamic_shapes=({0: Dim("B"), 2: 8 * Dim("h"), 3: 8 * Dim("w")},)
    )
    assert graph.fallbacks == []
    text = hndl.dumps(graph)
    assert "shape: [B, 3, 8*h, 8*w]" in text
    model = hndl.build(hndl.loads(text))
    model.load_state_dict(graph.convert(net.state_dict()))
    model.eval()
    with torch.no_grad():
        for shape in ((3, 3, 8, 40), (1, 3, 32, 16)):
            x = torch.randn(*shape)
            assert torch.equal(model(x), net(x))
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 3, 20, 24))
    assert info.value.code == "E_INPUT"
    assert "8*h needs a multiple of 8" in str(info.value)


def test_a_multiple_of_a_dim_keeps_the_dims_range() -> None:
    # The root Dim's bounds are the contract's: h in [2, 4] is 16..32 pixels, so 40 is refused, not computed.
    torch.manual_seed(0)
    net = Strided().eval()
    graph = hndl.from_module(
        net, torch.randn(2, 3, 16, 16), dynamic_shapes=({2: 8 * Dim("h", min=2, max=4), 3: 8 * Dim("w")},)
    )
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    model.eval()
    with torch.no_grad():
        x = torch.randn(2, 3, 32, 16)
        assert torch.equal(model(x), net(x))
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 3, 40, 16))
    assert "h" in str(info.value)
