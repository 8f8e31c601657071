"""arange and the fills made at the call's sizes (zeros_like, ones_like, full_like, new_zeros, new_ones,
new_full): symbolic lengths read from an input, dtypes that follow the input's, and the messages."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl._dims import format_dim


def model(op: str, specs: list[tuple[Any, str | None]], **params: Any) -> hndl.GraphModule:
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", tuple(s), dtype=d) for i, (s, d) in enumerate(specs)]
    g.output(g.add(op, *xs, name="n", **params))
    return hndl.build(g)


def out_type(op: str, specs: list[tuple[Any, str | None]], **params: Any) -> tuple[list[Any], str]:
    checked = next(n for n in hndl.check(model(op, specs, **params).graph).nodes if n.name == "n")
    (t,) = checked.out_types
    return [format_dim(d) for d in t.shape], t.dtype


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 9), st.integers(-3, 6), st.integers(-3, 3).filter(bool), st.sampled_from([None, "float32"]))
def test_arange_infers_torchs_length(size: int, start: int, step: int, dtype: str | None) -> None:
    x = torch.zeros(2, size)
    try:
        expected = torch.arange(start, size, step, dtype=None if dtype is None else getattr(torch, dtype))
    except RuntimeError:
        with pytest.raises(hndl.HndlError) as err:
            out_type("arange", [([2, size], None)], start=start, step=step, dtype=dtype)
        assert err.value.code == "E_SHAPE"
        return
    assert out_type("arange", [([2, size], None)], start=start, step=step, dtype=dtype) == (
        [len(expected)],
        str(expected.dtype).removeprefix("torch."),
    )
    assert torch.equal(model("arange", [([2, size], None)], start=start, step=step, dtype=dtype)(x), expected)


def test_arange_reads_a_symbolic_length_from_its_input() -> None:
    assert out_type("arange", [(["B", "T"], "int64")]) == (["T"], "int64")
    assert out_type("arange", [(["B", "T"], "int64")], dim=0, start=1) == (["B-1"], "int64")
    assert out_type("arange", [(["B", "T"], None)], step=2) == (["(T+1)//2"], "int64")
    m = model("arange", [(["B", "T"], "int64")])
    for t in (3, 11):
        assert torch.equal(m(torch.zeros(2, t, dtype=torch.long)), torch.arange(t))


def test_regression_an_arange_that_runs_the_wrong_way_is_an_e_shape() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_type("arange", [(["B", 4], None)], start=8)
    assert err.value.code == "E_SHAPE"
    assert "arange from 8 to 4 by 1 runs the wrong way" in str(err.value)


def test_arange_with_a_zero_step_is_an_e_param() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_type("arange", [(["B", "T"], None)], step=0)
    assert err.value.code == "E_PARAM"


@pytest.mark.parametrize(
    ("op", "params", "fill"),
    [("zeros_like", {}, 0.0), ("ones_like", {}, 1.0), ("full_like", {"value": -float("inf")}, -float("inf"))],
)
def test_like_fills_follow_the_inputs_shape_and_dtype(op: str, params: dict[str, Any], fill: float) -> None:
    assert out_type(op, [(["B", "T"], "float16")], **params) == (["B", "T"], "float16")
    assert out_type(op, [(["B", "T"], "float16")], dtype="bool", **params) == (["B", "T"], "bool")
    m = model(op, [(["B", "T"], None)], **params)
    y = m(torch.randn(3, 5))
    assert torch.equal(y, torch.full((3, 5), fill))
    assert m.double()(torch.randn(2, 4, dtype=torch.float64)).dtype == torch.float64  # follows, as torch's does


@pytest.mark.parametrize(
    ("op", "params", "fill"),
    [("new_zeros", {}, 0.0), ("new_ones", {}, 1.0), ("new_full", {"value": 2.0}, 2.0)],
)
def test_new_fills_read_symbolic_sizes_from_their_inputs(op: str, params: dict[str, Any], fill: float) -> None:
    assert out_type(op, [(["B", "T", 8], None)], shape=["B", "T"], **params) == (["B", "T"], "float")
    assert out_type(op, [(["B", 8], None), (["N", "T"], None)], shape=["B", "T", 2], **params)[0] == ["B", "T", 2]
    m = model(op, [(["B", "T", 8], "int64")], shape=["B", 1, "T"], dtype="bool", **params)
    y = m(torch.zeros(3, 5, 8, dtype=torch.long))
    assert torch.equal(y, torch.full((3, 1, 5), fill).bool())


def test_a_symbol_no_input_carries_is_an_e_param_with_a_hint() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_type("new_ones", [(["B", "T"], None)], shape=["B", "S"])
    assert err.value.code == "E_PARAM"
    assert "symbol 'S' is not a dim of [B, T]" in str(err.value)


def test_a_dtype_category_is_refused() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_type("zeros_like", [(["B", "T"], None)], dtype="int")
    assert err.value.code == "E_PARAM"
    assert "concrete dtype" in str(err.value)
