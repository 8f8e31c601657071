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


def test_a_list_shorter_than_repeat_gives_its_last_mapping_to_the_remaining_repetitions() -> None:
    # ResNet's stage: the first block differs, every later one is alike, whatever the depth
    for repeat in (1, 2, 5):
        text = spec(
            f"s: {{op: graph, graph: block, in: x, repeat: {repeat}, params: [{{width: 4, down: true}}, {{width: 6}}]}}",
            "s",
        )
        state = shapes(hndl.build(hndl.loads(text)))
        assert state["nodes.n_s.0.n_proj.weight"] == (8, 4)
        for r in range(1, repeat):
            assert state[f"nodes.n_s.{r}.n_up.weight"] == (6, 8 if r == 1 else 6)
            assert f"nodes.n_s.{r}.n_proj.weight" not in state
        assert len(state) == 4 + 2 * (repeat - 1)


def test_repeat_may_be_a_parameter_with_a_first_and_a_rest_mapping() -> None:
    text = """
hndl: 1
params: {depth: 3, width: 5}
inputs: {x: {shape: [B, 4]}}
nodes:
  s: {op: graph, graph: block, in: x, repeat: $depth, params: [{width: $width, down: true}, {width: "$width+1"}]}
outputs: [s]
graphs:
  block:
    params: {width: 8, down: false}
    inputs: {x: {shape: [B, C]}}
    nodes:
      up: {op: linear, in: x, out_features: $width}
      proj: {op: linear, in: up, out_features: $width, when: $down}
    outputs: [proj]
"""
    graph = hndl.loads(text)
    graph.params["depth"] = 4
    state = shapes(hndl.build(graph))
    assert [k for k in state if k.endswith("up.weight")] == [f"nodes.n_s.{r}.n_up.weight" for r in range(4)]
    assert state["nodes.n_s.3.n_up.weight"] == (6, 6)


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


def test_a_float_a_reference_gives_an_integer_parameter_must_be_a_whole_number() -> None:
    (up,) = problems(spec("a: {op: graph, graph: block, in: x, params: {width: 1.5, down: true}}", "a"))
    assert (up.code, up.node) == ("E_PARAM", "a.up")
    assert up.message == "'$width' gives 1.5, and 1.5 is not a whole number ('out_features' takes integers)"
    assert up.hint.startswith("say how to make it whole: int(x) truncates toward zero")
    # proj's out_features is "$width*2", 3.0: a whole number, so it is the integer 3


def test_arithmetic_on_a_parameter_that_is_not_a_number_is_e_param() -> None:
    _, proj = problems(spec("a: {op: graph, graph: block, in: x, params: {width: wide, down: true}}", "a"))
    assert (proj.code, proj.node) == ("E_PARAM", "a.proj")
    assert proj.message == "'$width*2' computes with 'width', which is 'wide', not a number"


def test_a_list_of_more_than_repeat_plus_one_mappings_is_e_param() -> None:
    (p,) = problems(spec("a: {op: graph, graph: block, in: x, repeat: 2, params: [{}, {}, {}, {}]}", "a"))
    assert (p.code, p.message) == ("E_PARAM", "'params' lists 4 mappings for 2 repetitions")
    assert p.hint.endswith("the last for every repetition after them (at most 3 mappings here)")


def test_an_empty_params_list_is_e_param() -> None:
    (p,) = problems(spec("a: {op: graph, graph: block, in: x, repeat: 2, params: []}", "a"))
    assert (p.code, p.message) == ("E_PARAM", "'params' lists 0 mappings for 2 repetitions")


def test_when_must_be_a_bool() -> None:
    (p,) = problems(spec("a: {op: graph, graph: block, in: x, params: {down: 3}}", "a"))
    assert (p.code, p.node) == ("E_PARAM", "a.proj")
    assert p.message.startswith("'when' must be true, false or a condition")


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


# --- references inside lists, and top-level input shapes that name parameters --------------------------------

LISTS = """
hndl: 1
name: lists
params: {k: 3, dim: 6, size: 8}
inputs: {x: {shape: [B, 2, size, size]}}
nodes:
  conv: {op: conv2d, in: x, out_channels: $dim, kernel_size: [$k, $k], padding: ["$k//2", 0]}
  flat: {op: flatten, in: conv, start_dim: 2}
  seq: {op: transpose, in: flat, dim0: 1, dim1: 2}
  token: {op: parameter, shape: [1, 1, $dim], init: zeros}
  tokens: {op: expand, in: [token, seq], shape: [B, 1, -1]}
  both: {op: concat, in: [tokens, seq], dim: 1}
  pos: {op: parameter, shape: [1, "$size*(size-k+1)+1", $dim]}
  out: {op: add, in: [both, pos]}
outputs: [out]
"""


def test_references_inside_lists_take_their_values() -> None:
    model = hndl.build(hndl.loads(LISTS))
    state = shapes(model)
    assert state["nodes.n_conv.weight"] == (6, 2, 3, 3)
    assert state["nodes.n_token.weight"] == (1, 1, 6)
    assert state["nodes.n_pos.weight"] == (1, 8 * 6 + 1, 6)
    assert model(torch.randn(2, 2, 8, 8)).shape == (2, 49, 6)


def test_references_inside_lists_follow_overridden_parameters() -> None:
    graph = hndl.loads(LISTS)
    graph.params.update(k=5, dim=4, size=12)
    model = hndl.build(graph)
    assert shapes(model)["nodes.n_conv.weight"] == (4, 2, 5, 5)
    assert model(torch.randn(1, 2, 12, 12)).shape == (1, 12 * 8 + 1, 4)


def test_a_list_mixing_symbols_and_references_keeps_the_symbols() -> None:
    text = LISTS.replace("shape: [B, 1, -1]", "shape: [B, 1, $dim]")
    assert hndl.build(hndl.loads(text))(torch.randn(3, 2, 8, 8)).shape == (3, 49, 6)


def test_a_spec_with_references_in_lists_round_trips_through_dumps() -> None:
    text = hndl.dumps(hndl.loads(LISTS))
    assert "kernel_size: [$k, $k], padding: [$k//2, 0]" in text
    assert "shape: [1, $size*(size-k+1)+1, $dim]" in text
    assert "x: {shape: [B, 2, size, size]}" in text
    assert hndl.dumps(hndl.loads(text)) == text
    assert shapes(hndl.build(hndl.loads(text))) == shapes(hndl.build(hndl.loads(LISTS)))


def test_a_bad_reference_inside_a_list_is_e_param_at_its_line_naming_the_item() -> None:
    (p,) = problems(LISTS.replace('"$k//2"', '"$kk//2"'))
    assert (p.code, p.node, p.op) == ("E_PARAM", "conv", "conv2d")
    assert p.message == "padding[0]: '$kk//2' names 'kk', which is not a parameter of this graph"
    assert p.hint == "did you mean 'k'?"
    assert p.location == "<string>:7:72"  # the padding key of node conv


def test_arithmetic_on_a_float_parameter_inside_a_list_is_an_integer_only_when_whole() -> None:
    text = LISTS.replace("params: {k: 3, dim: 6, size: 8}", "params: {k: 3, dim: 6, size: 8, part: 0.5}")
    whole = text.replace("shape: [1, 1, $dim]", 'shape: [1, 1, "$part * 12"]')
    assert shapes(hndl.build(hndl.loads(whole)))["nodes.n_token.weight"] == (1, 1, 6)
    (p,) = problems(text.replace("shape: [1, 1, $dim]", 'shape: [1, 1, "$part*13"]'))
    assert (p.code, p.node) == ("E_PARAM", "token")
    assert p.message == "shape[2]: '$part*13' gives 6.5, and 6.5 is not a whole number ('shape' takes integers)"


def test_a_bad_reference_deep_in_a_mapping_names_its_place() -> None:
    text = spec("a: {op: graph, graph: block, in: x, repeat: 2, params: [{width: 4}, {width: $wdith}]}", "a")
    (p,) = problems(text.replace("name: net\n", "name: net\nparams: {width: 4}\n"))
    assert (p.code, p.node, p.op) == ("E_PARAM", "a", "graph")
    assert p.message == "params[1].width: '$wdith' names 'wdith', which is not a parameter of this graph"
    assert p.hint == "did you mean 'width'?"


def test_a_top_level_input_shape_names_a_parameter() -> None:
    model = hndl.build(hndl.loads(LISTS))
    assert hndl.summary(model).inputs == {"x": "[B, 2, 8, 8]"}
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 2, 16, 16))
    (p,) = info.value.problems
    assert (p.code, p.message) == ("E_INPUT", "dim 2 expected 8, got 16")


def test_a_top_level_input_dim_may_compute_with_parameters() -> None:
    text = """
hndl: 1
params: {width: 3}
inputs: {x: {shape: [B, width*2+1]}}
nodes: {fc: {op: linear, in: x, out_features: 2}}
outputs: [fc]
"""
    model = hndl.build(hndl.loads(text))
    assert shapes(model)["nodes.n_fc.weight"] == (2, 7)
    (p,) = problems(text.replace("width: 3", "width: -5"))
    assert (p.code, p.node, p.op) == ("E_PARAM", "x", "input")
    assert p.message == "shape [B, width*2+1]: with the graph's parameters, shape entry -9 is negative"


def test_a_top_level_input_shape_leaves_non_integer_parameters_alone() -> None:
    text = """
hndl: 1
params: {C: true}
inputs: {x: {shape: [B, C]}}
nodes: {r: {op: relu, in: x}}
outputs: [r]
"""
    assert hndl.build(hndl.loads(text))(torch.randn(2, 5)).shape == (2, 5)


def test_a_dollar_in_an_input_shape_is_e_spec_with_the_way_to_write_it() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(LISTS.replace("[B, 2, size, size]", "[B, 2, $size, $size]"))
    (p,) = info.value.problems
    assert p.code == "E_SPEC"
    assert p.hint == "an input shape names a graph parameter without '$': [B, width, H, W]"


# --- properties: binding inside nested values, per-repetition lists ------------------------------------------

PARAMS = {"a": 3, "b": 7, "flag": True, "name": "relu"}
LEAVES = st.sampled_from([0, 1, -1, 2.5, None, True, "B", "x", "$a", "$b", "$a*b+1", "$(a+b)//2", "$flag", "$name"])
NESTED = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["p", "q", "r"]), inner, max_size=3),
    max_leaves=10,
)


def _python_value(value: Any) -> Any:
    """What each reference means, computed by Python (a reference is ``$`` and a Python expression here)."""
    if isinstance(value, str) and value.startswith("$"):
        return eval(value[1:], {}, dict(PARAMS))
    if isinstance(value, list):
        return [_python_value(v) for v in value]
    if isinstance(value, dict):
        return {k: _python_value(v) for k, v in value.items()}
    return value


@settings(max_examples=200, deadline=None)
@given(values=st.dictionaries(st.sampled_from(["shape", "kernel_size", "params", "kwargs"]), NESTED, max_size=3))
def test_binding_replaces_every_reference_at_any_depth_and_nothing_else(values: dict[str, Any]) -> None:
    from hndl._graph import Node
    from hndl._param_binding import bind_node

    node = Node("n", "relu", [], values)
    bound, found = bind_node(node, PARAMS)
    assert found == []
    assert bound.params == _python_value(values)
    assert node.params == values  # the node as written is left as it was


@settings(max_examples=100, deadline=None)
@given(repeat=st.integers(1, 6), given_=st.lists(st.integers(1, 9), min_size=0, max_size=8))
def test_a_per_repetition_list_gives_its_last_mapping_to_every_repetition_after_the_others(
    repeat: int, given_: list[int]
) -> None:
    from hndl._graph_params import repetition_params

    sub = hndl.Graph("block", params={"width": 1})
    values, reason, _ = repetition_params(sub, [{"width": w} for w in given_], repeat)
    if not given_ or len(given_) > repeat + 1:
        assert reason == f"'params' lists {len(given_)} mappings for {repeat} repetition{'s' if repeat > 1 else ''}"
        return
    assert reason == ""
    # the first len-1 mappings in turn, then the last one for whatever repetitions are left
    expected = [given_[r] if r < len(given_) - 1 else given_[-1] for r in range(repeat)]
    assert [v["width"] for v in values] == expected


@settings(max_examples=100, deadline=None)
@given(
    width=st.integers(1, 20),
    size=st.integers(1, 20),
    form=st.sampled_from(["width", "width*2", "size*size+1", "(size+width)//2", "B", "H*width"]),
)
def test_a_top_level_input_dim_is_what_python_computes_from_the_parameters(width: int, size: int, form: str) -> None:
    graph = hndl.Graph("g", params={"width": width, "size": size})
    graph.output(graph.add("relu", graph.input("x", ("B", form))))
    (contract,) = hndl.check(graph).contracts
    entry = contract.shape.entries[1]
    if form == "B":
        assert entry == "B"  # a symbol that names no parameter stays a symbol
    elif form == "H*width":
        assert entry == (f"{width}*H" if width != 1 else "H")
    else:
        size_ = eval(form, {}, {"width": width, "size": size})
        assert entry == size_
        model = hndl.build(graph)
        assert model(torch.randn(2, size_)).shape == (2, size_)
        with pytest.raises(hndl.HndlError) as info:
            model(torch.randn(2, size_ + 1))
        assert info.value.code == "E_INPUT"


def test_a_python_value_that_holds_itself_is_bound_once_without_hanging() -> None:
    from hndl._graph import Node
    from hndl._param_binding import bind_node

    loop: list[Any] = ["$w"]
    loop += [loop, loop]  # each level twice: walked naively, 2**64 visits
    shared = ["$w", 3]
    bound, found = bind_node(Node("n", "relu", [], {"a": loop, "b": [shared, shared]}), {"w": 5})
    assert found == []
    assert bound.params["a"][0] == 5
    assert bound.params["a"][1] is loop  # the container inside itself stays as written
    assert bound.params["b"] == [[5, 3], [5, 3]]
