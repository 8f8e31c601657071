"""Subgraph uses are modules with a forward (``hndl/torch/_blocks.py``): a hook on a block sees one call per
repetition, the block runs its own steps, and everything else about the fast path stays as it was."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import hndl
from hndl.torch._blocks import Block


def residual_blocks(repeat: int = 3) -> hndl.GraphModule:
    torch.manual_seed(0)
    block = hndl.Graph("block")
    h = block.input("h", ("B", 8))
    up = block.add("linear", h, name="up", out_features=16)
    act = block.add("relu", up, name="act")
    down = block.add("linear", act, name="down", out_features=8)
    block.output(block.add("add", [h, down], name="residual"))
    g = hndl.Graph("blocks")
    x = g.input("x", ("B", 6))
    h = g.add("linear", x, name="stem", out_features=8)
    h = g.add("graph", h, name="blocks", graph=block, repeat=repeat)
    g.output(g.add("linear", h, name="head", out_features=3))
    return hndl.build(g).eval()


X = torch.randn(4, 6)


def by_hand(model: hndl.GraphModule, x: torch.Tensor) -> torch.Tensor:
    nodes = model.nodes
    h = nodes.n_stem(x)
    for block in nodes.n_blocks:
        h = h + block.n_down(torch.relu(block.n_up(h)))
    return nodes.n_head(h)


def test_each_repetition_is_a_block_and_the_state_dict_keys_are_unchanged():
    model = residual_blocks()
    assert all(type(b) is Block for b in model.nodes.n_blocks)
    assert "nodes.n_blocks.2.n_down.weight" in model.state_dict()


def test_a_block_called_on_its_own_runs_its_steps():
    model = residual_blocks()
    h = torch.randn(4, 8)
    block = model.nodes.n_blocks[1]
    assert torch.equal(block(h), h + block.n_down(torch.relu(block.n_up(h))))
    with pytest.raises(hndl.HndlError, match=r"block 'blocks\.1' takes 1 inputs, got 2"):
        block(h, h)


def test_a_block_made_by_hand_says_it_has_no_steps():
    with pytest.raises(hndl.HndlError) as err:
        Block({"n_x": nn.ReLU()})(torch.randn(2))
    assert err.value.problems[0].code == "E_RUNTIME"


def test_a_forward_hook_on_a_block_fires_once_per_call_and_sees_the_blocks_output():
    model = residual_blocks()
    model(X)
    model(X)
    seen: list[torch.Tensor] = []
    model.nodes.n_blocks[1].register_forward_hook(lambda m, a, o: seen.append(o))
    out = model(X)
    assert model.validations == 2  # a hook added to a block is a registered-state change
    out = model(X)
    assert len(seen) == 2
    assert torch.equal(out, by_hand(model, X))
    h = model.nodes.n_stem(X)
    for block in model.nodes.n_blocks[:2]:
        h = h + block.n_down(torch.relu(block.n_up(h)))
    assert torch.equal(seen[-1], h)


def test_a_pre_hook_can_change_a_blocks_input_and_removing_it_goes_back_to_the_inlined_steps():
    model = residual_blocks()
    handle = model.nodes.n_blocks[0].register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    zeroed = model(X)
    expected_h = torch.zeros(4, 8)
    for block in model.nodes.n_blocks:
        expected_h = expected_h + block.n_down(torch.relu(block.n_up(expected_h)))
    assert torch.equal(zeroed, model.nodes.n_head(expected_h))
    assert "blocks.0" in model.code
    handle.remove()
    assert torch.equal(model(X), by_hand(model, X))
    assert "nodes['n_blocks'][0](" not in model.code


def test_a_layer_failing_inside_a_called_block_is_named():
    model = residual_blocks()
    model.nodes.n_blocks[2].register_forward_hook(lambda m, a, o: None)
    model(X)
    model.nodes.n_blocks[2].n_up.register_forward_pre_hook(lambda m, args: (torch.randn(4, 5),))
    with pytest.raises(hndl.HndlError) as err:
        model(X)
    problem = err.value.problems[0]
    assert problem.code == "E_RUNTIME"
    assert problem.node == "blocks.2.up"


def test_a_contract_broken_inside_a_called_block_is_named_by_the_validation():
    model = residual_blocks()
    model.nodes.n_blocks[1].register_forward_hook(lambda m, a, o: None)
    model.replace_layer("blocks.1.act", nn.Identity())  # keeps the contract: passes, and runs inside the block
    nodes = model.nodes
    h = nodes.n_stem(X)
    for i, block in enumerate(nodes.n_blocks):
        inner = block.n_up(h)
        h = h + block.n_down(inner if i == 1 else torch.relu(inner))
    assert torch.equal(model(X), nodes.n_head(h))
    model.replace_layer("blocks.1.act", nn.Linear(16, 5))
    with pytest.raises(hndl.HndlError) as err:
        model(X)
    assert err.value.problems[0].code == "E_CONTRACT"
    assert err.value.problems[0].node == "blocks.1.act"


def test_copies_keep_their_own_blocks_and_hooks():
    model = residual_blocks()
    model.nodes.n_blocks[0].register_forward_hook(lambda m, a, o: o * 2)
    expected = model(X)
    clone = copy.deepcopy(model)
    assert torch.equal(clone(X), expected)
    assert clone.nodes.n_blocks[0] is not model.nodes.n_blocks[0]


def test_torch_compile_runs_a_hooked_block():
    model = residual_blocks()
    model.nodes.n_blocks[0].register_forward_hook(lambda m, a, o: o + 1)
    expected = model(X)
    compiled = torch.compile(model, backend="eager")
    assert torch.allclose(compiled(X), expected)


# --- shard units ------------------------------------------------------------------------------------------------


def test_shard_units_are_the_blocks_then_the_root():
    model = residual_blocks()
    assert model.shard_units() == [*model.nodes.n_blocks, model]


def test_a_block_tied_to_a_module_outside_it_stays_with_the_root():
    block = hndl.Graph("block")
    h = block.input("h", ("B", 8))
    block.output(block.add("linear", h, name="lin", out_features=8, bias=False))
    g = hndl.Graph("g")
    x = g.input("x", ("B", 8))
    h = g.add("linear", x, name="first", out_features=8, bias=False)
    h = g.add("graph", h, name="blocks", graph=block, repeat=2)
    g.output(g.add("linear", h, name="last", out_features=8, bias=False, tie={"weight": "first.weight"}))
    model = hndl.build(g)
    assert model.shard_units() == [*model.nodes.n_blocks, model]  # the tie is between top-level nodes
    g2 = hndl.Graph("g2")
    x = g2.input("x", ("B", 8))
    h = g2.add("graph", x, name="blocks", graph=block, repeat=2)
    g2.output(g2.add("linear", h, name="out", out_features=8, bias=False, tie={"weight": "blocks.1.lin.weight"}))
    tied = hndl.build(g2)
    assert tied.shard_units() == [tied.nodes.n_blocks[0], tied]


def test_zoo_gpt2_units_keep_the_tied_embedding_and_head_in_the_root():
    model = hndl.build(hndl.zoo.get("gpt2", n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    units = model.shard_units()
    assert units == [*model.transformer.h, model]
    assert model.transformer.wte.weight is model.lm_head.weight
