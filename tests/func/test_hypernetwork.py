"""Generated and adapted weights through functional_call: hypernetworks trained end to end, MAML-style inner loops.

The recipes of docs/func.md, with hndl's checked functional_call (the docs page runs them as written too).
"""

from __future__ import annotations

import gc
import weakref

import pytest

pytest.importorskip("hndl.func")

import torch
from torch import nn

import hndl
import hndl.func as hf


class HyperNet(nn.Module):
    """Maps a task embedding to every parameter of the target, split by ``hndl.func.param_shapes``."""

    def __init__(self, target: nn.Module, embedding: int = 3) -> None:
        super().__init__()
        self.shapes = hf.param_shapes(target)
        self.head = nn.Linear(embedding, sum(s.numel() for s in self.shapes.values()))
        with torch.no_grad():
            self.head.weight.mul_(0.1)

    def forward(self, task: torch.Tensor) -> dict[str, torch.Tensor]:
        chunks = self.head(task).split([s.numel() for s in self.shapes.values()])
        return {name: chunk.view(shape) for (name, shape), chunk in zip(self.shapes.items(), chunks)}


def test_param_shapes_come_from_the_build(mlp):
    shapes = hf.param_shapes(mlp)
    assert shapes == {
        "nodes.n_hidden.weight": torch.Size([16, 8]),
        "nodes.n_hidden.bias": torch.Size([16]),
        "nodes.n_out.weight": torch.Size([4, 16]),
        "nodes.n_out.bias": torch.Size([4]),
    }
    assert list(shapes) == [name for name, _ in mlp.named_parameters()]


def test_param_shapes_with_buffers_and_for_plain_modules(make_mlp):
    model = make_mlp(norm=True)
    shapes = hf.param_shapes(model, buffers=True)
    assert shapes["nodes.n_norm.running_mean"] == torch.Size([16])
    assert shapes["nodes.n_norm.num_batches_tracked"] == torch.Size([])
    assert "nodes.n_norm.running_mean" not in hf.param_shapes(model)
    assert hf.param_shapes(nn.Linear(3, 2)) == {"weight": torch.Size([2, 3]), "bias": torch.Size([2])}


def test_param_shapes_lists_a_tied_tensor_once():
    g = hndl.Graph("tied")
    h = g.add("linear", g.input("x", ("B", 8)), name="a", out_features=8)
    g.output(g.add("linear", h, name="b", out_features=8))
    model = hndl.build(g)
    model.nodes.n_b.weight = model.nodes.n_a.weight
    assert list(hf.param_shapes(model)) == ["nodes.n_a.weight", "nodes.n_a.bias", "nodes.n_b.bias"]


def test_a_hypernetwork_trains_end_to_end(mlp, x):
    torch.manual_seed(0)
    hyper = HyperNet(mlp)
    task = torch.randn(3)
    target = torch.randn(5, 4)
    optimizer = torch.optim.Adam(hyper.parameters(), lr=1e-2)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = (hf.functional_call(mlp, hyper(task), (x,), strict=True) - target).square().mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        assert hyper.head.weight.grad is not None
        assert hyper.head.weight.grad.abs().sum() > 0
    assert losses[-1] < losses[0]
    assert all(p.grad is None for p in mlp.parameters())  # the target's own weights took no part


def test_after_the_call_no_generated_weight_is_kept_alive(mlp, x):
    hyper = HyperNet(mlp)
    refs = []
    for _ in range(3):
        generated = hyper(torch.randn(3))
        hf.functional_call(mlp, generated, (x,)).sum().backward()
        refs += [weakref.ref(t) for t in generated.values()]
        del generated
    mlp(x)
    gc.collect()
    assert [r for r in refs if r() is not None] == []
    for name, param in mlp.named_parameters():  # the module holds its own weights again
        assert isinstance(param, nn.Parameter), name


def test_a_generated_weight_of_the_wrong_size_is_e_params(mlp, x):
    hyper = HyperNet(mlp)
    generated = hyper(torch.randn(3))
    generated["nodes.n_out.weight"] = generated["nodes.n_out.weight"][:, :15]
    with pytest.raises(hndl.HndlError) as info:
        hf.functional_call(mlp, generated, (x,))
    assert info.value.code == "E_PARAMS"
    assert info.value.node == "out"


def maml_outer_step(call, model, data, targets, steps: int = 3):
    """The MAML recipe of docs/func.md: ``steps`` inner grad steps on a copy of the weights, then the outer loss."""

    def inner_loss(p, data, targets):
        return torch.nn.functional.cross_entropy(call(model, p, (data,)), targets)

    meta = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}
    adapted = meta
    for _ in range(steps):
        grads = torch.func.grad(inner_loss)(adapted, data, targets)
        adapted = {k: adapted[k] - 0.1 * grads[k] for k in adapted}
    inner_loss(adapted, data * 2, targets).backward()
    return meta


def test_a_maml_inner_loop_through_the_checked_call_equals_torch_func(mlp, x):
    targets = torch.tensor([0, 1, 2, 3, 0])
    ours = maml_outer_step(hf.functional_call, mlp, x, targets)
    theirs = maml_outer_step(torch.func.functional_call, mlp, x, targets)
    for name in ours:
        assert ours[name].grad is not None, name
        assert torch.equal(ours[name].grad, theirs[name].grad), name


def test_a_maml_inner_update_that_breaks_a_shape_is_e_params(mlp, x):
    targets = torch.tensor([0, 1, 2, 3, 0])

    def inner_loss(p):
        return torch.nn.functional.cross_entropy(hf.functional_call(mlp, p, (x,)), targets)

    params = {k: v.detach() for k, v in mlp.named_parameters()}
    grads = torch.func.grad(inner_loss)(params)
    adapted = {k: params[k] - 0.1 * grads[k] for k in params}
    adapted["nodes.n_hidden.bias"] = adapted["nodes.n_hidden.bias"][:-1]  # a slicing slip in the update
    with pytest.raises(hndl.HndlError) as info:
        torch.func.grad(inner_loss)(adapted)
    problem = info.value.problems[0]
    assert (problem.code, problem.node, problem.expected, problem.actual) == ("E_PARAMS", "hidden", [16], [15])
