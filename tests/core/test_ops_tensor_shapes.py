"""parameter, positions, scale, expand, select, slice, chunk, pad: shapes, errors users see, and runs."""

from __future__ import annotations

import pytest
import torch
from op_helpers import infer, problem, runs_as_inferred

import hndl

# --- parameter ------------------------------------------------------------------------------------------


def test_parameter_has_no_inputs_and_is_a_learned_weight():
    g = hndl.Graph("t")
    x = g.input("x", ("B", 1, 8))
    cls = g.add("parameter", name="cls", shape=[1, 1, 8], init="ones")
    g.output(g.add("add", x, cls))
    model = hndl.build(g)
    assert list(model.state_dict()) == ["nodes.n_cls.weight"]
    assert torch.equal(model.nodes["n_cls"].weight, torch.ones(1, 1, 8))
    assert torch.equal(model(torch.zeros(3, 1, 8)), torch.ones(3, 1, 8))
    assert sum(p.numel() for p in model.parameters()) == 8


@pytest.mark.parametrize("init", ["zeros", "normal", "trunc_normal"])
def test_parameter_inits(init):
    g = hndl.Graph("t")
    g.output(g.add("parameter", name="p", shape=[64, 64], init=init, std=0.5))
    torch.manual_seed(0)
    w = hndl.build(g).nodes["n_p"].weight
    if init == "zeros":
        assert not w.any()
    else:
        assert 0.35 < w.std().item() < 0.65
    if init == "trunc_normal":
        assert w.abs().max().item() <= 1.0


def test_parameter_errors():
    g = hndl.Graph("t")
    g.output(g.add("parameter", name="p", shape=[1, 0]))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert info.value.code == "E_PARAM"
    assert "'shape'" in str(info.value)
    g = hndl.Graph("t")
    g.output(g.add("parameter", g.input("x", (2,)), name="p", shape=[2]))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert info.value.code == "E_REF"
    assert "parameter takes 0 inputs, got 1" in str(info.value)


# --- positions, scale -----------------------------------------------------------------------------------


def test_positions_counts_one_dim():
    assert infer("positions", ("B", "T"), dtypes=["int64"]) == ["[T]"]
    assert infer("positions", ("B", "T", 8), dim=-1) == ["[8]"]
    (y,) = runs_as_inferred("positions", ("B", "T"), env={"B": 2, "T": 5}, dtypes=["int64"])
    assert torch.equal(y, torch.arange(5))
    assert y.dtype == torch.int64
    p = problem("positions", ("B", "T"), dim=2)
    assert p.code == "E_PARAM"
    assert "dim=2 is out of range for a rank-2 input" in p.message


def test_scale_multiplies():
    runs_as_inferred("scale", ("B", 3), env={"B": 2}, factor=0.5)
    assert infer("scale", ("B", 3), factor=2) == ["[B, 3]"]
    g = hndl.Graph("t")
    g.output(g.add("scale", g.input("x", (2,)), factor=3.0))
    assert torch.equal(hndl.build(g)(torch.tensor([1.0, 2.0])), torch.tensor([3.0, 6.0]))


# --- expand ---------------------------------------------------------------------------------------------


def test_expand_reads_symbols_from_the_second_input():
    assert infer("expand", (1, 1, 8), ("B", "T", 8), shape=["B", 1, -1]) == ["[B, 1, 8]"]
    assert infer("expand", ("B", 1, 8), shape=[-1, 4, -1]) == ["[B, 4, 8]"]
    assert infer("expand", (1, 8), shape=[3, 2, 8]) == ["[3, 2, 8]"]
    ys = runs_as_inferred("expand", (1, 1, 8), ("B", "T", 8), env={"B": 3, "T": 2}, shape=["B", "T", -1])
    assert ys[0].shape == (3, 2, 8)


def test_expand_errors():
    p = problem("expand", (1, 1, 8), shape=["B", 1, -1])
    assert p.code == "E_PARAM"
    assert p.message == "symbol 'B' is not a dim of [1, 1, 8]"
    assert p.hint == "pass a tensor that has this dim as a second input (in: [x, like])"
    p = problem("expand", (2, 1, 8), shape=[3, 1, 8])
    assert (p.code, p.port) == ("E_SHAPE", "x")
    assert p.message == "dim 0 of the input is 2, which cannot expand to 3"
    p = problem("expand", (2, 8), shape=[8])
    assert p.code == "E_PARAM"
    assert "has 1 entries for a rank-2 input" in p.message


# --- select, slice, chunk, pad --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "params", "expected"),
    [
        (("B", "T", 8), {}, "[B, 8]"),
        (("B", "T", 8), {"dim": -1, "index": -1}, "[B, T]"),
        (("*batch", 8), {"dim": -1}, "[*batch]"),
    ],
)
def test_select_shapes(shape, params, expected):
    assert infer("select", shape, **params) == [expected]


def test_select_index_out_of_range():
    p = problem("select", ("B", 3, 8), index=3)
    assert (p.code, p.port) == ("E_SHAPE", "x")
    assert p.message == "index 3 is out of range for dim 1 of size 3"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"start": 1}, "[B, T-1, 8]"),
        ({"end": -1}, "[B, T-1, 8]"),
        ({"start": 0, "step": 2}, "[B, (T+1)//2, 8]"),
        ({"start": 2}, "[B, ?, 8]"),  # T could be 1: the length is not T-2 for every T
        ({"dim": -1, "start": 2, "end": 6}, "[B, T, 4]"),
    ],
)
def test_slice_shapes(params, expected):
    assert infer("slice", ("B", "T", 8), **params) == [expected]


def test_slice_runs_as_inferred():
    runs_as_inferred("slice", ("B", "T", 8), env={"B": 2, "T": 5}, start=1)
    runs_as_inferred("slice", ("B", "T", 8), env={"B": 2, "T": 5}, step=2)


def test_chunk_gives_equal_parts_or_refuses():
    assert infer("chunk", ("B", "T", "D"), chunks=2) == ["[B, T, D//2]", "[B, T, D//2]"]
    p = problem("chunk", ("B", 5), chunks=2)
    assert p.code == "E_SHAPE"
    assert p.message == "2 sections do not divide dim 1 of the input (5)"
    g = hndl.Graph("t")
    parts = g.add("chunk", g.input("x", ("B", "D")), chunks=2)
    g.output([parts[0], parts[1]])
    model = hndl.build(g)
    with pytest.raises(hndl.HndlError):
        model(torch.randn(2, 5))  # torch.chunk would quietly give parts of 3 and 2


def test_pad_shapes_and_errors():
    assert infer("pad", ("B", 3, "H", "W"), pad=[1, 1, 2, 0]) == ["[B, 3, H+2, W+2]"]
    assert infer("pad", ("B", 3, 8), pad=[-1, -1]) == ["[B, 3, 6]"]
    assert (
        problem("pad", ("B", 8), pad=[1]).message == "pad has 1 entries; it needs pairs (left, right), last dim first"
    )
    p = problem("pad", ("B", 3, 4), pad=[4, 0], mode="reflect")
    assert (p.code, p.message) == ("E_SHAPE", "mode 'reflect' pads dim 2 of size 4 by 4")
    p = problem("pad", (8,), pad=[1, 1], mode="reflect")
    assert p.code == "E_SHAPE"
    assert "needs a rank-2 or rank-3 input, got rank 1" in p.message
    p = problem("pad", ("B", 3, 4), pad=[1, 1], mode="reflect", value=1.0)
    assert (p.code, p.message) == ("E_PARAM", "value=1.0 only applies in mode 'constant', not 'reflect'")
