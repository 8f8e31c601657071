"""A decoding step makes its rotary tables, causal pattern and cache slots once for all its attention layers
(hndl/torch/_per_step.py): the same tokens and logits as making them per layer, remade whenever what they are
made from changes, and made each time under a torch.func transform; kept per model, never per process."""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl.torch import _attention_layers, _per_step, _position_layers


def llama(layers: int) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("llama", num_hidden_layers=layers)).eval()


def count_tables(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    made: list[int] = []
    original = _position_layers.Rotary.tables

    def counting(self, positions, dtype):  # type: ignore[no-untyped-def]
        made.append(1)
        return original(self, positions, dtype)

    monkeypatch.setattr(_position_layers.Rotary, "tables", counting)
    return made


def test_rotary_tables_are_made_once_per_step_whatever_the_depth(monkeypatch: pytest.MonkeyPatch) -> None:
    made = count_tables(monkeypatch)
    ids = torch.randint(0, 256, (1, 5))
    counts = []
    for layers in (2, 4):
        m = llama(layers)
        hndl.generate(m, ids, 3)  # the first call validates: its per-node checks run each layer on its own
        made.clear()
        hndl.generate(m, ids, 3)
        counts.append(len(made))
    assert counts[0] == counts[1] == 3  # the prefill and two decoding steps, one table each


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
def test_tokens_equal_making_the_tables_per_layer(monkeypatch: pytest.MonkeyPatch, kv_cache: str) -> None:
    m = llama(3)
    ids = torch.randint(0, 256, (2, 6))
    runs = []
    for bypass in (False, True):
        if bypass:
            monkeypatch.setattr(_per_step, "transforms_active", lambda: True)
        greedy = hndl.generate(m, ids, 8, kv_cache=kv_cache)
        sampled = hndl.generate(m, ids, 8, kv_cache=kv_cache, do_sample=True, temperature=1.5, seed=3)
        runs.append((greedy, sampled))
    assert torch.equal(runs[0][0], runs[1][0])
    assert torch.equal(runs[0][1], runs[1][1])


def test_a_tensor_changed_in_place_is_made_again() -> None:
    offset = torch.tensor(3)
    made: list[int] = []

    def make() -> torch.Tensor:
        made.append(1)
        return torch.arange(2) + offset

    store = _per_step.PerStep()
    first = _per_step.shared(store, "test_slots", (2, offset), make)
    assert torch.equal(_per_step.shared(store, "test_slots", (2, offset), make), first)
    assert len(made) == 1
    offset.add_(1)  # the same object, a new version
    assert torch.equal(_per_step.shared(store, "test_slots", (2, offset), make), torch.tensor([4, 5]))
    assert len(made) == 2
    # Another tensor of the same value on the CPU is the same input; another value is not.
    assert torch.equal(_per_step.shared(store, "test_slots", (2, torch.tensor(4)), make), torch.tensor([4, 5]))
    assert len(made) == 2
    _per_step.shared(store, "test_slots", (2, torch.tensor(7)), make)
    _per_step.shared(store, "test_slots", (3, torch.tensor(7)), make)
    _per_step.shared(store, "test_slots", (2.0, torch.tensor(7)), make)  # 2.0 == 2, but not the same input
    assert len(made) == 5


def test_inference_mode_is_part_of_the_key() -> None:
    offset = torch.tensor(1)
    store = _per_step.PerStep()
    with torch.inference_mode():
        inside = _per_step.shared(store, "test_mode", (offset,), lambda: torch.arange(3) + offset)
    outside = _per_step.shared(store, "test_mode", (offset,), lambda: torch.arange(3) + offset)
    assert inside.is_inference()
    assert not outside.is_inference()


def test_under_a_torch_func_transform_the_value_is_made_each_time() -> None:
    made: list[int] = []
    store = _per_step.PerStep()

    def per_row(x: torch.Tensor) -> torch.Tensor:
        return _per_step.shared(store, "test_vmap", (2,), lambda: made.append(1) or torch.ones(2)) * x

    torch.func.vmap(per_row)(torch.ones(3, 2))
    torch.func.vmap(per_row)(torch.ones(3, 2))
    assert len(made) == 2


def test_a_mask_that_requires_grad_is_combined_in_each_forward() -> None:
    # A learned float mask: what is made from it belongs to one forward's graph, so each forward makes its own
    # and backward runs once per forward (a shared value would be a second backward through the first graph).
    learned = torch.zeros(1, 4, requires_grad=True)
    q = torch.randn(1, 2, 4, 8)
    for _ in range(2):
        _attention_layers.attend(q, q, q, learned.expand(1, 4), causal=True).sum().backward()
    assert learned.grad is not None


def test_a_large_value_is_not_kept_after_the_call() -> None:
    made: list[int] = []

    def big() -> torch.Tensor:
        made.append(1)
        return torch.zeros(_per_step.KEEP_BYTES + 1, dtype=torch.bool)

    store = _per_step.PerStep()
    _per_step.shared(store, "test_big", (1,), big)
    _per_step.shared(store, "test_big", (1,), big)
    assert len(made) == 2
    assert "test_big" not in store.last


def stores(model: torch.nn.Module) -> set[int]:
    return {id(m.per_step) for m in model.modules() if isinstance(m.__dict__.get("per_step"), _per_step.PerStep)}


def test_per_step_values_are_the_models_not_a_process_wide_table() -> None:
    # They were kept in a module-level dict of tensors, written on the fast path and shared by every model of
    # the process: now each model keeps its own, and every attention layer of one model shares it.
    a, b = llama(2), llama(2)
    inputs = a.example_inputs(B=1, T=5)
    with torch.no_grad():
        for model in (a, b, a, b):  # validated, then the fast path
            model(*inputs)
    assert stores(a) == {id(a._runtime.per_step)}
    assert stores(b) == {id(b._runtime.per_step)}
    assert a._runtime.per_step is not b._runtime.per_step
    assert a._runtime.per_step.last
    assert b._runtime.per_step.last
    assert not any(isinstance(v, dict) for k, v in vars(_per_step).items() if not k.startswith("__"))


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_a_copy_starts_with_its_own_empty_per_step_values_and_the_same_tokens(how: str) -> None:
    import copy
    import pickle

    m = llama(2).eval()
    ids, _ = m.example_inputs(B=1, T=5)
    # Every token real: a fully padded row is NaN on torch 2.4's SDPA (zeros from 2.5 on), and NaN != NaN.
    inputs = (ids, torch.ones(1, 5, dtype=torch.bool))
    with torch.no_grad():
        logits = m(*inputs)
        clone = copy.deepcopy(m) if how == "deepcopy" else pickle.loads(pickle.dumps(m))
        assert stores(clone) == {id(clone._runtime.per_step)}
        assert not clone._runtime.per_step.last
        assert m._runtime.per_step.last  # the original's are untouched
        assert torch.equal(clone(*inputs), logits)
        assert torch.equal(clone(*inputs), logits)


def test_a_layer_without_a_store_makes_each_value_each_time() -> None:
    made: list[int] = []

    def make() -> torch.Tensor:
        made.append(1)
        return torch.ones(1)

    for _ in range(2):
        _per_step.shared(None, "test_none", (1,), make)
    assert len(made) == 2
