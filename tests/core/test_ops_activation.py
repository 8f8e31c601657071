"""Activations (relu, gelu, silu, tanh, sigmoid, softmax, log_softmax) and attention."""

from __future__ import annotations

import pytest
import torch
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl

# --- activations ----------------------------------------------------------------------------------------

MODULES = {
    "relu": torch.nn.ReLU,
    "gelu": torch.nn.GELU,
    "silu": torch.nn.SiLU,
    "tanh": torch.nn.Tanh,
    "sigmoid": torch.nn.Sigmoid,
    "softmax": torch.nn.Softmax,
    "log_softmax": torch.nn.LogSoftmax,
}


@pytest.mark.parametrize("op", sorted(MODULES))
def test_activation_keeps_shape_and_builds_the_torch_module(op):
    assert infer(op, ("B", "T", 8)) == ["[B, T, 8]"]
    assert infer(op, ("*batch", 8)) == ["[*batch, 8]"]
    runs_as_inferred(op, ("B", "T", 8), env={"B": 2, "T": 3})
    model = hndl.build(one_node_graph(op, (("B", 8),), None, {}))
    assert type(model.nodes["n_n"]) is MODULES[op]


@pytest.mark.parametrize("op", sorted(MODULES))
def test_activation_keeps_the_input_dtype(op):
    g = one_node_graph(op, (("B", 8),), ["float64"], {})
    assert hndl.check(g).nodes[0].out_types[0].dtype == "float64"


@pytest.mark.parametrize("op", sorted(MODULES))
def test_activation_needs_a_float_input(op):
    p = problem(op, ("B", 4), dtypes=["int64"])
    assert (p.code, p.node, p.port, p.message) == ("E_DTYPE", "n", "x", "needs dtype float, got int64")
    assert (p.expected, p.actual) == ("float", "int64")


def test_gelu_approximate():
    model = hndl.build(one_node_graph("gelu", (("B", 8),), None, {"approximate": "tanh"}))
    x = torch.randn(3, 8)
    assert torch.equal(model(x), torch.nn.functional.gelu(x, approximate="tanh"))
    p = problem("gelu", ("B", 4), approximate="fast")
    assert (p.code, p.message) == (
        "E_PARAM",
        "parameter 'approximate' must be one of 'none', 'tanh', 'tanh_formula', got 'fast'",
    )


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_softmax_dim(op, dim):
    runs_as_inferred(op, ("B", 4), env={"B": 3}, dim=dim)
    assert hndl.build(one_node_graph(op, (("B", 4),), None, {"dim": dim})).nodes["n_n"].dim == dim


@pytest.mark.parametrize(("op", "dim"), [("softmax", 2), ("log_softmax", -3)])
def test_softmax_dim_out_of_range(op, dim):
    p = problem(op, ("B", 4), dim=dim)
    assert (p.code, p.node, p.op) == ("E_PARAM", "n", op)
    assert p.message == f"dim={dim} is out of range for a rank-2 input"
    assert (p.expected, p.actual) == ("-2 .. 1", dim)


def test_softmax_dim_on_an_open_rank_is_left_to_run_time():
    assert infer("softmax", ("*batch", 4), dim=-5) == ["[*batch, 4]"]


# --- attention ------------------------------------------------------------------------------------------


def test_attention_shape_and_modules():
    assert infer("attention", ("B", "T", 64), num_heads=4) == ["[B, T, 64]"]
    model = hndl.build(one_node_graph("attention", (("B", "T", 64),), None, {"num_heads": 4, "causal": True}))
    attn = model.nodes["n_n"]
    assert (attn.num_heads, attn.embed_dim, attn.causal) == (4, 64, True)
    assert attn.qkv.weight.shape == (192, 64)
    assert attn.proj.weight.shape == (64, 64)
    assert sorted(attn.state_dict()) == ["proj.bias", "proj.weight", "qkv.bias", "qkv.weight"]


@pytest.mark.parametrize("causal", [False, True])
def test_attention_runs_as_inferred(causal):
    runs_as_inferred("attention", ("B", "T", 16), env={"B": 2, "T": 5}, num_heads=2, causal=causal, bias=False)


def test_attention_is_causal_when_asked():
    model = hndl.build(one_node_graph("attention", (("B", "T", 16),), None, {"num_heads": 2, "causal": True})).eval()
    x = torch.randn(1, 6, 16)
    changed = x.clone()
    changed[:, 4:] += 1.0  # later positions must not influence earlier outputs
    assert torch.allclose(model(x)[:, :4], model(changed)[:, :4])
    assert not torch.allclose(model(x)[:, 4:], model(changed)[:, 4:])


def test_attention_dropout_only_in_training():
    model = hndl.build(one_node_graph("attention", (("B", "T", 16),), None, {"num_heads": 2, "dropout": 0.9}))
    x = torch.randn(2, 8, 16)
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    torch.manual_seed(0)
    assert not torch.equal(model(x), model(x))


def test_attention_heads_must_divide_the_width():
    p = problem("attention", ("B", "T", 64), num_heads=5)
    assert (p.code, p.node, p.op, p.port) == ("E_PARAM", "n", "attention", None)
    assert p.message == "embed_dim 64 is not divisible by num_heads=5"
    assert (p.expected, p.actual) == ("a divisor of embed_dim (64)", 5)
    assert p.hint == "num_heads must divide the input's last dim: try num_heads=4 or 8, or give head_dim"


def test_attention_shape_errors():
    p = problem("attention", ("B", 64), num_heads=8)
    assert (p.code, p.port, p.message) == ("E_SHAPE", "x", "expected rank 3 [B, T, embed_dim], got rank 2 [B, 64]")
    p = problem("attention", ("B", "T", 64), num_heads=8, embed_dim=32)
    assert (p.code, p.message, p.hint) == (
        "E_SHAPE",
        "dim 2 is embed_dim, bound to 32, but got 64",
        "drop embed_dim: hndl infers it from the input",
    )
    p = problem("attention", ("B", "T", "D"), num_heads=8)
    assert (p.code, p.actual) == ("E_SHAPE", "D")


# --- the activation rows (hndl/ops/_activation.py) -------------------------------------------------------

from hndl.ops._activation import ACTIVATIONS  # noqa: E402

ROW_PARAMS = {row.name: dict(row.example) for row in ACTIVATIONS}


@pytest.mark.parametrize("row", ACTIVATIONS, ids=[r.name for r in ACTIVATIONS])
def test_each_activation_builds_torchs_class_and_computes_what_it_computes(row):
    params = ROW_PARAMS[row.name]
    model = hndl.build(one_node_graph(row.name, (("B", 4, 6),), None, params))
    layer = model.nodes["n_n"]
    cls = getattr(torch.nn, row.cls)
    assert type(layer) is cls
    reference = cls(**params)
    reference.load_state_dict(layer.state_dict())  # prelu's weight; nothing for the others
    x = torch.randn(3, 4, 6) * 4
    assert torch.equal(model(x), reference(x))
    assert [k for k in layer.state_dict()] == [k for k in reference.state_dict()]


@pytest.mark.parametrize("row", ACTIVATIONS, ids=[r.name for r in ACTIVATIONS])
def test_each_activation_needs_a_float_input_and_keeps_its_dtype(row):
    p = problem(row.name, ("B", 4), dtypes=["int64"])
    assert (p.code, p.message) == ("E_DTYPE", "needs dtype float, got int64")
    g = one_node_graph(row.name, (("B", 4),), ["float64"], ROW_PARAMS[row.name])
    assert hndl.check(g).nodes[0].out_types[0].dtype == "float64"


@pytest.mark.parametrize(
    ("op", "params", "message"),
    [
        ("hardtanh", {"min_val": 1.0, "max_val": 1.0}, "max_val (1.0) must be greater than min_val (1.0)"),
        ("celu", {"alpha": 0.0}, "alpha cannot be 0 for celu (it divides by alpha)"),
    ],
)
def test_parameters_torch_refuses_are_e_param(op, params, message):
    p = problem(op, ("B", 4), **params)
    assert (p.code, p.node, p.message) == ("E_PARAM", "n", message)


def test_glu_halves_its_dim_and_refuses_an_odd_one():
    assert infer("glu", ("B", 8)) == ["[B, 4]"]
    assert infer("glu", ("B", 8, 3), dim=1) == ["[B, 4, 3]"]
    assert infer("glu", ("B", "D")) == ["[B, D//2]"]
    runs_as_inferred("glu", ("B", 6, 4), env={"B": 2}, dim=-2)
    p = problem("glu", ("B", 7))
    assert (p.code, p.port, p.message) == ("E_SHAPE", "x", "glu halves dim -1, which has the odd size 7")


def test_prelu_learns_one_slope_or_one_per_channel():
    assert infer("prelu", ("B", 4, 8, 8), num_parameters=4) == ["[B, 4, 8, 8]"]
    layer = hndl.build(one_node_graph("prelu", (("B", 4, 8),), None, {"num_parameters": 4})).nodes["n_n"]
    assert tuple(layer.weight.shape) == (4,)
    assert torch.equal(layer.weight, torch.full((4,), 0.25))
    p = problem("prelu", ("B", 3, 8), num_parameters=4)
    assert (p.code, p.message) == (
        "E_SHAPE",
        "prelu learns 4 slopes, one per channel, but the input has 3 channels (dim 1)",
    )
    assert p.hint == "set num_parameters to the channel count (3), or 1"
    p = problem("prelu", ("B",), num_parameters=4)
    assert p.message == "prelu with num_parameters=4 learns one slope per channel (dim 1), but the input has rank 1"
