"""``examples/clip_text.yaml`` and ``examples/convnextv2.yaml`` against the models they are written from, with the
same weights: transformers' ``CLIPTextModel`` and timm's ``convnextv2_atto`` family.

Each reference is built from a config with random weights (every parameter perturbed, so that a layer that starts
as the identity, GRN, or a LayerNorm at ones, still tells a wrong wiring apart), its ``state_dict`` is loaded into
the spec's model with :func:`hndl.load_state_dict` and rules from the reference's keys, and the outputs are
compared with ``torch.equal`` at two sizes. The parameter counts are compared at a published size. Run in the
reference session (``nox -s reference``); each test skips where its library does not import.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from parity import require

import hndl
from hndl.weights import rule

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _perturb(module: torch.nn.Module, seed: int) -> None:
    """Every parameter moved off its initial value (zeros, ones), deterministically."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.1)


# --- CLIP text: transformers' CLIPTextModel --------------------------------------------------------------------

CLIP_RULES = [
    rule("embeddings.{table}.weight", "nodes.n_{table}.weight"),
    rule("encoder.layers.{i}.self_attn.out_proj.{t}", "nodes.n_layers.{i}.n_self_attn.o_proj.{t}"),
    rule("encoder.layers.{i}.self_attn.{proj}.{t}", "nodes.n_layers.{i}.n_self_attn.{proj}.{t}"),
    rule("encoder.layers.{i}.mlp.{fc}.{t}", "nodes.n_layers.{i}.n_{fc}.{t}"),
    rule("encoder.layers.{i}.{norm}.{t}", "nodes.n_layers.{i}.n_{norm}.{t}"),
    rule("final_layer_norm.{t}", "nodes.n_final_layer_norm.{t}"),
]
#: A small CLIPTextConfig: the vocabulary's last id (95) is the end-of-text token, as in OpenAI's vocabulary.
CLIP_SMALL = dict(
    vocab_size=96,
    hidden_size=48,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    max_position_embeddings=16,
)


def _clip_ids(batch: int, length: int, eos: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids as CLIP's tokenizer writes them, right-padded (pad id 1) after an end-of-text token, and the mask.

    Row r holds ``length - r`` tokens, its last the end-of-text token, so every row but the first is padded.
    """
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, eos, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.bool)
    for r in range(batch):
        n = max(length - r, 2)
        ids[r, n - 1] = eos
        ids[r, n:] = 1
        mask[r, n:] = False
    return ids, mask


@pytest.mark.parametrize("eos_token_id", [2, 95], ids=["legacy_eos_2", "eos_95"])
@pytest.mark.parametrize(("batch", "length"), [(3, 9), (2, 16)])
def test_clip_text_example_equals_transformers_clip_text_model(eos_token_id, batch, length):
    transformers = require("transformers")
    config = transformers.CLIPTextConfig(**CLIP_SMALL, eos_token_id=eos_token_id)
    torch.manual_seed(0)
    reference = transformers.CLIPTextModel(config).eval()
    _perturb(reference, seed=1)
    # eos_token_id 2 is transformers' legacy rule (pool at the largest id): the spec's eos_token_id null.
    params = dict(CLIP_SMALL, layer_norm_eps=config.layer_norm_eps, eos_token_id=None)
    if eos_token_id != 2:
        params["eos_token_id"] = eos_token_id
    model = hndl.build(hndl.load(EXAMPLES / "clip_text.yaml", params=params)).eval()
    hndl.load_state_dict(model, reference.state_dict(), CLIP_RULES)
    ids, mask = _clip_ids(batch, length, eos=95, seed=batch)
    with torch.no_grad():
        expected = reference(input_ids=ids, attention_mask=mask.long())
        hidden, pooled = model(ids, mask)
    # The padded positions too: transformers computes them with the same mask, and so does hndl.
    assert torch.equal(hidden, expected.last_hidden_state)
    assert torch.equal(pooled, expected.pooler_output)


def test_clip_text_example_has_the_clip_vit_b_32_text_towers_parameter_count():
    transformers = require("transformers")
    config = transformers.CLIPTextConfig()  # the defaults are openai/clip-vit-base-patch32's text tower
    with torch.device("meta"):
        reference = transformers.CLIPTextModel(config)
        model = hndl.build(hndl.load(EXAMPLES / "clip_text.yaml"))
    assert _count(model) == _count(reference) == 63_165_952
    # and the spec's defaults are the config's fields
    graph = hndl.load(EXAMPLES / "clip_text.yaml")
    for name, value in graph.params.items():
        assert getattr(config, name) == value, name


def test_clip_text_example_refuses_a_sequence_longer_than_its_position_table():
    model = hndl.build(hndl.load(EXAMPLES / "clip_text.yaml", params=dict(CLIP_SMALL)))
    ids, mask = _clip_ids(1, 17, eos=95, seed=0)
    with pytest.raises(hndl.HndlError) as info:
        model(ids, mask)
    assert info.value.problems[0].code == "E_INPUT"
    assert "16" in str(info.value)


def test_clip_text_example_checks_with_no_warning_and_warns_when_a_layer_is_not_causal():
    # kind: decoder makes hndl check that every self-attention is causal: what CLIP's text tower needs.
    text = (EXAMPLES / "clip_text.yaml").read_text()
    assert hndl.check(hndl.loads(text)).warnings == []
    forgotten = text.replace("masked: true, causal: true,", "masked: true,")
    assert forgotten != text
    with pytest.warns(hndl.HndlWarning):
        warnings = hndl.check(hndl.loads(forgotten)).warnings
    assert [w.code for w in warnings] == ["W_CAUSAL"]
    assert "self_attn" in str(warnings[0])


# --- ConvNeXt-V2: timm's convnextv2 family ----------------------------------------------------------------------


def convnext_rules() -> list:
    """timm's keys: ``stages.{i}`` is the spec's ``stage{i+1}``, its downsampling ``downsample{i+1}``."""
    rules = [
        rule("stem.0.{t}", "nodes.n_stem_conv.{t}"),
        rule("stem.1.{t}", "nodes.n_stem_norm.{t}"),
        rule("head.norm.{t}", "nodes.n_head_norm.{t}"),
        rule("head.fc.{t}", "nodes.n_head_fc.{t}"),
    ]
    for i in range(4):
        rules += [
            rule(f"stages.{i}.downsample.0.{{t}}", f"nodes.n_downsample{i + 1}.n_norm.{{t}}"),
            rule(f"stages.{i}.downsample.1.{{t}}", f"nodes.n_downsample{i + 1}.n_conv.{{t}}"),
            rule(f"stages.{i}.blocks.{{b}}.mlp.{{layer}}.{{t}}", f"nodes.n_stage{i + 1}.{{b}}.n_{{layer}}.{{t}}"),
            rule(f"stages.{i}.blocks.{{b}}.{{layer}}.{{t}}", f"nodes.n_stage{i + 1}.{{b}}.n_{{layer}}.{{t}}"),
        ]
    return rules


#: timm's keyword arguments for a ConvNeXt-V2 smaller than atto, and the spec's parameters that say the same.
CONVNEXT_SMALL = dict(depths=(1, 1, 2, 1), dims=(16, 32, 64, 128), num_classes=10)
CONVNEXT_SMALL_PARAMS = dict(depths1=1, depths2=1, depths3=2, depths4=1, dims1=16, num_classes=10)


@pytest.mark.parametrize("size", [(64, 64), (96, 128)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("variant", ["atto", "smaller"])
def test_convnextv2_example_equals_timm(variant, size):
    timm = require("timm")
    kwargs, params = (CONVNEXT_SMALL, CONVNEXT_SMALL_PARAMS) if variant == "smaller" else ({}, {})
    torch.manual_seed(0)
    reference = timm.create_model("convnextv2_atto", pretrained=False, **kwargs).eval()
    _perturb(reference, seed=2)
    model = hndl.build(hndl.load(EXAMPLES / "convnextv2.yaml", params=params)).eval()
    hndl.load_state_dict(model, reference.state_dict(), convnext_rules())
    image = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(model(image), reference(image))


def test_convnextv2_example_has_convnextv2_attos_parameter_count():
    timm = require("timm")
    reference = timm.create_model("convnextv2_atto", pretrained=False)
    model = hndl.build(hndl.load(EXAMPLES / "convnextv2.yaml"))
    assert _count(model) == _count(reference) == 3_708_400


def test_convnextv2_example_follows_the_width_it_is_given():
    # convnextv2_nano: the same spec, two parameters changed; every stage's width follows dims1.
    timm = require("timm")
    with torch.device("meta"):
        reference = timm.create_model("convnextv2_nano", pretrained=False)
        model = hndl.build(hndl.load(EXAMPLES / "convnextv2.yaml", params={"dims1": 80, "depths3": 8}))
    assert _count(model) == _count(reference)


def test_convnextv2_example_refuses_an_image_smaller_than_32():
    model = hndl.build(hndl.load(EXAMPLES / "convnextv2.yaml", params=CONVNEXT_SMALL_PARAMS))
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(1, 3, 31, 64))
    assert info.value.problems[0].code == "E_INPUT"
    assert "32" in str(info.value)


def test_convnextv2_example_drops_paths_at_timms_rates():
    # timm's schedule: drop_path_rate * k / (n - 1) for block k of all n (a float32 linspace, so to 1e-7).
    timm = require("timm")
    reference = timm.create_model("convnextv2_atto", pretrained=False, drop_path_rate=0.1)
    expected = [getattr(b.drop_path, "drop_prob", 0.0) for stage in reference.stages for b in stage.blocks]
    model = hndl.build(hndl.load(EXAMPLES / "convnextv2.yaml", params={"drop_path_rate": 0.1}))
    rates = [block.n_drop_path.p for i in range(1, 5) for block in getattr(model.nodes, f"n_stage{i}")]
    assert rates == pytest.approx(expected, abs=1e-7)
    assert len(rates) == 12
    assert rates[-1] == pytest.approx(0.1)
