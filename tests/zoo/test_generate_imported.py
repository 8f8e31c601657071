"""``hndl.generate`` on decoders imported with ``hndl.from_module`` (transformers' Qwen2, Gemma, GPT-NeoX, Phi and
LLaMA at small configurations, symbolic batch and length): ``with_kv_cache`` recognises their ``sdpa`` attention,
causal padding masks and positions (SPEC 17.5), and the greedy tokens equal transformers'
``generate(do_sample=False)`` for a left-padded batch of two, with the static and the growing cache. Runs in the
reference session; skips where transformers does not import or the torch is older than the importer's.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from parity import require  # noqa: E402

import hndl  # noqa: E402
import hndl.importer  # noqa: E402

if tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < hndl.importer.MIN_TORCH:
    pytestmark = pytest.mark.skip(reason="the importer needs a newer torch (hndl.importer.MIN_TORCH)")

PAD, NEW = 0, 12
NAMES = ("qwen2", "gemma", "gpt_neox", "phi", "llama")


def _reference(name: str) -> Any:
    tf = require("transformers")
    torch.manual_seed(0)
    size = dict(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=100,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=2,
        use_cache=False,  # the import traces the forward alone (a returned cache object is no tensor)
    )
    if name == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=2, **size))
    if name == "gemma":
        return tf.GemmaForCausalLM(tf.GemmaConfig(num_key_value_heads=2, head_dim=16, **size))
    if name == "gpt_neox":
        return tf.GPTNeoXForCausalLM(tf.GPTNeoXConfig(**size))
    if name == "phi":
        return tf.PhiForCausalLM(tf.PhiConfig(**size))
    return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **size))


def _prompts() -> tuple[Any, Any]:
    ids = torch.randint(3, 100, (2, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    return ids.masked_fill(mask == 0, PAD), mask


@functools.cache
def _imported(name: str) -> tuple[Any, Any, Any]:
    """The reference, its imported graph (B and T symbolic) and the model built from it with its weights."""
    from torch.export import Dim

    reference = _reference(name).eval()
    ids, mask = _prompts()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hndl.importer.ModeWarning)
        graph = hndl.from_module(reference, ids, mask, dynamic_shapes=({0: Dim("B"), 1: Dim("T")},) * 2)
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(reference.state_dict()))
    return reference, graph, model.eval()


def _reference_greedy(reference: Any, ids: Any, mask: Any) -> Any:
    with torch.no_grad():
        return reference.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=PAD,
        )


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
@pytest.mark.parametrize("name", NAMES)
def test_greedy_tokens_of_an_imported_decoder_equal_transformers_with_left_padding(name: str, kv_cache: str) -> None:
    reference, _, model = _imported(name)
    ids, mask = _prompts()
    ours = hndl.generate(model, ids, NEW, attention_mask=mask, pad_token_id=PAD, kv_cache=kv_cache)
    assert torch.equal(ours, _reference_greedy(reference, ids, mask))


@pytest.mark.parametrize("name", NAMES)
def test_the_imported_variant_keeps_every_weight_and_caches_the_grouped_heads(name: str) -> None:
    reference, graph, model = _imported(name)
    variant = hndl.generation.with_kv_cache(graph)
    assert not {n.op for n in variant.nodes.values()} & {"le", "index", "logical_and", "arange"}
    sdpa = [n for n in variant.nodes.values() if n.op == "sdpa"]
    assert len(sdpa) == 2
    assert all(n.params["cache"] and n.params["causal"] for n in sdpa)
    built = hndl.generation.with_kv_cache(model)
    assert built.state_dict().keys() == model.state_dict().keys()
    config = reference.config
    kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    assert hndl.generation.cache_layout(built).kv_heads == kv_heads
