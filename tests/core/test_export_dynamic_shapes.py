"""torch.export with ``dynamic_shapes`` written as torch's docs write them (issue 36): a tuple with one entry per
input, a dict keyed by input name, ``Dim.AUTO`` per input. They work because a built model's ``forward``
signature names the graph's inputs (``hndl/torch/_forward.py``); with ``forward(*args, **kwargs)`` torch.export
refused them ("top-level keys must be the arg names ['args']"). ONNX export of the same forms is in
``test_interop_onnx.py`` (the ``onnx`` nox session)."""

from __future__ import annotations

import pytest
import torch

import hndl

TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])

# As the zoo export test in test_interop_export.py: torch.export before 2.5 adds guards the dims' ranges cannot
# express (a ResNet's strided sizes' parity, the decoder's B and T specialised).
pytestmark = pytest.mark.skipif(TORCH < (2, 5), reason="torch.export of the zoo models needs torch 2.5+")

# Small configurations of three zoo entries: a CNN with symbolic H, W; a ViT whose image size is fixed; a decoder
# with two inputs sharing B and T.
CONFIGS = {
    "resnet50": {"layers1": 1, "layers2": 1, "layers3": 1, "layers4": 1, "width": 8, "num_classes": 10},
    "vit_b_16": {"image_size": 32, "patch_size": 8, "depth": 1, "num_heads": 2, "hidden_dim": 32, "mlp_dim": 64},
    "llama": {},
}
# The sizes each model is exported at and then run at: symbols that stay above torch.export's specialization (2+)
# and the model's own minimum (resnet50: H, W >= 33).
SIZES = {
    "resnet50": ({"B": 2, "H": 40, "W": 48}, {"B": 3, "H": 64, "W": 36}),
    "vit_b_16": ({"B": 2}, {"B": 5}),
    "llama": ({"B": 2, "T": 5}, {"B": 3, "T": 9}),
}


def zoo_model(name: str) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get(name, **CONFIGS[name])).eval()


def runs_like_the_model(program: torch.export.ExportedProgram, model: hndl.GraphModule, name: str) -> None:
    exported = program.module()
    for sizes in SIZES[name]:
        inputs = model.example_inputs(**sizes)
        if name == "llama":
            inputs = (torch.randint(0, 256, inputs[0].shape), torch.ones_like(inputs[1]))
        with torch.no_grad():
            torch.testing.assert_close(exported(*inputs), model(*inputs), atol=1e-5, rtol=1e-5)


def export_inputs(model: hndl.GraphModule, name: str) -> tuple[torch.Tensor, ...]:
    return model.example_inputs(**SIZES[name][0])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_dynamic_shapes_as_a_tuple_with_one_entry_per_input_exports(name):
    model = zoo_model(name)
    per_input = tuple(model.dynamic_shapes().values())
    assert len(per_input) == len(model.plan.input_names)
    program = torch.export.export(model, export_inputs(model, name), dynamic_shapes=per_input)
    runs_like_the_model(program, model, name)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_dynamic_shapes_keyed_by_input_name_export_with_positional_and_keyword_inputs(name):
    model = zoo_model(name)
    shapes = model.dynamic_shapes()
    assert list(shapes) == list(model.plan.input_names)
    inputs = export_inputs(model, name)
    program = torch.export.export(model, inputs, dynamic_shapes=shapes)
    runs_like_the_model(program, model, name)
    by_name = dict(zip(model.plan.input_names, inputs))
    program = torch.export.export(model, (), kwargs=by_name, dynamic_shapes=shapes)
    exported = program.module()
    with torch.no_grad():
        torch.testing.assert_close(exported(**by_name), model(*inputs), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_dim_auto_per_input_exports(name):
    from torch.export import Dim

    if not hasattr(Dim, "AUTO"):
        pytest.skip("torch.export.Dim.AUTO is torch 2.5+")
    model = zoo_model(name)
    inputs = export_inputs(model, name)
    auto = {n: {d: Dim.AUTO for d in range(x.dim())} for n, x in zip(model.plan.input_names, inputs)}
    program = torch.export.export(model, inputs, dynamic_shapes=auto)
    runs_like_the_model(program, model, name)


def test_hand_written_dims_keyed_by_the_input_name_export():
    from torch.export import Dim

    model = zoo_model("llama")
    batch, length = Dim("B", min=2), Dim("T", min=2, max=64)
    dims = {0: batch, 1: length}
    program = torch.export.export(
        model, export_inputs(model, "llama"), dynamic_shapes={"input_ids": dims, "attention_mask": dims}
    )
    runs_like_the_model(program, model, "llama")
    placeholders = [n.name for n in program.graph.nodes if n.op == "placeholder"]
    assert placeholders[-2:] == ["input_ids", "attention_mask"]  # the graph's inputs keep their names


def test_dynamic_shapes_in_the_old_one_tuple_form_is_refused_by_torch_export():
    # The pre-0.5 form ((spec, spec),) matched forward(*args); the signature now names the inputs, and torch
    # says so (hndl.GraphModule.dynamic_shapes() gives the dict form).
    model = zoo_model("llama")
    old = (tuple(model.dynamic_shapes().values()),)
    with pytest.raises(Exception, match=r"dynamic_shapes|input_ids"):
        torch.export.export(model, export_inputs(model, "llama"), dynamic_shapes=old)
