"""hndl.func.functional_call: torch.func.functional_call's semantics, with the dict checked against the build."""

from __future__ import annotations

import gc
import sys
import threading
import weakref

import pytest

pytest.importorskip("hndl.func")

import torch
from torch import nn

import hndl
import hndl.func as hf
from hndl.func import _functional


def randomized(model: nn.Module, seed: int = 7) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return {k: torch.randn_like(v) for k, v in model.named_parameters()}


@pytest.fixture
def count_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts full parameter-dict checks (the slow path)."""
    calls: list[int] = []
    original = _functional._problems

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(_functional, "_problems", counting)
    return calls


# --- same results as torch.func.functional_call --------------------------------------------------------------


def test_full_dict_gives_bit_for_bit_the_result_of_torch_func(mlp, twin_of, x):
    params = randomized(mlp)
    ours = hf.functional_call(mlp, params, (x,))
    theirs = torch.func.functional_call(mlp, params, (x,))
    twin = torch.func.functional_call(twin_of(mlp), params, (x,))
    assert torch.equal(ours, theirs)
    assert torch.equal(ours, twin)


def test_partial_dict_keeps_the_modules_own_other_tensors(mlp, x):
    weight = torch.randn(16, 8)
    ours = hf.functional_call(mlp, {"nodes.n_hidden.weight": weight}, x)
    theirs = torch.func.functional_call(mlp, {"nodes.n_hidden.weight": weight}, x)
    assert torch.equal(ours, theirs)
    assert not torch.equal(ours, mlp(x))
    assert mlp.nodes.n_hidden.weight is not weight  # the module's own tensor is back


def test_tuple_of_dicts_and_kwargs(make_mlp, x):
    model = make_mlp(norm=True).eval()
    params = randomized(model)
    buffers = {k: v + 1 for k, v in model.named_buffers()}
    ours = hf.functional_call(model, (params, buffers), (), {"x": x}, strict=True)
    theirs = torch.func.functional_call(model, (params, buffers), (), {"x": x}, strict=True)
    assert torch.equal(ours, theirs)


def test_tied_weights_follow_torch_func(x):
    g = hndl.Graph("tied")
    h = g.add("linear", g.input("x", ("B", 8)), name="a", out_features=8)
    g.output(g.add("linear", h, name="b", out_features=8))
    model = hndl.build(g)
    model.nodes.n_b.weight = model.nodes.n_a.weight  # tie
    weight = torch.randn(8, 8)
    for tie in (True, False):
        ours = hf.functional_call(model, {"nodes.n_a.weight": weight}, (x,), tie_weights=tie)
        theirs = torch.func.functional_call(model, {"nodes.n_a.weight": weight}, (x,), tie_weights=tie)
        assert torch.equal(ours, theirs)
    # with ties, one name stands for both, so strict does not ask for the other one
    full = {k: v for k, v in model.named_parameters() if k != "nodes.n_a.weight"} | {"nodes.n_a.weight": weight}
    assert torch.equal(
        hf.functional_call(model, full, (x,), strict=True),
        torch.func.functional_call(model, full, (x,), strict=True),
    )
    with pytest.raises(hndl.HndlError, match=r"'nodes\.n_b\.weight' is missing"):
        hf.functional_call(model, full, (x,), strict=True, tie_weights=False)


def test_plain_torch_modules_pass_through_unchecked(x):
    layer = nn.Linear(8, 3)
    # torch.func ignores an unknown key without strict; so does hndl for a module that is not a GraphModule
    params = {"weight": torch.randn(3, 8), "bogus": torch.randn(2)}
    assert torch.equal(hf.functional_call(layer, params, (x,)), torch.func.functional_call(layer, params, (x,)))


# --- the check ------------------------------------------------------------------------------------------------


def test_unknown_key_names_the_closest_known_key(mlp, x):
    with pytest.raises(hndl.HndlError) as info:
        hf.functional_call(mlp, {"nodes.n_hiden.weight": torch.randn(16, 8)}, (x,))
    assert info.value.code == "E_PARAMS"
    assert str(info.value) == (
        "E_PARAMS: unknown key 'nodes.n_hiden.weight': the build has no parameter or buffer of that name\n"
        "    hint:     did you mean 'nodes.n_hidden.weight'?"
    )


def test_wrong_shape_names_key_node_expected_and_actual(mlp, x):
    with pytest.raises(hndl.HndlError) as info:
        hf.functional_call(mlp, {"nodes.n_hidden.weight": torch.randn(16, 9)}, (x,))
    assert info.value.code == "E_PARAMS"
    assert info.value.node == "hidden"
    assert str(info.value) == (
        "E_PARAMS linear 'hidden': parameter 'nodes.n_hidden.weight' has the wrong shape\n"
        "    expected: [16, 8]\n"
        "    actual:   [16, 9]\n"
        "    hint:     pass it shaped like model.state_dict()['nodes.n_hidden.weight']"
    )


def test_stacked_weights_outside_vmap_get_a_hint(mlp, x):
    with pytest.raises(hndl.HndlError, match="looks like stacked ensemble weights"):
        hf.functional_call(mlp, {"nodes.n_out.bias": torch.randn(3, 4)}, (x,))


def test_wrong_dtype_is_e_params(mlp, x):
    with pytest.raises(hndl.HndlError) as info:
        hf.functional_call(mlp, {"nodes.n_out.bias": torch.zeros(4, dtype=torch.float64)}, (x,))
    assert str(info.value).splitlines() == [
        "E_PARAMS linear 'out': parameter 'nodes.n_out.bias' has the wrong dtype",
        "    expected: float32",
        "    actual:   float64",
        "    hint:     convert it with .to(torch.float32), or convert the module first",
    ]


def test_dtype_contract_follows_a_converted_module(mlp, x):
    double = mlp.double()
    params = {k: v.clone() for k, v in double.named_parameters()}
    assert hf.functional_call(double, params, (x.double(),)).dtype == torch.float64
    with pytest.raises(hndl.HndlError, match="wrong dtype"):
        hf.functional_call(double, {k: v.float() for k, v in params.items()}, (x.double(),))


def test_a_signature_that_passed_before_a_conversion_is_checked_again_after_it(mlp, x):
    params = {k: v.detach().clone() for k, v in mlp.named_parameters()}
    hf.functional_call(mlp, params, (x,))
    mlp.double()
    with pytest.raises(hndl.HndlError, match="wrong dtype"):
        hf.functional_call(mlp, params, (x.double(),))


def test_strict_reports_every_missing_tensor_at_once(make_mlp, x):
    model = make_mlp(norm=True)
    with pytest.raises(hndl.HndlError) as info:
        hf.functional_call(model, dict(model.named_parameters()), (x,), strict=True)
    missing = [p.message for p in info.value.problems]
    assert len(missing) == 3
    assert all("is missing (strict=True" in m for m in missing)
    assert info.value.problems[0].node == "norm"
    assert str(info.value).startswith("3 problems in parameter dict for graph 'mlp':")


def test_all_problems_come_back_together(mlp, x):
    bad = {"nodes.n_hidden.weight": torch.randn(2, 2), "nodes.n_out.bais": torch.randn(4), "nodes.n_out.bias": 3.0}
    with pytest.raises(hndl.HndlError) as info:
        hf.functional_call(mlp, bad, (x,))
    assert [p.message for p in info.value.problems] == [
        "parameter 'nodes.n_hidden.weight' has the wrong shape",
        "unknown key 'nodes.n_out.bais': the build has no parameter or buffer of that name",
        "parameter 'nodes.n_out.bias' must be a tensor",
    ]
    assert info.value.problems[1].hint == "did you mean 'nodes.n_out.bias'?"


def test_a_key_in_two_dicts_and_a_non_dict_are_e_params(mlp, x):
    weight = torch.randn(16, 8)
    with pytest.raises(hndl.HndlError, match="given in dict 0 and in dict 1"):
        hf.functional_call(mlp, ({"nodes.n_hidden.weight": weight}, {"nodes.n_hidden.weight": weight}), (x,))
    with pytest.raises(hndl.HndlError, match="must be a dict of tensors or a tuple of dicts"):
        hf.functional_call(mlp, [weight], (x,))


def test_regression_a_mapping_that_is_not_a_dict_reached_torch_as_a_raw_value_error(mlp, x):
    """torch.func.functional_call raises ValueError for a Mapping that is not a dict; hndl passed it through."""
    from types import MappingProxyType

    params = MappingProxyType(dict(mlp.named_parameters()))
    with pytest.raises(hndl.HndlError) as info:
        hf.functional_call(mlp, params, (x,))
    assert info.value.code == "E_PARAMS"
    assert info.value.problems[0].hint == "wrap other mappings in dict(...)"
    assert torch.equal(hf.functional_call(mlp, dict(params), (x,)), mlp(x))


def test_a_tensor_for_a_parameter_built_as_none_is_e_params(x):
    g = hndl.Graph("nobias")
    g.output(g.add("linear", g.input("x", ("B", 8)), name="out", out_features=2, bias=False))
    model = hndl.build(g)
    assert "nodes.n_out.bias" in model._build_state.tensors
    with pytest.raises(hndl.HndlError, match="was built as None"):
        hf.functional_call(model, {"nodes.n_out.bias": torch.zeros(2)}, (x,))


# --- the signature cache ----------------------------------------------------------------------------------------


def test_check_runs_once_per_parameter_signature(mlp, x, count_checks):
    first, second = randomized(mlp, 1), randomized(mlp, 2)
    for _ in range(3):
        hf.functional_call(mlp, first, (x,))
        hf.functional_call(mlp, second, (x,))
    assert len(count_checks) == 1
    hf.functional_call(mlp, {"nodes.n_out.bias": torch.zeros(4)}, (x,))  # other keys
    hf.functional_call(mlp, first, (x,), strict=True)  # other flags
    assert len(count_checks) == 3
    hf.functional_call(mlp, (first, {}), (x,))  # a tuple of dicts is its own signature
    hf.functional_call(mlp, (second, {}), (x,))
    assert len(count_checks) == 4


def test_a_failing_signature_is_not_remembered(mlp, x, count_checks):
    bad = {"nodes.n_out.bias": torch.zeros(5)}
    for _ in range(2):
        with pytest.raises(hndl.HndlError):
            hf.functional_call(mlp, bad, (x,))
    assert len(count_checks) == 2


def test_signatures_are_per_module_instance(make_mlp, x, count_checks):
    a, b = make_mlp(), make_mlp()
    params = randomized(a)
    hf.functional_call(a, params, (x,))
    hf.functional_call(b, params, (x,))
    hf.functional_call(a, params, (x,))
    assert len(count_checks) == 2


def test_the_record_is_bounded(mlp, x, count_checks):
    params = randomized(mlp)
    for empties in range(_functional._PASSED.limit + 8):  # each tuple length is a signature of its own
        hf.functional_call(mlp, (*[{}] * empties, params), (x,))
    assert len(count_checks) == _functional._PASSED.limit + 8
    assert _functional._PASSED.count(mlp) == _functional._PASSED.limit
    hf.functional_call(mlp, (*[{}] * (_functional._PASSED.limit + 7), params), (x,))  # recent: still known
    hf.functional_call(mlp, (params,), (x,))  # the oldest was dropped: checked again
    assert len(count_checks) == _functional._PASSED.limit + 9


def test_threads_hammering_one_module_with_alternating_dicts_share_the_record_safely(mlp, x, monkeypatch):
    # Regression: the record had no lock; two threads evicting the oldest signature at once could delete one key
    # twice (KeyError) or change a dict another thread was iterating. torch.func.functional_call itself swaps the
    # tensors into the shared module, so concurrent calls on one module are not safe inside torch: it is
    # replaced by a stub here, and the threads exercise exactly hndl's check and its record.
    monkeypatch.setattr(_functional, "_torch_functional_call", lambda module, params, args, kwargs, **_: len(params))
    first, second = randomized(mlp, 1), randomized(mlp, 2)
    churn = _functional._PASSED.limit + 16  # more signatures than the record holds: eviction on every lap
    calls = [(*[{}] * n, params) for n in range(churn) for params in (first, second)]
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def hammer(offset: int) -> None:
        start.wait()
        try:
            for i in range(10 * len(calls)):
                dicts = calls[(offset + i) % len(calls)]
                assert hf.functional_call(mlp, dicts, (x,)) == len(dicts)
        except BaseException as exc:
            errors.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible, to make any race show
    try:
        threads = [threading.Thread(target=hammer, args=(k * 7,)) for k in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []
    assert _functional._PASSED.count(mlp) == _functional._PASSED.limit


def test_the_record_keeps_neither_module_nor_tensors_alive(make_mlp, x):
    model = make_mlp()
    params = randomized(model)
    hf.functional_call(model, params, (x,))
    module_ref = weakref.ref(model)
    tensor_refs = [weakref.ref(v) for v in params.values()]
    del model, params
    gc.collect()
    assert module_ref() is None
    assert all(ref() is None for ref in tensor_refs)


# --- inside transforms ------------------------------------------------------------------------------------------


def test_vmap_over_an_ensemble_of_params_checks_per_sample_shapes(mlp, twin_of, x, count_checks):
    stacked = {k: torch.randn(3, *v.shape) for k, v in mlp.named_parameters()}

    def run(module):
        return torch.func.vmap(lambda p, inp: hf.functional_call(module, p, (inp,)), in_dims=(0, None))(stacked, x)

    batched = run(mlp)
    for i in range(3):
        alone = torch.func.functional_call(twin_of(mlp), {k: v[i] for k, v in stacked.items()}, (x,))
        torch.testing.assert_close(batched[i], alone)
    assert torch.equal(run(mlp), batched)
    assert len(count_checks) == 1  # the per-sample signature is remembered like any other

    wrong = dict(stacked, **{"nodes.n_out.weight": torch.randn(3, 4, 15)})
    with pytest.raises(hndl.HndlError) as info:
        torch.func.vmap(lambda p, inp: hf.functional_call(mlp, p, (inp,)), in_dims=(0, None))(wrong, x)
    assert info.value.problems[0].expected == [4, 16]
    assert info.value.problems[0].actual == [4, 15]  # the per-sample shape, not the stacked one


def test_grad_through_functional_call_matches_the_twin(mlp, twin_of, x):
    params = {k: v.detach() for k, v in mlp.named_parameters()}

    def loss(module):
        return lambda p: hf.functional_call(module, p, (x,)).square().sum()

    ours = torch.func.grad(loss(mlp))(params)
    theirs = torch.func.grad(lambda p: torch.func.functional_call(twin_of(mlp), p, (x,)).square().sum())(params)
    assert ours.keys() == theirs.keys()
    for key in ours:
        torch.testing.assert_close(ours[key], theirs[key])
