"""gather, index (advanced indexing by integer tensors) and unbind: inference against torch on random shapes,
symbolic dims, and the messages."""

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
    node = g.add(op, *xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([node[i] for i in range(count)] if count > 1 else node)
    return hndl.build(g)


def out_shapes(op: str, specs: list[tuple[Any, str | None]], **params: Any) -> list[list[Any]]:
    g = model(op, specs, **params).graph
    checked = next(n for n in hndl.check(g).nodes if n.name == "n")
    return [[format_dim(d) for d in t.shape] for t in checked.out_types]


@st.composite
def index_case(draw: Any) -> tuple[list[int], list[int], list[list[int]]]:
    shape = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    dims = sorted(draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, max_size=len(shape), unique=True)))
    common = draw(st.lists(st.integers(1, 3), max_size=2))
    index_shapes = [[draw(st.sampled_from([1, d])) for d in common] for _ in dims]
    return shape, dims, index_shapes


@settings(max_examples=60, deadline=None)
@given(index_case())
def test_index_infers_torchs_advanced_indexing_shape(case: Any) -> None:
    shape, dims, index_shapes = case
    x = torch.randn(shape)
    indices = [torch.randint(0, shape[d], s) for d, s in zip(dims, index_shapes)]
    key: list[Any] = [slice(None)] * (dims[-1] + 1)
    for d, i in zip(dims, indices):
        key[d] = i
    expected = x[tuple(key)]
    specs = [(shape, "float32"), *[(s, "int64") for s in index_shapes]]
    assert out_shapes("index", specs, dims=dims) == [list(expected.shape)]
    assert torch.equal(model("index", specs, dims=dims)(x, *indices), expected)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_gather_infers_the_index_shape(shape: list[int], data: Any) -> None:
    rank = len(shape)
    dim = data.draw(st.integers(-rank, rank - 1))
    index_shape = [
        data.draw(st.integers(1, 5)) if i == dim % rank else data.draw(st.integers(1, s)) for i, s in enumerate(shape)
    ]
    x = torch.randn(shape)
    index = torch.randint(0, shape[dim], index_shape)
    expected = torch.gather(x, dim, index)
    specs = [(shape, "float32"), (index_shape, "int64")]
    assert out_shapes("gather", specs, dim=dim) == [list(expected.shape)]
    assert torch.equal(model("gather", specs, dim=dim)(x, index), expected)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_unbind_infers_each_part(shape: list[int], data: Any) -> None:
    rank = len(shape)
    dim = data.draw(st.integers(-rank, rank - 1))
    x = torch.randn(shape)
    expected = x.unbind(dim)
    m = model("unbind", [(shape, "float32")], dim=dim, size=shape[dim])
    assert out_shapes("unbind", [(shape, "float32")], dim=dim, size=shape[dim]) == [list(p.shape) for p in expected]
    got = m(x)
    got = got if isinstance(got, tuple) else (got,)
    assert all(torch.equal(a, b) for a, b in zip(got, expected, strict=True))


def test_clip_row_picking_keeps_the_batch_symbolic() -> None:
    # h[arange(B), eos]: one row per sequence
    specs = [(["B", "T", 64], None), (["B"], "int64"), (["B"], "int64")]
    assert out_shapes("index", specs, dims=[0, 1]) == [["B", 64]]
    assert out_shapes("index", [(["B", "T", 64], None), (["N"], "int64")], dims=[1]) == [["B", "N", 64]]
    assert out_shapes("index", [(["B", "T", 64], None), (["N"], "int64")], dims=[0]) == [["N", "T", 64]]
    assert out_shapes("unbind", [([3, "B", 4, "T", 16], None)], dim=0, size=3) == [["B", 4, "T", 16]] * 3


def test_regression_a_bool_mask_index_is_refused_with_the_reason() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_shapes("index", [(["B", 8], None), (["B"], "int8")])
    assert err.value.code == "E_DTYPE"
    assert "torch indexes with int64 or int32 tensors" in str(err.value)


def test_index_tensors_that_do_not_broadcast_are_an_e_shape_naming_both() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_shapes("index", [(["B", "T", 64], None), ([2], "int64"), ([3], "int64")], dims=[0, 1])
    assert err.value.code == "E_SHAPE"
    assert "'indices.0' [2] and 'indices.1' [3] do not broadcast" in str(err.value)


def test_index_dims_must_match_the_indices_and_increase() -> None:
    for dims, words in (([0], "names 1 dims for 2 index tensor(s)"), ([1, 0], "is not increasing")):
        with pytest.raises(hndl.HndlError) as err:
            out_shapes("index", [(["B", "T"], None), (["N"], "int64"), (["N"], "int64")], dims=dims)
        assert err.value.code == "E_PARAM"
        assert words in str(err.value)


def test_gather_index_of_another_rank_is_an_e_shape() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_shapes("gather", [(["B", 8], None), (["B", 8, 1], "int64")], dim=0)
    assert err.value.code == "E_SHAPE"
    assert "has rank 3" in str(err.value)


def test_unbind_size_must_equal_the_dim() -> None:
    with pytest.raises(hndl.HndlError) as err:
        out_shapes("unbind", [([3, "B", 64], None)], dim=0, size=2)
    assert err.value.code == "E_SHAPE"
    assert "dim 0 of the input is 3, but size is 2" in str(err.value)


def test_unbind_of_a_symbolic_dim_of_another_length_fails_at_run_time_naming_the_node() -> None:
    m = model("unbind", [(["K", 4], None)], dim=0, size=2)
    assert len(m(torch.randn(2, 4))) == 2
    with pytest.raises(hndl.HndlError) as err:
        m(torch.randn(3, 4))
    assert "'n'" in str(err.value)
