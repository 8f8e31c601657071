"""hndl.zoo.save_pretrained against transformers: a zoo model written as a transformers folder loads into
transformers' Auto classes with every key in place and gives the same outputs, and reads back through
hndl.zoo.from_pretrained; LLaMA with tie_word_embeddings (Llama 3.2 1B/3B's layout) both ways.

Small configurations, random weights, nothing downloaded. transformers does not import beside the default
sessions' torch, so these run in `nox -s reference` (torch 2.14.1, transformers 5) and skip elsewhere. Outputs are
compared with torch.equal: hndl runs scaled_dot_product_attention as transformers' "sdpa" implementation does,
and save_pretrained writes GPT-2's activation as gelu_pytorch_tanh, torch's tanh GELU that hndl computes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from parity import require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

GPT2 = dict(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4)


def _decoder_inputs(vocab: int) -> Callable[[torch.Generator], dict[str, torch.Tensor]]:
    def make(gen: torch.Generator) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, vocab, (2, 9), generator=gen)
        return {"input_ids": ids, "attention_mask": torch.ones(2, 9, dtype=torch.bool)}

    return make


def _bert_inputs(gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.randint(1, 256, (2, 9), generator=gen),
        "attention_mask": torch.ones(2, 9, dtype=torch.bool),
        "token_type_ids": torch.randint(0, 2, (2, 9), generator=gen),
    }


def _gpt2_inputs(gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {"tokens": torch.randint(0, GPT2["vocab_size"], (2, 9), generator=gen)}


def _theirs(name: str, reference: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    if name == "gpt2":
        return (reference(input_ids=inputs["tokens"]).logits,)
    mask = inputs["attention_mask"].long()
    if name == "bert":
        out = reference(input_ids=inputs["input_ids"], attention_mask=mask, token_type_ids=inputs["token_type_ids"])
        return out.last_hidden_state, out.pooler_output
    return (reference(input_ids=inputs["input_ids"], attention_mask=mask).logits,)


CASES: dict[str, tuple[dict[str, Any], Callable[[torch.Generator], dict[str, torch.Tensor]], str]] = {
    "gpt2": (GPT2, _gpt2_inputs, "AutoModelForCausalLM"),
    "llama": ({}, _decoder_inputs(256), "AutoModelForCausalLM"),
    "mistral": ({}, _decoder_inputs(256), "AutoModelForCausalLM"),
    "bert": ({}, _bert_inputs, "AutoModel"),
}


def _ours(model: hndl.GraphModule, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    out = model(**inputs)
    return out if isinstance(out, tuple) else (out,)


def _random_model(name: str, **overrides: Any) -> hndl.GraphModule:
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get(name, **{**CASES[name][0], **overrides})).eval()
    with torch.no_grad():  # norms' weights and biases away from 1 and 0, so a swapped key would show
        for tensor in model.state_dict().values():
            if tensor.is_floating_point():
                tensor.add_(0.1 * torch.randn_like(tensor))
    return model


def _load_transformers(name: str, folder: Path) -> Any:
    tf = require("transformers")
    auto = getattr(tf, CASES[name][2])
    reference, info = auto.from_pretrained(folder, output_loading_info=True, attn_implementation="sdpa")
    assert {k: v for k, v in info.items() if v} == {}  # no missing, unexpected or mismatched key, no error
    assert type(reference).__name__ == json.loads((folder / "config.json").read_text())["architectures"][0]
    return reference.eval()


def _assert_equal(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y), (x - y).abs().max()


@pytest.mark.parametrize("shard", [None, "20KB"])
@pytest.mark.parametrize("name", list(CASES))
def test_a_saved_zoo_model_loads_into_transformers_and_back_with_equal_outputs(name, shard, tmp_path):
    model = _random_model(name)
    hndl.zoo.save_pretrained(model, tmp_path, **({"max_shard_size": shard} if shard else {}))
    index = tmp_path / "model.safetensors.index.json"
    assert index.is_file() == bool(shard)
    assert (tmp_path / "model.safetensors").is_file() == (not shard)
    if shard:
        weight_map = json.loads(index.read_text())["weight_map"]
        assert len(set(weight_map.values())) > 1
        for file in set(weight_map.values()):  # (a tensor over the limit has a file of its own, as transformers')
            held = [k for k, f in weight_map.items() if f == file]
            assert (tmp_path / file).stat().st_size <= 20_000 + 2_000 or len(held) == 1
    inputs = CASES[name][1](torch.Generator().manual_seed(8))
    reference = _load_transformers(name, tmp_path)
    back = hndl.zoo.from_pretrained(tmp_path)
    with torch.no_grad():
        ours = _ours(model, inputs)
        _assert_equal(ours, _theirs(name, reference, inputs))
        _assert_equal(ours, _ours(back, inputs))


def test_gpt2_is_written_as_gpt2lmheadmodel_with_the_head_stored_once(tmp_path):
    hndl.zoo.save_pretrained(_random_model("gpt2"), tmp_path)
    reference = _load_transformers("gpt2", tmp_path)
    assert reference.lm_head.weight is reference.transformer.wte.weight
    from safetensors import safe_open

    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "lm_head.weight" not in keys
    assert "transformer.h.0.attn.c_attn.weight" in keys
    # Conv1D holds [in, out]: the fused projection of 32 inputs to 3*32 outputs
    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert list(f.get_slice("transformer.h.0.attn.c_attn.weight").get_shape()) == [32, 96]


def test_transformers_own_save_of_the_loaded_model_reads_back_equal(tmp_path):
    # transformers' save_pretrained of what hndl wrote is a folder from_pretrained reads: the two layouts agree
    model = _random_model("llama")
    hndl.zoo.save_pretrained(model, tmp_path / "hndl")
    _load_transformers("llama", tmp_path / "hndl").save_pretrained(tmp_path / "transformers")
    inputs = CASES["llama"][1](torch.Generator().manual_seed(3))
    with torch.no_grad():
        _assert_equal(_ours(model, inputs), _ours(hndl.zoo.from_pretrained(tmp_path / "transformers"), inputs))


# --- tied LLaMA (tie_word_embeddings: Llama 3.2 1B/3B) ---------------------------------------------------------


def _tied_llama(tf: Any, folder: Path) -> Any:
    params = dict(hndl.zoo.get("llama").params)
    config = tf.LlamaConfig(
        vocab_size=params["vocab_size"],
        hidden_size=params["hidden_size"],
        intermediate_size=params["intermediate_size"],
        num_hidden_layers=params["num_hidden_layers"],
        num_attention_heads=params["num_attention_heads"],
        num_key_value_heads=params["num_key_value_heads"],
        rms_norm_eps=params["rms_norm_eps"],
        tie_word_embeddings=True,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    reference = tf.LlamaForCausalLM(config).eval()
    reference.save_pretrained(folder)
    return reference


def test_a_tied_llama_folder_was_refused_and_now_loads_equal_to_transformers(tmp_path):
    tf = require("transformers")
    reference = _tied_llama(tf, tmp_path / "tf")
    from safetensors import safe_open

    with safe_open(tmp_path / "tf" / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in set(f.keys())  # the layout: the head is the embedding
    model = hndl.zoo.from_pretrained(tmp_path / "tf")
    assert model.graph.params["tie_word_embeddings"] is True  # the entry's parameter, read from the config
    head = dict(model.named_parameters(remove_duplicate=False))
    embedding = next(v for k, v in head.items() if k.endswith("embed_tokens.weight"))
    assert next(v for k, v in head.items() if k.endswith("lm_head.weight")) is embedding
    inputs = CASES["llama"][1](torch.Generator().manual_seed(4))
    with torch.no_grad():
        _assert_equal(_ours(model, inputs), _theirs("llama", reference, inputs))

    # and back: the tied layout, which transformers loads with the head tied and equal outputs
    hndl.zoo.save_pretrained(model, tmp_path / "hndl")
    config = json.loads((tmp_path / "hndl" / "config.json").read_text())
    assert config["tie_word_embeddings"] is True
    with safe_open(tmp_path / "hndl" / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in set(f.keys())
    again = _load_transformers("llama", tmp_path / "hndl")
    assert again.lm_head.weight is again.model.embed_tokens.weight
    with torch.no_grad():
        _assert_equal(_ours(model, inputs), _theirs("llama", again, inputs))
        _assert_equal(_ours(model, inputs), _ours(hndl.zoo.from_pretrained(tmp_path / "hndl"), inputs))


def test_a_tied_llama_generates_as_transformers_does(tmp_path):
    tf = require("transformers")
    reference = _tied_llama(tf, tmp_path)
    model = hndl.zoo.from_pretrained(tmp_path)
    prompt = torch.randint(0, 256, (1, 5), generator=torch.Generator().manual_seed(5))
    ours = hndl.generate(model, prompt, max_new_tokens=6)
    theirs = reference.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(ours, theirs)


def test_a_tied_llama_from_get_saves_as_a_tied_llama_transformers_loads_with_equal_logits(tmp_path):
    # Was E_PARAM: zoo:llama had no tie_word_embeddings; a tied head had to be set on the graph by hand.
    model = _random_model("llama", tie_word_embeddings=True)
    hndl.zoo.save_pretrained(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["tie_word_embeddings"] is True
    reference = _load_transformers("llama", tmp_path)  # no missing key: transformers ties lm_head itself
    assert reference.config.tie_word_embeddings is True
    assert reference.lm_head.weight is reference.model.embed_tokens.weight
    inputs = CASES["llama"][1](torch.Generator().manual_seed(6))
    with torch.no_grad():
        _assert_equal(_ours(model, inputs), _theirs("llama", reference, inputs))
        _assert_equal(_ours(model, inputs), _ours(hndl.zoo.from_pretrained(tmp_path), inputs))
    prompt = inputs["input_ids"][:1, :5]
    ours = hndl.generate(model, prompt, max_new_tokens=6)
    theirs = reference.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(ours, theirs)
