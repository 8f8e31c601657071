"""An input's symbolic dim that a node fixes to a number is checked on the call (``hndl._fixed_dims``).

Static matching accepts a symbol where an op expects a number (``x: [B, T, D]`` into ``linear`` with
``in_features: 16``), since the symbol may be that number at run time; before, nothing checked that it was: a
wrong ``D`` failed inside the layer (``E_RUNTIME``), and a ``pool_at_token`` whose ``T`` another input fixed ran
on a wrong length without a word while its indices stayed in range. Now the call is ``E_INPUT`` naming the
input, the dim, expected and actual, and the node that fixed it, before any layer runs.
"""

from __future__ import annotations

import pytest
import torch

import hndl

LINEAR = """
hndl: 1
name: fixed
params: {width: 16}
inputs:
  x: {shape: [B, T, D]}
nodes:
  act:  {op: relu, in: x}
  fc:   {op: linear, in: act, in_features: $width, out_features: 8}
outputs: [fc]
"""

POOL = """
hndl: 1
name: pool
inputs:
  hidden: {shape: [B, 6, 4]}
  ids:    {shape: [B, T], dtype: int64}
nodes:
  pooled: {op: pool_at_token, in: [hidden, ids], token_id: 7}
outputs: [pooled]
"""


def _error(model: hndl.GraphModule, *inputs: torch.Tensor) -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as info:
        model(*inputs)
    (problem,) = info.value.problems
    return problem


def test_regression_an_input_dim_a_linear_fixes_was_e_runtime_inside_the_layer_and_is_e_input() -> None:
    model = hndl.build(hndl.loads(LINEAR))
    assert model(torch.randn(2, 3, 16)).shape == (2, 3, 8)
    problem = _error(model, torch.randn(2, 3, 20))
    assert problem.code == "E_INPUT"
    assert problem.node == "x"
    assert problem.location == "<string>:6:3"  # the input's line
    message = str(problem)
    assert "dim 2 (D=20) must be 16" in message
    assert "linear 'fc' has in_features=16" in message  # the node that fixed it, with its parameter
    assert problem.expected is not None
    assert "D = 16" in problem.expected
    assert problem.actual == "D = 20"
    assert "pass D=16" in (problem.hint or "")


def test_regression_the_fixed_dim_is_checked_on_every_call_not_only_the_first() -> None:
    model = hndl.build(hndl.loads(LINEAR))
    model(torch.randn(2, 3, 16))
    model(torch.randn(4, 5, 16))  # another binding of B and T: fine
    assert _error(model, torch.randn(4, 5, 12)).code == "E_INPUT"


def test_regression_a_dim_fixed_by_a_graph_parameter_follows_the_parameter() -> None:
    model = hndl.build(hndl.loads(LINEAR, params={"width": 24}))
    assert model(torch.randn(2, 3, 24)).shape == (2, 3, 8)
    problem = _error(model, torch.randn(2, 3, 16))
    assert problem.code == "E_INPUT"
    assert "dim 2 (D=16) must be 24: linear 'fc' has in_features=24" in str(problem)


def test_regression_pool_at_token_on_a_wrong_length_ran_silently_and_is_e_input() -> None:
    model = hndl.build(hndl.loads(POOL))
    hidden = torch.randn(2, 6, 4)
    ids = torch.tensor([[1, 2, 7, 3, 4, 5], [7, 1, 1, 1, 1, 1]])
    assert torch.equal(model(hidden, ids), hidden[torch.arange(2), torch.tensor([2, 0])])
    short = ids[:, :4]  # every index it would pool at (2 and 0) is in range of hidden's 6 rows
    problem = _error(model, hidden, short)
    assert problem.code == "E_INPUT"
    assert problem.node == "ids"
    assert "dim 1 (T=4) must be 6" in str(problem)
    assert "pool_at_token 'pooled'" in str(problem)


def test_a_dim_fixed_inside_a_repeated_subgraph_is_checked_at_the_model_input() -> None:
    spec = """
hndl: 1
name: stack
inputs:
  x: {shape: [B, D]}
nodes:
  blocks: {op: graph, graph: block, repeat: 2, in: x}
outputs: [blocks]
graphs:
  block:
    inputs:
      h: {shape: [B, C]}
    nodes:
      fc: {op: linear, in: h, in_features: 8, out_features: 8}
    outputs: [fc]
"""
    model = hndl.build(hndl.loads(spec))
    assert model(torch.randn(3, 8)).shape == (3, 8)
    problem = _error(model, torch.randn(3, 5))
    assert problem.code == "E_INPUT"
    assert "dim 1 (D=5) must be 8" in str(problem)
    assert "linear 'blocks.0.fc'" in str(problem)


def test_regression_two_nodes_that_fix_one_dim_to_two_sizes_are_e_shape_at_check() -> None:
    spec = """
hndl: 1
name: clash
inputs:
  x: {shape: [B, D]}
nodes:
  a: {op: linear, in: x, in_features: 16, out_features: 4}
  b: {op: linear, in: x, in_features: 12, out_features: 4}
outputs: [a, b]
"""
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(spec))
    (problem,) = info.value.problems
    assert (problem.code, problem.node) == ("E_SHAPE", "b")
    assert "input dim D is 16 for linear 'a' has in_features=16, and 12 for linear 'b'" in problem.message


def test_a_fixed_size_outside_a_range_given_by_hand_is_e_shape_at_check() -> None:
    spec = LINEAR.replace("x: {shape: [B, T, D]}", "x: {shape: [B, T, D], ranges: {D: {max: 8}}}")
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(spec))
    problem = info.value.problems[0]
    assert problem.code == "E_SHAPE"
    assert "D <= 8" in problem.message
    assert "must be 16" in problem.message


def test_a_dim_that_is_only_passed_through_stays_free() -> None:
    # A symbol no node fixes keeps taking any size, and a dumped spec does not write the derived range.
    spec = LINEAR.replace("out_features: 8}", "out_features: 8, when: false}")
    model = hndl.build(hndl.loads(spec))
    assert model(torch.randn(2, 3, 20)).shape == (2, 3, 20)
    assert model(torch.randn(2, 3, 12)).shape == (2, 3, 12)
    assert "ranges" not in hndl.dumps(hndl.loads(LINEAR))


def test_regression_a_layernorms_normalized_shape_fixes_the_dim_it_normalises() -> None:
    spec = LINEAR.replace("{op: relu, in: x}", "{op: layernorm, in: x, normalized_shape: [16]}")
    model = hndl.build(hndl.loads(spec.replace("outputs: [fc]", "outputs: [act]")))
    problem = _error(model, torch.randn(2, 3, 20))
    assert problem.code == "E_INPUT"
    assert "dim 2 (D=20) must be 16: layernorm 'act' has normalized_shape=16" in str(problem)


def test_example_inputs_and_dynamic_shapes_use_the_fixed_size() -> None:
    model = hndl.build(hndl.loads(LINEAR))
    (x,) = hndl.torch.example_inputs(model)
    assert x.shape[2] == 16
    assert model(x).shape[-1] == 8
    shapes = hndl.torch.dynamic_shapes(model)
    assert 2 not in shapes["x"]  # D is static under torch.export; B and T stay dynamic
    assert set(shapes["x"]) == {0, 1}
