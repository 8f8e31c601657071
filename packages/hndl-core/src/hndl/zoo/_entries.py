"""The zoo's entries: which spec file each is, what it is checked against, and its reference's key map.

The architecture of an entry is its spec file (``specs/<name>.yaml``, shipped as package data); this table adds
what a spec cannot say: the reference implementation it reproduces, that reference's parameter count at the
defaults, and the rules that carry the reference's ``state_dict`` keys to hndl's (:mod:`._weights`).
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """

    name: str
    reference: str
    parameters: int
    rules: tuple[Rule, ...]


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
    # transformers' Conv1D stores its weight as [in, out], the transpose of torch.nn.Linear's [out, in].
    # GPT2LMHeadModel's keys start with `transformer.`; GPT2Model's (and most hub checkpoints') do not: both load.
    hndl, t = "nodes.n_h.{i}", "transpose"
    rules: list[Rule] = []
    for prefix in ("transformer.", ""):
        ref = f"{prefix}h.{{i}}"
        rules += [
            rule(f"{ref}.attn.c_attn.weight", (f"{hndl}.n_attn.qkv.weight", t)),
            rule(f"{ref}.attn.c_attn.bias", f"{hndl}.n_attn.qkv.bias"),
            rule(f"{ref}.attn.c_proj.weight", (f"{hndl}.n_attn.proj.weight", t)),
            rule(f"{ref}.attn.c_proj.bias", f"{hndl}.n_attn.proj.bias"),
            # Older transformers releases keep the causal mask as buffers; hndl's attention computes it.
            rule(f"{ref}.attn.bias"),
            rule(f"{ref}.attn.masked_bias"),
            rule(f"{ref}.mlp.c_fc.weight", (f"{hndl}.n_c_fc.weight", t)),
            rule(f"{ref}.mlp.c_fc.bias", f"{hndl}.n_c_fc.bias"),
            rule(f"{ref}.mlp.c_proj.weight", (f"{hndl}.n_c_proj.weight", t)),
            rule(f"{ref}.mlp.c_proj.bias", f"{hndl}.n_c_proj.bias"),
            rule(f"{ref}.{{layer}}.{{t}}", f"{hndl}.n_{{layer}}.{{t}}"),
            rule(f"{prefix}{{layer}}.{{t}}", "nodes.n_{layer}.{t}"),
        ]
    return (rule("lm_head.weight", "nodes.n_lm_head.weight"), *rules)


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
    )
}
