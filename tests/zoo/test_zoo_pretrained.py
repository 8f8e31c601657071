"""hndl.zoo.from_pretrained (a transformers-style folder as a zoo model) and GPT-2's hub key layout.

The first half runs everywhere: its folders are written here (config.json by hand, the weights in the hub's
layout made from an hndl model through the entry's rules run backward). The second half checks against
transformers itself (`nox -s reference`; skipped where transformers does not import): GPT2Model's and
GPT2LMHeadModel's state_dicts, and folders written by `save_pretrained`, one file or sharded. No network.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from parity import require
from safetensors.torch import save_file

import hndl
import hndl.zoo
from hndl.weights import Transpose

SMALL = dict(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4)


def small_gpt2(**overrides) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("gpt2", **{**SMALL, **overrides})).eval()


def hub_state(model: hndl.GraphModule) -> dict[str, torch.Tensor]:
    """``model``'s weights under GPT2Model's keys (no ``transformer.``, no head), Conv1D weights transposed."""
    rules = [
        r
        for r in hndl.zoo.entry("gpt2").rules
        if r.targets and not r.sources[0].startswith(("transformer.", "lm_head"))
    ]
    out = {}
    for key, value in model.state_dict().items():
        if key == "lm_head.weight":
            continue  # tied to wte: the hub's files do not hold it
        (r, sources) = next((r, s) for r in rules if (s := r.backward(key)) is not None)
        out[sources[0]] = value.t().contiguous() if r.targets[0].layout == Transpose() else value.contiguous()
    return out


def write_folder(folder: Path, model: hndl.GraphModule, config: dict | None = None, fmt: str = "safetensors") -> Path:
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config or {"model_type": "gpt2", **SMALL}))
    state = hub_state(model)
    if fmt == "safetensors":
        save_file(state, str(folder / "model.safetensors"))
    else:  # sharded pytorch_model.bin, two shards
        keys = list(state)
        halves = {"pytorch_model-00001-of-00002.bin": keys[: len(keys) // 2]}
        halves["pytorch_model-00002-of-00002.bin"] = keys[len(keys) // 2 :]
        weight_map = {}
        for name, part in halves.items():
            torch.save({k: state[k] for k in part}, folder / name)
            weight_map.update(dict.fromkeys(part, name))
        (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def tokens() -> torch.Tensor:
    return torch.randint(0, SMALL["vocab_size"], (2, 8), generator=torch.Generator().manual_seed(1))


# --- the hub layout ------------------------------------------------------------------------------------------


def test_a_gpt2_state_dict_in_the_hub_layout_loads_into_zoo_gpt2():
    source = small_gpt2()
    state = hub_state(source)
    assert "wte.weight" in state
    assert "h.0.attn.c_attn.weight" in state
    model = hndl.build(hndl.zoo.get("gpt2", **SMALL)).eval()
    report = hndl.zoo.load_reference_state_dict(model, "gpt2", state)
    with torch.no_grad():
        assert torch.equal(model(tokens()), source(tokens()))
    assert model.lm_head.weight is model.transformer.wte.weight
    assert "  h.0.attn.c_attn.weight -> transformer.h.0.attn.qkv.weight (transpose)" in str(report).splitlines()
    assert "  wte.weight -> transformer.wte.weight  [tied: lm_head.weight]" in str(report).splitlines()


def test_the_entry_rules_are_what_the_public_loader_takes():
    source = small_gpt2()
    model = hndl.build(hndl.zoo.get("gpt2", **SMALL)).eval()
    hndl.load_state_dict(model, hub_state(source), rules=hndl.zoo.entry("gpt2").rules)
    with torch.no_grad():
        assert torch.equal(model(tokens()), source(tokens()))


def test_without_the_entry_rules_every_hub_key_is_named_with_the_closest_key():
    model = hndl.build(hndl.zoo.get("gpt2", **SMALL))
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_state_dict(model, hub_state(small_gpt2()))
    problems = info.value.problems
    unplaced = [p for p in problems if p.message.endswith("has no place in graph 'gpt2'")]
    assert len(unplaced) == 28  # every key of the checkpoint
    first = next(p for p in unplaced if p.actual == "h.0.ln_1.weight")
    assert first.hint == "did you mean 'transformer.h.0.ln_1.weight'?"


# --- from_pretrained, folders written here -----------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["safetensors", "sharded bin"])
def test_a_transformers_folder_loads_as_its_zoo_entry(tmp_path, fmt):
    source = small_gpt2()
    model = hndl.zoo.from_pretrained(write_folder(tmp_path / "gpt2", source, fmt=fmt))
    assert model.graph.name == "gpt2"
    assert {k: model.graph.params[k] for k in SMALL} == SMALL
    assert model.graph.params["dropout"] == 0.1  # GPT2Config's default resid_pdrop
    assert not model.training  # as transformers returns it
    with torch.no_grad():
        assert torch.equal(model(tokens()), source(tokens()))


def test_overrides_set_the_entrys_parameters(tmp_path):
    model = hndl.zoo.from_pretrained(write_folder(tmp_path / "gpt2", small_gpt2()), dropout=0.0)
    assert model.graph.params["dropout"] == 0.0


def test_an_override_the_entry_does_not_have_is_e_param(tmp_path):
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(write_folder(tmp_path / "gpt2", small_gpt2()), n_embd2=64)
    assert info.value.code == "E_PARAM"
    assert info.value.problems[0].hint is None  # a number added is no misspelling (naming.closest)
    assert "n_embd" in info.value.problems[0].expected


def test_a_config_field_the_entry_cannot_reproduce_is_refused(tmp_path):
    config = {"model_type": "gpt2", **SMALL, "activation_function": "relu", "tie_word_embeddings": False}
    folder = write_folder(tmp_path / "gpt2", small_gpt2(), config)
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(folder)
    assert [p.code for p in info.value.problems] == ["E_PARAM", "E_PARAM"]
    assert info.value.problems[0].message == (
        "config.json's 'activation_function' is 'relu'; zoo:gpt2 reproduces 'gelu_new' or 'gelu_pytorch_tanh' "
        "(GPT-2's tanh-approximated GELU)"
    )
    assert info.value.problems[1].message == (
        "config.json's 'tie_word_embeddings' is False; zoo:gpt2 reproduces True (the head shares the token embedding)"
    )
    assert info.value.problems[0].location == str(folder / "config.json")


def test_three_dropout_rates_must_agree_unless_dropout_is_given(tmp_path):
    config = {"model_type": "gpt2", **SMALL, "attn_pdrop": 0.0}
    folder = write_folder(tmp_path / "gpt2", small_gpt2(), config)
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(folder)
    assert info.value.problems[0].message == (
        "config.json's 'attn_pdrop' is 0.0; zoo:gpt2 reproduces 0.1 (as resid_pdrop) (one dropout rate)"
    )
    assert info.value.problems[0].hint == "pass dropout=... to choose one"
    assert hndl.zoo.from_pretrained(folder, dropout=0.0).graph.params["dropout"] == 0.0


def test_weights_of_another_size_than_the_config_says_are_e_params(tmp_path):
    folder = write_folder(tmp_path / "gpt2", small_gpt2(), {"model_type": "gpt2", **SMALL, "n_positions": 32})
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(folder)
    assert info.value.code == "E_PARAMS"
    assert (
        info.value.problems[0].message
        == "checkpoint key 'wpe.weight' has shape [16, 32]; 'transformer.wpe.weight' needs [32, 32]"
    )


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (None, "config.json' does not exist"),
        ("{", "config.json' is not JSON"),
        ("[1]", "config.json' has no model_type (got list)"),
        ('{"n_layer": 2}', "config.json' has no model_type (got None)"),
    ],
)
def test_a_folder_without_a_readable_config_is_e_spec(tmp_path, config, message):
    if config is not None:
        (tmp_path / "config.json").write_text(config)
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(tmp_path)
    assert info.value.code == "E_SPEC"
    assert message in info.value.problems[0].message


def test_a_model_type_the_zoo_does_not_reproduce_is_e_spec_with_a_did_you_mean(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt-2"}')
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(tmp_path)
    assert info.value.problems[0].message == "the zoo reproduces no model_type 'gpt-2'"
    assert info.value.problems[0].hint == "did you mean 'gpt2'?"


def test_a_path_that_is_not_a_folder_is_e_spec(tmp_path):
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(tmp_path / "missing")
    assert info.value.code == "E_SPEC"
    assert info.value.problems[0].message == f"'{tmp_path / 'missing'}' is not a folder"


# --- against transformers ---------------------------------------------------------------------------------------


def _transformers_gpt2():
    transformers = require("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(**SMALL, bos_token_id=0, eos_token_id=0)
    return transformers, transformers.GPT2LMHeadModel(config).eval()


def _close(model: hndl.GraphModule, reference) -> None:
    with torch.no_grad():
        # allclose: transformers' gelu_new and torch's tanh GELU are the same formula computed differently
        torch.testing.assert_close(model.eval()(tokens()), reference(tokens()).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["GPT2LMHeadModel", "GPT2Model (hub)"])
def test_both_transformers_layouts_load_into_zoo_gpt2(layout):
    _, reference = _transformers_gpt2()
    state = reference.state_dict() if layout == "GPT2LMHeadModel" else reference.transformer.state_dict()
    model = hndl.build(hndl.zoo.get("gpt2", **SMALL))
    report = hndl.load_state_dict(model, state, rules=hndl.zoo.entry("gpt2").rules)
    _close(model, reference)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert set(report.model_keys) == set(model.state_dict())


@pytest.mark.parametrize("shard", [None, "60KB"])
def test_a_folder_written_by_save_pretrained_loads(tmp_path, shard):
    _, reference = _transformers_gpt2()
    reference.save_pretrained(tmp_path, **({"max_shard_size": shard} if shard else {}))
    if shard:
        assert (tmp_path / "model.safetensors.index.json").is_file()
    model = hndl.zoo.from_pretrained(tmp_path)
    _close(model, reference)
