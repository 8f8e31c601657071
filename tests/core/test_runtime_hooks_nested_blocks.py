"""Hooks on blocks nested in blocks (``hndl/torch/_blocks.py``): a subgraph whose steps are all one nested
subgraph use's spans exactly that use's steps, so only the module tree says which block holds the other.

The regression: EfficientFormer's ``downsample`` is one ``conv_norm`` use; with a hook on every module (what
``torchinfo.summary`` registers) the inner block's steps were taken to include its parent, so each called the
other until Python's recursion limit (E_RUNTIME wrapping RecursionError)."""

from __future__ import annotations

import pytest
import torch

import hndl

X = torch.randn(3, 4)


def one_use_blocks() -> hndl.GraphModule:
    """``x -> blocks`` (2 repetitions of ``outer``), ``outer`` being a single use of ``inner`` (linear, relu)."""
    inner = hndl.Graph("inner")
    h = inner.input("h", ("B", 4))
    inner.output(inner.add("relu", inner.add("linear", h, name="lin", out_features=4), name="act"))
    outer = hndl.Graph("outer")
    h = outer.input("h", ("B", 4))
    outer.output(outer.add("graph", h, name="inner", graph=inner))
    g = hndl.Graph("nested")
    x = g.input("x", ("B", 4))
    g.output(g.add("graph", x, name="blocks", graph=outer, repeat=2))
    torch.manual_seed(0)
    return hndl.build(g)


def by_hand(model: hndl.GraphModule, x: torch.Tensor) -> torch.Tensor:
    for block in model.nodes.n_blocks:
        x = torch.relu(block.n_inner.n_lin(x))
    return x


def test_hooks_on_every_module_of_nested_repeated_blocks_run_each_module_once_without_recursion():
    model = one_use_blocks()
    reference = by_hand(model, X)  # before the hooks, which would record its layer calls too
    names = {id(m): name for name, m in model.named_modules()}
    entered: list[str] = []
    left: list[str] = []
    for module in model.modules():
        module.register_forward_pre_hook(lambda m, args: entered.append(names[id(m)]))
        module.register_forward_hook(lambda m, args, out: left.append(names[id(m)]))
    # The outer block is entered first and left last, around its one nested block, once per call.
    block, inner = "nodes.n_blocks.{i}", "nodes.n_blocks.{i}.n_inner"
    on_entry = [block, inner, inner + ".n_lin", inner + ".n_act"]
    on_exit = [inner + ".n_lin", inner + ".n_act", inner, block]
    for _call in range(2):  # the validation, then the fast path
        entered.clear()
        left.clear()
        assert torch.equal(model(X), reference)
        assert entered == ["", *[name.format(i=i) for i in range(2) for name in on_entry]]
        assert left == [*[name.format(i=i) for i in range(2) for name in on_exit], ""]
    assert model.validations == 1


@pytest.mark.parametrize("hooked", ["inner", "outer"])
def test_a_block_made_of_one_nested_block_runs_it_when_either_alone_is_hooked(hooked: str) -> None:
    model = one_use_blocks()
    block = model.nodes.n_blocks[1]
    seen: list[torch.Tensor] = []
    (block.n_inner if hooked == "inner" else block).register_forward_hook(lambda m, a, out: seen.append(out))
    for _call in range(2):  # the validation, then the fast path
        assert torch.equal(model(X), by_hand(model, X))
    assert len(seen) == 2
    assert torch.equal(seen[-1], by_hand(model, X))


def test_a_block_made_of_one_nested_block_runs_when_called_on_its_own():
    model = one_use_blocks()
    block = model.nodes.n_blocks[0]
    expected = torch.relu(block.n_inner.n_lin(X))
    assert torch.equal(block(X), expected)
    assert torch.equal(block.n_inner(X), expected)
