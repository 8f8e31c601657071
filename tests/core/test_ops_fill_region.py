"""``fill_region``: a copy of ``x`` with a number written into a region of slices (issue 37: what the importer
writes ``mask[a:b, c:d] = v`` as, at sizes a dynamic dim sets)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl


def spec(params: str, shape: str = "[H, W]", dtype: str = "") -> str:
    extra = f", dtype: {dtype}" if dtype else ""
    return f"""
hndl: 1
name: fill
inputs:
  x: {{shape: {shape}{extra}}}
nodes:
  y: {{op: fill_region, in: x, {params}}}
outputs: [y]
"""


def test_fill_region_writes_the_region_and_leaves_its_input_unchanged() -> None:
    model = hndl.build(hndl.loads(spec("dims: [0, 1], start: [-2, -1], end: [-1, null], value: 4")))
    x = torch.randn(5, 7)
    before = x.clone()
    y = model(x)
    want = x.clone()
    want[-2:-1, -1:] = 4
    assert torch.equal(y, want)
    assert torch.equal(x, before)


def test_fill_region_follows_a_symbolic_size() -> None:
    # Swin's regions: (0, -2), (-2, -1), (-1, None) along each axis, whatever the map's size
    model = hndl.build(hndl.loads(spec("dims: [-1], start: [-2], end: [-1], value: 1.5", "[B, H, W]")))
    for w in (3, 8, 13):
        x = torch.zeros(2, 4, w)
        assert torch.equal(model(x)[..., -2], torch.full((2, 4), 1.5))
        assert model(x).sum().item() == 1.5 * 8


def test_fill_region_into_an_integer_tensor_cuts_the_value_as_torch_does() -> None:
    model = hndl.build(hndl.loads(spec("dims: [0], start: [0], end: [2], value: 2.7", "[H, W]", "int64")))
    y = model(torch.zeros(3, 3, dtype=torch.int64))
    assert y.dtype == torch.int64
    assert y[:2].eq(2).all()
    assert y[2].eq(0).all()


def test_gradient_flows_outside_the_region_only() -> None:
    model = hndl.build(hndl.loads(spec("dims: [1], start: [1], end: [3], value: 0.0")))
    x = torch.randn(2, 4, requires_grad=True)
    model(x).sum().backward()
    assert x.grad is not None
    assert torch.equal(x.grad, torch.tensor([[1.0, 0, 0, 1], [1, 0, 0, 1]]))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("dims: [0, 0], start: [0, 1], end: [1, 2], value: 1", "dims [0, 0] names dim 0 twice"),
        ("dims: [0, 1], start: [0], end: [1, 2], value: 1", "start has 1 entries for 2 dims"),
        ("dims: [0], start: [0], end: [1], step: [0], value: 1", "step [0] has an entry below 1"),
        ("dims: [2], start: [0], end: [1], value: 1", "dims"),
        ("dims: [0], start: [0], end: [x], value: 1", "must be a list of integers or nulls"),
    ],
)
def test_a_region_that_does_not_fit_the_input_is_an_e_param(params: str, message: str) -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(hndl.loads(spec(params)))
    text = str(err.value)
    assert "E_PARAM fill_region 'y'" in text
    assert message in text


regions = st.lists(
    st.tuples(st.integers(-6, 6), st.one_of(st.none(), st.integers(-6, 6)), st.integers(1, 3)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=3, max_size=3),
    region=regions,
    value=st.floats(-10, 10, allow_nan=False),
)
def test_fill_region_is_pythons_slice_assignment(shape: list[int], region: Any, value: float) -> None:
    dims = list(range(len(region)))
    start = [r[0] for r in region]
    end = ["null" if r[1] is None else r[1] for r in region]
    step = [r[2] for r in region]
    text = spec(
        f"dims: {dims}, start: {start}, end: [{', '.join(map(str, end))}], step: {step}, value: {value}", "[A, B, C]"
    )
    model = hndl.build(hndl.loads(text))
    x = torch.randn(*shape)
    want = x.clone()
    want[tuple(slice(r[0], r[1], r[2]) for r in region)] = value
    assert torch.equal(model(x), want)
