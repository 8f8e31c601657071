"""What today's vision models add: drop_path, layernorm2d, buffer (and its formulas), parameter's constant
init, scale on integers. The comparisons with torchvision and transformers themselves run in ``nox -s
reference`` (tests/zoo/test_ops_reference.py); here each is held to the computation those libraries publish,
written out."""

from __future__ import annotations

import math

import pytest
import torch
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl
from hndl.torch import layers


def built(op: str, shapes: tuple = (), dtypes: list | None = None, **params: object) -> torch.nn.Module:
    return hndl.build(one_node_graph(op, shapes, dtypes, params))


# --- drop_path ---------------------------------------------------------------------------------------------


def stochastic_depth(x: torch.Tensor, p: float, mode: str, training: bool) -> torch.Tensor:
    """torchvision.ops.stochastic_depth (0.29), as published."""
    if not training or p == 0.0:
        return x
    survival_rate = 1.0 - p
    size = [x.shape[0]] + [1] * (x.ndim - 1) if mode == "row" else [1] * x.ndim
    noise = torch.empty(size, dtype=x.dtype, device=x.device)
    noise = noise.bernoulli_(survival_rate)
    if survival_rate > 0.0:
        noise.div_(survival_rate)
    return x * noise


@pytest.mark.parametrize("mode", ["row", "batch"])
@pytest.mark.parametrize("p", [0.0, 0.25, 1.0])
def test_drop_path_draws_what_torchvisions_stochastic_depth_draws(mode, p):
    model = built("drop_path", (("B", 8, 4, 4),), p=p, mode=mode)
    x = torch.randn(16, 8, 4, 4, requires_grad=True)
    torch.manual_seed(3)
    got = model(x)
    torch.manual_seed(3)
    want = stochastic_depth(x, p, mode, training=True)
    assert torch.equal(got, want)
    (g1,) = torch.autograd.grad(got.sum(), x)
    (g2,) = torch.autograd.grad(want.sum(), x)
    assert torch.equal(g1, g2)


def test_drop_path_is_its_input_in_eval_mode():
    model = built("drop_path", (("B", 8),), p=0.5).eval()
    x = torch.randn(4, 8)
    assert model(x) is x
    assert type(model.nodes["n_n"]) is layers.DropPath
    assert repr(model.nodes["n_n"]) == "DropPath(p=0.5, mode='row')"


def test_drop_path_needs_a_probability_and_a_batch_dim():
    p = problem("drop_path", ("B", 8))
    assert (p.code, p.message) == ("E_PARAM", "missing required parameter 'p'")
    p = problem("drop_path", ("B", 8), p=0.1, mode="sample")
    assert p.message == "parameter 'mode' must be one of 'row', 'batch', got 'sample'"
    p = problem("drop_path", (), p=0.1)
    assert (p.code, p.port) == ("E_SHAPE", "x")


# --- layernorm2d -------------------------------------------------------------------------------------------


def test_layernorm2d_normalises_the_channels_as_convnext_does():
    model = built("layernorm2d", (("B", 6, "H", "W"),), eps=1e-6)
    layer = model.nodes["n_n"]
    torch.nn.init.normal_(layer.weight)
    torch.nn.init.normal_(layer.bias)
    x = torch.randn(2, 6, 5, 7)
    # torchvision.models.convnext.LayerNorm2d.forward, as published
    want = torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (6,), layer.weight, layer.bias, 1e-6)
    assert torch.equal(model(x), want.permute(0, 3, 1, 2))
    assert list(layer.state_dict()) == ["weight", "bias"]
    assert isinstance(layer, torch.nn.LayerNorm)
    assert layer.normalized_shape == (6,)
    assert infer("layernorm2d", ("B", 6, "H", "W")) == ["[B, 6, H, W]"]


def test_layernorm2d_is_not_layernorm_over_the_width():
    p = problem("layernorm2d", ("B", 56, 96))
    assert (p.code, p.message) == ("E_SHAPE", "expected rank 4 [N, num_channels, H, W], got rank 3 [B, 56, 96]")
    g = one_node_graph("layernorm2d", (("B", "C", 8, 8),), None, {})
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert "parameter 'num_channels' follows from an input dim that is not a fixed number" in str(info.value)


# --- buffer ------------------------------------------------------------------------------------------------


def test_a_buffer_is_a_registered_constant_returned_without_inputs():
    model = built("buffer", shape=[2, 3], init="full", value=0.5)
    assert torch.equal(model(), torch.full((2, 3), 0.5))
    assert list(model.state_dict()) == ["nodes.n_n.value"]
    assert list(model.parameters()) == []
    transient = built("buffer", shape=[4], init="ones", persistent=False)
    assert list(transient.state_dict()) == []
    assert torch.equal(transient(), torch.ones(4))


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({"shape": [5], "init": "arange"}, torch.arange(5)),
        ({"shape": [2, 3], "init": "arange", "start": 1, "step": 2}, torch.arange(1, 13, 2).reshape(2, 3)),
        ({"shape": [4], "init": "arange", "step": 0.5}, torch.arange(0, 2, 0.5)),
        ({"shape": [4], "init": "arange", "start": 0.1, "step": 0.1}, torch.arange(0.1, 0.5, 0.1)[:4]),
        ({"shape": [3], "init": "full", "value": 7}, torch.full((3,), 7)),
        ({"shape": [], "init": "full", "value": -100.0}, torch.tensor(-100.0)),
        ({"shape": [2, 2], "init": "zeros", "dtype": "bool"}, torch.zeros(2, 2, dtype=torch.bool)),
        ({"shape": [3], "init": "ones", "dtype": "int8"}, torch.ones(3, dtype=torch.int8)),
    ],
)
def test_buffer_fills_as_torch_does(params, want):
    got = built("buffer", **params)()
    assert got.dtype == want.dtype
    assert torch.equal(got, want)
    # A floating buffer follows the model's floating dtype ("float": float32 until .double() or FSDP's bf16);
    # an integer or bool buffer keeps its own.
    static = "float" if want.dtype.is_floating_point else str(want.dtype)[6:]
    assert hndl.check(one_node_graph("buffer", (), None, params)).nodes[0].out_types[0].dtype == static


def test_the_sinusoidal_table_is_the_pytorch_tutorials():
    length, channels = 50, 16
    # "Attention is all you need" as PyTorch's transformer tutorial computes it
    position = torch.arange(length).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, channels, 2) * (-math.log(10000.0) / channels))
    pe = torch.zeros(length, channels)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    assert torch.equal(built("buffer", shape=[length, channels], init="sinusoidal")(), pe)


def test_the_whisper_table_is_whispers_sinusoids():
    length, channels = 30, 12
    # transformers' modeling_whisper.sinusoids (OpenAI's whisper.model.sinusoids computes the same)
    increment = math.log(10000) / (channels // 2 - 1)
    inv_timescales = torch.exp(-increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length).view(-1, 1) * inv_timescales.view(1, -1)
    want = torch.cat([scaled_time.sin(), scaled_time.cos()], dim=1)
    assert torch.equal(built("buffer", shape=[length, channels], init="sinusoidal_whisper")(), want)


@pytest.mark.parametrize("window", [7, [3, 4]])
def test_the_relative_position_index_is_swins(window):
    wh, ww = (window, window) if isinstance(window, int) else window
    # torchvision's ShiftedWindowAttention.define_relative_position_index, as published
    coords = torch.stack(torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij"))
    flat = torch.flatten(coords, 1)
    rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
    rel[:, :, 0] += wh - 1
    rel[:, :, 1] += ww - 1
    rel[:, :, 0] *= 2 * ww - 1
    want = rel.sum(-1).flatten()
    n = wh * ww
    got = built("buffer", shape=[n * n], init="relative_position_index", window=window)()
    assert got.dtype == torch.int64
    assert torch.equal(got, want)
    square = built("buffer", shape=[n, n], init="relative_position_index", window=window)()
    assert torch.equal(square, want.reshape(n, n))


def test_a_relative_position_bias_is_an_embedding_of_the_index():
    g = hndl.Graph("bias")
    index = g.add("buffer", name="index", shape=[49 * 49], init="relative_position_index", window=7)
    table = g.add("embedding", index, name="table", num_embeddings=13 * 13, embedding_dim=3)
    g.output(g.add("reshape", table, name="bias", shape=[49, 49, 3]))
    model = hndl.build(g)
    weight = model.nodes["n_table"].weight
    assert torch.equal(model(), weight[model.nodes["n_index"].value].view(49, 49, 3))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"shape": [10, 7], "init": "sinusoidal"}, "init 'sinusoidal' makes a [positions, channels] table"),
        ({"shape": [10, 2], "init": "sinusoidal_whisper"}, "with an even channel count of at least 4"),
        ({"shape": [49], "init": "relative_position_index", "window": 7}, "a window of 7x7 has 49 positions"),
        ({"shape": [49], "init": "relative_position_index"}, "init 'relative_position_index' needs the"),
        ({"shape": [4], "init": "arange", "value": 3.0}, "init 'arange' does not read value"),
        ({"shape": [4], "init": "arange", "step": 0}, "arange needs a step other than 0"),
        ({"shape": [4], "dtype": "float"}, "a buffer needs a concrete dtype, got the category 'float'"),
    ],
)
def test_buffer_refuses_what_its_formula_cannot_fill(params, message):
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(one_node_graph("buffer", (), None, params))
    p = info.value.problems[0]
    assert (p.code, p.node) == ("E_PARAM", "n")
    assert message in p.message


def test_a_buffer_in_a_spec_file_is_built_where_the_weights_are_computed_not_loaded():
    text = """
hndl: 1
name: pe
inputs: {x: {shape: [B, 20, 8]}}
nodes:
  table: {op: buffer, shape: [20, 8], init: sinusoidal}
  out: {op: add, in: [x, table]}
outputs: [out]
"""
    model = hndl.build(hndl.loads(text))
    x = torch.randn(2, 20, 8)
    assert torch.equal(model(x), x + built("buffer", shape=[20, 8], init="sinusoidal")())


# --- parameter's constant init, scale on integers -----------------------------------------------------------


def test_a_parameter_starts_at_a_constant():
    layer = built("parameter", shape=[4, 1, 1], init="full", value=1e-6).nodes["n_n"]
    assert torch.equal(layer.weight.detach(), torch.ones(4, 1, 1) * 1e-6)
    with torch.no_grad():
        layer.weight.zero_()
    layer.reset_parameters()
    assert torch.equal(layer.weight.detach(), torch.full((4, 1, 1), 1e-6))
    p = problem("parameter", shape=[4], value=1e-6)
    assert (p.code, p.message) == ("E_PARAM", "value is the constant of init 'full'; init is 'normal'")
    assert p.hint == "write init: full to start every element at value"


@pytest.mark.parametrize(
    ("dtype", "factor", "expected"),
    [("int64", 3, "int64"), ("int64", 0.5, "float32"), ("float16", 2.0, "float16"), ("bool", 2, "int64")],
)
def test_scale_keeps_an_integer_input_integer_with_an_integer_factor(dtype, factor, expected):
    g = one_node_graph("scale", (("B", 4),), [dtype], {"factor": factor})
    assert hndl.check(g).nodes[0].out_types[0].dtype == expected
    x = torch.arange(8).reshape(2, 4).to(getattr(torch, dtype))
    out = hndl.build(g)(x)
    assert out.dtype == getattr(torch, expected)
    assert torch.equal(out, x * factor)
    runs_as_inferred("scale", ("B", 4), env={"B": 3}, factor=2)
