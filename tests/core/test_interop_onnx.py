"""ONNX export (torch.onnx.export, dynamo=True) with the graph's dynamic dims, checked against onnxruntime.

Needs the ``hndl-core[onnx]`` extra; ``nox -s onnx`` installs it and runs this file. Elsewhere it skips.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
ort = pytest.importorskip("onnxruntime")

import hndl  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["mlp", "conv_stack", "transformer_block"])
def test_onnxruntime_matches_the_model_at_two_batch_sizes(name, tmp_path):
    torch.manual_seed(0)
    model = hndl.build(hndl.load(EXAMPLES / f"{name}.yaml")).eval()
    names = list(model.plan.input_names)
    program = torch.onnx.export(
        model, model.example_inputs(), dynamic_shapes=model.dynamic_shapes(), input_names=names, dynamo=True
    )
    path = tmp_path / f"{name}.onnx"
    program.save(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == names
    for batch in (3, 6):
        inputs = model.example_inputs(B=batch)
        (got,) = session.run(None, {n: v.numpy() for n, v in zip(names, inputs)})
        with torch.no_grad():
            want = model(*inputs)
        assert got.shape == tuple(want.shape)
        assert torch.allclose(torch.from_numpy(got), want, atol=1e-5, rtol=0)
