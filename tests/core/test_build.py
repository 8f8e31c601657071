"""hndl.build: one plain torch module per node, sized by inference, under `nodes` with keys n_<name>."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl


def mlp() -> hndl.Graph:
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 784))
    h = g.add("linear", x, name="hidden", out_features=512)
    a = g.add("relu", h, name="act")
    g.output(g.add("linear", a, name="out", out_features=10))
    return g


def test_build_returns_a_graph_module_with_plain_torch_layers():
    model = hndl.build(mlp())
    assert isinstance(model, hndl.torch.GraphModule)
    assert isinstance(model, nn.Module)
    assert list(model.nodes.keys()) == ["n_hidden", "n_act", "n_out"]
    assert type(model.nodes["n_hidden"]) is nn.Linear
    assert (model.nodes["n_hidden"].in_features, model.nodes["n_hidden"].out_features) == (784, 512)
    assert model.graph.name == "mlp"
    assert list(model.state_dict()) == [
        "nodes.n_hidden.weight",
        "nodes.n_hidden.bias",
        "nodes.n_out.weight",
        "nodes.n_out.bias",
    ]


def test_output_equals_a_hand_written_module_with_the_same_weights():
    model = hndl.build(mlp())
    twin = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))
    twin.load_state_dict(
        {k.replace("nodes.n_hidden", "0").replace("nodes.n_out", "2"): v for k, v in model.state_dict().items()}
    )
    x = torch.randn(4, 784)
    assert torch.equal(model(x), twin(x))


def test_inputs_bind_positionally_or_by_name():
    g = hndl.Graph("two")
    a = g.input("a", ("B", 3))
    b = g.input("b", ("B", 3))
    g.output(g.add("add", a, b, name="sum"))
    model = hndl.build(g)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    expected = x + y
    assert torch.equal(model(x, y), expected)
    assert torch.equal(model(a=x, b=y), expected)
    assert torch.equal(model(x, b=y), expected)


def test_several_outputs_come_back_as_a_tuple_in_declared_order():
    g = hndl.Graph("multi")
    x = g.input("x", ("B", 4))
    r = g.add("relu", x, name="r")
    t = g.add("tanh", x, name="t")
    g.output(t, r)
    model = hndl.build(g)
    inp = torch.randn(2, 4)
    out = model(inp)
    assert isinstance(out, tuple)
    assert torch.equal(out[0], torch.tanh(inp))
    assert torch.equal(out[1], torch.relu(inp))


def test_a_subgraph_with_repeat_builds_a_module_list_of_module_dicts():
    block = hndl.Graph("block")
    h = block.input("h", ("B", "D"))
    block.output(block.add("relu", block.add("linear", h, name="fc", out_features=8), name="act"))
    g = hndl.Graph("outer")
    g.output(g.add("graph", g.input("x", ("B", 3)), name="blocks", graph=block, repeat=3))
    model = hndl.build(g)
    blocks = model.nodes["n_blocks"]
    assert isinstance(blocks, nn.ModuleList)
    assert len(blocks) == 3
    assert list(blocks[0].keys()) == ["n_fc", "n_act"]
    assert [blocks[i]["n_fc"].in_features for i in range(3)] == [3, 8, 8]
    assert "nodes.n_blocks.2.n_fc.weight" in model.state_dict()
    x = torch.randn(5, 3)
    expected = x
    for i in range(3):
        expected = torch.relu(blocks[i]["n_fc"](expected))
    assert torch.equal(model(x), expected)


def test_build_raises_every_static_problem_and_builds_nothing():
    g = hndl.Graph("bad")
    x = g.input("x", ("B", 4))
    g.add("linear", x, name="a", out_features=0)
    g.output(g.add("linaer", x, name="b"))
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(g)
    assert [p.code for p in info.value.problems] == ["E_PARAM", "E_OP"]
