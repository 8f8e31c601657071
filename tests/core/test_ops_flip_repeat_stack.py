"""``flip``, ``repeat`` and ``stack``: their inferred shapes equal torch's for any shape and parameters (property
tests), symbolic sizes stay symbolic, bad parameters are E_PARAM/E_SHAPE naming the node, and the importer maps
``torch.flip``, ``Tensor.repeat`` and ``torch.stack`` to them."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl


def one_node(op: str, shapes: list[list[Any]], **params: Any) -> hndl.Graph:
    g = hndl.Graph(op)
    inputs = [g.input(f"x{i}", tuple(shape)) for i, shape in enumerate(shapes)]
    g.output(g.add(op, inputs if len(inputs) > 1 else inputs[0], name="y", **params))
    return g


def problem(op: str, shapes: list[list[Any]], **params: Any) -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(one_node(op, shapes, **params))
    return info.value.problems[0]


def out_shape(graph: hndl.Graph) -> list[str]:
    return [str(d) for d in hndl.check(graph).types["y"].shape]


SHAPES = st.lists(st.integers(1, 4), min_size=1, max_size=4)


@settings(max_examples=120, deadline=None)
@given(shape=SHAPES, data=st.data())
def test_flip_equals_torch_for_any_dims(shape: list[int], data: Any) -> None:
    rank = len(shape)
    dims = data.draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda d: d % rank))
    x = torch.randn(*shape)
    model = hndl.build(one_node("flip", [shape], dims=dims))
    assert torch.equal(model(x), torch.flip(x, dims))


@settings(max_examples=120, deadline=None)
@given(shape=SHAPES, data=st.data())
def test_repeat_equals_tensor_repeat_for_any_counts(shape: list[int], data: Any) -> None:
    extra = data.draw(st.integers(0, 2))
    counts = data.draw(st.lists(st.integers(0, 3), min_size=len(shape) + extra, max_size=len(shape) + extra))
    x = torch.randn(*shape)
    graph = one_node("repeat", [shape], repeats=counts)
    want = x.repeat(*counts)
    assert out_shape(graph) == [str(n) for n in want.shape]
    assert torch.equal(hndl.build(graph)(x), want)


@settings(max_examples=120, deadline=None)
@given(shape=SHAPES, count=st.integers(1, 3), data=st.data())
def test_stack_equals_torch_for_any_dim(shape: list[int], count: int, data: Any) -> None:
    dim = data.draw(st.integers(-len(shape) - 1, len(shape)))
    xs = [torch.randn(*shape) for _ in range(count)]
    graph = one_node("stack", [shape] * count, dim=dim)
    want = torch.stack(xs, dim=dim)
    assert out_shape(graph) == [str(n) for n in want.shape]
    assert torch.equal(hndl.build(graph)(*xs), want)


def test_symbolic_sizes_stay_symbolic() -> None:
    assert out_shape(one_node("repeat", [["B", "T", 8]], repeats=[2, 2, 3, 1])) == ["2", "2*B", "3*T", "8"]
    assert out_shape(one_node("stack", [["B", "T", 4], ["B", "T", 4]], dim=-1)) == ["B", "T", "4", "2"]
    assert out_shape(one_node("flip", [["B", "T", 8]], dims=1)) == ["B", "T", "8"]


def test_stack_takes_the_most_precise_size_its_inputs_give() -> None:
    assert out_shape(one_node("stack", [["B", "T"], ["B", 5]], dim=0)) == ["2", "B", "5"]


def test_stack_integer_and_float_promotes_as_torch() -> None:
    g = hndl.Graph("s")
    a, b = g.input("a", (3,), dtype="int64"), g.input("b", (3,), dtype="float32")
    g.output(g.add("stack", [a, b], name="y"))
    got = hndl.build(g)(torch.arange(3), torch.ones(3))
    want = torch.stack([torch.arange(3), torch.ones(3)])
    assert got.dtype == want.dtype
    assert torch.equal(got, want)


def test_flip_of_one_dim_twice_is_a_param_error() -> None:
    p = problem("flip", [["B", 8]], dims=[1, -1])
    assert (p.code, p.node) == ("E_PARAM", "y")
    assert (p.message, p.expected) == ("dims [1, -1] names dim 1 twice", "each dim once")


def test_flip_of_a_dim_past_the_rank_is_a_param_error() -> None:
    p = problem("flip", [["B", 8]], dims=2)
    assert (p.code, p.node, p.expected) == ("E_PARAM", "y", "-2 .. 1")


def test_repeat_with_fewer_counts_than_dims_is_a_param_error_with_the_fix() -> None:
    p = problem("repeat", [["B", 8]], repeats=[2])
    assert (p.code, p.node) == ("E_PARAM", "y")
    assert "a count for each of the input's 2 dims, got 1" in p.message
    assert p.hint == "give 1 for a dim to keep: repeats: [1, 2]"


def test_repeat_with_a_negative_count_is_a_param_error() -> None:
    assert problem("repeat", [["B", 8]], repeats=[1, -1]).code == "E_PARAM"


def test_stack_of_different_shapes_names_the_input_and_dim() -> None:
    p = problem("stack", [["B", 8], ["B", 9]])
    assert (p.code, p.node, p.port) == ("E_SHAPE", "y", "inputs")
    assert p.message == "input 1 [B, 9] differs from input 0 [B, 8] in dim 1"
    p = problem("stack", [["B", 8], ["B", 8, 1]])
    assert (p.code, p.port) == ("E_SHAPE", "inputs")
    assert "rank 3" in p.message


def test_stack_dim_past_the_result_rank_is_a_param_error() -> None:
    p = problem("stack", [["B", 8], ["B", 8]], dim=3)
    assert (p.code, p.expected) == ("E_PARAM", "-3 .. 2")


def test_the_three_ops_round_trip_through_a_spec() -> None:
    text = """
hndl: 1
name: rearranged
inputs:
  x: {shape: [B, T, 4]}
nodes:
  back: {op: flip, in: x, dims: 1}
  both: {op: stack, in: [x, back], dim: -1}
  tiled: {op: repeat, in: both, repeats: [1, 2, 1, 1]}
outputs: [tiled]
"""
    graph = hndl.loads(text)
    assert hndl.dumps(hndl.loads(hndl.dumps(graph))) == hndl.dumps(graph)
    x = torch.randn(2, 3, 4)
    want = torch.stack([x, x.flip(1)], dim=-1).repeat(1, 2, 1, 1)
    assert torch.equal(hndl.build(graph)(x), want)
    assert str(hndl.check(graph).types["tiled"]) == "[B, 2*T, 4, 2] float"
