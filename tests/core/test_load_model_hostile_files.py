"""Hostile one-file models (issue 20): ``hndl.load_model`` on small ``.safetensors`` files that raised
RuntimeError, RecursionError or TypeError, allocated a gigabyte before finding the weights missing, or made two
parameters one object because the file said so. Each file is in ``spec_mutator.HOSTILE_MODELS``, which the fuzzer
runs first and then mutates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from spec_mutator import (
    BATCHNORM_SPEC,
    BATCHNORM_TENSORS,
    HOSTILE_MODELS,
    MLP_SPEC,
    MLP_TENSORS,
    MODEL_SEEDS,
    model_file,
)

import hndl
import hndl.torch._build


def load_error(tmp_path: Path, data: bytes, **kwargs: bool) -> hndl.HndlError:
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_model(path, **kwargs)
    return info.value


def first(error: hndl.HndlError, tmp_path: Path) -> tuple[str, str]:
    """The first problem's code and message, with the file's path written as FILE."""
    problem = error.problems[0]
    return problem.code, problem.message.replace(str(tmp_path / "model.safetensors"), "FILE")


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("int weights", "E_PARAMS", "parameter 'nodes.n_a.weight' has dtype int64 in the file"),
        ("bool weights", "E_PARAMS", "parameter 'nodes.n_a.weight' has dtype bool in the file"),
        ("uint8 weights", "E_PARAMS", "parameter 'nodes.n_a.weight' has dtype uint8 in the file"),
        ("header nested 100k deep", "E_SPEC", "model file 'FILE' is not a safetensors file: its header nests too deep"),
        ("tied of the wrong type", "E_SPEC", "model file 'FILE' has unreadable 'hndl.tied' metadata: not a mapping of names"),
        ("tied to a number", "E_SPEC", "model file 'FILE' has unreadable 'hndl.tied' metadata: not a mapping of names"),
        (
            "tied as a JSON object",
            "E_SPEC",
            "model file 'FILE' is not a safetensors file: its __metadata__ is not a mapping of text",
        ),
        (
            "tie a parameter to a buffer",
            "E_SPEC",
            "'hndl.tied' ties 'nodes.n_n.weight' to 'nodes.n_n.running_mean', which the spec does not tie",
        ),
        ("16384x16384 linear in 221 bytes", "E_PARAMS", "parameter 'nodes.n_n.weight' is missing from the file"),
        (
            "invented tie",
            "E_SPEC",
            "'hndl.tied' ties 'nodes.n_b.weight' to 'nodes.n_a.weight', which the spec does not tie",
        ),
        (
            "spec of another type",
            "E_SPEC",
            "model file 'FILE' is not a safetensors file: its __metadata__ is not a mapping of text",
        ),
        ("unknown dtype", "E_SPEC", "model file 'FILE' entry 'nodes.n_a.weight' has dtype 'Q9', which hndl cannot load"),
        (
            "offsets disagree with the shape",
            "E_SPEC",
            "model file 'FILE' is not a safetensors file: entry 'nodes.n_a.bias' has 16 bytes, its shape and dtype need 20",
        ),
        # found by the fuzzer: a ValueError printing the product of the sizes
        ("4000-digit sizes", "E_SPEC", "model file 'FILE' is not a safetensors file: entry 'nodes.n_a.bias' has no shape"),
        (
            "both tied names stored",
            "E_SPEC",
            "the file holds 'nodes.n_b.weight' as a tensor and 'hndl.tied' ties it to 'nodes.n_a.weight': one of "
            "the two stored values would be dropped",
        ),
        (
            "sizes whose product is huge",
            "E_SPEC",
            "model file 'FILE' is not a safetensors file: entry 'nodes.n_a.bias' has 16 bytes, its shape and dtype "
            "need more than the 160 the file holds",
        ),
    ],
)  # fmt: skip
def test_regression_hostile_model_files_are_hndl_errors(case: str, code: str, message: str, tmp_path: Path) -> None:
    assert first(load_error(tmp_path, HOSTILE_MODELS[case]), tmp_path) == (code, message)


def test_every_hostile_model_file_is_tested() -> None:
    tested = {c for c, _, _ in test_regression_hostile_model_files_are_hndl_errors.pytestmark[0].args[1]}
    assert tested == set(HOSTILE_MODELS)


@pytest.mark.parametrize("name", sorted(MODEL_SEEDS))
def test_the_model_seeds_load(name: str, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(MODEL_SEEDS[name])
    assert isinstance(hndl.load_model(path), hndl.GraphModule)


def test_regression_int_weights_name_the_node_and_the_dtype_wanted(tmp_path: Path) -> None:
    (problem,) = load_error(tmp_path, HOSTILE_MODELS["int weights"]).problems
    assert (problem.code, problem.node, problem.op) == ("E_PARAMS", "a", "linear")
    assert (problem.expected, problem.actual) == ("a floating dtype (the spec builds float32)", "int64")


def test_an_integer_buffer_stored_as_floats_is_refused(tmp_path: Path) -> None:
    tensors = {**BATCHNORM_TENSORS, "nodes.n_n.num_batches_tracked": ("F32", [])}
    (problem,) = load_error(tmp_path, model_file(BATCHNORM_SPEC, tensors)).problems
    assert (problem.code, problem.message) == (
        "E_PARAMS",
        "buffer 'nodes.n_n.num_batches_tracked' has dtype float32 in the file",
    )
    assert (problem.expected, problem.actual) == ("int64", "float32")


def test_a_model_saved_in_another_float_dtype_still_loads(tmp_path: Path) -> None:
    tensors = {name: ("F16" if code == "F32" else code, shape) for name, (code, shape) in BATCHNORM_TENSORS.items()}
    path = tmp_path / "model.safetensors"
    path.write_bytes(model_file(BATCHNORM_SPEC, tensors))
    model = hndl.load_model(path)
    assert model.nodes.n_n.weight.dtype == torch.float16
    assert model.nodes.n_n.num_batches_tracked.dtype == torch.int64


def test_regression_a_221_byte_file_asking_for_a_1gb_linear_allocates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The spec was built for real (16384 x 16384 floats: 1 GB) before the missing weights were noticed.
    devices: list[str] = []
    build = hndl.torch._build.build_module

    def spy(graph: hndl.Graph, checked: object = None) -> hndl.GraphModule:
        devices.append(torch.empty(0).device.type)
        return build(graph, checked)  # type: ignore[arg-type]

    monkeypatch.setattr(hndl.torch._build, "build_module", spy)
    data = HOSTILE_MODELS["16384x16384 linear in 221 bytes"]
    assert len(data) < 230
    error = load_error(tmp_path, data)
    assert [p.message for p in error.problems] == [
        "parameter 'nodes.n_n.weight' is missing from the file",
        "parameter 'nodes.n_n.bias' is missing from the file",
    ]
    assert devices == ["meta"]  # checked against a meta build; nothing real was built


def test_regression_an_invented_tie_neither_ties_nor_drops_a_tensor(tmp_path: Path) -> None:
    # The file tied 'b.weight' to 'a.weight', which the spec does not: loading made them one Parameter and
    # dropped b's stored tensor.
    error = load_error(tmp_path, HOSTILE_MODELS["invented tie"])
    (problem,) = error.problems
    assert problem.code == "E_SPEC"
    assert problem.hint == (
        "load_model rebuilds ties from the spec: declare them there (Graph.add(..., tie={'weight': 'emb.weight'}), "
        "a node's 'tie:' in a spec file)"
    )


def test_a_file_that_stores_apart_what_the_spec_ties_is_refused(tmp_path: Path) -> None:
    spec = MLP_SPEC.replace("out_features: 4}}", "out_features: 4, tie: {weight: a.weight}}}")
    (problem,) = load_error(tmp_path, model_file(spec, MLP_TENSORS)).problems
    assert (problem.code, problem.message) == (
        "E_SPEC",
        "the spec ties 'nodes.n_b.weight' to 'nodes.n_a.weight', but the file stores them apart",
    )


def test_a_tie_to_a_name_the_file_does_not_hold_is_refused(tmp_path: Path) -> None:
    tensors = {k: v for k, v in MLP_TENSORS.items() if k != "nodes.n_b.weight"}
    data = model_file(MLP_SPEC, tensors, tied={"nodes.n_b.weight": "nodes.n_zz.weight"})
    assert first(load_error(tmp_path, data), tmp_path) == (
        "E_SPEC",
        "'hndl.tied' ties 'nodes.n_b.weight' to 'nodes.n_zz.weight', which the file does not hold",
    )


def tied_by_hand() -> hndl.GraphModule:
    model = hndl.build(hndl.loads(MLP_SPEC))
    model.nodes.n_b.weight = model.nodes.n_a.weight
    return model


def test_a_model_tied_after_it_was_built_is_not_saved(tmp_path: Path) -> None:
    # Its file could not be loaded (the spec does not tie them), so save says so instead of writing it.
    path = tmp_path / "model.safetensors"
    with pytest.raises(hndl.HndlError) as info:
        hndl.save(tied_by_hand(), path)
    assert [(p.code, p.message) for p in info.value.problems] == [
        ("E_SPEC", "'nodes.n_a.weight', 'nodes.n_b.weight' are one tensor in the model, but the spec does not tie them")
    ]
    assert not path.exists()


def test_a_model_untied_after_it_was_built_is_not_saved(tmp_path: Path) -> None:
    spec = MLP_SPEC.replace("out_features: 4}}", "out_features: 4, tie: {weight: a.weight}}}")
    model = hndl.build(hndl.loads(spec))
    model.nodes.n_b.weight = torch.nn.Parameter(model.nodes.n_a.weight.detach().clone())
    with pytest.raises(hndl.HndlError) as info:
        hndl.save(model, tmp_path / "model.safetensors")
    assert info.value.problems[0].message == (
        "the spec ties 'nodes.n_a.weight', 'nodes.n_b.weight', but in the model they are not one tensor"
    )


MODULE_SPEC = (
    "hndl: 1\ninputs: {x: {shape: [B, 4]}}\n"
    "nodes: {h: {op: linear, in: x, out_features: 4}, act: {op: module, in: h, target: 'torch.nn:Tanh'}}\n"
    "outputs: [act]\n"
)


def test_regression_load_model_takes_allow_imports(tmp_path: Path) -> None:
    # Its refusal told users to pass allow_imports, and load_model raised TypeError when they did.
    path = tmp_path / "model.safetensors"
    model = hndl.build(hndl.loads(MODULE_SPEC, allow_imports=True))
    hndl.save(model, path)
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_model(path)
    (problem,) = info.value.problems
    assert problem.message == "importing 'torch.nn:Tanh' is refused: this spec was loaded without allow_imports"
    assert problem.hint == "pass allow_imports=True to hndl.load (or hndl.load_model) if you trust this file"
    loaded = hndl.load_model(path, allow_imports=True)
    x = torch.randn(3, 4)
    assert torch.equal(loaded(x), model(x))
    assert isinstance(loaded.nodes.n_act, torch.nn.Tanh)
