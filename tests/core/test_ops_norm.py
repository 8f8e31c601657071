"""Normalisation ops: batchnorm1d, batchnorm2d, layernorm, rmsnorm, groupnorm."""

from __future__ import annotations

import pytest
import torch
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl


def _params(op: str, shape: tuple, **params) -> dict:
    return dict(hndl.check(one_node_graph(op, (shape,), None, params)).nodes[0].params)


# --- batchnorm ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [("N", 4), ("N", 4, "L")])
def test_batchnorm1d_accepts_rank_2_and_3(shape):
    assert infer("batchnorm1d", shape) == ["[" + ", ".join(map(str, shape)) + "]"]
    runs_as_inferred("batchnorm1d", shape, env={"N": 3, "L": 5}, momentum=None)
    assert _params("batchnorm1d", shape)["num_features"] == 4


def test_batchnorm2d_infers_num_features():
    assert infer("batchnorm2d", ("N", 16, "H", "W")) == ["[N, 16, H, W]"]
    runs_as_inferred("batchnorm2d", ("N", 16, "H", "W"), env={"N": 2, "H": 3, "W": 4}, affine=False)
    assert _params("batchnorm2d", ("N", 16, 3, 3), eps=1e-3)["num_features"] == 16


def test_batchnorm_builds_with_the_parameters():
    g = one_node_graph(
        "batchnorm2d", (("N", 8, 4, 4),), None, {"eps": 1e-3, "momentum": 0.2, "track_running_stats": False}
    )
    bn = hndl.build(g).nodes["n_n"]
    assert isinstance(bn, torch.nn.BatchNorm2d)
    assert (bn.num_features, bn.eps, bn.momentum, bn.running_mean) == (8, 1e-3, 0.2, None)


def test_batchnorm1d_rejects_rank_4_with_a_hint():
    p = problem("batchnorm1d", ("N", 4, 5, 6))
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "batchnorm1d", "x")
    assert p.message == "batchnorm1d takes a rank-2 or rank-3 input, got rank 4 [N, 4, 5, 6]"
    assert (p.expected, p.actual) == ("[N, C] or [N, C, L]", "[N, 4, 5, 6]")
    assert p.hint == "use batchnorm2d for [N, C, H, W]"


def test_batchnorm_rank_and_parameter_errors():
    p = problem("batchnorm1d", ("N",))
    assert (p.code, p.message) == ("E_SHAPE", "expected rank >= 2 [N, num_features, *rest], got rank 1 [N]")
    p = problem("batchnorm2d", ("N", 4, 5))
    assert (p.code, p.expected, p.actual) == ("E_SHAPE", "[N, num_features, H, W]", "[N, 4, 5]")
    p = problem("batchnorm2d", ("N", 4, 5, 5), momentum=2.0)
    assert (p.code, p.message) == ("E_PARAM", "parameter 'momentum' must be <= 1, got 2.0")


# --- layernorm, rmsnorm ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_trailing_norms_default_to_the_last_dim(op):
    assert infer(op, ("B", "T", 8)) == ["[B, T, 8]"]
    assert infer(op, ("*batch", 8)) == ["[*batch, 8]"]
    assert _params(op, ("B", "T", 8))["normalized_shape"] == (8,)
    runs_as_inferred(op, ("B", "T", 8), env={"B": 2, "T": 3})


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_trailing_norms_over_several_dims(op):
    assert infer(op, ("B", 4, 8), normalized_shape=[4, 8]) == ["[B, 4, 8]"]
    runs_as_inferred(op, ("B", 4, 8), env={"B": 2}, normalized_shape=[4, 8])
    g = one_node_graph(op, (("B", 4, 8),), None, {"normalized_shape": [4, 8]})
    assert tuple(hndl.build(g).nodes["n_n"].normalized_shape) == (4, 8)


def test_layernorm_and_rmsnorm_parameters_reach_torch():
    ln = hndl.build(one_node_graph("layernorm", (("B", 8),), None, {"eps": 1e-6, "bias": False})).nodes["n_n"]
    assert isinstance(ln, torch.nn.LayerNorm)
    assert (ln.eps, ln.bias) == (1e-6, None)
    rms = hndl.build(one_node_graph("rmsnorm", (("B", 8),), None, {})).nodes["n_n"]
    assert isinstance(rms, torch.nn.RMSNorm)
    assert rms.eps is None


def test_layernorm_trailing_dims_must_match():
    p = problem("layernorm", ("B", "T", 8), normalized_shape=[4, 9])
    assert (p.code, p.node, p.port) == ("E_SHAPE", "n", "x")
    assert p.message == "the input's last 2 dims do not match normalized_shape [4, 9]"
    assert (p.expected, p.actual) == ("[..., 4, 9]", "[B, T, 8]")
    assert p.hint == "normalized_shape names the input's trailing dims; omit it to normalise over the last dim"


def test_layernorm_normalized_shape_longer_than_the_input():
    p = problem("rmsnorm", ("B", "T", 8), normalized_shape=[4, 2, 3, 8])
    assert (p.code, p.message) == ("E_SHAPE", "normalized_shape [4, 2, 3, 8] has 4 dims, the input only 3")
    assert (p.expected, p.actual) == ("[..., 4, 2, 3, 8]", "[B, T, 8]")


def test_layernorm_symbolic_last_dim_cannot_size_the_layer():
    p = problem("layernorm", ("B", "D"))
    assert p.code == "E_SHAPE"
    assert p.message == "parameter 'normalized_shape' follows from an input dim that is not a fixed number"
    assert (p.expected, p.actual) == ("an int", "D")
    assert p.hint == "give that input dim as an int in the input's shape, or set normalized_shape"


def test_norm_parameter_bounds():
    p = problem("rmsnorm", ("B", 8), eps=-1.0)
    assert (p.code, p.message) == ("E_PARAM", "parameter 'eps' must be >= 0, got -1.0")
    p = problem("layernorm", ("B", 8), normalized_shape=[0])
    assert (p.code, p.message) == ("E_PARAM", "parameter 'normalized_shape' must be >= 1, got [0]")


# --- groupnorm ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [("N", 6), ("N", 6, "L"), ("N", 6, "H", "W")])
def test_groupnorm_keeps_shape(shape):
    assert infer("groupnorm", shape, num_groups=3) == ["[" + ", ".join(map(str, shape)) + "]"]
    runs_as_inferred("groupnorm", shape, env={"N": 2, "L": 4, "H": 3, "W": 2}, num_groups=3)
    assert _params("groupnorm", shape, num_groups=2)["num_channels"] == 6


def test_groupnorm_groups_must_divide_channels():
    p = problem("groupnorm", ("N", 6, 5), num_groups=4)
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "groupnorm", "x")
    assert p.message == "num_groups=4 does not divide the 6 channels"
    assert (p.expected, p.actual) == ("channels divisible by num_groups (4)", 6)
    assert p.hint == "choose num_groups to divide the channel count (dim 1)"


def test_groupnorm_given_channels_must_agree():
    p = problem("groupnorm", ("N", 6, 5), num_groups=3, num_channels=8)
    assert (p.code, p.message) == ("E_SHAPE", "dim 1 is num_channels, bound to 8, but got 6")
    assert p.hint == "drop num_channels: hndl infers it from the input"
