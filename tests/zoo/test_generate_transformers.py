"""``hndl.generate`` against transformers' ``generate(do_sample=False)`` with the same weights: zoo:gpt2,
zoo:llama and zoo:mistral at small configurations, single prompts and left-padded batches, with the static
cache and the growing one (``kv_cache="grow"``), tokens equal (``torch.equal``). transformers does not import beside the default sessions' torch everywhere; these skip there
and run in `nox -s reference`.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

from parity import llama_reference, mistral_reference, require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

GPT2 = dict(vocab_size=100, n_positions=64, n_embd=64, n_layer=2, n_head=4, dropout=0.0)
PAD = 0
NEW = 12


def _pair(name: str) -> tuple[Any, Any]:
    tf = require("transformers")
    torch.manual_seed(0)
    if name == "gpt2":
        config = tf.GPT2Config(
            vocab_size=GPT2["vocab_size"],
            n_positions=GPT2["n_positions"],
            n_embd=GPT2["n_embd"],
            n_layer=GPT2["n_layer"],
            n_head=GPT2["n_head"],
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=PAD,
        )
        reference = tf.GPT2LMHeadModel(config)
        model = hndl.build(hndl.zoo.get("gpt2", **GPT2))
    else:
        p = hndl.zoo.get(name).params
        reference = (llama_reference if name == "llama" else mistral_reference)(tf, p, "sdpa")
        model = hndl.build(hndl.zoo.get(name))
    hndl.zoo.load_reference_state_dict(model, name, reference.state_dict())
    return model.eval(), reference.eval()


def _reference_greedy(reference: Any, ids: Any, mask: Any) -> Any:
    with torch.no_grad():
        return reference.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            do_sample=False,
            min_new_tokens=NEW,
            eos_token_id=None,
            pad_token_id=PAD,
        )


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral"])
def test_greedy_tokens_equal_transformers_for_one_prompt(name: str, kv_cache: str) -> None:
    model, reference = _pair(name)
    ids = torch.randint(3, 100, (1, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    assert torch.equal(hndl.generate(model, ids, NEW, kv_cache=kv_cache), _reference_greedy(reference, ids, mask))


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral"])
def test_greedy_tokens_equal_transformers_for_a_left_padded_batch(name: str, kv_cache: str) -> None:
    model, reference = _pair(name)
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 100, (3, 8), generator=gen)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    mask[2, :5] = 0
    ids = ids.masked_fill(mask == 0, PAD)
    ours = hndl.generate(model, ids, NEW, attention_mask=mask, pad_token_id=PAD, kv_cache=kv_cache)
    assert torch.equal(ours, _reference_greedy(reference, ids, mask))
