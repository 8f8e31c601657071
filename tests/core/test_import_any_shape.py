"""Regressions of hndl.from_module at symbolic sizes and other dtypes (issue 37): reshapes to two symbolic sizes,
slices to a traced length, ``torch.min`` of two tensors, and conversions and fills whose dtype follows an
activation's at run time (the trace shows one dtype only)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim

import hndl
from hndl.importer import MIN_TORCH

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)


def built(graph: hndl.Graph, net: nn.Module) -> nn.Module:
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    model = hndl.build(again)
    model.load_state_dict(graph.convert(net.state_dict()))
    return model.eval()


def ops(graph: hndl.Graph) -> list[str]:
    return [n.op for n in graph.nodes.values()]


# --- shapes ------------------------------------------------------------------------------------------------------


class Unsqueezed(nn.Module):
    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return scores[None, None] * 2  # [T, T] -> [1, 1, T, T]: the causal mask's [None, None]


def test_reshape_of_a_square_symbolic_tensor_was_two_symbolic_sizes() -> None:
    net = Unsqueezed().eval()
    t = Dim("T")
    graph = hndl.from_module(net, torch.randn(6, 6), dynamic_shapes=({0: t, 1: t},))
    assert "module" not in ops(graph)
    assert [n.params["shape"][-2:] for n in graph.nodes.values() if n.op == "reshape"][-1] == ["T", "T"]
    model = built(graph, net)
    x = torch.randn(9, 9)
    assert torch.equal(model(x), net(x))


class FlatLinear(nn.Module):
    """transformers' Conv1D: a matmul on the rows flattened, viewed back to ``[B, T, out]``."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 12))
        self.bias = nn.Parameter(torch.randn(12))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = (*x.size()[:-1], 12)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(out)


def test_view_back_to_batch_and_length_was_two_symbolic_sizes() -> None:
    net = FlatLinear().eval()
    graph = hndl.from_module(net, torch.randn(2, 5, 8), dynamic_shapes=({0: Dim("B"), 1: Dim("T")},))
    assert "module" not in ops(graph)
    model = built(graph, net)
    for shape in ((3, 7, 8), (4, 2, 8)):
        x = torch.randn(*shape)
        assert torch.equal(model(x), net(x))


class Positions(nn.Module):
    """BERT's and CLIP's position ids: a buffer cut to the call's length."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("position_ids", torch.arange(16).expand(1, -1), persistent=False)
        self.table = nn.Embedding(16, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table(self.position_ids[:, : ids.shape[1]]) + ids[..., None]


def test_slice_of_a_buffer_to_a_traced_length_was_a_raw_type_error() -> None:
    net = Positions().eval()
    dims = {0: Dim("B"), 1: Dim("T", max=16)}
    graph = hndl.from_module(net, torch.randint(0, 9, (2, 5)), dynamic_shapes=(dims,))
    assert {"arange", "index"} <= set(ops(graph))
    model = built(graph, net)
    for shape in ((3, 16), (1, 2)):
        ids = torch.randint(0, 9, shape)
        assert torch.equal(model(ids), net(ids))


class Buckets(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.min(x, torch.full_like(x, 0.5)) + torch.max(x, x * 0.5)  # T5's relative position buckets


def test_torch_min_of_two_tensors_had_no_row() -> None:
    net = Buckets().eval()
    graph = hndl.from_module(net, torch.randn(3, 4), dynamic_shapes=({0: Dim("B")},))
    assert {"minimum", "maximum"} <= set(ops(graph))
    assert "module" not in ops(graph)
    model = built(graph, net)
    x = torch.randn(5, 4)
    assert torch.equal(model(x), net(x))


# --- dtypes ------------------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """LLaMA's: computed in float32 whatever the activations' dtype, then converted back to it."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8))
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        dtype = h.dtype
        wide = h.to(torch.float32)
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-6)
        return h + self.weight * normed.to(dtype)  # h: the value before the no-op conversion


def test_conversion_to_another_activations_dtype_was_no_node_under_double() -> None:
    net = RMSNorm().eval()
    graph = hndl.from_module(net, torch.randn(2, 5, 8), dynamic_shapes=({0: Dim("B")},))
    assert "cast" in ops(graph)
    assert "type_as" in ops(graph)
    model = built(graph, net).double()
    net = net.double()
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    got, want = model(x), net(x)
    assert got.dtype == want.dtype == torch.float64
    assert torch.equal(got, want)


class Zeros(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], x.shape[1], dtype=x.dtype) + x.sum(-1)


class OnesFixed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.new_ones(x.shape[0], 4, dtype=torch.float32)


def test_zeros_in_an_activations_dtype_kept_the_traced_dtype() -> None:
    net = Zeros().eval()
    graph = hndl.from_module(net, torch.randn(2, 5, 3), dynamic_shapes=({0: Dim("B"), 1: Dim("T")},))
    model = built(graph, net).double()
    x = torch.randn(4, 6, 3, dtype=torch.float64)
    assert model(x).dtype == net(x).dtype == torch.float64
    assert torch.equal(model(x), net(x))
    # an explicit dtype stays that dtype under .double()
    fixed = OnesFixed().eval()
    graph = hndl.from_module(fixed, torch.randn(2, 5), dynamic_shapes=({0: Dim("B")},))
    assert built(graph, fixed).double()(torch.randn(3, 5, dtype=torch.float64)).dtype == torch.float32


class FinfoFill(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.full((x.shape[0], x.shape[1]), torch.finfo(x.dtype).min, dtype=x.dtype)


def test_fill_with_a_dtype_dependent_value_is_an_import_error() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(FinfoFill().eval(), torch.randn(2, 5), dynamic_shapes=({0: Dim("B"), 1: Dim("T")},))
    problem = err.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert "depends on the activations' dtype" in str(err.value)
    assert "finfo" in str(err.value)  # the source line


# --- the reshape op's symbols --------------------------------------------------------------------------------------


def test_reshape_symbol_no_input_has_is_a_param_error() -> None:
    g = hndl.Graph("t")
    x = g.input("x", ["B", 12])
    g.output(g.add("reshape", x, shape=["B", "T", 3]))
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(g)
    problem = err.value.problems[0]
    assert problem.code == "E_PARAM"
    assert "'T' is not a dim of" in problem.message


def test_reshape_reads_symbols_from_like_on_every_call() -> None:
    g = hndl.Graph("t")
    x = g.input("x", ["B", "T", 8])
    flat = g.add("flatten", x, start_dim=0, end_dim=1)
    g.output(g.add("reshape", flat, x, shape=["B", "T", 2, 4]))
    model = hndl.build(g)
    for shape in ((3, 5, 8), (2, 7, 8)):
        a = torch.randn(*shape)
        assert torch.equal(model(a), a.reshape(shape[0], shape[1], 2, 4))
