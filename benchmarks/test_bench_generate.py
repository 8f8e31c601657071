"""``hndl.generate`` against transformers' ``generate`` (its default dynamic cache), same weights, same prompt,
greedy, one torch thread: the prefill and the time per new token, reported separately; hndl with its static
cache (``kv_cache="static"``, the default), with its growing cache (``kv_cache="grow"``), and with the static
cache's model under ``torch.compile`` (``hndl.generate(torch.compile(model), ...)``, as a user would compile it;
transformers stays eager there, the same reference as in the other rows).

Runs where transformers imports: ``nox -s reference -- -m benchmark benchmarks/test_bench_generate.py``; skips
elsewhere. Each side is timed with :func:`harness._compare` (interleaved rounds, alternating order, fastest
round's median, thread CPU time): ``generate(max_new_tokens=1)`` is the prefill (and one token's choice), and
``(generate(128 new) - prefill) / 127`` the time per new token. The tokens are checked equal first, so both sides
do the same work. The figures are printed (``-s``); the asserted bound is loose (a gross regression only), since
a shared machine spreads multi-second timings by several percent. The compiled rows warm up on both lengths
first (the prefill-only run's cache is shorter, so the second length recompiles with dynamic shapes), and print
the graph breaks and graphs Dynamo counted; their compile time is not in the figures.
"""

from __future__ import annotations

import os
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


ROWS = [
    ("gpt2", 1, "static"),
    ("gpt2", 8, "static"),
    ("llama", 1, "static"),
    ("gpt2", 1, "grow"),
    ("gpt2", 8, "grow"),
    ("llama", 1, "grow"),
    ("gpt2", 1, "compiled"),
    ("llama", 1, "compiled"),
]


@pytest.mark.parametrize(("name", "batch", "mode"), ROWS)
def test_time_per_new_token_against_transformers_generate(name: str, batch: int, mode: str) -> None:
    model, reference = _gpt2_small() if name == "gpt2" else _llama_small()
    vocab = model.nodes["n_lm_head"].out_features
    ids = torch.randint(0, vocab, (batch, PROMPT), generator=torch.Generator().manual_seed(0))
    runner: Any = model
    kv_cache = "grow" if mode == "grow" else "static"
    if mode == "compiled":
        from torch._dynamo.utils import counters

        counters.clear()
        runner = torch.compile(hndl.generation.with_kv_cache(model))

    def ours(new: int) -> Any:
        return hndl.generate(runner, ids, new, kv_cache=kv_cache)

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

    same = torch.equal(ours(NEW), theirs(NEW))
    # Eager hndl gives transformers' tokens exactly (asserted); Inductor's kernels may sum in another order, so a
    # compiled run's tokens are reported, not asserted (min_new_tokens keeps the work the same either way).
    assert same or mode == "compiled"
    compiled = ""
    if mode == "compiled":
        for _ in range(2):  # both cache lengths, twice: the second length recompiles with dynamic shapes
            ours(1)
            ours(NEW)
        breaks = sum(counters["graph_break"].values())
        compiled = (
            f" [torch.compile: {breaks} graph breaks, {counters['stats']['unique_graphs']} graphs, tokens "
            f"{'equal to' if same else 'NOT equal to'} transformers']"
        )
    prefill = _compare(lambda: ours(1), lambda: theirs(1), rounds=3, repeat=1)
    whole = _compare(lambda: ours(NEW), lambda: theirs(NEW), rounds=3, repeat=1)
    per_token_ours = (whole.hndl - prefill.hndl) / (NEW - 1)
    per_token_theirs = (whole.twin - prefill.twin) / (NEW - 1)
    load = os.getloadavg()[0]
    print(
        f"\n{name} B={batch} {mode} cache, prompt {PROMPT} + {NEW} new: prefill hndl {prefill.hndl * 1e3:.1f} ms, "
        f"transformers {prefill.twin * 1e3:.1f} ms ({prefill.ratio:.3f}x); per new token hndl "
        f"{per_token_ours * 1e3:.2f} ms, transformers {per_token_theirs * 1e3:.2f} ms "
        f"({per_token_ours / per_token_theirs:.3f}x); load {load:.1f}{compiled}"
    )
    assert per_token_ours / per_token_theirs < 2.0
