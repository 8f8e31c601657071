"""hndl.zoo: listing and getting entries, overrides, `zoo:` names, the key maps, and the all-or-nothing load."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hndl
import hndl.zoo
from hndl.weights import Rows, Transpose, rule

ENTRIES = [
    "resnet18",
    "resnet50",
    "vit_b_16",
    "vit_tiny_patch16_224",
    "gpt2",
    "unet",
    "lstm_classifier",
    "seq2seq_transformer",
    "llama",
    "mistral",
    "bert",
    "whisper_encoder",
    "t5_encoder",
    "mobilenet_v3_small",
    "convnext_tiny",
    "efficientnet_b0",
    "swin_t",
    "densenet121",
]


# every_install_set: the entries are package data, found differently by regular and editable installs.
@pytest.mark.every_install_set
def test_names_lists_the_entries_without_importing_torch():
    code = "import sys, hndl; print(hndl.zoo.names()); hndl.check(hndl.zoo.get('gpt2')); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [str(ENTRIES), "False"]


@pytest.mark.every_install_set
@pytest.mark.parametrize("name", ENTRIES)
def test_every_entry_checks_and_builds_with_its_references_parameter_count(name):
    torch = pytest.importorskip("torch")
    graph = hndl.zoo.get(name)
    assert graph.name == name
    with torch.device("meta"):  # the count needs shapes only, not gigabytes of weights
        model = hndl.build(graph)
    assert sum(p.numel() for p in model.parameters()) == hndl.zoo.entry(name).parameters


def test_gpt2_summary_ends_with_the_tied_count():
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, "-m", "hndl", "summary", "zoo:gpt2"], capture_output=True, text=True, check=False
    )
    if "no such file: 'zoo:gpt2'" in out.stdout + out.stderr:
        pytest.skip("the hndl command does not read zoo: names yet (CLI)")
    assert out.returncode == 0, out.stderr
    totals = [line for line in out.stdout.splitlines() if line.startswith("params:")]
    assert totals == ["params:      124,439,808 (trainable 124,439,808, non-trainable 0)"]


@pytest.mark.every_install_set
def test_hndl_load_reads_zoo_names():
    graph = hndl.load("zoo:resnet18")
    assert graph.name == "resnet18"
    assert hndl.dumps(graph) == hndl.dumps(hndl.zoo.get("resnet18"))


def test_locations_name_the_entry():
    graph = hndl.zoo.get("gpt2")
    assert graph.nodes["lm_head"].location.startswith("zoo:gpt2:")


def test_overrides_set_the_specs_parameters():
    graph = hndl.zoo.get("zoo:gpt2", n_layer=2, vocab_size=100)
    assert graph.params["n_layer"] == 2
    assert graph.params["vocab_size"] == 100
    assert graph.params["n_embd"] == 768
    assert hndl.zoo.get("gpt2").params["n_layer"] == 12  # every get is a fresh graph


def test_an_unknown_override_is_e_param_with_a_did_you_mean():
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.get("resnet18", num_class=10, depth=3)
    err = info.value
    assert [p.code for p in err.problems] == ["E_PARAM", "E_PARAM"]
    assert err.problems[0].message == "zoo:resnet18 has no parameter 'num_class'"
    assert err.problems[0].hint == "did you mean 'num_classes'?"
    assert err.problems[1].expected == "one of layers1, layers2, layers3, layers4, width, num_classes"


def test_a_bad_override_value_is_reported_by_the_checker_at_the_spec_line():
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.zoo.get("gpt2", n_head=5))
    problem = info.value.problems[0]
    assert problem.code == "E_PARAM"
    assert problem.location is not None
    assert problem.location.startswith("zoo:gpt2:")


def test_a_preset_sets_a_published_configuration_and_overrides_apply_after_it():
    graph = hndl.zoo.get("llama", preset="llama-3-8b")
    assert (graph.params["num_key_value_heads"], graph.params["rope_theta"]) == (8, 500000.0)
    assert graph.params["vocab_size"] == 128256
    assert hndl.zoo.get("llama", preset="llama-3-8b", num_hidden_layers=2).params["num_hidden_layers"] == 2
    assert hndl.zoo.get("zoo:llama@llama-2-7b").params == hndl.zoo.get("llama", preset="llama-2-7b").params
    assert hndl.dumps(hndl.load("zoo:bert@bert-base")) == hndl.dumps(hndl.zoo.get("bert", preset="bert-base"))
    assert list(hndl.zoo.presets("zoo:mistral")) == ["mistral-7b"]
    # a preset's values are the entry's own: changing the returned graph's changes no later get
    scaled = hndl.zoo.get("llama", preset="llama-3.1-8b")
    scaled.params["rope_scaling"]["factor"] = 2.0
    assert hndl.zoo.get("llama", preset="llama-3.1-8b").params["rope_scaling"]["factor"] == 8.0


def test_an_unknown_preset_is_e_spec_with_a_did_you_mean():
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.get("llama", preset="llama-2-13b")
    problem = info.value.problems[0]
    assert (problem.code, problem.message) == ("E_SPEC", "zoo:llama has no preset 'llama-2-13b'")
    assert problem.expected == "one of llama-2-7b, llama-3-8b, llama-3.1-8b"
    assert problem.hint is None  # another size is no misspelling (naming.closest): the list says what there is
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.get("llama", preset="lama-2-7b")
    assert info.value.problems[0].hint == "did you mean 'llama-2-7b'?"
    with pytest.raises(hndl.HndlError) as info:
        hndl.load("zoo:resnet18@resnet34")
    assert info.value.problems[0].expected == "no preset: this entry has none"


def test_the_summary_command_counts_a_preset_on_the_meta_device():
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, "-m", "hndl", "summary", "zoo:llama@llama-2-7b", "--depth", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    totals = [line for line in out.stdout.splitlines() if line.startswith("params:")]
    assert totals == ["params:      6,738,415,616 (trainable 6,738,415,616, non-trainable 0)"]


def test_an_unknown_entry_is_e_spec_with_a_did_you_mean():
    with pytest.raises(hndl.HndlError) as info:
        hndl.load("zoo:resnte18")
    assert info.value.code == "E_SPEC"
    assert info.value.problems[0].message == "the zoo has no entry 'resnte18'"
    assert info.value.problems[0].hint == "did you mean 'resnet18'?"


def test_another_depth_is_not_offered_as_a_spelling_fix():
    # resnet19 is no misspelt resnet18: another number is another model (hndl.naming.closest).
    with pytest.raises(hndl.HndlError) as info:
        hndl.load("zoo:resnet19")
    assert info.value.problems[0].message == "the zoo has no entry 'resnet19'"
    assert info.value.problems[0].hint is None
    assert "resnet18" in info.value.problems[0].expected


def test_spec_files_are_in_a_regular_wheel(tmp_path):
    """A regular (non-editable) install of hndl-core ships the spec files as package data."""
    import zipfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "packages" / "hndl-core"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {build.stderr[-300:]}")
    (wheel,) = tmp_path.glob("hndl_core-*.whl")
    files = set(zipfile.ZipFile(wheel).namelist())
    for name in ENTRIES:
        assert f"hndl/zoo/specs/{name}.yaml" in files


# --- the key maps ---------------------------------------------------------------------------------------


def test_a_rule_maps_both_ways_and_fields_carry_over():
    r = rule("layer{s}.{b}.{layer}.{t}", "nodes.n_layer{s}.{b}.n_{layer}.{t}")
    match = r.forward("layer2.1.conv1.weight")
    assert [(key, str(layout)) for key, layout in match.targets] == [("nodes.n_layer2.1.n_conv1.weight", "same")]
    assert r.forward("layer2.conv1.weight") is None
    assert r.backward("nodes.n_layer2.1.n_conv1.weight") == ("layer2.1.conv1.weight",)


def test_the_zoo_key_maps_are_the_public_loaders_rules():
    import hndl.weights

    assert hndl.zoo.Rule is hndl.weights.Rule
    assert all(isinstance(r, hndl.weights.Rule) for name in ENTRIES for r in hndl.zoo.entry(name).rules)
    (cross,) = [r for r in hndl.zoo.entry("seq2seq_transformer").rules if "multihead_attn.in_proj" in r.sources[0]]
    assert [t.layout for t in cross.targets] == [Rows(0, "1/3"), Rows("1/3", 1)]
    (c_attn,) = [r for r in hndl.zoo.entry("gpt2").rules if r.sources == ("h.{i}.attn.c_attn.weight",)]
    assert c_attn.targets[0].layout == Transpose()


def test_an_unknown_layout_is_refused_when_the_map_is_written():
    with pytest.raises(ValueError, match="unknown layout 'flip'"):
        rule("x", ("y", "flip"))


# --- loading reference weights ------------------------------------------------------------------------------


def _lstm_reference_state(**config):
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from references import LSTMClassifier

    torch.manual_seed(0)
    return LSTMClassifier(**config).state_dict()


def test_every_missing_unexpected_and_misshaped_key_is_reported_at_once_and_nothing_is_loaded():
    torch = pytest.importorskip("torch")
    model = hndl.build(hndl.zoo.get("lstm_classifier"))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    state = _lstm_reference_state()
    state["fc.wieght"] = state.pop("fc.weight")  # a typo: unexpected, and fc.weight missing
    state["embedding.weight"] = torch.zeros(10, 128)  # wrong vocabulary
    state["extra.bias"] = torch.zeros(3)
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.load_reference_state_dict(model, "lstm_classifier", state)
    err = info.value
    assert all(p.code == "E_PARAMS" for p in err.problems)
    messages = [p.message for p in err.problems]
    assert "checkpoint key 'fc.wieght' has no place in zoo:lstm_classifier" in messages
    assert err.problems[messages.index("checkpoint key 'fc.wieght' has no place in zoo:lstm_classifier")].hint == (
        "did you mean 'fc.weight'?"
    )
    assert "checkpoint key 'extra.bias' has no place in zoo:lstm_classifier" in messages
    assert (
        "checkpoint key 'embedding.weight' has shape [10, 128]; 'nodes.n_embedding.weight' needs [10000, 128]"
        in messages
    )
    missing = next(p for p in err.problems if p.actual == "missing")
    assert missing.message == "'nodes.n_fc.weight' has no tensor in the checkpoint: expected checkpoint key 'fc.weight'"
    assert missing.node == "fc"
    assert missing.op == "linear"
    assert missing.hint == "did you mean 'fc.wieght'?"
    assert len(err.problems) == 4
    assert str(err).startswith("4 problems in reference weights for zoo:lstm_classifier:")
    for key, value in model.state_dict().items():  # never a partial load
        assert torch.equal(value, before[key]), key


def test_a_reference_of_another_configuration_is_misshaped_not_partially_loaded():
    pytest.importorskip("torch")
    model = hndl.build(hndl.zoo.get("lstm_classifier", num_classes=3))
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.load_reference_state_dict(model, "lstm_classifier", _lstm_reference_state())
    assert {p.node for p in info.value.problems} == {"fc"}
    assert "classes" in info.value.problems[0].hint


def test_a_value_that_is_not_a_tensor_is_e_params():
    pytest.importorskip("torch")
    model = hndl.build(hndl.zoo.get("lstm_classifier"))
    state = _lstm_reference_state()
    state["fc.bias"] = [0.0, 0.0]
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.load_reference_state_dict(model, "zoo:lstm_classifier", state)
    assert info.value.problems[0].message == "checkpoint key 'fc.bias' holds list, not a tensor"


def test_loading_the_reference_loads_every_tensor():
    torch = pytest.importorskip("torch")
    model = hndl.build(hndl.zoo.get("lstm_classifier"))
    state = _lstm_reference_state()
    hndl.zoo.load_reference_state_dict(model, "lstm_classifier", state)
    assert torch.equal(model.nodes["n_lstm"].weight_hh_l1_reverse, state["lstm.weight_hh_l1_reverse"])
