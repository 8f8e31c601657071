"""torch.compile: the checks are skipped while compiling, outputs equal eager, and hndl causes no graph break."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest
import torch

_MODELS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "models.py"


def _models():
    spec = importlib.util.spec_from_file_location("hndl_benchmark_models", _MODELS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dynamo = pytest.importorskip("torch._dynamo")
MODELS = ["mlp", "conv_stack", "transformer_block"]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


@pytest.mark.parametrize("name", MODELS)
def test_dynamo_explain_finds_no_graph_break(name):
    model, _twin, example = _models().MODELS[name]()
    x = example(2)
    model(x)  # validated eagerly first: the compiled path must not consult that state anyway
    explanation = dynamo.explain(model)(x)
    assert explanation.graph_break_count == 0, [str(b.reason) for b in explanation.break_reasons]
    assert explanation.graph_count == 1


@pytest.mark.parametrize("name", MODELS)
def test_compiled_output_equals_eager(name):
    # aot_eager runs Dynamo and AOTAutograd without generating C++ (inductor works too, but takes ~30 s on CPU).
    model, twin, example = _models().MODELS[name]()
    x = example(3)
    compiled = torch.compile(model, backend="aot_eager")
    with torch.no_grad():
        expected = twin(x)
        assert torch.allclose(compiled(x), expected, atol=1e-6)
        assert torch.allclose(compiled(x), model(x), atol=1e-6)
    assert model.validations == 1  # only the eager call validated


def test_no_check_runs_while_compiling():
    model, _twin, example = _models().MODELS["mlp"]()
    compiled = torch.compile(model, backend="eager")
    compiled(example(2))
    compiled(example(2))
    assert model.validations == 0
