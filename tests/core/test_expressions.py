"""The arithmetic of ``$`` expressions (``**``, ``sqrt``, ``int``, float literals) against Python's own, whole
numbers in integer positions, and graph parameters computed from other graph parameters (``params: {head_dim:
"$hidden_size // num_heads"}``): order, cycles, overrides, subgraphs and ``hndl.dumps``."""

from __future__ import annotations

import ast
import math
import operator
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl._param_binding import MAX_BOUND_VALUES, compute_params, resolve
from hndl._param_expressions import FUNCTIONS
from hndl.cli import main

LIMIT = 2**63 - 1

# --- a reference: Python's arithmetic on Python's parse of the same text ---------------------------------------


class Refused(Exception):
    """Python's answer is no finite real number within the limits (or Python raises)."""


def _bounded(value: Any) -> Any:
    if isinstance(value, complex):
        raise Refused("complex")
    if isinstance(value, int) and abs(value) > LIMIT:
        raise Refused("too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise Refused("not finite")
    return value


def _python_power(base: Any, exponent: Any) -> Any:
    # Only to keep the reference itself from computing a number of billions of digits: 2 ** 200 is far past
    # the limit already, so refusing there decides nothing the limit would not.
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 200:
        raise Refused("too large")
    return base**exponent


_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _python_power,
}
_PYTHON_FUNCTIONS = {
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": round,
    "int": int,
    "sqrt": math.sqrt,
    "pow": math.pow,
}


def python_value(text: str, bindings: dict[str, Any]) -> Any:
    """``text`` as Python parses and computes it, each step held to hndl's limits (:class:`Refused` past them)."""

    def value(node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return _bounded(node.value)
        if isinstance(node, ast.Name):
            return bindings[node.id]
        if isinstance(node, ast.UnaryOp):
            inner = value(node.operand)
            return _bounded(-inner if isinstance(node.op, ast.USub) else +inner)
        if isinstance(node, ast.BinOp):
            left, right = value(node.left), value(node.right)
            return _bounded(_BINARY[type(node.op)](left, right))
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            return _bounded(_PYTHON_FUNCTIONS[node.func.id](*[value(a) for a in node.args]))
        raise AssertionError(ast.dump(node))

    try:
        return value(ast.parse(text, mode="eval").body)
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise Refused(str(exc)) from None


# --- random expression trees, written with as few parentheses as Python needs ------------------------------------

BINDINGS = {"a": 7, "b": -3, "c": 0.25, "d": 64, "e": 2.5}

# (text, precedence): 1 for + -, 2 for * / // %, 3 for a unary sign, 4 for **, 5 for an atom or a call.
_ints = st.integers(0, 70).map(lambda n: (str(n), 5))
_floats = st.sampled_from([0.5, 0.25, 1.5, 2.0, 3.75, 1e-3, 1e3, 10.0, 0.1]).map(lambda f: (repr(f), 5))
_names = st.sampled_from(sorted(BINDINGS)).map(lambda n: (n, 5))


def _wrap(part: tuple[str, int], needed: bool) -> str:
    return f"({part[0]})" if needed else part[0]


def _binary(op: str, left: tuple[str, int], right: tuple[str, int]) -> tuple[str, int]:
    if op == "**":  # power ::= primary "**" u_expr
        return f"{_wrap(left, left[1] < 5)} ** {_wrap(right, right[1] < 3)}", 4
    level = 1 if op in "+-" else 2
    return f"{_wrap(left, left[1] < level)} {op} {_wrap(right, right[1] <= level)}", level


def _extend(children: st.SearchStrategy[tuple[str, int]]) -> st.SearchStrategy[tuple[str, int]]:
    binary = st.tuples(st.sampled_from(["+", "-", "*", "/", "//", "%", "**"]), children, children).map(
        lambda t: _binary(*t)
    )
    unary = st.tuples(st.sampled_from(["-", "+"]), children).map(lambda t: (f"{t[0]}{_wrap(t[1], t[1][1] < 3)}", 3))
    one = st.tuples(st.sampled_from(["floor", "ceil", "round", "int", "sqrt"]), children).map(
        lambda t: (f"{t[0]}({t[1][0]})", 5)
    )
    two = st.tuples(st.sampled_from(["min", "max", "pow", "round"]), children, children).map(
        lambda t: (f"{t[0]}({t[1][0]}, {t[2][0]})", 5)
    )
    return binary | unary | one | two


expressions = st.recursive(_ints | _floats | _names, _extend, max_leaves=10)


@settings(max_examples=400, deadline=None)
@given(expressions)
def test_an_expression_computes_what_python_computes_or_is_refused_where_python_has_no_answer(
    expression: tuple[str, int],
) -> None:
    text = expression[0]
    got, reason, _ = resolve("$" + text, BINDINGS)
    try:
        want = python_value(text, BINDINGS)
    except Refused:
        assert got is None, f"{text} = {got!r}, where Python has no answer within the limits"
        assert reason
        return
    assert reason == "", f"{text}: {reason} (Python: {want!r})"
    assert (got, type(got)) == (want, type(want)), text


@settings(max_examples=150, deadline=None)
@given(st.integers(-40, 40), st.integers(-70, 70))
def test_integer_powers_are_pythons_within_the_limit(base: int, exponent: int) -> None:
    got, reason, _ = resolve("$x ** y", {"x": base, "y": exponent})
    try:
        want = python_value("x ** y", {"x": base, "y": exponent})
    except Refused:
        assert got is None
        assert reason
        return
    assert (got, type(got)) == (want, type(want))


# --- the grammar's additions ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("$-2**2", -4),
        ("$-2 ** -2", -0.25),
        ("$2 ** 3 ** 2", 512),
        ("$(2 ** 3) ** 2", 64),
        ("$2 * 3 ** 2", 18),
        ("$--2 ** 2", 4),
        ("$2 ** -1", 0.5),
        ("$4 ** 0.5", 2.0),
        ("$sqrt(2)", math.sqrt(2)),
        ("$int(2.9)", 2),
        ("$int(-2.9)", -2),
        ("$int(7)", 7),
        ("$floor(2.5) + ceil(2.5) + round(2.5)", 7),
        ("$1e-6", 1e-6),
        ("$2.5e1", 25.0),
        ("$.5 + 2.", 2.5),
    ],
)
def test_power_sqrt_int_and_float_literals_compute_as_in_python(text: str, value: Any) -> None:
    got, reason, _ = resolve(text, {})
    assert reason == ""
    assert (got, type(got)) == (value, type(value))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("$2 **", "it ends too early"),
        ("$** 2", "unexpected '**'"),
        ("$2 *** 3", "unexpected '*'"),
        ("$2 ^ 3", "unexpected '^ 3'"),
        ("$pow(2)", "pow() takes 2 arguments, got 1"),
        ("$int(1, 2)", "int() takes 1 argument, got 2"),
        ("$sqrt(4, 2)", "sqrt() takes 1 argument, got 2"),
        ("$max(3)", "max() takes 2 to 64 arguments, got 1"),
        ("$round(1, 2, 3)", "round() takes 1 to 2 arguments, got 3"),
        ("$" + "2 ** " * 40 + "2", "nests more than 32 levels deep"),
    ],
)
def test_an_expression_the_grammar_does_not_read_is_refused_with_the_hint(text: str, reason: str) -> None:
    got, why, hint = resolve(text, {})
    assert got is None
    assert "is neither a graph parameter nor an expression over them" in why
    assert reason in why
    assert hint is not None
    assert hint.endswith("see docs/spec-files.md#expressions")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("$sqrt(-1)", "sqrt() of a negative number (-1) is not a real number"),
        ("$(-8) ** 0.5", "a negative number (-8) to a fractional power is not a real number"),
        ("$pow(-8, 1 / 3)", "a negative number (-8) to a fractional power is not a real number"),
        ("$0 ** -1", "0 to a negative power (-1) divides by zero"),
        ("$pow(0, -1)", "0 to a negative power (-1) divides by zero"),
        ("$2 ** 63", "a value grows beyond the limit of 2**63-1"),
        ("$(-3) ** 40", "a value grows beyond the limit of 2**63-1"),
        ("$10.0 ** 400", "a value is too large for a float"),
        ("$pow(10, 400)", "a value is too large for a float"),
        ("$1e400", "a value is inf, not a finite number"),
        ("$int(1e19)", "a value grows beyond the limit of 2**63-1"),
        ("$round(1e300)", "a value grows beyond the limit of 2**63-1"),
    ],
)
def test_arithmetic_without_a_finite_real_answer_within_the_limits_says_why(text: str, reason: str) -> None:
    got, why, _ = resolve(text, {})
    assert got is None
    assert why == f"{text!r}: {reason}"


@pytest.mark.parametrize("text", ["$10 ** 10 ** 10", "$9 ** 9 ** 9 ** 9", "$x ** x ** x", "$(-7) ** 10 ** 18"])
def test_a_huge_power_is_refused_at_once_not_computed(text: str) -> None:
    start = time.perf_counter()
    got, why, _ = resolve(text, {"x": 99})
    assert time.perf_counter() - start < 0.5
    assert got is None
    assert "beyond the limit of 2**63-1" in why


def test_powers_of_one_zero_and_minus_one_are_computed_for_any_exponent() -> None:
    assert resolve("$1 ** (2 ** 62)", {})[0] == 1
    assert resolve("$(-1) ** (2 ** 62 + 1)", {})[0] == -1
    assert resolve("$0 ** (2 ** 62)", {})[0] == 0


def test_the_functions_the_docs_name_are_the_grammars() -> None:
    assert set(FUNCTIONS) == {"min", "max", "floor", "ceil", "round", "int", "sqrt", "pow"}


# --- whole numbers in integer positions -------------------------------------------------------------------------

NET = """\
hndl: 1
name: net
params: {d: 64, part: 0.25}
inputs: {x: {shape: [B, d]}}
nodes:
  fc: {op: linear, in: x, out_features: "$d * part"}
outputs: [fc]
"""


def _problem(text: str) -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(text))
    (problem,) = info.value.problems
    return problem


def test_a_whole_float_in_an_integer_parameter_is_its_integer() -> None:
    model = hndl.build(hndl.loads(NET))
    assert model.nodes["n_fc"].out_features == 16
    assert type(model.graph.nodes["fc"].params["out_features"]) is str  # the graph keeps what was written


def test_a_fraction_in_an_integer_parameter_is_e_param_naming_node_and_parameter() -> None:
    problem = _problem(NET.replace("part: 0.25", "part: 0.3"))
    assert (problem.code, problem.node, problem.op) == ("E_PARAM", "fc", "linear")
    assert problem.message == "'$d * part' gives 19.2, and 19.2 is not a whole number ('out_features' takes integers)"
    assert problem.hint is not None
    assert "int(x) truncates toward zero" in problem.hint
    assert problem.location == "<string>:6:27"  # its out_features key


def test_a_float_written_by_hand_in_an_integer_parameter_is_still_refused() -> None:
    problem = _problem(NET.replace('"$d * part"', "16.0"))
    assert problem.message == "parameter 'out_features' must be integer, got number 16.0"


def test_a_whole_float_for_repeat_and_in_a_shape_list_is_its_integer() -> None:
    text = """\
hndl: 1
name: net
params: {n: 4, d: 8}
inputs: {x: {shape: [B, d]}}
graphs:
  block:
    inputs: {h: {shape: [B, C]}}
    nodes: {fc: {op: linear, in: h, out_features: $C}}
    outputs: [fc]
nodes:
  blocks: {op: graph, graph: block, in: x, repeat: "$n / 2"}
  table: {op: parameter, shape: ["$d / 4", "$sqrt(d * 2)"]}
outputs: [blocks, table]
"""
    state = hndl.build(hndl.loads(text)).state_dict()
    assert "nodes.n_blocks.1.n_fc.weight" in state
    assert "nodes.n_blocks.2.n_fc.weight" not in state
    assert tuple(state["nodes.n_table.weight"].shape) == (2, 4)


def test_a_float_parameter_an_input_dim_names_must_be_whole() -> None:
    text = NET.replace("params: {d: 64, part: 0.25}", 'params: {d: 64, part: 0.25, q: "$d * part"}').replace(
        "shape: [B, d]", "shape: [B, d, q]"
    )
    model = hndl.build(hndl.loads(text))
    assert model(torch.randn(2, 64, 16)).shape == (2, 64, 16)
    problem = _problem(text.replace("part: 0.25", "part: 0.3").replace('out_features: "$d * part"', "out_features: 4"))
    assert (problem.code, problem.node) == ("E_PARAM", "x")
    assert "names 'q', which is 19.2: not a whole number" in problem.message


# --- graph parameters computed from graph parameters --------------------------------------------------------------

DECODER = """\
hndl: 1
name: decoder
params:
  embed_scale: "$hidden_size ** 0.5"
  rotary_dims: "$int(head_dim * partial_rotary_factor)"
  head_dim: "$hidden_size // num_heads"
  hidden_size: 64
  num_heads: 4
  partial_rotary_factor: 0.25
inputs:
  x: {shape: [B, T, hidden_size]}
nodes:
  scaled: {op: scale, in: x, factor: $embed_scale}
  heads: {op: linear, in: scaled, out_features: $head_dim}
  rotary: {op: linear, in: heads, out_features: $rotary_dims}
outputs: [rotary]
"""


def _sizes(graph: hndl.Graph) -> tuple[int, int]:
    model = hndl.build(graph)
    return model.nodes["n_heads"].out_features, model.nodes["n_rotary"].out_features


def test_graph_parameters_are_computed_in_the_order_their_references_need() -> None:
    model = hndl.build(hndl.loads(DECODER))
    assert model.nodes["n_heads"].out_features == 16
    assert model.nodes["n_rotary"].out_features == 4
    x = torch.randn(2, 3, 64)
    scaled = x * 64**0.5
    assert torch.equal(model.nodes["n_scaled"](x), scaled)


def test_a_computed_parameter_gives_the_value_python_gives() -> None:
    values, problems = compute_params(hndl.loads(DECODER).params)
    assert problems == []
    assert values["embed_scale"] == 64**0.5 == 8.0
    assert (values["head_dim"], values["rotary_dims"]) == (16, 4)


def test_an_override_is_seen_by_the_parameters_computed_from_it(tmp_path: Path) -> None:
    graph = hndl.loads(DECODER, params={"hidden_size": 256})
    model = hndl.build(graph)
    assert (model.nodes["n_heads"].out_features, model.nodes["n_rotary"].out_features) == (64, 16)
    assert model.nodes["n_scaled"](torch.ones(1, 1, 256)).flatten()[0].item() == 16.0
    path = tmp_path / "decoder.yaml"
    path.write_text(DECODER, encoding="utf-8")
    loaded = hndl.load(path, params={"num_heads": 2, "partial_rotary_factor": 0.5})
    assert hndl.build(loaded).nodes["n_rotary"].out_features == 16


def test_the_command_line_param_is_seen_by_computed_parameters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "decoder.yaml"
    path.write_text(DECODER, encoding="utf-8")
    assert main(["check", str(path), "--param", "num_heads=3", "--build"]) == 0  # 64 // 3 = 21, int(21 * .25) = 5
    assert main(["summary", str(path), "--param", "hidden_size=128", "--dims", "B=1,T=2"]) == 0
    out = capsys.readouterr().out
    # heads 128*32+32, rotary 32*8+8
    assert f"params:      {128 * 32 + 32 + 32 * 8 + 8:,} (trainable" in out


def test_an_override_of_a_computed_parameter_replaces_its_formula() -> None:
    graph = hndl.loads(DECODER, params={"head_dim": 32})
    assert graph.params["head_dim"] == 32
    assert _sizes(graph) == (32, 8)


def test_an_override_of_a_computed_parameter_is_checked_against_what_it_computes_to() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(DECODER, params={"head_dim": "wide"})
    (problem,) = info.value.problems
    assert problem.message == (
        "parameter 'head_dim' of graph 'decoder' is an integer ('$hidden_size // num_heads' = 16 in the spec), "
        "got string 'wide'"
    )
    assert problem.location == "<string>:6:3"  # head_dim's line
    # passing the graph's own parameters back (as the generation helpers do) is accepted as written
    again = hndl.loads(DECODER, params=dict(hndl.loads(DECODER).params))
    assert _sizes(again) == (16, 4)


def test_computed_parameters_are_written_back_as_written() -> None:
    graph = hndl.loads(DECODER, params={"hidden_size": 128})
    text = hndl.dumps(graph)
    assert "embed_scale: $hidden_size ** 0.5" in text
    assert "head_dim: $hidden_size // num_heads" in text
    assert "hidden_size: 128" in text
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    assert _sizes(again) == _sizes(graph) == (32, 8)


def test_the_python_api_computes_graph_parameters_too() -> None:
    g = hndl.Graph("net", params={"d": 12, "half": "$d // 2", "pair": ["$half", "$half * 2"]})
    x = g.input("x", ("B", "d"))
    g.output(g.add("linear", x, name="fc", out_features="$half"))
    assert hndl.build(g).nodes["n_fc"].out_features == 6
    values, problems = compute_params(g.params)
    assert (values["pair"], problems) == ([6, 12], [])
    assert g.params["half"] == "$d // 2"


def test_graph_parameters_in_a_cycle_are_e_param_naming_the_cycle() -> None:
    text = DECODER.replace('"$hidden_size // num_heads"', '"$rotary_dims * 4"')
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(text))
    (problem,) = info.value.problems
    assert problem.code == "E_PARAM"
    assert problem.message == (
        "parameter 'rotary_dims' of graph 'decoder': graph parameters refer to each other in a cycle: "
        "rotary_dims -> head_dim -> rotary_dims"
    )
    assert problem.location == "<string>:5:3"  # the line of the first of them the spec declares


def test_a_parameter_that_refers_to_itself_is_a_cycle() -> None:
    values, problems = compute_params({"a": "$a + 1", "b": 2})
    assert values == {"b": 2}
    assert [(name, reason) for name, reason, _ in problems] == [
        ("a", "graph parameters refer to each other in a cycle: a -> a")
    ]


def test_a_parameter_that_cannot_be_computed_is_reported_once_at_its_line() -> None:
    text = DECODER.replace('"$hidden_size // num_heads"', '"$hidden_size // heads"')
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(text))
    (problem,) = info.value.problems  # embed_scale and rotary_dims, which use it, add nothing
    assert problem.message == (
        "parameter 'head_dim' of graph 'decoder': '$hidden_size // heads' names 'heads', which is not a parameter "
        "of this graph"
    )
    assert "num_heads" in (problem.hint or "")
    assert problem.location == "<string>:6:3"


def test_a_fraction_in_a_computed_parameter_used_as_an_integer_is_e_param() -> None:
    text = DECODER.replace('"$hidden_size // num_heads"', '"$hidden_size / num_heads"')
    assert _sizes(hndl.loads(text)) == (16, 4)  # 16.0: a whole number
    problem = _problem(text.replace("num_heads: 4", "num_heads: 5"))
    assert (problem.node, problem.op) == ("heads", "linear")
    assert problem.message == "'$head_dim' gives 12.8, and 12.8 is not a whole number ('out_features' takes integers)"


def test_copies_of_computed_parameters_are_counted_against_the_budget() -> None:
    params: dict[str, Any] = {"p0": list(range(200))}
    for i in range(1, 12):
        params[f"p{i}"] = [f"$p{i - 1}", f"$p{i - 1}"]
    _, problems = compute_params(params)
    assert problems
    assert f"graph parameters expand to more than {MAX_BOUND_VALUES:,} values" in problems[0][1]


# --- in subgraphs: per use and per repetition ----------------------------------------------------------------------

STACK = """\
hndl: 1
name: stack
inputs: {x: {shape: [B, 8]}}
graphs:
  block:
    params: {width: 8, hidden: "$width * 2 + repetition"}
    inputs: {h: {shape: [B, C]}}
    nodes:
      up: {op: linear, in: h, out_features: $hidden}
      down: {op: linear, in: up, out_features: $width}
    outputs: [down]
nodes:
  a: {op: graph, graph: block, in: x, repeat: 2}
  b: {op: graph, graph: block, in: a, params: {width: 4}}
  c: {op: graph, graph: block, in: b, params: {hidden: 3}}
outputs: [c]
"""


def test_a_subgraph_computes_its_parameters_for_each_use_and_repetition() -> None:
    state = {k: tuple(v.shape) for k, v in hndl.build(hndl.loads(STACK)).state_dict().items()}
    assert state["nodes.n_a.0.n_up.weight"] == (16, 8)
    assert state["nodes.n_a.1.n_up.weight"] == (17, 8)  # repetition 1
    assert state["nodes.n_b.n_up.weight"] == (8, 8)  # width 4 passed: hidden follows
    assert state["nodes.n_c.n_up.weight"] == (3, 4)  # hidden passed: the formula is replaced


def test_a_subgraph_parameter_that_cannot_be_computed_is_e_param_at_the_use() -> None:
    text = STACK.replace('"$width * 2 + repetition"', '"$width * 2 // (1 - repetition)"')
    problem = _problem(text)  # b and c are used once (repetition 0): only a's second repetition divides by zero
    assert (problem.code, problem.node, problem.op) == ("E_PARAM", "a", "graph")
    assert problem.message == (
        "parameter 'hidden' of graph 'block': '$width * 2 // (1 - repetition)': division by zero"
    )
