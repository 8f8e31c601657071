"""conv_transpose1d/2d, upsample, 1-d pools, lstm, gru and attention's kv and mask inputs."""

from __future__ import annotations

import pytest
import torch
from op_helpers import infer, problem, runs_as_inferred

import hndl

# --- resampling -----------------------------------------------------------------------------------------


def test_conv_transpose_doubles_symbolic_sizes():
    assert infer("conv_transpose2d", ("B", 8, "H", "W"), out_channels=4, kernel_size=2, stride=2) == [
        "[B, 4, 2*H, 2*W]"
    ]
    assert infer("conv_transpose1d", ("B", 8, "L"), out_channels=4, kernel_size=3, padding=1) == ["[B, 4, L]"]
    runs_as_inferred(
        "conv_transpose2d", ("B", 8, "H", "W"), env={"B": 2, "H": 3, "W": 5}, out_channels=4, kernel_size=2, stride=2
    )


def test_conv_transpose_errors():
    p = problem("conv_transpose1d", ("B", 8, "L"), out_channels=4, kernel_size=3, stride=2, output_padding=2)
    assert (p.code, p.message) == ("E_PARAM", "output_padding 2 is not smaller than stride (2) or dilation (1)")
    p = problem("conv_transpose1d", ("B", 8, 1), out_channels=4, kernel_size=1, padding=1)
    assert (p.code, p.message) == ("E_SHAPE", "the output length would be -1 for an input length of 1")
    p = problem("conv_transpose2d", ("B", 6, 4, 4), out_channels=4, kernel_size=2, groups=4)
    assert p.code == "E_SHAPE"
    assert p.message == "groups=4 does not divide the input's 6 channels"


def test_conv_transpose_keeps_torch_parameter_names():
    g = hndl.Graph("t")
    g.output(g.add("conv_transpose2d", g.input("x", ("B", 8, 4, 4)), name="up", out_channels=4, kernel_size=2))
    layer = hndl.build(g).nodes["n_up"]
    assert isinstance(layer, torch.nn.ConvTranspose2d)
    assert layer.weight.shape == (8, 4, 2, 2)


def test_upsample_shapes_and_errors():
    assert infer("upsample", ("B", 3, "H", "W"), scale_factor=2) == ["[B, 3, 2*H, 2*W]"]
    assert infer("upsample", ("B", 3, "H", "W"), scale_factor=1.5) == ["[B, 3, ?, ?]"]
    assert infer("upsample", ("B", 3, 5, 4), scale_factor=1.5) == ["[B, 3, 7, 6]"]
    assert infer("upsample", ("B", 3, "H", "W"), size=[8, 6], mode="bilinear") == ["[B, 3, 8, 6]"]
    assert infer("upsample", ("B", 3, "L"), size=[8], mode="linear", align_corners=True) == ["[B, 3, 8]"]
    p = problem("upsample", ("B", 3, "H", "W"))
    assert (p.code, p.message) == ("E_PARAM", "give exactly one of 'size' and 'scale_factor'")
    p = problem("upsample", ("B", 3, "L"), scale_factor=2, mode="bilinear")
    assert p.code == "E_SHAPE"
    assert p.message == "mode 'bilinear' takes a rank-4 input [N, C, ...], got rank 3"
    p = problem("upsample", ("B", 3, "L"), scale_factor=2, align_corners=True)
    assert (p.code, p.message) == ("E_PARAM", "align_corners only applies to modes linear and bilinear")
    runs_as_inferred("upsample", ("B", 3, "H", "W"), env={"B": 2, "H": 3, "W": 4}, scale_factor=2, mode="bilinear")


def test_pools_1d():
    assert infer("maxpool1d", ("B", 4, "L"), kernel_size=2) == ["[B, 4, L//2]"]  # (L-2)//2+1 simplified
    assert infer("avgpool1d", ("B", 4, 10), kernel_size=3, stride=1, padding=1) == ["[B, 4, 10]"]
    assert infer("adaptive_avgpool1d", ("B", 4, "L"), output_size=1) == ["[B, 4, 1]"]
    p = problem("maxpool1d", ("B", 4, 10), kernel_size=2, padding=2)
    assert (p.code, p.message) == ("E_PARAM", "padding 2 is more than half the kernel size 2")
    runs_as_inferred("maxpool1d", ("B", 4, "L"), env={"B": 2, "L": 9}, kernel_size=2)


# --- recurrent ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["lstm", "gru"])
def test_recurrent_outputs(op):
    assert infer(op, ("B", "T", 8), hidden_size=16) == ["[B, T, 16]"]
    assert infer(op, ("B", "T", 8), hidden_size=16, bidirectional=True, output="last") == ["[B, 32]"]
    assert infer(op, ("B", "T", 8), hidden_size=16, output="both") == ["[B, T, 16]", "[B, 16]"]
    runs_as_inferred(op, ("B", "T", 8), env={"B": 2, "T": 3}, hidden_size=4, num_layers=2, output="both")


@pytest.mark.parametrize("op", ["lstm", "gru"])
def test_recurrent_weights_are_torchs(op):
    torch_cls = torch.nn.LSTM if op == "lstm" else torch.nn.GRU
    reference = torch_cls(8, 16, num_layers=2, bidirectional=True, batch_first=True)
    g = hndl.Graph("t")
    node = g.add(op, g.input("x", ("B", "T", 8)), name="rnn", hidden_size=16, num_layers=2, bidirectional=True)
    g.output(node)
    model = hndl.build(g).eval()
    assert isinstance(model.nodes["n_rnn"], torch_cls)
    model.nodes["n_rnn"].load_state_dict(reference.state_dict())  # torch's weights load as they are
    x = torch.randn(3, 5, 8)
    assert torch.equal(model(x), reference(x)[0])


def test_recurrent_errors():
    p = problem("lstm", ("B", "T", 8), hidden_size=4, dropout=0.5)
    assert (p.code, p.message) == ("E_PARAM", "dropout=0.5 applies between layers, and there is one layer")
    p = problem("gru", ("B", 8), hidden_size=4)
    assert p.code == "E_SHAPE"
    p = problem("gru", ("B", "T", 8), hidden_size=4, output="final")
    assert p.code == "E_PARAM"
    assert "must be one of 'sequence', 'last', 'both'" in p.message


# --- attention ------------------------------------------------------------------------------------------


def _attention_graph(*shapes, dtypes=None, **params) -> hndl.Graph:
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", s, dtype=(dtypes or [None] * len(shapes))[i]) for i, s in enumerate(shapes)]
    g.output(g.add("attention", xs, name="attn", **params))
    return g


def test_self_attention_keeps_its_layout_and_old_state_dicts_load():
    g = _attention_graph(("B", "T", 16), num_heads=4)
    model = hndl.build(g)
    assert list(model.state_dict()) == [
        "nodes.n_attn.qkv.weight",
        "nodes.n_attn.qkv.bias",
        "nodes.n_attn.proj.weight",
        "nodes.n_attn.proj.bias",
    ]
    saved = {k: torch.randn(v.shape) for k, v in model.state_dict().items()}  # as an earlier release saved it
    model.load_state_dict(saved)
    x = torch.randn(2, 3, 16)
    layer = torch.nn.functional
    q, k, v = layer.linear(x, saved["nodes.n_attn.qkv.weight"], saved["nodes.n_attn.qkv.bias"]).split(16, dim=2)
    heads = [t.view(2, 3, 4, 4).transpose(1, 2) for t in (q, k, v)]
    y = layer.scaled_dot_product_attention(*heads).transpose(1, 2).reshape(2, 3, 16)
    expected = layer.linear(y, saved["nodes.n_attn.proj.weight"], saved["nodes.n_attn.proj.bias"])
    assert torch.equal(model(x), expected)


def test_cross_attention_infers_the_kv_width():
    g = _attention_graph(("B", "T", 16), ("B", "S", 10), num_heads=4)
    model = hndl.build(g)
    layer = model.nodes["n_attn"]
    assert (layer.q.weight.shape, layer.kv.weight.shape, layer.proj.weight.shape) == ((16, 16), (32, 10), (16, 16))
    assert model(torch.randn(2, 3, 16), torch.randn(2, 7, 10)).shape == (2, 3, 16)


def test_cross_attention_matches_multi_head_attention():
    g = _attention_graph(
        ("B", "T", 16), ("B", "S", 16), (1, 1, "T", "S"), dtypes=[None, None, "bool"], num_heads=4, masked=True
    )
    model = hndl.build(g).eval()
    layer = model.nodes["n_attn"]
    mha = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([layer.q.weight, layer.kv.weight]))
        mha.in_proj_bias.copy_(torch.cat([layer.q.bias, layer.kv.bias]))
        mha.out_proj.weight.copy_(layer.proj.weight)
        mha.out_proj.bias.copy_(layer.proj.bias)
    x, mem = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    mask = torch.rand(1, 1, 3, 5) > 0.3
    mask[..., 0] = True
    expected, _ = mha(x, mem, mem, attn_mask=~mask[0, 0])  # MultiheadAttention's bool mask: true = hidden
    assert torch.allclose(model(x, mem, mask), expected, atol=1e-5)


def test_masks_bool_and_additive_and_causal():
    g = _attention_graph(("B", "T", 8), ("B", 1, 1, "T"), dtypes=[None, "bool"], num_heads=2, masked=True, causal=True)
    model = hndl.build(g).eval()
    x = torch.randn(2, 4, 8)
    keep = torch.ones(2, 1, 1, 4, dtype=torch.bool)
    unmasked = _attention_graph(("B", "T", 8), num_heads=2, causal=True)
    plain = hndl.build(unmasked).eval()
    plain.load_state_dict(model.state_dict())
    assert torch.allclose(model(x, keep), plain(x), atol=1e-6)
    additive = _attention_graph(("B", "T", 8), ("B", 1, 1, "T"), num_heads=2, masked=True, causal=True)
    add_model = hndl.build(additive).eval()
    add_model.load_state_dict(model.state_dict())
    keep[1, ..., 2] = False
    bias = torch.zeros(2, 1, 1, 4).masked_fill(~keep, float("-inf"))
    assert torch.allclose(model(x, keep), add_model(x, bias), atol=1e-6)


def _per_row_reference(model, x, lengths, causal=False):
    """Each batch row run alone on its real positions (no padding, no mask): what a padded batch must give."""
    unmasked = hndl.build(_attention_graph(("B", "T", x.shape[-1]), num_heads=2, causal=causal)).eval()
    unmasked.load_state_dict(model.state_dict())
    return [unmasked(x[b : b + 1, :n])[0] for b, n in enumerate(lengths)]


def test_regression_padding_mask_b_s_with_symbolic_b_equal_to_t_masks_keys_per_batch_row():
    # Issue 20: a [B, S] mask with B and T symbolic went to SDPA as it was, which broadcasts it from the right as
    # [T, S]: an error when B != T, and silently wrong when B == T (off by 0.67). It is a padding mask, read as
    # [B, 1, 1, S], whatever the sizes.
    g = _attention_graph(("B", "T", 8), ("B", "T"), dtypes=[None, "bool"], num_heads=2, masked=True)
    model = hndl.build(g).eval()
    torch.manual_seed(0)
    x = torch.randn(3, 3, 8)  # B == T == 3
    lengths = [3, 2, 1]
    mask = torch.arange(3)[None, :] < torch.tensor(lengths)[:, None]
    y = model(x, mask)
    for b, expected in enumerate(_per_row_reference(model, x, lengths)):
        assert torch.allclose(y[b, : lengths[b]], expected, atol=1e-6)
    additive = hndl.build(_attention_graph(("B", "T", 8), ("B", "T"), num_heads=2, masked=True)).eval()
    additive.load_state_dict(model.state_dict())
    assert torch.equal(additive(x, torch.zeros(3, 3).masked_fill(~mask, float("-inf"))), y)
    x2 = torch.randn(2, 3, 8)  # B != T: the same rule, no error
    assert model(x2, mask[:2]).shape == (2, 3, 8)


def test_mask_of_rank_3_is_b_t_s_and_combines_with_causal():
    g = _attention_graph(("B", "T", 8), ("B", "T", "T"), dtypes=[None, "bool"], num_heads=2, masked=True, causal=True)
    model = hndl.build(g).eval()
    x = torch.randn(2, 2, 8)  # B == T == 2, also == num_heads
    mask = torch.ones(2, 2, 2, dtype=torch.bool)
    mask[1, 1, 0] = False  # batch row 1, query 1 may not see key 0
    y = model(x, mask)
    plain = hndl.build(
        _attention_graph(
            ("B", "T", 8), ("B", 1, "T", "T"), dtypes=[None, "bool"], num_heads=2, masked=True, causal=True
        )
    ).eval()
    plain.load_state_dict(model.state_dict())
    assert torch.equal(y, plain(x, mask[:, None]))
    assert torch.allclose(y[0], _per_row_reference(model, x, [2, 2], causal=True)[0], atol=1e-6)


def test_cross_attention_padding_mask_b_s():
    g = _attention_graph(
        ("B", "T", 8), ("B", "S", 8), ("B", "S"), dtypes=[None, None, "bool"], num_heads=2, masked=True
    )
    model = hndl.build(g).eval()
    x, mem = torch.randn(3, 3, 8), torch.randn(3, 3, 8)  # B == T == S
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False]])
    y = model(x, mem, mask)
    full = hndl.build(_attention_graph(("B", "T", 8), ("B", "S", 8), num_heads=2)).eval()
    full.load_state_dict(model.state_dict())
    for b, n in enumerate([3, 2, 1]):
        assert torch.allclose(y[b], full(x[b : b + 1], mem[b : b + 1, :n])[0], atol=1e-6)


def test_attention_input_errors():
    p = problem("attention", ("B", "T", 16), ("B", "S", "E"), num_heads=4)
    assert (p.code, p.port) == ("E_SHAPE", "kv")
    assert p.message == "the width of kv [B, S, E] is not a fixed number"
    p = problem("attention", ("B", "T", 16), ("B", 1, 1, "T"), dtypes=[None, "int64"], num_heads=4, masked=True)
    assert (p.code, p.port) == ("E_DTYPE", "mask")
    p = problem("attention", ("B", 5, 16), ("B", 1, 1, 4), dtypes=[None, "bool"], num_heads=4, masked=True)
    assert (p.code, p.port) == ("E_SHAPE", "mask")
    assert (
        p.message
        == "the mask [B, 1, 1, 4] does not broadcast to the attention scores [B, num_heads, T, S] = [B, 4, 5, 5]"
    )
    assert p.expected == "broadcastable to [B, num_heads, T, S], with [B, 4, 5, 5] for [B, num_heads, T, S]"
    assert p.hint == (
        "a mask below rank 4 starts with the batch; a mask the whole batch shares, [T, S], is given at rank 4: "
        "declare it [1, 1, T, S], or add {op: expand, shape: [1, 1, -1, -1]} before the attention"
    )
    p = problem("attention", (2, 5, 16), (5, 5), dtypes=[None, "bool"], num_heads=4, masked=True)
    assert (p.code, p.port) == ("E_SHAPE", "mask")
    assert p.message == (
        "the padding mask [5, 5] (read as [5, 1, 1, 5]) does not broadcast to the attention scores "
        "[B, num_heads, T, S] = [2, 4, 5, 5]"
    )
    p = problem("attention", ("B", 5, 16), ("B", 5, 5, 5, 1), dtypes=[None, "bool"], num_heads=4, masked=True)
    assert (p.code, p.port, p.message) == ("E_SHAPE", "mask", "the mask has rank 5")
    assert p.expected == "rank 2 [B, S] (padding), rank 3 [B, T, S] or rank 4 broadcastable to [B, num_heads, T, S]"
    p = problem("attention", (2, 5, 16), (3, 7, 16), num_heads=4)
    assert (p.code, p.port) == ("E_SHAPE", "kv")
    p = problem("attention", ("B", 5, 16), num_heads=4, masked=True)
    assert p.code == "E_REF"
    assert p.message == "attention takes 2 to 3 inputs, got 1"
