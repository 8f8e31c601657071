"""The zoo's entries: which spec file each is, what it is checked against, and its reference's key map.

The architecture of an entry is its spec file (``specs/<name>.yaml``, shipped as package data); this table adds
what a spec cannot say: the reference implementation it reproduces, that reference's parameter count at the
defaults, and the rules that carry the reference's ``state_dict`` keys to hndl's (:mod:`._weights`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._weights import Rule, rule

__all__ = ["ENTRIES", "Entry"]


@dataclass(frozen=True)
class Entry:
    """One zoo model.

    Attributes:
        name: the entry's name (``zoo:<name>``), also its spec file's stem.
        reference: the implementation it reproduces, as code a user would write.
        parameters: the reference's parameter count at the spec's defaults (tied weights counted once).
        rules: the reference's state_dict keys to hndl's, first match wins.
        presets: published configurations by name (``"llama-2-7b"``), each the spec parameters it sets, in the
            reference's config names; ``hndl.zoo.get(name, preset=...)`` applies one.
        preset_parameters: the reference's parameter count at each preset.
    """

    name: str
    reference: str
    parameters: int
    rules: tuple[Rule, ...]
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    preset_parameters: Mapping[str, int] = field(default_factory=dict)


def _resnet_rules() -> tuple[Rule, ...]:
    # torchvision keeps a block's shortcut as `downsample` = Sequential(conv, bn); hndl names the two nodes.
    block = "nodes.n_layer{stage}.{block}"
    return (
        rule("layer{stage}.{block}.downsample.0.{t}", f"{block}.n_downsample_conv.{{t}}"),
        rule("layer{stage}.{block}.downsample.1.{t}", f"{block}.n_downsample_bn.{{t}}"),
        rule("layer{stage}.{block}.{layer}.{t}", f"{block}.n_{{layer}}.{{t}}"),
        rule("{layer}.{t}", "nodes.n_{layer}.{t}"),
    )


def _vit_b_16_rules() -> tuple[Rule, ...]:
    ref = "encoder.layers.encoder_layer_{i}"
    hndl = "nodes.n_layers.{i}"
    return (
        rule("class_token", "nodes.n_class_token.weight"),
        rule("encoder.pos_embedding", "nodes.n_pos_embedding.weight"),
        rule("conv_proj.{t}", "nodes.n_conv_proj.{t}"),
        # torch.nn.MultiheadAttention's in_proj holds queries, keys and values stacked, as hndl's qkv does.
        rule(f"{ref}.self_attention.in_proj_weight", f"{hndl}.n_self_attention.qkv.weight"),
        rule(f"{ref}.self_attention.in_proj_bias", f"{hndl}.n_self_attention.qkv.bias"),
        rule(f"{ref}.self_attention.out_proj.{{t}}", f"{hndl}.n_self_attention.proj.{{t}}"),
        rule(f"{ref}.mlp.0.{{t}}", f"{hndl}.n_mlp_fc1.{{t}}"),
        rule(f"{ref}.mlp.3.{{t}}", f"{hndl}.n_mlp_fc2.{{t}}"),
        rule(f"{ref}.{{layer}}.{{t}}", f"{hndl}.n_{{layer}}.{{t}}"),
        rule("encoder.ln.{t}", "nodes.n_ln.{t}"),
        rule("heads.head.{t}", "nodes.n_head.{t}"),
    )


def _vit_timm_rules() -> tuple[Rule, ...]:
    return (
        rule("cls_token", "nodes.n_cls_token.weight"),
        rule("pos_embed", "nodes.n_pos_embed.weight"),
        rule("patch_embed.proj.{t}", "nodes.n_patch_embed.{t}"),
        rule("blocks.{i}.attn.{part}.{t}", "nodes.n_blocks.{i}.n_attn.{part}.{t}"),
        rule("blocks.{i}.mlp.{layer}.{t}", "nodes.n_blocks.{i}.n_{layer}.{t}"),
        rule("blocks.{i}.{layer}.{t}", "nodes.n_blocks.{i}.n_{layer}.{t}"),
        rule("{layer}.{t}", "nodes.n_{layer}.{t}"),
    )


def _gpt2_rules() -> tuple[Rule, ...]:
    # The spec's module paths are GPT2LMHeadModel's; transformers' Conv1D stores its weight as [in, out], the
    # transpose of torch.nn.Linear's [out, in], and hndl's attention holds the fused c_attn as `qkv`, c_proj as
    # `proj`. GPT2LMHeadModel's keys start with `transformer.`; GPT2Model's (and most hub checkpoints') do not:
    # both load.
    hndl, t = "transformer.h.{i}", "transpose"
    rules: list[Rule] = []
    for prefix in ("transformer.", ""):
        ref = f"{prefix}h.{{i}}"
        rules += [
            rule(f"{ref}.attn.c_attn.weight", (f"{hndl}.attn.qkv.weight", t)),
            rule(f"{ref}.attn.c_attn.bias", f"{hndl}.attn.qkv.bias"),
            rule(f"{ref}.attn.c_proj.weight", (f"{hndl}.attn.proj.weight", t)),
            rule(f"{ref}.attn.c_proj.bias", f"{hndl}.attn.proj.bias"),
            # Older transformers releases keep the causal mask as buffers; hndl's attention computes it.
            rule(f"{ref}.attn.bias"),
            rule(f"{ref}.attn.masked_bias"),
            rule(f"{ref}.mlp.{{layer}}.weight", (f"{hndl}.mlp.{{layer}}.weight", t)),
            rule(f"{ref}.{{path*}}", f"{hndl}.{{path*}}"),
            rule(f"{prefix}{{layer}}.{{t}}", "transformer.{layer}.{t}"),
        ]
    return (rule("lm_head.weight", "lm_head.weight"), *rules)


def _unet_rules() -> tuple[Rule, ...]:
    return (rule("{level}.{layer}.{t}", "nodes.n_{level}.n_{layer}.{t}"), rule("{layer}.{t}", "nodes.n_{layer}.{t}"))


def _lstm_rules() -> tuple[Rule, ...]:
    return (rule("{layer}.{t}", "nodes.n_{layer}.{t}"),)


def _seq2seq_rules() -> tuple[Rule, ...]:
    enc, dec = "transformer.encoder.layers.{i}", "transformer.decoder.layers.{i}"
    henc, hdec = "nodes.n_encoder.{i}", "nodes.n_decoder.{i}"
    rows_q, rows_kv = "rows 0/3..1/3", "rows 1/3..3/3"
    return (
        rule(f"{enc}.self_attn.in_proj_{{t}}", f"{henc}.n_self_attn.qkv.{{t}}"),
        rule(f"{enc}.self_attn.out_proj.{{t}}", f"{henc}.n_self_attn.proj.{{t}}"),
        rule(f"{enc}.{{layer}}.{{t}}", f"{henc}.n_{{layer}}.{{t}}"),
        rule(f"{dec}.self_attn.in_proj_{{t}}", f"{hdec}.n_self_attn.qkv.{{t}}"),
        rule(f"{dec}.self_attn.out_proj.{{t}}", f"{hdec}.n_self_attn.proj.{{t}}"),
        # Cross-attention: MultiheadAttention stacks the queries' projection over the keys' and values'; hndl
        # keeps the queries' (q, from the decoder) apart from the keys' and values' (kv, from the memory).
        rule(
            f"{dec}.multihead_attn.in_proj_{{t}}",
            (f"{hdec}.n_multihead_attn.q.{{t}}", rows_q),
            (f"{hdec}.n_multihead_attn.kv.{{t}}", rows_kv),
        ),
        rule(f"{dec}.multihead_attn.out_proj.{{t}}", f"{hdec}.n_multihead_attn.proj.{{t}}"),
        rule(f"{dec}.{{layer}}.{{t}}", f"{hdec}.n_{{layer}}.{{t}}"),
        rule("transformer.encoder.norm.{t}", "nodes.n_encoder_norm.{t}"),
        rule("transformer.decoder.norm.{t}", "nodes.n_decoder_norm.{t}"),
        rule("{layer}.{t}", "nodes.n_{layer}.{t}"),
    )


def _decoder_rules() -> tuple[Rule, ...]:
    # transformers' LlamaForCausalLM / MistralForCausalLM: the spec's module paths are theirs, key for key.
    return (rule("model.{path*}", "model.{path*}"), rule("lm_head.{t}", "lm_head.{t}"))


def _bert_rules() -> tuple[Rule, ...]:
    # The spec's module paths are BertModel's, but for the attention: hndl's layer sits at attention.self and
    # holds the four projections under its own names (BERT: self.query, self.key, self.value, output.dense).
    ref = "encoder.layer.{i}.attention"
    return (
        rule(f"{ref}.self.query.{{t}}", f"{ref}.self.q_proj.{{t}}"),
        rule(f"{ref}.self.key.{{t}}", f"{ref}.self.k_proj.{{t}}"),
        rule(f"{ref}.self.value.{{t}}", f"{ref}.self.v_proj.{{t}}"),
        rule(f"{ref}.output.dense.{{t}}", f"{ref}.self.o_proj.{{t}}"),
        *(rule(f"{part}.{{path*}}", f"{part}.{{path*}}") for part in ("embeddings", "encoder", "pooler")),
    )


def _whisper_encoder_rules() -> tuple[Rule, ...]:
    return (
        rule("layers.{i}.self_attn.out_proj.{t}", "nodes.n_layers.{i}.n_self_attn.o_proj.{t}"),
        rule("layers.{i}.self_attn.{proj}.{t}", "nodes.n_layers.{i}.n_self_attn.{proj}.{t}"),
        rule("layers.{i}.{layer}.{t}", "nodes.n_layers.{i}.n_{layer}.{t}"),
        rule("{layer}.{t}", "nodes.n_{layer}.{t}"),
    )


def _t5_encoder_rules() -> tuple[Rule, ...]:
    ref, hndl = "encoder.block.{i}.layer", "nodes.n_block.{i}"
    return (
        rule("shared.weight", "nodes.n_shared.weight"),
        # T5EncoderModel ties the encoder's embedding to `shared`; the state_dict lists the one tensor twice.
        rule("encoder.embed_tokens.weight"),
        # transformers keeps the position bias table in block 0; hndl computes the bias once, outside the blocks.
        rule(
            "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            "nodes.n_relative_attention_bias.weight",
        ),
        rule(f"{ref}.0.SelfAttention.{{proj}}.weight", f"{hndl}.n_self_attention.{{proj}}_proj.weight"),
        rule(f"{ref}.0.layer_norm.weight", f"{hndl}.n_layer_norm.weight"),
        rule(f"{ref}.1.DenseReluDense.{{layer}}.weight", f"{hndl}.n_{{layer}}.weight"),
        rule(f"{ref}.1.layer_norm.weight", f"{hndl}.n_ff_layer_norm.weight"),
        rule("encoder.final_layer_norm.weight", "nodes.n_final_layer_norm.weight"),
    )


def _swin_rules() -> tuple[Rule, ...]:
    # torchvision keeps the patch embedding, stages and patch mergings in one Sequential, `features`: 0 the patch
    # embedding (conv, permute, norm), 1, 3, 5, 7 the stages, 2, 4, 6 the mergings; hndl names them.
    rules = [rule("features.0.0.{t}", "nodes.n_patch_embed.{t}"), rule("features.0.2.{t}", "nodes.n_patch_norm.{t}")]
    for stage in range(1, 5):
        ref, hndl = f"features.{2 * stage - 1}.{{i}}", f"nodes.n_stage{stage}.{{i}}"
        rules += [
            # The bias table is a bare Parameter in torchvision, an embedding's weight in hndl; the index is a
            # persistent buffer on both sides.
            rule(f"{ref}.attn.relative_position_bias_table", f"{hndl}.n_attn.n_relative_position_bias_table.weight"),
            rule(f"{ref}.attn.relative_position_index", f"{hndl}.n_attn.n_relative_position_index.value"),
            rule(f"{ref}.attn.{{layer}}.{{t}}", f"{hndl}.n_attn.n_{{layer}}.{{t}}"),
            rule(f"{ref}.mlp.0.{{t}}", f"{hndl}.n_mlp_fc1.{{t}}"),
            rule(f"{ref}.mlp.3.{{t}}", f"{hndl}.n_mlp_fc2.{{t}}"),
            rule(f"{ref}.{{layer}}.{{t}}", f"{hndl}.n_{{layer}}.{{t}}"),
        ]
        if stage < 4:
            rules.append(rule(f"features.{2 * stage}.{{layer}}.{{t}}", f"nodes.n_merge{stage}.n_{{layer}}.{{t}}"))
    return (*rules, rule("{layer}.{t}", "nodes.n_{layer}.{t}"))


def _convnext_rules() -> tuple[Rule, ...]:
    # torchvision's `features` interleaves the stem (0), the stages (1, 3, 5, 7) and the downsampling layers
    # (2, 4, 6); a block's layers are the positions of its Sequential (1 and 6 are permutes, 4 the GELU).
    rules = [
        rule("features.0.0.{t}", "nodes.n_stem_conv.{t}"),
        rule("features.0.1.{t}", "nodes.n_stem_norm.{t}"),
    ]
    for stage in range(1, 5):
        ref, hndl = f"features.{2 * stage - 1}.{{i}}", f"nodes.n_stage{stage}.{{i}}"
        rules += [
            rule(f"{ref}.layer_scale", f"{hndl}.n_layer_scale.weight"),
            rule(f"{ref}.block.0.{{t}}", f"{hndl}.n_dwconv.{{t}}"),
            rule(f"{ref}.block.2.{{t}}", f"{hndl}.n_norm.{{t}}"),
            rule(f"{ref}.block.3.{{t}}", f"{hndl}.n_pwconv1.{{t}}"),
            rule(f"{ref}.block.5.{{t}}", f"{hndl}.n_pwconv2.{{t}}"),
        ]
        if stage < 4:
            rules += [
                rule(f"features.{2 * stage}.0.{{t}}", f"nodes.n_downsample{stage}.n_norm.{{t}}"),
                rule(f"features.{2 * stage}.1.{{t}}", f"nodes.n_downsample{stage}.n_conv.{{t}}"),
            ]
    return (*rules, rule("classifier.0.{t}", "nodes.n_norm.{t}"), rule("classifier.2.{t}", "nodes.n_classifier.{t}"))


def _densenet_rules() -> tuple[Rule, ...]:
    # torchvision counts a block's layers from 1 (denselayer1), hndl's repetitions from 0: the field's offset.
    return (
        rule("features.denseblock{b}.denselayer{i+1}.{layer}.{t}", "nodes.n_denseblock{b}.{i}.n_{layer}.{t}"),
        rule("features.transition{b}.{layer}.{t}", "nodes.n_transition{b}.n_{layer}.{t}"),
        rule("features.{layer}.{t}", "nodes.n_{layer}.{t}"),
        rule("classifier.{t}", "nodes.n_classifier.{t}"),
    )


def _conv_bn_act_rules(ref: str, hndl: str) -> tuple[Rule, ...]:
    # torchvision's Conv2dNormActivation is Sequential(conv, norm, activation); hndl's conv_bn_act names them.
    return (rule(f"{ref}.0.{{t}}", f"{hndl}.n_conv.{{t}}"), rule(f"{ref}.1.{{t}}", f"{hndl}.n_bn.{{t}}"))


def _inverted_residual_rules(ref: str, hndl: str, layers: tuple[str, ...]) -> tuple[Rule, ...]:
    # torchvision numbers a block's layers (`block.0`, `block.1`, ...), so a layer's number depends on which
    # layers the block has; hndl names them (expand, depthwise, se, project).
    rules: list[Rule] = []
    for j, layer in enumerate(layers):
        if layer == "se":
            rules.append(rule(f"{ref}.block.{j}.{{fc}}.{{t}}", f"{hndl}.n_se.n_{{fc}}.{{t}}"))
        else:
            rules += _conv_bn_act_rules(f"{ref}.block.{j}", f"{hndl}.n_{layer}")
    return tuple(rules)


def _mobilenet_v3_rules() -> tuple[Rule, ...]:
    # features.0 is the stem, features.1..11 the blocks (hndl's blocks.0..10), features.12 the last convolution.
    # The first block has no expansion, the second and third no squeeze-and-excitation.
    full = ("expand", "depthwise", "se", "project")
    layouts = [("depthwise", "se", "project"), *[("expand", "depthwise", "project")] * 2, *[full] * 8]
    rules = list(_conv_bn_act_rules("features.0", "nodes.n_first_conv"))
    for i, layers in enumerate(layouts):
        rules += _inverted_residual_rules(f"features.{i + 1}", f"nodes.n_blocks.{i}", layers)
    return (
        *rules,
        *_conv_bn_act_rules(f"features.{len(layouts) + 1}", "nodes.n_last_conv"),
        rule("classifier.0.{t}", "nodes.n_fc1.{t}"),
        rule("classifier.3.{t}", "nodes.n_fc2.{t}"),
    )


def _efficientnet_rules() -> tuple[Rule, ...]:
    # features.0 is the stem, features.1..7 the stages (hndl's stage1..stage7, each block by its number),
    # features.8 the last convolution. The first stage's blocks have no expansion (their ratio is 1).
    return (
        *_conv_bn_act_rules("features.0", "nodes.n_first_conv"),
        *_inverted_residual_rules("features.1.{b}", "nodes.n_stage1.{b}", ("depthwise", "se", "project")),
        *_inverted_residual_rules("features.{s}.{b}", "nodes.n_stage{s}.{b}", ("expand", "depthwise", "se", "project")),
        *_conv_bn_act_rules("features.8", "nodes.n_last_conv"),
        rule("classifier.1.{t}", "nodes.n_fc.{t}"),
    )


_LLAMA_7B: dict[str, Any] = {
    "vocab_size": 32000,
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
}
_LLAMA_PRESETS: dict[str, dict[str, Any]] = {
    "llama-2-7b": {**_LLAMA_7B, "intermediate_size": 11008, "num_key_value_heads": 32, "rms_norm_eps": 1e-5},
    "llama-3-8b": {
        **_LLAMA_7B,
        "vocab_size": 128256,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "rope_theta": 500000.0,
        "rms_norm_eps": 1e-5,
    },
    "llama-3.1-8b": {
        **_LLAMA_7B,
        "vocab_size": 128256,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
        "rms_norm_eps": 1e-5,
    },
}
_MISTRAL_PRESETS = {
    "mistral-7b": {
        **_LLAMA_7B,
        "intermediate_size": 14336,
        "num_key_value_heads": 8,
        "sliding_window": 4096,
        "rms_norm_eps": 1e-5,
    },
}
_BERT_PRESETS = {
    "bert-base": {
        "vocab_size": 30522,
        "hidden_size": 768,
        "num_hidden_layers": 12,
        "num_attention_heads": 12,
        "intermediate_size": 3072,
        "max_position_embeddings": 512,
    },
    "bert-large": {
        "vocab_size": 30522,
        "hidden_size": 1024,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "intermediate_size": 4096,
        "max_position_embeddings": 512,
    },
}
_WHISPER_PRESETS = {
    "whisper-tiny": {
        "num_mel_bins": 80,
        "d_model": 384,
        "encoder_layers": 4,
        "encoder_attention_heads": 6,
        "encoder_ffn_dim": 1536,
        "max_source_positions": 1500,
    },
    "whisper-base": {
        "num_mel_bins": 80,
        "d_model": 512,
        "encoder_layers": 6,
        "encoder_attention_heads": 8,
        "encoder_ffn_dim": 2048,
        "max_source_positions": 1500,
    },
}
_T5_PRESETS = {
    "t5-small": {"vocab_size": 32128, "d_model": 512, "d_kv": 64, "d_ff": 2048, "num_layers": 6, "num_heads": 8},
    "t5-base": {"vocab_size": 32128, "d_model": 768, "d_kv": 64, "d_ff": 3072, "num_layers": 12, "num_heads": 12},
}


ENTRIES: dict[str, Entry] = {
    e.name: e
    for e in (
        Entry("resnet18", "torchvision.models.resnet18()", 11_689_512, _resnet_rules()),
        Entry("resnet50", "torchvision.models.resnet50()", 25_557_032, _resnet_rules()),
        Entry("vit_b_16", "torchvision.models.vit_b_16()", 86_567_656, _vit_b_16_rules()),
        Entry("vit_tiny_patch16_224", 'timm.create_model("vit_tiny_patch16_224")', 5_717_416, _vit_timm_rules()),
        Entry("gpt2", "transformers.GPT2LMHeadModel(transformers.GPT2Config())", 124_439_808, _gpt2_rules()),
        Entry("unet", "UNet() in tests/zoo/references.py (hand-written)", 1_941_122, _unet_rules()),
        Entry(
            "lstm_classifier", "LSTMClassifier() in tests/zoo/references.py (hand-written)", 3_648_514, _lstm_rules()
        ),
        Entry(
            "seq2seq_transformer",
            "Seq2SeqTransformer() in tests/zoo/references.py (torch.nn.Transformer with embeddings and head)",
            6_561_768,
            _seq2seq_rules(),
        ),
        Entry(
            "llama",
            "transformers.LlamaForCausalLM(transformers.LlamaConfig(...)) at the spec's configuration",
            125_248,
            _decoder_rules(),
            _LLAMA_PRESETS,
            {"llama-2-7b": 6_738_415_616, "llama-3-8b": 8_030_261_248, "llama-3.1-8b": 8_030_261_248},
        ),
        Entry(
            "mistral",
            "transformers.MistralForCausalLM(transformers.MistralConfig(...)) at the spec's configuration",
            125_248,
            _decoder_rules(),
            _MISTRAL_PRESETS,
            {"mistral-7b": 7_241_732_096},
        ),
        Entry(
            "bert",
            "transformers.BertModel(transformers.BertConfig(...)) (with its pooler) at the spec's configuration",
            91_840,
            _bert_rules(),
            _BERT_PRESETS,
            {"bert-base": 109_482_240, "bert-large": 335_141_888},
        ),
        Entry(
            "whisper_encoder",
            "transformers.WhisperModel(transformers.WhisperConfig(...)).encoder at the spec's configuration",
            83_968,
            _whisper_encoder_rules(),
            _WHISPER_PRESETS,
            {"whisper-tiny": 8_208_384, "whisper-base": 20_590_592},
        ),
        Entry(
            "t5_encoder",
            "transformers.T5EncoderModel(transformers.T5Config(...)) at the spec's configuration",
            82_368,
            _t5_encoder_rules(),
            _T5_PRESETS,
            {"t5-small": 35_330_816, "t5-base": 109_628_544},
        ),
        Entry("mobilenet_v3_small", "torchvision.models.mobilenet_v3_small()", 2_542_856, _mobilenet_v3_rules()),
        Entry("convnext_tiny", "torchvision.models.convnext_tiny()", 28_589_128, _convnext_rules()),
        Entry("efficientnet_b0", "torchvision.models.efficientnet_b0()", 5_288_548, _efficientnet_rules()),
        Entry("swin_t", "torchvision.models.swin_t()", 28_288_354, _swin_rules()),
        Entry("densenet121", "torchvision.models.densenet121()", 7_978_856, _densenet_rules()),
    )
}
