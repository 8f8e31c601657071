"""Sizes written as expressions over the input's symbols in ``reshape``, ``new_*`` and ``expand`` (issue 37): a
dim of an input is read from it; any other (``8*h`` from an input ``[B, 16*h, ...]``) is computed on every call
from the dims that give its symbols back. Swin's window partition needs it: ``view(B, H // 2, 2, W // 2, 2, C)``
has two sizes no tensor has.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl._dims import dim_add, dim_mul, parse_dim, symbol
from hndl._size_reads import linear_in_one_symbol, plan_size_read

WINDOWS = """
hndl: 1
name: windows
inputs:
  x: {shape: [B, "16*h", "16*w", 24]}
nodes:
  parts: {op: reshape, in: x, shape: ["8*h", 2, "8*w", 2, 24], start_dim: 1}
  back: {op: reshape, in: parts, shape: ["16*h", "16*w", 24], start_dim: 1}
  zeros: {op: new_zeros, in: x, shape: ["8*h", "h*w"]}
  spread: {op: expand, in: [zeros, x], shape: [B, "8*h", "h*w"]}
outputs: [parts, back, spread]
"""


def test_expressions_are_read_or_computed_from_the_inputs_dims_at_every_size() -> None:
    graph = hndl.loads(WINDOWS)
    checked = hndl.check(graph)
    assert "parts [B, 8*h, 2, 8*w, 2, 24]" in repr(checked)
    assert "spread [B, 8*h, h*w]" in repr(checked)
    model = hndl.build(graph)
    for b, h, w in ((2, 1, 1), (3, 2, 5), (1, 4, 2)):
        x = torch.randn(b, 16 * h, 16 * w, 24)
        parts, back, spread = model(x)
        assert torch.equal(parts, x.view(b, 8 * h, 2, 8 * w, 2, 24))
        assert torch.equal(back, x)
        assert spread.shape == (b, 8 * h, h * w)
        assert not spread.any()


def test_a_layer_says_which_sizes_it_computes() -> None:
    model = hndl.build(hndl.loads(WINDOWS))
    assert "reads=[(0, '8*h'), (2, '8*w')]" in repr(model.nodes["n_parts"])
    assert "plan=['8*h', 'h*w']" in repr(model.nodes["n_zeros"])


def test_a_model_with_computed_sizes_exports_with_dynamic_dims() -> None:
    model = hndl.build(hndl.loads(WINDOWS)).eval()
    x = torch.randn(2, 32, 48, 24)
    h, w = torch.export.Dim("h", max=8), torch.export.Dim("w", max=8)
    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("B"), 1: 16 * h, 2: 16 * w},))
    y = torch.randn(3, 16, 64, 24)
    for got, want in zip(program.module()(y), model(y), strict=True):
        assert torch.equal(got, want)


def test_a_size_whose_symbol_no_input_gives_is_an_e_param_naming_it() -> None:
    spec = WINDOWS.replace('shape: [B, "8*h", "h*w"]', 'shape: [B, "8*h", "k*w"]')
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(hndl.loads(spec))
    text = str(err.value)
    assert "E_PARAM expand 'spread'" in text
    assert "size 'k*w' is not a dim of" in text
    assert "k cannot be read from one (a dim c*s+k gives s)" in text


def test_a_symbol_only_in_a_product_of_dims_cannot_be_read_back() -> None:
    # B*h is no dim c*s+k of one symbol: h cannot be read from it, and nothing else has h
    spec = """
hndl: 1
name: merged
inputs:
  x: {shape: ["B*h", 24]}
nodes:
  y: {op: reshape, in: x, shape: ["h", -1]}
outputs: [y]
"""
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(hndl.loads(spec))
    assert "symbol 'h' is not a dim of [B*h, 24]" in str(err.value)


@pytest.mark.parametrize("entry", ["8*", "h+", "2", "(h"])
def test_an_entry_that_is_no_size_expression_is_refused_where_it_is_written(entry: str) -> None:
    spec = WINDOWS.replace('shape: ["8*h", "h*w"]', f'shape: ["{entry}", 3]')
    with pytest.raises(hndl.HndlError) as err:
        hndl.check(hndl.loads(spec))
    text = str(err.value)
    assert "parameter 'shape'" in text
    assert "<string>:" in text  # the spec's line


@settings(max_examples=200, deadline=None)
@given(
    coeff=st.integers(1, 64),
    offset=st.integers(-8, 8),
    a=st.integers(-5, 5),
    b=st.integers(0, 9),
    value=st.integers(1, 500),
)
def test_a_size_read_back_from_a_linear_dim_is_the_expression_at_that_size(
    coeff: int, offset: int, a: int, b: int, value: int
) -> None:
    # h read from a dim coeff*h + offset gives a*h*h + b*h + 3 at the size the dim has: the plan's arithmetic
    # is exact wherever the dim has that form
    h = symbol("h")
    dim = dim_add(dim_mul(coeff, h), offset)
    assert linear_in_one_symbol(dim) == (("h", coeff, offset) if coeff else None)
    expr = dim_add(dim_add(dim_mul(a, dim_mul(h, h)), dim_mul(b, h)), 3)
    plan = plan_size_read(expr, {"x": [dim]})
    assert plan is not None

    class Sized:
        shape = (coeff * value + offset,)

    assert plan.value(Sized()) == a * value * value + b * value + 3


def test_dims_that_are_not_linear_in_one_symbol_give_nothing_back() -> None:
    for text in ("B*h", "h*h", "h//2", "h+w", "7"):
        assert linear_in_one_symbol(parse_dim(text)) is None, text
    assert linear_in_one_symbol(parse_dim("4*h-3")) == ("h", 4, -3)
