"""Graph parameters for today's vision models: number expressions (a drop-path schedule is one expression),
each repetition's index, and ``when`` on a node with several inputs (``otherwise``)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl._param_binding import resolve

# --- number expressions ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bindings", "value"),
    [
        ("$rate * $k / ($n - 1)", {"rate": 0.1, "k": 3, "n": 4}, 0.1 * 3 / (4 - 1)),
        ("$rate*k/(n-1)", {"rate": 0.1, "k": 3, "n": 4}, 0.1 * 3 / (4 - 1)),
        ("$width*4", {"width": 16}, 64),
        ("$width//3", {"width": 16}, 5),
        ("$width/4", {"width": 16}, 4.0),
        ("$-w % 3", {"w": 7}, 2),
        ("$1e-6 * scale", {"scale": 2}, 2e-06),
        ("$max(8, floor(c * m / 8 + 0.5) * 8)", {"c": 24, "m": 0.75}, 16),
        ("$min(a, b, 3)", {"a": 5, "b": 4}, 3),
        ("$ceil(h / 7) * 7 - h", {"h": 30}, 5),
        ("$round(2.5) + round(3.5)", {}, 6),
    ],
)
def test_an_expression_computes_as_python_does(text, bindings, value):
    got, reason, _ = resolve(text, bindings)
    assert reason == ""
    assert got == value
    assert type(got) is type(value)


@pytest.mark.parametrize(
    ("text", "bindings", "reason"),
    [
        ("$a / (b - b)", {"a": 1, "b": 2}, "'$a / (b - b)': division by zero"),
        ("$a * a * a * a", {"a": 2**40}, "'$a * a * a * a': a value grows beyond the limit of 2**63-1"),
        ("$a * 1e308 * 10", {"a": 1.0}, "'$a * 1e308 * 10': a value is inf, not a finite number"),
        ("$name * 2", {"name": "wide"}, "'$name * 2' computes with 'name', which is 'wide', not a number"),
        ("$flag + 1", {"flag": True}, "'$flag + 1' computes with 'flag', which is True, not a number"),
        ("$width *** 2", {"width": 2}, "'$width *** 2' is neither a graph parameter nor an expression over them"),
        ("$rsqrt(width)", {"width": 4}, "is neither a graph parameter nor an expression over them (unexpected '(')"),
        ("$" + "(" * 40 + "1" + ")" * 40, {}, "nests more than 32 levels deep"),
        ("$" + "1+" * 600 + "1", {}, "is longer than 1,000 characters"),
    ],
)
def test_an_expression_that_cannot_compute_says_why(text, bindings, reason):
    got, why, _ = resolve(text, bindings)
    assert got is None
    assert reason in why


@settings(max_examples=80, deadline=None)
@given(
    a=st.integers(-50, 50),
    b=st.integers(1, 9),
    x=st.floats(-10, 10, allow_nan=False),
    form=st.sampled_from(["a*b+x", "(a-x)/b", "a//b-a%b", "x*x/b", "a/b", "-a*-x+b", "max(a, b)*x", "floor(x)+a"]),
)
def test_expressions_agree_with_python_on_random_values(a: int, b: int, x: float, form: str) -> None:
    got, reason, _ = resolve("$" + form, {"a": a, "b": b, "x": x})
    env = {"a": a, "b": b, "x": x, "max": max, "floor": math.floor}
    expected = eval(form, {"__builtins__": {}}, env)
    assert reason == ""
    assert got == expected
    assert type(got) is type(expected)


# --- a drop-path schedule, the repetition index ----------------------------------------------------------------

SCHEDULE = """
hndl: 1
name: stages
params: {rate: 0.1, depth1: 2, depth2: 3}
inputs: {x: {shape: [B, 8]}}
graphs:
  block:
    params: {first: 0, blocks: 5, rate: 0.0}
    inputs: {x: {shape: [B, 8]}}
    nodes:
      fc: {op: linear, in: x, out_features: 8}
      drop: {op: drop_path, in: fc, p: "$rate * ($first + $repetition) / ($blocks - 1)"}
      out: {op: add, in: [x, drop]}
    outputs: [out]
nodes:
  stage1: {op: graph, graph: block, in: x, repeat: $depth1, params: {first: 0, blocks: "$depth1+depth2", rate: $rate}}
  stage2: {op: graph, graph: block, in: stage1, repeat: $depth2, params: {first: $depth1, blocks: "$depth1+depth2", rate: $rate}}
outputs: [stage2]
"""


def test_a_drop_path_schedule_is_one_expression_over_the_repetition_index():
    model = hndl.build(hndl.loads(SCHEDULE))
    rates = [m.p for _, m in model.named_modules() if type(m).__name__ == "DropPath"]
    # torchvision's ConvNeXt: sd_prob = stochastic_depth_prob * stage_block_id / (total_stage_blocks - 1.0)
    assert rates == [0.1 * k / (5 - 1.0) for k in range(5)]


def test_a_graph_that_declares_repetition_keeps_its_own():
    text = SCHEDULE.replace(
        "params: {first: 0, blocks: 5, rate: 0.0}", "params: {first: 0, blocks: 5, rate: 0.0, repetition: 1}"
    )
    rates = [m.p for _, m in hndl.build(hndl.loads(text)).named_modules() if type(m).__name__ == "DropPath"]
    assert rates == [0.1 * (k + 1) / 4 for k in (0, 0, 2, 2, 2)]


def test_repetition_is_no_parameter_at_the_top_level():
    g = hndl.loads(SCHEDULE.replace("out_features: 8}", "out_features: 8}\n      x2: {op: relu, in: x}", 1))
    g.nodes["stage1"].params["repeat"] = "$repetition"
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert "'$repetition' names 'repetition', which is not a parameter of this graph" in str(info.value)


# --- when on a node with several inputs ---------------------------------------------------------------------

RESIDUAL = """
hndl: 1
name: net
inputs: {x: {shape: [B, 8]}}
graphs:
  block:
    params: {width: 8, residual: true}
    inputs: {x: {shape: [B, 8]}}
    nodes:
      fc: {op: linear, in: x, out_features: $width}
      add: {op: add, in: [x, fc], when: $residual, otherwise: fc}
      act: {op: relu, in: add}
    outputs: [act]
nodes:
  a: {op: graph, graph: block, in: x, params: PARAMS}
outputs: [a]
"""


def test_a_node_left_out_passes_the_input_otherwise_names():
    same = hndl.build(hndl.loads(RESIDUAL.replace("PARAMS", "{width: 8}")))
    wider = hndl.build(hndl.loads(RESIDUAL.replace("PARAMS", "{width: 16, residual: false}")))
    x = torch.randn(2, 8)
    fc = same.nodes["n_a"]["n_fc"]
    assert torch.equal(same(x), torch.relu(x + fc(x)))
    assert "n_add" not in wider.nodes["n_a"]
    assert torch.equal(wider(x), torch.relu(wider.nodes["n_a"]["n_fc"](x)))
    assert "add: {op: add, in: [x, fc], when: $residual, otherwise: fc}" in hndl.dumps(
        hndl.loads(RESIDUAL.replace("PARAMS", "{}"))
    )


def test_otherwise_must_name_one_of_the_nodes_inputs():
    text = RESIDUAL.replace("otherwise: fc", "otherwise: fcc").replace("PARAMS", "{residual: false}")
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    (p,) = info.value.problems
    assert (p.code, p.node, p.message) == (
        "E_PARAM",
        "a.add",
        "'otherwise' names 'fcc', which is not an input of the node",
    )
    assert (p.expected, p.hint) == ("one of 'x', 'fc'", "did you mean 'fc'?")
    assert p.location == "<string>:11:52"  # the otherwise key


def test_a_node_with_several_inputs_left_out_says_to_name_one():
    text = RESIDUAL.replace(", otherwise: fc", "").replace("PARAMS", "{residual: false}")
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    (p,) = info.value.problems
    assert p.message == "a node left out by 'when' passes its input through, so it needs one input; it has 2"
    assert p.hint == "say which passes through: otherwise: <one of its inputs>"


def test_otherwise_in_python_takes_a_handle():
    block = hndl.Graph("block", params={"residual": False})
    x = block.input("x", ("B", 4))
    fc = block.add("linear", x, name="fc", out_features=4)
    block.output(block.add("add", x, fc, name="add", when="$residual", otherwise=fc))
    assert block.nodes["add"].otherwise == "fc"
    g = hndl.Graph("net")
    g.output(g.add("graph", g.input("x", ("B", 4)), name="b", graph=block))
    assert [n.qualname for n in hndl.check(g).nodes[0].body[0].nodes] == ["b.fc"]


def test_otherwise_is_a_node_key_so_no_op_parameter_may_take_its_name():
    with pytest.raises(ValueError, match="a parameter cannot be named 'otherwise'"):
        hndl.op("test_otherwise", params=[hndl.Param("otherwise", "int", default=0)])(lambda p, i: None)


def test_otherwise_that_is_not_a_reference_is_e_spec():
    text = RESIDUAL.replace("otherwise: fc", "otherwise: [fc]").replace("PARAMS", "{}")
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(text)
    assert info.value.problems[0].message == "'otherwise' must name one of the node's inputs, got a list"
