"""Element-wise ops (hndl/ops/_elementwise.py, _elementwise_rows.py): every row's shape, dtype and values against torch, numbers as
operands, bool refusals, and where, clamp, cast, tril/triu, roll."""

from __future__ import annotations

import operator

import pytest
import torch
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl
from hndl.ops._elementwise import BINARY, UNARY
from hndl.torch import layers

DTYPES = ["float32", "float16", "int64", "int8", "uint8", "bool"]


def sample(shape: tuple[int, ...], dtype: str, seed: int = 0) -> torch.Tensor:
    """Values every op is defined on: positive, so log and sqrt are finite, and small, so integer powers fit."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == "bool":
        return torch.rand(shape, generator=gen) > 0.5
    if dtype in ("float32", "float16", "float64", "bfloat16"):
        return (torch.rand(shape, generator=gen) * 3 + 0.25).to(getattr(torch, dtype))
    return torch.randint(1, 4, shape, generator=gen).to(getattr(torch, dtype))


def checked_type(op: str, dtypes: list[str], shapes: tuple = ((2, 3),), **params: object) -> hndl.TensorType:
    return hndl.check(one_node_graph(op, shapes, dtypes, params)).nodes[0].out_types[0]


def run(op: str, tensors: list[torch.Tensor], **params: object) -> torch.Tensor:
    shapes = tuple(tuple(t.shape) for t in tensors)
    dtypes = [str(t.dtype).removeprefix("torch.") for t in tensors]
    model = hndl.build(one_node_graph(op, shapes, dtypes, params))
    return model(*tensors)


def assert_same(got: torch.Tensor, expected: torch.Tensor) -> None:
    """Bit for bit, NaN where torch has NaN (0/0)."""
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def torch_result(fn, *args):
    try:
        return fn(*args), None
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        return None, exc


# --- unary rows --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("row", UNARY, ids=[r.name for r in UNARY])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_unary_row_gives_torchs_dtype_and_values_or_refuses_what_torch_refuses(row, dtype):
    x = sample((2, 3), dtype)
    expected, error = torch_result(getattr(torch, row.torch), x)
    if error is not None:
        p = problem(row.name, (2, 3), dtypes=[dtype])
        assert (p.code, p.port, p.actual) == ("E_DTYPE", "x", "bool")
        assert p.message == f"{row.name} does not take a bool tensor (torch.{row.torch} refuses it)"
        return
    assert checked_type(row.name, [dtype]).dtype == str(expected.dtype).removeprefix("torch.")
    assert_same(run(row.name, [x]), expected)


@pytest.mark.parametrize("row", UNARY, ids=[r.name for r in UNARY])
def test_a_unary_row_keeps_symbolic_and_open_shapes(row):
    assert infer(row.name, ("B", "T", 8)) == ["[B, T, 8]"]
    assert infer(row.name, ("*batch", 8)) == ["[*batch, 8]"]
    runs_as_inferred(row.name, ("B", "T", 8), env={"B": 2, "T": 3})


def test_a_category_input_keeps_its_category_or_becomes_float():
    assert checked_type("neg", [None]).dtype == "float"
    assert checked_type("exp", ["int"]).dtype == "float32"
    assert checked_type("exp", [None]).dtype == "float"
    assert checked_type("logical_not", [None]).dtype == "bool"


def test_neg_of_a_mask_says_what_to_use():
    p = problem("neg", ("B", 4), dtypes=["bool"])
    assert (p.code, p.node, p.op, p.port) == ("E_DTYPE", "n", "neg", "x")
    assert (p.expected, p.actual) == ("a number dtype (integer or floating)", "bool")
    assert p.hint == "for a mask, use logical_not (not), logical_xor (differs) or cast it to an integer dtype first"


# --- binary rows -------------------------------------------------------------------------------------------

PAIRS = [
    ("float32", "float32"),
    ("int64", "float32"),
    ("float16", "float32"),
    ("int8", "uint8"),
    ("bool", "bool"),
    ("bool", "int64"),
    ("int64", "int64"),
    ("float16", "bfloat16"),
]


@pytest.mark.parametrize("row", BINARY, ids=[r.name for r in BINARY])
@pytest.mark.parametrize(("da", "db"), PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_a_binary_row_gives_torchs_dtype_and_values_or_refuses_what_torch_refuses(row, da, db):
    a, b = sample((2, 1, 3), da, 1), sample((4, 3), db, 2)
    expected, error = torch_result(getattr(torch, row.torch), a, b)
    if error is not None:
        p = problem(row.name, (2, 1, 3), (4, 3), dtypes=[da, db])
        assert (p.code, p.actual) == ("E_DTYPE", "bool")
        return
    t = checked_type(row.name, [da, db], ((2, 1, 3), (4, 3)))
    assert (str(t), t.dtype) == (f"[2, 4, 3] {t.dtype}", str(expected.dtype).removeprefix("torch."))
    assert_same(run(row.name, [a, b]), expected)


NUMBERS = [2, 2.0, -1, 0.5]
SCALAR_ROWS = [r for r in BINARY if r.operator is not None]


@pytest.mark.parametrize("row", SCALAR_ROWS, ids=[r.name for r in SCALAR_ROWS])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int8", "bool"])
@pytest.mark.parametrize("number", NUMBERS, ids=[repr(n) for n in NUMBERS])
@pytest.mark.parametrize("side", ["a", "b"])
def test_a_number_operand_promotes_and_computes_as_a_python_number_does(row, dtype, number, side):
    x = sample((2, 3), dtype)
    fn = getattr(operator, row.operator)
    expected, error = torch_result(fn, *((number, x) if side == "a" else (x, number)))
    if error is not None:
        p = problem(row.name, (2, 3), dtypes=[dtype], **{side: number})
        assert p.code == ("E_PARAM" if "negative integer powers" in str(error) else "E_DTYPE")
        return
    assert checked_type(row.name, [dtype], **{side: number}).dtype == str(expected.dtype).removeprefix("torch.")
    assert_same(run(row.name, [x], **{side: number}), expected)


def test_a_number_operand_builds_the_scalar_layers():
    right = hndl.build(one_node_graph("sub", (("B", 3),), None, {"b": 1})).nodes["n_n"]
    left = hndl.build(one_node_graph("sub", (("B", 3),), None, {"a": 1})).nodes["n_n"]
    both = hndl.build(one_node_graph("sub", (("B", 3), ("B", 3)), None, {})).nodes["n_n"]
    assert (type(right), right.scalar, right.function) == (layers.TensorScalar, 1, "operator.sub")
    assert (type(left), left.scalar) == (layers.ScalarTensor, 1)
    assert (type(both), both.function) == (layers.Binary, "torch.sub")
    x = torch.randn(2, 3)
    assert torch.equal(right(x), x - 1)
    assert torch.equal(left(x), 1 - x)


def test_add_and_mul_keep_their_layer_classes_and_take_numbers_too():
    assert type(hndl.build(one_node_graph("add", ((2, 3), (2, 3)), None, {})).nodes["n_n"]) is layers.Add
    assert type(hndl.build(one_node_graph("mul", ((2, 3), (2, 3)), None, {})).nodes["n_n"]) is layers.Mul
    indices = torch.arange(6).reshape(2, 3)
    out = run("mul", [indices], b=3)
    assert out.dtype == torch.int64
    assert torch.equal(out, indices * 3)


def test_a_number_for_both_operands_is_e_param():
    g = hndl.Graph("t")
    g.input("x", ("B", 3))
    g.output(g.add("sub", name="n", a=1, b=2))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    p = info.value.problems[0]
    assert (p.code, p.node, p.message) == ("E_PARAM", "n", "sub needs a tensor operand: a and b are both numbers")
    assert p.hint == "leave b out and wire its tensor in: in: [...]"


def test_a_number_and_two_inputs_is_one_input_too_many():
    p = problem("sub", ("B", 3), ("B", 3), b=1.0)
    assert (p.code, p.message) == ("E_REF", "sub takes 1 input, got 2")


def test_ops_torch_runs_on_tensors_only_take_no_number():
    p = problem("minimum", ("B", 3), b=0.0)
    assert (p.code, p.message) == ("E_PARAM", "unknown parameter 'b'")
    assert p.hint == "minimum takes no parameters"


def test_binary_ops_name_both_inputs_when_shapes_clash():
    p = problem("div", ("B", 3), ("B", 4))
    assert (p.code, p.port) == ("E_SHAPE", "b")
    assert p.message == "'x0' [B, 3] and 'x1' [B, 4] do not broadcast: dim -1 is 3 in 'x0' and 4 in 'x1'"


def test_comparisons_give_bool_and_a_mask_from_a_number():
    assert checked_type("lt", ["int64", "float32"], ((2, 3), (3,))).dtype == "bool"
    x = torch.tensor([[-1.0, 0.0, 2.0]])
    assert torch.equal(run("ne", [x], b=0), x != 0)
    assert torch.equal(run("gt", [x], a=0.5), x < 0.5)


def test_an_integer_to_a_negative_integer_power_is_refused_as_torch_does():
    p = problem("pow", ("B", 3), dtypes=["int64"], b=-1)
    assert (p.code, p.message) == (
        "E_PARAM",
        "an integer tensor to a negative integer power (-1) is not an integer (torch.pow refuses it)",
    )
    assert p.hint == "write b: -1.0 for a float result, or cast the base to a floating dtype first"
    assert checked_type("pow", ["int64"], b=-1.0).dtype == "float32"


def test_pow_of_two_bool_tensors_is_refused_but_a_bool_to_an_integer_power_is_not():
    p = problem("pow", (2, 3), (2, 3), dtypes=["bool", "bool"])
    assert (p.code, p.port, p.message) == ("E_DTYPE", "a", "pow of bool tensors is not defined (torch.pow refuses it)")
    assert checked_type("pow", ["bool"], b=2).dtype == "int64"


# --- where -------------------------------------------------------------------------------------------------


def test_where_broadcasts_three_operands_and_promotes_the_branches():
    t = checked_type("where", ["bool", "int64", "float16"], ((2, 1, 3), (4, 1), (3,)))
    assert str(t) == "[2, 4, 3] float16"


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [(-100.0, 0.0, torch.float32), (1, 0, torch.int64), (None, 0.5, torch.float32), (2, None, torch.int64)],
)
def test_where_with_numbers_matches_torch(a, b, expected):
    mask = torch.tensor([[True, False, True]])
    other = torch.tensor([[1, 2, 3]])
    tensors = [mask] + ([other] if a is None or b is None else [])
    got = run("where", tensors, **{k: v for k, v in (("a", a), ("b", b)) if v is not None})
    want = torch.where(mask, other if a is None else a, other if b is None else b)
    assert got.dtype == want.dtype == expected
    assert torch.equal(got, want)


def test_where_takes_an_infinity_written_in_yaml_and_keeps_it_through_dumps():
    # -inf where a mask holds is how attention scores are masked before a softmax
    text = """
hndl: 1
name: masked_scores
inputs:
  scores: {shape: [B, T, T]}
  future: {shape: [B, T, T], dtype: bool}
nodes:
  masked: {op: where, in: [future, scores], a: -.inf}
  probs: {op: softmax, in: masked, dim: -1}
outputs: [probs]
"""
    graph = hndl.loads(text)
    assert hndl.loads(hndl.dumps(graph)).nodes["masked"].params["a"] == float("-inf")
    scores = torch.randn(2, 4, 4)
    future = torch.ones(4, 4, dtype=torch.bool).triu(1).expand(2, 4, 4)
    got = hndl.build(graph)(scores, future)
    assert torch.equal(got, torch.softmax(scores.masked_fill(future, float("-inf")), -1))
    assert run("where", [future], a=float("nan"), b=0.0).isnan().sum() == future.sum()


def test_a_number_parameter_of_arithmetic_stays_finite():
    p = problem("add", (2, 3), b=float("inf"))
    assert (p.code, p.message) == ("E_PARAM", "parameter 'b' must be a finite number, got inf")


def test_where_needs_a_bool_condition():
    p = problem("where", ("B", 3), ("B", 3), ("B", 3))
    assert (p.code, p.port, p.message) == ("E_DTYPE", "condition", "needs dtype bool, got float")
    assert p.hint == (
        "declare the input's dtype: bool and pass a bool tensor (mask.bool() in torch), or make it bool in the graph: "
        "{op: ne, in: x, b: 0} or {op: cast, dtype: bool}"
    )


# --- clamp, cast, tril, triu, roll --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
@pytest.mark.parametrize(("lo", "hi"), [(0, None), (None, 2.5), (0.5, 2), (1, 2)])
def test_clamp_matches_torch(dtype, lo, hi):
    x = sample((2, 5), dtype)
    expected, error = torch_result(lambda t: torch.clamp(t, min=lo, max=hi), x)
    params = {"min": lo, "max": hi}
    if error is not None:
        pytest.skip(f"torch refuses it: {error}")
    assert checked_type("clamp", [dtype], ((2, 5),), **params).dtype == str(expected.dtype).removeprefix("torch.")
    got = run("clamp", [x], **params)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected)


def test_clamp_needs_a_bound():
    p = problem("clamp", ("B", 3))
    assert (p.code, p.message, p.expected, p.actual) == (
        "E_PARAM",
        "clamp needs a bound: min, max or both",
        "min or max",
        "neither",
    )


def test_cast_converts_and_returns_its_input_when_the_dtype_is_already_right():
    mask = torch.tensor([True, False])
    assert torch.equal(run("cast", [mask], dtype="float32"), mask.float())
    model = hndl.build(one_node_graph("cast", ((2,),), ["float32"], {"dtype": "float32"}))
    x = torch.ones(2)
    assert model(x) is x
    assert checked_type("cast", ["bool"], ((2,),), dtype="int64").dtype == "int64"


def test_cast_needs_a_concrete_dtype():
    p = problem("cast", ("B",), dtype="float")
    assert (p.code, p.message) == ("E_PARAM", "cast needs a concrete dtype, got the category 'float'")
    assert p.hint == "name the dtype to convert to: float32 for float, int64 for int"


@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_triangles_match_torch(op, diagonal):
    x = torch.randn(2, 4, 5)
    assert torch.equal(run(op, [x], diagonal=diagonal), getattr(torch, op)(x, diagonal))
    assert infer(op, ("B", "T", "T")) == ["[B, T, T]"]


def test_a_triangle_needs_a_matrix():
    p = problem("tril", ("T",))
    assert (p.code, p.port, p.message) == ("E_SHAPE", "x", "expected rank >= 2 [*batch, rows, cols], got rank 1 [T]")


@pytest.mark.parametrize(("shifts", "dims"), [(3, 1), ([-3, -3], [1, 2]), (5, None), ([1, 2], [0, 0])])
def test_roll_matches_torch(shifts, dims):
    x = torch.randn(2, 7, 7, 3)
    assert torch.equal(run("roll", [x], shifts=shifts, dims=dims), torch.roll(x, shifts, dims))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"shifts": [1, 2], "dims": [1]}, "roll takes one shift per dim: 2 shifts for 1 dims"),
        ({"shifts": [1, 2]}, "without dims, roll takes one shift (over the flattened input), got 2"),
        ({"shifts": 1, "dims": 3}, "dims entry 3 is out of range for a rank-3 input"),
        ({"shifts": 1.5}, "parameter 'shifts' must be an integer or a list of integers, got number 1.5"),
    ],
)
def test_roll_refuses_shifts_that_do_not_fit(params, message):
    p = problem("roll", ("B", 4, 4), **params)
    assert (p.code, p.message) == ("E_PARAM", message)


# --- models of row-made ops pickle, copy and compile like any -------------------------------------------------


def _row_model() -> tuple[hndl.GraphModule, torch.Tensor]:
    g = hndl.Graph("rows")
    x = g.input("x", ("B", 6))
    h = g.add("add", x, g.add("buffer", name="pe", shape=[6], init="arange", dtype="float32"), name="h")
    h = g.add("hardswish", g.add("clamp", g.add("sub", h, name="s", a=1.0), name="c", min=-2.0), name="hs")
    g.output(g.add("where", g.add("gt", h, name="pos", b=0), h, name="w", b=0.0))
    return hndl.build(g), torch.randn(3, 6)


def test_a_model_of_row_made_ops_pickles_as_op_names():
    import io
    import pickle

    model, x = _row_model()
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    again = torch.load(buffer, weights_only=False)
    assert torch.equal(again(x), model(x))
    opdef = hndl.registry.find("sub")
    assert pickle.loads(pickle.dumps(opdef)) is opdef


def test_a_pickled_op_that_is_not_registered_here_is_e_op():
    import pickle

    hndl.op("test_gone", inputs=[hndl.Port("x")])(lambda p, i: None)
    data = pickle.dumps(hndl.registry.find("test_gone"))
    hndl.registry.unregister("test_gone")
    with pytest.raises(hndl.HndlError) as info:
        pickle.loads(data)
    assert info.value.problems[0].message == (
        "unknown op 'test_gone': the pickled model uses it, and it is not registered in this process"
    )


def test_a_model_of_row_made_ops_compiles_without_a_graph_break():
    model, x = _row_model()
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0
    # Inductor fuses the rows into one kernel and may reorder float math (torch 2.4 builds it with -ffast-math):
    # close, not always bit-equal.
    torch.testing.assert_close(torch.compile(model)(x), model(x))
