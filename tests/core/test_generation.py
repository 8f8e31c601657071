"""``hndl.generate``: greedy tokens equal recomputing the whole sequence each step, left-padded batches equal
their rows alone, one full validation across calls, reproducible sampling, EOS and pad, max_length, and an
E_INPUT for each argument it refuses (the model still usable afterwards).

Tokens are compared with ``torch.equal``: generation's output is ids, and the small models' logits differ
between cached and full computation by ~1e-6 (test_kv_cache.py), far below the gaps between their top tokens.
"""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl.generation import with_kv_cache
from hndl.torch import _attention_layers

SMALL = {"gpt2": dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=24), "llama": {}, "mistral": {}}
NAMES = list(SMALL)


def model(name: str, **overrides):
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get(name, **{**SMALL[name], **overrides})).eval()


def recompute_greedy(m, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The loop people write without a cache: the whole sequence through the plain model for each token."""
    with torch.no_grad():
        for _ in range(steps):
            args = (ids,) if m.graph.name == "gpt2" else (ids, torch.ones_like(ids, dtype=torch.bool))
            ids = torch.cat([ids, m(*args)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


@pytest.mark.parametrize("name", NAMES)
def test_greedy_tokens_equal_recomputing_the_whole_sequence(name: str) -> None:
    m = model(name)
    ids = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(hndl.generate(m, ids, 12), recompute_greedy(m, ids, 12))


@pytest.mark.parametrize("name", NAMES)
def test_a_left_padded_batch_gives_each_row_what_it_gives_alone(name: str) -> None:
    m = model(name)
    long, short = torch.randint(0, 100, (1, 6)), torch.randint(0, 100, (1, 3))
    pad = 0
    ids = torch.cat([long, torch.cat([torch.full((1, 3), pad), short], dim=1)])
    mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1]])
    batched = hndl.generate(m, ids, 8, attention_mask=mask)
    assert torch.equal(batched[0], hndl.generate(m, long, 8)[0])
    assert torch.equal(batched[1, 3:], hndl.generate(m, short, 8)[0])


def test_one_full_validation_across_calls_prompt_lengths_batches_and_steps() -> None:
    m = model("llama")
    for batch, prompt, new in ((1, 3, 10), (4, 9, 5), (2, 1, 20)):
        hndl.generate(m, torch.randint(0, 256, (batch, prompt)), new)
    assert with_kv_cache(m).validations == 1


def test_the_cached_variant_holds_the_plain_models_weight_tensors() -> None:
    m = model("gpt2")
    twin = with_kv_cache(m)
    assert twin is with_kv_cache(m)  # remembered
    mine = {k: v.data_ptr() for k, v in m.state_dict().items()}
    assert mine == {k: v.data_ptr() for k, v in twin.state_dict().items()}
    ids = torch.randint(0, 100, (1, 4))
    before = hndl.generate(m, ids, 6)
    with torch.no_grad():
        m.layer("ln_f").weight.mul_(-1)  # changed in place: both see it (the logits change sign)
    assert torch.equal(hndl.generate(m, ids, 6), recompute_greedy(m, ids, 6))
    assert not torch.equal(before, hndl.generate(m, ids, 6))


def test_a_model_built_with_kv_cache_generates_the_same_tokens() -> None:
    m = model("mistral")
    cached = hndl.build(hndl.zoo.get("mistral", kv_cache=True))
    cached.load_state_dict(m.state_dict())
    ids = torch.randint(0, 256, (2, 4))
    assert torch.equal(hndl.generate(cached, ids, 9), hndl.generate(m, ids, 9))


def test_dropout_is_off_during_generation_and_the_mode_is_restored() -> None:
    m = model("gpt2", dropout=0.5)
    ids = torch.randint(0, 100, (1, 4))
    eval_tokens = hndl.generate(m, ids, 8)
    m.train()
    assert torch.equal(hndl.generate(m, ids, 8), eval_tokens)
    assert m.training


@pytest.mark.parametrize("name", NAMES)
def test_sampling_with_a_seed_is_reproducible(name: str) -> None:
    m = model(name)
    ids = torch.randint(0, 100, (2, 4))
    options = dict(do_sample=True, temperature=0.8, top_k=20, top_p=0.9)
    first = hndl.generate(m, ids, 10, seed=7, **options)
    assert torch.equal(first, hndl.generate(m, ids, 10, seed=7, **options))
    gen = torch.Generator().manual_seed(7)
    assert torch.equal(first, hndl.generate(m, ids, 10, generator=gen, **options))
    draws = {tuple(hndl.generate(m, ids, 10, seed=s, do_sample=True, temperature=50.0)[0].tolist()) for s in range(4)}
    assert len(draws) > 1


def test_top_k_of_one_and_a_tiny_top_p_are_greedy() -> None:
    m = model("llama")
    ids = torch.randint(0, 256, (2, 4))
    greedy = hndl.generate(m, ids, 8)
    assert torch.equal(hndl.generate(m, ids, 8, do_sample=True, top_k=1, seed=0), greedy)
    assert torch.equal(hndl.generate(m, ids, 8, do_sample=True, top_p=1e-6, seed=0), greedy)


def test_a_row_ends_at_eos_and_is_padded_after_it() -> None:
    m = model("llama")
    ids = torch.randint(0, 256, (2, 4), generator=torch.Generator().manual_seed(3))
    greedy = hndl.generate(m, ids, 10)
    eos = int(greedy[0, 4 + 2])  # row 0's third new token
    out = hndl.generate(m, ids, 10, eos_token_id=eos, pad_token_id=255)
    first = (greedy[0, 4:] == eos).nonzero()[0].item()
    assert torch.equal(out[0, : 4 + first + 1], greedy[0, : 4 + first + 1])
    assert (out[0, 4 + first + 1 :] == 255).all()
    row1_ends = (greedy[1, 4:] == eos).nonzero()
    if row1_ends.numel() == 0:  # row 1 never ends: it runs to max_new_tokens
        assert out.shape[1] == 14


def test_generation_stops_when_every_row_has_ended() -> None:
    m = model("llama")
    ids = torch.randint(0, 256, (1, 4))
    eos = int(hndl.generate(m, ids, 3)[0, -1])
    out = hndl.generate(m, ids, 20, eos_token_id=eos)
    assert out.shape[1] <= 4 + 3
    assert out[0, -1] == eos


def test_max_length_bounds_prompt_and_new_tokens() -> None:
    m = model("gpt2")
    ids = torch.randint(0, 100, (2, 5))
    assert hndl.generate(m, ids, 50, max_length=9).shape == (2, 9)
    assert hndl.generate(m, ids, 0).tolist() == ids.tolist()


# --- what generate refuses ------------------------------------------------------------------------------


def refused(m, *args, **kwargs) -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as err:
        hndl.generate(m, *args, **kwargs)
    assert len(err.value.problems) == 1
    return err.value.problems[0]


def test_float_ids_are_an_e_input() -> None:
    problem = refused(model("gpt2"), torch.zeros(1, 3), 4)
    assert (problem.code, problem.expected) == ("E_INPUT", "torch.int64 token ids")


def test_int32_ids_are_an_e_input_with_a_hint() -> None:
    problem = refused(model("gpt2"), torch.zeros(1, 3, dtype=torch.int32), 4)
    assert problem.code == "E_INPUT"
    assert problem.hint == "pass input_ids.long()"


def test_ids_outside_the_vocabulary_are_an_e_input() -> None:
    m = model("gpt2")
    problem = refused(m, torch.tensor([[1, 100]]), 4)
    assert problem.code == "E_INPUT"
    assert problem.expected == "ids in 0 .. 99 (vocab_size 100)"
    assert problem.actual == "100"
    assert refused(m, torch.tensor([[-1, 2]]), 4).actual == "-1"


def test_a_prompt_longer_than_the_models_positions_is_an_e_input() -> None:
    m = model("gpt2")  # n_positions 24
    problem = refused(m, torch.zeros(1, 25, dtype=torch.long), 1)
    assert problem.code == "E_INPUT"
    assert problem.message == "the prompt has 25 tokens and the model has 24 positions"


def test_a_prompt_and_new_tokens_past_the_positions_are_an_e_input_with_the_fix() -> None:
    problem = refused(model("gpt2"), torch.zeros(1, 20, dtype=torch.long), 10)
    assert problem.code == "E_INPUT"
    assert problem.hint == "max_new_tokens=4 at most, or pass max_length=24"


def test_ids_of_rank_one_are_an_e_input() -> None:
    problem = refused(model("llama"), torch.zeros(5, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert problem.hint == "one prompt is input_ids[None]"


def test_a_mask_of_another_shape_is_an_e_input() -> None:
    problem = refused(model("llama"), torch.zeros(2, 5, dtype=torch.long), 2, attention_mask=torch.ones(2, 4))
    assert problem.code == "E_INPUT"
    assert problem.message == "attention_mask does not match input_ids"


def test_right_padding_is_an_e_input_that_says_to_pad_on_the_left() -> None:
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    problem = refused(model("llama"), torch.zeros(2, 3, dtype=torch.long), 2, attention_mask=mask)
    assert problem.code == "E_INPUT"
    assert problem.message == "row 1 of attention_mask ends in padding"
    assert problem.actual == "row 1: [1, 1, 0]"
    assert problem.hint == "pad on the left (transformers' tokenizer: padding_side='left')"


@pytest.mark.parametrize(
    "options",
    [dict(temperature=0.0), dict(top_k=0), dict(top_p=1.5), dict(top_p=0.0), dict(max_length=2)],
)
def test_bad_sampling_settings_are_an_e_input(options) -> None:
    assert refused(model("llama"), torch.zeros(1, 3, dtype=torch.long), 2, do_sample=True, **options).code == "E_INPUT"


def test_a_model_without_attention_is_an_e_input_naming_why() -> None:
    g = hndl.Graph("lm")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    g.output(g.add("embedding", ids, num_embeddings=10, embedding_dim=10))
    problem = refused(hndl.build(g), torch.zeros(1, 2, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert "no attention node" in problem.message


def test_the_model_is_usable_after_a_refusal() -> None:
    m = model("gpt2")
    ids = torch.randint(0, 100, (1, 3))
    refused(m, torch.tensor([[1, 100]]), 4)
    assert torch.equal(hndl.generate(m, ids, 4), recompute_greedy(m, ids, 4))


# --- memory ---------------------------------------------------------------------------------------------


def _memory():
    """benchmarks/memory.py: peak live bytes of the tensors a call allocates on CPU (weights only read, so not
    counted)."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "memory.py"
    spec = importlib.util.spec_from_file_location("hndl_benchmark_memory", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_summary_reports_the_cache_generate_allocates() -> None:
    m = model("llama")
    twin = with_kv_cache(m)
    assert twin.summary(B=2, M=30).cache_bytes == 2 * (2 * 2 * 2 * 30 * 16) * 4  # k and v, 2 layers, 2 heads of 16
    assert twin.summary().cache_bytes == "512*B*M"
    assert "kv cache:    30,720 B" in str(twin.summary(B=2, M=30))
    assert m.summary(B=2).cache_bytes is None  # no cache interface


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_the_peak_during_generation_is_within_10_percent_of_the_summarys_cache(kv_heads: int) -> None:
    # A decoding step allocates little beside the cache: its logits and one layer's scores. With grouped heads
    # (2 key/value heads for 4 query heads) on the CPU, SDPA groups them itself, so no layer's keys and values
    # are repeated for the query heads (they were, a transient as large as this whole cache, before).
    m = model("llama", num_key_value_heads=kv_heads)
    ids = torch.randint(0, 256, (2, 4))
    predicted = with_kv_cache(m).summary(B=2, M=256).cache_bytes
    if kv_heads < 4 and not _attention_layers._GQA_NATIVE:
        # torch 2.4's SDPA has no enable_gqa: one layer's keys and values are repeated for the 4 query heads.
        predicted += 2 * 2 * 4 * 256 * 16 * 4
    peak = _memory().peak_live_bytes(lambda: hndl.generate(m, ids, 252))
    assert predicted <= peak <= 1.1 * predicted


def test_the_cache_interface_inputs_go_by_name_in_any_order() -> None:
    # A graph with the interface's inputs declared in another order than with_kv_cache's.
    graph = hndl.zoo.get("gpt2", kv_cache=True, **SMALL["gpt2"])
    order = ["tokens", "attention_mask", "position_ids", "offset", "cache_k", "cache_v"]
    graph.inputs = {name: graph.inputs[name] for name in order}
    reordered = hndl.build(graph).eval()
    assert list(reordered.graph.inputs)[1:3] == ["attention_mask", "position_ids"]
    m = model("gpt2")
    reordered.load_state_dict(m.state_dict())
    ids = torch.randint(0, 100, (2, 5))
    assert torch.equal(hndl.generate(reordered, ids, 6), recompute_greedy(m, ids, 6))


def test_regression_a_converted_plain_model_generates_in_its_dtype() -> None:
    # The cached variant was built in float32 and given the .double() model's float64 weights: every call was
    # E_RUNTIME "has dtype float64, the build made float32". It is now converted like the model before assigning.
    m = model("llama")
    ids = torch.randint(0, 256, (2, 5))
    single = hndl.generate(m, ids, 6)
    m.double()
    assert torch.equal(hndl.generate(m, ids, 6), single)
    assert with_kv_cache(m).layer("lm_head").weight.dtype == torch.float64
    assert with_kv_cache(m).summary(B=1, M=10).cache_bytes == 2 * (2 * 1 * 2 * 10 * 16) * 8
    m.to(torch.bfloat16)
    assert hndl.generate(m, ids, 6).shape == (2, 11)
