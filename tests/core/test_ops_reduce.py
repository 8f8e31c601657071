"""The reductions and scans of issue 37: sum, norm, argmax, argmin, cumsum, diff.

Property tests hold each inference rule to torch on real tensors (random shapes and parameters); the rest pin the
symbolic dims, the dtypes and the messages."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl._dims import format_dim


def infer(op: str, *inputs: Any, **params: Any) -> list[tuple[list[Any], str]]:
    """The output (shape, dtype) pairs the checker infers for one node on inputs given as shapes or (shape, dtype)."""
    g = hndl.Graph("t")
    xs = []
    for i, spec in enumerate(inputs):
        pair = isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], (list, tuple))
        shape, dtype = spec if pair else (spec, None)
        xs.append(g.input(f"x{i}", tuple(shape), dtype=dtype))
    node = g.add(op, *xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([node[i] for i in range(count)] if count > 1 else node)
    checked = next(n for n in hndl.check(g).nodes if n.name == "n")
    return [([format_dim(d) for d in t.shape], t.dtype) for t in checked.out_types]


def run(op: str, *tensors: torch.Tensor, **params: Any) -> Any:
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", tuple(t.shape), dtype=str(t.dtype).removeprefix("torch.")) for i, t in enumerate(tensors)]
    g.output(g.add(op, *xs, name="n", **params))
    return hndl.build(g)(*tensors)


shapes = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@st.composite
def reduce_case(draw: Any) -> tuple[list[int], list[int] | None, bool]:
    shape = draw(shapes)
    rank = len(shape)
    dims = draw(
        st.none() | st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda d: d % rank)
    )
    return shape, dims, draw(st.booleans())


@settings(max_examples=40, deadline=None)
@given(reduce_case(), st.sampled_from(["float32", "int64", "bool", "float16"]))
def test_sum_infers_torchs_shape_and_dtype(case: Any, dtype: str) -> None:
    shape, dims, keepdim = case
    x = torch.ones(shape, dtype=getattr(torch, dtype))
    expected = (
        x.sum(dim=dims, keepdim=keepdim)
        if dims is not None
        else (x.sum().reshape([1] * len(shape)) if keepdim else x.sum())
    )
    ((out_shape, out_dtype),) = infer("sum", (shape, dtype), dim=dims, keepdim=keepdim)
    assert out_shape == list(expected.shape)
    assert out_dtype == str(expected.dtype).removeprefix("torch.")
    assert torch.equal(run("sum", x, dim=dims, keepdim=keepdim), expected)


@settings(max_examples=30, deadline=None)
@given(reduce_case(), st.sampled_from([2.0, 1.0, float("inf")]))
def test_norm_infers_torchs_shape(case: Any, ord_: float) -> None:
    shape, dims, keepdim = case
    x = torch.randn(shape)
    expected = torch.linalg.vector_norm(x, ord_, dim=dims, keepdim=keepdim)
    ((out_shape, out_dtype),) = infer("norm", (shape, "float32"), dim=dims, keepdim=keepdim, ord=ord_)
    assert out_shape == list(expected.shape)
    assert out_dtype == "float32"
    assert torch.equal(run("norm", x, dim=dims, keepdim=keepdim, ord=ord_), expected)


@settings(max_examples=40, deadline=None)
@given(shapes, st.data(), st.booleans(), st.sampled_from(["argmax", "argmin"]))
def test_argmax_and_argmin_infer_torchs_shape(shape: list[int], data: Any, keepdim: bool, op: str) -> None:
    rank = len(shape)
    dim = data.draw(st.none() | st.integers(-rank, rank - 1))
    x = torch.randn(shape)
    expected = getattr(x, op)(dim=dim, keepdim=keepdim)
    ((out_shape, out_dtype),) = infer(op, shape, dim=dim, keepdim=keepdim)
    assert (out_shape, out_dtype) == (list(expected.shape), "int64")
    assert torch.equal(run(op, x, dim=dim, keepdim=keepdim), expected)


@settings(max_examples=40, deadline=None)
@given(shapes, st.data(), st.integers(1, 5), st.sampled_from(["float32", "int32", "bool"]))
def test_cumsum_and_diff_infer_torchs_shape_and_dtype(shape: list[int], data: Any, n: int, dtype: str) -> None:
    rank = len(shape)
    dim = data.draw(st.integers(-rank, rank - 1))
    x = torch.randint(0, 2, shape).to(getattr(torch, dtype))
    for op, expected, params in (
        ("cumsum", x.cumsum(dim), {"dim": dim}),
        ("diff", torch.diff(x, n=n, dim=dim), {"dim": dim, "n": n}),
    ):
        ((out_shape, out_dtype),) = infer(op, (shape, dtype), **params)
        assert out_shape == list(expected.shape), op
        assert out_dtype == str(expected.dtype).removeprefix("torch."), op
        assert torch.equal(run(op, x, **params), expected), op


def test_reductions_keep_symbolic_dims() -> None:
    assert infer("sum", ("B", "T", 8), dim=[-1]) == [(["B", "T"], "float")]
    assert infer("sum", (("B", "T"), "bool"), dim=[1], keepdim=True) == [(["B", 1], "int64")]
    assert infer("norm", ("B", "T", 8), dim=[-1], keepdim=True) == [(["B", "T", 1], "float")]
    assert infer("argmax", (("B", "T"), "int64"), dim=-1) == [(["B"], "int64")]
    assert infer("cumsum", (("B", "T"), "int64"), dim=-1) == [(["B", "T"], "int64")]
    assert infer("diff", (("B", "T"), "int64"), n=2) == [(["B", "T-2"], "int64")]
    assert infer("sum", ("B", "T"), dim=[0], dtype="float64") == [(["T"], "float64")]


def test_regression_sum_with_a_repeated_dim_is_an_e_param_naming_it() -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer("sum", ("B", "T", 8), dim=[1, -2])
    assert err.value.code == "E_PARAM"
    assert "names dim 1 twice" in str(err.value)


def test_regression_an_empty_dim_list_is_refused_not_read_as_every_dim() -> None:
    # torch's sum reads dim=[] as every dim, its other reductions as none: the graph says which it means.
    with pytest.raises(hndl.HndlError) as err:
        infer("sum", ("B", 8), dim=[])
    assert err.value.code == "E_PARAM"
    assert "'dim' is empty" in str(err.value)


def test_a_dim_outside_the_rank_is_an_e_param_with_the_range() -> None:
    for op, params in (("argmax", {"dim": 2}), ("cumsum", {"dim": -3}), ("diff", {"dim": 2}), ("norm", {"dim": [3]})):
        with pytest.raises(hndl.HndlError) as err:
            infer(op, ("B", "T"), **params)
        assert err.value.code == "E_PARAM", op
        assert "out of range for a rank-2 input" in str(err.value), op


def test_norm_of_an_integer_tensor_is_an_e_dtype() -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer("norm", (("B", 8), "int64"), dim=[-1])
    assert err.value.code == "E_DTYPE"


def test_argmax_of_an_empty_dim_is_an_e_shape() -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer("argmax", ("B", 0), dim=1)
    assert err.value.code == "E_SHAPE"
    assert "is empty" in str(err.value)


def test_diff_of_a_symbolic_dim_requires_it_to_be_at_least_n_at_call_time() -> None:
    g = hndl.Graph("t")
    g.output(g.add("diff", g.input("x", ("B", "T")), n=3))
    model = hndl.build(g)
    assert model(torch.arange(8.0).reshape(2, 4)).shape == (2, 1)
    with pytest.raises(hndl.HndlError) as err:
        model(torch.ones(2, 2))
    assert err.value.code == "E_INPUT"
    assert "T >= 3" in str(err.value)
