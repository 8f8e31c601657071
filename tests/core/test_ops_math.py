"""Binary arithmetic: add, mul (broadcasting, dtype promotion) and matmul (torch.matmul rules)."""

from __future__ import annotations

import pytest
import torch
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl


def _dtype(op: str, *shapes, dtypes: list) -> str:
    return hndl.check(one_node_graph(op, shapes, dtypes, {})).nodes[0].out_types[0].dtype


# --- add, mul -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (("B", "T", 8), ("B", "T", 8), "[B, T, 8]"),
        (("B", 1, 8), ("T", 1), "[B, T, 8]"),
        ((8,), ("B", "T", 8), "[B, T, 8]"),
        (("B", "T", 1), (1, 5), "[B, T, 5]"),
        (("*batch", 8), (8,), "[*batch, 8]"),
        ((1, "T", 8), ("B", 1, 1), "[B, T, 8]"),
        (("B", 8), ("B", "D"), "[B, 8]"),  # D must be 8 (or 1) at run time
        (("B", "D"), ("B", "E"), "[B, ?]"),  # either may be 1: known only at run time
        (("*batch", 8), ("*other", 8), "[...]"),
    ],
)
def test_broadcast_shapes(op, a, b, expected):
    assert infer(op, a, b) == [expected]


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize(
    ("a", "b", "env"),
    [
        (("B", 1, 8), ("T", 1), {"B": 2, "T": 3}),
        ((8,), ("B", "T", 8), {"B": 2, "T": 3}),
        (("B", "T", 1), (1, 5), {"B": 1, "T": 4}),
        (("B", "D"), ("B", "E"), {"B": 2, "D": 1, "E": 6}),
    ],
)
def test_broadcast_runs_as_inferred(op, a, b, env):
    runs_as_inferred(op, a, b, env=env)
    x1, x2 = torch.ones(2, 3), torch.full((3,), 2.0)
    model = hndl.build(one_node_graph(op, ((2, 3), (3,)), None, {}))
    assert torch.equal(model(x1, x2), x1 + x2 if op == "add" else x1 * x2)


def test_add_names_both_inputs_wired_in_when_dims_clash():
    p = problem("add", ("B", 3), ("B", 4))
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "add", "b")
    assert p.message == "'x0' [B, 3] and 'x1' [B, 4] do not broadcast: dim -1 is 3 in 'x0' and 4 in 'x1'"
    assert (p.expected, p.actual) == ("dim -1 equal to 3, or 1 (broadcast with 'x0' [B, 3])", "[B, 4]")
    assert p.hint == "make dim -1 of 'x1' 3 (or 1, to broadcast), or that of 'x0' 4"


def test_mul_clash_in_an_inner_dim():
    p = problem("mul", ("B", 3, 5), (4, 1))
    assert p.message == "'x0' [B, 3, 5] and 'x1' [4, 1] do not broadcast: dim -2 is 3 in 'x0' and 4 in 'x1'"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("float32", "float32", "float32"),
        ("int64", "float32", "float32"),
        ("float16", "float64", "float64"),
        ("float16", "bfloat16", "float32"),
        ("uint8", "int8", "int16"),
        ("int32", "int64", "int64"),
        ("bool", "int32", "int32"),
        ("float", "int64", "float"),
        ("float", "float64", "float"),
        ("int", "float16", "float16"),
        ("any", "float32", "any"),
    ],
)
def test_add_promotes_dtypes_like_torch(a, b, expected):
    assert _dtype("add", ("B", 3), ("B", 3), dtypes=[a, b]) == expected
    assert _dtype("mul", ("B", 3), ("B", 3), dtypes=[b, a]) == expected


@pytest.mark.parametrize(
    ("a", "b"), [("int64", "float32"), ("float16", "bfloat16"), ("uint8", "int8"), ("bool", "int32")]
)
def test_promotion_matches_torch(a, b):
    got = torch.ones(2, dtype=getattr(torch, a)) + torch.ones(2, dtype=getattr(torch, b))
    assert str(got.dtype).removeprefix("torch.") == _dtype("add", (2,), (2,), dtypes=[a, b])


# --- matmul ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((5,), (5,), "[]"),
        ((3, 5), (5,), "[3]"),
        ((5,), (3, 5, 2), "[3, 2]"),
        (("N", "K"), ("K", "M"), "[N, M]"),
        (("B", "T", 64), (64, 10), "[B, T, 10]"),
        (("B", 1, "T", 4), ("C", 4, 5), "[B, C, T, 5]"),
        (("B", "H", "T", "D"), ("B", "H", "D", "S"), "[B, H, T, S]"),
        (("*batch", "T", 4), (4, 5), "[*batch, T, 5]"),
        (("*batch", 4), (4, 5), "[...]"),  # *batch may be empty: a could be a vector
    ],
)
def test_matmul_shapes(a, b, expected):
    assert infer("matmul", a, b) == [expected]


@pytest.mark.parametrize(
    ("a", "b", "env"),
    [
        ((5,), (5,), {}),
        ((3, 5), (5,), {}),
        ((5,), (3, 5, 2), {}),
        (("B", 1, "T", 4), ("C", 4, 5), {"B": 2, "C": 3, "T": 6}),
        (("B", "T", 64), (64, 10), {"B": 2, "T": 3}),
    ],
)
def test_matmul_runs_as_inferred(a, b, env):
    runs_as_inferred("matmul", a, b, env=env)


def test_matmul_inner_dims_must_agree():
    p = problem("matmul", ("B", 3, 5), (4, 2))
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "matmul", "b")
    assert p.message == (
        "'x0' [B, 3, 5] and 'x1' [4, 2] cannot be multiplied: the last dim of 'x0' (5) must equal dim -2 of 'x1' (4)"
    )
    assert (p.expected, p.actual) == ("dim -2 = 5", "[4, 2]")
    assert p.hint == "transpose one operand, or check which dim holds the features"
    p = problem("matmul", (5,), (4,))
    assert (p.expected, p.actual) == ("dim 0 = 5", "[4]")


def test_matmul_batch_dims_must_broadcast():
    p = problem("matmul", (2, 3, 5), (4, 5, 2))
    assert (p.code, p.port) == ("E_SHAPE", "b")
    assert p.message == "the batch dims of 'x0' [2, 3, 5] and 'x1' [4, 5, 2] do not broadcast"
    assert p.hint == "batch dims (all but the last two) must be equal, or 1"


def test_matmul_rejects_scalars_and_mixed_dtypes():
    p = problem("matmul", (), (4,))
    assert (p.code, p.port, p.message) == (
        "E_SHAPE",
        "a",
        "matmul needs operands with at least 1 dim, got a 0-d tensor",
    )
    p = problem("matmul", ("B", 3, 4), (4, 2), dtypes=["float32", "float64"])
    assert (p.code, p.port, p.message) == ("E_DTYPE", "b", "dtype must match 'x0' (float32), got float64 in 'x1'")
