"""With no gradient recorded, the fast path writes an add into an input nobody else can see, as torchvision's
``out += identity`` does (hndl/torch/_inline.py, ``in_place_steps``). It
must never write into anything a user holds: a graph input or output, a parameter, a value another node reads,
or whatever a layer returned without making it new."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl.torch._inline import in_place_steps


def built(spec: str) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.loads(spec)).eval()


def written_into(model: hndl.GraphModule) -> dict[str, int]:
    """Which steps may write into an input, by node name -> the input's position."""
    steps = in_place_steps(model.plan, model._leaves(), model._runtime.forms)
    return {model.plan.steps[i].node.qualname: step.operand for i, step in steps.items()}


def test_a_resnet_writes_its_relus_and_residual_adds_in_place_and_computes_the_same():
    model = hndl.build(hndl.zoo.get("resnet18", num_classes=10)).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = model._runtime.unchecked(model, x)  # every step out of place
        model(x)
        assert torch.equal(model(x), expected)
    assert "layer1.0.add" in written_into(model)
    assert "relu" not in written_into(model)  # ReLUs run out of place (slower in place on small activations)
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
