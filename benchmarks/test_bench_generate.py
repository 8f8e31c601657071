"""``hndl.generate`` against transformers' ``generate`` (its default dynamic cache), same weights, same prompt,
greedy, one torch thread: the prefill and the time per new token, reported separately.

Runs where transformers imports: ``nox -s reference -- -m benchmark benchmarks/test_bench_generate.py``; skips
elsewhere. Each side is timed with :func:`harness._compare` (interleaved rounds, alternating order, fastest
round's median, thread CPU time): ``generate(max_new_tokens=1)`` is the prefill (and one token's choice), and
``(generate(128 new) - prefill) / 127`` the time per new token. The tokens are checked equal first, so both sides
do the same work. The figures are printed (``-s``); the asserted bound is loose (a gross regression only), since
a shared machine spreads multi-second timings by several percent.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hndl
import hndl.zoo
from harness import _compare

pytestmark = pytest.mark.benchmark

PROMPT, NEW = 128, 128


def _transformers() -> Any:
    try:
        import transformers
    except Exception as exc:  # beside some torch builds transformers fails with other errors than ImportError
        pytest.skip(f"transformers does not import here ({type(exc).__name__})")
    return transformers


def _gpt2_small() -> tuple[Any, Any]:
    tf = _transformers()
    torch.manual_seed(0)
    reference = tf.GPT2LMHeadModel(tf.GPT2Config(attn_implementation="sdpa")).eval()
    model = hndl.build(hndl.zoo.get("gpt2", dropout=0.0)).eval()
    hndl.zoo.load_reference_state_dict(model, "gpt2", reference.state_dict())
    return model, reference


def _llama_small() -> tuple[Any, Any]:
    tf = _transformers()
    torch.manual_seed(0)
    size = dict(
        vocab_size=32000,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
    )
    config = tf.LlamaConfig(
        **size, rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, attn_implementation="sdpa"
    )
    reference = tf.LlamaForCausalLM(config).eval()
    model = hndl.build(hndl.zoo.get("llama", **size)).eval()
    hndl.zoo.load_reference_state_dict(model, "llama", reference.state_dict())
    return model, reference


@pytest.mark.parametrize(("name", "batch"), [("gpt2", 1), ("gpt2", 8), ("llama", 1)])
def test_time_per_new_token_against_transformers_generate(name: str, batch: int) -> None:
    model, reference = _gpt2_small() if name == "gpt2" else _llama_small()
    vocab = model.nodes["n_lm_head"].out_features
    ids = torch.randint(0, vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(0))

    def ours(new: int) -> Any:
        return hndl.generate(model, ids, new)

    def theirs(new: int) -> Any:
        with torch.no_grad():
            return reference.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=new,
                min_new_tokens=new,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )

    assert torch.equal(ours(NEW), theirs(NEW))
    prefill = _compare(lambda: ours(1), lambda: theirs(1), rounds=3, repeat=1)
    whole = _compare(lambda: ours(NEW), lambda: theirs(NEW), rounds=3, repeat=1)
    per_token_ours = (whole.hndl - prefill.hndl) / (NEW - 1)
    per_token_theirs = (whole.twin - prefill.twin) / (NEW - 1)
    print(
        f"\n{name} B={batch} prompt {PROMPT} + {NEW} new: prefill hndl {prefill.hndl * 1e3:.1f} ms, "
        f"transformers {prefill.twin * 1e3:.1f} ms ({prefill.ratio:.3f}x); per new token hndl "
        f"{per_token_ours * 1e3:.2f} ms, transformers {per_token_theirs * 1e3:.2f} ms "
        f"({per_token_ours / per_token_theirs:.3f}x)"
    )
    assert per_token_ours / per_token_theirs < 2.0
