"""torch.func on a GraphModule directly: functional_call, vmap, grad, vjp, jacrev, per-sample gradients.

Each test compares against the hand-written twin (same weights, same state_dict keys) for equal results.
"""

from __future__ import annotations

import gc
import weakref

import pytest

pytest.importorskip("hndl.func")

import torch
from torch.func import functional_call, grad, jacrev, vjp, vmap


def detached(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in model.named_parameters()}


def test_torch_func_functional_call_on_a_graph_module_matches_the_twin(mlp, twin_of, x):
    torch.manual_seed(3)
    params = {k: torch.randn_like(v) for k, v in mlp.named_parameters()}
    ours = functional_call(mlp, params, (x,))
    theirs = functional_call(twin_of(mlp), params, (x,))
    assert torch.equal(ours, theirs)
    assert torch.equal(mlp(x), twin_of(mlp)(x))  # the module's own weights are back


def test_a_tensor_swapped_in_under_its_name_stays_on_the_unchecked_path(mlp, x):
    mlp(x)
    validated = mlp.validations
    for seed in range(4):
        torch.manual_seed(seed)
        params = {k: torch.randn_like(v) for k, v in mlp.named_parameters()}
        functional_call(mlp, params, (x,))
        mlp(x)
    assert mlp.validations == validated


def test_functional_call_keeps_no_generated_weights_alive(mlp, x):
    mlp(x)
    refs = []
    for _ in range(3):
        generated = {k: torch.randn_like(v, requires_grad=True) * 2 for k, v in mlp.named_parameters()}
        functional_call(mlp, generated, (x,)).sum().backward()
        refs += [weakref.ref(t) for t in generated.values()]
        del generated
    mlp(x)  # another call on the fast path must not need (or have kept) any of them
    gc.collect()
    assert [r for r in refs if r() is not None] == []


def test_vmap_over_an_input_batch_dim_matches_the_twin(mlp, twin_of):
    torch.manual_seed(4)
    batch = torch.randn(6, 5, 8)  # vmap over the leading 6: each call sees [5, 8]
    ours = vmap(mlp)(batch)
    theirs = vmap(twin_of(mlp))(batch)
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(ours, torch.stack([mlp(b) for b in batch]))


def test_grad_vjp_and_jacrev_match_the_twin(mlp, twin_of, x):
    twin = twin_of(mlp)
    params = detached(mlp)

    def loss(module):
        return lambda p, inp: functional_call(module, p, (inp,)).tanh().sum()

    for argnums in (0, 1):
        ours = grad(loss(mlp), argnums=argnums)(params, x)
        theirs = grad(loss(twin), argnums=argnums)(params, x)
        torch.testing.assert_close(ours, theirs)

    out, pullback = vjp(lambda inp: mlp(inp), x)
    out_twin, pullback_twin = vjp(lambda inp: twin(inp), x)
    cotangent = torch.randn_like(out)
    torch.testing.assert_close(out, out_twin)
    torch.testing.assert_close(pullback(cotangent), pullback_twin(cotangent))

    jac = jacrev(lambda inp: mlp(inp))(x)
    assert jac.shape == (5, 4, 5, 8)
    torch.testing.assert_close(jac, jacrev(lambda inp: twin(inp))(x))

    jac_params = jacrev(lambda p: functional_call(mlp, p, (x,)))(params)
    torch.testing.assert_close(jac_params, jacrev(lambda p: functional_call(twin, p, (x,)))(params))


def test_per_sample_gradients_equal_a_loop_over_samples(mlp, twin_of, x):
    target = torch.randn(5, 4)
    params = detached(mlp)

    def sample_loss(module):
        def loss(p, sample, y):
            out = functional_call(module, p, (sample.unsqueeze(0),))
            return torch.nn.functional.mse_loss(out, y.unsqueeze(0))

        return loss

    per_sample = vmap(grad(sample_loss(mlp)), in_dims=(None, 0, 0))(params, x, target)
    twin_per_sample = vmap(grad(sample_loss(twin_of(mlp))), in_dims=(None, 0, 0))(params, x, target)
    for i in range(5):
        mlp.zero_grad()
        torch.nn.functional.mse_loss(mlp(x[i : i + 1]), target[i : i + 1]).backward()
        for name, param in mlp.named_parameters():
            torch.testing.assert_close(per_sample[name][i], param.grad)
            torch.testing.assert_close(twin_per_sample[name][i], param.grad)


def test_hndl_functional_call_under_vmap_of_grad(mlp, x):
    import hndl.func as hf

    target = torch.randn(5, 4)
    params = detached(mlp)

    def loss(p, sample, y):
        return (hf.functional_call(mlp, p, (sample.unsqueeze(0),)) - y).square().sum()

    ours = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, target)
    theirs = vmap(
        grad(lambda p, s, y: (functional_call(mlp, p, (s.unsqueeze(0),)) - y).square().sum()), in_dims=(None, 0, 0)
    )(params, x, target)
    for name in params:
        assert torch.equal(ours[name], theirs[name])
