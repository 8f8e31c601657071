"""One-file models: hndl.save / hndl.load_model round trips, tied weights, and files that are wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import hndl

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def example(name: str) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.load(EXAMPLES / f"{name}.yaml"))


def tied_lm() -> hndl.GraphModule:
    g = hndl.Graph("lm")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    h = g.add("embedding", ids, name="emb", num_embeddings=11, embedding_dim=8)
    g.output(g.add("linear", h, name="head", out_features=11, bias=False, tie={"weight": "emb.weight"}))
    return hndl.build(g)  # weight tying, as GPT-2 does it


def code_of(err: pytest.ExceptionInfo[hndl.HndlError]) -> str:
    return err.value.problems[0].code


@pytest.mark.parametrize("name", ["mlp", "conv_stack", "transformer_block"])
def test_a_saved_model_loads_back_bit_for_bit(name, tmp_path):
    model = example(name)
    (x,) = model.example_inputs(B=3)
    model.train()
    model(x).sum().backward()  # batchnorm's running stats move away from their initial values
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    path = tmp_path / f"{name}.safetensors"
    hndl.save(model, path)
    loaded = hndl.load_model(path)
    assert isinstance(loaded, hndl.GraphModule)
    assert hndl.dumps(loaded.graph) == hndl.dumps(model.graph)
    assert model.state_dict().keys() == loaded.state_dict().keys()
    for key, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    model.eval()
    loaded.eval()
    assert torch.equal(loaded(x), model(x))
    assert loaded.validations == 1  # a checked model: the call above validated


def test_tied_weights_are_stored_once_and_tied_again(tmp_path):
    model = tied_lm()
    path = tmp_path / "lm.safetensors"
    hndl.save(model, path)
    with safe_open(str(path), framework="pt") as f:
        assert sorted(f.keys()) == ["nodes.n_emb.weight"]
        assert json.loads(f.metadata()["hndl.tied"]) == {"nodes.n_head.weight": "nodes.n_emb.weight"}
    loaded = hndl.load_model(path)
    assert loaded.nodes.n_head.weight is loaded.nodes.n_emb.weight
    ids = torch.randint(0, 11, (2, 5))
    assert torch.equal(loaded(ids), model(ids))
    loaded(ids).sum().backward()  # one parameter, one gradient from both uses
    assert [name for name, _ in loaded.named_parameters()] == ["nodes.n_emb.weight"]


def test_a_half_model_keeps_its_dtype(tmp_path):
    model = example("mlp").double()
    hndl.save(model, tmp_path / "m.safetensors")
    loaded = hndl.load_model(tmp_path / "m.safetensors")
    assert loaded.nodes.n_hidden.weight.dtype == torch.float64
    (x,) = model.example_inputs()
    x = x.double()
    assert torch.equal(loaded.eval()(x), model.eval()(x))


def test_the_loaded_model_still_checks_its_inputs(tmp_path):
    hndl.save(example("mlp"), tmp_path / "m.safetensors")
    loaded = hndl.load_model(tmp_path / "m.safetensors")
    with pytest.raises(hndl.HndlError) as err:
        loaded(torch.randn(2, 783))
    assert code_of(err) == "E_INPUT"


def rewrite(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    with safe_open(str(path), framework="pt") as f:
        metadata = f.metadata()
    tensors = load_file(str(path))
    change(tensors, metadata)
    save_file(tensors, str(path), metadata=metadata)


def test_weights_that_do_not_match_the_spec_are_e_params_naming_each(tmp_path):
    path = tmp_path / "m.safetensors"
    hndl.save(example("mlp"), path)

    def change(tensors, metadata):  # type: ignore[no-untyped-def]
        tensors["nodes.n_out.weight"] = torch.zeros(10, 511)
        del tensors["nodes.n_hidden.bias"]
        tensors["nodes.n_hiden.weight"] = torch.zeros(1)

    rewrite(path, change)
    with pytest.raises(hndl.HndlError) as err:
        hndl.load_model(path)
    found = {(p.code, p.node, p.message) for p in err.value.problems}
    assert ("E_PARAMS", "out", "parameter 'nodes.n_out.weight' has shape [10, 511] in the file") in found
    assert ("E_PARAMS", "hidden", "parameter 'nodes.n_hidden.bias' is missing from the file") in found
    unexpected = [p for p in err.value.problems if "n_hiden" in p.message]
    assert unexpected[0].hint == "did you mean 'nodes.n_hidden.weight'?"
    assert str(path) in str(err.value)


def test_a_truncated_file_is_e_spec_saying_truncated(tmp_path):
    path = tmp_path / "m.safetensors"
    hndl.save(example("mlp"), path)
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(hndl.HndlError, match="is truncated") as err:
        hndl.load_model(path)
    assert code_of(err) == "E_SPEC"


def test_a_file_cut_inside_its_header_is_truncated_too(tmp_path):
    path = tmp_path / "m.safetensors"
    hndl.save(example("mlp"), path)
    path.write_bytes(path.read_bytes()[:50])
    with pytest.raises(hndl.HndlError, match="is truncated"):
        hndl.load_model(path)


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"hndl: 1\nname: mlp\n",
        b"\x00" * 8,
        b"PK\x03\x04" + b"\x00" * 200,
        b"\x10\x00\x00\x00\x00\x00\x00\x00[1, 2, 3]       ",
    ],
    ids=["empty", "yaml", "zero-length-header", "zip", "json-not-object"],
)
def test_a_file_that_is_not_safetensors_is_e_spec(tmp_path, content):
    path = tmp_path / "m.safetensors"
    path.write_bytes(content)
    with pytest.raises(hndl.HndlError) as err:
        hndl.load_model(path)
    assert code_of(err) == "E_SPEC"
    assert str(path) in err.value.problems[0].message


def test_a_torch_save_file_is_refused_without_unpickling_it(tmp_path):
    path = tmp_path / "m.pt"
    torch.save(example("mlp").state_dict(), path)
    with pytest.raises(hndl.HndlError, match="not a safetensors file"):
        hndl.load_model(path)


def test_a_weights_only_safetensors_file_says_how_to_load_it(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in example("mlp").state_dict().items()}, str(path))
    with pytest.raises(hndl.HndlError, match="holds no hndl spec") as err:
        hndl.load_model(path)
    assert "load_state_dict" in (err.value.problems[0].hint or "")


def test_a_missing_file_is_e_spec(tmp_path):
    with pytest.raises(hndl.HndlError, match="cannot be read"):
        hndl.load_model(tmp_path / "absent.safetensors")


def test_loading_never_executes_code_from_the_file(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "m.safetensors"
    hndl.save(example("mlp"), path)
    evil = (
        "hndl: 1\nname: evil\ninputs:\n  x: {shape: [B, 4]}\nnodes:\n"
        f'  run: {{op: module, in: x, target: "subprocess:run", kwargs: {{args: [touch, "{marker}"]}}}}\n'
        "outputs: [run]\n"
    )
    rewrite(path, lambda tensors, metadata: metadata.update({"hndl.spec": evil}))
    with pytest.raises(hndl.HndlError, match="refused"):
        hndl.load_model(path)
    assert not marker.exists()


def test_torch_save_of_the_state_dict_loads_with_weights_only(tmp_path):
    model = tied_lm()
    torch.save(model.state_dict(), tmp_path / "sd.pt")
    fresh = tied_lm()
    fresh.load_state_dict(torch.load(tmp_path / "sd.pt", weights_only=True))
    ids = torch.randint(0, 11, (2, 5))
    assert torch.equal(fresh(ids), model(ids))
