"""hndl.func.stack and hndl.func.ensemble_call: many models built from one graph, run at once under vmap."""

from __future__ import annotations

import pytest

pytest.importorskip("hndl.func")

import torch
from torch import nn

import hndl
import hndl.func as hf


@pytest.fixture
def members(make_mlp):
    return [make_mlp(seed=seed) for seed in range(3)]


def test_stack_returns_stacked_tensors_and_a_meta_base(members):
    params, buffers, base = hf.stack(members)
    assert isinstance(base, hndl.GraphModule)
    assert {t.device.type for t in (*base.parameters(), *base.buffers())} == {"meta"}
    assert list(params) == [name for name, _ in members[0].named_parameters()]
    assert buffers == {}
    for name, stacked in params.items():
        assert stacked.shape == (3, *members[0].get_parameter(name).shape)
        assert stacked.is_leaf
        assert stacked.requires_grad
        for i, model in enumerate(members):
            assert torch.equal(stacked[i], model.get_parameter(name))
    assert members[0].nodes.n_hidden.weight.device.type == "cpu"  # the models are untouched


def test_ensemble_call_equals_each_model_alone(members, twin_of, x):
    params, buffers, base = hf.stack(members)
    out = hf.ensemble_call(base, params, buffers, x)
    assert out.shape == (3, 5, 4)
    for i, model in enumerate(members):
        torch.testing.assert_close(out[i], model(x))
        torch.testing.assert_close(out[i], twin_of(model)(x))


def test_in_dims_zero_gives_each_member_its_own_input(members, x):
    params, buffers, base = hf.stack(members)
    inputs = torch.stack([x, x * 2, x - 1])
    out = hf.ensemble_call(base, params, buffers, inputs, in_dims=0)
    for i, model in enumerate(members):
        torch.testing.assert_close(out[i], model(inputs[i]))


def test_batchnorm_buffers_in_eval_mode(make_mlp, twin_of, x):
    models = []
    for seed in range(3):
        model = make_mlp(norm=True, seed=seed)
        model(torch.randn(7, 8) * (seed + 1))  # distinct running statistics per member
        models.append(model.eval())
    params, buffers, base = hf.stack(models)
    assert set(buffers) == {"nodes.n_norm.running_mean", "nodes.n_norm.running_var", "nodes.n_norm.num_batches_tracked"}
    out = hf.ensemble_call(base, params, buffers, x)
    for i, model in enumerate(models):
        torch.testing.assert_close(out[i], model(x))
        torch.testing.assert_close(out[i], twin_of(model)(x))


def test_batchnorm_in_train_mode_updates_the_stacked_buffers_like_each_model_alone(make_mlp, x):
    models = [make_mlp(norm=True, seed=seed) for seed in range(2)]
    params, buffers, base = hf.stack(models)
    out = hf.ensemble_call(base, params, buffers, x)  # base (like the models) is in train mode
    for i, model in enumerate(models):
        torch.testing.assert_close(out[i], model(x))  # batch statistics; the model updates its own buffers
        for name, buffer in model.named_buffers():
            torch.testing.assert_close(buffers[name][i], buffer)


def test_missing_stacked_buffers_are_e_params(make_mlp, x):
    params, _buffers, base = hf.stack([make_mlp(norm=True, seed=s) for s in range(2)])
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, {}, x)
    problem = info.value.problems[0]
    assert problem.code == "E_PARAMS"
    assert problem.node == "norm"
    assert (
        problem.message
        == "ensemble_call has no stacked value for 'nodes.n_norm.running_mean' (base is on the meta device)"
    )
    assert problem.hint == "pass the params and buffers that hndl.func.stack returned"
    assert len(info.value.problems) == 3


def test_stacked_tensors_that_disagree_on_the_ensemble_size_are_e_params(members, x):
    params, buffers, base = hf.stack(members)
    params["nodes.n_out.bias"] = params["nodes.n_out.bias"][:2]
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    assert info.value.problems[0].expected == "3 members, as in 'nodes.n_hidden.weight'"
    assert info.value.problems[0].actual == "2 members in 'nodes.n_out.bias'"


def test_a_member_shape_that_breaks_the_build_is_e_params(members, x):
    params, buffers, base = hf.stack(members)
    params["nodes.n_out.weight"] = torch.randn(3, 4, 15)
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    assert (info.value.node, info.value.problems[0].expected, info.value.problems[0].actual) == (
        "out",
        [4, 16],
        [4, 15],
    )


def test_models_from_different_graphs_cannot_be_stacked(make_mlp):
    with pytest.raises(hndl.HndlError) as info:
        hf.stack([make_mlp(), make_mlp(hidden=32)])
    problem = info.value.problems[0]
    assert problem.code == "E_PARAMS"
    assert problem.node == "hidden"
    assert problem.message == "model 1 is not built like model 0: parameter 'nodes.n_hidden.weight' differs in shape"
    assert (problem.expected, problem.actual) == ([16, 8], [32, 8])
    with pytest.raises(
        hndl.HndlError, match=r"model 1 is not built like model 0: it has an extra module 'nodes\.n_norm'"
    ):
        hf.stack([make_mlp(), make_mlp(norm=True)])
    with pytest.raises(hndl.HndlError, match="differs in dtype") as info:
        hf.stack([make_mlp(), make_mlp().double()])
    assert (info.value.problems[0].expected, info.value.problems[0].actual) == ("float32", "float64")


def test_stack_rejects_an_empty_list_and_plain_modules(mlp):
    with pytest.raises(hndl.HndlError, match="at least one model"):
        hf.stack([])
    with pytest.raises(hndl.HndlError, match="model 1 is not a GraphModule"):
        hf.stack([mlp, nn.Linear(8, 4)])


def test_an_ensemble_trains_with_one_optimizer(members, x):
    params, buffers, base = hf.stack(members)
    target = torch.randn(5, 4)
    optimizer = torch.optim.SGD(params.values(), lr=0.1)
    losses = []
    for _ in range(5):
        optimizer.zero_grad()
        per_member = (hf.ensemble_call(base, params, buffers, x) - target).square().mean(dim=(1, 2))
        per_member.sum().backward()
        optimizer.step()
        losses.append(per_member.detach())
    assert all(params[name].grad is not None for name in params)
    assert bool((losses[-1] < losses[0]).all())


def test_ensemble_of_a_graph_with_several_inputs(x):
    g = hndl.Graph("two")
    a = g.add("linear", g.input("a", ("B", 8)), name="la", out_features=4)
    b = g.add("linear", g.input("b", ("B", 8)), name="lb", out_features=4)
    g.output(a)
    g.output(b)
    models = []
    for seed in range(2):
        torch.manual_seed(seed)
        models.append(hndl.build(g))
    params, buffers, base = hf.stack(models)
    out_a, out_b = hf.ensemble_call(base, params, buffers, (x, x + 1))
    for i, model in enumerate(models):
        alone_a, alone_b = model(x, x + 1)
        torch.testing.assert_close(out_a[i], alone_a)
        torch.testing.assert_close(out_b[i], alone_b)


# A stack is checked once per stack signature (names, shapes, dtypes, devices of the stacked tensors, and the
# base's state version); every change to it is E_PARAMS on the very next call.


@pytest.fixture
def stack_checks(monkeypatch):
    """Counts how often ensemble_call walks a stack (the check a known stack skips)."""
    import hndl.func._ensemble as ensemble_module

    calls = []
    check = ensemble_module._check_stack

    def counted(*args, **kwargs):
        calls.append(1)
        return check(*args, **kwargs)

    monkeypatch.setattr(ensemble_module, "_check_stack", counted)
    return calls


def test_a_known_stack_is_not_walked_again_on_later_calls(members, x, stack_checks):
    params, buffers, base = hf.stack(members)
    first = hf.ensemble_call(base, params, buffers, x)
    for _ in range(3):
        assert torch.equal(hf.ensemble_call(base, params, buffers, x), first)
    assert len(stack_checks) == 1
    # new dicts holding the same tensors (or others of the same shapes) have the same signature
    hf.ensemble_call(base, dict(params), dict(buffers), x)
    hf.ensemble_call(base, {k: v.detach().clone() for k, v in params.items()}, {}, x)
    assert len(stack_checks) == 1


def test_a_known_stack_in_train_mode_still_updates_batchnorm_statistics_every_call(make_mlp, x, stack_checks):
    models = [make_mlp(norm=True, seed=seed) for seed in range(2)]
    params, buffers, base = hf.stack(models)
    for _ in range(3):
        out = hf.ensemble_call(base, params, buffers, x)
        for i, model in enumerate(models):
            torch.testing.assert_close(out[i], model(x))
            for name, buffer in model.named_buffers():
                torch.testing.assert_close(buffers[name][i], buffer)
    assert int(buffers["nodes.n_norm.num_batches_tracked"][0]) == 3
    assert len(stack_checks) == 1


def _known(members, x):
    params, buffers, base = hf.stack(members)
    hf.ensemble_call(base, params, buffers, x)
    hf.ensemble_call(base, params, buffers, x)
    return params, buffers, base


def test_a_known_stack_with_a_tensor_of_another_shape_is_e_params_on_the_next_call(members, x):
    params, buffers, base = _known(members, x)
    params["nodes.n_out.weight"] = torch.randn(3, 4, 15)
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    problem = info.value.problems[0]
    assert (problem.code, problem.node, problem.expected, problem.actual) == ("E_PARAMS", "out", [4, 16], [4, 15])


def test_a_known_stack_with_a_missing_key_is_e_params_on_the_next_call(members, x):
    params, buffers, base = _known(members, x)
    del params["nodes.n_hidden.bias"]
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    problem = info.value.problems[0]
    assert (problem.code, problem.node) == ("E_PARAMS", "hidden")
    assert problem.message == (
        "ensemble_call has no stacked value for 'nodes.n_hidden.bias' (base is on the meta device)"
    )


def test_a_known_stack_with_one_tensor_of_another_ensemble_size_is_e_params_on_the_next_call(members, x):
    params, buffers, base = _known(members, x)
    params["nodes.n_hidden.weight"] = params["nodes.n_hidden.weight"][:2]
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    problem = info.value.problems[0]
    assert problem.code == "E_PARAMS"
    assert problem.message == "the stacked tensors disagree on the ensemble size"
    assert (problem.expected, problem.actual) == (
        "2 members, as in 'nodes.n_hidden.weight'",
        "3 members in 'nodes.n_hidden.bias'",
    )


def test_a_known_stack_with_a_tensor_of_another_dtype_is_e_params_on_the_next_call(members, x):
    params, buffers, base = _known(members, x)
    params["nodes.n_out.bias"] = params["nodes.n_out.bias"].double()
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    problem = info.value.problems[0]
    assert (problem.code, problem.node, problem.expected, problem.actual) == ("E_PARAMS", "out", "float32", "float64")


def test_a_known_stack_with_an_extra_key_is_e_params_on_the_next_call(members, x):
    params, buffers, base = _known(members, x)
    params["nodes.n_out.wieght"] = params["nodes.n_out.weight"]
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    problem = info.value.problems[0]
    assert problem.code == "E_PARAMS"
    assert problem.hint == "did you mean 'nodes.n_out.weight'?"


def test_a_known_stack_after_the_base_is_converted_is_e_params_on_the_next_call(members, x):
    params, buffers, base = _known(members, x)
    base.double()  # the stack is unchanged, but the build it must match now wants float64
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x.double())
    problem = info.value.problems[0]
    assert (problem.code, problem.expected, problem.actual) == ("E_PARAMS", "float64", "float32")


def test_a_known_stack_after_a_buffer_is_registered_on_the_base_is_e_params_on_the_next_call(members, x):
    params, buffers, base = _known(members, x)
    base.nodes.n_out.register_buffer("scale", torch.ones(4, device="meta"))
    with pytest.raises(hndl.HndlError) as info:
        hf.ensemble_call(base, params, buffers, x)
    assert info.value.problems[0].message == (
        "ensemble_call has no stacked value for 'nodes.n_out.scale' (base is on the meta device)"
    )


def test_a_whole_stack_of_another_ensemble_size_is_a_new_signature_that_runs(members, x):
    params, buffers, base = _known(members, x)
    fewer = {name: tensor[:2] for name, tensor in params.items()}
    out = hf.ensemble_call(base, fewer, buffers, x)
    assert out.shape == (2, 5, 4)
    for i, model in enumerate(members[:2]):
        torch.testing.assert_close(out[i], model(x))
    assert hf.ensemble_call(base, params, buffers, x).shape == (3, 5, 4)  # the first signature is still known


def test_a_known_stack_keeps_no_tensor_and_no_base_alive(members, x):
    import gc
    import weakref

    params, buffers, base = _known(members, x)
    refs = [weakref.ref(t) for t in (*params.values(), *buffers.values())] + [weakref.ref(base)]
    del params, buffers, base
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_only_the_newest_stack_signatures_are_remembered(members, x, stack_checks):
    from hndl.func._stack_signatures import PASSED_STACKS

    MAX_SIGNATURES = PASSED_STACKS.limit
    params, buffers, base = hf.stack(members)
    # MAX_SIGNATURES + 1 stacks that differ only in their ensemble size (member 0, repeated n times)
    first = {name: tensor[:1] for name, tensor in params.items()}
    stacks = [{name: t.expand(n, *t.shape[1:]) for name, t in first.items()} for n in range(1, MAX_SIGNATURES + 2)]
    for stack in stacks:
        hf.ensemble_call(base, stack, buffers, x)
    assert len(stack_checks) == MAX_SIGNATURES + 1
    hf.ensemble_call(base, stacks[-1], buffers, x)  # still known
    assert len(stack_checks) == MAX_SIGNATURES + 1
    hf.ensemble_call(base, stacks[0], buffers, x)  # the oldest was dropped: checked again, and still correct
    assert len(stack_checks) == MAX_SIGNATURES + 2


def test_ensemble_calls_from_several_threads_each_with_its_own_base_all_get_their_own_results(members, x):
    # One base must not be called from two threads at once (torch's functional_call swaps the stacked tensors
    # into it for the call); several bases, one per thread, share the record of known stacks.
    import threading

    params, buffers, base = hf.stack(members)
    stacks = {size: {k: v[:size].detach() for k, v in params.items()} for size in (1, 2, 3)}
    expected = {size: hf.ensemble_call(base, stack, buffers, x) for size, stack in stacks.items()}
    start = threading.Barrier(6)
    failures: list[BaseException] = []

    def work(size: int) -> None:
        _, _, own_base = hf.stack(members)  # a new base: its first calls write to the shared record
        try:
            start.wait()
            for _ in range(20):
                assert torch.equal(hf.ensemble_call(own_base, stacks[size], buffers, x), expected[size])
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(size,)) for size in (1, 2, 3) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []


# A known stack is recognised by PyTorch's tensor guard before any signature is built (issue 27: ensemble_call's
# overhead at small sizes); a stack the guard does not recognise is looked up by signature as before.


@pytest.fixture
def signatures_built(monkeypatch):
    """Counts how often ensemble_call builds a stack signature."""
    import hndl.func._ensemble as ensemble_module

    calls = []
    build = ensemble_module.stack_signature

    def counted(*args, **kwargs):
        calls.append(1)
        return build(*args, **kwargs)

    monkeypatch.setattr(ensemble_module, "stack_signature", counted)
    return calls


def test_a_known_stack_is_recognised_by_the_tensor_guard_without_a_signature(members, x, signatures_built):
    params, buffers, base = hf.stack(members)
    hf.ensemble_call(base, params, buffers, x)
    assert len(signatures_built) == 1  # the first call: checked, then remembered both ways
    for _ in range(3):
        hf.ensemble_call(base, params, buffers, x)
    assert len(signatures_built) == 1


def test_a_stack_the_guard_does_not_know_is_still_known_by_its_signature(members, x, stack_checks, signatures_built):
    params, buffers, base = _known(members, x)
    # Same names, shapes, dtypes and devices, other strides: the guard says no, the signature says known.
    strided = {
        k: v.detach().transpose(-1, -2).contiguous().transpose(-1, -2) if v.dim() > 2 else v for k, v in params.items()
    }
    assert any(strided[k].stride() != params[k].stride() for k in params)
    torch.testing.assert_close(hf.ensemble_call(base, strided, buffers, x), hf.ensemble_call(base, params, buffers, x))
    assert len(stack_checks) == 1
    calls = len(signatures_built)
    hf.ensemble_call(base, strided, buffers, x)  # now remembered by the guard too
    assert len(signatures_built) == calls


def test_the_guard_record_goes_with_its_base(members, x):
    import gc

    from hndl.func._stack_signatures import KNOWN_STACKS

    *_, base = _known(members, x)
    key = id(base)
    assert key in KNOWN_STACKS._by_id
    del base
    gc.collect()
    assert key not in KNOWN_STACKS._by_id
