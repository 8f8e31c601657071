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


# --- dynamic_shapes as torch's docs write them (issue 36: forward's signature names the inputs) ---------------

SMALL = {
    "vit_b_16": ({"image_size": 32, "patch_size": 8, "depth": 1, "num_heads": 2, "hidden_dim": 32, "mlp_dim": 64}, {"B": 2}, {"B": 5}),
    "llama": ({}, {"B": 2, "T": 5}, {"B": 3, "T": 9}),
    "resnet50": (
        {"layers1": 1, "layers2": 1, "layers3": 1, "layers4": 1, "width": 8, "num_classes": 10},
        {"B": 2, "H": 40, "W": 48},
        {"B": 3, "H": 64, "W": 36},
    ),
}  # fmt: skip


def _form(model, inputs, form):
    if form == "tuple":
        return tuple(model.dynamic_shapes().values())
    if form == "by_name":
        return model.dynamic_shapes()
    from torch.export import Dim

    return {n: {d: Dim.AUTO for d in range(x.dim())} for n, x in zip(model.plan.input_names, inputs)}


@pytest.mark.parametrize("form", ["tuple", "by_name", "auto"])
@pytest.mark.parametrize("name", list(SMALL))
def test_onnx_export_takes_dynamic_shapes_per_input_by_name_and_auto(name, form, tmp_path):
    config, first, second = SMALL[name]
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get(name, **config)).eval()
    inputs = model.example_inputs(**first)
    names = list(model.plan.input_names)
    program = torch.onnx.export(model, inputs, dynamic_shapes=_form(model, inputs, form), dynamo=True)
    path = tmp_path / f"{name}.onnx"
    program.save(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == names  # named after forward's parameters
    inputs = model.example_inputs(**second)
    if name == "llama":
        inputs = (torch.randint(0, 256, inputs[0].shape), torch.ones_like(inputs[1]))
    (got,) = session.run(None, {n: v.numpy() for n, v in zip(names, inputs)})
    with torch.no_grad():
        want = model(*inputs)
    assert torch.allclose(torch.from_numpy(got), want, atol=1e-4, rtol=1e-4)
