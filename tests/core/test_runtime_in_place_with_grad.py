"""While gradients are recorded, the fast path writes a ReLU or an add into an operand nobody else can see and
whose producer's backward keeps nothing of it, as torchvision's ``relu(inplace=True)`` and ``out += identity``
do in a training step (hndl/torch/_inline.py, ``in_place_steps``, mode ``with_grad``; SPEC 11.1). Values and
gradients are those of the out-of-place run, bit for bit; what a backward keeps, a hook's kept output and a
tensor someone else holds are never written."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import hndl
import hndl.zoo
from hndl.torch._in_place import in_place_steps
from hndl.torch._runtime import leaves


class _Writes(TorchDispatchMode):
    """Counts the in-place ReLUs and the in-place adds of two activations (not BatchNorm's step counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.count: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.relu_.default:
            self.count["relu_"] += 1
        elif func is torch.ops.aten.add_.Tensor and isinstance(args[1], torch.Tensor) and args[1].dim() > 0:
            self.count["add_"] += 1
        return func(*args, **(kwargs or {}))


def _written_with_grad(model: hndl.GraphModule) -> set[str]:
    steps = in_place_steps(model.plan, leaves(model), model._runtime.forms, model._runtime.hooked)
    return {model.plan.steps[i].node.qualname for i, step in steps.items() if step.with_grad}


def _resnet18() -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("resnet18", num_classes=10)).train()


def _gradients(model: nn.Module) -> dict[str, torch.Tensor]:
    found = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return found


def _built(spec: str) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.loads("hndl: 1\n" + spec))


def test_a_resnet_training_step_writes_its_relus_and_adds_in_place_with_the_same_values_and_gradients() -> None:
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    model(x)
    assert {"relu", "layer1.0.relu1", "layer1.0.add", "layer1.0.relu2"} <= _written_with_grad(model)
    with _Writes() as writes:
        out = model(x)
        out.sum().backward()
    ours = _gradients(model)
    assert writes.count == {"relu_": 17, "add_": 8}  # the stem's ReLU, two per basic block, one add per block
    expected = model._runtime.unchecked(model, x)  # every layer through __call__, out of place
    expected.sum().backward()
    assert torch.equal(out, expected)
    theirs = _gradients(model)
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[n], theirs[n]) for n in ours)


def test_an_output_its_producer_keeps_for_backward_is_not_written() -> None:
    # sigmoid's and ReLU's backward read their output: writing an add into it (or a second ReLU into the first's)
    # would make backward fail, or compute from the overwritten values.
    model = _built(
        "inputs: {x: {shape: [B, 4]}, y: {shape: [B, 4]}}\n"
        "nodes:\n  h: {op: linear, in: x, out_features: 4}\n  s: {op: sigmoid, in: h}\n  o: {op: add, in: [s, y]}\n"
        "  r1: {op: relu, in: h2}\n  h2: {op: linear, in: x, out_features: 4}\n  r2: {op: relu, in: r1}\n"
        "outputs: [o, r2]"
    )
    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)
    model(x, y)
    assert _written_with_grad(model) == {"r1"}  # made by a linear, which keeps its input only
    with _Writes() as writes:
        o, r2 = model(x, y)
        (o.sum() + r2.sum()).backward()
    assert writes.count == {"relu_": 1}
    ours = x.grad.clone()
    x.grad = None
    h, h2 = model.nodes.n_h(x), model.nodes.n_h2(x)
    (torch.sigmoid(h) + y).sum().add(torch.relu(torch.relu(h2)).sum()).backward()
    assert torch.equal(ours, x.grad)


def test_regression_hooks_keeping_every_layer_output_in_a_training_step_see_them_unchanged() -> None:
    # Feature extraction while training: a BatchNorm's kept output keeps its negative values (the next ReLU
    # would otherwise write into it, as the next add did under no_grad before issue 20's fix).
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    model(x).sum().backward()  # the fast path without hooks writes in place
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []
    handles = [
        m.register_forward_hook(lambda m, a, o: kept.append((o, o.detach().clone())))
        for _n, m in model.named_modules()
        if not list(m.children())
    ]
    try:
        model(x).sum().backward()
    finally:
        for h in handles:
            h.remove()
    assert any((c < 0).any() for _o, c in kept)
    assert all(torch.equal(o.detach(), c) for o, c in kept)


def test_nothing_is_written_under_a_torch_func_transform() -> None:
    model = _resnet18().eval()
    x = torch.randn(2, 3, 32, 32)
    model(x)
    with _Writes() as writes:
        out, vjp = torch.func.vjp(model, x)
        (grad_x,) = vjp(torch.ones_like(out))
    assert writes.count == {}
    x.requires_grad_(True)
    expected = model._runtime.unchecked(model, x)
    expected.sum().backward()
    assert torch.equal(out, expected.detach())
    assert torch.equal(grad_x, x.grad)


def test_a_frozen_model_run_with_gradients_on_writes_in_place_and_computes_the_same() -> None:
    # Nothing requires grad: the private values are leaves autograd has no record of, and may be written.
    model = _resnet18().eval().requires_grad_(False)
    x = torch.randn(2, 3, 32, 32)
    model(x)
    with _Writes() as writes:
        out = model(x)
    assert writes.count == {"relu_": 17, "add_": 8}
    assert torch.equal(out, model._runtime.unchecked(model, x))


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_torch_checkpoint_of_the_whole_model_gives_the_gradients_of_a_plain_step(use_reentrant: bool) -> None:
    # The recomputation writes in place again, from the same inputs: the same values as the first forward.
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32, requires_grad=True)
    model(x).sum().backward()
    _gradients(model)
    x.grad = None
    model(x).sum().backward()
    plain, plain_x = _gradients(model), x.grad.clone()
    x.grad = None
    torch.utils.checkpoint.checkpoint(model, x, use_reentrant=use_reentrant).sum().backward()
    ours = _gradients(model)
    assert torch.equal(x.grad, plain_x)
    assert all(torch.equal(ours[n], plain[n]) for n in plain)


def _relu_after_linear() -> hndl.GraphModule:
    return _built(
        "inputs: {x: {shape: [B, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4}, r: {op: relu, in: h}}\n"
        "outputs: [r]"
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda kept, out: kept.append(out) or out,  # the patched linear keeps its result
        lambda kept, out: out[:],  # returns a view
        lambda kept, out: out.detach().requires_grad_(True),  # a leaf that requires grad: autograd refuses the write
    ],
    ids=["kept result", "view", "leaf requiring grad"],
)
def test_regression_a_patched_linear_under_grad_makes_the_relu_run_out_of_place(
    monkeypatch: pytest.MonkeyPatch, make: Any
) -> None:
    model = _relu_after_linear()
    x = torch.randn(3, 4, requires_grad=True)
    model(x)
    assert _written_with_grad(model) == {"r"}
    original = torch.nn.functional.linear
    kept: list[torch.Tensor] = []

    def patched(*args: Any, **kwargs: Any) -> torch.Tensor:
        return make(kept, original(*args, **kwargs))

    monkeypatch.setattr(torch.nn.functional, "linear", patched)
    with _Writes() as writes:
        out = model(x)
    out.sum().backward()
    assert writes.count == {}
    expected = original(x, model.nodes.n_h.weight, model.nodes.n_h.bias)
    assert torch.equal(out, torch.relu(expected))
    if kept:
        assert torch.equal(kept[-1], expected)  # the kept linear output still has its negative values


def test_a_relu_after_a_linear_over_three_dims_runs_out_of_place_while_training() -> None:
    # The documented limit (SPEC 11.1): F.linear over [B, T, D] returns a view of its flattened result (``_base``
    # set), and a write into a view would rebase autograd's record of its base. The write is planned (on [B, D]
    # it happens: test_an_output_its_producer_keeps_for_backward_is_not_written), and the call's check refuses
    # it wherever this torch's F.linear returns a view.
    model = _built(
        "inputs: {x: {shape: [B, T, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4}, r: {op: relu, in: h}}\n"
        "outputs: [r]"
    )
    x = torch.randn(2, 3, 4, requires_grad=True)
    model(x)
    assert _written_with_grad(model) == {"r"}
    with _Writes() as writes:
        out = model(x)
    out.sum().backward()
    a_view = torch.nn.functional.linear(x, model.nodes.n_h.weight, model.nodes.n_h.bias)._base is not None
    assert writes.count == ({} if a_view else {"relu_": 1})
    assert torch.equal(out, torch.relu(model.nodes.n_h(x)))
