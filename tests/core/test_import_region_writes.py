"""hndl.from_module at sizes a dynamic dim sets (issue 37, torchvision's Swin at symbolic H, W): a number filled
into slices of a tensor made in the graph is written out of place as ``fill_region``; ``masked_fill`` by a number
is ``where``; a pad by a computed amount that is the same int at every size the contract takes is that int; a
reshape or ``new_zeros`` to sizes computed from the input's (``H // 2``) computes them on every call. Hand-written
modules that do each the way Swin does.
"""

from __future__ import annotations

from typing import Any

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

HW = ({0: Dim("B"), 2: 4 * Dim("h"), 3: 4 * Dim("w")},)


def imported(net: nn.Module, x: torch.Tensor, dynamic_shapes: Any) -> tuple[Any, Any]:
    net.eval()
    graph = hndl.from_module(net, x, dynamic_shapes=dynamic_shapes)
    assert graph.fallbacks == []
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    model = hndl.build(again)
    model.load_state_dict(graph.convert(net.state_dict()))
    return graph, model.eval()


def ops(graph: Any) -> list[str]:
    return [n.op for n in graph.nodes.values()]


def same_at(net: nn.Module, model: Any, *shapes: tuple[int, ...]) -> None:
    for shape in shapes:
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(sum(shape)))
        with torch.no_grad():
            assert torch.equal(model(x), net(x)), shape


class RegionMask(nn.Module):
    """Swin's shifted-window mask: ``new_zeros`` of the map's H, W, a count filled region by region through
    slices, then the pairwise difference masked to -100 / 0 and added to the scores."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.new_zeros((x.shape[-2], x.shape[-1]))
        regions = ((0, -2), (-2, -1), (-1, None))
        count = 0
        for h in regions:
            for w in regions:
                m[h[0] : h[1], w[0] : w[1]] = count
                count += 1
        d = m.reshape(-1).unsqueeze(1) - m.reshape(-1).unsqueeze(0)
        d = d.masked_fill(d != 0, -100.0).masked_fill(d == 0, 0.0)
        return x.flatten(-2).unsqueeze(-1) + d


def test_a_mask_filled_by_slices_at_dynamic_sizes_is_fill_region_nodes() -> None:
    # At symbolic H, W the mask cannot fold (it differs per size) and each fill_ was refused ("no op writes into
    # part of a tensor"). Each is a fill_region on the mask as the fills before it left it: the same at any size.
    net = RegionMask()
    graph, model = imported(net, torch.randn(2, 3, 8, 8), HW)
    used = ops(graph)
    assert used.count("fill_region") == 9
    assert "buffer" not in used
    fills = [n for n in graph.nodes.values() if n.op == "fill_region"]
    assert [dict(n.params)["value"] for n in fills] == [float(c) for c in range(9)]
    assert dict(fills[4].params) == {"dims": [0, 1], "start": [-2, -2], "end": [-1, -1], "value": 4.0}
    # each fill reads the one before it, the first the new_zeros; what reads the mask after reads the last
    assert [n.inputs[0] for n in fills[1:]] == [n.name for n in fills[:-1]]
    same_at(net, model, (2, 3, 8, 8), (3, 3, 12, 4), (1, 3, 4, 20))


class ViewReadAfterFill(nn.Module):
    """A view of the mask made before a fill and read after it: torch's view sees the fill."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.new_zeros((x.shape[-2], x.shape[-1]))
        first_row = m[0]
        m[:, -1:] = 1.0
        return x + first_row


def test_a_view_made_before_a_fill_and_read_after_is_still_refused() -> None:
    # fill_region writes the mask out of place: a view made before it would still hold the old values, where
    # torch's view sees the write. The import refuses that read rather than compute something else.
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(ViewReadAfterFill().eval(), torch.randn(2, 3, 8, 8), dynamic_shapes=HW)
    assert "after an in-place operation changed it through another view" in str(err.value)


class FillResultRead(nn.Module):
    """``fill_`` returns the view it wrote; here that view is read."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.new_zeros((x.shape[-2], x.shape[-1]))
        corner = m[:2, :2].fill_(3.0)
        return x + m + corner.sum()


def test_a_fill_whose_own_result_is_read_is_refused() -> None:
    # fill_region gives the whole tensor, not the region fill_ returns: read, it would be the wrong value
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(FillResultRead().eval(), torch.randn(2, 3, 8, 8), dynamic_shapes=HW)
    assert "aten.fill_.Scalar: a fill into slices whose own result (the region it wrote) is read" in str(err.value)


class FillTensor(nn.Module):
    """A slice filled with a tensor computed from the input: not a number, so not a fill_region."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = x.new_zeros((x.shape[-2], x.shape[-1]))
        m[:2].fill_(x.sum())
        return x + m


def test_a_fill_with_a_value_from_the_input_is_refused_with_the_reason() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(FillTensor().eval(), torch.randn(2, 3, 8, 8), dynamic_shapes=HW)
    text = str(err.value)
    assert "aten.fill_.Tensor" in text
    assert "only a number filled into slices of it" in text


class MaskedFill(nn.Module):
    def __init__(self, value: float | int, dtype: torch.dtype) -> None:
        super().__init__()
        self.value = value
        self.dtype = dtype

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = (x * 4).to(self.dtype)
        return y.masked_fill(x > 0, self.value)


@pytest.mark.parametrize(("value", "dtype"), [(-100.0, torch.float32), (7, torch.int64), (-1, torch.int32)])
def test_masked_fill_by_a_number_is_where_with_the_tensors_dtype(value: float, dtype: torch.dtype) -> None:
    net = MaskedFill(value, dtype)
    graph, model = imported(net, torch.randn(2, 5), ({0: Dim("B"), 1: Dim("T")},))
    assert "where" in ops(graph)
    for shape in ((3, 7), (1, 2)):
        x = torch.randn(*shape)
        with torch.no_grad():
            got, want = model(x), net(x)
        assert got.dtype == want.dtype
        assert torch.equal(got, want)


@pytest.mark.parametrize("value", [float("-inf"), float("inf")])
def test_masked_fill_by_an_infinity_is_where_with_that_infinity(value: float) -> None:
    # was refused (stop 46: where's numbers were finite), which stopped every attention masked with -inf
    net = MaskedFill(value, torch.float32)
    graph, model = imported(net, torch.randn(2, 5), ({0: Dim("B"), 1: Dim("T")},))
    assert [n.params.get("a") for n in graph.nodes.values() if n.op == "where"] == [value]
    for shape in ((3, 7), (1, 2)):
        x = torch.randn(*shape)
        with torch.no_grad():
            assert torch.equal(model(x), net(x))


def test_masked_fill_of_an_integer_tensor_by_a_float_is_refused() -> None:
    # torch keeps the tensor's int64; where would promote to float
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(MaskedFill(0.5, torch.int64).eval(), torch.randn(2, 5), dynamic_shapes=({0: Dim("B")},))
    assert "masked_fill of a torch.int64 tensor with 0.5" in str(err.value)


class PadToWindow(nn.Module):
    """Swin's padding of the map to a multiple of the window: ``(window - H % window) % window``."""

    def __init__(self, window: int) -> None:
        super().__init__()
        self.window = window

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, _, h, w = x.shape
        pad_b = (self.window - h % self.window) % self.window
        pad_r = (self.window - w % self.window) % self.window
        return F.pad(x, (0, pad_r, 0, pad_b)) * 2


def test_a_pad_by_computed_amounts_zero_at_every_size_is_no_node() -> None:
    # H = 4*h pads by (2 - 4*h % 2) % 2, which torch does not simplify; hndl's dims make it 0 at every h
    net = PadToWindow(2)
    graph, model = imported(net, torch.randn(2, 3, 8, 8), HW)
    assert "pad" not in ops(graph)
    same_at(net, model, (3, 3, 12, 4), (1, 3, 4, 16))


def test_a_pad_by_amounts_that_differ_with_the_size_is_refused_with_the_fix() -> None:
    # window 3 on H = 4*h pads by 2, 1, 0, ... : no one pad stands for every size
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(PadToWindow(3).eval(), torch.randn(2, 3, 8, 8), dynamic_shapes=HW)
    text = str(err.value)
    assert "aten.pad.default: padding by" in text
    assert "which differs with the input's sizes" in text


class WindowPartition(nn.Module):
    """Swin's window partition and its undoing: ``view(B, H // 2, 2, W // 2, 2, C)``, windows flattened into
    the batch, and ``view(B, H // 2, W // 2, 2, 2, C)`` back; two computed sizes that no traced tensor has."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        windows = x.view(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 4, c)
        windows = windows * 3
        back = windows.view(b, h // 2, w // 2, 2, 2, c).permute(0, 1, 3, 2, 4, 5).reshape(b, h, w, c)
        mask = x.new_zeros((h // 2, w // 2))
        return back + mask.sum()


def test_a_reshape_to_sizes_computed_from_the_inputs_computes_them_on_every_call() -> None:
    net = WindowPartition()
    shapes = ({0: Dim("B"), 1: 4 * Dim("h"), 2: 4 * Dim("w")},)
    graph, model = imported(net, torch.randn(2, 8, 8, 6), shapes)
    reshapes = [dict(n.params)["shape"] for n in graph.nodes.values() if n.op == "reshape"]
    assert any("2*h" in shape for shape in reshapes)
    zeros = next(n for n in graph.nodes.values() if n.op == "new_zeros")
    assert list(dict(zeros.params)["shape"]) == ["2*h", "2*w"]
    same_at(net, model, (3, 12, 4, 6), (1, 4, 20, 6))
