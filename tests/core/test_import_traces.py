"""How many times ``hndl.from_module`` traces a module (issue 37: each torch.export trace costs seconds).

The import traces once, and again only where the first trace cannot answer a question: with float64 inputs and
parameters where a folded constant or a conversion may take its dtype from the activations', and in training mode
where a layer reading ``self.training`` runs other operations then. Each test counts the traces and holds the
graph to the one the import makes when it runs every re-trace (the skipped ones cannot change the result).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import import_models as M
import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.nn import functional as F

import hndl
from hndl.importer import MIN_TORCH, ModeWarning

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)


@contextmanager
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The ``torch.export.export`` calls made meanwhile, each by the class of the module it traced."""
    calls: list[str] = []
    real = torch.export.export

    def export(module: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(type(module).__name__)
        return real(module, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch.export, "export", export)
        yield calls


def every_retrace(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the import run the re-traces it ran before it skipped any: the float64 twin whenever a floating value
    folds or a floating conversion or fill does not, and the training-mode trace whenever a layer traced through
    reads ``self.training``."""
    import hndl.importer._cast_follow as cast
    import hndl.importer._dtype_follow as follow
    import hndl.importer._trace as trace

    def floating_conversion_or_fill(n: Any) -> bool:
        value = n.meta.get("val")
        targets = cast.CONVERSIONS | cast.FILLS
        return n.op == "call_function" and str(n.target) in targets and getattr(value, "is_floating_point", bool)()

    def floating_folds(folding: Any, *_: Any) -> bool:
        values = map(folding.values.get, folding.frontier)
        return any(isinstance(v, torch.Tensor) and v.is_floating_point() for v in values)

    monkeypatch.setattr(follow, "may_follow", floating_folds)
    monkeypatch.setattr(cast, "_may_follow", floating_conversion_or_fill)
    monkeypatch.setattr(trace, "same_in_training", lambda *_: False)


def import_both_ways(
    monkeypatch: pytest.MonkeyPatch, net: nn.Module, *args: torch.Tensor, dynamic_shapes: Any = None
) -> tuple[hndl.importer.ImportedGraph, list[str], list[str]]:
    """The graph, the traces it took, and the traces with every re-trace run; the graphs must be the same."""
    with counted(monkeypatch) as fast:
        graph = hndl.from_module(net, *args, dynamic_shapes=dynamic_shapes)
    with monkeypatch.context() as patch:
        every_retrace(patch)
        with counted(patch) as slow:
            again = hndl.from_module(net, *args, dynamic_shapes=dynamic_shapes)
    assert hndl.dumps(graph) == hndl.dumps(again)
    assert graph.notes == again.notes
    return graph, fast, slow


def test_a_resnet_whose_folded_values_are_its_batchnorm_buffers_was_traced_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The running statistics fold (buffers read as they are), and a buffer keeps its dtype in the float64 twin:
    # that trace could only say so again.
    net = M.SmallResNet().eval()
    graph, fast, slow = import_both_ways(monkeypatch, net, torch.randn(2, 3, 16, 16), dynamic_shapes=({0: Dim("B")},))
    assert fast == ["SmallResNet"]
    assert slow == ["SmallResNet", "SmallResNet"]
    assert any(n.op == "batchnorm2d" for n in graph.nodes.values())


class Attention(nn.Module):
    """Reads ``self.training`` as transformers' attention layers do: a dropout probability for training only."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x).unflatten(-1, (3, 2, 4)).permute(2, 0, 3, 1, 4)
        p = 0.0 if not self.training else self.dropout
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p).transpose(1, 2).flatten(2)


def test_an_attention_without_dropout_was_traced_again_in_training_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    # dropout_p is 0.0 in both modes: the same operations, so the training-mode trace is skipped.
    net = Attention(0.0).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ModeWarning)
        graph, fast, slow = import_both_ways(monkeypatch, net, torch.randn(2, 5, 8))
    assert fast == ["Attention"]
    assert slow == ["Attention", "Attention"]
    assert graph.notes == []


def test_an_attention_with_dropout_is_still_traced_in_training_mode_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    net = Attention(0.25).eval()
    with counted(monkeypatch) as calls, pytest.warns(ModeWarning, match=r"Attention \(<root>\) computes something"):
        graph = hndl.from_module(net, torch.randn(2, 5, 8))
    assert calls == ["Attention", "Attention"]
    assert graph.notes == ["Attention (<root>) computes something else in training mode; the graph is its eval mode"]


class ValueBranch(nn.Module):
    """In training mode, branches on a tensor's values: a dry run on fake tensors cannot tell, the trace must."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if self.training and bool(y.sum() > 0):
            return y * 2
        return y


def test_a_training_branch_the_dry_run_cannot_follow_is_left_to_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    net = ValueBranch().eval()
    with counted(monkeypatch) as calls, pytest.warns(ModeWarning, match="ValueBranch"):
        hndl.from_module(net, torch.randn(2, 4))
    assert calls == ["ValueBranch", "ValueBranch"]


class Rotary(nn.Module):
    """A folded table cast to the input's dtype: only the float64 twin tells ``.to(x.dtype)`` from ``.float()``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("freq", torch.arange(4.0) / 3, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.freq.cos().to(x.dtype)


class Scaled(nn.Module):
    """A constant made in the forward at the input's dtype: a lifted constant of the trace."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * torch.tensor(0.5, dtype=x.dtype)


@pytest.mark.parametrize("net", [Rotary(), Scaled()], ids=["cast", "constant"])
def test_a_constant_that_may_take_the_activations_dtype_is_still_traced_in_float64(
    monkeypatch: pytest.MonkeyPatch, net: nn.Module
) -> None:
    graph, fast, slow = import_both_ways(monkeypatch, net.eval(), torch.randn(2, 4))
    assert fast == slow  # the trace, its float64 twin, and one under autocast that tells which activation's dtype
    assert [n.op for n in graph.nodes.values() if n.op in ("buffer", "type_as")] == ["buffer", "type_as"]


class DefaultZeros(nn.Module):
    """A fill at torch's default dtype, sized by a dynamic dim (so it does not fold)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.zeros(x.shape[0], 4)


def test_a_fill_given_no_dtype_was_traced_again_in_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    net = DefaultZeros()
    graph, fast, slow = import_both_ways(monkeypatch, net, torch.randn(3, 4), dynamic_shapes=({0: Dim("B")},))
    assert fast == ["DefaultZeros"]
    assert slow == ["DefaultZeros", "DefaultZeros"]
    assert "new_zeros" in [n.op for n in graph.nodes.values()]


class Counting(nn.Module):
    """In training mode, counts its calls in a buffer, in place, and keeps its last output."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        if self.training:
            self.calls.add_(1)
            self.last = y
        return y


@pytest.mark.filterwarnings("ignore:The tensor attribute self.last was assigned during export")  # torch's own
def test_a_training_mode_run_left_fake_tensors_and_counts_on_the_module() -> None:
    # A dry run on fake tensors beside the module's real buffers wrote its in-place count into the real one, and
    # torch.export's trace in training mode left `last` on the module as a fake tensor.
    net = Counting().eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    with pytest.warns(ModeWarning, match="Counting"):
        hndl.from_module(net, torch.randn(2, 4))
    assert all(torch.equal(v, before[k]) for k, v in net.state_dict().items())
    assert not hasattr(net, "last")
    assert isinstance(net.fc.weight, nn.Parameter)
    assert not isinstance(net.calls, torch._subclasses.FakeTensor)
