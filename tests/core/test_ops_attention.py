"""The attention vocabulary: sdpa, rotary, relative_position_bias, attention_mask, the attention op's grouped
heads, layouts, biases, scales, positions, windows and score biases, and repeat's shared inputs.

Values are checked against formulas written here independently of the layers (softmax by hand, rotation as
complex multiplication, T5's buckets worked out by hand); transformers itself is the reference in
tests/zoo/test_zoo_transformers.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from op_helpers import infer, problem, runs_as_inferred

import hndl
from hndl.torch import _attention_layers, _position_layers

# --- helpers ----------------------------------------------------------------------------------------------


def by_hand(q, k, v, allowed=None, bias=None, scale=None):
    """softmax(q @ k^T * scale + bias, masked) @ v, key/value heads repeated for their query heads."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = q @ k.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if bias is not None:
        scores = scores + bias
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


def one_node(op, shapes, dtypes=None, **params):
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", s, dtype=(dtypes or [None] * len(shapes))[i]) for i, s in enumerate(shapes)]
    g.output(g.add(op, xs, name="n", **params))
    return hndl.build(g).eval()


# --- sdpa -------------------------------------------------------------------------------------------------


def test_sdpa_shapes_with_grouped_heads_and_another_value_width():
    assert infer("sdpa", ("B", 8, "T", 16), ("B", 2, "S", 16), ("B", 2, "S", 12)) == ["[B, 8, T, 12]"]
    runs_as_inferred(
        "sdpa", ("B", 8, "T", 16), ("B", 2, "S", 16), ("B", 2, "S", 12), env={"B": 2, "T": 3, "S": 5}, causal=True
    )


def test_sdpa_with_grouped_heads_equals_the_formula_with_and_without_a_mask():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    model = one_node("sdpa", [("B", 6, "T", 8), ("B", 3, "T", 8), ("B", 3, "T", 8)])
    torch.testing.assert_close(model(q, k, v), by_hand(q, k, v), atol=1e-6, rtol=1e-5)
    causal = one_node("sdpa", [("B", 6, "T", 8), ("B", 3, "T", 8), ("B", 3, "T", 8)], causal=True)
    tril = torch.ones(5, 5, dtype=torch.bool).tril()
    torch.testing.assert_close(causal(q, k, v), by_hand(q, k, v, tril), atol=1e-6, rtol=1e-5)
    masked = one_node(
        "sdpa",
        [("B", 6, "T", 8), ("B", 3, "T", 8), ("B", 3, "T", 8), ("B", "T")],
        [None, None, None, "bool"],
        masked=True,
        scale=0.5,
    )
    padding = torch.tensor([[True] * 5, [True, True, True, False, False]])
    expected = by_hand(q, k, v, padding[:, None, None, :], scale=0.5)
    torch.testing.assert_close(masked(q, k, v, padding), expected, atol=1e-6, rtol=1e-5)


def test_sdpa_repeats_key_value_heads_where_sdpa_cannot_group_them(monkeypatch):
    # torch 2.4 has no enable_gqa: the heads are repeated instead, to the same result.
    torch.manual_seed(1)
    q, k, v = torch.randn(1, 4, 3, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    model = one_node("sdpa", [(1, 4, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8)], causal=True)
    native = model(q, k, v)
    monkeypatch.setattr(_attention_layers, "_GQA_NATIVE", False)
    torch.testing.assert_close(model(q, k, v), native, atol=1e-6, rtol=1e-6)


def test_sdpa_sliding_window_sees_the_window_latest_keys():
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, 2, 6, 4) for _ in range(3))
    model = one_node("sdpa", [(1, 2, 6, 4)] * 3, causal=True, window=3)
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    allowed = (j <= i) & (j > i - 3)  # query 5 sees keys 3, 4, 5
    torch.testing.assert_close(model(q, k, v), by_hand(q, k, v, allowed), atol=1e-6, rtol=1e-5)


def test_sdpa_errors_name_the_fix():
    p = problem("sdpa", ("B", 8, "T", 16), ("B", 3, "S", 16), ("B", 3, "S", 16))
    assert (p.code, p.port, p.message) == ("E_SHAPE", "k", "3 key/value heads do not divide 8 query heads")
    assert p.hint == "each key/value head serves a whole group of query heads: try 2 or 4"
    p = problem("sdpa", ("B", 8, "T", 16), ("B", 8, "S", 8), ("B", 8, "S", 8))
    assert (p.code, p.port) == ("E_SHAPE", "k")
    assert p.expected == "[B, Hkv, S, D]"
    p = problem(
        "sdpa",
        ("B", 2, "T", 8),
        ("B", 2, "T", 8),
        ("B", 2, "T", 8),
        ("B", "T"),
        dtypes=[None, None, None, "int64"],
        masked=True,
    )
    assert (p.code, p.port) == ("E_DTYPE", "mask")
    assert p.hint.startswith("pass mask.bool() for a 1/0 padding mask")
    p = problem(
        "sdpa", (2, 2, 4, 8), (2, 2, 4, 8), (2, 2, 4, 8), (2, 5), dtypes=[None, None, None, "bool"], masked=True
    )
    assert (p.code, p.port) == ("E_SHAPE", "mask")
    assert p.message == (
        "the padding mask [2, 5] (read as [2, 1, 1, 5]) does not broadcast to the attention scores "
        "[B, num_heads, T, S] = [2, 2, 4, 4]"
    )
    p = problem("sdpa", ("B", 2, "T", 8), ("B", 2, "T", 8), ("B", 2, "T", 8), window=4)
    assert (p.code, p.message) == ("E_PARAM", "window=4 is a sliding window over earlier keys, and causal is false")
    assert p.hint == "set causal: true (Mistral's sliding window), or drop window"


# --- rotary -----------------------------------------------------------------------------------------------


def rotated(x, positions, theta=10000.0, dims=None, interleaved=False):
    """RoPE as complex multiplication: channel pair j turns by position * theta**(-2j/dims)."""
    d = x.shape[-1] if dims is None else dims
    rot, rest = x[..., :d].double(), x[..., d:]
    if interleaved:
        pairs = torch.complex(rot[..., 0::2], rot[..., 1::2])
    else:
        pairs = torch.complex(rot[..., : d // 2], rot[..., d // 2 :])
    freq = theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    turned = pairs * torch.polar(torch.ones((), dtype=torch.float64), positions.double()[..., None] * freq)
    if interleaved:
        out = torch.stack((turned.real, turned.imag), dim=-1).flatten(-2)
    else:
        out = torch.cat((turned.real, turned.imag), dim=-1)
    return torch.cat((out.float(), rest), dim=-1)


def test_rotary_shapes_and_the_inferred_head_dim():
    assert infer("rotary", ("B", 8, "T", 64)) == ["[B, 8, T, 64]"]
    assert infer("rotary", ("B", 8, "T", 64), (), dtypes=[None, "int64"]) == ["[B, 8, T, 64]"]
    runs_as_inferred("rotary", ("B", 2, "T", 16), ("B", "T"), dtypes=[None, "int64"], env={"B": 2, "T": 5})


@pytest.mark.parametrize("interleaved", [False, True])
def test_rotary_turns_channel_pairs_by_position(interleaved):
    torch.manual_seed(3)
    x = torch.randn(2, 3, 7, 16)
    model = one_node("rotary", [("B", 3, "T", 16)], theta=100.0, interleaved=interleaved)
    torch.testing.assert_close(model(x), rotated(x, torch.arange(7), 100.0, interleaved=interleaved), atol=1e-5, rtol=0)


def test_rotary_positions_as_an_offset_ids_or_per_batch_ids():
    torch.manual_seed(4)
    x = torch.randn(2, 2, 4, 8)
    offset = one_node("rotary", [("B", 2, "T", 8), ()], [None, "int64"])
    plain = one_node("rotary", [("B", 2, "T", 8)])
    ids = one_node("rotary", [("B", 2, "T", 8), ("T",)], [None, "int64"])
    per_batch = one_node("rotary", [("B", 2, "T", 8), ("B", "T")], [None, "int64"])
    expected = rotated(x, torch.arange(3, 7))
    torch.testing.assert_close(offset(x, torch.tensor(3)), expected, atol=1e-5, rtol=0)
    assert torch.equal(ids(x, torch.arange(3, 7)), offset(x, torch.tensor(3)))
    assert torch.equal(plain(x), ids(x, torch.arange(4)))
    positions = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    out = per_batch(x, positions)
    assert torch.equal(out[0], plain(x)[0])
    assert torch.equal(out[1], offset(x, torch.tensor(5))[1])


def test_partial_rotary_leaves_the_last_channels_alone():
    torch.manual_seed(5)
    x = torch.randn(1, 2, 5, 16)
    model = one_node("rotary", [(1, 2, 5, 16)], dims=6)
    out = model(x)
    assert torch.equal(out[..., 6:], x[..., 6:])
    torch.testing.assert_close(out, rotated(x, torch.arange(5), dims=6), atol=1e-5, rtol=0)


def test_rotary_scores_depend_on_relative_positions_only():
    torch.manual_seed(6)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)
    model = one_node("rotary", [(1, 1, 1, 8), ()], [None, "int64"])
    score = [(model(q, torch.tensor(m)) * model(k, torch.tensor(m - 2))).sum() for m in (2, 5, 11)]
    torch.testing.assert_close(score[0], score[1], atol=1e-5, rtol=0)
    torch.testing.assert_close(score[0], score[2], atol=1e-5, rtol=0)


def test_rotary_frequencies_are_a_non_persistent_float32_buffer_through_conversions():
    model = one_node("rotary", [(1, 2, 3, 8)], theta=500000.0)
    layer = model.nodes["n_n"]
    assert list(model.state_dict()) == []  # as transformers: no key for the frequencies
    before = layer.inv_freq.clone()
    model.double()
    assert layer.inv_freq.dtype == torch.float32
    assert torch.equal(layer.inv_freq, before)
    x = torch.randn(1, 2, 3, 8, dtype=torch.float64)
    assert model(x).dtype == torch.float64


def test_llama3_scaling_divides_low_frequencies_and_keeps_high_ones():
    plain = _position_layers.rope_frequencies(128, 500000.0)
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }
    scaled = _position_layers.rope_frequencies(128, 500000.0, scaling)
    wavelength = 2 * math.pi / plain
    high, low = wavelength < 8192 / 4, wavelength > 8192
    assert torch.equal(scaled[high], plain[high])
    assert torch.equal(scaled[low], plain[low] / 8)
    middle = ~high & ~low
    assert middle.any()
    assert ((scaled[middle] < plain[middle]) & (scaled[middle] > plain[middle] / 8)).all()
    linear = _position_layers.rope_frequencies(64, 10000.0, {"rope_type": "linear", "factor": 2.0})
    assert torch.equal(linear, _position_layers.rope_frequencies(64, 10000.0) / 2)


def test_rotary_errors_name_the_fix():
    p = problem("rotary", ("B", 2, "T", 64), dims=63)
    assert (p.code, p.message, p.hint) == ("E_PARAM", "rotary dims 63 is odd", "use dims 62 or 64")
    assert p.expected == "an even number: RoPE rotates pairs of channels"
    p = problem("rotary", ("B", 2, "T", 64), dims=80)
    assert (p.code, p.message) == ("E_PARAM", "rotary dims 80 are more than the head dim 64")
    assert p.hint == "rotate at most the whole head: dims 64 (or null)"
    p = problem("rotary", ("B", 2, "T", 64), ("T",), dtypes=[None, "float32"])
    assert (p.code, p.port) == ("E_DTYPE", "positions")
    p = problem("rotary", ("B", 2, 4, 64), (5,), dtypes=[None, "int64"])
    assert (p.code, p.port, p.message) == ("E_SHAPE", "positions", "positions [5] do not fit x [B, 2, 4, 64]")
    p = problem("rotary", ("B", 2, "T", 64), scaling={"rope_type": "llama3", "low_freq_factor": 4.0})
    assert p.code == "E_PARAM"
    assert p.message == "llama3 scaling needs 0 < low_freq_factor < high_freq_factor, got 4.0 and 4.0"
    p = problem("rotary", ("B", 2, "T", 64), scaling={"rope_type": "yarn"})
    assert p.code == "E_PARAM"
    assert "rope_type must be one of 'default', 'linear', 'llama3'" in p.message


# --- relative_position_bias -------------------------------------------------------------------------------


def test_relative_position_bias_shapes():
    assert infer("relative_position_bias", ("B", "T", 32), num_heads=4) == ["[1, 4, T, T]"]
    assert infer("relative_position_bias", ("B", "T", 32), ("B", "S", 16), num_heads=4) == ["[1, 4, T, S]"]
    runs_as_inferred("relative_position_bias", ("B", "T", 8), ("B", "S", 8), env={"B": 2, "T": 3, "S": 6}, num_heads=2)


def test_t5_buckets_worked_out_by_hand():
    relative = torch.tensor([0, -1, 1, -7, -8, -20, 20, -200, 200])
    bidirectional = _position_layers.relative_buckets(relative, bidirectional=True, num_buckets=32, max_distance=128)
    # 16 buckets per sign, 8 exact: |d| < 8 is its own bucket; then 8 + int(log(|d|/8) / log(16) * 8), at most 15
    assert bidirectional.tolist() == [0, 1, 17, 7, 8, 10, 26, 15, 31]
    causal = _position_layers.relative_buckets(relative, bidirectional=False, num_buckets=32, max_distance=128)
    # later keys (d > 0) share bucket 0; 16 exact buckets, then 16 + int(log(|d|/16) / log(8) * 16), at most 31
    assert causal.tolist() == [0, 1, 0, 7, 8, 17, 0, 31, 0]


def test_relative_position_bias_is_the_table_row_of_each_bucket():
    model = one_node("relative_position_bias", [("B", "T", 8)], num_heads=3)
    table = model.nodes["n_n"].weight
    bias = model(torch.zeros(2, 5, 8))
    assert bias.shape == (1, 3, 5, 5)
    buckets = _position_layers.relative_buckets(
        torch.arange(5)[None, :] - torch.arange(5)[:, None], bidirectional=True, num_buckets=32, max_distance=128
    )
    assert torch.equal(bias[0], table[buckets].permute(2, 0, 1))
    assert list(model.state_dict()) == ["nodes.n_n.weight"]


def test_relative_position_bias_errors():
    p = problem("relative_position_bias", ("B", "T", 8), num_heads=2, num_buckets=3)
    assert (p.code, p.message) == ("E_PARAM", "num_buckets 3 leaves no exact buckets")
    p = problem("relative_position_bias", ("B", "T", 8), num_heads=2, max_distance=8)
    assert (p.code, p.message) == ("E_PARAM", "max_distance 8 is within the 8 exact buckets")
    assert p.hint == "T5 uses num_buckets 32 and max_distance 128"


# --- attention_mask ---------------------------------------------------------------------------------------


def test_attention_mask_folds_padding_with_causal_and_window():
    assert infer("attention_mask", ("B", "S"), dtypes=["bool"], causal=True) == ["[B, 1, S, S]"]
    model = one_node("attention_mask", [("B", "S")], ["bool"], causal=True, window=2)
    padding = torch.tensor([[True, True, True, True], [False, True, True, True]])
    mask = model(padding)
    i, j = torch.arange(4)[:, None], torch.arange(4)[None, :]
    expected = padding[:, None, None, :] & ((j <= i) & (j > i - 2))
    assert torch.equal(mask, expected)
    bidirectional = one_node("attention_mask", [("B", "S")], ["bool"])
    assert torch.equal(bidirectional(padding), padding[:, None, None, :].expand(2, 1, 4, 4))


def test_attention_mask_errors():
    p = problem("attention_mask", ("B", "S"), dtypes=["int64"])
    assert (p.code, p.port) == ("E_DTYPE", "padding")
    assert p.message == "needs dtype bool, got int64"
    assert p.hint == (
        "declare the input's dtype: bool and pass a bool tensor (mask.bool() in torch), or make it bool in the graph: "
        "{op: ne, in: x, b: 0} or {op: cast, dtype: bool}"
    )
    p = problem("attention_mask", ("B", "S"), dtypes=["bool"], window=3)
    assert p.code == "E_PARAM"


# --- attention: layouts, heads, positions -----------------------------------------------------------------


def attention_graph(*shapes, dtypes=None, **params):
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", s, dtype=(dtypes or [None] * len(shapes))[i]) for i, s in enumerate(shapes)]
    g.output(g.add("attention", xs, name="attn", **params))
    return g


def test_separate_projections_with_grouped_heads_and_a_bias_list():
    model = hndl.build(attention_graph(("B", "T", 32), num_heads=4, kv_heads=2, fused=False, bias=["q", "v", "o"]))
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == {
        "nodes.n_attn.q_proj.weight": (32, 32),
        "nodes.n_attn.q_proj.bias": (32,),
        "nodes.n_attn.k_proj.weight": (16, 32),
        "nodes.n_attn.v_proj.weight": (16, 32),
        "nodes.n_attn.v_proj.bias": (16,),
        "nodes.n_attn.o_proj.weight": (32, 32),
        "nodes.n_attn.o_proj.bias": (32,),
    }


def test_fused_projection_with_grouped_heads_and_cross_attention_layouts():
    fused = hndl.build(attention_graph(("B", "T", 32), num_heads=4, kv_heads=1, head_dim=4))
    assert {k: tuple(v.shape) for k, v in fused.state_dict().items()} == {
        "nodes.n_attn.qkv.weight": (24, 32),  # 4 query heads, one key head and one value head of 4
        "nodes.n_attn.qkv.bias": (24,),
        "nodes.n_attn.proj.weight": (32, 16),
        "nodes.n_attn.proj.bias": (32,),
    }
    cross = hndl.build(attention_graph(("B", "T", 32), ("B", "S", 12), num_heads=4, fused=False, bias=False))
    assert {k: tuple(v.shape) for k, v in cross.state_dict().items()} == {
        "nodes.n_attn.q_proj.weight": (32, 32),
        "nodes.n_attn.k_proj.weight": (32, 12),
        "nodes.n_attn.v_proj.weight": (32, 12),
        "nodes.n_attn.o_proj.weight": (32, 32),
    }
    assert cross(torch.randn(2, 3, 32), torch.randn(2, 5, 12)).shape == (2, 3, 32)


def test_a_node_with_only_the_earlier_parameters_builds_the_earlier_layer():
    from hndl.torch.layers import Attention, CrossAttention, SelfAttention

    assert type(hndl.build(attention_graph(("B", "T", 16), num_heads=2, bias=False)).nodes["n_attn"]) is SelfAttention
    cross = hndl.build(attention_graph(("B", "T", 16), ("B", "S", 8), num_heads=2, kv_heads=2, bias=True))
    assert type(cross.nodes["n_attn"]) is CrossAttention
    assert type(hndl.build(attention_graph(("B", "T", 16), num_heads=2, scale=0.5)).nodes["n_attn"]) is Attention


def test_separate_projections_compute_what_the_gpt2_layout_computes():
    torch.manual_seed(7)
    fused = hndl.build(attention_graph(("B", "T", 16), num_heads=4, causal=True)).eval()
    split = hndl.build(attention_graph(("B", "T", 16), num_heads=4, causal=True, fused=False)).eval()
    qkv_w, qkv_b = fused.state_dict()["nodes.n_attn.qkv.weight"], fused.state_dict()["nodes.n_attn.qkv.bias"]
    weights = {}
    for i, name in enumerate("qkv"):
        weights[f"nodes.n_attn.{name}_proj.weight"] = qkv_w[16 * i : 16 * (i + 1)]
        weights[f"nodes.n_attn.{name}_proj.bias"] = qkv_b[16 * i : 16 * (i + 1)]
    weights["nodes.n_attn.o_proj.weight"] = fused.state_dict()["nodes.n_attn.proj.weight"]
    weights["nodes.n_attn.o_proj.bias"] = fused.state_dict()["nodes.n_attn.proj.bias"]
    split.load_state_dict(weights)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(split(x), fused(x), atol=1e-6, rtol=1e-5)


def test_attention_with_rope_grouped_heads_window_and_a_score_bias_equals_the_formula():
    torch.manual_seed(8)
    g = attention_graph(
        ("B", "T", 16),
        ("B", "T"),
        (1, 4, "T", "T"),
        dtypes=[None, "bool", None],
        num_heads=4,
        kv_heads=2,
        fused=False,
        bias=False,
        scale=1.0,
        rope={"theta": 1000.0},
        causal=True,
        window=3,
        masked=True,
        score_bias=True,
    )
    model = hndl.build(g).eval()
    layer = model.nodes["n_attn"]
    x, bias = torch.randn(2, 6, 16), torch.randn(1, 4, 6, 6)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    q = (x @ layer.q_proj.weight.T).view(2, 6, 4, 4).transpose(1, 2)
    k = (x @ layer.k_proj.weight.T).view(2, 6, 2, 4).transpose(1, 2)
    v = (x @ layer.v_proj.weight.T).view(2, 6, 2, 4).transpose(1, 2)
    q, k = rotated(q, torch.arange(6), 1000.0), rotated(k, torch.arange(6), 1000.0)
    i, j = torch.arange(6)[:, None], torch.arange(6)[None, :]
    allowed = padding[:, None, None, :] & (j <= i) & (j > i - 3)
    heads = by_hand(q, k, v, allowed, bias, scale=1.0)
    expected = heads.transpose(1, 2).reshape(2, 6, 16) @ layer.o_proj.weight.T
    torch.testing.assert_close(model(x, padding, bias), expected, atol=1e-5, rtol=1e-4)


def test_attention_errors_name_the_node_and_the_fix():
    p = problem("attention", ("B", "T", 64), num_heads=8, kv_heads=3)
    assert (p.code, p.node, p.message) == ("E_PARAM", "n", "3 key/value heads do not divide 8 query heads")
    assert p.hint == "each key/value head serves a whole group of query heads: try kv_heads=2 or 4"
    p = problem("attention", ("B", "T", 64), num_heads=6)
    assert p.hint == "num_heads must divide the input's last dim: try num_heads=4 or 8, or give head_dim"
    assert infer("attention", ("B", "T", 64), num_heads=6, head_dim=16) == ["[B, T, 64]"]
    p = problem("attention", ("B", "T", 64), num_heads=4, bias=["q", "o"])
    assert (p.code, p.message) == (
        "E_PARAM",
        "bias ['q', 'o'] gives q, k and v different biases, and fused holds them in one projection",
    )
    assert p.hint == "set fused: false (q_proj, k_proj, v_proj, o_proj) for a bias on some of them"
    p = problem("attention", ("B", "T", 64), num_heads=4, fused=False, bias=["q", "x"])
    assert (p.code, p.message) == ("E_PARAM", "parameter 'bias' names projection 'x': the projections are q, k, v, o")
    p = problem("attention", ("B", "T", 64), num_heads=4, rope={"dims": 15})
    assert (p.code, p.message, p.hint) == ("E_PARAM", "rotary dims 15 is odd", "use dims 14 or 16")
    p = problem("attention", ("B", "T", 64), num_heads=4, rope={"dims": 32})
    assert (p.code, p.message) == ("E_PARAM", "rotary dims 32 are more than the head dim 16")
    p = problem("attention", ("B", "T", 64), num_heads=4, rope={"theta": 10000.0, "base": 2})
    assert (p.code, p.message) == (
        "E_PARAM",
        "parameter 'rope' has no key 'base': its keys are theta, dims, scaling, interleaved",
    )
    p = problem("attention", ("B", "T", 64), num_heads=4, window=16)
    assert p.code == "E_PARAM"
    p = problem("attention", ("B", "T", 64), (1, 4, "T", "T"), dtypes=[None, "bool"], num_heads=4, score_bias=True)
    assert (p.code, p.port) == ("E_DTYPE", "score_bias")
    p = problem("attention", ("B", 5, 64), (1, 4, 5, 6), num_heads=4, score_bias=True)
    assert (p.code, p.port) == ("E_SHAPE", "score_bias")
    assert p.message == (
        "the score_bias [1, 4, 5, 6] does not broadcast to the attention scores [B, num_heads, T, S] = [B, 4, 5, 5]"
    )


def test_attention_macs_agree_with_flop_counter_mode():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    graphs = [
        attention_graph(("B", 6, 32), num_heads=4, kv_heads=2, fused=False, rope={}),
        attention_graph(("B", 6, 32), ("B", 5, 12), num_heads=4, kv_heads=1, fused=False, head_dim=4),
        attention_graph(("B", 6, 32), num_heads=4, kv_heads=2, head_dim=4),
    ]
    g = hndl.Graph("sdpa")
    q, kv = g.input("q", ("B", 8, 6, 16)), g.input("kv", ("B", 2, 5, 16))
    g.output(g.add("sdpa", q, kv, g.input("v", ("B", 2, 5, 8)), name="n", causal=True))
    for graph in [*graphs, g]:
        model = hndl.build(graph)
        inputs = model.example_inputs(B=3)
        with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
            model(*inputs)
        assert model.summary(B=3).macs * 2 == counter.get_total_flops(), graph.name


# --- repeat's shared inputs -------------------------------------------------------------------------------

SHARED = """
hndl: 1
name: t
inputs:
  x: {shape: [B, 4]}
  c: {shape: [B, 4]}
nodes:
  h: {op: graph, graph: block, repeat: 3, in: [x, c], shared: [c]}
outputs: [h]
graphs:
  block:
    inputs:
      x: {shape: [B, 4]}
      c: {shape: [B, 4]}
    nodes:
      s: {op: add, in: [x, c]}
    outputs: [s]
"""


def test_a_shared_input_reaches_every_repetition_unchanged():
    model = hndl.build(hndl.loads(SHARED))
    x, c = torch.randn(2, 4), torch.randn(2, 4)
    assert torch.equal(model(x, c), x + c + c + c)
    assert hndl.dumps(hndl.loads(hndl.dumps(hndl.loads(SHARED)))) == hndl.dumps(hndl.loads(SHARED))
    rows = hndl.summary(hndl.loads(SHARED), B=2).rows
    assert [r.inputs for r in rows] == [("x", "c"), ("h.0.s", "c"), ("h.1.s", "c")]


def test_shared_inputs_in_python():
    block = hndl.Graph("block")
    x, m = block.input("x", ("B", "T", 8)), block.input("mask", ("B", "T"), dtype="bool")
    block.output(block.add("attention", [x, m], name="attn", num_heads=2, masked=True, fused=False))
    g = hndl.Graph("stack")
    g.add_subgraph(block)
    h = g.add(
        "graph",
        [g.input("x", ("B", "T", 8)), g.input("m", ("B", "T"), dtype="bool")],
        name="h",
        graph="block",
        repeat=2,
        shared=["mask"],
    )
    g.output(h)
    model = hndl.build(g)
    assert model(torch.randn(2, 3, 8), torch.ones(2, 3, dtype=torch.bool)).shape == (2, 3, 8)


def test_shared_errors():
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(SHARED.replace("shared: [c]", "shared: [cc]")))
    p = info.value.problems[0]
    assert (p.code, p.message, p.hint) == (
        "E_REF",
        "shared names 'cc', which is no input of graph 'block'",
        "did you mean 'c'?",
    )
    assert p.location == "<string>:8:55"
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(SHARED.replace("shared: [c]", "shared: [x, c]")))
    p = info.value.problems[0]
    assert p.code == "E_PARAM"
    assert p.message == (
        "repeat needs graph 'block' to have as many outputs as inputs not shared (none), it has 1 and 0"
    )
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(SHARED.replace("shared: [c]", "shared: [c, c]")))
    assert info.value.problems[0].message == "parameter 'shared' names an input twice, got ['c', 'c']"


def test_a_model_with_rotary_frequencies_saves_and_loads_as_one_file(tmp_path):
    # The frequencies are a non-persistent buffer: not in the file, and not expected there (it was refused as
    # "missing from the file" before load_model compared against the state_dict's names).
    model = hndl.build(attention_graph(("B", "T", 16), num_heads=2, fused=False, rope={"theta": 500.0})).eval()
    hndl.save(model, tmp_path / "m.safetensors")
    loaded = hndl.load_model(tmp_path / "m.safetensors").eval()
    x = torch.randn(2, 5, 16)
    assert torch.equal(loaded(x), model(x))


# --- the mask's shape rule against torch ------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.tuples(*(st.integers(1, 4) for _ in range(4))),
    rank=st.sampled_from([1, 2, 3, 4, 5]),
    picks=st.lists(st.sampled_from(["own", "one", "other"]), min_size=5, max_size=5),
)
def test_a_mask_checks_exactly_when_the_layer_can_apply_it(sizes, rank, picks):
    """For int sizes, the static check accepts a mask exactly when the layer's reading of it (``as_rank4``)
    broadcasts against the scores ``[B, H, T, S]`` in torch."""
    b, h, t, s = sizes
    dims = {2: (b, s), 3: (b, t, s), 4: (b, h, t, s)}.get(rank, (b, h, t, s, 1)[:rank])
    shape = tuple(d if pick == "own" else 1 if pick == "one" else d + 1 for d, pick in zip(dims, picks))
    g = hndl.Graph("t")
    x, kv = g.input("x", (b, t, 4 * h)), g.input("kv", (b, s, 8))
    m = g.input("m", shape, dtype="bool")
    g.output(g.add("attention", [x, kv, m], name="attn", num_heads=h, masked=True))
    try:
        hndl.check(g)
        ports: list[str | None] = []
    except hndl.HndlError as err:
        ports = [p.port for p in err.problems]
    assert ports in ([], ["mask"])
    static = not ports
    try:
        torch.broadcast_shapes(_attention_layers.as_rank4(torch.zeros(shape)).shape, (b, h, t, s))
        runtime = True
    except (RuntimeError, ValueError):
        runtime = False
    assert static == runtime, (sizes, shape)
