"""Regressions of ``hndl.generate`` found by attacking it (issue 40): it ran a graph other than the user's (an
edited spec under a zoo name, now derived from the user's own graph; a replaced layer ignored), switched the mode of a variant shared between threads,
accepted a key cache that was the value cache, and raised non-HndlErrors (or E_RUNTIME mid-run) for bad
arguments; ``checkpointing(5)`` was a TypeError. Each test is named after what went wrong."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn

import hndl
from hndl.generation import cache_layout, with_kv_cache
from hndl.torch._attention_layers import AttentionMask

GPT2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=24)


def gpt2(**overrides):
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("gpt2", **{**GPT2, **overrides}))


def llama(**overrides):
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("llama", **overrides))


def recompute_greedy(m, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The whole sequence through the plain model (which runs its replaced layers) for each new token."""
    with torch.no_grad():
        for _ in range(steps):
            args = (ids,) if m.graph.name == "gpt2" else (ids, torch.ones_like(ids, dtype=torch.bool))
            ids = torch.cat([ids, m(*args)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def refused(*args, **kwargs) -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as err:
        hndl.generate(*args, **kwargs)
    return err.value.problems[0]


class Scaled(nn.Module):
    """A linear whose output is scaled: what a user puts in place with replace_layer."""

    def __init__(self, linear: nn.Linear, scale: float) -> None:
        super().__init__()
        self.linear, self.scale = linear, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.scale


class LoRA(nn.Module):
    """A LoRA-style adapter wrapping the Linear (its own state_dict keys: base.weight, down.weight, up.weight),
    with dropout on the adapter's input as peft has."""

    def __init__(self, base: nn.Linear, rank: int = 4, dropout: float = 0.5) -> None:
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.in_features, rank, bias=False)
        self.up = nn.Linear(rank, base.out_features, bias=False)
        nn.init.normal_(self.up.weight, std=0.5)
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.up(self.down(self.drop(x)))


# --- 1. the variant is derived from the model's own graph and layers ---------------------------------------


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
def test_an_edited_spec_under_the_name_llama_generates_with_its_own_graph(kv_cache: str) -> None:
    # Once refused (the variant was the zoo's hand-written spec); now the variant is derived from the edited graph.
    torch.manual_seed(0)
    edited = hndl.build(hndl.loads(hndl.zoo.spec_text("llama").replace("op: silu", "op: relu"))).eval()
    unedited = llama().eval()
    unedited.load_state_dict(edited.state_dict())
    ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(11))
    tokens = hndl.generate(edited, ids, 10, kv_cache=kv_cache)
    assert torch.equal(tokens, recompute_greedy(edited, ids, 10))
    # The variant computes the edited graph's logits, not the unedited one's (random small weights leave the
    # greedy tokens of the two alike, so the logits tell them apart).
    step = with_kv_cache(edited, kv_cache)
    mask = torch.ones(2, 5, dtype=torch.bool)
    layout = cache_layout(step)
    with torch.no_grad():
        if kv_cache == "static":
            cache = torch.zeros(layout.shape(2, 5))
            logits = step(ids, torch.arange(5).expand(2, 5), mask, torch.tensor(0), cache, torch.zeros_like(cache))
        else:
            past = torch.zeros(layout.shape(2, 0))
            logits = step(ids, torch.arange(5).expand(2, 5), mask, past, past)[0]
        torch.testing.assert_close(logits, edited(ids, mask)[:, -1], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(logits, unedited(ids, mask)[:, -1], atol=1e-3)


def test_an_edited_node_parameter_generates_and_an_added_output_is_refused() -> None:
    text = hndl.zoo.spec_text("llama")
    eps = hndl.build(hndl.loads(text.replace("norm:         {op: rmsnorm, in: layers, eps: $rms_norm_eps}",
                                             "norm:         {op: rmsnorm, in: layers, eps: 0.5}"))).eval()  # fmt: skip
    ids = torch.randint(0, 256, (1, 3), generator=torch.Generator().manual_seed(12))
    assert torch.equal(hndl.generate(eps, ids, 4), recompute_greedy(eps, ids, 4))
    g = hndl.zoo.get("llama")
    g.output("norm")
    problem = refused(hndl.build(g), torch.zeros(1, 3, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert "2 outputs" in problem.message


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
def test_generate_ignored_a_replaced_layer_a_scaled_linear(kv_cache: str) -> None:
    m = llama().eval()
    ids = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(1))
    before = hndl.generate(m, ids, 8, kv_cache=kv_cache)
    m.replace_layer("lm_head", Scaled(m.layer("lm_head"), -1.0))  # greedy then takes the least likely token
    after = hndl.generate(m, ids, 8, kv_cache=kv_cache)
    assert torch.equal(after, recompute_greedy(m, ids, 8))
    assert not torch.equal(after, before)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_a_lora_wrapper_around_a_linear_was_a_raw_runtime_error(name: str) -> None:
    m = gpt2() if name == "gpt2" else llama()
    node = "h.0.c_fc" if name == "gpt2" else "layers.0.gate_proj"
    lora = LoRA(m.layer(node))
    m.replace_layer(node, lora)
    m.eval()
    ids = torch.randint(0, GPT2["vocab_size"], (2, 4), generator=torch.Generator().manual_seed(2))
    assert torch.equal(hndl.generate(m, ids, 10), recompute_greedy(m, ids, 10))
    # The carried adapter holds the user's tensors: an in-place change is seen without deriving again.
    twin = with_kv_cache(m)
    with torch.no_grad():
        lora.up.weight.mul_(3)
    assert with_kv_cache(m) is twin
    assert torch.equal(hndl.generate(m, ids, 10), recompute_greedy(m, ids, 10))


def test_a_second_replacement_is_carried_too() -> None:
    m = llama().eval()
    ids = torch.randint(0, 256, (1, 4), generator=torch.Generator().manual_seed(3))
    m.replace_layer("layers.1.down_proj", Scaled(m.layer("layers.1.down_proj"), 4.0))
    hndl.generate(m, ids, 6)
    m.replace_layer("lm_head", Scaled(m.layer("lm_head"), -1.0))
    assert torch.equal(hndl.generate(m, ids, 6), recompute_greedy(m, ids, 6))


def test_a_replaced_attention_layer_is_refused_not_ignored() -> None:
    m = llama()
    attn = m.layer("layers.0.self_attn")
    m.replace_layer("layers.0.self_attn", Scaled(attn, 1.0))
    problem = refused(m, torch.zeros(1, 3, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert problem.node == "layers.0.self_attn"
    assert "attention layer" in problem.message
    assert "replaced" in problem.message


def test_a_replaced_layer_at_a_node_the_variant_lacks_is_refused() -> None:
    class Mask(AttentionMask):
        pass

    m = llama()
    m.replace_layer("mask", Mask(causal=True))
    problem = refused(m, torch.zeros(1, 3, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert problem.node == "mask"
    assert "no node at its path" in problem.message


def test_a_layer_swapped_without_replace_layer_is_refused_as_the_model_would() -> None:
    m = llama()
    m.model.layers[0].mlp.gate_proj = nn.Identity()
    problem = refused(m, torch.zeros(1, 3, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert "no longer matches its build" in problem.message


def test_a_forward_hook_on_a_layer_sees_the_generation() -> None:
    m = gpt2().eval()
    seen: list[tuple[int, ...]] = []
    m.layer("h.1.c_fc").register_forward_hook(lambda mod, args, out: seen.append(tuple(out.shape)))
    hndl.generate(m, torch.randint(0, 100, (1, 4)), 3)
    assert seen == [(1, 4, 256), (1, 1, 256), (1, 1, 256)]  # the prefill, then one token a step


# --- 2. no mode is switched: threads on one model left in train mode ----------------------------------------


def _threads_agree(m, ids: torch.Tensor, expected: torch.Tensor, runs: int = 3) -> None:
    """4 threads generating from ``m`` get ``expected`` each time, while no mode of ``m`` or of the variant
    ``generate`` runs for it ever changes."""
    watched = [*m.modules(), *with_kv_cache(m).modules()]
    modes = [module.training for module in watched]
    flips: list[bool] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            flips.append([module.training for module in watched] != modes)

    results: list[torch.Tensor] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(runs):
                results.append(hndl.generate(m, ids, 12))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    watcher = threading.Thread(target=watch)
    workers = [threading.Thread(target=work) for _ in range(4)]
    watcher.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    watcher.join()
    assert not errors, errors
    assert len(results) == 4 * runs
    assert all(torch.equal(r, expected) for r in results)
    assert not any(flips)  # the user's model (and the variant) never left the mode it was left in


def test_threads_on_a_train_mode_plain_model_never_turned_dropout_on_for_each_other() -> None:
    m = gpt2(dropout=0.5)  # hndl.build returns it in train mode
    assert m.training
    ids = torch.randint(0, 100, (2, 4), generator=torch.Generator().manual_seed(4))
    reference = gpt2(dropout=0.5).eval()
    reference.load_state_dict(m.state_dict())
    _threads_agree(m, ids, hndl.generate(reference, ids, 12))
    assert m.training
    assert all(module.training for module in m.modules())
    assert not any(module.training for module in with_kv_cache(m).modules())


def test_threads_on_a_train_mode_cache_interface_model_run_an_eval_copy() -> None:
    torch.manual_seed(0)
    m = hndl.build(hndl.zoo.get("gpt2", kv_cache=True, **GPT2, dropout=0.5))
    ids = torch.randint(0, 100, (2, 4), generator=torch.Generator().manual_seed(5))
    reference = hndl.build(hndl.zoo.get("gpt2", kv_cache=True, **GPT2, dropout=0.5)).eval()
    reference.load_state_dict(m.state_dict())
    _threads_agree(m, ids, hndl.generate(reference, ids, 12))
    assert m.training


def test_a_cache_interface_model_in_eval_mode_runs_as_it_is() -> None:
    torch.manual_seed(0)
    m = hndl.build(hndl.zoo.get("gpt2", kv_cache=True, **GPT2)).eval()
    hndl.generate(m, torch.randint(0, 100, (1, 3)), 4)
    assert m.validations == 1


# --- 3. aliased caches ----------------------------------------------------------------------------------


def _step_inputs(m, cache_k: torch.Tensor, cache_v: torch.Tensor):
    ids = torch.randint(0, 100, (2, 5), generator=torch.Generator().manual_seed(6))
    return ids, torch.arange(5).expand(2, 5), torch.ones(2, 8, dtype=torch.bool), torch.tensor(0), cache_k, cache_v


def test_a_static_cache_whose_cache_k_is_cache_v_gave_wrong_logits_without_error() -> None:
    m = hndl.build(hndl.zoo.get("llama", kv_cache=True)).eval()
    shape = cache_layout(m).shape(2, 8)
    cache = torch.zeros(shape)
    with torch.no_grad():
        for _ in range(2):  # the first call validates; the second takes the fast path: refused on both
            with pytest.raises(hndl.HndlError) as err:
                m(*_step_inputs(m, cache, cache))
            assert err.value.problems[0].code == "E_INPUT"
            assert "share memory" in err.value.problems[0].message
        m(*_step_inputs(m, torch.zeros(shape), torch.zeros(shape)))  # a fast-path call that succeeds
        with pytest.raises(hndl.HndlError, match="share memory"):
            m(*_step_inputs(m, cache, cache))
        flat = torch.zeros(2 * cache.numel())
        overlapping = flat[: cache.numel()].view(shape), flat[cache.numel() // 4 :][: cache.numel()].view(shape)
        with pytest.raises(hndl.HndlError, match="share memory"):
            m(*_step_inputs(m, *overlapping))


def test_disjoint_halves_of_one_cache_buffer_are_not_refused() -> None:
    m = hndl.build(hndl.zoo.get("llama", kv_cache=True)).eval()
    shape = cache_layout(m).shape(2, 8)
    with torch.no_grad():
        separate = m(*_step_inputs(m, torch.zeros(shape), torch.zeros(shape)))
        halves = torch.zeros(2, *shape)
        torch.testing.assert_close(m(*_step_inputs(m, halves[0], halves[1])), separate, rtol=0, atol=0)
        per_layer = torch.zeros(shape[0], 2, *shape[1:])  # [L, 2, B, H, M, D]: k and v of a layer side by side
        torch.testing.assert_close(m(*_step_inputs(m, per_layer[:, 0], per_layer[:, 1])), separate, rtol=0, atol=0)


# --- 4. argument hardening -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "words"),
    [
        (dict(eos_token_id=[1, "2"]), "eos_token_id"),
        (dict(eos_token_id=[]), "eos_token_id"),
        (dict(eos_token_id=2.0), "eos_token_id"),
        (dict(max_length="9"), "max_length"),
        (dict(max_length=9.0), "max_length"),
        (dict(do_sample=True, temperature="hot"), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(eos_token_id=1, pad_token_id=10**30), "pad_token_id"),
        (dict(pad_token_id=-1), "pad_token_id"),
        (dict(pad_token_id=100), "pad_token_id"),
        (dict(eos_token_id=100), "eos_token_id"),
        (dict(do_sample=1), "do_sample"),
        (dict(do_sample="yes"), "do_sample"),
        (dict(top_p="0.5"), "top_p"),
        (dict(generator=5), "generator"),
        (dict(seed="0"), "seed"),
        (dict(seed=2**70), "seed"),
        (dict(kv_cache=["static"]), "kv_cache"),
        (dict(max_new_tokens=3.0), "max_new_tokens"),
    ],
)
def test_a_bad_argument_was_a_type_error_or_a_mid_run_e_runtime(options, words: str) -> None:
    m = gpt2().eval()
    args = dict(max_new_tokens=3) | options
    problem = refused(m, torch.zeros(1, 3, dtype=torch.long), **args)
    assert problem.code == "E_INPUT"
    assert words in problem.message


@pytest.mark.parametrize("model", [None, nn.Linear(2, 2), "gpt2"])
def test_a_model_that_is_not_a_built_hndl_model_is_an_e_input(model) -> None:
    problem = refused(model, torch.zeros(1, 3, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert "not a built hndl model" in problem.message


def test_an_empty_batch_is_an_e_input_up_front() -> None:
    problem = refused(gpt2().eval(), torch.zeros(0, 3, dtype=torch.long), 2)
    assert problem.code == "E_INPUT"
    assert "B >= 1" in problem.expected


def test_a_cache_too_large_to_allocate_is_an_e_input_before_any_call() -> None:
    m = llama().eval()  # rotary: no positions bound the new tokens
    problem = refused(m, torch.zeros(1, 3, dtype=torch.long), 2**62)
    assert problem.code == "E_INPUT"
    assert "could not be allocated" in problem.message
    assert with_kv_cache(m).validations == 0


def test_an_eos_list_ends_a_row_at_any_of_its_ids() -> None:
    m = gpt2().eval()
    ids = torch.randint(0, 100, (2, 4), generator=torch.Generator().manual_seed(7))
    free = hndl.generate(m, ids, 10)
    first, second = int(free[0, 6]), int(free[1, 5])  # row 0's third new token, row 1's second
    out = hndl.generate(m, ids, 10, eos_token_id=[first, second], pad_token_id=0)
    for row in range(2):
        new = free[row, 4:].tolist()
        end = min(new.index(e) for e in (first, second) if e in new)
        assert out[row, 4 : 5 + end].tolist() == new[: end + 1]
        assert (out[row, 5 + end :] == 0).all()
    assert torch.equal(hndl.generate(m, ids, 10, eos_token_id=[first]), hndl.generate(m, ids, 10, eos_token_id=first))


JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(min_value=-5, max_value=200), max_size=3),
    st.sampled_from([object(), torch.tensor(1), torch.Generator(), b"x", {"a": 1}]),
)
SMALL_INT = st.integers(min_value=-2, max_value=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "max_new_tokens": st.one_of(SMALL_INT, JUNK),
            "do_sample": st.one_of(st.booleans(), JUNK),
            "temperature": st.one_of(st.floats(0.1, 2.0), JUNK),
            "top_k": st.one_of(SMALL_INT, JUNK),
            "top_p": st.one_of(st.floats(0.0, 1.0), JUNK),
            "eos_token_id": st.one_of(SMALL_INT, st.lists(SMALL_INT, max_size=3), JUNK),
            "pad_token_id": st.one_of(SMALL_INT, JUNK),
            "max_length": st.one_of(SMALL_INT, JUNK),
            "seed": st.one_of(SMALL_INT, JUNK),
            "generator": st.one_of(st.none(), JUNK),
            "kv_cache": st.one_of(st.sampled_from(["static", "grow"]), JUNK),
            "attention_mask": st.one_of(st.none(), JUNK),
        },
    ),
    st.one_of(st.just("ids"), JUNK),
)
def test_junk_arguments_give_only_an_hndl_error_or_tokens(options, input_ids) -> None:
    m = _JUNK_MODEL
    ids = torch.tensor([[3, 4, 5], [6, 7, 8]]) if input_ids == "ids" else input_ids
    options.setdefault("max_new_tokens", 3)
    try:
        out = hndl.generate(m, ids, **options)
    except hndl.HndlError:
        return
    assert out.dtype == torch.int64
    assert out.shape[0] == 2
    assert 3 <= out.shape[1] <= 3 + 30
    assert ((out >= 0) & (out < 100)).all()


_JUNK_MODEL = gpt2()  # left in train mode, as hndl.build returns it


# --- 5. checkpointing arguments --------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", [5, 2.5, object(), b"h"])
def test_checkpointing_with_a_number_was_a_type_error(nodes) -> None:
    m = gpt2()
    with pytest.raises(hndl.HndlError) as err:
        m.checkpointing(nodes)
    problem = err.value.problems[0]
    assert problem.code == "E_PARAM"
    assert "names of subgraph uses" in problem.message
    assert "list of names" in problem.expected
    if isinstance(nodes, (int, float)):
        assert "budget=" in problem.hint
    assert m.checkpointed == ()  # unchanged


@pytest.mark.parametrize("budget", ["1GB", 1.5, -1, True])
def test_checkpointing_with_a_budget_that_is_not_bytes_is_an_e_param(budget) -> None:
    with pytest.raises(hndl.HndlError) as err:
        gpt2().checkpointing(budget=budget, B=2, T=8)
    assert err.value.problems[0].code == "E_PARAM"
    assert "an int >= 0" in err.value.problems[0].expected
