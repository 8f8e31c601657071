"""Loading (issue 40): each case once gave a wrong result without an error, raised something other than
``HndlError``, took unbounded work, or echoed megabytes. The hostile files and state dicts are in
``tests/support/hostile_loads.py``, which the fuzzer also runs."""

from __future__ import annotations

import json
import os
import random
import struct
import sys
from pathlib import Path

import pytest
import torch
from hostile_loads import HOSTILE_CONFIGS, HOSTILE_INDEXES, HOSTILE_STATE_DICTS, SMALL_LLAMA, write_config
from safetensors.torch import save_file
from spec_mutator import MLP_SPEC, MLP_TENSORS, model_file

import hndl
import hndl.torch
import hndl.zoo
from hndl._errors import LINE_LIMIT, PROBLEM_LIMIT, echo, echo_list
from hndl.weights import rule
from hndl.weights._rules import Template


def mlp() -> hndl.GraphModule:
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 4))
    h = g.add("linear", x, name="a", out_features=4)
    g.output(g.add("linear", g.add("relu", h, name="act"), name="b", out_features=4))
    torch.manual_seed(0)
    return hndl.build(g)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def error_of(call, *args, **kwargs) -> hndl.HndlError:
    with pytest.raises(hndl.HndlError) as info:
        call(*args, **kwargs)
    return info.value


# --- 1. rules that swap a model's own tensors ------------------------------------------------------------------


def test_rules_that_swap_two_of_the_models_own_tensors_swap_them():
    model = mlp()
    before = snapshot(model)
    swap = [("nodes.n_a.{t}", "nodes.n_b.{t}"), ("nodes.n_b.{t}", "nodes.n_a.{t}")]
    report = hndl.load_state_dict(model, model.state_dict(), swap)  # views of the very tensors it writes
    after = model.state_dict()
    for t in ("weight", "bias"):
        assert torch.equal(after[f"nodes.n_a.{t}"], before[f"nodes.n_b.{t}"])
        assert torch.equal(after[f"nodes.n_b.{t}"], before[f"nodes.n_a.{t}"])
    assert "nodes.n_a.weight -> nodes.n_b.weight" in str(report)


def test_a_rule_reading_a_tensor_the_load_writes_in_another_layout_reads_it_first():
    g = hndl.Graph("sq")
    x = g.input("x", ("B", 4))
    g.output(g.add("linear", g.add("linear", x, name="a", out_features=4, bias=False), name="b", out_features=4))
    model = hndl.build(g)
    before = snapshot(model)
    # a's weight, transposed, into a; b's into b as it is: the transpose reads the memory it writes.
    hndl.load_state_dict(model, model.state_dict(), [("nodes.n_a.weight", ("nodes.n_a.weight", "transpose"))])
    assert torch.equal(model.nodes.n_a.weight, before["nodes.n_a.weight"].t())
    assert torch.equal(model.nodes.n_b.weight, before["nodes.n_b.weight"])


def test_reloading_a_models_own_state_dict_copies_nothing_aside(monkeypatch):
    model = mlp()
    before = snapshot(model)
    clones: list[int] = []
    real = torch.Tensor.clone
    monkeypatch.setattr(torch.Tensor, "clone", lambda self, *a, **k: clones.append(1) or real(self, *a, **k))
    hndl.load_state_dict(model, model.state_dict())
    monkeypatch.undo()
    assert clones == []  # each tensor is copied into itself: nothing to read first
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])


# --- 2. a one-file model storing both tied names ---------------------------------------------------------------


def test_a_model_file_storing_both_tied_names_with_different_values_is_e_spec(tmp_path):
    spec = MLP_SPEC.replace("out_features: 4}}", "out_features: 4, tie: {weight: a.weight}}}")
    data = model_file(spec, MLP_TENSORS, tied={"nodes.n_b.weight": "nodes.n_a.weight"})
    (length,) = struct.unpack("<Q", data[:8])
    begin, end = json.loads(data[8 : 8 + length])["nodes.n_b.weight"]["data_offsets"]
    body = bytearray(data[8 + length :])
    body[begin:end] = torch.ones(16).numpy().tobytes()  # b's stored weight differs from a's (zeros)
    path = tmp_path / "model.safetensors"
    path.write_bytes(data[: 8 + length] + bytes(body))
    error = error_of(hndl.load_model, path)
    assert error.code == "E_SPEC"
    assert error.problems[0].message == (
        "the file holds 'nodes.n_b.weight' as a tensor and 'hndl.tied' ties it to 'nodes.n_a.weight': "
        "one of the two stored values would be dropped"
    )


# --- 3. from_pretrained on hostile folders ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "code", "words"),
    [
        ("rope_scaling a number", "E_PARAM", "config.json's 'rope_scaling' is a number, not an object of settings"),
        ("rope_parameters a list", "E_PARAM", "config.json's 'rope_parameters' is a list, not an object of settings"),
        ("rope_parameters a string", "E_PARAM", "'rope_parameters' is a string, not an object of settings or null"),
        ("nested 100k deep", "E_SPEC", "config.json' nests deeper than 64 levels: not a model configuration"),
        ("nested 100 deep", "E_SPEC", "config.json' nests deeper than 64 levels: not a model configuration"),
        ("1 MB model_type", "E_SPEC", "the zoo reproduces no model_type 'mmmm"),
        ("1 MB field value", "E_PARAM", "config.json's 'activation_function' is 'gggg"),
        ("config only, 1.1B parameters", "E_PARAMS", "holds no checkpoint hndl can choose"),
    ],
)
def test_regression_hostile_configs_are_hndl_errors(tmp_path, case, code, words):
    error = error_of(hndl.zoo.from_pretrained, write_config(tmp_path / "m", HOSTILE_CONFIGS[case]))
    assert error.code == code
    assert words in error.problems[0].message
    assert len(str(error)) < 5_000


def test_every_hostile_config_is_tested():
    tested = {c for c, _, _ in test_regression_hostile_configs_are_hndl_errors.pytestmark[0].args[1]}
    assert tested == set(HOSTILE_CONFIGS)


def test_rope_parameters_of_the_wrong_type_name_the_field_expected_and_actual(tmp_path):
    text = json.dumps({**SMALL_LLAMA, "rope_parameters": [1, 2]})
    (problem,) = error_of(hndl.zoo.from_pretrained, write_config(tmp_path, text)).problems
    assert (problem.code, problem.expected, problem.actual) == ("E_PARAM", "an object of settings or null", "[1, 2]")
    assert problem.location == str(tmp_path / "config.json")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_config_json_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "config.json")  # no writer: reading it would wait forever
    error = error_of(hndl.zoo.from_pretrained, tmp_path)
    assert error.code == "E_SPEC"
    assert error.problems[0].message.endswith("is not a regular file (it is a FIFO): not a model configuration")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="no /dev/zero here")
def test_a_config_json_that_is_dev_zero_is_refused_unread(tmp_path):
    (tmp_path / "config.json").symlink_to("/dev/zero")
    error = error_of(hndl.zoo.from_pretrained, tmp_path)
    assert error.problems[0].message.endswith(
        "is not a regular file (it is a character device): not a model configuration"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_an_index_json_that_is_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "model.safetensors.index.json")
    error = error_of(hndl.load_state_dict, mlp(), tmp_path / "model.safetensors.index.json")
    assert error.code == "E_PARAMS"
    assert "is not a regular file (it is a FIFO): not a checkpoint index" in error.problems[0].message


def test_a_config_only_folder_is_refused_before_the_model_is_built(tmp_path, monkeypatch):
    # A config with no weights beside it: the 1.1B-parameter model was built and initialised (4.3 GB) first.
    built: list[str] = []
    real = hndl.torch.build_module
    monkeypatch.setattr(hndl.torch, "build_module", lambda g, *a: built.append(torch.empty(0).device.type) or real(g))
    folder = write_config(tmp_path, HOSTILE_CONFIGS["config only, 1.1B parameters"])
    error = error_of(hndl.zoo.from_pretrained, folder)
    assert error.code == "E_PARAMS"
    assert built == []  # the weights were looked for before any build, meta or real


def test_weights_that_do_not_fit_the_config_are_refused_before_the_model_is_built(tmp_path, monkeypatch):
    built: list[str] = []
    real = hndl.torch.build_module
    monkeypatch.setattr(hndl.torch, "build_module", lambda g, *a: built.append(torch.empty(0).device.type) or real(g))
    write_config(tmp_path, json.dumps({**SMALL_LLAMA, "num_hidden_layers": 2}))
    save_file({"model.embed_tokens.weight": torch.zeros(32, 16)}, str(tmp_path / "model.safetensors"))
    error = error_of(hndl.zoo.from_pretrained, tmp_path)
    assert error.code == "E_PARAMS"
    assert "has no tensor in the checkpoint" in str(error)
    assert built == ["meta"]  # checked against a meta build; nothing real was built


def test_deeply_nested_index_json_is_e_params(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(HOSTILE_INDEXES["nested 100k deep"])
    error = error_of(hndl.load_state_dict, mlp(), tmp_path)
    assert error.code == "E_PARAMS"
    assert error.problems[0].message.endswith("nests deeper than 64 levels: not a checkpoint index")


@pytest.mark.parametrize("case", sorted(HOSTILE_INDEXES))
def test_regression_hostile_indexes_are_short_hndl_errors(tmp_path, case):
    (tmp_path / "model.safetensors.index.json").write_text(HOSTILE_INDEXES[case])
    error = error_of(hndl.load_state_dict, mlp(), tmp_path)
    assert error.code == "E_PARAMS"
    assert len(str(error)) < 5_000


# --- 4. a meta tensor in the source -----------------------------------------------------------------------------


def test_a_meta_tensor_in_the_source_is_refused_before_anything_is_copied():
    model = mlp()
    before = snapshot(model)
    source = {k: torch.randn(v.shape) for k, v in model.state_dict().items()}
    source = HOSTILE_STATE_DICTS["a meta tensor"](source)
    error = error_of(hndl.load_state_dict, model, source)
    assert error.code == "E_PARAMS"
    assert error.problems[0].message == (
        "checkpoint key 'nodes.n_b.bias' is on the meta device: it has a shape and a dtype but no values "
        "(load real tensors)"
    )
    for key, value in model.state_dict().items():  # all or nothing: the tensors before it are untouched
        assert torch.equal(value, before[key]), key


# --- 5. templates with several {x*} fields ----------------------------------------------------------------------


def test_a_template_with_three_star_fields_matches_a_long_key_in_linear_time():
    # 4,000 parts: the regular expression took about two minutes to refuse it (cubic), and more to match.
    key = ".".join(["p"] * 4000)
    assert Template("{a*}.{b*}.{c*}.end").match(key) is None
    values = Template("{a*}.{b*}.{c*}").match(key)
    assert values is not None
    assert (values["a"].count("."), values["b"], values["c"]) == (3997, "p", "p")  # the first takes the most
    r = rule("{a*}.x.{b*}.{c*}", "m.{c*}.{b*}.{a*}")
    assert r.forward(key) is None
    assert r.forward("p.x.q.r.s").targets[0][0] == "m.s.q.r.p"


def test_star_fields_match_what_the_regular_expression_matches():
    cases = [
        ("{a*}.{b*}", "x.y.z"),
        ("{a*}.{b*}", "x.y."),
        ("{a*}.{b*}", "x"),
        ("module.{key*}", "module"),
        ("module.{key*}", "module.a.b"),
        ("{a*}.{i}.{b*}.w", "p.1.q.2.r.w"),
        ("blocks.{i}.{layer}.{t*}", "blocks.0.attn.qkv.weight"),
        ("{a*}.x{j}.{b*}", "x1.x2.x3.x4"),
        ("{a*}..{b*}", "p..q..r"),
    ]
    for text, key in cases:
        t = Template(text)
        m = t._pattern.fullmatch(key)
        assert t.match(key) == (m.groupdict() if m else None), (text, key)


def test_star_fields_match_what_the_regular_expression_matches_on_random_templates_and_keys():
    rng = random.Random(40)
    parts = ["{a*}", "{b*}", "{c*}", "{i}", "x{j}", "x", "y", "", "{k}y", "{i+1}"]
    compared = 0
    for _ in range(3000):
        try:
            t = Template(".".join(rng.choices(parts, k=rng.randint(1, 5))))
        except ValueError:  # a field named twice, and the like
            continue
        for _ in range(3):
            key = ".".join(rng.choices(["x", "y", "", "x1", "1y", "xy", "3", "01"], k=rng.randint(1, 7)))
            want = _expected(t, t._pattern.fullmatch(key))
            assert t.match(key) == want, (t.text, key)
            compared += 1
    assert compared > 3000


def _expected(t: Template, m) -> dict[str, str] | None:
    """What the regular expression's match means, offsets applied as Template.match applies them."""
    if m is None:
        return None
    values = m.groupdict()
    for name, offset in t.offsets.items():
        if not values[name].isdigit() or (len(values[name]) > 1 and values[name][0] == "0"):
            return None
        if int(values[name]) < offset:
            return None
        values[name] = str(int(values[name]) - offset)
    return values


def test_several_star_fields_that_are_not_whole_parts_are_refused():
    with pytest.raises(ValueError, match="several '\\*' fields"):
        rule("{a*}_{b*}", "x")
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_state_dict(mlp(), {}, [("p{a*}.{b*}", "x")])
    assert info.value.code == "E_PARAMS"


# --- 6. a shard linked from outside its folder ------------------------------------------------------------------


def _sharded(folder: Path, model: hndl.GraphModule, outside: Path) -> None:
    """Two shards; the second is a link to a file in ``outside``."""
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    keys = list(state)
    folder.mkdir()
    outside.mkdir()
    save_file({k: state[k] for k in keys[:2]}, str(folder / "model-1.safetensors"))
    save_file({k: state[k] for k in keys[2:]}, str(outside / "secret.safetensors"))
    (folder / "model-2.safetensors").symlink_to(outside / "secret.safetensors")
    weight_map = {k: "model-1.safetensors" if i < 2 else "model-2.safetensors" for i, k in enumerate(keys)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def test_a_shard_linked_to_a_file_outside_the_folder_is_refused(tmp_path):
    model = mlp()
    _sharded(tmp_path / "ckpt", model, tmp_path / "elsewhere")
    before = snapshot(model)
    error = error_of(hndl.load_state_dict, model, tmp_path / "ckpt")
    assert error.code == "E_PARAMS"
    assert "names shard 'model-2.safetensors', a link to" in error.problems[0].message
    assert "outside" in error.problems[0].message
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key])


def test_a_weights_file_linked_to_a_file_outside_the_folder_is_refused(tmp_path):
    model = mlp()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "ckpt").mkdir()
    save_file(dict(model.state_dict()), str(tmp_path / "elsewhere" / "w.safetensors"))
    (tmp_path / "ckpt" / "model.safetensors").symlink_to(tmp_path / "elsewhere" / "w.safetensors")
    error = error_of(hndl.load_state_dict, model, tmp_path / "ckpt")
    assert "is a link to" in error.problems[0].message
    hndl.load_state_dict(model, tmp_path / "elsewhere" / "w.safetensors")  # named itself, it loads


def test_a_hub_snapshot_whose_files_link_to_its_blobs_loads(tmp_path):
    # huggingface_hub's cache: <repo>/snapshots/<revision>/<file> -> ../../blobs/<hash>.
    model = mlp()
    repo = tmp_path / "models--me--mlp"
    (repo / "blobs").mkdir(parents=True)
    snapshot_dir = repo / "snapshots" / "abc123"
    snapshot_dir.mkdir(parents=True)
    save_file(dict(model.state_dict()), str(repo / "blobs" / "0f1e2d"))
    (snapshot_dir / "model.safetensors").symlink_to(Path("..", "..", "blobs", "0f1e2d"))
    report = hndl.load_state_dict(mlp(), snapshot_dir)
    assert len(report.loaded) == 4


# --- 7. messages of bounded size --------------------------------------------------------------------------------


def test_32000_unexpected_keys_make_a_message_of_a_few_kb():
    model = mlp()
    source = HOSTILE_STATE_DICTS["32,000 unexpected keys"](dict(model.state_dict()))
    error = error_of(hndl.load_state_dict, model, source)
    assert len(error.problems) == 32_000  # every problem is kept as data
    text = str(error)
    assert len(text) < 20_000  # was 8.5 MB
    assert text.startswith("32000 problems in weights from the state_dict for graph 'mlp':")
    assert text.endswith(f"... and {32_000 - PROBLEM_LIMIT:,} more problems (every one is in HndlError.problems)")
    report = hndl.load_state_dict(model, source, strict=False)
    assert len(report.unexpected_keys) == 32_000
    assert str(report).endswith("  ... and 31,980 more (all in report.unexpected_keys)")


def test_a_1mb_key_is_echoed_cut_with_its_length():
    model = mlp()
    source = HOSTILE_STATE_DICTS["a 1 MB key"](dict(model.state_dict()))
    error = error_of(hndl.load_state_dict, model, source)
    text = str(error)
    assert len(text) < 5_000
    assert "'kkkk" in text
    assert "(999,800 more characters)" in text


def test_a_1mb_model_type_is_echoed_cut(tmp_path):
    error = error_of(hndl.zoo.from_pretrained, write_config(tmp_path, HOSTILE_CONFIGS["1 MB model_type"]))
    assert error.problems[0].actual == echo("m" * 1_000_000)
    assert error.problems[0].actual.endswith("... (999,800 more characters)")
    assert error.problems[0].hint is None  # no did-you-mean computed over a megabyte


def test_every_rendered_line_of_a_problem_is_capped():
    problem = hndl.Problem("E_PARAMS", "x" * 50_000, expected=["y" * 10] * 10_000, hint="z" * 9_000)
    lines = str(problem).splitlines()
    assert all(len(line) <= LINE_LIMIT + 40 for line in lines)
    assert lines[0].endswith(f"... ({len('E_PARAMS: ') + 50_000 - LINE_LIMIT:,} more characters)")


def test_echo_list_names_how_many_it_left_out():
    assert echo_list([f"k{i}" for i in range(32_000)]) == (
        "'k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7', 'k8', 'k9' ... and 31,990 more"
    )
    assert echo_list(["a", "b"]) == "'a', 'b'"
    assert echo("k" * 300, limit=4) == "'kkkk'... (296 more characters)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


def test_a_path_too_long_for_the_file_system_is_e_params_not_an_os_error() -> None:
    # Path.is_dir() raised OSError (File name too long) out of hndl.load_state_dict.
    from hndl.weights._sources import open_checkpoint

    with pytest.raises(hndl.HndlError) as caught:
        open_checkpoint("w" * 5000 + ".safetensors")
    assert caught.value.code == "E_PARAMS"
    assert "cannot be looked up" in str(caught.value)
    assert len(str(caught.value)) < 10_000
