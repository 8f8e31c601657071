"""Zoo decoders' module paths (SPEC 6.7) are transformers' own: the same ``state_dict`` keys, and the same names for
every module that holds parameters, so a name written for transformers (a PEFT target, a TP plan) finds the
same layers in hndl's model."""

from __future__ import annotations

from typing import Any

import pytest

import hndl
import hndl.zoo

tf = pytest.importorskip("transformers")


def _config(name: str, p: dict[str, Any]) -> Any:
    common = dict(
        vocab_size=p["vocab_size"],
        hidden_size=p["hidden_size"],
        intermediate_size=p["intermediate_size"],
        num_hidden_layers=p["num_hidden_layers"],
        num_attention_heads=p["num_attention_heads"],
        num_key_value_heads=p["num_key_value_heads"],
    )
    if name == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(**common))
    return tf.MistralForCausalLM(tf.MistralConfig(**common))


def _with_parameters(module: Any) -> set[str]:
    return {n for n, m in module.named_modules() if any(True for _ in m.parameters(recurse=False))}


@pytest.mark.parametrize("name", ["llama", "mistral"])
def test_zoo_decoder_state_dict_keys_are_transformers(name: str) -> None:
    graph = hndl.zoo.get(name)
    model = hndl.build(graph)
    reference = _config(name, graph.params)
    assert set(model.state_dict()) == set(reference.state_dict())
    assert _with_parameters(model) == _with_parameters(reference)


def test_zoo_gpt2_names_follow_gpt2lmheadmodel_but_for_the_fused_attention() -> None:
    size = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32)
    model = hndl.build(hndl.zoo.get("gpt2", **size))
    reference = tf.GPT2LMHeadModel(tf.GPT2Config(**size))
    ours = set(model.state_dict())
    theirs = {k.replace("attn.c_attn", "attn.qkv").replace("attn.c_proj", "attn.proj") for k in reference.state_dict()}
    theirs -= {k for k in theirs if k.endswith(("attn.bias", "attn.masked_bias"))}
    assert ours == theirs


def test_zoo_bert_names_follow_bertmodel_but_for_the_attention() -> None:
    graph = hndl.zoo.get("bert", num_hidden_layers=2)
    model = hndl.build(graph)
    p = graph.params
    reference = tf.BertModel(
        tf.BertConfig(
            vocab_size=p["vocab_size"],
            hidden_size=p["hidden_size"],
            num_hidden_layers=2,
            num_attention_heads=p["num_attention_heads"],
            intermediate_size=p["intermediate_size"],
            max_position_embeddings=p["max_position_embeddings"],
            type_vocab_size=p["type_vocab_size"],
        ),
        add_pooling_layer=True,
    )
    renames = {
        "attention.self.query": "attention.self.q_proj",
        "attention.self.key": "attention.self.k_proj",
        "attention.self.value": "attention.self.v_proj",
        "attention.output.dense": "attention.self.o_proj",
    }
    theirs = set()
    for key in reference.state_dict():
        for old, new in renames.items():
            key = key.replace(old, new)
        theirs.add(key)
    theirs.discard("embeddings.position_ids")
    theirs.discard("embeddings.token_type_ids")
    assert set(model.state_dict()) == theirs
