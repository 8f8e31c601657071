"""hndl.zoo.save_pretrained without transformers: the config.json a zoo model's parameters make, the weights under
the keys and layouts hndl.zoo.from_pretrained's rules read (checked by loading them back through those rules),
sharding, tied LLaMA both ways, and the refusals. The same folders against transformers itself are
tests/zoo/test_save_pretrained.py."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors import safe_open

import hndl
import hndl.zoo
from hndl.weights import Chain, PerHead, Rows, Transpose, convert_state_dict, rule

GPT2 = dict(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4)
SMALL = {"gpt2": GPT2, "llama": {}, "mistral": {}, "bert": {}}


def build(name: str, **overrides: Any) -> hndl.GraphModule:
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get(name, **{**SMALL.get(name, {}), **overrides})).eval()
    with torch.no_grad():  # norms away from 1 and 0: a key written to the wrong place would show
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.1 * torch.randn_like(tensor))
    return model


def outputs(model: hndl.GraphModule) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        inputs = model.example_inputs(B=2, T=6)  # seeded: the same for both models
        out = model(*inputs)
    return out if isinstance(out, tuple) else (out,)


def config_of(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "config.json").read_text())


def keys_in(path: Path) -> list[str]:
    with safe_open(path, "pt") as f:
        return list(f.keys())


def refusal(call: Any, *args: Any, **kwargs: Any) -> hndl.HndlError:
    with pytest.raises(hndl.HndlError) as info:
        call(*args, **kwargs)
    return info.value


# --- config.json from the graph's parameters ---------------------------------------------------------------------


def test_the_config_holds_the_graph_parameters_under_transformers_names(tmp_path):
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    params = dict(num_key_value_heads=1, head_dim=8, rope_theta=500000.0, rope_scaling=scaling, attention_bias=True)
    model = build("llama", **params)
    hndl.zoo.save_pretrained(model, tmp_path)
    config = config_of(tmp_path)
    assert {k: config[k] for k in params} == params
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["torch_dtype"] == "float32"
    assert config["tie_word_embeddings"] is False
    assert config["hidden_act"] == "silu"  # what the entry assumes, written out
    assert config["pretraining_tp"] == 1
    assert hndl.zoo.from_pretrained(tmp_path).graph.params == model.graph.params


def test_gpt2s_one_dropout_is_its_three_rates_and_its_gelu_is_torchs_tanh_gelu(tmp_path):
    hndl.zoo.save_pretrained(build("gpt2", dropout=0.25), tmp_path)
    config = config_of(tmp_path)
    assert config["architectures"] == ["GPT2LMHeadModel"]
    assert (config["resid_pdrop"], config["embd_pdrop"], config["attn_pdrop"]) == (0.25, 0.25, 0.25)
    assert config["activation_function"] == "gelu_pytorch_tanh"
    assert config["tie_word_embeddings"] is True
    assert {k: config[k] for k in GPT2} == GPT2


@pytest.mark.parametrize("name", list(SMALL))
def test_the_config_reads_back_as_the_same_graph(name, tmp_path):
    model = build(name)
    hndl.zoo.save_pretrained(model, tmp_path)
    back = hndl.zoo.from_pretrained(tmp_path)
    assert hndl.dumps(back.graph) == hndl.dumps(model.graph)


def test_the_dtype_is_the_models(tmp_path):
    model = build("bert").to(torch.bfloat16)
    hndl.zoo.save_pretrained(model, tmp_path)
    assert config_of(tmp_path)["torch_dtype"] == "bfloat16"
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()}  # noqa: SIM118  (a safe_open handle is not iterable) == {torch.bfloat16}


# --- the weights: from_pretrained's rules run backward ------------------------------------------------------------


@pytest.mark.parametrize("name", list(SMALL))
def test_the_written_weights_load_back_through_the_entry_rules_to_every_tensor(name, tmp_path):
    model = build(name)
    hndl.zoo.save_pretrained(model, tmp_path)
    loaded = convert_state_dict(model, tmp_path, hndl.zoo.entry(name).rules)  # strict: every key placed
    state = model.state_dict()
    assert set(loaded) == set(state)
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key
    back = hndl.zoo.from_pretrained(tmp_path)
    for a, b in zip(outputs(model), outputs(back), strict=True):
        assert torch.equal(a, b)


def test_gpt2_is_written_in_gpt2lmheadmodels_keys_conv1d_transposed_head_once(tmp_path):
    model = build("gpt2")
    hndl.zoo.save_pretrained(model, tmp_path)
    keys = keys_in(tmp_path / "model.safetensors")
    assert "lm_head.weight" not in keys  # tied to the token embedding: written once, as transformers writes it
    assert all(k.startswith("transformer.") for k in keys)
    key = "transformer.h.0.attn.c_attn.weight"
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        written = f.get_tensor(key)
    assert written.shape == (32, 96)  # Conv1D: [in, out], the fused projection of 32 inputs to 3*32 outputs
    found = next(m for r in hndl.zoo.entry("gpt2").rules if (m := r.forward(key)) is not None)
    ((target, layout),) = found.targets
    assert str(layout) == "transpose"
    assert torch.equal(layout.convert(written), model.state_dict()[target])


def test_split_and_per_head_layouts_are_joined_back(tmp_path):
    # Not a zoo layout today (the four entries' rules rename and transpose), but the writer runs any entry's
    # rules backward: a fused checkpoint tensor split into three model tensors is joined again.
    from hndl.zoo._save_pretrained import hub_tensors

    g = hndl.Graph("split")
    x = g.input("x", ("B", 8))
    for name in ("q", "k", "v"):
        g.output(g.add("linear", x, name=name, out_features=8))
    model = hndl.build(g)
    cases = [
        rule(
            "qkv.{t}", *[(f"nodes.n_{n}.{{t}}", Rows(Fraction(i, 3), Fraction(i + 1, 3))) for i, n in enumerate("qkv")]
        ),
        rule(
            "qkv.{t}",
            *[(f"nodes.n_{n}.{{t}}", PerHead(Fraction(i, 3), Fraction(i + 1, 3), 2)) for i, n in enumerate("qkv")],
        ),
        rule(
            "qkv.weight",
            *[
                (f"nodes.n_{n}.weight", Chain(Transpose(), Rows(Fraction(i, 3), Fraction(i + 1, 3))))
                for i, n in enumerate("qkv")
            ],
        ),
    ]
    for case in cases:
        rules = [
            case,
            rule(
                "qkv.bias",
                *[(f"nodes.n_{n}.bias", Rows(Fraction(i, 3), Fraction(i + 1, 3))) for i, n in enumerate("qkv")],
            ),
        ]
        written = {t.key: t.make() for t in hub_tensors(model, rules, "split")}
        assert sorted(written) == ["qkv.bias", "qkv.weight"]
        loaded = convert_state_dict(model, written, rules)
        for key, value in model.state_dict().items():
            assert torch.equal(loaded[key], value), (str(case), key)


def test_a_layout_that_forgets_the_shape_is_e_param():
    from hndl.zoo._save_pretrained import hub_tensors

    g = hndl.Graph("flat")
    g.output(g.add("linear", g.input("x", ("B", 4)), name="fc", out_features=3, bias=False))
    error = refusal(hub_tensors, hndl.build(g), [rule("w", ("nodes.n_fc.weight", "flatten"))], "flat")
    assert error.code == "E_PARAM"
    assert "cannot be run backward" in error.problems[0].message


# --- files: shards, formats, the folder ---------------------------------------------------------------------------


def test_a_model_over_max_shard_size_is_split_with_an_index_as_transformers_splits_it(tmp_path):
    model = build("llama")
    hndl.zoo.save_pretrained(model, tmp_path, max_shard_size="20KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 2
    assert files[0] == f"model-00001-of-{len(files):05d}.safetensors"
    assert not (tmp_path / "model.safetensors").exists()
    total = sum(v.numel() * v.element_size() for v in model.state_dict().values())  # (llama: nothing tied)
    assert index["metadata"]["total_size"] == total
    assert index["metadata"]["total_parameters"] == sum(p.numel() for p in model.parameters())
    for file in files:
        assert all(index["weight_map"][k] == file for k in keys_in(tmp_path / file))
    back = hndl.zoo.from_pretrained(tmp_path)
    for a, b in zip(outputs(model), outputs(back), strict=True):
        assert torch.equal(a, b)


def test_a_save_over_a_previous_one_removes_its_stale_weights_only(tmp_path):
    model = build("llama")
    (tmp_path / "tokenizer.json").write_text("{}")
    hndl.zoo.save_pretrained(model, tmp_path, max_shard_size="20KB")
    hndl.zoo.save_pretrained(model, tmp_path, safe_serialization=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "pytorch_model.bin", "tokenizer.json"]
    back = hndl.zoo.from_pretrained(tmp_path)
    for a, b in zip(outputs(model), outputs(back), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("size", "bytes_"), [(1000, 1000), ("5GB", 5 * 10**9), ("500MB", 5 * 10**8), ("2GiB", 2 * 2**30), ("64kib", 65536)]
)
def test_max_shard_size_reads_as_transformers_reads_it(size, bytes_):
    from hndl.zoo._save_pretrained import parse_shard_size

    assert parse_shard_size(size) == bytes_


@pytest.mark.parametrize("size", ["5 gigabytes", 0, -1, True, 1.5, "GB"])
def test_a_max_shard_size_that_is_no_size_is_e_param_and_writes_nothing(size, tmp_path):
    error = refusal(hndl.zoo.save_pretrained, build("bert"), tmp_path / "out", max_shard_size=size)
    assert error.code == "E_PARAM"
    assert "is no size" in error.problems[0].message
    assert not (tmp_path / "out").exists()


def test_a_folder_that_is_a_file_is_e_param(tmp_path):
    (tmp_path / "file").write_text("x")
    error = refusal(hndl.zoo.save_pretrained, build("bert"), tmp_path / "file")
    assert error.code == "E_PARAM"
    assert "is a file" in error.problems[0].message


# --- tied LLaMA (tie_word_embeddings: Llama 3.2 1B/3B) -------------------------------------------------------------


def tied_llama() -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("llama", tie_word_embeddings=True)).eval()


def shares_the_embedding(model: hndl.GraphModule) -> bool:
    params = dict(model.named_parameters(remove_duplicate=False))
    head = next(v for k, v in params.items() if k.endswith("lm_head.weight"))
    return head is next(v for k, v in params.items() if k.endswith("embed_tokens.weight"))


def test_get_ties_the_llama_head_with_tie_word_embeddings_as_transformers_counts_it():
    # Was E_PARAM: "zoo:llama has no parameter 'tie_word_embeddings'"; a tied LLaMA came only from from_pretrained.
    tied, untied = tied_llama(), build("llama")
    assert tied.graph.params["tie_word_embeddings"] is True
    assert untied.graph.params["tie_word_embeddings"] is False  # LLaMA 2/3/3.1: a head of their own
    assert shares_the_embedding(tied)
    assert not shares_the_embedding(untied)
    vocab, hidden = tied.graph.params["vocab_size"], tied.graph.params["hidden_size"]
    # the head's [vocab, hidden] weight counted once, as LlamaForCausalLM(tie_word_embeddings=True) counts it
    assert sum(p.numel() for p in tied.parameters()) == hndl.zoo.entry("llama").parameters - vocab * hidden
    cached = hndl.build(hndl.zoo.get("llama", kv_cache=True, tie_word_embeddings=True))
    assert shares_the_embedding(cached)  # the cached variant keeps the tie (hndl.generate derives it)


def test_a_tie_word_embeddings_override_that_is_not_a_boolean_is_e_param():
    error = refusal(hndl.zoo.get, "llama", tie_word_embeddings="yes")
    assert error.code == "E_PARAM"
    assert "parameter 'tie_word_embeddings' of zoo:llama is true or false" in error.problems[0].message


def test_a_tied_llama_from_get_saves_with_tie_word_embeddings_true_and_loads_back_tied(tmp_path):
    model = tied_llama()
    hndl.zoo.save_pretrained(model, tmp_path)
    assert config_of(tmp_path)["tie_word_embeddings"] is True
    assert not any(k.endswith("lm_head.weight") for k in keys_in(tmp_path / "model.safetensors"))
    back = hndl.zoo.from_pretrained(tmp_path)
    assert back.graph.params == model.graph.params
    assert hndl.dumps(back.graph) == hndl.dumps(model.graph)  # the entry at its parameters, nothing edited
    assert shares_the_embedding(back)
    for a, b in zip(outputs(model), outputs(back), strict=True):
        assert torch.equal(a, b)
    hndl.zoo.save_pretrained(back, tmp_path / "again")  # and it saves back the same way
    assert keys_in(tmp_path / "again" / "model.safetensors") == keys_in(tmp_path / "model.safetensors")
    assert config_of(tmp_path / "again") == config_of(tmp_path)


def test_a_tied_folder_overridden_untied_needs_a_head_it_does_not_have(tmp_path):
    hndl.zoo.save_pretrained(tied_llama(), tmp_path)
    error = refusal(hndl.zoo.from_pretrained, tmp_path, tie_word_embeddings=False)
    assert error.code == "E_PARAMS"
    assert "'lm_head.weight' has no tensor in the checkpoint" in error.problems[0].message


def test_a_head_tied_by_hand_is_an_edit_whose_hint_names_the_parameter(tmp_path):
    g = hndl.zoo.get("llama")
    g.nodes["lm_head"].tie = {"weight": "embed_tokens.weight"}  # what a tied LLaMA took before the parameter
    error = refusal(hndl.zoo.save_pretrained, hndl.build(g), tmp_path / "out")
    assert error.code == "E_PARAM"
    assert "no transformers config describes it" in error.problems[0].message
    assert error.problems[0].hint == "a tied head is a parameter: hndl.zoo.get('llama', tie_word_embeddings=True)"
    assert not (tmp_path / "out").exists()


def test_a_tie_word_embeddings_that_is_not_a_boolean_is_e_param(tmp_path):
    hndl.zoo.save_pretrained(build("llama"), tmp_path)
    config = config_of(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": "yes"}))
    error = refusal(hndl.zoo.from_pretrained, tmp_path)
    assert error.code == "E_PARAM"
    assert error.problems[0].message == "config.json's 'tie_word_embeddings' is a string, not a boolean"


def test_an_untied_llama_folder_still_needs_its_head(tmp_path):
    hndl.zoo.save_pretrained(build("llama"), tmp_path)
    config = config_of(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    error = refusal(hndl.zoo.from_pretrained, tmp_path)  # the file holds lm_head.weight: tied, it has no place
    assert error.code == "E_PARAMS"
    assert "lm_head.weight" in error.problems[0].message


# --- refusals -----------------------------------------------------------------------------------------------------


def test_a_model_that_is_not_a_graph_module_is_e_param(tmp_path):
    error = refusal(hndl.zoo.save_pretrained, torch.nn.Linear(2, 2), tmp_path)
    assert error.code == "E_PARAM"
    assert error.problems[0].message == "save_pretrained writes a built zoo model, not Linear"


def test_a_zoo_entry_without_a_transformers_layout_is_e_param_naming_it(tmp_path):
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get("resnet18"))
    error = refusal(hndl.zoo.save_pretrained, model, tmp_path)
    assert error.code == "E_PARAM"
    assert error.problems[0].message.startswith("zoo:resnet18 has no transformers layout")
    assert "zoo:gpt2, zoo:llama, zoo:mistral, zoo:bert" in error.problems[0].expected
    assert "hndl.save" in error.problems[0].hint
    assert list(tmp_path.iterdir()) == []


def test_a_graph_that_is_no_zoo_entry_is_e_param(tmp_path):
    g = hndl.Graph("mlp")
    g.output(g.add("linear", g.input("x", ("B", 4)), out_features=2))
    error = refusal(hndl.zoo.save_pretrained, hndl.build(g), tmp_path)
    assert error.problems[0].message.startswith("graph 'mlp' is not a zoo entry")


def test_an_edited_zoo_graph_is_e_param_naming_the_change_and_writes_nothing(tmp_path):
    g = hndl.zoo.get("llama")
    g.nodes["lm_head"].params["bias"] = True
    error = refusal(hndl.zoo.save_pretrained, hndl.build(g), tmp_path / "out")
    assert error.code == "E_PARAM"
    problem = error.problems[0]
    assert "no transformers config describes it" in problem.message
    assert "bias: false" in problem.expected
    assert "bias: true" in problem.actual
    assert not (tmp_path / "out").exists()


def test_a_node_added_to_a_zoo_graph_is_e_param(tmp_path):
    g = hndl.zoo.get("bert")
    g.add("relu", "pooler_act", name="extra")
    error = refusal(hndl.zoo.save_pretrained, hndl.build(g), tmp_path)
    assert "no transformers config describes it" in error.problems[0].message
    assert "extra" in error.problems[0].actual


def test_a_head_untied_after_the_build_is_refused_not_written_half(tmp_path):
    model = build("gpt2")
    head = next(m for n, m in model.named_modules() if n.endswith("lm_head"))
    head.weight = torch.nn.Parameter(head.weight.detach().clone() + 1)  # the spec ties it; the values differ now
    error = refusal(hndl.zoo.save_pretrained, model, tmp_path)
    assert error.code == "E_SPEC"
    assert "not one tensor" in error.problems[0].message
    assert list(tmp_path.iterdir()) == []


def test_a_model_on_the_meta_device_is_e_param(tmp_path):
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get("bert"))
    error = refusal(hndl.zoo.save_pretrained, model, tmp_path)
    assert error.code == "E_PARAM"
    assert "meta device" in error.problems[0].message
