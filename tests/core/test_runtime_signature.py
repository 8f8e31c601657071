"""The checked runtime: contracts checked once per input signature, then the fast path."""

from __future__ import annotations

import threading

import pytest
import torch
from small_models import mlp
from torch import nn

import hndl
from hndl.torch._module import SIGNATURE_CACHE_SIZE


def twin_of(model: hndl.GraphModule) -> nn.Sequential:
    twin = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    twin[0].load_state_dict(model.nodes.n_hidden.state_dict())
    twin[2].load_state_dict(model.nodes.n_out.state_dict())
    return twin


def test_the_first_call_validates_and_later_calls_with_the_same_signature_do_not():
    model = mlp()
    x = torch.randn(3, 8)
    assert model.validations == 0
    first = model(x)
    assert model.validations == 1
    second = model(x)
    third = model(torch.randn(3, 8))
    assert model.validations == 1
    assert torch.equal(first, second)
    assert third.shape == (3, 4)


def test_outputs_equal_a_hand_written_twin_on_both_paths():
    model = mlp()
    twin = twin_of(model)
    x = torch.randn(5, 8)
    assert torch.equal(model(x), twin(x))  # validating call
    assert torch.equal(model(x), twin(x))  # fast path


def test_a_new_binding_of_the_symbols_is_admitted_without_a_full_validation():
    model = mlp()
    model(torch.randn(3, 8))
    model(torch.randn(4, 8))  # B = 4: inference proved every node for any B, only the input is checked
    assert model.validations == 1
    assert len(model._runtime.signatures.entries) == 2
    model.double()  # a new state version and dtype pattern validate fully, once
    model(torch.randn(4, 8, dtype=torch.float64))
    model(torch.randn(7, 8, dtype=torch.float64))
    assert model.validations == 2
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(9, 7, dtype=torch.float64))  # a wrong input is still E_INPUT at once
    assert info.value.code == "E_INPUT"


def test_a_new_dtype_is_a_new_signature():
    g = hndl.Graph("act")
    x = g.input("x", ("B", 4))
    g.output(g.add("relu", x, name="act"))
    model = hndl.build(g)
    model(torch.randn(2, 4))
    out = model(torch.randn(2, 4, dtype=torch.float64))
    assert out.dtype == torch.float64
    assert model.validations == 2
    model(torch.randn(2, 4, dtype=torch.float64))
    assert model.validations == 2


def test_a_new_device_is_a_new_signature():
    # 'meta' tensors stand in for a second device on a CPU-only machine.
    g = hndl.Graph("id")
    x = g.input("x", ("B", 4))
    g.output(g.add("relu", x, name="act"))
    model = hndl.build(g)
    model(torch.randn(2, 4))
    out = model(torch.empty(2, 4, device="meta"))
    assert out.device.type == "meta"
    assert model.validations == 2


def test_inputs_by_name_and_by_position_share_the_fast_path():
    g = hndl.Graph("two")
    a = g.input("a", ("B", 4))
    b = g.input("b", ("B", 4))
    g.output(g.add("add", a, b, name="sum"))
    model = hndl.build(g)
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    assert torch.equal(model(x, y), x + y)
    assert torch.equal(model(a=x, b=y), x + y)
    assert torch.equal(model(x, b=y), x + y)
    assert model.validations == 1


def test_several_outputs_come_back_as_a_tuple():
    g = hndl.Graph("pair")
    x = g.input("x", ("B", 4))
    g.output([g.add("relu", x, name="r"), g.add("sigmoid", x, name="s")])
    model = hndl.build(g)
    t = torch.randn(2, 4)
    for _ in range(2):
        r, s = model(t)
        assert torch.equal(r, torch.relu(t))
        assert torch.equal(s, torch.sigmoid(t))


def test_train_and_eval_do_not_revalidate():
    model = mlp()
    x = torch.randn(3, 8)
    model(x)
    model.eval()
    model(x)
    model.train()
    model(x)
    assert model.validations == 1


@pytest.mark.parametrize("convert", ["double", "half", "float", "to_float64", "cpu"])
def test_apply_conversions_make_the_next_call_validate(convert):
    model = mlp()
    model(torch.randn(3, 8))
    if convert == "to_float64":
        model.to(torch.float64)
    else:
        getattr(model, convert)()
    dtype = {"double": torch.float64, "half": torch.float16, "to_float64": torch.float64}.get(convert, torch.float32)
    x = torch.randn(3, 8, dtype=dtype)
    model(x)
    assert model.validations == 2
    assert model.build_state.tensors["nodes.n_hidden.weight"].dtype == dtype


def test_the_signature_cache_is_bounded_and_forgets_the_oldest_first():
    model = mlp()
    for batch in range(1, SIGNATURE_CACHE_SIZE + 6):
        model(torch.randn(batch, 8))
    assert len(model._runtime.signatures.entries) == SIGNATURE_CACHE_SIZE
    assert model.validations == 1  # every later batch size was a new binding of B
    remembered = {sig[0] for sig in model._runtime.signatures.entries}
    assert (SIGNATURE_CACHE_SIZE + 5, 8) in remembered  # the newest is remembered
    assert (1, 8) not in remembered  # the oldest was forgotten


def test_a_fast_path_call_writes_nothing_on_the_model():
    model = mlp()
    x = torch.randn(3, 8)
    model(x)
    before = dict(model.__dict__)
    signatures = dict(model._runtime.signatures.entries)
    model(x)
    assert model.__dict__ == before
    assert model._runtime.signatures.entries == signatures


def test_many_threads_with_different_signatures_get_right_results_and_their_errors():
    model = mlp()
    twin = twin_of(model)
    failures: list[str] = []
    errors: list[hndl.HndlError] = []

    def worker(index: int) -> None:
        for round_ in range(30):
            batch = 1 + (index * 7 + round_) % 12
            x = torch.randn(batch, 8)
            try:
                with torch.no_grad():
                    if round_ % 10 == index % 10:
                        model(torch.randn(batch, 9))  # breaks the input contract
                        failures.append(f"thread {index}: a bad input was accepted")
                        continue
                    out = model(x)
                    if not torch.equal(out, twin(x)):
                        failures.append(f"thread {index}: wrong result for batch {batch}")
            except hndl.HndlError as exc:
                errors.append(exc)
            except Exception as exc:  # pragma: no cover - would be a bug
                failures.append(f"thread {index}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert len(errors) == 8 * 3
    assert all(e.code == "E_INPUT" and e.node == "x" for e in errors)
    assert len(model._runtime.signatures.entries) <= SIGNATURE_CACHE_SIZE
    assert set(model._runtime.signatures.entries) == {
        (torch.Size([b, 8]), torch.float32, torch.device("cpu"), model.state_version) for b in range(1, 13)
    }


def test_a_subgraph_with_repeat_runs_on_both_paths():
    block = hndl.Graph("block")
    x = block.input("x", ("B", 8))
    block.output(block.add("relu", block.add("linear", x, name="lin", out_features=8), name="act"))
    g = hndl.Graph("deep")
    x = g.input("x", ("B", 8))
    g.output(g.add("graph", x, name="blocks", graph=block, repeat=3))
    model = hndl.build(g)
    t = torch.randn(2, 8)
    expected = t
    for i in range(3):
        expected = torch.relu(model.nodes.n_blocks[i].n_lin(expected))
    assert torch.equal(model(t), expected)
    assert torch.equal(model(t), expected)
    assert model.validations == 1


def test_a_new_binding_inside_an_inputs_range_is_admitted_and_one_outside_is_refused():
    # The generated check of a new binding tests the contracts' ranges: a model with a range (an imported trace's,
    # a position table's rows) keeps the cheap admission of new sizes, and a size outside still never runs.
    g = hndl.Graph("ranged")
    x = g.input("x", ("B", 8), ranges={"B": {"min": 2, "max": 6}})
    g.output(g.add("linear", x, name="fc", out_features=4))
    model = hndl.build(g)
    model(torch.randn(2, 8))
    model(torch.randn(5, 8))
    assert model.validations == 1
    with pytest.raises(hndl.HndlError, match=r"B=7\) is outside the range its contract gives: 2 <= B <= 6"):
        model(torch.randn(7, 8))  # refused by the generated check, then by the full validation it hands over to
    after_refusal = model.validations
    model(torch.randn(6, 8))
    assert model.validations == after_refusal
