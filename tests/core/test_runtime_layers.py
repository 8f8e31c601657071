"""What users do to layers: parametrizations, pruning, subclasses, Module.compile(), patched classes, and the one
documented swap for anything else (``model.replace_layer``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize, prune
from torch.nn.utils.parametrizations import spectral_norm, weight_norm

import hndl

X = torch.randn(3, 8)


def pair() -> tuple[hndl.GraphModule, nn.Sequential]:
    """A built MLP and a hand-written twin with the same weights."""
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 8))
    h = g.add("linear", x, name="hidden", out_features=16)
    h = g.add("relu", h, name="act")
    g.output(g.add("linear", h, name="out", out_features=4))
    model = hndl.build(g)
    twin = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    twin.load_state_dict(
        {k.replace("nodes.n_hidden", "0").replace("nodes.n_out", "2"): v for k, v in model.state_dict().items()}
    )
    return model, twin


class Doubled(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return 2 * w


class Halved(nn.Linear):
    """A user's subclass of the built class."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 0.5


def _halved(layer: nn.Linear) -> None:
    layer.__class__ = Halved


TRANSFORMS: dict[str, Callable[[nn.Linear], object]] = {
    "weight_norm": lambda layer: weight_norm(layer),
    "spectral_norm": lambda layer: spectral_norm(layer),
    "register_parametrization": lambda layer: parametrize.register_parametrization(layer, "weight", Doubled()),
    "prune.l1_unstructured": lambda layer: prune.l1_unstructured(layer, "weight", amount=0.5),
    "a user subclass": _halved,
}


@pytest.mark.parametrize("name", list(TRANSFORMS))
def test_a_transformed_layer_keeps_working_and_equals_the_twin_transformed_the_same_way(name):
    model, twin = pair()
    model(X)
    model(X)
    # spectral_norm's power iteration draws random vectors: the same seed gives both the same ones.
    torch.manual_seed(0)
    TRANSFORMS[name](model.nodes.n_out)
    torch.manual_seed(0)
    TRANSFORMS[name](twin[2])
    model.eval()
    twin.eval()
    validations = model.validations
    with torch.no_grad():
        first = model(X)  # validates: the layer's exposed weight is checked against the build
        assert model.validations == validations + 1
        assert torch.allclose(first, twin(X))
        assert torch.allclose(model(X), twin(X))  # and the fast path runs the transformed layer
        wider = torch.randn(5, 8)
        assert torch.allclose(model(wider), twin(wider))  # a new binding of B: admitted, same layer
    assert model.validations == validations + 1


def test_a_transformed_layer_whose_exposed_weight_has_the_wrong_shape_is_a_runtime_error():
    model, _twin = pair()
    model(X)
    parametrize.register_parametrization(model.nodes.n_out, "weight", Truncate(), unsafe=True)
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert info.value.code == "E_RUNTIME"
    assert info.value.node == "out"
    assert "parameter 'nodes.n_out.weight' has shape [4, 8], the build made [4, 16]" in str(info.value)


class Truncate(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w[:, :8]


def test_module_compile_on_one_node_runs_its_compiled_code_on_every_call():
    model, twin = pair()
    model(X)
    calls = {"n": 0}

    def counting_backend(gm: torch.fx.GraphModule, _inputs: object) -> Callable[..., object]:
        def run(*args: object) -> object:
            calls["n"] += 1
            return gm.forward(*args)

        return run

    torch._dynamo.reset()
    # Dynamo skips torch's own nn files, so the compiled layer is a user's subclass (its forward is traced).
    _halved(model.nodes.n_hidden)
    _halved(twin[0])
    model.nodes.n_hidden.compile(backend=counting_backend)
    with torch.no_grad():
        for batch in (3, 3, 5):
            x = torch.randn(batch, 8)
            assert torch.allclose(model(x), twin(x))
    assert calls["n"] == 3  # the validating call, a fast-path call and a new binding all ran the compiled code
    torch._dynamo.reset()


def test_a_class_level_forward_patch_runs_on_every_call_whatever_the_shape(monkeypatch):
    model, _twin = pair()
    model(X)
    model(torch.randn(5, 8))
    monkeypatch.setattr(nn.ReLU, "forward", lambda self, x: torch.zeros_like(x))
    for batch in (3, 5, 7):  # cached, cached, new
        out = model(torch.randn(batch, 8))
        assert torch.equal(out, model.nodes.n_out.bias.expand(batch, 4))


def test_an_unrelated_class_is_a_runtime_error_until_replace_layer_says_so():
    model, _twin = pair()
    model(X)
    model.nodes.n_act = nn.Tanh()
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert info.value.code == "E_RUNTIME"
    assert "the build made torch.nn.ReLU, now it is torch.nn.Tanh" in str(info.value)  # was "ReLU, now it is Tanh"
    assert "replace_layer" in str(info.value)
    model.replace_layer("act", nn.Tanh())
    out = model(X)
    assert torch.equal(out, model.nodes.n_out(torch.tanh(model.nodes.n_hidden(X))))


def test_replace_layer_checks_the_new_layers_contract_on_the_next_call():
    model, _twin = pair()
    model(X)
    validations = model.validations
    model.replace_layer("hidden", nn.Linear(8, 12))  # its output no longer fits 'out'
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert model.validations == validations + 1
    assert info.value.code == "E_CONTRACT"
    assert info.value.node == "hidden"
    assert "dim 1 expected 16, got 12" in str(info.value)


def test_replace_layer_with_a_quantized_layer_takes_new_parameters_as_the_build():
    model, twin = pair()
    model(X)
    fused = nn.Sequential(nn.Linear(8, 16), nn.ReLU())  # a fused layer with its own, differently named state
    fused[0].load_state_dict(model.nodes.n_hidden.state_dict())
    model.replace_layer("hidden", fused)
    assert "nodes.n_hidden.0.weight" in model.build_state.tensors
    with torch.no_grad():
        assert torch.equal(model(X), twin(X))
        assert torch.equal(model(X), twin(X))


def test_replace_layer_names_an_unknown_node_with_a_suggestion():
    model, _twin = pair()
    with pytest.raises(hndl.HndlError) as info:
        model.replace_layer("hiden", nn.Identity())
    assert info.value.code == "E_RUNTIME"
    assert "did you mean 'hidden'?" in str(info.value)
