"""The attention op's static key/value cache: its contracts checked before any tensor exists, decoding with it
equal to recomputing the whole sequence, one full validation for every step and length, the caller's cache
written in place at the offset, and the zoo decoders' kv_cache variants equal to the plain entries.

Cached and full computations are compared with ``assert_close(atol=1e-5)``, not ``torch.equal``: the cached
call attends over all M slots of the cache with a mask, the full one over T keys (often with SDPA's
``is_causal``), so the kernels sum in a different order; the decoded *tokens* are compared exactly in
test_generation.py.
"""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl.generation import cache_layout

ATTENTION = dict(num_heads=4, kv_heads=2, fused=False, causal=True, rope={})


def attention_graph(*, cache: bool, cache_shape=("B", 2, "M", 8), **params) -> hndl.Graph:
    g = hndl.Graph("a")
    inputs = [g.input("x", ("B", "T", 32))]
    if cache:
        inputs += [g.input("ck", cache_shape), g.input("cv", cache_shape), g.input("offset", (), dtype="int64")]
    g.output(g.add("attention", inputs, name="attn", cache=cache, **{**ATTENTION, **params}))
    return g


def test_a_cache_with_other_key_value_heads_is_an_e_shape_naming_the_node_before_any_tensor() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(attention_graph(cache=True, cache_shape=("B", 4, "M", 8)))
    problem = err.value.problems[0]
    assert (problem.code, problem.node, problem.port) == ("E_SHAPE", "attn", "cache_k")
    assert "has 4 as its key/value heads, and the node has 2" in problem.message
    assert problem.expected == "[B, 2, M, 8] ([B, kv_heads, M, head_dim])"


def test_a_cache_with_another_head_dim_is_an_e_shape() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.build(attention_graph(cache=True, cache_shape=("B", 2, "M", 16)))
    problem = err.value.problems[0]
    assert (problem.code, problem.node, problem.port) == ("E_SHAPE", "attn", "cache_k")
    assert "16 as its head dim" in problem.message


def test_keys_and_values_of_different_lengths_are_an_e_shape() -> None:
    g = hndl.Graph("a")
    x = g.input("x", ("B", "T", 32))
    ck, cv = g.input("ck", ("B", 2, 10, 8)), g.input("cv", ("B", 2, 12, 8))
    g.output(
        g.add("attention", [x, ck, cv, g.input("offset", (), dtype="int64")], name="attn", cache=True, **ATTENTION)
    )
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(g)
    assert err.value.problems[0].code == "E_SHAPE"
    assert err.value.problems[0].node == "attn"


def test_a_cache_needs_causal_attention() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(attention_graph(cache=True, causal=False))
    problem = err.value.problems[0]
    assert (problem.code, problem.node) == ("E_PARAM", "attn")
    assert "causal: true with a cache" in problem.expected


def test_position_ids_without_rope_is_an_e_param() -> None:
    g = hndl.Graph("a")
    x = g.input("x", ("B", "T", 32))
    positions = g.input("positions", ("B", "T"), dtype="int64")
    g.output(g.add("attention", [x, positions], name="attn", num_heads=4, position_ids=True))
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(g)
    problem = err.value.problems[0]
    assert (problem.code, problem.node) == ("E_PARAM", "attn")
    assert "read by nothing" in problem.message


def test_position_ids_rotate_each_row_by_its_own_positions() -> None:
    # Rotary attention depends on position differences only: a row shifted by 3 positions gives the same output.
    g = hndl.Graph("a")
    x = g.input("x", ("B", "T", 32))
    positions = g.input("positions", ("B", "T"), dtype="int64")
    g.output(g.add("attention", [x, positions], name="attn", position_ids=True, **ATTENTION))
    m = hndl.build(g).eval()
    x = torch.randn(1, 5, 32)
    with torch.no_grad():
        plain = m(x, torch.arange(5)[None])
        shifted = m(x, torch.arange(3, 8)[None])
        scrambled = m(x, torch.tensor([[0, 2, 1, 3, 4]]))
    torch.testing.assert_close(plain, shifted, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(plain, scrambled, atol=1e-4)


def test_a_float_offset_is_an_e_dtype() -> None:
    g = hndl.Graph("a")
    x = g.input("x", ("B", "T", 32))
    ck, cv = g.input("ck", ("B", 2, "M", 8)), g.input("cv", ("B", 2, "M", 8))
    g.output(g.add("attention", [x, ck, cv, g.input("offset", ())], name="attn", cache=True, **ATTENTION))
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(g)
    assert err.value.problems[0].code == "E_DTYPE"


@pytest.mark.parametrize("window", [None, 3])
def test_decoding_with_the_cache_equals_the_full_sequence(window) -> None:
    torch.manual_seed(0)
    plain = hndl.build(attention_graph(cache=False, window=window)).eval()
    cached = hndl.build(attention_graph(cache=True, window=window)).eval()
    cached.load_state_dict(plain.state_dict())
    x = torch.randn(2, 9, 32)
    ck, cv = torch.zeros(2, 2, 12, 8), torch.zeros(2, 2, 12, 8)
    with torch.no_grad():
        full = plain(x)
        steps = [cached(x[:, :4], ck, cv, torch.tensor(0))]
        steps += [cached(x[:, i : i + 1], ck, cv, torch.tensor(i)) for i in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_one_full_validation_for_every_step_prompt_length_and_cache_length() -> None:
    cached = hndl.build(attention_graph(cache=True)).eval()
    with torch.no_grad():
        for batch, prompt, slots in ((2, 4, 12), (3, 7, 20), (1, 1, 5)):
            ck, cv = torch.zeros(batch, 2, slots, 8), torch.zeros(batch, 2, slots, 8)
            cached(torch.randn(batch, prompt, 32), ck, cv, torch.tensor(0))
            for i in range(prompt, slots):
                cached(torch.randn(batch, 1, 32), ck, cv, torch.tensor(i))
    assert cached.validations == 1


def test_the_new_keys_and_values_are_written_into_the_callers_cache_at_the_offset() -> None:
    cached = hndl.build(attention_graph(cache=True)).eval()
    ck, cv = torch.zeros(1, 2, 10, 8), torch.zeros(1, 2, 10, 8)
    with torch.no_grad():
        cached(torch.randn(1, 3, 32), ck, cv, torch.tensor(4))
    written = ck.abs().sum(dim=(0, 1, 3)) != 0
    assert written.tolist() == [False] * 4 + [True] * 3 + [False] * 3
    assert (cv.abs().sum(dim=(0, 1, 3)) != 0).tolist() == written.tolist()


def test_slots_after_the_new_tokens_are_never_read() -> None:
    # Stale keys beyond offset+T (a cache reused for a shorter sequence) change nothing.
    cached = hndl.build(attention_graph(cache=True)).eval()
    x = torch.randn(1, 3, 32)
    with torch.no_grad():
        clean = cached(x, torch.zeros(1, 2, 10, 8), torch.zeros(1, 2, 10, 8), torch.tensor(0))
        stale = cached(x, torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8), torch.tensor(0))
    assert torch.equal(clean, stale)


# --- the zoo's decoders ---------------------------------------------------------------------------------

GPT2_SMALL = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)


def zoo_pair(name: str):
    overrides = GPT2_SMALL if name == "gpt2" else {}
    plain = hndl.build(hndl.zoo.get(name, **overrides)).eval()
    cached = hndl.build(hndl.zoo.get(name, kv_cache=True, last_logits=False, **overrides)).eval()
    return plain, cached


@pytest.mark.parametrize("name", hndl.zoo.KV_CACHE_ENTRIES)
def test_the_kv_cache_variant_has_the_plain_entrys_weights(name: str) -> None:
    plain, cached = zoo_pair(name)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in cached.state_dict().items()}
    assert sum(p.numel() for p in plain.parameters()) == sum(p.numel() for p in cached.parameters())
    assert cached.load_state_dict(plain.state_dict()) is not None


@pytest.mark.parametrize("name", hndl.zoo.KV_CACHE_ENTRIES)
def test_the_kv_cache_variant_gives_the_plain_entrys_logits_with_left_padding(name: str) -> None:
    torch.manual_seed(0)
    plain, cached = zoo_pair(name)
    cached.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 100, (2, 7))
    real = torch.ones(2, 7, dtype=torch.bool)
    real[1, :2] = False  # row 1 is left-padded by two
    layout = cache_layout(cached)
    ck = torch.zeros(layout.shape(2, 10))
    cv = torch.zeros_like(ck)
    slots = torch.ones(2, 10, dtype=torch.bool)
    slots[:, :7] = real
    positions = (real.long().cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = cached(ids, positions, slots, torch.tensor(0), ck, cv)
        # Each row against the plain model on that row alone, without its padding (gpt2 takes no mask, and
        # torch 2.4's SDPA makes the plain llama's padded rows NaN: a padded query there has no key at all).
        for row, start in ((0, 0), (1, 2)):
            alone = ids[row : row + 1, start:]
            args = (alone,) if name == "gpt2" else (alone, torch.ones_like(alone, dtype=torch.bool))
            torch.testing.assert_close(logits[row, start:], plain(*args)[0], atol=1e-5, rtol=1e-5)
        assert not logits.isnan().any()  # padded queries included


@pytest.mark.parametrize("name", hndl.zoo.KV_CACHE_ENTRIES)
def test_by_default_the_kv_cache_variant_gives_the_last_tokens_logits_only(name: str) -> None:
    plain, everything = zoo_pair(name)
    last = hndl.build(hndl.zoo.get(name, kv_cache=True, **(GPT2_SMALL if name == "gpt2" else {}))).eval()
    last.load_state_dict(plain.state_dict())
    everything.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 100, (2, 5))
    shape = cache_layout(last).shape(2, 6)
    args = (torch.arange(5).expand(2, 5), torch.ones(2, 6, dtype=torch.bool), torch.tensor(0))
    with torch.no_grad():
        logits = last(ids, *args, torch.zeros(shape), torch.zeros(shape))
        full = everything(ids, *args, torch.zeros(shape), torch.zeros(shape))
    assert logits.shape == (2, full.shape[-1])
    torch.testing.assert_close(logits, full[:, -1], atol=1e-5, rtol=1e-5)


def test_a_cache_of_the_wrong_head_dim_is_an_e_input_at_the_call() -> None:
    _, cached = zoo_pair("gpt2")
    wrong = torch.zeros(2, 1, 4, 8, 8)  # gpt2's head dim here is 64 // 4 = 16
    with pytest.raises(hndl.HndlError) as err:
        cached(
            torch.zeros(1, 1, dtype=torch.long),
            torch.zeros(1, 1, dtype=torch.long),
            torch.ones(1, 8, dtype=torch.bool),
            torch.tensor(0),
            wrong,
            wrong,
        )
    assert err.value.problems[0].code == "E_INPUT"
    assert "dim 4 expected 16, got 8" in str(err.value)


def test_an_entry_without_a_kv_cache_variant_is_an_e_spec() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.zoo.get("resnet18", kv_cache=True)
    assert err.value.problems[0].code == "E_SPEC"
    assert "gpt2, llama, mistral" in err.value.problems[0].expected


def test_cache_layout_reports_bytes_for_a_batch_and_length() -> None:
    _, cached = zoo_pair("llama")  # 2 layers, 2 key/value heads of 16, float32
    layout = cache_layout(cached)
    assert layout.shape(3, 40) == (2, 3, 2, 40, 16)
    assert layout.nbytes(3, 40) == 2 * (2 * 3 * 2 * 40 * 16) * 4


def test_regression_a_padded_query_attends_to_its_own_slot_not_to_nothing() -> None:
    # On torch 2.4 a query with no allowed key (a left-padded slot under the causal pattern) was NaN in SDPA, the
    # NaN went into the cache's values, and 0 * NaN made every later row NaN. Its own slot is now allowed.
    g = hndl.Graph("a")
    inputs = [g.input("x", ("B", "T", 32)), g.input("mask", ("B", "M"), dtype="bool")]
    inputs += [g.input("ck", ("B", 2, "M", 8)), g.input("cv", ("B", 2, "M", 8)), g.input("offset", (), dtype="int64")]
    g.output(g.add("attention", inputs, name="attn", cache=True, masked=True, bias=False, **ATTENTION))
    m = hndl.build(g).eval()
    mask = torch.tensor([[False, True, True, True]])  # slot 0 is padding
    with torch.no_grad():
        y = m(torch.randn(1, 4, 32), mask, torch.zeros(1, 2, 4, 8), torch.zeros(1, 2, 4, 8), torch.tensor(0))
    assert y.isfinite().all()
    assert y[0, 0].abs().sum() > 0  # its own value, not SDPA's zeros for a row with nothing allowed
