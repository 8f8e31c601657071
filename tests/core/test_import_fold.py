"""hndl.from_module: constants folded at import (and ``type_as``, which casts one to an activation's dtype),
``scaled_dot_product_attention`` with torch's masks, and ``addmm`` (transformers' Conv1D) as ``linear_in_out``. Hand-written modules; transformers' GPT-2, BERT and
LLaMA, which need all three, are in tests/zoo/test_import_zoo.py."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim
from torch.nn import functional as F

import hndl
from hndl._dims import format_dim
from hndl.importer import MIN_TORCH

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)


def imported(net: nn.Module, *args: torch.Tensor, dynamic_shapes: Any = None) -> tuple[Any, Any]:
    net.eval()
    graph = hndl.from_module(net, *args, dynamic_shapes=dynamic_shapes)
    assert graph.fallbacks == []
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    model = hndl.build(again)  # from the spec alone: a folded constant is in it, not in the weights
    model.load_state_dict(graph.convert(net.state_dict()))
    return graph, model.eval()


def ops(graph: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(n.op, dict(n.params)) for n in graph.nodes.values()]


# --- sdpa with a mask -----------------------------------------------------------------------------------------


class Attend(nn.Module):
    """``sdpa(q, k, v, attn_mask=mask(x))`` with ``q, k, v`` ``[B, 2, T, 4]`` from ``x``."""

    def __init__(self, mask: Any) -> None:
        super().__init__()
        self.mask = mask

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, k, attn_mask=self.mask(q, k))


MASKS = {
    # torch broadcasts from the right: a rank-2 mask is [T, S] (hndl's sdpa would read [B, S]).
    "bool [T, S]": lambda q, k: (q[0, 0] @ k[0, 0].transpose(0, 1)) > 0,
    "float [T, S]": lambda q, k: (q[0, 0] @ k[0, 0].transpose(0, 1)).clamp(max=0),
    "bool [B, 1, T, S]": lambda q, k: (q[:, :1] @ k[:, :1].transpose(2, 3)) > 0,
    "float [B, H, T, S]": lambda q, k: (q @ k.transpose(2, 3)).clamp(max=0),
}


@pytest.mark.parametrize("name", sorted(MASKS))
def test_sdpa_reads_a_mask_as_torch_broadcasts_it(name: str) -> None:
    net = Attend(MASKS[name])
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(3, 2, 5, 4, generator=gen), torch.randn(3, 2, 6, 4, generator=gen)
    graph, model = imported(net, q, k)
    (sdpa,) = [n for n in graph.nodes.values() if n.op == "sdpa"]
    assert sdpa.params.get("masked") is True
    mask_node = graph.nodes[sdpa.inputs[3].split(".")[0]]
    if "[T, S]" in name:  # a reshape puts torch's 1s in front
        assert (mask_node.op, list(mask_node.params["shape"][:2])) == ("reshape", [1, 1])
    with torch.no_grad():
        assert torch.equal(model(q, k), net(q, k))


def test_sdpa_mask_with_a_dynamic_batch() -> None:
    net = Attend(MASKS["bool [T, S]"])
    q, k = torch.randn(3, 2, 5, 4), torch.randn(3, 2, 6, 4)
    _graph, model = imported(net, q, k, dynamic_shapes=({0: Dim("B")}, {0: Dim("B")}))
    q, k = torch.randn(7, 2, 5, 4), torch.randn(7, 2, 6, 4)
    with torch.no_grad():
        assert torch.equal(model(q, k), net(q, k))


def test_sdpa_with_a_rank_3_mask_says_what_it_waits_on() -> None:
    # torch reads [H, T, S] (hndl's sdpa: [B, T, S]), and computes it an ulp away from its [1, H, T, S] form.
    net = Attend(lambda q, k: (q[0] @ k[0].transpose(1, 2)) > 0)
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(net, torch.randn(3, 2, 5, 4), torch.randn(3, 2, 6, 4))
    assert "a rank-3 attn_mask ([H, T, S] to torch, [B, T, S] to hndl's sdpa)" in str(err.value)


# --- constants folded at import -------------------------------------------------------------------------------


class CausalScores(nn.Module):
    """A causal mask built from ``arange`` over the sequence length, as transformers' masking utilities do."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        positions = torch.arange(t)
        mask = positions[None, :] <= positions[:, None]
        mask = mask.cumsum(-1).diff(dim=-1, prepend=mask.new_zeros(t, 1)) > 0  # cumsum, diff: fold too
        scores = x @ x.transpose(1, 2)
        return torch.where(mask, scores, -1e4)


def test_a_mask_of_a_fixed_length_folds_into_a_buffer() -> None:
    net = CausalScores()
    x = torch.randn(2, 4, 3)
    graph, model = imported(net, x, dynamic_shapes=({0: Dim("B")},))
    buffers = [p for op, p in ops(graph) if op == "buffer"]
    assert len(buffers) == 1
    assert buffers[0]["init"] == "values"
    assert buffers[0]["dtype"] == "bool"
    assert buffers[0]["persistent"] is False
    assert list(buffers[0]["values"]) == list(int(v) for v in torch.ones(4, 4, dtype=torch.bool).tril().reshape(-1))
    assert not [n for n in model.state_dict() if "buffer" in n]  # non-persistent: nothing in the weights
    x = torch.randn(5, 4, 3)
    with torch.no_grad():
        assert torch.equal(model(x), net(x))


def test_a_mask_over_a_dynamic_length_does_not_fold() -> None:
    # arange(T) of a T that dynamic_shapes leaves free differs from call to call: it is not a constant, and it
    # imports as the ops that compute it on every call (issue 37), so the graph keeps T symbolic.
    net = CausalScores()
    graph, model = imported(net, torch.randn(2, 4, 3), dynamic_shapes=({0: Dim("B"), 1: Dim("T")},))
    used = [op for op, _ in ops(graph)]
    assert "buffer" not in used
    assert {"arange", "cumsum", "diff", "new_zeros"} <= set(used)
    for shape in ((3, 7, 3), (1, 2, 3)):
        x = torch.randn(*shape)
        with torch.no_grad():
            assert torch.equal(model(x), net(x))


class Ids(nn.Module):
    """BERT's ids: registered buffers read as data, sliced, expanded and gathered."""

    def __init__(self, persistent: bool) -> None:
        super().__init__()
        self.register_buffer("position_ids", torch.arange(16).expand(1, -1), persistent=persistent)
        self.register_buffer("token_type_ids", torch.zeros(1, 16, dtype=torch.long), persistent=persistent)
        self.register_buffer("table", torch.randn(16, 3), persistent=persistent)
        self.emb = nn.Embedding(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.shape[1]
        positions = self.position_ids[:, :t]
        types = torch.gather(self.token_type_ids.expand(x.shape[0], -1), 1, positions.expand(x.shape[0], -1))
        return self.emb(x) + self.emb(positions) + self.emb(types) + self.table[:t]


@pytest.mark.parametrize("persistent", [False, True])
def test_buffers_read_as_data_fold_with_their_values(persistent: bool) -> None:
    net = Ids(persistent)
    x = torch.randint(0, 16, (2, 5))
    graph, model = imported(net, x)
    buffers = [p for op, p in ops(graph) if op == "buffer"]
    assert sorted(p.get("init", "zeros") for p in buffers) == ["arange", "values", "zeros"]
    table = next(p for p in buffers if p.get("init") == "values")
    assert (table["dtype"], list(table["shape"])) == ("float32", [5, 3])
    if persistent:  # the folded buffers' keys convert to nothing: the graph does not read them
        assert graph.renames["position_ids"] is None
    with torch.no_grad():
        assert torch.equal(model(x), net(x))


class Noise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand(x.shape[-1])


def test_random_numbers_never_fold() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(Noise(), torch.randn(2, 3))
    assert "hndl has no op for aten.rand" in str(err.value)


class WrittenLater(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = torch.ones(x.shape[-1])
        m.mul_(x.sum())
        return x + m


def test_a_tensor_written_in_place_does_not_fold() -> None:
    # m is a constant until mul_ writes the input's sum into it: folding it would read the value before the write.
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(WrittenLater(), torch.randn(2, 3))
    assert "aten.ones.default: a tensor of a fixed size that did not fold at import" in str(err.value)


class ShiftMask(nn.Module):
    """torchvision Swin's shifted-window mask: ``new_zeros`` of the input's H, W, filled region by region through
    slices in place (``fill_``), then ``masked_fill``; ``copy_`` and ``index_put_`` write it too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.new_zeros((x.shape[-2], x.shape[-1]))
        regions = ((0, -2), (-2, -1), (-1, None))
        count = 0
        for h in regions:
            for w in regions:
                m[h[0] : h[1], w[0] : w[1]] = count
                count += 1
        m[0].copy_(torch.arange(m.shape[1]))
        m[torch.tensor([1, 2]), torch.tensor([0, 3])] = 7.0
        d = m.reshape(-1).unsqueeze(1) - m.reshape(-1).unsqueeze(0)
        d = d.masked_fill(d != 0, -100.0).masked_fill(d == 0, 0.0)
        return x.flatten(-2).unsqueeze(-1) + d


def test_a_mask_filled_by_slices_in_place_was_refused_by_folding() -> None:
    # Folding refused every tensor written in place, so Swin's mask (issue 37) raised E_IMPORT for fill_. A tensor
    # made inside the folded region and written there by values that fold is a constant too: one buffer.
    net = ShiftMask()
    graph, model = imported(net, torch.randn(2, 3, 4, 4), dynamic_shapes=({0: Dim("B")},))
    used = [op for op, _ in ops(graph)]
    assert used.count("buffer") == 1
    assert not {"fill", "masked_fill", "index_put"} & set(used)
    for batch in (1, 5):
        x = torch.randn(batch, 3, 4, 4)
        with torch.no_grad():
            assert torch.equal(model(x), net(x))
    x = torch.randn(3, 3, 4, 4, dtype=torch.float64)  # new_zeros follows x's dtype: so does the buffer
    with torch.no_grad():
        assert torch.equal(model.double()(x), net(x))


def test_a_copy_into_a_mask_at_dynamic_sizes_says_why_it_does_not_fold() -> None:
    # At symbolic H, W the mask differs from call to call: no constant of one size stands for it. Its fills of a
    # number through slices are written out of place (fill_region, tests/core/test_import_region_writes.py); the
    # copy_ of a tensor into a row is not, so the import refuses, naming that write and its line.
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(
            ShiftMask(), torch.randn(2, 3, 8, 8), dynamic_shapes=({0: Dim("B"), 2: 4 * Dim("h"), 3: 4 * Dim("w")},)
        )
    text = str(err.value)
    assert "E_IMPORT ShiftMask" in text
    assert "aten.copy_.default: writes in place into 'new_zeros'" in text
    assert "whose sizes follow a dynamic dim" in text
    assert "only a number filled into slices of it (x[a:b, c:d] = v) is written out of place" in text
    assert "m[0].copy_(torch.arange(m.shape[1]))" in text
    assert "aten.fill_" not in text


class ReadBeforeWrite(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = torch.zeros(x.shape[-1])
        y = x + m  # reads m before the write below: a buffer of m's final value would be wrong here
        m.fill_(2.0)
        return y * m


def test_a_folded_write_after_an_unfolded_read_would_have_changed_that_read() -> None:
    # Folding gives each folded tensor one value; a write after an operation that does not fold read the tensor
    # would change what that read saw, so the write is not folded and the import says why, never computes wrong.
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(ReadBeforeWrite(), torch.randn(2, 3))
    assert "aten.fill_.Scalar: writes in place into 'zeros'" in str(err.value)
    assert "after an operation that does not fold read it" in str(err.value)


class Table(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.register_buffer("table", torch.randn(n, 2) * torch.tensor([1.0, float("inf")]), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.table[:, 1]


def test_a_floating_constant_with_infinities_does_not_fold() -> None:
    # A folded floating value is written out only when finite: YAML's .inf is not a number hndl reads.
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(Table(3), torch.randn(2, 3))
    assert "reads the buffer 'table' as data" in str(err.value)


def test_a_large_constant_is_not_written_out() -> None:
    from hndl.importer._fold import MAX_VALUES, _buffer
    from hndl.importer._table import Unsupported

    assert _buffer(torch.arange(MAX_VALUES + 1), torch).params["init"] == "arange"  # a formula: any size
    with pytest.raises(Unsupported, match="more than"):
        _buffer(torch.randint(0, 5, (MAX_VALUES + 1,)), torch)
    assert _buffer(torch.full((3,), 2.5), torch).params == {
        "shape": [3],
        "persistent": False,
        "init": "full",
        "value": 2.5,
        "dtype": "float32",
    }


# --- addmm: transformers' Conv1D ------------------------------------------------------------------------------


class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer whose weight is [in, out]."""

    def __init__(self, nf: int, nx: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.randn(nx, nf))
        self.bias = nn.Parameter(torch.randn(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        size_out = (*x.size()[:-1], self.nf)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(size_out)


def test_addmm_of_parameters_is_linear_in_out() -> None:
    net = Conv1D(6, 4)
    graph, model = imported(net, torch.randn(2, 3, 4), dynamic_shapes=({0: Dim("B")},))
    assert [op for op, _ in ops(graph)] == ["reshape", "linear_in_out", "reshape"]
    assert graph.renames == {"weight": "nodes.n_linear_in_out.weight", "bias": "nodes.n_linear_in_out.bias"}
    x = torch.randn(5, 3, 4)
    with torch.no_grad():
        assert torch.equal(model(x), net(x))
    assert hndl.summary(graph, B=1).trainable_params == 6 * 4 + 6


def test_linear_in_out_builds_conv1d_arithmetic() -> None:
    graph = hndl.loads(
        "hndl: 1\nname: t\ninputs: {x: {shape: [B, T, 4]}}\nnodes:\n  fc: {op: linear_in_out, in: x, out_features: 6}\n"
        "outputs: [fc]\n"
    )
    model = hndl.build(graph)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {
        "nodes.n_fc.weight": (4, 6),
        "nodes.n_fc.bias": (6,),
    }
    x = torch.randn(2, 3, 4)
    w, b = model.state_dict()["nodes.n_fc.weight"], model.state_dict()["nodes.n_fc.bias"]
    assert torch.equal(model(x), torch.addmm(b, x.view(-1, 4), w).view(2, 3, 6))


# --- buffer init: values --------------------------------------------------------------------------------------


def _buffer_spec(params: str) -> str:
    return f"hndl: 1\nname: t\ninputs: {{}}\nnodes:\n  m: {{op: buffer, shape: [2, 2], init: values, {params}}}\noutputs: [m]\n"


def test_buffer_values_builds_the_values() -> None:
    model = hndl.build(hndl.loads(_buffer_spec("values: [1, 0, 1, 1], dtype: bool, persistent: false")))
    assert torch.equal(model(), torch.tensor([[True, False], [True, True]]))
    model = hndl.build(hndl.loads(_buffer_spec("values: [0.1, -2.5, 3, 1.0e-30]")))
    assert torch.equal(model(), torch.tensor([[0.1, -2.5], [3.0, 1.0e-30]], dtype=torch.float64).float())
    assert hndl.build(hndl.loads(_buffer_spec("values: [1, 2, 3, 4]")))().dtype == torch.int64


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("values: [1, 0, 1]", "shape [2, 2] holds 4 elements, but values has 3"),
        ("values: [1, 2, 1, 1], dtype: bool", "a bool buffer's values are 0 (false) and 1 (true)"),
        ("values: [1, 2.5, 1, 1], dtype: int64", "a buffer of dtype int64 holds integers, but values has fractions"),
        ("dtype: int64", "init 'values' needs the values"),
    ],
)
def test_buffer_values_refuses(params: str, message: str) -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(hndl.loads(_buffer_spec(params)))
    assert message in str(err.value)
    assert {p.code for p in err.value.problems} == {"E_PARAM"}


# --- type_as: a constant that takes an activation's dtype --------------------------------------------------------

DTYPES = ["float16", "bfloat16", "float32", "float64", "int64", "bool"]


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.sampled_from([1, 2, 3, "B", "T"]), max_size=4),
    like=st.lists(st.sampled_from([1, 5, "B", "S"]), max_size=3),
    x_dtype=st.sampled_from(DTYPES),
    like_dtype=st.sampled_from(DTYPES),
)
def test_type_as_has_xs_shape_and_likes_dtype(shape: list[Any], like: list[Any], x_dtype: str, like_dtype: str) -> None:
    g = hndl.Graph("g")
    x = g.input("x", tuple(shape), dtype=x_dtype)
    other = g.input("like", tuple(like), dtype=like_dtype)
    g.output(g.add("type_as", x, other, name="cast"))
    out = hndl.check(g).output_types[0]
    assert [d if isinstance(d, int) else format_dim(d) for d in out.shape] == shape
    assert out.dtype == like_dtype
    sizes = {"B": 2, "T": 3, "S": 4}
    model = hndl.build(g)
    a = torch.zeros([sizes.get(d, d) for d in shape], dtype=getattr(torch, x_dtype))
    b = torch.zeros([sizes.get(d, d) for d in like], dtype=getattr(torch, like_dtype))
    y = model(a, b)
    assert y.dtype == b.dtype
    assert y.shape == a.shape


def test_type_as_returns_its_input_when_the_dtypes_agree() -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 3))
    g.output(g.add("type_as", x, g.input("like", (1,))))
    a = torch.randn(2, 3)
    assert hndl.build(g)(a, torch.zeros(1)) is a


class TypeAs(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.type_as(y) * 2


def test_aten_type_as_imports_as_type_as() -> None:
    net = TypeAs()
    x, y = torch.randint(0, 5, (2, 3)), torch.randn(4)
    graph, model = imported(net, x, y)
    assert [op for op, _ in ops(graph)] == ["type_as", "scale"]
    for like in (y, y.double(), y.half()):
        assert torch.equal(model(x, like), net(x, like))
        assert model(x, like).dtype == like.dtype
