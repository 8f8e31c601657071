"""With no gradient recorded, the fast path writes an add into an input nobody else can see, as torchvision's
``out += identity`` does (hndl/torch/_inline.py, ``in_place_steps``; the writes while gradients are recorded:
test_runtime_in_place_with_grad.py). It
must never write into anything a user holds: a graph input or output, a parameter, a value another node reads,
or whatever a layer returned without making it new."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl.torch._in_place import in_place_steps
from hndl.torch._runtime import leaves


def built(spec: str) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.loads(spec)).eval()


def written_into(model: hndl.GraphModule, *, grad: bool = False) -> dict[str, int]:
    """Which steps may write into an input with no gradient recorded (``grad``: while one is), by node name ->
    the input's position."""
    steps = in_place_steps(model.plan, leaves(model), model._runtime.forms, model._runtime.hooked)
    return {
        model.plan.steps[i].node.qualname: step.operand
        for i, step in steps.items()
        if (step.with_grad if grad else step.without_grad)
    }


def test_a_resnet_writes_its_relus_and_residual_adds_in_place_and_computes_the_same():
    model = hndl.build(hndl.zoo.get("resnet18", num_classes=10)).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model._runtime.unchecked(model, x)  # every step out of place
        model(x)
        assert torch.equal(model(x), expected)
    assert "layer1.0.add" in written_into(model)
    assert "relu" not in written_into(model)  # no-grad ReLUs run out of place (slower in place there)
    assert "relu" in written_into(model, grad=True)  # with gradients they write into the BatchNorm's output
    assert model.code.count(".add_(") == 8  # one residual add per basic block
    out = model.train()(x)  # gradients on: every step out of place, and backward works
    out.sum().backward()
    assert model.nodes.n_conv1.weight.grad is not None


SHARED = """
hndl: 1
inputs: {x: {shape: [B, 4]}}
nodes:
  h: {op: linear, in: x, out_features: 4}
  r: {op: relu, in: h}
  o: {op: add, in: [h, r]}
outputs: [o]
"""


def test_a_value_two_nodes_read_is_not_written():
    model = built(SHARED)
    x = torch.randn(3, 4)
    h = model.nodes.n_h(x)
    with torch.no_grad():
        model(x)
        assert torch.equal(model(x), h + torch.relu(h))
    assert written_into(model) == {}


@pytest.mark.parametrize(
    "spec",
    [
        # a graph input
        "inputs: {x: {shape: [B, 4]}}\nnodes: {r: {op: relu, in: x}}\noutputs: [r]",
        # a graph output read by a later node
        "inputs: {x: {shape: [B, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4}, r: {op: relu, in: h}}\n"
        "outputs: [h, r]",
        # a parameter node's value is the registered tensor itself
        "inputs: {x: {shape: [B, 4]}}\nnodes: {p: {op: parameter, shape: [1, 4], init: normal}, r: {op: relu, in: p},"
        " o: {op: add, in: [r, x]}}\noutputs: [o]",
        # dropout in eval mode returns its input
        "inputs: {x: {shape: [B, 4]}}\nnodes: {d: {op: dropout, in: x, p: 0.5}, r: {op: relu, in: d}}\noutputs: [r]",
        # a view of a value
        "inputs: {x: {shape: [B, 2, 2]}}\nnodes: {f: {op: flatten, in: x, start_dim: 1}, r: {op: relu, in: f}}\n"
        "outputs: [r]",
    ],
    ids=["graph input", "graph output", "parameter", "dropout", "view"],
)
def test_nothing_a_user_holds_is_written(spec):
    model = built("hndl: 1\n" + spec)
    assert written_into(model) == {}
    (x,) = model.example_inputs(B=3)
    x = x.normal_()
    before = x.clone()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        first = model(x)
        second = model(x)
    assert torch.equal(x, before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    for a, b in zip(
        first if isinstance(first, tuple) else (first,), second if isinstance(second, tuple) else (second,)
    ):
        assert torch.equal(a, b)


def test_an_add_that_broadcasts_into_its_operand_runs_out_of_place():
    model = built(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {a: {op: linear, in: x, out_features: 1},"
        " b: {op: linear, in: x, out_features: 4}, o: {op: add, in: [a, b]}}\noutputs: [o]"
    )
    assert written_into(model) == {"o": 0}  # a is private, but [B, 1] cannot hold [B, 4]
    x = torch.randn(3, 4)
    with torch.no_grad():
        model(x)
        assert torch.equal(model(x), model.nodes.n_a(x) + model.nodes.n_b(x))


def test_a_producer_class_patched_to_return_its_input_stops_the_write(monkeypatch):
    model = built(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}, y: {shape: [B, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4},"
        " o: {op: add, in: [h, y]}}\noutputs: [o]"
    )
    assert written_into(model) == {"o": 0}
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    with torch.no_grad():
        model(x, y)
        monkeypatch.setattr(nn.Linear, "forward", lambda self, x: x)
        before = x.clone()
        assert torch.equal(model(x, y), before + y)
        assert torch.equal(x, before)  # the patched linear returned x itself; the add did not write into it


def test_a_relu_after_a_private_value_passes_privacy_on_to_an_add():
    # h -> r (relu) -> o = r + y: a ReLU's output is new (or h itself, were it in place), read by the add alone.
    model = built(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}, y: {shape: [B, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4},"
        " r: {op: relu, in: h}, o: {op: add, in: [r, y]}}\noutputs: [o]"
    )
    assert written_into(model) == {"o": 0}
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    with torch.no_grad():
        model(x, y)
        assert torch.equal(model(x, y), torch.relu(model.nodes.n_h(x)) + y)


# --- regressions: nothing anyone can observe is written (issue 20) ---------------------------------------------


class _CountInPlaceAdds(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.add_.Tensor:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _resnet18() -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("resnet18", num_classes=10)).eval()


def test_with_no_hook_the_residual_adds_really_run_in_place():
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        model(x)
        with _CountInPlaceAdds() as adds:
            model(x)
    assert adds.count == 8


def test_regression_a_forward_hook_keeping_a_layer_output_is_not_overwritten_by_the_next_add():
    # Feature extraction: hooks keep each leaf layer's output (no clone). Before the fix, the residual add wrote
    # into the kept output of every block's last BatchNorm (max difference 2.38 on resnet18).
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    kept: dict[str, torch.Tensor] = {}
    copies: dict[str, torch.Tensor] = {}

    def keep(name):
        def hook(module, args, output):
            kept[name] = output
            copies[name] = output.clone()

        return hook

    with torch.no_grad():
        model(x)  # the fast path without hooks: adds in place
        handles = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if not list(m.children())]
        model(x)
        model(x)
    for h in handles:
        h.remove()
    assert "nodes.n_layer1.n_0.n_bn2" in kept or any(k.endswith("n_bn2") for k in kept)
    assert all(torch.equal(kept[n], copies[n]) for n in kept)


def test_regression_a_global_forward_hook_keeping_outputs_sees_them_unchanged():
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []
    with torch.no_grad():
        model(x)
        handle = nn.modules.module.register_module_forward_hook(
            lambda m, a, o: kept.append((o, o.clone())) if isinstance(o, torch.Tensor) else None
        )
        try:
            model(x)
        finally:
            handle.remove()
    assert kept
    assert all(torch.equal(o, c) for o, c in kept)


def test_a_hooked_producer_does_not_make_a_private_value():
    model = _resnet18()
    x = torch.randn(2, 3, 32, 32)
    assert "layer1.0.add" in written_into(model)
    handle = model.nodes.n_layer1[0].n_bn2.register_forward_hook(lambda m, a, o: None)
    with torch.no_grad():
        model(x)  # the hook is a registered-state change: the call is generated again
    found = written_into(model)
    assert "layer1.0.add" not in found  # its other operand (the block's input) is read twice
    assert "layer1.1.add" in found  # blocks without a hook still write in place
    handle.remove()
    with torch.no_grad():
        model(x)
    assert "layer1.0.add" in written_into(model)


@pytest.mark.parametrize(
    "patched",
    [
        lambda inp, w, b=None: inp,  # returns the caller's tensor
        lambda inp, w, b=None: inp.view_as(inp),  # a view of it
        lambda inp, w, b=None: inp.detach(),  # another tensor on its memory
        lambda inp, w, b=None: w,  # a parameter
        lambda inp, w, b=None: w.detach(),  # a parameter's memory
    ],
    ids=["input", "view of input", "detached input", "weight", "detached weight"],
)
def test_regression_a_patched_functional_returning_a_tensor_someone_holds_is_not_written(monkeypatch, patched):
    model = built(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4},"
        " o: {op: add, in: [h, x]}}\noutputs: [o]"
    )
    assert written_into(model) == {"o": 0}
    x = torch.randn(4, 4)
    with torch.no_grad():
        model(x)
        before = x.clone()
        state = {k: v.clone() for k, v in model.state_dict().items()}
        monkeypatch.setattr(torch.nn.functional, "linear", patched)
        expected = patched(before, state["nodes.n_h.weight"]) + before
        assert torch.equal(model(x), expected)
    assert torch.equal(x, before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_regression_a_patched_functional_keeping_its_result_sees_it_unchanged(monkeypatch):
    model = built(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}, y: {shape: [B, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4},"
        " o: {op: add, in: [h, y]}}\noutputs: [o]"
    )
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    kept: list[torch.Tensor] = []
    original = torch.nn.functional.linear

    def keeping(*args, **kwargs):
        out = original(*args, **kwargs)
        kept.append(out)
        return out

    with torch.no_grad():
        model(x, y)
        monkeypatch.setattr(torch.nn.functional, "linear", keeping)
        model(x, y)
    assert torch.equal(kept[-1], original(x, model.nodes.n_h.weight, model.nodes.n_h.bias))


def test_the_sole_owner_check_answers_for_locals_views_and_held_tensors():
    from hndl.torch._in_place import sole_owner

    def fresh() -> bool:
        t = torch.randn(3)
        return sole_owner(t)

    def held(other: torch.Tensor) -> bool:
        t = other
        return sole_owner(t)

    def viewed() -> bool:
        base = torch.randn(3)
        t = base[:2]
        del base
        return sole_owner(t)

    assert fresh()
    assert not held(torch.randn(3))  # the caller's expression still holds it
    assert not viewed()  # the view's base is another tensor on the same memory


@pytest.mark.parametrize("layer", ["dropout", "drop_path", "hardswish"])
def test_a_layer_returning_a_new_tensor_or_its_input_passes_privacy_on(layer):
    # EfficientNet's and ConvNeXt's residual: conv -> bn -> drop_path (identity in eval) -> add, written in place
    # as torchvision's `result += input` is. The same for an inplace-capable activation.
    params = {"dropout": "p: 0.2", "drop_path": "p: 0.2", "hardswish": ""}[layer]
    model = built(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}, y: {shape: [B, 4]}}\nnodes: {h: {op: linear, in: x, out_features: 4},"
        f" d: {{op: {layer}, in: h{', ' + params if params else ''}}}, o: {{op: add, in: [d, y]}}}}\noutputs: [o]"
    )
    assert written_into(model) == {"o": 0}
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    expected = model._runtime.unchecked(model, x, y)
    with torch.no_grad():
        model(x, y)
        with _CountInPlaceAdds() as adds:
            assert torch.equal(model(x, y), expected)
    assert adds.count == 1
