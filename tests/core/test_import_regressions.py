"""Regressions of hndl.from_module that returned a wrong result without an error (issue 40): ranges torch.export
narrowed, constants folded at the trace's dtype or from trained state, and Monte Carlo dropout."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.nn import functional as F

import hndl
from hndl.importer import MIN_TORCH

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)


def built(graph: hndl.Graph, net: nn.Module) -> nn.Module:
    """The graph built from its spec alone (so what the contract keeps must round-trip), with ``net``'s weights."""
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    model = hndl.build(again)
    model.load_state_dict(graph.convert(net.state_dict()))
    return model.eval()


# --- 1. ranges the trace assumed ---------------------------------------------------------------------------------


class Branchy(nn.Module):
    """A branch on a size: torch.export keeps the branch the example takes and narrows the dim to it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 4:
            return x * 2
        return x + 1


@pytest.mark.parametrize(("how", "symbol"), [("min", "B"), ("AUTO", "x_dim0"), ("DYNAMIC", "x_dim0")])
def test_import_drops_what_torch_export_narrowed(how: str, symbol: str) -> None:
    # Dims made here, not at collection: torch 2.4's Dim has no AUTO or DYNAMIC (and this file skips there).
    dim = Dim("B", min=5) if how == "min" else getattr(Dim, how)
    net = Branchy().eval()
    graph = hndl.from_module(net, torch.randn(6, 3), dynamic_shapes=({0: dim},))
    assert graph.inputs["x"].contract.to_spec()["ranges"] == {symbol: {"min": 5}}
    model = built(graph, net)
    x = torch.randn(7, 3)
    assert torch.equal(model(x), net(x))  # inside the range: what the module computes
    with pytest.raises(hndl.HndlError) as err:
        model(torch.randn(2, 3))  # the module takes the other branch here
    problem = err.value.problems[0]
    assert problem.code == "E_INPUT"
    assert problem.node == "x"
    assert f"dim 0 ({symbol}=2)" in problem.message
    assert f"{symbol} >= 5" in problem.message


class Sliced(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] < 10:
            return x[:, :3] * 2
        return x + 1


def test_import_keeps_upper_bounds_and_the_bounds_slicing_needs() -> None:
    net = Sliced().eval()
    graph = hndl.from_module(net, torch.randn(6, 8), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO},))
    # x[:, :3] guards x_dim1 >= 3 and x_dim1 != 3 (torch's own program refuses 3): the run of sizes around the
    # traced 8 where both hold starts at 4
    assert graph.inputs["x"].contract.to_spec()["ranges"] == {"x_dim0": {"max": 9}, "x_dim1": {"min": 4}}
    model = built(graph, net)
    x = torch.randn(9, 5)
    assert torch.equal(model(x), net(x))
    for bad, words in (((10, 5), "x_dim0 <= 9"), ((4, 3), "x_dim1 >= 4")):
        with pytest.raises(hndl.HndlError) as err:
            model(torch.randn(*bad))
        assert err.value.problems[0].code == "E_INPUT"
        assert words in err.value.problems[0].message


class Specialised(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], 3, 4) if x.shape[0] == 6 else x


def test_import_keeps_a_dim_torch_specialised_to_a_constant() -> None:
    net = Specialised().eval()
    graph = hndl.from_module(net, torch.randn(6, 12), dynamic_shapes=({0: Dim.AUTO},))
    model = built(graph, net)
    with pytest.raises(hndl.HndlError) as err:
        model(torch.randn(5, 12))
    assert err.value.problems[0].code == "E_INPUT"
    assert "expected 6" in err.value.problems[0].message


class Ordered(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > y.shape[0]:
            return x[:2] * 2
        return x[:2] + 1


def test_import_refuses_an_order_between_two_dims_the_trace_assumed() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(Ordered(), torch.randn(6, 3), torch.randn(4, 3), dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO}))
    problem = err.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert "x_dim0 > y_dim0" in problem.message
    assert "cannot keep" in problem.message


def test_input_ranges_round_trip_and_refuse_bad_specs() -> None:
    g = hndl.Graph("g")
    g.output(g.add("relu", g.input("x", ("B", "T"), ranges={"B": {"min": 2, "max": 8}, "T": {"max": 4}})))
    again = hndl.loads(hndl.dumps(g))
    assert again.inputs["x"].contract == g.inputs["x"].contract
    model = hndl.build(again)
    assert model(torch.randn(8, 4)).shape == (8, 4)
    with pytest.raises(hndl.HndlError) as err:
        model(torch.randn(9, 4))
    assert "2 <= B <= 8" in str(err.value)
    for ranges, words in (
        ({"C": {"min": 1}}, "no symbol of the shape"),
        ({"B": {"min": 5, "max": 2}}, "empty"),
        ({"B": {"least": 1}}, "{min: N}"),
        ({"B": {"min": -1}}, "a size"),
    ):
        with pytest.raises(hndl.HndlError) as err:
            hndl.Graph("h").input("x", ("B", "T"), ranges=ranges)
        assert err.value.problems[0].code == "E_SPEC"
        assert words in err.value.problems[0].message
    text = "hndl: 1\nname: s\ninputs:\n  x: {shape: [B], ranges: {C: {min: 1}}}\nnodes: {}\noutputs: [x]\n"
    with pytest.raises(hndl.HndlError) as err:
        hndl.loads(text)
    assert err.value.problems[0].code == "E_SPEC"
    assert "no symbol of the shape" in str(err.value)


# --- 2. constants that depend on the dtype or on trained state --------------------------------------------------


def same_in_every_dtype(net: nn.Module, model: nn.Module, x: torch.Tensor, half: bool = True) -> None:
    """The imported ``model`` gives what ``net`` gives, dtype and values: float32, a float16 input, under
    autocast(bfloat16), and both converted with ``.double()``."""
    runs = [("float32", lambda m: m(x))]
    if half:
        runs.append(("float16 input", lambda m: m(x.half())))
    with torch.no_grad():
        for what, run in runs:
            ours, theirs = run(model), run(net)
            assert ours.dtype == theirs.dtype, what
            assert torch.equal(ours, theirs), what
        with torch.autocast("cpu", dtype=torch.bfloat16):
            ours, theirs = model(x), net(x)
        assert ours.dtype == theirs.dtype, "autocast"
        assert torch.equal(ours, theirs), "autocast"
        ours, theirs = model.double()(x.double()), net.double()(x.double())
        assert ours.dtype == theirs.dtype == torch.float64
        assert torch.equal(ours, theirs), ".double()"


def casts(graph: hndl.Graph) -> list[str]:
    return [n.op for n in graph.nodes.values() if n.op in ("buffer", "type_as")]


class FilledLike(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ x.transpose(1, 2)  # bfloat16 under autocast
        return h + h.new_full((3,), 0.1)


def test_a_constant_of_an_activations_dtype_is_not_folded_at_float32() -> None:
    # Folded at float32 it stayed float32: a float16 input gave a float32 output, autocast and .double() other values.
    net = FilledLike()
    x = torch.randn(2, 3, 4)
    graph = hndl.from_module(net, x)
    assert casts(graph) == ["buffer", "type_as"]
    same_in_every_dtype(net, built(graph, net), x)


class Positions(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ x.transpose(1, 2)
        return h + torch.arange(h.shape[-1], dtype=h.dtype)


def test_arange_in_an_activations_dtype_was_folded_at_float32() -> None:
    net = Positions()
    x = torch.randn(2, 3, 4)
    graph = hndl.from_module(net, x)
    buffer, cast = (n for n in graph.nodes.values() if n.op in ("buffer", "type_as"))
    assert buffer.params["values"] == [0.0, 1.0, 2.0]
    assert cast.inputs == [buffer.name, "matmul"]  # cast to the dtype of h, which it meets
    same_in_every_dtype(net, built(graph, net), x)


class Scalars(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x @ x.transpose(1, 2)  # bfloat16 under autocast, while x and the constants made from it stay float32
        return h * torch.tensor(0.1, dtype=x.dtype) + x.new_tensor([1.0, 2.5, -3.0])


def test_torch_tensor_in_an_inputs_dtype_was_folded_at_float32() -> None:
    net = Scalars()
    x = torch.randn(2, 3, 4)
    graph = hndl.from_module(net, x)
    assert casts(graph) == ["buffer", "type_as", "buffer", "type_as"]
    # 0.1 is kept at float64: float32's 0.1 made float64 is not .double()'s 0.1.
    assert next(n for n in graph.nodes.values() if n.op == "buffer").params["dtype"] == "float64"
    # Under autocast the constants take x's float32 (x or its transpose), not the bfloat16 of h, which they meet.
    assert [n.inputs[1] for n in graph.nodes.values() if n.op == "type_as"] == ["transpose", "transpose"]
    same_in_every_dtype(net, built(graph, net), x)


class Rotary(nn.Module):
    """LLaMA's rotary tables: computed in float32 from a buffer, then ``.to(x.dtype)``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("freq", torch.arange(4.0) / 3, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cos = (self.freq.float() * 2).cos()
        return self.lin(x) * cos.to(x.dtype)


def test_a_constant_cast_to_an_inputs_dtype_was_folded_at_float32() -> None:
    net = Rotary().eval()
    x = torch.randn(2, 4)
    graph = hndl.from_module(net, x)
    assert casts(graph) == ["buffer", "type_as"]
    # The linear's weights are float32: a float16 input is an error in both (hndl's says so before running).
    same_in_every_dtype(net, built(graph, net), x, half=False)


class Explicit(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + torch.arange(4, dtype=torch.float32)


def test_a_constant_of_a_fixed_dtype_still_folds_without_a_cast() -> None:
    graph = hndl.from_module(Explicit(), torch.randn(2, 4))
    assert [n.op for n in graph.nodes.values()] == ["scale", "buffer", "add"]


class Lowest(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.full((4,), torch.finfo(x.dtype).min, dtype=x.dtype)


class Returned(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x * 2, torch.ones(3, dtype=x.dtype)


@pytest.mark.parametrize(
    ("net", "words"),
    [
        (Lowest(), ["torch.finfo(x.dtype).min", "depends on the activations' dtype", "-3.4028235e+38"]),
        (Returned(), ["returns a constant whose dtype follows the activations'", "torch.ones(3, dtype=x.dtype)"]),
    ],
    ids=["value of the dtype", "returned"],
)
def test_a_constant_of_an_activations_dtype_that_a_cast_cannot_give_is_refused(
    net: nn.Module, words: list[str]
) -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(net, torch.randn(2, 4))
    problem = err.value.problems[0]
    assert problem.code == "E_IMPORT"
    for word in words:
        assert word in str(err.value)


class Buffered(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("scale", torch.ones(3))
        self.register_buffer("offset", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale + self.offset[:3] * 2


def test_convert_carries_a_trained_buffer_read_as_data() -> None:
    net = Buffered().eval()
    graph = hndl.from_module(net, torch.randn(2, 3))
    assert graph.renames["scale"] == "nodes.n_scale.value"
    trained = Buffered().eval()
    trained.scale.uniform_(2.0, 3.0)  # a trained value, unlike the one at import
    model = built(graph, trained)
    x = torch.randn(2, 3)
    assert torch.equal(model(x), trained(x))
    for dtype in (torch.float64, torch.float16):  # a buffer node follows .to() as the module's buffer does
        assert model.to(dtype)(x.to(dtype)).dtype == trained.to(dtype)(x.to(dtype)).dtype == dtype
        model.float()
        trained.float()


def test_convert_refuses_a_trained_buffer_a_folded_constant_was_computed_from() -> None:
    net = Buffered().eval()
    graph = hndl.from_module(net, torch.randn(2, 3))
    assert list(graph.folded) == ["offset"]
    trained = Buffered().eval()
    trained.offset.fill_(1.0)
    for strict in (True, False):
        with pytest.raises(hndl.HndlError) as err:
            graph.convert(trained.state_dict(), strict=strict)
        problem = err.value.problems[0]
        assert problem.code == "E_PARAMS"
        assert "'offset'" in problem.message
        assert "import it again" in problem.hint
    graph.convert(net.state_dict())  # the value it was folded with converts


# --- 3. Monte Carlo dropout ---------------------------------------------------------------------------------------


class MonteCarlo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.lin(x), 0.5, training=True)


def test_mc_dropout_imports_as_plain_dropout() -> None:
    net = MonteCarlo().eval()
    graph = hndl.from_module(net, torch.randn(4, 16))
    assert [(n.op, n.params.get("always")) for n in graph.nodes.values()] == [("linear", None), ("dropout", True)]
    model = built(graph, net)
    x = torch.randn(4, 16)
    torch.manual_seed(3)
    ours = model(x)
    torch.manual_seed(3)
    theirs = net(x)
    assert torch.equal(ours, theirs)  # the same zeros, the same 1/(1-p) scale, in eval mode
    assert bool((ours == 0).any())


def test_dropout_the_module_turns_off_in_eval_stays_plain() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5)).eval()
    graph = hndl.from_module(net, torch.randn(2, 4))
    dropout = next(n for n in graph.nodes.values() if n.op == "dropout")
    assert "always" not in dropout.params
    model = built(graph, net)
    x = torch.randn(2, 4)
    assert torch.equal(model(x), net(x))
