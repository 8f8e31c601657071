"""The layers issue 38 added, against the classes they reproduce (transformers, timm), with the same weights:
``rmsnorm`` with ``weight_offset`` (GemmaRMSNorm), ``gelu`` with ``approximate: tanh_formula``
(NewGELUActivation), ``quick_gelu`` (QuickGELUActivation), ``pool_at_token`` (CLIP's text pooler), ``grn``/``grn2d``
(timm's GlobalResponseNorm, transformers' ConvNextV2GRN), and the ``per_head`` layout on a GPT-NeoX checkpoint.

Every comparison is ``torch.equal``: these ops exist to reproduce their reference bit for bit. Run in the
reference session (``nox -s reference``); each test skips where its library does not import.
"""

from __future__ import annotations

import pytest
import torch
from parity import require

import hndl
from hndl.weights import rule


def one_node(op: str, shapes: list, dtypes: list | None = None, **params) -> hndl.GraphModule:
    g = hndl.Graph(op)
    xs = [g.input(f"x{i}", tuple(s), dtype=(dtypes or [None] * len(shapes))[i]) for i, s in enumerate(shapes)]
    g.output(g.add(op, *xs, name="n", **params))
    return hndl.build(g)


# --- rmsnorm with weight_offset: Gemma's RMSNorm --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rmsnorm_with_weight_offset_is_gemmas_rmsnorm_bit_for_bit(dtype):
    gemma = require("transformers.models.gemma.modeling_gemma")
    reference = gemma.GemmaRMSNorm(48, eps=1e-6)
    with torch.no_grad():
        reference.weight.normal_(0, 0.5)
    name = str(dtype).removeprefix("torch.")
    model = one_node("rmsnorm", [("B", "T", 48)], [name], eps=1e-6, weight_offset=1.0).to(dtype)
    reference.to(dtype)  # a half-precision Gemma: weights and activations in it, the norm computed in float32
    model.load_state_dict({"nodes.n_n.weight": reference.weight.detach().clone()})
    x = (torch.randn(3, 7, 48) * 3).to(dtype)
    assert torch.equal(model(x), reference(x))
    assert model(x).dtype == dtype


def test_a_plain_rmsnorm_is_not_gemmas():
    gemma = require("transformers.models.gemma.modeling_gemma")
    reference = gemma.GemmaRMSNorm(48, eps=1e-6)
    with torch.no_grad():
        reference.weight.normal_(0, 0.5)
    model = one_node("rmsnorm", [("B", 48)], eps=1e-6)
    model.load_state_dict({"nodes.n_n.weight": reference.weight.detach().clone()})
    x = torch.randn(4, 48)
    assert not torch.allclose(model(x), reference(x), atol=1e-2)  # the missing (1 + w): what the option fixes


# --- gelu_new and quick_gelu ------------------------------------------------------------------------------------


def test_gelu_tanh_formula_is_transformers_gelu_new_bit_for_bit():
    activations = require("transformers.activations")
    x = torch.randn(4096) * 4
    model = one_node("gelu", [("N",)], approximate="tanh_formula")
    assert torch.equal(model(x), activations.NewGELUActivation()(x))
    assert torch.equal(model(x), activations.ACT2FN["gelu_new"](x))
    # torch's one-kernel tanh GELU is the same formula computed differently: not equal, a few ulp off.
    tanh = one_node("gelu", [("N",)], approximate="tanh")
    assert not torch.equal(tanh(x), activations.NewGELUActivation()(x))
    assert torch.allclose(tanh(x), activations.NewGELUActivation()(x), atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_quick_gelu_is_transformers_quick_gelu_bit_for_bit(dtype):
    activations = require("transformers.activations")
    x = (torch.randn(4096) * 4).to(dtype)
    model = one_node("quick_gelu", [("N",)])
    assert torch.equal(model(x), activations.QuickGELUActivation()(x))
    assert torch.equal(model(x), activations.ACT2FN["quick_gelu"](x))


# --- pool_at_token: CLIP's text pooler ----------------------------------------------------------------------


@pytest.mark.parametrize("eos_token_id", [2, 95])
def test_pool_at_token_is_clips_pooler_output_bit_for_bit(eos_token_id):
    transformers = require("transformers")
    config = transformers.CLIPTextConfig(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=16,
        eos_token_id=eos_token_id,
    )
    torch.manual_seed(0)
    clip = transformers.CLIPTextModel(config).eval()
    ids = torch.randint(3, 90, (3, 9))
    ids[0, 5], ids[1, 8], ids[2, 2] = 95, 95, 95  # the end-of-text token, the largest id
    ids[2, 6] = 95  # a second one: the first is pooled (with eos 95) and the first of equal maxima (with 2)
    with torch.no_grad():
        out = clip(input_ids=ids)
    # eos_token_id 2 is transformers' legacy rule (the largest id); any other is the first position holding it.
    token_id = None if eos_token_id == 2 else eos_token_id
    model = one_node("pool_at_token", [("B", "T", 32), ("B", "T")], [None, "int64"], token_id=token_id)
    assert torch.equal(model(out.last_hidden_state, ids), out.pooler_output)


# --- GRN: timm's GlobalResponseNorm, transformers' ConvNextV2GRN ---------------------------------------------------


@pytest.mark.parametrize(("op", "channels_last"), [("grn", True), ("grn2d", False)])
def test_grn_is_timms_global_response_norm_bit_for_bit(op, channels_last):
    grn = require("timm.layers.grn")
    reference = grn.GlobalResponseNorm(24, eps=1e-6, channels_last=channels_last)
    with torch.no_grad():
        reference.weight.normal_()
        reference.bias.normal_()
    shape = ("B", 7, 5, 24) if channels_last else ("B", 24, 7, 5)
    model = one_node(op, [shape])
    # timm's state_dict names and shapes are hndl's: the layer's keys load as they are.
    model.load_state_dict({f"nodes.n_n.{k}": v for k, v in reference.state_dict().items()})
    x = torch.randn(2, *shape[1:])
    assert torch.equal(model(x), reference(x))


def test_grn_loads_transformers_convnextv2_grn_with_the_flatten_layout():
    convnextv2 = require("transformers.models.convnextv2.modeling_convnextv2")
    reference = convnextv2.ConvNextV2GRN(24)
    with torch.no_grad():
        reference.weight.normal_()
        reference.bias.normal_()
    model = one_node("grn", [("B", 7, 5, 24)])
    report = hndl.load_state_dict(model, reference.state_dict(), [rule("{t}", ("nodes.n_n.{t}", "flatten"))])
    assert "flatten" in str(report)
    x = torch.randn(2, 7, 5, 24)
    # transformers writes weight * (x * n) + bias + x, timm x + addcmul(bias, weight, x * n): equal here to
    # within rounding, not bit for bit (hndl follows timm, which the brief names as the reference).
    torch.testing.assert_close(model(x), reference(x), rtol=0, atol=1e-5)


# --- the per_head layout on GPT-NeoX ------------------------------------------------------------------------------

NEOX_SPEC = """
hndl: 1
name: neox_like
inputs:
  input_ids: {shape: [B, T], dtype: int64}
nodes:
  embed_in:         {op: embedding, in: input_ids, num_embeddings: 96, embedding_dim: 64}
  layers:           {op: graph, graph: layer, repeat: 2, in: embed_in}
  final_layer_norm: {op: layernorm, in: layers, eps: 1.0e-5}
  embed_out:        {op: linear, in: final_layer_norm, out_features: 96, bias: false}
outputs: [embed_out]
graphs:
  layer:
    inputs:
      x: {shape: [B, T, 64]}
    nodes:
      input_layernorm:          {op: layernorm, in: x, eps: 1.0e-5}
      attention:                {op: attention, in: input_layernorm, fused: false, num_heads: 4, causal: true,
                                 rope: {theta: 10000.0, dims: 4}}
      post_attention_layernorm: {op: layernorm, in: x, eps: 1.0e-5}
      dense_h_to_4h:            {op: linear, in: post_attention_layernorm, out_features: 256}
      act:                      {op: gelu, in: dense_h_to_4h}
      dense_4h_to_h:            {op: linear, in: act, out_features: 64}
      mlp_and_attention:        {op: add, in: [dense_4h_to_h, attention]}
      out:                      {op: add, in: [mlp_and_attention, x]}
    outputs: [out]
"""


def neox_rules(qkv: tuple[str, str, str]) -> list:
    """GPT-NeoX's keys to the spec's, with ``qkv`` the layouts of the fused projection's three parts."""
    layer, node = "gpt_neox.layers.{i}", "nodes.n_layers.{i}"
    return [
        rule("gpt_neox.embed_in.weight", "nodes.n_embed_in.weight"),
        rule(
            f"{layer}.attention.query_key_value.{{t}}",
            *((f"{node}.n_attention.{p}_proj.{{t}}", layout) for p, layout in zip("qkv", qkv, strict=True)),
        ),
        rule(f"{layer}.attention.dense.{{t}}", f"{node}.n_attention.o_proj.{{t}}"),
        rule(f"{layer}.mlp.{{name}}.{{t}}", f"{node}.n_{{name}}.{{t}}"),
        rule(f"{layer}.{{name}}.{{t}}", f"{node}.n_{{name}}.{{t}}"),
        rule("gpt_neox.final_layer_norm.{t}", "nodes.n_final_layer_norm.{t}"),
        rule("lm_head.weight", "nodes.n_embed_out.weight"),  # transformers 5 names embed_out lm_head
    ]


@pytest.fixture(scope="module")
def neox():
    transformers = require("transformers")
    config = transformers.GPTNeoXConfig(
        vocab_size=96,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=256,
        rotary_pct=0.25,  # 4 of each head's 16 dims rotate
        max_position_embeddings=64,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    reference = transformers.GPTNeoXForCausalLM(config).eval()
    with torch.no_grad():  # biases and norms away from their initial 0 and 1, so a misplaced one shows
        for name, tensor in reference.named_parameters():
            if "bias" in name or "norm" in name:
                tensor.normal_(0, 0.5)
    ids = torch.randint(0, 96, (2, 11))
    with torch.no_grad():
        logits = reference(input_ids=ids).logits
    return reference, ids, logits


def test_a_gpt_neox_checkpoint_loads_with_per_head_rules_and_gives_equal_logits(neox):
    reference, ids, logits = neox
    model = hndl.build(hndl.loads(NEOX_SPEC)).eval()
    parts = tuple(f"per_head({i}, 3, heads=4)" for i in range(3))
    report = hndl.load_state_dict(model, reference.state_dict(), neox_rules(parts))
    assert "rows 0..1/3 of each of 4 heads" in str(report)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters())
    with torch.no_grad():
        assert torch.equal(model(ids), logits)


def test_regression_a_gpt_neox_checkpoint_read_as_rows_loads_silently_and_is_wrong(neox):
    # What the per_head layout is for: the Rows split has the same shapes, loads without a word, and computes
    # something else. Written in Python before (a 15-line Layout subclass); a rule string now.
    reference, ids, logits = neox
    model = hndl.build(hndl.loads(NEOX_SPEC)).eval()
    hndl.load_state_dict(model, reference.state_dict(), neox_rules(("rows 0/3..1/3", "rows 1/3..2/3", "rows 2/3..3/3")))
    with torch.no_grad():
        wrong = model(ids)
    assert wrong.shape == logits.shape
    assert not torch.allclose(wrong, logits, atol=1e-3)


def test_per_head_splits_neoxs_projection_as_neoxs_attention_does(neox):
    reference, _ids, _logits = neox
    attention = reference.gpt_neox.layers[0].attention
    hidden = torch.randn(2, 5, 64)
    qkv = attention.query_key_value(hidden).view(2, 5, -1, 3 * attention.head_size).transpose(1, 2)
    q, k, v = qkv.chunk(3, dim=-1)  # NeoX's own split, [B, H, T, Dh]
    weight, bias = attention.query_key_value.weight, attention.query_key_value.bias
    for i, expected in enumerate((q, k, v)):
        layout = hndl.weights.as_layout(f"per_head({i}, 3, heads=4)")
        got = torch.nn.functional.linear(hidden, layout.convert(weight), layout.convert(bias))
        assert torch.equal(got.view(2, 5, 4, 16).transpose(1, 2), expected)
