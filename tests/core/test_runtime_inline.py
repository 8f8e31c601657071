"""The fast path writes out the forward of a few standard layers (hndl/torch/_inline.py): Linear, ReLU, GELU,
LayerNorm. What it writes must compute exactly what the layer's own forward computes, read the layer's current
tensors and settings, and give way to the class's code whenever that is not the code it was written from."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl.torch._inline import inline_for


def layer_model(op: str, **params: object) -> hndl.GraphModule:
    g = hndl.Graph(op)
    x = g.input("x", ("B", 6))
    g.output(g.add(op, x, name="layer", **params))
    return hndl.build(g)


CASES = [
    ("linear", {"out_features": 5}),
    ("linear", {"out_features": 5, "bias": False}),
    ("relu", {}),
    ("gelu", {}),
    ("gelu", {"approximate": "tanh"}),
    ("layernorm", {}),
    ("layernorm", {"elementwise_affine": False}),
]


@pytest.mark.parametrize(("op", "params"), CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)])
def test_a_written_out_layer_equals_its_own_forward(op, params):
    model = layer_model(op, **params)
    layer = model.nodes.n_layer
    for p in layer.parameters():  # not the initial ones and zeros, so every tensor matters
        nn.init.normal_(p)
    assert inline_for(layer) is not None
    assert "if k0.forward is f0 else m0.forward(a0)" in model.code
    for batch in (2, 3, 2):
        x = torch.randn(batch, 6)
        assert torch.equal(model(x), layer.forward(x))
    assert model.validations == 1


def test_the_fast_path_reads_the_layers_current_settings():
    model = layer_model("relu")
    x = torch.randn(4, 6)
    model(x)
    model.nodes.n_layer.inplace = True  # a plain attribute: no hook, no new instance attribute
    y = x.clone()
    out = model(y)
    assert out is y
    assert torch.equal(y, torch.relu(x))


def test_the_fast_path_reads_tensors_swapped_in_by_functional_call():
    model = layer_model("linear", out_features=5)
    x = torch.randn(3, 6)
    model(x)
    zeros = {name: torch.zeros_like(t) for name, t in model.named_parameters()}
    assert torch.equal(torch.func.functional_call(model, zeros, (x,)), torch.zeros(3, 5))
    assert not torch.equal(model(x), torch.zeros(3, 5))
    assert model.validations == 1


def test_a_class_patched_before_the_build_is_called_not_written_out(monkeypatch):
    monkeypatch.setattr(nn.GELU, "forward", lambda self, x: x * 0)
    model = layer_model("gelu")
    assert inline_for(model.nodes.n_layer) is None
    assert torch.equal(model(torch.ones(2, 6)), torch.zeros(2, 6))


def test_a_subclass_or_a_hooked_layer_runs_its_own_code():
    class Halved(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) / 2

    model = layer_model("linear", out_features=5)
    x = torch.randn(3, 6)
    full = model(x)
    model.nodes.n_layer.__class__ = Halved
    assert torch.allclose(model(x), full / 2)
    model.nodes.n_layer.__class__ = nn.Linear
    calls = []
    model.nodes.n_layer.register_forward_hook(lambda *a: calls.append(1))
    assert torch.equal(model(x), full)
    assert calls == [1]


def test_a_weight_moved_to_the_buffers_is_read_where_forward_reads_it():
    # `del lin.weight` then `register_buffer("weight", ...)`: forward finds the buffer through __getattr__; a
    # written-out call reading _parameters['weight'] would fail. The layer is left to its forward instead.
    model = layer_model("linear", out_features=5)
    x = torch.randn(3, 6)
    model(x)
    layer = model.nodes.n_layer
    weight = layer.weight.detach().clone()
    del layer.weight
    layer.register_buffer("weight", weight)
    assert inline_for(layer) is None
    assert torch.allclose(model(x), x @ weight.T + layer.bias)


# --- the element-wise families and the vision activations (ops/_elementwise.py, ops/_activation.py) ----------

ONE_INPUT = [
    ("sigmoid", {}),
    ("tanh", {}),
    ("silu", {}),
    ("hardswish", {}),
    ("hardsigmoid", {}),
    ("relu6", {}),
    ("hardtanh", {"min_val": -0.5, "max_val": 0.5}),
    ("leaky_relu", {"negative_slope": 0.2}),
    ("elu", {"alpha": 0.5}),
    ("mish", {}),
    ("exp", {}),
    ("clamp", {"min": 0.0}),
    ("roll", {"shifts": 2, "dims": 1}),
    ("sub", {"b": 1.0}),
    ("sub", {"a": 1}),
    ("pow", {"b": 2}),
    ("lt", {"b": 0.5}),
]


@pytest.mark.parametrize(("op", "params"), ONE_INPUT, ids=[f"{op}-{i}" for i, (op, _) in enumerate(ONE_INPUT)])
def test_a_written_out_element_wise_layer_equals_its_own_forward(op, params):
    model = layer_model(op, **params)
    layer = model.nodes.n_layer
    assert inline_for(layer) is not None
    assert "if k0.forward is f0 else m0.forward(a0)" in model.code
    for batch in (2, 3):
        x = torch.randn(batch, 6) * 4
        assert torch.equal(model(x), layer.forward(x))


@pytest.mark.parametrize("op", ["sub", "mul", "maximum", "eq"])
def test_a_written_out_binary_layer_equals_its_own_forward(op):
    g = hndl.Graph(op)
    g.output(g.add(op, g.input("a", ("B", 6)), g.input("b", (6,)), name="layer"))
    model = hndl.build(g)
    assert "if k0.forward is f0 else m0.forward(a0, a1)" in model.code
    a, b = torch.randn(3, 6), torch.randn(6)
    assert torch.equal(model(a, b), model.nodes.n_layer.forward(a, b))


def test_a_written_out_layernorm2d_equals_its_own_forward():
    g = hndl.Graph("ln")
    g.output(g.add("layernorm2d", g.input("x", ("B", 6, 4, 4)), name="layer", eps=1e-6))
    model = hndl.build(g)
    layer = model.nodes.n_layer
    nn.init.normal_(layer.weight)
    nn.init.normal_(layer.bias)
    assert inline_for(layer) is not None
    x = torch.randn(2, 6, 4, 4)
    assert torch.equal(model(x), layer.forward(x))
