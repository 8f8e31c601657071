"""Symbolic dimensions: parsing, canonical forms, evaluation."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hndl._dims import DimError, dim_add, dim_floordiv, dim_mul, dim_sub, evaluate, parse_dim, substitute, symbol


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("C*H*W", "C*H*W"),
        ("D+E", "D+E"),
        ("E+D", "D+E"),
        ("(H-3)//2+1", "(H-3)//2+1"),
        ("2*(H+1)", "2*H+2"),
        ("(2*H+4)//2", "H+2"),
        ("H//1", "H"),
        ("7", "7"),
        ("3*4-2", "10"),
    ],
)
def test_expressions_print_in_canonical_form(text, shown):
    assert str(parse_dim(text)) == shown


def test_equal_expressions_compare_equal():
    assert parse_dim("D+E") == parse_dim("E+D")
    assert parse_dim("2*(H+1)") == parse_dim("H+H+2")
    assert parse_dim("B*T") != parse_dim("B+T")


def test_constants_fold_to_ints():
    assert parse_dim("(8-2)//3") == 2
    assert isinstance(parse_dim("2*3"), int)
    assert dim_sub(symbol("B"), symbol("B")) == 0


@pytest.mark.parametrize("bad", ["", "B+", "(B", "B)", "3.5", "B**2", "B/2", "x y", "__import__('os')"])
def test_malformed_expressions_are_rejected_without_eval(bad):
    with pytest.raises(DimError):
        parse_dim(bad)


def test_booleans_are_not_dims():
    with pytest.raises(DimError):
        parse_dim(True)


def test_evaluate_reports_unbound_symbols():
    with pytest.raises(DimError, match="'H' is not bound"):
        evaluate(parse_dim("H+1"), {})


def test_division_by_zero_is_a_dim_error():
    with pytest.raises(DimError):
        dim_floordiv(symbol("H"), 0)
    with pytest.raises(DimError):
        evaluate(dim_floordiv(symbol("H"), symbol("S")), {"H": 4, "S": 0})


def test_substitute_keeps_unbound_symbols():
    assert substitute(parse_dim("B*T+D"), {"B": 2}) == parse_dim("2*T+D")


# -- properties ------------------------------------------------------------------------------------------

SYMS = ["B", "T", "D", "H"]


@st.composite
def expressions(draw, depth=3):
    """A random expression as text, with its Python value under a random binding."""
    if depth == 0 or draw(st.booleans()):
        if draw(st.booleans()):
            n = draw(st.integers(0, 20))
            return str(n), lambda env, n=n: n
        s = draw(st.sampled_from(SYMS))
        return s, lambda env, s=s: env[s]
    op = draw(st.sampled_from(["+", "-", "*", "//"]))
    left_text, left = draw(expressions(depth=depth - 1))
    if op == "//":
        d = draw(st.integers(1, 5))
        return f"({left_text})//{d}", lambda env: left(env) // d
    right_text, right = draw(expressions(depth=depth - 1))
    fn = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}[op]
    return f"({left_text}){op}({right_text})", lambda env: fn(left(env), right(env))


@settings(max_examples=300, deadline=None)
@given(expr=expressions(), env=st.fixed_dictionaries({s: st.integers(1, 50) for s in SYMS}))
def test_parsed_expressions_evaluate_like_python(expr, env):
    text, value = expr
    assert evaluate(parse_dim(text), env) == value(env)


@settings(max_examples=300, deadline=None)
@given(expr=expressions(), env=st.fixed_dictionaries({s: st.integers(1, 50) for s in SYMS}))
def test_printed_form_parses_back_to_the_same_dim(expr, env):
    text, _ = expr
    d = parse_dim(text)
    again = parse_dim(str(d))
    assert again == d
    assert evaluate(again, env) == evaluate(d, env)


@settings(max_examples=200, deadline=None)
@given(
    a=st.integers(-5, 5),
    b=st.integers(-5, 5),
    env=st.fixed_dictionaries({s: st.integers(1, 30) for s in SYMS}),
)
def test_arithmetic_helpers_agree_with_evaluation(a, b, env):
    x = dim_add(dim_mul(a, symbol("B")), b)
    y = dim_mul(symbol("T"), symbol("D"))
    assert evaluate(dim_add(x, y), env) == a * env["B"] + b + env["T"] * env["D"]
    assert evaluate(dim_sub(x, y), env) == a * env["B"] + b - env["T"] * env["D"]
    assert evaluate(dim_mul(x, y), env) == (a * env["B"] + b) * env["T"] * env["D"]


# --- nested floor divisions simplify ---------------------------------------------------------------------------


def test_nested_floor_divisions_by_positive_ints_are_one_division() -> None:
    assert str(parse_dim("((H-1)//2)//2")) == "(H-1)//4"
    assert str(parse_dim("(((((H-1)//2)//2)//2)//2)//2+1")) == "(H-1)//32+1"
    # A strided layer after another: ((H-1)//2+1 - 1)//2 + 1, the ResNet stem's pattern.
    assert str(parse_dim("((H-1)//2+1-1)//2+1")) == "(H-1)//4+1"


def test_whole_multiples_come_out_of_a_division() -> None:
    assert str(parse_dim("(2*H+1)//2")) == "H"
    assert str(parse_dim("(H+4)//2")) == "H//2+2"
    assert str(parse_dim("(H-2)//2+1")) == "H//2"


@st.composite
def division_chains(draw) -> str:
    text = draw(st.sampled_from(["H", "H-1", "2*H+3", "H+W", "3*H-W"]))
    for _ in range(draw(st.integers(1, 4))):
        text = f"({text}){draw(st.sampled_from(['+', '-']))}{draw(st.integers(0, 5))}"
        text = f"({text})//{draw(st.integers(1, 4))}"
        if draw(st.booleans()):
            text = f"{draw(st.integers(1, 3))}*({text})"
    return text


def _python_value(text: str, env: dict[str, int]) -> int:
    return eval(text, {}, dict(env))


@settings(max_examples=300, deadline=None)
@given(text=division_chains(), h=st.integers(-40, 200), w=st.integers(-40, 200))
def test_simplified_divisions_evaluate_as_python_does(text: str, h: int, w: int) -> None:
    env = {"H": h, "W": w}
    simplified = parse_dim(text)
    assert evaluate(simplified, env) == _python_value(text, env)
    assert evaluate(parse_dim(str(simplified)), env) == _python_value(text, env)  # its text reads back the same
