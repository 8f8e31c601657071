"""Models shared by the hndl-func tests: a small MLP (with and without BatchNorm) and its hand-written twin.

The twin registers its layers under the same ``nodes.n_<name>`` keys, so one parameter dict serves both and
results can be compared directly.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import hndl

IN, HIDDEN, OUT = 8, 16, 4


def mlp_graph(norm: bool = False, name: str = "mlp", hidden: int = HIDDEN) -> hndl.Graph:
    g = hndl.Graph(name)
    x = g.input("x", ("B", IN))
    h = g.add("linear", x, name="hidden", out_features=hidden)
    h = g.add("module", h, name="act", target="torch.nn:ReLU")
    if norm:
        h = g.add("module", h, name="norm", target="torch.nn:BatchNorm1d", kwargs={"num_features": hidden})
    g.output(g.add("linear", h, name="out", out_features=OUT))
    return g


class Twin(nn.Module):
    """The same MLP written by hand, with the GraphModule's state_dict keys."""

    def __init__(self, norm: bool = False) -> None:
        super().__init__()
        layers: dict[str, nn.Module] = {"n_hidden": nn.Linear(IN, HIDDEN), "n_act": nn.ReLU()}
        if norm:
            layers["n_norm"] = nn.BatchNorm1d(HIDDEN)
        layers["n_out"] = nn.Linear(HIDDEN, OUT)
        self.nodes = nn.ModuleDict(layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.nodes.values():
            x = layer(x)
        return x


@pytest.fixture
def make_mlp() -> Callable[..., nn.Module]:
    """``make_mlp(norm=False, seed=0)`` -> a freshly built GraphModule with seeded weights."""

    def make(norm: bool = False, seed: int = 0, **kwargs: object) -> nn.Module:
        torch.manual_seed(seed)
        return hndl.build(mlp_graph(norm, **kwargs))  # type: ignore[arg-type]

    return make


@pytest.fixture
def twin_of() -> Callable[[nn.Module], nn.Module]:
    """``twin_of(model)`` -> the hand-written twin holding a copy of ``model``'s weights, in the same mode."""

    def make(model: nn.Module) -> nn.Module:
        twin = Twin(norm="nodes.n_norm.running_mean" in model.state_dict())
        twin.load_state_dict(model.state_dict())
        return twin.train(model.training)

    return make


@pytest.fixture
def mlp(make_mlp: Callable[..., nn.Module]) -> nn.Module:
    return make_mlp()


@pytest.fixture
def x() -> torch.Tensor:
    torch.manual_seed(1)
    return torch.randn(5, IN)
