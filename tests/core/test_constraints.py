"""Bounds a shape imposes on its input (``H >= 7`` for a 7x7 kernel without padding): E_SHAPE at check time
when the input is concrete, E_INPUT naming the input, the bound and the node on the validating call when it
is symbolic."""

from __future__ import annotations

import pytest
import torch

import hndl

STEM = """\
hndl: 1
inputs: {{x: {{shape: [B, 3, {h}, {w}]}}}}
nodes:
  stem: {{op: conv2d, in: x, out_channels: 8, kernel_size: 7}}
  pool: {{op: maxpool2d, in: stem, kernel_size: 3, stride: 2}}
outputs: [pool]
"""


def stem(h: object = "H", w: object = "W") -> hndl.GraphModule:
    return hndl.build(hndl.loads(STEM.format(h=h, w=w)))


def test_a_concrete_input_shorter_than_the_kernel_is_a_shape_error_at_check_time():
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(STEM.format(h=5, w=32)))
    problem = info.value.problems[0]
    assert (problem.code, problem.node, problem.port) == ("E_SHAPE", "stem", "x")
    assert "height (5) is smaller than the window" in problem.message
    assert problem.expected == "height >= 7"


def test_a_symbolic_input_shorter_than_the_kernel_is_an_input_error_naming_input_bound_and_node():
    model = stem()
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(1, 3, 5, 32))
    err = info.value
    assert (err.code, err.node) == ("E_INPUT", "x")
    assert "H=5 is too small for conv2d 'stem': its height needs H >= 7" in str(err)
    assert err.problems[0].expected == "H >= 7"


def test_a_bound_on_a_later_node_is_stated_in_the_inputs_symbols():
    model = stem()
    # conv leaves H-6; the 3-wide pool needs H-6 >= 3, so H = 8 passes the conv and fails at the pool
    with pytest.raises(
        hndl.HndlError, match=r"H=8 is too small for maxpool2d 'pool': its height needs H-6 >= 3"
    ) as info:
        model(torch.randn(1, 3, 8, 32))
    assert info.value.code == "E_INPUT"


def test_inputs_meeting_every_bound_run():
    model = stem()
    assert model(torch.randn(2, 3, 9, 9)).shape == (2, 8, 1, 1)


def test_the_symbolic_fast_path_checks_the_bounds_too():
    model = stem()
    model(torch.randn(1, 3, 16, 16))  # validates the symbolic key: later signatures only check the inputs
    with pytest.raises(hndl.HndlError, match="W=6 is too small for conv2d 'stem'") as info:
        model(torch.randn(1, 3, 16, 6))
    assert info.value.code == "E_INPUT"


def test_a_bound_inside_a_subgraph_names_the_inner_node():
    text = """\
hndl: 1
graphs:
  block:
    inputs: {h: {shape: [B, 8, H, W]}}
    nodes: {conv: {op: conv2d, in: h, out_channels: 8, kernel_size: 5}}
    outputs: [conv]
inputs: {x: {shape: [B, 8, H, W]}}
nodes: {body: {op: graph, graph: block, repeat: 2, in: x}}
outputs: [body]
"""
    model = hndl.build(hndl.loads(text))
    with pytest.raises(hndl.HndlError, match=r"H=8 is too small for conv2d 'body.1.conv': its height needs H-4 >= 5"):
        model(torch.randn(1, 8, 8, 16))
