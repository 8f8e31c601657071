"""Every guard of the trace is held against the input contract: an imported graph never takes a size at which
torch's own exported program refuses the input (and the module may compute something else)."""

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


class EvenHalves(nn.Module):
    """Takes another branch when H is not a multiple of 64."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[2] % 64 == 0:
            return x * 2
        return x + 1


def test_a_guard_under_a_derived_dim_was_not_held_to_the_contract() -> None:
    # torch.export keeps `x.shape[2] % 64 == 0` in _guards_code for 32*Dim("h") without refusing it; the import
    # took every h, and at h = 3 (H = 96) the graph doubled where the module adds one.
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(EvenHalves(), torch.randn(2, 3, 64, 8), dynamic_shapes=({2: 32 * Dim("h")},))
    problem = err.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert problem.node == "x"
    assert "`(x.shape[2] % 64) == 0` (x.shape[2] = 32*h)" in problem.message
    assert "at h = 1 it does not" in problem.message  # the first size the contract takes where it fails
    assert problem.hint is not None
    assert "h is a multiple of 2" in problem.hint
    assert "write dim 2 of 'x' as 64*Dim(\"h\")" in problem.hint


def test_the_multiple_the_hint_names_imports_and_computes_what_the_module_does() -> None:
    net = EvenHalves()
    graph = hndl.from_module(net, torch.randn(2, 3, 128, 8), dynamic_shapes=({2: 64 * Dim("h")},))
    model = hndl.build(graph).eval()
    for size in (128, 192, 320):
        x = torch.randn(2, 3, size, 8)
        assert torch.equal(model(x), net(x))


def test_a_remainder_is_written_into_the_multiple() -> None:
    class OddWindows(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.shape[1] % 4 == 1 else x

    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(OddWindows(), torch.randn(2, 9), dynamic_shapes=({1: Dim.AUTO},))
    hint = err.value.problems[0].hint or ""
    assert "x_dim1 is 1 more than a multiple of 4" in hint
    assert "write dim 1 of 'x' as 4*Dim(\"x_dim1\")+1" in hint


class NotThree(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 3:
            return x * 2
        return x + 1


def test_an_automatic_dim_is_narrowed_to_the_sizes_around_the_example_where_the_guards_hold() -> None:
    # Dim.AUTO: torch keeps `x.shape[1] != 3`; the graph takes the run from 4 up (a range cannot leave out 3 alone)
    net = NotThree()
    graph = hndl.from_module(net, torch.randn(2, 8), dynamic_shapes=({1: Dim.AUTO},))
    assert graph.inputs["x"].contract.to_spec()["ranges"] == {"x_dim1": {"min": 4}}
    model = hndl.build(graph).eval()
    for size in (4, 5, 40):
        x = torch.randn(2, size)
        assert torch.equal(model(x), net(x))
    with pytest.raises(hndl.HndlError) as err:
        model(torch.randn(2, 3))
    assert err.value.problems[0].code == "E_INPUT"
    assert "x_dim1 >= 4" in err.value.problems[0].message
    x = torch.randn(2, 6)
    assert torch.equal(model(x), net(x))  # the next valid call works


def test_an_example_far_above_the_sizes_tried_one_by_one_keeps_the_whole_run() -> None:
    # the run is followed from the example itself: traced at 5,000 the dim still takes 4 and up, not 5,000 alone
    graph = hndl.from_module(NotThree(), torch.randn(2, 5000), dynamic_shapes=({1: Dim.AUTO},))
    assert graph.inputs["x"].contract.to_spec()["ranges"] == {"x_dim1": {"min": 4}}


def test_a_guard_written_over_two_dims_but_decided_by_one_narrows_that_dim() -> None:
    # torch writes x[:, :3, :]'s `size != 3` as `x.shape[1]*x.shape[2] != 3*x.shape[2]`
    class Crop(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, :3, :] * 2

    net = Crop()
    graph = hndl.from_module(net, torch.randn(2, 6, 5), dynamic_shapes=({1: Dim.AUTO, 2: Dim.AUTO},))
    assert graph.inputs["x"].contract.to_spec()["ranges"] == {"x_dim1": {"min": 4}}
    x = torch.randn(2, 4, 2)
    assert torch.equal(hndl.build(graph)(x), net(x))


def test_an_upper_run_is_kept_as_a_maximum() -> None:
    class Small(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.shape[1] * 3 < 50 else x

    graph = hndl.from_module(Small(), torch.randn(2, 8), dynamic_shapes=({1: Dim.AUTO},))
    assert graph.inputs["x"].contract.to_spec()["ranges"] == {"x_dim1": {"max": 16}}


def test_an_automatic_dim_whose_sizes_are_a_multiple_is_refused_with_the_multiple() -> None:
    class Fours(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.shape[1] % 4 == 0 else x

    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(Fours(), torch.randn(2, 8), dynamic_shapes=({1: Dim.AUTO},))
    problem = err.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert problem.node == "x"
    assert "at x_dim1 = 1 it does not" in problem.message
    assert '4*Dim("x_dim1")' in (problem.hint or "")
    net = Fours()
    graph = hndl.from_module(net, torch.randn(2, 8), dynamic_shapes=({1: 4 * Dim("k")},))
    model = hndl.build(graph).eval()
    x = torch.randn(2, 12)
    assert torch.equal(model(x), net(x))


def test_a_guard_over_two_dims_is_refused_naming_sizes_where_it_fails() -> None:
    class Area(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.shape[1] * x.shape[2] > 30 else x

    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(Area(), torch.randn(2, 6, 8), dynamic_shapes=({1: Dim.AUTO, 2: Dim.AUTO},))
    problem = err.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert problem.node == "x"
    assert "`x.shape[1]*x.shape[2] > 30`" in problem.message.replace("(", "").replace(")", "")
    assert "x_dim1 = 1, x_dim2 = 1" in problem.message
    assert "leave one of those dims static" in (problem.hint or "")


def test_guards_that_hold_at_every_size_the_contract_takes_change_nothing() -> None:
    # a CNN's `1 + (H - 1) // 2 != 1` holds for every H from 2 up; a range the user gave keeps its bounds
    net = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.AdaptiveAvgPool2d(1)).eval()
    dims = ({0: Dim("B"), 2: Dim("H", min=8, max=512), 3: 2 * Dim("w")},)
    graph = hndl.from_module(net, torch.randn(2, 3, 32, 32), dynamic_shapes=dims)
    assert graph.inputs["input"].contract.to_spec()["ranges"] == {"H": {"min": 8, "max": 512}}
    model = hndl.build(graph).eval()
    model.load_state_dict(graph.convert(net.state_dict()))
    x = torch.randn(3, 3, 9, 14)
    assert torch.allclose(model(x), net(x), atol=1e-6)


def test_a_guard_the_importer_cannot_read_is_refused_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    export = torch.export.export

    def with_unknown_guard(*args: object, **kwargs: object) -> object:
        program = export(*args, **kwargs)
        program._guards_code = [*program._guards_code, "some_new_function(L['x'].size()[0]) == 1"]
        return program

    monkeypatch.setattr(torch.export, "export", with_unknown_guard)
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(NotThree(), torch.randn(4, 8), dynamic_shapes=({0: Dim("B")},))
    problem = err.value.problems[0]
    assert problem.node == "x"
    assert "`some_new_function(x.shape[0]) == 1`, which the importer cannot read" in problem.message
    assert problem.hint == "leave the dims it reads static"


class ShiftUnlessOneWindow(nn.Module):
    """Swin's rule: no shift where the map is one window (here a window of 2 on W // 16)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[3] // 16 * 2 > 2:
            return torch.roll(x, 1, 3)
        return x


def test_a_branch_that_fails_at_size_one_was_not_held_there() -> None:
    # Guards were held from size 2 up (torch traces as if every dynamic dim were 2 or more), so W = 16*w imported
    # for every w, and at w = 1, which the contract takes, the graph rolled where the module does not (Swin at
    # W = 16: 1e-3 off). A branch failing at 1 is refused now, with the min; torch's own `!= 1` guards are not.
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(ShiftUnlessOneWindow(), torch.randn(2, 3, 8, 32), dynamic_shapes=({3: 16 * Dim("w")},))
    problem = err.value.problems[0]
    assert "at w = 1 it does not" in problem.message
    assert 'Dim("w", min=2)' in (problem.hint or "")
    net = ShiftUnlessOneWindow()
    graph = hndl.from_module(net, torch.randn(2, 3, 8, 32), dynamic_shapes=({3: 16 * Dim("w", min=2)},))
    assert "ranges: {w: {min: 2}}" in hndl.dumps(graph)
    model = hndl.build(graph).eval()
    for width in (32, 80):
        x = torch.randn(2, 3, 8, width)
        assert torch.equal(model(x), net(x))
    with pytest.raises(hndl.HndlError):
        model(torch.randn(2, 3, 8, 16))


def test_a_batch_of_one_still_imports_where_only_torchs_own_guards_exclude_it() -> None:
    # torch writes `size != 1` guards from its 0/1 specialisation: they say nothing of the module at size 1
    class Scale(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.reshape(x.shape[0], -1) * 2

    net = Scale()
    graph = hndl.from_module(net, torch.randn(4, 3, 2), dynamic_shapes=({0: Dim("B")},))
    model = hndl.build(graph).eval()
    x = torch.randn(1, 3, 2)
    assert torch.equal(model(x), net(x))


class EvenFromFour(nn.Module):
    """One branch where H is a multiple of 64 and at least 128."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[2] % 64 == 0 and x.shape[2] >= 128:
            return x * 2
        return x + 1


def test_the_multiple_the_hint_writes_keeps_the_least_size() -> None:
    # h even and at least 4 under 32*Dim("h") is k at least 2 under 64*Dim("k"): the hint said 64*Dim("h") (a min
    # of 2 was taken for torch's own), and at H = 64 that took the branch not traced
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(EvenFromFour(), torch.randn(2, 3, 128, 8), dynamic_shapes=({2: 32 * Dim("h")},))
    hint = err.value.problems[0].hint or ""
    assert "write dim 2 of 'x' as 64*Dim(\"h\", min=2)" in hint
    net = EvenFromFour()
    graph = hndl.from_module(net, torch.randn(2, 3, 128, 8), dynamic_shapes=({2: 64 * Dim("h", min=2)},))
    model = hndl.build(graph).eval()
    for size in (128, 256):
        x = torch.randn(2, 3, size, 8)
        assert torch.equal(model(x), net(x))
    with pytest.raises(hndl.HndlError):
        model(torch.randn(2, 3, 64, 8))
