"""The logic of ``$`` expressions: comparisons (``== != < <= > >=``, chained as Python chains them) and ``not``,
``and``, ``or`` over bool parameters, against Python's own computation of the same text; the types they keep
apart (a bool is no number, a number no condition); and their use where a condition is wanted: a node's
``when`` (``when: "$not use_parallel_residual"``), a computed bool parameter, a tie's ``when``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl._param_binding import resolve
from hndl.naming import excerpt

BINDINGS: dict[str, Any] = {"a": 7, "b": -3, "c": 0.25, "d": 64, "f": True, "g": False, "h": True}
NUMBER_NAMES = ["a", "b", "c", "d"]
BOOL_NAMES = ["f", "g", "h"]


def python_value(text: str) -> Any:
    """What Python computes for ``text`` over :data:`BINDINGS`: the reference. Generated text only (operators,
    numbers and the names above), evaluated with no builtins."""
    return eval(text, {"__builtins__": {}, "max": max}, dict(BINDINGS))


# --- random well-typed conditions, written with as few parentheses as Python needs ------------------------------

# (text, precedence): 1 or, 2 and, 3 not, 4 a comparison, 5 + -, 6 * // %, 9 an atom.
_num_atoms = st.one_of(
    st.integers(0, 20).map(lambda n: (str(n), 9)),
    st.sampled_from(["0.5", "2.5", "1e-3"]).map(lambda t: (t, 9)),
    st.sampled_from(NUMBER_NAMES).map(lambda n: (n, 9)),
)


def _wrap(part: tuple[str, int], needed: bool) -> str:
    return f"({part[0]})" if needed else part[0]


def _arith(op: str, left: tuple[str, int], right: tuple[str, int]) -> tuple[str, int]:
    level = 5 if op in "+-" else 6
    return f"{_wrap(left, left[1] < level)} {op} {_wrap(right, right[1] <= level)}", level


numbers = st.recursive(
    _num_atoms,
    lambda inner: st.tuples(st.sampled_from(["+", "-", "*", "//", "%"]), inner, inner).map(lambda t: _arith(*t)),
    max_leaves=4,
)

_COMPARISONS = ["==", "!=", "<", "<=", ">", ">="]


def _chain(first: tuple[str, int], rest: list[tuple[str, tuple[str, int]]]) -> tuple[str, int]:
    # Operands of a comparison are sums: nothing a number expression here needs parentheses for.
    return " ".join([first[0], *(f"{op} {operand[0]}" for op, operand in rest)]), 4


_comparisons = st.builds(
    _chain, numbers, st.lists(st.tuples(st.sampled_from(_COMPARISONS), numbers), min_size=1, max_size=3)
)


def _extend(children: st.SearchStrategy[tuple[str, int]]) -> st.SearchStrategy[tuple[str, int]]:
    negation = children.map(lambda c: (f"not {_wrap(c, c[1] < 3)}", 3))
    conjunction = st.tuples(children, children).map(
        lambda t: (f"{_wrap(t[0], t[0][1] < 2)} and {_wrap(t[1], t[1][1] <= 2)}", 2)
    )
    disjunction = st.tuples(children, children).map(
        lambda t: (f"{_wrap(t[0], t[0][1] < 1)} or {_wrap(t[1], t[1][1] <= 1)}", 1)
    )
    # Two bools compared: an operand below a sum's precedence is parenthesised (`(not f) == g`, not `not f == g`).
    equality = st.tuples(children, st.sampled_from(["==", "!="]), children).map(
        lambda t: (f"{_wrap(t[0], t[0][1] < 5)} {t[1]} {_wrap(t[2], t[2][1] < 5)}", 4)
    )
    return negation | conjunction | disjunction | equality


conditions = st.recursive(st.sampled_from(BOOL_NAMES).map(lambda n: (n, 9)) | _comparisons, _extend, max_leaves=8)


@settings(max_examples=400, deadline=None)
@given(conditions)
def test_a_condition_computes_what_python_computes(condition: tuple[str, int]) -> None:
    text = condition[0]
    got, reason, _ = resolve("$" + text, BINDINGS)
    try:
        expected = python_value(text)
    except ZeroDivisionError:
        # Python stops at a division by zero it reaches; so does hndl (and neither reaches one `and`/`or` skip).
        assert reason == f"{excerpt('$' + text)}: division by zero", reason
        return
    assert reason == "", reason
    assert got is expected, (text, got, expected)


@settings(max_examples=200, deadline=None)
@given(numbers, st.lists(st.tuples(st.sampled_from(_COMPARISONS), numbers), min_size=2, max_size=4))
def test_a_chain_of_comparisons_is_the_and_of_its_neighbouring_pairs(
    first: tuple[str, int], rest: list[tuple[str, tuple[str, int]]]
) -> None:
    chain = _chain(first, rest)[0]
    operands = [first[0], *(operand[0] for _, operand in rest)]
    pairs = " and ".join(f"({left} {op} {right})" for left, (op, _), right in zip(operands, rest, operands[1:]))
    got, reason, _ = resolve("$" + chain, BINDINGS)
    paired, paired_reason, _ = resolve("$" + pairs, BINDINGS)
    assert (got, bool(reason)) == (paired, bool(paired_reason))


@settings(max_examples=200, deadline=None)
@given(numbers, st.sampled_from(NUMBER_NAMES), st.sampled_from(BOOL_NAMES))
def test_a_bool_parameter_in_arithmetic_is_refused_naming_it(number: tuple[str, int], name: str, flag: str) -> None:
    # Python would count True as 1; here a bool in a number's place is a mistake the message names, found
    # before anything is computed (so before any division by zero elsewhere in the text).
    bindings = {**BINDINGS, name: BINDINGS[flag]}
    text = f"$({number[0]}) * {name} < 1000"
    got, reason, _ = resolve(text, bindings)
    assert got is None
    assert reason == f"{excerpt(text)} computes with {name!r}, which is {BINDINGS[flag]}, not a number"


@settings(max_examples=100, deadline=None)
@given(conditions, st.sampled_from(NUMBER_NAMES))
def test_a_number_parameter_as_a_condition_is_refused_naming_it(condition: tuple[str, int], name: str) -> None:
    text = f"$not {name} or {condition[0]}"
    got, reason, _ = resolve(text, BINDINGS)
    assert got is None
    assert reason == f"{excerpt(text)} tests {name!r}, which is {BINDINGS[name]}, not true or false"


# --- the grammar's edges, pinned -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("not f", False),
        ("not not g", False),
        ("not(g)", True),
        ("f and not g", True),
        ("g or not f", False),
        ("g and f or h", True),  # (g and f) or h
        ("f or g and g", True),  # f or (g and g)
        ("not f == g", True),  # not (f == g)
        ("a > 3 and b < 0", True),
        ("-3 <= b < 0 < a", True),  # a chain: b is read once
        ("1 < a < 5", False),
        ("a == 7.0", True),  # an int equals its float, as in Python
        ("d // 8 == a + 1", True),
        ("f != g != h", True),
        ("a >= 7 > c", True),
        ("g and 1 // 0 == 0", False),  # `and` stops at false: the division is never computed
        ("f or 1 // 0 == 0", True),
        ("0 < a and max(a, d) == 64", True),
        ("(f)", True),
    ],
)
def test_comparisons_and_logic_compute_as_in_python(text: str, value: bool) -> None:
    assert python_value(text) is value  # the table itself is Python's
    assert resolve("$" + text, BINDINGS) == (value, "", None)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("$f + 1", "'$f + 1' computes with 'f', which is True, not a number"),
        ("$-f", "'$-f' computes with 'f', which is True, not a number"),
        ("$max(f, 1)", "'$max(f, 1)' computes with 'f', which is True, not a number"),
        ("$f < g", "'$f < g' computes with 'f', which is True, not a number"),
        ("$not a", "'$not a' tests 'a', which is 7, not true or false"),
        ("$f and d", "'$f and d' tests 'd', which is 64, not true or false"),
        ("$s == 1", "'$s == 1' compares 's', which is 'wide', not a number or a bool"),
        ("$(a < d) + 1", "'$(a < d) + 1': '+' takes numbers, got True (a comparison's or logical operator's result)"),
        ("$int(a < d)", "'$int(a < d)': 'int()' takes numbers, got True (a comparison's or logical operator's result)"),
        ("$not (a + 1)", "'$not (a + 1)': 'not' takes true or false, got 8"),
        ("$(a < d) and a", "'$(a < d) and a' tests 'a', which is 7, not true or false"),
        ("$(a < d) < f", "'$(a < d) < f' computes with 'f', which is True, not a number"),
        ("$(a < d) <= (b < d)", "'$(a < d) <= (b < d)': '<=' compares numbers, got True and True"),
        ("$a == f", "'$a == f': '==' compares 7 with True: the bool True with the number 7"),
        ("$(a == 7) != 1", "'$(a == 7) != 1': '!=' compares True with 1: the bool True with the number 1"),
    ],
)
def test_a_bool_where_a_number_belongs_or_a_number_where_a_bool_belongs_is_refused(text: str, reason: str) -> None:
    assert resolve(text, {**BINDINGS, "s": "wide"}) == (None, reason, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("$f and", "it ends too early"),
        ("$not", "it ends too early"),
        ("$and f", "unexpected 'and'"),
        ("$f or or g", "unexpected 'or'"),
        ("$a = 7", "unexpected '= 7'"),
        ("$a ! 7", "unexpected '! 7'"),
        ("$a <> 7", "unexpected '>'"),
        ("$a < (b", "it ends too early"),
    ],
)
def test_a_condition_the_grammar_does_not_read_is_refused(text: str, problem: str) -> None:
    got, reason, hint = resolve(text, BINDINGS)
    assert got is None
    assert reason == f"{text!r} is neither a graph parameter nor an expression over them ({problem})"
    assert hint is not None
    assert hint.endswith("comparisons == != < <= > >= and not, and, or; see docs/spec-files.md#expressions")


def test_a_dollar_marks_a_name_even_where_it_is_a_logical_word() -> None:
    # Bare, `not`, `and` and `or` are operators; written `$not` they name a parameter, as any `$name` does.
    bindings = {"not": False, "and": True, "or": 3}
    assert resolve("$not", bindings) == (False, "", None)
    assert resolve("$not $not", bindings) == (True, "", None)
    assert resolve("$$and and not $not", bindings) == (True, "", None)
    assert resolve("$$or > 2", bindings) == (True, "", None)
    assert resolve("$notable", {"notable": 1}) == (1, "", None)
    assert resolve("$not notable", {"notable": False}) == (True, "", None)


def test_negations_nest_as_deep_as_parentheses_may() -> None:
    # `not not ... f` recurses as `((...(f)...))` does, and is bounded the same.
    for depth in (30, 31, 32, 33):
        negated = resolve("$" + "not " * depth + "f", BINDINGS)
        wrapped = resolve("$" + "(" * depth + "f" + ")" * depth, BINDINGS)
        assert (negated[0] is None) == (wrapped[0] is None), depth
    assert resolve("$" + "not " * 31 + "f", BINDINGS) == (False, "", None)
    got, reason, _ = resolve("$" + "not " * 32 + "f", BINDINGS)
    assert got is None
    assert reason.endswith("(it nests more than 32 levels deep)")


# --- conditions where a graph wants one ------------------------------------------------------------------------

NET = """
hndl: 1
name: net
params: {parallel: PARALLEL}
inputs: {x: {shape: [B, 4]}}
nodes:
  attn:     {op: linear, in: x, out_features: 4}
  attn_res: {op: add, in: [attn, x], when: "$not parallel", otherwise: x}
  mlp:      {op: linear, in: attn_res, out_features: 4}
  both:     {op: add, in: [mlp, attn], when: $parallel, otherwise: mlp}
  out:      {op: add, in: [both, attn_res]}
outputs: [out]
"""


@pytest.mark.parametrize("parallel", [True, False])
def test_when_not_a_parameter_switches_a_residual_between_parallel_and_sequential(parallel: bool) -> None:
    # GPT-NeoX's use_parallel_residual: mlp(x) + attn(x) + x in parallel, mlp(attn(x) + x) + (attn(x) + x) in turn.
    model = hndl.build(hndl.loads(NET.replace("PARALLEL", str(parallel).lower()))).eval()
    attn, mlp = model.layer("attn"), model.layer("mlp")
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        if parallel:
            expected = (mlp(x) + attn(x)) + x
        else:
            expected = mlp(attn(x) + x) + (attn(x) + x)
        assert torch.equal(model(x), expected)


def test_a_when_condition_over_several_parameters_and_a_computed_bool_parameter() -> None:
    text = """
hndl: 1
name: net
params: {depth: 3, shared: false, deep: "$depth > 2 and not shared"}
inputs: {x: {shape: [B, 4]}}
nodes:
  a: {op: relu, in: x, when: "$depth >= 3 and not shared"}
  b: {op: linear, in: a, out_features: 2, when: $deep}
  c: {op: linear, in: b, out_features: 5, when: "$not deep"}
outputs: [c]
"""
    graph = hndl.loads(text)
    assert hndl.check(graph).output_types[0].shape[1] == 2  # a and b there, c left out
    shallow = hndl.loads(text, params={"depth": 2})
    assert hndl.check(shallow).output_types[0].shape[1] == 5  # b left out, c there
    again = hndl.loads(hndl.dumps(graph))  # the conditions are written back as written
    assert again.nodes["a"].when == "$depth >= 3 and not shared"
    assert again.params["deep"] == "$depth > 2 and not shared"


def test_a_when_condition_that_gives_a_number_is_e_param_at_the_node() -> None:
    text = NET.replace("PARALLEL", "true").replace('when: "$not parallel"', 'when: "$parallel + 1"')
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    (problem,) = info.value.problems
    assert (problem.code, problem.node) == ("E_PARAM", "attn_res")
    assert problem.message == "'$parallel + 1' computes with 'parallel', which is True, not a number"


def test_a_tie_when_may_be_a_condition() -> None:
    text = """
hndl: 1
name: net
params: {untied: false}
inputs: {ids: {shape: [B, T], dtype: int64}}
nodes:
  embed: {op: embedding, in: ids, num_embeddings: 10, embedding_dim: 4}
  head:  {op: linear, in: embed, out_features: 10, bias: false, tie: {weight: embed.weight, when: "$not untied"}}
outputs: [head]
"""
    tied = hndl.build(hndl.loads(text))
    assert tied.layer("head").weight is tied.layer("embed").weight
    untied = hndl.build(hndl.loads(text, params={"untied": True}))
    assert untied.layer("head").weight is not untied.layer("embed").weight


@pytest.mark.parametrize(("plain", "has_bias"), [(True, False), (False, True)])
def test_an_ops_bool_parameter_may_be_a_condition(plain: bool, has_bias: bool) -> None:
    text = f"""
hndl: 1
name: net
params: {{plain: {str(plain).lower()}}}
inputs: {{x: {{shape: [B, 4]}}}}
nodes:
  fc: {{op: linear, in: x, out_features: 3, bias: "$not plain"}}
outputs: [fc]
"""
    model = hndl.build(hndl.loads(text))
    assert (model.layer("fc").bias is not None) is has_bias
