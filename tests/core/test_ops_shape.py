"""Shape ops: concat, split, reshape, flatten, permute, transpose, mean."""

from __future__ import annotations

import pytest
import torch
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl

# --- concat ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "params", "expected"),
    [
        ((("B", "D"), ("B", "E")), {}, "[B, D+E]"),
        ((("B", "D"), ("B", "E"), ("B", 1)), {}, "[B, D+E+1]"),
        ((("B", 3, "H"), ("B", 5, "H")), {"dim": 1}, "[B, 8, H]"),
        ((("B", 3), (5, 4)), {}, "[5, 7]"),  # B must be 5: the int is the more precise dim
        ((("*batch", "D"), ("*batch", "E")), {}, "[*batch, D+E]"),
        ((("B", 4),), {}, "[B, 4]"),
    ],
)
def test_concat_shapes(shapes, params, expected):
    assert infer("concat", *shapes, **params) == [expected]


@pytest.mark.parametrize("dim", [0, 1, -1, -3])
def test_concat_runs_as_inferred(dim):
    shapes = [("A", "B", "C"), ("D", "B", "C")] if dim in (0, -3) else [("A", "B", "C"), ("A", "B", "C")]
    if dim == 1:
        shapes = [("A", "B", "C"), ("A", "D", "C")]
    if dim == -1:
        shapes = [("A", "B", "C"), ("A", "B", "D")]
    runs_as_inferred("concat", *shapes, env={"A": 2, "B": 3, "C": 4, "D": 5}, dim=dim)


def test_concat_promotes_dtypes():
    g = one_node_graph("concat", ((2, 3), (2, 3)), ["int64", "float32"], {})
    assert hndl.check(g).nodes[0].out_types[0].dtype == "float32"


def test_concat_other_dims_must_agree():
    p = problem("concat", ("B", "D", 2), ("B", "D", 3), dim=1)
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "concat", "inputs")
    assert p.message == "input 1 [B, D, 3] differs from input 0 [B, D, 2] in dim 2, which is not the concat dim"
    assert (p.expected, p.actual) == ("dim 2 = 2", "[B, D, 3]")
    assert p.hint == "only dim 1 (dim=1) may differ between the inputs"


def test_concat_ranks_must_agree():
    p = problem("concat", ("B", 3), ("B", 4, 1))
    assert (p.code, p.port) == ("E_SHAPE", "inputs")
    assert p.message == "input 1 has rank 3 [B, 4, 1], input 0 has rank 2 [B, 3]"
    assert (p.expected, p.actual, p.hint) == ("rank 2", "[B, 4, 1]", "every input of concat needs the same rank")


def test_concat_dim_out_of_range_and_scalars():
    p = problem("concat", ("B", 3), ("B", 4), dim=2)
    assert (p.code, p.message, p.expected, p.actual) == (
        "E_PARAM",
        "dim=2 is out of range for a rank-2 input",
        "-2 .. 1",
        2,
    )
    p = problem("concat", (), ())
    assert (p.code, p.message) == ("E_SHAPE", "cannot concatenate 0-d tensors")


# --- split ----------------------------------------------------------------------------------------------


def test_split_sections_and_sizes():
    assert infer("split", ("B", "T", 192), sections=3) == ["[B, T, 64]"] * 3
    assert infer("split", ("B", "D"), sections=2) == ["[B, D//2]"] * 2
    assert infer("split", ("B", 12, "T"), sizes=[4, 8], dim=1) == ["[B, 4, T]", "[B, 8, T]"]
    assert infer("split", ("B", "D"), sizes=[4, 8]) == ["[B, 4]", "[B, 8]"]  # D must be 12 at run time


def test_split_outputs_are_ports():
    g = hndl.Graph("t")
    x = g.input("x", ("B", 12))
    q, k, v = g.add("split", x, sections=3)
    g.output(g.add("concat", [v, k, q]))
    model = hndl.build(g)
    t = torch.arange(24.0).reshape(2, 12)
    assert torch.equal(model(t), torch.cat([t[:, 8:], t[:, 4:8], t[:, :4]], dim=1))


@pytest.mark.parametrize(
    ("shape", "params", "env"),
    [
        (("B", "D"), {"sections": 2}, {"B": 3, "D": 8}),
        (("B", 12, "T"), {"sizes": [4, 0, 8], "dim": 1}, {"B": 2, "T": 3}),
        (("B", "T", 12), {"sections": 4, "dim": -1}, {"B": 2, "T": 3}),
        (("B", "T", 12), {"sizes": [1, 1], "dim": 1}, {"B": 2, "T": 2}),
    ],
)
def test_split_runs_as_inferred(shape, params, env):
    runs_as_inferred("split", shape, env=env, **params)


def test_split_sections_must_divide():
    p = problem("split", ("B", 12), sections=5)
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "split", "x")
    assert p.message == "5 sections do not divide dim 1 of the input (12)"
    assert (p.expected, p.actual, p.hint) == ("dim 1 divisible by 5", "[B, 12]", "use sizes for unequal parts")


def test_split_sections_must_divide_at_run_time_too():
    g = one_node_graph("split", (("B", "D"),), None, {"sections": 2})
    with pytest.raises(ValueError, match="dim -1 has size 5, which 2 sections do not divide"):
        hndl.build(g).nodes["n_n"](torch.randn(2, 5))


def test_split_sizes_must_add_up():
    p = problem("split", ("B", 12), sizes=[5, 5])
    assert (p.code, p.port) == ("E_SHAPE", "x")
    assert p.message == "sizes [5, 5] add up to 10, but dim 1 of the input is 12"
    assert (p.expected, p.actual) == ("dim 1 = 10", "[B, 12]")
    assert p.hint == "the sizes must add up to the length of the split dim"


def test_split_needs_exactly_one_of_sections_and_sizes():
    hint = "sections: 3 splits into 3 equal parts; sizes: [64, 32] into parts of those sizes"
    p = problem("split", ("B", 12), sizes=[5, 7], sections=2)
    assert (p.code, p.message, p.hint) == ("E_PARAM", "give exactly one of 'sections' and 'sizes', not both", hint)
    p = problem("split", ("B", 12))
    assert (p.code, p.message, p.hint) == ("E_PARAM", "give exactly one of 'sections' and 'sizes'", hint)
    p = problem("split", ("B", 12), sizes=[])
    assert (p.code, p.message, p.expected, p.actual) == ("E_PARAM", "'sizes' is empty", "at least one size", "[]")
    p = problem("split", ("B", 12), sections=2, dim=3)
    assert (p.code, p.message) == ("E_PARAM", "dim=3 is out of range for a rank-2 input")


# --- reshape --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "params", "expected"),
    [
        (("B", "T", 64), {"shape": [4, 16], "start_dim": 2}, "[B, T, 4, 16]"),
        (("B", "T", 64), {"shape": [4, -1], "start_dim": -1}, "[B, T, 4, 16]"),
        (("B", 4, "T"), {"shape": [-1], "start_dim": 1}, "[B, 4*T]"),
        (("B", 4, "T"), {"shape": [2, -1], "start_dim": 1}, "[B, 2, 2*T]"),
        ((6, 4), {"shape": [3, -1]}, "[3, 8]"),
        (("B", 12), {"shape": [3, 4], "start_dim": 1}, "[B, 3, 4]"),
        (("B", "D"), {"shape": [3, 4], "start_dim": 1}, "[B, 3, 4]"),  # D must be 12 at run time
        (("*batch", 64), {"shape": [4, -1]}, "[4, ?]"),
    ],
)
def test_reshape_shapes(shape, params, expected):
    assert infer("reshape", shape, **params) == [expected]


@pytest.mark.parametrize(
    ("shape", "params", "env"),
    [
        (("B", "T", 64), {"shape": [4, 16], "start_dim": 2}, {"B": 2, "T": 3}),
        (("B", "T", 64), {"shape": [4, -1], "start_dim": -1}, {"B": 2, "T": 3}),
        (("B", 4, "T"), {"shape": [2, -1], "start_dim": 1}, {"B": 2, "T": 3}),
        ((6, 4), {"shape": [3, -1]}, {}),
        (("B", 12), {"shape": [-1]}, {"B": 2}),
    ],
)
def test_reshape_runs_as_inferred(shape, params, env):
    runs_as_inferred("reshape", shape, env=env, **params)


def test_reshape_element_count_must_match():
    p = problem("reshape", ("B", 12), shape=[5, 2], start_dim=1)
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "reshape", "x")
    assert p.message == "the reshaped dims [12] hold 12 elements, shape [5, 2] holds 10"
    assert (p.expected, p.actual) == ("10 elements in dims 1..", "[B, 12]")
    assert p.hint == "use -1 once in shape for the size that follows from the rest"


def test_reshape_minus_one_must_divide():
    p = problem("reshape", ("B", 12), shape=[5, -1], start_dim=1)
    assert (p.code, p.port) == ("E_SHAPE", "x")
    assert p.message == "the reshaped dims [12] hold 12 elements, which 5 does not divide"
    assert (p.expected, p.hint) == (
        "a multiple of 5 elements in dims 1..",
        "the sizes in shape must multiply to a divisor of 12",
    )


def test_reshape_minus_one_over_symbolic_dims_must_divide_provably():
    p = problem("reshape", ("B", "T"), shape=[5, -1], start_dim=1)
    assert (p.code, p.port) == ("E_SHAPE", "x")
    assert p.message == "the reshaped dims [T] hold T elements, which cannot be shown to divide by 5"
    assert p.hint == "give those input dims as ints, or write every size of shape"


def test_reshape_parameter_errors():
    p = problem("reshape", ("B", 12), shape=[0, -1], start_dim=1)
    assert (p.code, p.message, p.hint) == (
        "E_PARAM",
        "shape [0, -1] has a 0 next to -1, so -1 could be any size",
        "write every size when one of them is 0",
    )
    p = problem("reshape", ("B", 12), shape=[-1, -1])
    assert (p.code, p.message) == ("E_PARAM", "parameter 'shape' may contain -1 at most once, got [-1, -1]")
    p = problem("reshape", ("B", 12), shape=[-1], start_dim=3)
    assert (p.code, p.message, p.expected, p.actual) == (
        "E_PARAM",
        "start_dim=3 is out of range for a rank-2 input",
        "-2 .. 2",
        3,
    )


# --- flatten --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "params", "expected"),
    [
        (("N", "C", "H", "W"), {}, "[N, C*H*W]"),
        (("N", 64, 7, 7), {}, "[N, 3136]"),
        (("N", "C", "H", "W"), {"start_dim": 2}, "[N, C, H*W]"),
        (("N", "C", "H", "W"), {"start_dim": 0, "end_dim": 1}, "[C*N, H, W]"),
        (("N", "*rest"), {}, "[N, ?]"),
        (("N", 3), {"start_dim": 1}, "[N, 3]"),
    ],
)
def test_flatten_shapes(shape, params, expected):
    assert infer("flatten", shape, **params) == [expected]


@pytest.mark.parametrize(
    "params", [{}, {"start_dim": 2}, {"start_dim": 0, "end_dim": -2}, {"start_dim": -2, "end_dim": -2}]
)
def test_flatten_runs_as_inferred(params):
    runs_as_inferred("flatten", ("N", "C", "H", "W"), env={"N": 2, "C": 3, "H": 4, "W": 5}, **params)


def test_flatten_errors():
    p = problem("flatten", ("B", 12, 3), start_dim=2, end_dim=1)
    assert (p.code, p.node, p.op) == ("E_PARAM", "n", "flatten")
    assert p.message == "start_dim=2 comes after end_dim=1 in a rank-3 input"
    assert (p.expected, p.actual) == ("start_dim <= end_dim (dims 2 and 1)", 2)
    p = problem("flatten", ("B", 12, 3), start_dim=3)
    assert (p.code, p.message, p.expected) == ("E_PARAM", "start_dim=3 is out of range for a rank-3 input", "-3 .. 2")


# --- permute, transpose ---------------------------------------------------------------------------------


def test_permute_and_transpose_shapes():
    assert infer("permute", ("B", "C", "H", "W"), dims=[0, 2, 3, 1]) == ["[B, H, W, C]"]
    assert infer("permute", ("B", "C", "H"), dims=[-1, 0, 1]) == ["[H, B, C]"]
    assert infer("transpose", ("B", "C", "T"), dim0=1, dim1=2) == ["[B, T, C]"]
    assert infer("transpose", ("*batch", "T", "D"), dim0=-1, dim1=-2) == ["[*batch, D, T]"]
    runs_as_inferred("permute", ("B", "C", "H"), env={"B": 2, "C": 3, "H": 4}, dims=[2, 0, 1])
    runs_as_inferred("transpose", ("B", "C", "H"), env={"B": 2, "C": 3, "H": 4}, dim0=-1, dim1=0)


def test_permute_errors():
    p = problem("permute", ("B", 12, 3), dims=[0, 1])
    assert (p.code, p.node, p.op) == ("E_PARAM", "n", "permute")
    assert p.message == "dims [0, 1] has 2 entries for a rank-3 input [B, 12, 3]"
    assert (p.expected, p.actual) == ("a permutation of 0..2", [0, 1])
    p = problem("permute", ("B", 12, 3), dims=[0, 1, -2])
    assert (p.code, p.message) == ("E_PARAM", "dims [0, 1, -2] names dim 1 twice")
    p = problem("permute", ("B", 12, 3), dims=[0, 1, 3])
    assert (p.code, p.message, p.expected) == ("E_PARAM", "dims entry 3 is out of range for a rank-3 input", "-3 .. 2")


def test_transpose_dim_out_of_range():
    p = problem("transpose", ("B", 12, 3), dim0=0, dim1=3)
    assert (p.code, p.message, p.expected, p.actual) == (
        "E_PARAM",
        "dim1=3 is out of range for a rank-3 input",
        "-3 .. 2",
        3,
    )


# --- mean -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "params", "expected"),
    [
        (("B", "T", 8), {"dim": [1]}, "[B, 8]"),
        (("B", "T", 8), {"dim": [1, -1]}, "[B]"),
        (("B", "T", 8), {"dim": [1], "keepdim": True}, "[B, 1, 8]"),
        (("*batch", "T", 8), {"dim": [-2], "keepdim": True}, "[*batch, 1, 8]"),
        (("B", "C", "H", "W"), {"dim": [2, 3]}, "[B, C]"),
    ],
)
def test_mean_shapes(shape, params, expected):
    assert infer("mean", shape, **params) == [expected]
    if "*batch" not in shape:
        runs_as_inferred("mean", shape, env={"B": 2, "T": 3, "C": 4, "H": 5, "W": 6}, **params)


def test_mean_errors():
    p = problem("mean", ("B", 12, 3), dim=[1, -2])
    assert (p.code, p.node, p.op, p.message) == ("E_PARAM", "n", "mean", "dim [1, -2] names dim 1 twice")
    assert (p.expected, p.actual) == ("distinct dims", [1, -2])
    p = problem("mean", ("B", 12, 3), dim=[])
    assert (p.code, p.message) == ("E_PARAM", "'dim' is empty")
    p = problem("mean", ("B", 12, 3), dim=[3])
    assert (p.code, p.message) == ("E_PARAM", "dim entry 3 is out of range for a rank-3 input")
    p = problem("mean", ("B", 12, 3), dim=[1], dtypes=["int64"])
    assert (p.code, p.port, p.message) == ("E_DTYPE", "x", "needs dtype float, got int64")


def test_shape_ops_keep_dtype():
    for op, params in [("reshape", {"shape": [-1]}), ("flatten", {}), ("transpose", {"dim0": 0, "dim1": 1})]:
        g = one_node_graph(op, ((2, 3),), ["int64"], params)
        assert hndl.check(g).nodes[0].out_types[0].dtype == "int64"
