"""hndl.load_state_dict from files and folders: .safetensors, .bin/.pt (weights_only), sharded checkpoints with
their *.index.json (safetensors and pytorch_model.bin forms), and every path that is not a checkpoint."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import small_models
import torch
from safetensors.torch import save_file

import hndl
from hndl.weights import Concat, Rule, Target


def mlp() -> hndl.GraphModule:
    torch.manual_seed(0)
    return small_models.mlp(6, 4, 3)


def weights(seed: int = 3) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) for k, v in mlp().state_dict().items()}


def assert_loaded(model: hndl.GraphModule, state: dict[str, torch.Tensor]) -> None:
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key


def write_shards(folder: Path, state: dict[str, torch.Tensor], kind: str, per_shard: int = 1) -> Path:
    """A sharded checkpoint as transformers writes one: shards of ``per_shard`` tensors and an index."""
    keys = list(state)
    groups = [keys[i : i + per_shard] for i in range(0, len(keys), per_shard)]
    weight_map = {}
    for i, group in enumerate(groups, 1):
        if kind == "safetensors":
            name = f"model-{i:05d}-of-{len(groups):05d}.safetensors"
            save_file({k: state[k].contiguous() for k in group}, str(folder / name))
        else:
            name = f"pytorch_model-{i:05d}-of-{len(groups):05d}.bin"
            torch.save({k: state[k] for k in group}, folder / name)
        weight_map.update(dict.fromkeys(group, name))
    index = folder / ("model.safetensors.index.json" if kind == "safetensors" else "pytorch_model.bin.index.json")
    index.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return index


def refused(source, rules=()) -> hndl.HndlError:
    model = mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_state_dict(model, source, rules)
    assert all(p.code == "E_PARAMS" for p in info.value.problems)
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    return info.value


# --- one file -------------------------------------------------------------------------------------------------


def test_a_safetensors_file_loads(tmp_path):
    state = weights()
    save_file(state, str(tmp_path / "w.safetensors"))
    model = mlp()
    report = hndl.load_state_dict(model, tmp_path / "w.safetensors")
    assert_loaded(model, state)
    assert report.source == f"'{tmp_path / 'w.safetensors'}'"


@pytest.mark.parametrize("suffix", [".bin", ".pt", ".pth"])
def test_a_torch_file_loads_with_weights_only(tmp_path, suffix):
    state = weights()
    torch.save(state, tmp_path / f"w{suffix}")
    model = mlp()
    hndl.load_state_dict(model, str(tmp_path / f"w{suffix}"))
    assert_loaded(model, state)


def test_a_torch_file_in_the_legacy_format_loads(tmp_path):
    state = weights()
    torch.save(state, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    model = mlp()
    hndl.load_state_dict(model, tmp_path / "old.pt")
    assert_loaded(model, state)


def test_a_folder_with_one_weights_file_loads(tmp_path):
    state = weights()
    save_file(state, str(tmp_path / "model.safetensors"))
    model = mlp()
    hndl.load_state_dict(model, tmp_path)
    assert_loaded(model, state)


def test_a_folder_prefers_safetensors_as_transformers_does(tmp_path):
    save_file(weights(1), str(tmp_path / "model.safetensors"))
    torch.save(weights(2), tmp_path / "pytorch_model.bin")
    model = mlp()
    hndl.load_state_dict(model, tmp_path)
    assert_loaded(model, weights(1))


def test_rules_apply_to_files_as_to_mappings(tmp_path):
    state = {k.replace("nodes.n_", ""): v for k, v in weights().items()}
    save_file(state, str(tmp_path / "w.safetensors"))
    model = mlp()
    hndl.load_state_dict(model, tmp_path / "w.safetensors", [("{layer}.{t}", "nodes.n_{layer}.{t}")])
    assert_loaded(model, weights())


def test_a_half_precision_file_loads_into_a_float32_model(tmp_path):
    state = {k: v.half() for k, v in weights().items()}
    save_file(state, str(tmp_path / "w.safetensors"))
    model = mlp()
    report = hndl.load_state_dict(model, tmp_path / "w.safetensors")
    assert model.nodes.n_out.weight.dtype == torch.float32
    assert torch.equal(model.nodes.n_out.weight, state["nodes.n_out.weight"].float())
    assert report.loaded[0].dtype == "float16 -> float32"


# --- sharded ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["safetensors", "bin"])
def test_a_sharded_folder_loads_through_its_index(tmp_path, kind):
    state = weights()
    index = write_shards(tmp_path, state, kind)
    for source in (tmp_path, index):  # the folder, or the index itself
        model = mlp()
        report = hndl.load_state_dict(model, source)
        assert_loaded(model, state)
        assert len(report.loaded) == 4


def test_a_joined_tensor_may_come_from_several_shards(tmp_path):
    g = hndl.Graph("proj")
    g.output(g.add("linear", g.input("x", ("B", 4)), name="qkv", out_features=12, bias=False))
    model = hndl.build(g)
    parts = {f"{p}.weight": torch.randn(4, 4) for p in "qkv"}
    write_shards(tmp_path, parts, "safetensors")  # one part per shard
    hndl.load_state_dict(
        model, tmp_path, [Rule(("q.weight", "k.weight", "v.weight"), (Target("nodes.n_qkv.weight", Concat()),))]
    )
    assert torch.equal(model.nodes.n_qkv.weight, torch.cat([parts["q.weight"], parts["k.weight"], parts["v.weight"]]))


def test_an_unmatched_key_in_a_sharded_checkpoint_is_named_with_its_closest_name(tmp_path):
    state = weights()
    state["nodes.n_out.bais"] = state.pop("nodes.n_out.bias")
    write_shards(tmp_path, state, "safetensors", per_shard=2)
    err = refused(tmp_path)
    messages = {p.message: p.hint for p in err.problems}
    assert (
        messages["checkpoint key 'nodes.n_out.bais' has no place in graph 'mlp'"] == "did you mean 'nodes.n_out.bias'?"
    )
    assert str(err).startswith(
        f"2 problems in weights from '{tmp_path / 'model.safetensors.index.json'}' for graph 'mlp':"
    )


# --- not a checkpoint -----------------------------------------------------------------------------------------


def test_a_path_that_does_not_exist(tmp_path):
    err = refused(tmp_path / "nothing.safetensors")
    assert err.problems[0].message == f"'{tmp_path / 'nothing.safetensors'}' does not exist"


def test_a_file_of_another_kind(tmp_path):
    (tmp_path / "notes.txt").write_text("weights")
    err = refused(tmp_path / "notes.txt")
    assert err.problems[0].message == f"'{tmp_path / 'notes.txt'}' is not a checkpoint"
    assert (
        err.problems[0].hint == "pass a .safetensors, .bin, .pt or .pth file, an *.index.json, or a folder holding one"
    )


def test_a_safetensors_file_that_is_not_one(tmp_path):
    (tmp_path / "w.safetensors").write_bytes(b"\xff" * 64)
    err = refused(tmp_path / "w.safetensors")
    assert err.problems[0].message.startswith(f"'{tmp_path / 'w.safetensors'}' cannot be read as safetensors: ")


def test_a_truncated_safetensors_file(tmp_path):
    save_file(weights(), str(tmp_path / "w.safetensors"))
    data = (tmp_path / "w.safetensors").read_bytes()
    (tmp_path / "w.safetensors").write_bytes(data[:-40])
    err = refused(tmp_path / "w.safetensors")
    assert "cannot be read as safetensors" in err.problems[0].message


class _Code:
    def __reduce__(self):
        return (print, ("this would run",))


def test_a_pickle_that_would_run_code_is_refused_unrun(tmp_path, capsys):
    torch.save({"nodes.n_out.bias": _Code()}, tmp_path / "evil.pt")
    err = refused(tmp_path / "evil.pt")
    assert err.problems[0].message.startswith(
        f"'{tmp_path / 'evil.pt'}' cannot be read as a torch checkpoint with weights_only=True: "
    )
    assert err.problems[0].hint.startswith("hndl never unpickles code")
    assert "this would run" not in capsys.readouterr().out


def test_a_file_that_is_not_a_torch_file(tmp_path):
    (tmp_path / "w.bin").write_bytes(pickle.dumps("text") + b"junk")
    err = refused(tmp_path / "w.bin")
    assert "cannot be read as a torch checkpoint" in err.problems[0].message


def test_a_torch_file_holding_a_list_is_not_a_state_dict(tmp_path):
    torch.save([torch.zeros(1)], tmp_path / "w.pt")
    err = refused(tmp_path / "w.pt")
    assert err.problems[0].message == f"'{tmp_path / 'w.pt'}' holds list, not a mapping of names to tensors"


def test_a_training_checkpoint_says_where_its_tensors_are(tmp_path):
    torch.save({"epoch": 3, "model": weights(), "optimizer": {"lr": 0.1}}, tmp_path / "ckpt.pt")
    err = refused(tmp_path / "ckpt.pt")
    assert err.problems[0].message == (
        f"'{tmp_path / 'ckpt.pt'}' holds a training checkpoint (keys 'epoch', 'model', 'optimizer'), not a state_dict"
    )
    assert err.problems[0].hint == "the tensors are under 'model': pass torch.load(path, weights_only=True)['model']"


def test_a_folder_without_a_checkpoint(tmp_path):
    err = refused(tmp_path)
    assert err.problems[0].message == f"'{tmp_path}' holds no checkpoint hndl can choose"


def test_a_folder_with_two_checkpoints_asks_which(tmp_path):
    torch.save(weights(), tmp_path / "a.pt")
    torch.save(weights(), tmp_path / "b.pt")
    err = refused(tmp_path)
    assert err.problems[0].message == f"'{tmp_path}' holds no checkpoint hndl can choose: a.pt, b.pt"
    assert err.problems[0].hint.endswith("pass the file to load")


@pytest.mark.parametrize(
    ("index", "message"),
    [
        ("not json", "is not JSON (Expecting value: line 1 column 1 (char 0)): not a checkpoint index"),
        ('{"metadata": {}}', "is not a checkpoint index: it has no 'weight_map' of key names to file names"),
        ('{"weight_map": {"a": 3}}', "is not a checkpoint index: it has no 'weight_map' of key names to file names"),
        (
            '{"weight_map": {"a": "../outside.safetensors"}}',
            "names shard '../outside.safetensors', which is not a file name beside the index",
        ),
        (
            '{"weight_map": {"a": "/etc/passwd"}}',
            "names shard '/etc/passwd', which is not a file name beside the index",
        ),
        (
            '{"weight_map": {"a": "notes.txt"}}',
            "names shard 'notes.txt', which is not a .safetensors, .bin, .pt or .pth file",
        ),
        ('{"weight_map": {"a": "gone.safetensors"}}', "names shard 'gone.safetensors', which is not in"),
        ('{"weight_map": {"a": "real.safetensors"}}', "places 'a' in 'real.safetensors', which does not hold it"),
    ],
)
def test_an_index_that_is_wrong(tmp_path, index, message):
    save_file(weights(), str(tmp_path / "real.safetensors"))
    (tmp_path / "model.safetensors.index.json").write_text(index)
    err = refused(tmp_path)
    assert err.problems[0].message.startswith(f"'{tmp_path / 'model.safetensors.index.json'}' {message}")


def test_a_failed_load_from_a_file_leaves_the_model_and_the_file_as_they_were(tmp_path):
    state = weights()
    state["nodes.n_out.weight"] = torch.zeros(5, 4)
    save_file(state, str(tmp_path / "w.safetensors"))
    data = (tmp_path / "w.safetensors").read_bytes()
    refused(tmp_path / "w.safetensors")
    assert (tmp_path / "w.safetensors").read_bytes() == data


# --- reading lazily --------------------------------------------------------------------------------------------


def test_values_are_read_once_each_and_only_after_everything_is_checked(tmp_path, monkeypatch):
    from hndl.weights import _sources

    reads: list[str] = []
    real = _sources._read_safetensors
    monkeypatch.setattr(_sources, "_read_safetensors", lambda h, key, where: reads.append(key) or real(h, key, where))
    state = weights()
    write_shards(tmp_path, state, "safetensors")
    hndl.load_state_dict(mlp(), tmp_path)
    assert sorted(reads) == sorted(state)  # one read per tensor
    reads.clear()
    bad = tmp_path / "bad"
    bad.mkdir()
    write_shards(bad, {**state, "nodes.n_out.bias": torch.zeros(7)}, "safetensors")
    refused(bad)
    assert reads == []  # a refused load read shapes and dtypes only


def test_zip_format_torch_files_are_memory_mapped(tmp_path, monkeypatch):
    calls = []
    real = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k) or real(*a, **k))
    write_shards(tmp_path, weights(), "bin")
    hndl.load_state_dict(mlp(), tmp_path)
    assert len(calls) == 4
    assert all(k["weights_only"] is True and k["mmap"] is True for k in calls)


@pytest.mark.parametrize("name", ["model.safetensors.index.json", "config.json"])
def test_an_index_or_config_too_large_to_be_one_is_refused_unread(tmp_path, name):
    with open(tmp_path / name, "wb") as f:
        f.truncate(80 * 1024 * 1024)  # sparse: nothing is written
    if name == "config.json":
        with pytest.raises(hndl.HndlError) as info:
            hndl.zoo.from_pretrained(tmp_path)
        assert info.value.problems[0].message.endswith("is larger than 4,194,304 bytes: not a model configuration")
    else:
        err = refused(tmp_path)
        assert err.problems[0].message.endswith("is larger than 67,108,864 bytes: not a checkpoint index")
