"""Shape patterns, dtype rules and contracts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hndl._contracts import (
    Contract,
    ShapePattern,
    TensorType,
    Variadic,
    dtype_satisfies,
    format_shape,
    parse_dtype_rule,
)
from hndl._dims import parse_dim, symbol


def test_pattern_parses_lists_and_strings_alike():
    assert ShapePattern.parse(["B", 784]) == ShapePattern.parse("B, 784") == ShapePattern.parse("B 784")
    assert str(ShapePattern.parse(["*batch", "D"])) == "[*batch, D]"


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        (["*a", "*b"], "two variadic entries"),
        (["B", -1], "negative"),
        (["B", 2.5], "bad shape entry"),
        ("B", None),
        (42, "must be a list"),
    ],
)
def test_bad_patterns_are_rejected_with_a_reason(spec, reason):
    if reason is None:
        assert ShapePattern.parse(spec).entries == ("B",)
        return
    with pytest.raises(ValueError, match=reason):
        ShapePattern.parse(spec)


def test_match_binds_symbols_and_checks_agreement():
    p = ShapePattern.parse(["B", "T", "D"])
    env: dict = {}
    assert p.match((2, 5, 8), env, strict=True) == ""
    assert env == {"B": 2, "T": 5, "D": 8}
    q = ShapePattern.parse(["B", "D"])
    assert q.match((3, 8), env, strict=True) == "dim 0 is B, bound to 2, but got 3"


def test_match_reports_rank_and_literal_mismatch():
    p = ShapePattern.parse(["B", 784])
    assert p.match((2, 784, 1), {}, strict=True) == "expected rank 2 [B, 784], got rank 3 [2, 784, 1]"
    assert p.match((2, 785), {}, strict=True) == "dim 1 expected 784, got 785"


def test_variadic_binds_a_run_of_dims():
    p = ShapePattern.parse(["*batch", "D"])
    env: dict = {}
    assert p.match((2, 3, 4, 8), env, strict=True) == ""
    assert env["batch"] == (2, 3, 4)
    assert p.instantiate(env) == (2, 3, 4, 8)
    assert p.match((2, 3, 8), env, strict=True).startswith("*batch was bound to [2, 3, 4]")


def test_expressions_are_checked_after_symbols_bind():
    p = ShapePattern.parse(["B", "C*H*W", "C", "H", "W"])
    assert p.match((1, 24, 2, 3, 4), {}, strict=True) == ""
    assert p.match((1, 25, 2, 3, 4), {}, strict=True) == "dim 1 expected C*H*W = 24, got 25"


def test_static_matching_only_fails_on_proven_conflicts():
    p = ShapePattern.parse(["N", 3])
    assert p.match((symbol("B"), parse_dim("C")), {}) == ""  # C might be 3 at run time
    assert p.match((symbol("B"), 4), {}) == "dim 1 expected 3, got 4"


def test_open_rank_inputs_match_what_can_be_aligned():
    p = ShapePattern.parse(["*batch", "in_features"])
    env: dict = {}
    assert p.match((Variadic("lead"), 784), env) == ""
    assert env["in_features"] == 784
    assert p.instantiate({**env, "in_features": 10}) == (Variadic("lead"), 10)


@pytest.mark.parametrize(
    ("actual", "rule", "verdict"),
    [
        ("float32", "float", True),
        ("int64", "float", False),
        ("float", "float32", None),
        ("float", "int", False),
        ("any", "float", None),
        ("int64", "int", True),
        ("bool", "any", True),
    ],
)
def test_dtype_rules(actual, rule, verdict):
    assert dtype_satisfies(actual, rule) is verdict


def test_dtype_rule_parsing():
    assert parse_dtype_rule("torch.float16") == "float16"
    assert parse_dtype_rule("same:x", ports=["x"]) == "same:x"
    with pytest.raises(ValueError, match="unknown dtype 'float33'"):
        parse_dtype_rule("float33")
    with pytest.raises(ValueError, match="must be a string"):
        parse_dtype_rule(3)


def test_contract_round_trips_to_spec_form():
    c = Contract.make(["B", 784], "int64", "cpu")
    assert c.to_spec() == {"shape": ["B", 784], "dtype": "int64", "device": "cpu"}
    assert Contract.make(["B"]).to_spec() == {"shape": ["B"]}
    assert c.static_type() == TensorType((symbol("B"), 784), "int64")


def test_format_shape():
    assert format_shape((symbol("B"), 784)) == "[B, 784]"
    assert format_shape(None) == "[...]"
    assert format_shape((Variadic("batch"), 3)) == "[*batch, 3]"


@settings(max_examples=200, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=6), split=st.integers(0, 6))
def test_a_pattern_made_from_a_shape_matches_it_and_rebuilds_it(shape, split):
    split = min(split, len(shape))
    names = [f"d{i}" for i in range(len(shape))]
    entries = [*names[:split], "*rest"] if split < len(shape) else names
    p = ShapePattern.parse(entries)
    env: dict = {}
    assert p.match(tuple(shape), env, strict=True) == ""
    assert p.instantiate(env) == tuple(shape)
    wrong = [*shape, 1] if p.variadic is None else shape[: max(split - 1, 0)]
    if p.variadic is None or split > 0:
        assert p.match(tuple(wrong), {}, strict=True) != ""


# --- dims that agree at most at isolated values ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "never"),
    [
        ("H-2", "H", True),  # a missing padding: equal for no H
        ("2*T", "T", True),  # equal only at T = 0
        ("(H-1)//4+1", "(H-1)//4-1", True),  # a constant apart
        ("H", "W", False),  # equal whenever H = W
        ("B*T", "B", False),  # two symbols: equal on a whole line
        ("(H-1)//2+1", "H", False),  # floor divisions are not claimed
        ("H", "H", False),
    ],
)
def test_never_equal(a: str, b: str, never: bool) -> None:
    from hndl._contracts import never_equal

    assert never_equal(parse_dim(a), parse_dim(b)) is never
    assert never_equal(parse_dim(b), parse_dim(a)) is never


def test_a_dim_against_an_int_is_left_to_the_call() -> None:
    from hndl._contracts import never_equal, unknown_dim

    assert not never_equal(parse_dim("H-2"), 5)
    assert not never_equal(unknown_dim(), parse_dim("H"))


@settings(max_examples=200, deadline=None)
@given(offset=st.integers(-9, 9).filter(bool), scale=st.integers(1, 4), h=st.integers(0, 500))
def test_dims_claimed_never_equal_differ_wherever_both_are_sizes_above_one(offset: int, scale: int, h: int) -> None:
    from hndl._contracts import never_equal
    from hndl._dims import evaluate

    a, b = parse_dim(f"{scale}*H+{offset}"), parse_dim("H")
    if never_equal(a, b):
        va, vb = evaluate(a, {"H": h}), evaluate(b, {"H": h})
        # Apart from the isolated solutions of a == b, a == 1 or b == 1 (at most 3 values of H), they differ.
        isolated = {x for x in range(-20, 520) if scale * x + offset in (x, 1) or x == 1}
        assert va != vb or h in isolated
