"""Convolutions and pooling: conv1d, conv2d, maxpool2d, avgpool2d, adaptive_avgpool2d."""

from __future__ import annotations

import pytest
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl

# --- conv1d ---------------------------------------------------------------------------------------------


def test_conv1d_output_length_is_symbolic():
    assert infer("conv1d", ("N", 4, "L"), out_channels=8, kernel_size=3, stride=2) == ["[N, 8, (L-3)//2+1]"]
    assert infer("conv1d", ("N", 4, "L"), out_channels=8, kernel_size=3, padding=1) == ["[N, 8, L]"]
    assert infer("conv1d", ("N", 4, 100), out_channels=8, kernel_size=5, dilation=2) == ["[N, 8, 92]"]


@pytest.mark.parametrize(
    ("params", "env"),
    [
        ({"out_channels": 8, "kernel_size": 3, "stride": 2}, {"N": 2, "L": 17}),
        ({"out_channels": 6, "kernel_size": 4, "padding": 2, "dilation": 3, "groups": 2}, {"N": 1, "L": 9}),
        ({"out_channels": 4, "kernel_size": 1, "bias": False}, {"N": 3, "L": 1}),
    ],
)
def test_conv1d_runs_as_inferred(params, env):
    runs_as_inferred("conv1d", ("N", 4, "L"), env=env, **params)


def test_conv1d_infers_in_channels():
    node = hndl.check(one_node_graph("conv1d", (("N", 12, "L"),), None, {"out_channels": 3, "kernel_size": 3})).nodes[0]
    assert node.params["in_channels"] == 12


def test_conv1d_input_shorter_than_window():
    p = problem("conv1d", ("N", 4, 4), out_channels=8, kernel_size=3, dilation=2)
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "conv1d", "x")
    assert p.message == "the input's length (4) is smaller than the window (5 = dilation*(kernel_size-1)+1)"
    assert (p.expected, p.actual) == ("length >= 5", 4)
    assert p.hint == "use a smaller kernel_size or dilation, more padding, or a larger input"


def test_conv1d_symbolic_channels_cannot_size_the_layer():
    p = problem("conv1d", ("N", "C", 4), out_channels=8, kernel_size=3)
    assert p.code == "E_SHAPE"
    assert p.message == "parameter 'in_channels' follows from an input dim that is not a fixed number"
    assert p.hint == "give that input dim as an int in the input's shape, or set in_channels"


def test_conv1d_parameter_validation():
    assert problem("conv1d", ("N", 4, 9), out_channels=8, kernel_size=[3, 3]).message == (
        "parameter 'kernel_size' must be integer, got list [3, 3]"
    )
    p = problem("conv1d", ("N", 4, 9), out_channels=8, kernel_size=3, stride=0)
    assert (p.code, p.message) == ("E_PARAM", "parameter 'stride' must be >= 1, got 0")


def test_conv1d_wrong_rank():
    p = problem("conv1d", ("N", 4, 9, 9), out_channels=8, kernel_size=3)
    assert (p.code, p.port) == ("E_SHAPE", "x")
    assert p.message == "expected rank 3 [N, in_channels, L], got rank 4 [N, 4, 9, 9]"


# --- conv2d ---------------------------------------------------------------------------------------------


def test_conv2d_pairs_and_symbolic_sizes():
    assert infer("conv2d", ("N", 3, "H", "W"), out_channels=16, kernel_size=3, stride=2) == [
        "[N, 16, (H-3)//2+1, (W-3)//2+1]"
    ]
    assert infer("conv2d", ("N", 3, "H", "W"), out_channels=2, kernel_size=[3, 1], padding=[1, 0]) == ["[N, 2, H, W]"]
    assert infer("conv2d", ("B", 3, 224, 224), out_channels=768, kernel_size=16, stride=16) == ["[B, 768, 14, 14]"]


@pytest.mark.parametrize(
    ("params", "env"),
    [
        ({"out_channels": 4, "kernel_size": 3, "stride": 2}, {"N": 2, "H": 17, "W": 9}),
        (
            {"out_channels": 6, "kernel_size": [3, 2], "stride": [1, 3], "padding": [2, 1], "groups": 2},
            {"N": 1, "H": 5, "W": 8},
        ),
        ({"out_channels": 2, "kernel_size": 2, "dilation": [2, 1], "bias": False}, {"N": 2, "H": 3, "W": 2}),
    ],
)
def test_conv2d_runs_as_inferred(params, env):
    runs_as_inferred("conv2d", ("N", 4, "H", "W"), env=env, **params)


def test_conv2d_groups_must_divide_out_channels():
    p = problem("conv2d", ("N", 8, "H", "W"), out_channels=6, kernel_size=3, groups=4)
    assert (p.code, p.node, p.port) == ("E_PARAM", "n", None)
    assert p.message == "groups=4 does not divide out_channels=6"
    assert (p.expected, p.actual) == ("a divisor of out_channels (6)", 4)
    assert p.hint == "choose out_channels and groups so that out_channels % groups == 0"


def test_conv2d_groups_must_divide_input_channels():
    p = problem("conv2d", ("N", 6, "H", "W"), out_channels=8, kernel_size=3, groups=4)
    assert (p.code, p.node, p.port) == ("E_SHAPE", "n", "x")
    assert p.message == "groups=4 does not divide the input's 6 channels"
    assert (p.expected, p.actual) == ("channels divisible by groups (4)", 6)
    assert p.hint == "choose groups to divide the input's channel count"


def test_conv2d_input_smaller_than_padded_window():
    p = problem("conv2d", ("N", 3, 2, "W"), out_channels=8, kernel_size=7, padding=2)
    assert (p.code, p.port) == ("E_SHAPE", "x")
    assert (
        p.message == "the input's height (2, padded to 6) is smaller than the window (7 = dilation*(kernel_size-1)+1)"
    )
    assert (p.expected, p.actual) == ("height >= 3", 2)


def test_conv2d_bad_kernel_pair():
    p = problem("conv2d", ("N", 6, 4, 4), out_channels=8, kernel_size=[3, 3, 3])
    assert (p.code, p.message) == (
        "E_PARAM",
        "parameter 'kernel_size' must be an integer or a list of two integers, got [3, 3, 3]",
    )


def test_conv2d_wrong_rank_names_the_pattern():
    p = problem("conv2d", ("N", 6, "W"), out_channels=8, kernel_size=3)
    assert (p.code, p.port, p.expected, p.actual) == ("E_SHAPE", "x", "[N, in_channels, H, W]", "[N, 6, W]")


# --- pools ----------------------------------------------------------------------------------------------


def test_pool_shapes():
    assert infer("maxpool2d", ("N", 4, "H", "W"), kernel_size=2) == ["[N, 4, H//2, W//2]"]  # (H-2)//2+1 simplified
    assert infer("maxpool2d", ("N", 4, 7, 7), kernel_size=2, ceil_mode=True) == ["[N, 4, 4, 4]"]
    # the last window can never start in the padding here, so ceil mode stays symbolic
    assert infer("maxpool2d", ("N", 4, "H", "W"), kernel_size=3, stride=2, padding=1, ceil_mode=True) == [
        "[N, 4, H//2+1, W//2+1]"
    ]
    assert infer("avgpool2d", ("N", 4, 9, 8), kernel_size=[3, 2], stride=[3, 1]) == ["[N, 4, 3, 7]"]
    assert infer("adaptive_avgpool2d", ("N", 4, "H", "W"), output_size=[2, 3]) == ["[N, 4, 2, 3]"]


@pytest.mark.parametrize(
    ("op", "params"),
    [
        ("maxpool2d", {"kernel_size": 3, "stride": 2, "padding": 1}),
        ("maxpool2d", {"kernel_size": [2, 3], "dilation": 2, "ceil_mode": True}),
        ("maxpool2d", {"kernel_size": 2, "stride": [1, 2], "ceil_mode": True}),
        ("avgpool2d", {"kernel_size": 2}),
        ("avgpool2d", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True, "count_include_pad": False}),
        ("adaptive_avgpool2d", {"output_size": 1}),
        ("adaptive_avgpool2d", {"output_size": [3, 2]}),
    ],
)
@pytest.mark.parametrize("hw", [(7, 9), (8, 8), (12, 5)])
def test_pools_run_as_inferred(op, params, hw):
    runs_as_inferred(op, ("N", 3, "H", "W"), env={"N": 2, "H": hw[0], "W": hw[1]}, **params)


def test_pool_padding_at_most_half_the_kernel():
    p = problem("maxpool2d", ("N", 4, 8, 8), kernel_size=3, padding=2)
    assert (p.code, p.node, p.op) == ("E_PARAM", "n", "maxpool2d")
    assert p.message == "padding 2 is more than half the kernel size 3"
    assert (p.expected, p.actual) == ("padding <= 1", 2)
    assert p.hint == "torch pools pad each side with at most kernel_size // 2"
    assert problem("avgpool2d", ("N", 4, 8, 8), kernel_size=2, padding=[0, 2]).message == (
        "padding 2 is more than half the kernel size 2"
    )


def test_pool_input_smaller_than_window():
    p = problem("maxpool2d", ("N", 4, 2, 8), kernel_size=3)
    assert (p.code, p.port, p.message) == (
        "E_SHAPE",
        "x",
        "the input's height (2) is smaller than the window (3 = dilation*(kernel_size-1)+1)",
    )


def test_adaptive_pool_errors():
    p = problem("adaptive_avgpool2d", ("N", 4, 8, 8), output_size=0)
    assert (p.code, p.message) == ("E_PARAM", "parameter 'output_size' must be >= 1, got [0, 0]")
    p = problem("adaptive_avgpool2d", ("N", 4, 0, 8), output_size=1)
    assert (p.code, p.port, p.message, p.expected, p.actual) == (
        "E_SHAPE",
        "x",
        "the input's height is 0",
        "height >= 1",
        0,
    )


def test_conv_keeps_dtype():
    g = one_node_graph("conv2d", (("N", 3, 8, 8),), ["float64"], {"out_channels": 2, "kernel_size": 3})
    assert hndl.check(g).nodes[0].out_types[0].dtype == "float64"
