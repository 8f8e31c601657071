"""Forward/backward hooks: the fast path skips nn.Module.__call__ only where no hook is registered."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn

import hndl
from hndl.torch import _hooks


def mlp() -> hndl.GraphModule:
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 8))
    h = g.add("linear", x, name="hidden", out_features=16)
    h = g.add("relu", h, name="act")
    g.output(g.add("linear", h, name="out", out_features=4))
    return hndl.build(g)


X = torch.randn(3, 8)


def test_without_hooks_the_fast_path_calls_forward_directly():
    model = mlp()
    model(X)
    assert model._runtime.hooked == (False, False, False)
    assert "m0.forward(a0)" in model._runtime.compiled.source


def test_a_forward_hook_added_after_the_first_call_runs_on_every_later_call():
    model = mlp()
    model(X)
    model(X)
    seen: list[tuple[int, ...]] = []
    handle = model.nodes.n_act.register_forward_hook(lambda m, args, out: seen.append(tuple(out.shape)))
    model(X)
    model(X)
    assert seen == [(3, 16), (3, 16)]
    assert model.validations == 2  # the added hook changed the record: one validation, then fast again
    assert model._runtime.hooked == (False, True, False)
    handle.remove()
    model(X)
    assert len(seen) == 2
    assert model._runtime.hooked == (False, False, False)


def test_a_forward_pre_hook_can_change_the_input_on_the_fast_path():
    model = mlp()
    model(X)
    model.nodes.n_hidden.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    for _ in range(2):
        out = model(X)
        assert torch.equal(out, model.nodes.n_out(torch.relu(model.nodes.n_hidden.bias.expand(3, 16))))


def test_a_global_hook_sends_every_module_through_call():
    model = mlp()
    model(X)
    calls: list[str] = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, o: calls.append(type(m).__name__))
    try:
        model(X)
        model(X)
        assert model._runtime.hooked == (True, True, True)
        # Each call: three layers and the GraphModule itself.
        assert calls.count("Linear") == 4
        assert calls.count("ReLU") == 2
    finally:
        handle.remove()
    calls.clear()
    model(X)
    assert model._runtime.hooked == (False, False, False)


def test_a_full_backward_hook_runs():
    model = mlp()
    model(X)
    grads: list[torch.Size] = []
    model.nodes.n_out.register_full_backward_hook(lambda m, gi, go: grads.append(go[0].shape))
    for _ in range(2):
        model(X).sum().backward()
    assert grads == [torch.Size([3, 4])] * 2


def test_the_ownership_map_holds_no_module_alive():
    model = mlp()
    model(X)
    layer = weakref.ref(model.nodes.n_hidden)
    gm = weakref.ref(model)
    assert _hooks.owners_of(model.nodes.n_hidden) == [model]
    del model
    gc.collect()
    assert layer() is None
    assert gm() is None


def test_a_module_shared_by_two_models_bumps_both():
    a, b = mlp(), mlp()
    shared = a.nodes.n_act
    b.nodes.n_act = shared  # a registration on b: b validates again
    a(X)
    b(X)
    shared.register_buffer("counter", torch.zeros(1))
    for model in (a, b):
        with pytest.raises(hndl.HndlError, match=r"buffer 'nodes\.n_act\.counter' was added"):
            model(X)
