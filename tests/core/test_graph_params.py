"""Parametrised subgraphs: a graph declares parameters with defaults, a use passes values, nodes refer to them.

Also the naming rule that came with them: a graph used without ``repeat`` has no repetition level in its names.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl

BLOCK = """
hndl: 1
name: net
inputs: {x: {shape: [B, 4]}}
nodes:
  NODES
outputs: [OUT]
graphs:
  block:
    params: {width: 8, down: false}
    inputs: {x: {shape: [B, C]}}
    nodes:
      up: {op: linear, in: x, out_features: $width}
      act: {op: relu, in: up}
      proj: {op: linear, in: act, out_features: $width*2, when: $down}
    outputs: [proj]
"""


def spec(nodes: str, out: str) -> str:
    return BLOCK.replace("NODES", nodes).replace("OUT", out)


def shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def problems(text: str) -> list[hndl.Problem]:
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(text))
    return info.value.problems


def test_defaults_and_passed_values_size_the_nodes() -> None:
    model = hndl.build(hndl.loads(spec("a: {op: graph, graph: block, in: x, params: {width: 16, down: true}}", "a")))
    assert shapes(model) == {
        "nodes.n_a.n_up.weight": (16, 4),
        "nodes.n_a.n_up.bias": (16,),
        "nodes.n_a.n_proj.weight": (32, 16),
        "nodes.n_a.n_proj.bias": (32,),
    }
    assert model(torch.randn(3, 4)).shape == (3, 32)


def test_a_node_left_out_by_when_passes_its_input_through() -> None:
    model = hndl.build(hndl.loads(spec("a: {op: graph, graph: block, in: x}", "a")))
    assert shapes(model) == {"nodes.n_a.n_up.weight": (8, 4), "nodes.n_a.n_up.bias": (8,)}
    assert model(torch.randn(3, 4)).shape == (3, 8)


def test_a_graph_used_without_repeat_has_no_repetition_level() -> None:
    once = hndl.build(hndl.loads(spec("a: {op: graph, graph: block, in: x}", "a")))
    assert [p.node.qualname for p in once.plan.steps] == ["a.up", "a.act"]
    repeated = hndl.build(hndl.loads(spec("a: {op: graph, graph: block, in: x, repeat: 1}", "a")))
    assert "nodes.n_a.0.n_up.weight" in repeated.state_dict()  # written repeat keeps its ModuleList
    assert [p.node.qualname for p in repeated.plan.steps] == ["a.0.up", "a.0.act"]


def test_one_mapping_per_repetition() -> None:
    text = spec(
        "s: {op: graph, graph: block, in: x, repeat: 3, params: [{width: 4, down: true}, {width: 8}, {}]}",
        "s",
    )
    model = hndl.build(hndl.loads(text))
    assert shapes(model)["nodes.n_s.0.n_proj.weight"] == (8, 4)
    assert shapes(model)["nodes.n_s.1.n_up.weight"] == (8, 8)
    assert shapes(model)["nodes.n_s.2.n_up.weight"] == (8, 8)
    assert "nodes.n_s.1.n_proj.weight" not in model.state_dict()


def test_a_use_inside_a_parametrised_graph_passes_its_own_parameters_on() -> None:
    text = """
hndl: 1
inputs: {x: {shape: [B, 4]}}
nodes:
  stage: {op: graph, graph: stage, in: x, params: {width: 6}}
outputs: [stage]
graphs:
  stage:
    params: {width: 2}
    inputs: {x: {shape: [B, C]}}
    nodes:
      first: {op: graph, graph: block, in: x, params: {width: $width}}
    outputs: [first]
  block:
    params: {width: 1}
    inputs: {x: {shape: [B, C]}}
    nodes:
      fc: {op: linear, in: x, out_features: $width}
    outputs: [fc]
"""
    assert shapes(hndl.build(hndl.loads(text)))["nodes.n_stage.n_first.n_fc.weight"] == (6, 4)


def test_an_input_shape_may_name_an_integer_parameter() -> None:
    text = spec("a: {op: graph, graph: block, in: x, params: {width: 16}}", "a").replace(
        "inputs: {x: {shape: [B, C]}}", "params: {}\n    inputs: {x: {shape: [B, width]}}"
    )
    text = text.replace("    params: {}\n", "")
    (p,) = problems(text)
    assert (p.code, p.node, p.port) == ("E_SHAPE", "a", "x")
    assert "dim 1 is width, bound to 16, but got 4" in p.message
    ok = text.replace("params: {width: 16}", "params: {width: 4}")
    assert hndl.build(hndl.loads(ok))(torch.randn(2, 4)).shape == (2, 4)


def test_the_python_api_declares_and_passes_parameters() -> None:
    block = hndl.Graph("block", params={"width": 8})
    x = block.input("x", ("B", "C"))
    block.output(block.add("linear", x, name="fc", out_features="$width"))
    g = hndl.Graph("net")
    g.output(g.add("graph", g.input("x", ("B", 4)), name="a", graph=block, params={"width": 5}))
    model = hndl.build(g)
    assert shapes(model)["nodes.n_a.n_fc.weight"] == (5, 4)
    text = hndl.dumps(g)
    assert "params: {width: 8}" in text
    assert "out_features: $width" in text
    assert hndl.dumps(hndl.loads(text)) == text


# --- mistakes ------------------------------------------------------------------------------------------------


def test_passing_an_undeclared_parameter_is_e_param_with_a_suggestion() -> None:
    (p,) = problems(spec("a: {op: graph, graph: block, in: x, params: {widht: 16}}", "a"))
    assert (p.code, p.node, p.op) == ("E_PARAM", "a", "graph")
    assert p.message == "graph 'block' has no parameter 'widht'"
    assert p.hint == "did you mean 'width'?"


def test_a_reference_to_an_unknown_parameter_is_e_param_at_its_key() -> None:
    (p,) = problems(spec("a: {op: graph, graph: block, in: x}", "a").replace("$width*2", "$wdth*2"))
    assert (p.code, p.node, p.op) == ("E_PARAM", "a.proj", "linear")
    assert p.message == "'$wdth*2' names 'wdth', which is not a parameter of this graph"
    assert p.hint == "did you mean 'width'?"


def test_a_reference_outside_a_parametrised_graph_is_e_param() -> None:
    (p,) = problems(spec("a: {op: linear, in: x, out_features: $width}", "a"))
    assert (p.code, p.node) == ("E_PARAM", "a")
    assert "not a parameter of this graph" in p.message


def test_arithmetic_on_a_non_integer_parameter_is_e_param() -> None:
    up, proj = problems(spec("a: {op: graph, graph: block, in: x, params: {width: 1.5, down: true}}", "a"))
    assert (up.node, up.message) == ("a.up", "parameter 'out_features' must be integer, got number 1.5")
    assert (proj.code, proj.node) == ("E_PARAM", "a.proj")
    assert proj.message == "'$width*2' computes with 'width', which is 1.5, not an integer"


def test_a_list_of_the_wrong_length_is_e_param() -> None:
    (p,) = problems(spec("a: {op: graph, graph: block, in: x, repeat: 2, params: [{}]}", "a"))
    assert (p.code, p.message) == ("E_PARAM", "'params' lists 1 mappings for 2 repetitions")


def test_when_must_be_a_bool() -> None:
    (p,) = problems(spec("a: {op: graph, graph: block, in: x, params: {down: 3}}", "a"))
    assert (p.code, p.node) == ("E_PARAM", "a.proj")
    assert p.message.startswith("'when' must be true, false or a bool graph parameter")


def test_a_node_left_out_needs_exactly_one_input() -> None:
    text = spec("a: {op: add, in: [x, x], when: false}", "a")
    (p,) = problems(text)
    assert (p.code, p.node) == ("E_PARAM", "a")
    assert "needs one input; it has 2" in p.message


def test_when_that_is_not_a_reference_is_e_spec_at_load() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(spec("a: {op: relu, in: x, when: maybe}", "a"))
    assert info.value.problems[0].code == "E_SPEC"


# --- property: an integer expression over parameters evaluates as Python does ---------------------------------


@settings(max_examples=60, deadline=None)
@given(
    width=st.integers(1, 9),
    extra=st.integers(0, 5),
    factor=st.integers(1, 4),
    form=st.sampled_from(["$width*F+E", "$(width+E)*F", "$width//F+E", "$F*width-E+E"]),
)
def test_an_expression_over_parameters_sizes_the_layer_as_python_computes_it(
    width: int, extra: int, factor: int, form: str
) -> None:
    expr = form.replace("F", str(factor)).replace("E", str(extra))
    python: dict[str, Any] = {"width": width}
    expected = eval(expr[1:], {}, python)
    if expected < 1:
        return
    block = hndl.Graph("block", params={"width": 1})
    x = block.input("x", ("B", 3))
    block.output(block.add("linear", x, name="fc", out_features=expr))
    g = hndl.Graph("net")
    g.output(g.add("graph", g.input("x", ("B", 3)), name="a", graph=block, params={"width": width}))
    assert shapes(hndl.build(g))["nodes.n_a.n_fc.weight"] == (expected, 3)
    assert hndl.dumps(hndl.loads(hndl.dumps(g))) == hndl.dumps(g)
