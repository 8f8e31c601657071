"""The attention op's growing key/value cache (``past: true``): the ``S + T`` contract inferred and the past's
heads and head dim checked before any tensor exists, decoding with it equal to recomputing the whole sequence
(with a window, rope and left padding), one full validation for every step and length, the zoo decoders'
``kv_cache="grow"`` variants equal to the plain entries and to the static variants' tokens, and the summary's
cache bytes at ``S + T``.

Cached and full computations are compared with ``assert_close(atol=1e-5)``: the cached call attends over the
past and new keys with an explicit pattern, the full one with SDPA's ``is_causal``, so the kernels sum in a
different order; tokens are compared exactly.
"""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl.generation import cache_layout, with_kv_cache

ATTENTION = dict(num_heads=4, kv_heads=2, fused=False, causal=True, rope={})


def grow_graph(*, past_shape=("B", 2, "S", 8), masked: bool = False, **params) -> hndl.Graph:
    g = hndl.Graph("a")
    inputs = [g.input("x", ("B", "T", 32))]
    if masked:
        inputs.append(g.input("mask", ("B", "S+T"), dtype="bool"))
    inputs += [g.input("pk", past_shape), g.input("pv", past_shape)]
    g.add("attention", inputs, name="attn", past=True, masked=masked, **{**ATTENTION, **params})
    for port in ("attn.0", "attn.1", "attn.2"):
        g.output(port)
    return g


def plain_graph(**params) -> hndl.Graph:
    g = hndl.Graph("a")
    g.output(g.add("attention", [g.input("x", ("B", "T", 32))], name="attn", **{**ATTENTION, **params}))
    return g


def test_the_keys_and_values_out_are_s_plus_t_inferred_before_any_tensor() -> None:
    checked = hndl.check(grow_graph())
    shapes = [str(t) for t in checked.output_types]
    assert shapes == ["[B, T, 32] float", "[B, 2, S+T, 8] float", "[B, 2, S+T, 8] float"]


def test_a_past_with_other_key_value_heads_is_an_e_shape_naming_the_node() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(grow_graph(past_shape=("B", 4, "S", 8)))
    problem = err.value.problems[0]
    assert (problem.code, problem.node, problem.port) == ("E_SHAPE", "attn", "past_k")
    assert "has 4 as its key/value heads, and the node has 2" in problem.message
    assert problem.expected == "[B, 2, S, 8] ([B, kv_heads, S, head_dim])"


def test_a_past_with_another_head_dim_is_an_e_shape() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.build(grow_graph(past_shape=("B", 2, "S", 16)))
    problem = err.value.problems[0]
    assert (problem.code, problem.node, problem.port) == ("E_SHAPE", "attn", "past_k")
    assert "16 as its head dim" in problem.message


def test_a_mask_not_over_the_past_and_new_slots_is_an_e_shape() -> None:
    g = hndl.Graph("a")
    x, mask = g.input("x", ("B", 5, 32)), g.input("mask", ("B", 5), dtype="bool")
    pk, pv = g.input("pk", ("B", 2, 3, 8)), g.input("pv", ("B", 2, 3, 8))
    g.output(g.add("attention", [x, mask, pk, pv], name="attn", past=True, masked=True, **ATTENTION))
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(g)
    problem = err.value.problems[0]
    assert (problem.code, problem.node, problem.port) == ("E_SHAPE", "attn", "mask")
    assert "[B, 4, 5, 8]" in problem.expected  # the scores over S+T = 8 slots


@pytest.mark.parametrize(
    ("params", "words"),
    [({"causal": False}, "causal: true with a past"), ({"cache": True}, "not both")],
)
def test_a_past_needs_causal_attention_and_no_static_cache(params, words) -> None:
    g = hndl.Graph("a")
    inputs = [g.input("x", ("B", "T", 32))]
    if params.get("cache"):
        inputs += [g.input("ck", ("B", 2, "M", 8)), g.input("cv", ("B", 2, "M", 8))]
        inputs.append(g.input("offset", (), dtype="int64"))
    inputs += [g.input("pk", ("B", 2, "S", 8)), g.input("pv", ("B", 2, "S", 8))]
    g.add("attention", inputs, name="attn", past=True, **{**ATTENTION, **params})
    g.output("attn.0")
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(g)
    problem = err.value.problems[0]
    assert (problem.code, problem.node) == ("E_PARAM", "attn")
    assert words in problem.expected


@pytest.mark.parametrize("window", [None, 3])
def test_decoding_with_a_growing_cache_equals_the_full_sequence(window) -> None:
    torch.manual_seed(0)
    plain = hndl.build(plain_graph(window=window)).eval()
    grow = hndl.build(grow_graph(window=window)).eval()
    grow.load_state_dict(plain.state_dict())
    x = torch.randn(2, 9, 32)
    k = v = torch.zeros(2, 2, 0, 8)  # S = 0 before the prompt
    with torch.no_grad():
        full = plain(x)
        y, k, v = grow(x[:, :4], k, v)
        steps = [y]
        for i in range(4, 9):
            y, k, v = grow(x[:, i : i + 1], k, v)
            steps.append(y)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert k.shape == v.shape == (2, 2, 9, 8)


def test_the_past_comes_back_unchanged_before_the_new_keys() -> None:
    grow = hndl.build(grow_graph()).eval()
    past_k, past_v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    with torch.no_grad():
        _, k, v = grow(torch.randn(1, 2, 32), past_k, past_v)
    assert torch.equal(k[:, :, :3], past_k)
    assert torch.equal(v[:, :, :3], past_v)
    assert k.shape == (1, 2, 5, 8)


def test_one_full_validation_for_every_step_prompt_length_and_batch() -> None:
    grow = hndl.build(grow_graph()).eval()
    with torch.no_grad():
        for batch, prompt in ((2, 4), (3, 7), (1, 1)):
            k = v = torch.zeros(batch, 2, 0, 8)
            _, k, v = grow(torch.randn(batch, prompt, 32), k, v)
            for _ in range(6):
                _, k, v = grow(torch.randn(batch, 1, 32), k, v)
    assert grow.validations == 1


def test_a_padded_query_attends_to_its_own_slot_not_to_nothing() -> None:
    # As with the static cache: a left-padded slot under the causal pattern would have no key at all (NaN in
    # SDPA on torch 2.4), and a NaN in the returned values would spoil every later step.
    grow = hndl.build(grow_graph(masked=True, bias=False)).eval()
    mask = torch.tensor([[False, True, True, True]])
    with torch.no_grad():
        y, _k, v = grow(torch.randn(1, 4, 32), mask, torch.zeros(1, 2, 0, 8), torch.zeros(1, 2, 0, 8))
    assert y.isfinite().all()
    assert v.isfinite().all()
    assert y[0, 0].abs().sum() > 0


def test_rope_positions_continue_from_the_past_length() -> None:
    # Without position_ids the new tokens are at S .. S+T-1: decoding one at a time rotates as the full call does.
    torch.manual_seed(1)
    plain = hndl.build(plain_graph(rope={"theta": 100.0})).eval()
    grow = hndl.build(grow_graph(rope={"theta": 100.0})).eval()
    grow.load_state_dict(plain.state_dict())
    x = torch.randn(1, 6, 32)
    with torch.no_grad():
        full = plain(x)
        _, k, v = grow(x[:, :5], torch.zeros(1, 2, 0, 8), torch.zeros(1, 2, 0, 8))
        last, _, _ = grow(x[:, 5:], k, v)
    torch.testing.assert_close(last[:, 0], full[:, 5], atol=1e-5, rtol=1e-5)


# --- the zoo's decoders ---------------------------------------------------------------------------------

GPT2_SMALL = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=64)


def _overrides(name: str) -> dict:
    return GPT2_SMALL if name == "gpt2" else {}


@pytest.mark.parametrize("name", hndl.zoo.KV_CACHE_ENTRIES)
def test_the_grow_variant_has_the_plain_entrys_weights_and_logits(name: str) -> None:
    torch.manual_seed(0)
    plain = hndl.build(hndl.zoo.get(name, **_overrides(name))).eval()
    grow = hndl.build(hndl.zoo.get(name, kv_cache="grow", last_logits=False, **_overrides(name))).eval()
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in grow.state_dict().items()}
    grow.load_state_dict(plain.state_dict())
    layout = cache_layout(grow)
    ids = torch.randint(0, 100, (2, 9))
    positions = torch.arange(9).expand(2, 9)
    k = v = torch.zeros(layout.shape(2, 0))
    with torch.no_grad():
        full = plain(ids) if name == "gpt2" else plain(ids, torch.ones_like(ids, dtype=torch.bool))
        logits, k, v = grow(ids[:, :5], positions[:, :5], torch.ones(2, 5, dtype=torch.bool), k, v)
        steps = [logits]
        for i in range(5, 9):
            logits, k, v = grow(
                ids[:, i : i + 1], positions[:, i : i + 1], torch.ones(2, i + 1, dtype=torch.bool), k, v
            )
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-4, rtol=1e-4)
    assert k.shape == layout.shape(2, 9)
    assert grow.validations == 1


@pytest.mark.parametrize("name", hndl.zoo.KV_CACHE_ENTRIES)
def test_generate_gives_the_same_tokens_with_a_growing_and_a_static_cache(name: str) -> None:
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get(name, **_overrides(name))).eval()
    ids = torch.randint(0, 100, (3, 7))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    mask[2, :5] = 0
    static = hndl.generate(model, ids, 10, attention_mask=mask)
    grown = hndl.generate(model, ids, 10, attention_mask=mask, kv_cache="grow")
    assert torch.equal(static, grown)
    assert with_kv_cache(model, "grow").validations == 1  # the prefill and every step after it: one validation
    hndl.generate(model, ids[:2, 3:], 4, kv_cache="grow")  # another batch and prompt length
    assert with_kv_cache(model, "grow").validations == 1


def test_generate_runs_a_built_grow_variant_as_it_is() -> None:
    torch.manual_seed(0)
    plain = hndl.build(hndl.zoo.get("llama")).eval()
    grow = hndl.build(hndl.zoo.get("llama", kv_cache="grow")).eval()
    grow.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 100, (2, 6))
    assert torch.equal(hndl.generate(grow, ids, 8), hndl.generate(plain, ids, 8))
    assert with_kv_cache(grow) is grow


def test_a_past_of_the_wrong_head_dim_is_an_e_input_at_the_call() -> None:
    grow = hndl.build(hndl.zoo.get("gpt2", kv_cache="grow", **GPT2_SMALL)).eval()
    wrong = torch.zeros(2, 1, 4, 3, 8)  # gpt2's head dim here is 64 // 4 = 16
    ids = torch.zeros(1, 1, dtype=torch.long)
    with pytest.raises(hndl.HndlError) as err:
        grow(ids, ids, torch.ones(1, 4, dtype=torch.bool), wrong, wrong)
    assert err.value.problems[0].code == "E_INPUT"
    assert "dim 4 expected 16, got 8" in str(err.value)


def test_a_mask_not_over_past_and_new_is_an_e_input_at_the_call() -> None:
    grow = hndl.build(hndl.zoo.get("gpt2", kv_cache="grow", **GPT2_SMALL)).eval()
    past = torch.zeros(2, 1, 4, 3, 16)
    ids = torch.zeros(1, 1, dtype=torch.long)
    with pytest.raises(hndl.HndlError) as err:
        grow(ids, ids, torch.ones(1, 3, dtype=torch.bool), past, past)  # S + T = 4 slots
    assert err.value.problems[0].code == "E_INPUT"


def test_another_kind_of_cache_is_an_e_param_and_another_entry_an_e_spec() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.zoo.get("gpt2", kv_cache="growing")
    assert err.value.problems[0].code == "E_PARAM"
    assert "'grow'" in err.value.problems[0].expected
    with pytest.raises(hndl.HndlError) as err:
        hndl.zoo.get("resnet18", kv_cache="grow")
    assert err.value.problems[0].code == "E_SPEC"


def test_the_summary_gives_the_cache_bytes_at_s_plus_t() -> None:
    grow = hndl.build(hndl.zoo.get("llama", kv_cache="grow"))  # 2 layers, 2 key/value heads of 16, float32
    summary = hndl.summary(grow, B=3, S=39, T=1)
    assert summary.cache_bytes == 2 * (2 * 3 * 2 * 40 * 16) * 4
    assert summary.cache_bytes == cache_layout(grow).nbytes(3, 40)
    assert any("kv cache:" in line and "present_k, present_v" in line for line in summary.lines())


def test_the_declared_output_ports_agree_with_inference_with_a_past() -> None:
    # test_ops_declarations draws random nodes, and a random past almost never has the node's heads.
    from hndl._infer import declared_output_types

    node = hndl.check(grow_graph()).nodes[0]
    declared = declared_output_types(node.opdef, node.params, node.in_types)
    assert [str(t) for t in declared] == [str(t) for t in node.out_types]
    assert hndl.registry.find("attention").output_names(node.params) == ["0", "1", "2", "3", "4"]
    assert hndl.registry.find("attention").output_names({"past": False}) == ["y"]


# --- torch.compile --------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["static", "grow"])
def test_the_cached_variants_trace_without_a_graph_break(kind: str) -> None:
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()
    model = hndl.build(hndl.zoo.get("llama", kv_cache=kind)).eval()
    layout = cache_layout(model)
    ids = torch.randint(0, 100, (2, 5))
    positions = torch.arange(5).expand(2, 5)
    if kind == "static":
        cache = torch.zeros(layout.shape(2, 8))
        args = (ids, positions, torch.ones(2, 8, dtype=torch.bool), torch.tensor(0), cache, cache.clone())
    else:
        past = torch.zeros(layout.shape(2, 3))
        args = (ids, positions, torch.ones(2, 8, dtype=torch.bool), past, past.clone())
    with torch.no_grad():
        explanation = dynamo.explain(model)(*args)
    dynamo.reset()
    assert explanation.graph_break_count == 0, [str(b.reason) for b in explanation.break_reasons]


def test_generate_with_a_compiled_static_variant_gives_the_eager_tokens() -> None:
    # aot_eager: Dynamo and AOTAutograd without generating C++ (Inductor is what the benchmark times).
    dynamo = pytest.importorskip("torch._dynamo")
    dynamo.reset()
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get("gpt2", **GPT2_SMALL)).eval()
    ids = torch.randint(0, 100, (1, 5))
    compiled = torch.compile(with_kv_cache(model), backend="aot_eager")
    try:
        assert torch.equal(hndl.generate(compiled, ids, 4), hndl.generate(model, ids, 4))
    finally:
        dynamo.reset()


def test_one_query_without_a_mask_sees_every_past_key() -> None:
    # A decoding step without a mask: the single query is the last slot (no causal pattern cuts it to key 0).
    torch.manual_seed(2)
    plain = hndl.build(plain_graph()).eval()
    grow = hndl.build(grow_graph()).eval()
    grow.load_state_dict(plain.state_dict())
    x = torch.randn(1, 4, 32)
    with torch.no_grad():
        _, k, v = grow(x[:, :3], torch.zeros(1, 2, 0, 8), torch.zeros(1, 2, 0, 8))
        last, _, _ = grow(x[:, 3:], k, v)
        torch.testing.assert_close(last[:, 0], plain(x)[:, 3], atol=1e-5, rtol=1e-5)
