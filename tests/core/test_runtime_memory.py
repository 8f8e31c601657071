"""Activations are freed after their last use, on the fast path and while validating, as in hand-written code."""

from __future__ import annotations

import importlib.util
import pathlib
import weakref
from typing import Any

import pytest
import torch

import hndl
from hndl.torch._runtime import validate

_BENCH = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"hndl_benchmark_{name}", _BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def chain() -> hndl.GraphModule:
    """first -> act -> second -> third, plus a residual add of act's output at the end."""
    g = hndl.Graph("chain")
    x = g.input("x", ("B", 8))
    h = g.add("linear", x, name="first", out_features=8)
    a = g.add("relu", h, name="act")
    h = g.add("linear", a, name="second", out_features=8)
    h = g.add("linear", h, name="third", out_features=8)
    g.output(g.add("add", h, a, name="res"))
    return hndl.build(g)


def watch(model: hndl.GraphModule) -> dict[str, Any]:
    """Weak references to first's output, and whether it was still alive when 'second' and 'third' started."""
    seen: dict[str, Any] = {}

    def keep_ref(_module: Any, _args: Any, out: torch.Tensor) -> None:
        seen["first"] = weakref.ref(out)

    def before(name: str) -> Any:
        def hook(_module: Any, _args: Any) -> None:
            seen[f"first alive when {name} runs"] = seen["first"]() is not None

        return hook

    model.nodes.n_first.register_forward_hook(keep_ref)
    model.nodes.n_second.register_forward_pre_hook(before("second"))
    model.nodes.n_third.register_forward_pre_hook(before("third"))
    return seen


@pytest.mark.parametrize("path", ["validating", "fast"])
def test_an_activation_is_gone_before_the_layer_after_its_last_reader_runs(path):
    model = chain()
    x = torch.randn(2, 8)
    if path == "fast":
        model(x)
    seen = watch(model)  # registering hooks revalidates once: the second call below is the fast one
    if path == "fast":
        model(x)
    validations = model.validations
    # With gradients on, so every step runs out of place (with none recorded, 'act' may write into first's
    # output and return that same tensor: alive as act's output, and no extra memory; test_runtime_inplace.py).
    model(x)
    assert model.validations == validations + (path == "validating")
    # 'first' is read by 'act' only: it is freed right after, before 'second' runs.
    assert seen["first alive when second runs"] is False
    assert seen["first alive when third runs"] is False


def test_a_value_read_by_a_later_node_stays_alive_until_then():
    model = chain()
    refs: dict[str, Any] = {}

    def keep_ref(_module: Any, _args: Any, out: torch.Tensor) -> None:
        refs["act"] = weakref.ref(out)

    def check(_module: Any, _args: Any) -> None:
        refs["alive"] = refs["act"]() is not None

    model.nodes.n_act.register_forward_hook(keep_ref)
    model.nodes.n_third.register_forward_pre_hook(check)
    x = torch.randn(2, 8)
    with torch.no_grad():
        out = model(x)
    assert refs["alive"] is True  # act's output feeds 'res', after 'third'
    act = torch.relu(model.nodes.n_first(x))
    assert torch.equal(out, model.nodes.n_third(model.nodes.n_second(act)) + act)


def test_the_generated_code_deletes_each_local_after_its_last_use():
    code = chain().code
    assert "else m1.forward(v0)  # relu 'act'\n            del v0" in code
    assert "else m3.forward(v2)  # linear 'third'\n            del v2" in code
    assert "del v1" in code.split("'res'")[1]  # act's output goes only after the add that last reads it


@pytest.mark.parametrize("name", ["mlp", "conv_stack", "transformer_block"])
def test_peak_live_activations_do_not_exceed_the_handwritten_twin(name):
    models, memory = _load("models"), _load("memory")
    model, twin, example = models.MODELS[name]()
    x = example(4)
    model(x)
    assert memory.peak_live_bytes(lambda: model(x)) <= memory.peak_live_bytes(lambda: twin(x))


def test_peak_live_activations_of_a_resnet18_match_the_twin():
    # The benchmark measures 224x224 at batch 16 (98 MiB for both); 64x64 at batch 2 keeps this test quick.
    models, memory = _load("models"), _load("memory")
    model, twin, example = models.make_resnet18(64)
    x = example(2)
    with torch.no_grad():
        assert torch.equal(model(x), twin(x))
    hndl_peak = memory.peak_live_bytes(lambda: model(x))
    validating_peak = memory.peak_live_bytes(lambda: validate(model, (x,), None))
    twin_peak = memory.peak_live_bytes(lambda: twin(x))
    assert hndl_peak <= twin_peak
    assert validating_peak <= twin_peak
