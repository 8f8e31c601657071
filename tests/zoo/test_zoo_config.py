"""Every zoo entry is configurable in the dimensions its reference's constructor exposes (SPEC §14.2): a
non-default configuration builds, runs, and has the parameter count that a hand computation gives.

The counts are computed here from the architectures' definitions, layer by layer, as a reader would check
them; each formula is first held to the reference's count at the defaults (and, for the ResNets and ViTs, to
torchvision's published counts of its other depths and widths), so a formula that drifted from the
architecture fails there. The library references themselves (torchvision, timm, transformers) are compared in
``test_zoo_reference.py`` under ``nox -s reference``; the hand-written ones in ``test_zoo_handwritten.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

import hndl
import hndl.zoo

torch = pytest.importorskip("torch")


def count(name: str, **overrides: Any) -> int:
    with torch.device("meta"):  # shapes only
        model = hndl.build(hndl.zoo.get(name, **overrides))
    return sum(p.numel() for p in model.parameters())


def run(name: str, *inputs: torch.Tensor, **overrides: Any) -> torch.Tensor:
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get(name, **overrides)).eval()
    with torch.no_grad():
        return model(*inputs)


# --- hand computations --------------------------------------------------------------------------------------


def conv(cin: int, cout: int, k: int, *, bias: bool = True, groups: int = 1) -> int:
    return cout * (cin // groups) * k * k + (cout if bias else 0)


def linear(cin: int, cout: int, *, bias: bool = True) -> int:
    return cin * cout + (cout if bias else 0)


def norm(c: int) -> int:
    return 2 * c  # batch norm and layer norm: weight and bias


def resnet_basic(layers: list[int], width: int = 64, num_classes: int = 1000) -> int:
    total = conv(3, width, 7, bias=False) + norm(width)
    cin = width
    for stage, blocks in enumerate(layers):
        planes = width * 2**stage
        for b in range(blocks):
            total += (
                conv(cin, planes, 3, bias=False) + norm(planes) + conv(planes, planes, 3, bias=False) + norm(planes)
            )
            if b == 0 and stage > 0:  # the stage's first block: strided 1x1 shortcut
                total += conv(cin, planes, 1, bias=False) + norm(planes)
            cin = planes
    return total + linear(cin, num_classes)


def resnet_bottleneck(
    layers: list[int], width: int = 64, groups: int = 1, width_per_group: int = 64, num_classes: int = 1000
) -> int:
    total = conv(3, width, 7, bias=False) + norm(width)
    cin = width
    for stage, blocks in enumerate(layers):
        planes = width * 2**stage
        inner = planes * width_per_group // 64 * groups  # torchvision: int(planes * (base_width / 64.0)) * groups
        for b in range(blocks):
            total += conv(cin, inner, 1, bias=False) + norm(inner)
            total += conv(inner, inner, 3, bias=False, groups=groups) + norm(inner)
            total += conv(inner, 4 * planes, 1, bias=False) + norm(4 * planes)
            if b == 0:  # every stage's first block, the first stage's too (64 -> 256 channels)
                total += conv(cin, 4 * planes, 1, bias=False) + norm(4 * planes)
            cin = 4 * planes
    return total + linear(cin, num_classes)


def vit(image_size: int, patch_size: int, depth: int, hidden_dim: int, mlp_dim: int, num_classes: int) -> int:
    d = hidden_dim
    tokens = (image_size // patch_size) ** 2 + 1
    layer = norm(d) + linear(d, 3 * d) + linear(d, d) + norm(d) + linear(d, mlp_dim) + linear(mlp_dim, d)
    return conv(3, d, patch_size) + d + tokens * d + depth * layer + norm(d) + linear(d, num_classes)


def gpt2(vocab_size: int, n_positions: int, n_embd: int, n_layer: int) -> int:
    d = n_embd
    block = norm(d) + linear(d, 3 * d) + linear(d, d) + norm(d) + linear(d, 4 * d) + linear(4 * d, d)
    return vocab_size * d + n_positions * d + n_layer * block + norm(d)  # the head is tied to the embedding


# --- the formulas against the references' counts -------------------------------------------------------------


def test_the_hand_computations_give_the_references_counts() -> None:
    assert resnet_basic([2, 2, 2, 2]) == hndl.zoo.entry("resnet18").parameters
    assert resnet_bottleneck([3, 4, 6, 3]) == hndl.zoo.entry("resnet50").parameters
    assert vit(224, 16, 12, 768, 3072, 1000) == hndl.zoo.entry("vit_b_16").parameters
    assert vit(224, 16, 12, 192, 768, 1000) == hndl.zoo.entry("vit_tiny_patch16_224").parameters
    assert gpt2(50257, 1024, 768, 12) == hndl.zoo.entry("gpt2").parameters


# torchvision's published parameter counts of the other members of the families (torchvision.models docs).
@pytest.mark.parametrize(
    ("entry", "overrides", "published"),
    [
        ("resnet18", dict(layers1=3, layers2=4, layers3=6, layers4=3), 21_797_672),  # resnet34
        ("resnet50", dict(layers1=3, layers2=4, layers3=23, layers4=3), 44_549_160),  # resnet101
        ("resnet50", dict(layers1=3, layers2=8, layers3=36, layers4=3), 60_192_808),  # resnet152
        ("resnet50", dict(groups=32, width_per_group=4), 25_028_904),  # resnext50_32x4d
        ("resnet50", dict(width_per_group=128), 68_883_240),  # wide_resnet50_2
        ("vit_b_16", dict(patch_size=32), 88_224_232),  # vit_b_32
        ("vit_b_16", dict(depth=24, num_heads=16, hidden_dim=1024, mlp_dim=4096), 304_326_632),  # vit_l_16
    ],
    ids=["resnet34", "resnet101", "resnet152", "resnext50_32x4d", "wide_resnet50_2", "vit_b_32", "vit_l_16"],
)
def test_overrides_reach_the_other_members_of_the_family(entry: str, overrides: dict[str, int], published: int) -> None:
    assert count(entry, **overrides) == published


# --- each entry at a configuration of its own -----------------------------------------------------------------


@pytest.mark.parametrize("layers", [[1, 1, 1, 1], [1, 3, 2, 1], [2, 1, 1, 4]])
def test_resnet18_stage_depths_width_and_classes(layers: list[int]) -> None:
    config = dict(layers1=layers[0], layers2=layers[1], layers3=layers[2], layers4=layers[3], width=16, num_classes=10)
    assert count("resnet18", **config) == resnet_basic(layers, width=16, num_classes=10)
    assert run("resnet18", torch.randn(2, 3, 48, 40), **config).shape == (2, 10)
    graph = hndl.zoo.get("resnet18", **config)
    state = hndl.build(graph).state_dict()
    for stage, blocks in enumerate(layers, start=1):
        assert {k.split(".")[2] for k in state if k.startswith(f"nodes.n_layer{stage}.")} == {
            str(b) for b in range(blocks)
        }


@pytest.mark.parametrize("layers", [[1, 1, 1, 1], [2, 1, 3, 1]])
def test_resnet50_stage_depths_groups_width_and_classes(layers: list[int]) -> None:
    config = dict(layers1=layers[0], layers2=layers[1], layers3=layers[2], layers4=layers[3])
    config.update(width=16, groups=4, width_per_group=32, num_classes=7)
    assert count("resnet50", **config) == resnet_bottleneck(layers, 16, 4, 32, 7)
    assert run("resnet50", torch.randn(1, 3, 64, 64), **config).shape == (1, 7)


def test_a_resnet_stage_depth_below_one_is_e_param_at_its_line() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.zoo.get("resnet18", layers3=0))
    (p,) = info.value.problems
    assert (p.code, p.node) == ("E_PARAM", "layer3")
    assert p.location.startswith("zoo:resnet18:")


@pytest.mark.parametrize("entry", ["vit_b_16", "vit_tiny_patch16_224"])
def test_vit_image_and_patch_size_width_depth_heads_mlp_and_classes(entry: str) -> None:
    config = dict(image_size=64, patch_size=16, hidden_dim=96, depth=2, num_heads=3, mlp_dim=192, num_classes=10)
    assert count(entry, **config) == vit(64, 16, 2, 96, 192, 10)
    assert run(entry, torch.randn(2, 3, 64, 64), **config).shape == (2, 10)
    smaller_patches = dict(config, image_size=32, patch_size=8)  # 16 patches and the class token
    assert count(entry, **smaller_patches) == vit(32, 8, 2, 96, 192, 10)
    assert run(entry, torch.randn(1, 3, 32, 32), **smaller_patches).shape == (1, 10)


def test_vit_position_embedding_follows_image_and_patch_size() -> None:
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get("vit_b_16", image_size=96, patch_size=8, hidden_dim=64, num_heads=4))
    assert tuple(model.state_dict()["nodes.n_pos_embedding.weight"].shape) == (1, 12 * 12 + 1, 64)
    assert tuple(model.state_dict()["nodes.n_class_token.weight"].shape) == (1, 1, 64)


def test_vit_input_is_the_configured_image_size() -> None:
    graph = hndl.zoo.get("vit_tiny_patch16_224", image_size=48, depth=1)
    assert hndl.summary(graph).inputs == {"image": "[B, 3, 48, 48]"}
    model = hndl.build(graph)
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(1, 3, 224, 224))
    (p,) = info.value.problems
    assert (p.code, p.message) == ("E_INPUT", "dim 2 expected 48, got 224")


def test_gpt2_layers_heads_width_vocabulary_and_positions() -> None:
    config = dict(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=64)
    assert count("gpt2", **config) == gpt2(1000, 64, 128, 2)
    logits = run("gpt2", torch.randint(0, 1000, (2, 16)), **config)
    assert logits.shape == (2, 16, 1000)


def test_unet_width_classes_and_input_channels() -> None:
    from references import UNet

    reference = sum(p.numel() for p in UNet(num_classes=4, width=8, in_channels=1).parameters())
    assert count("unet", num_classes=4, width=8, in_channels=1) == reference
    assert run("unet", torch.randn(1, 1, 32, 32), num_classes=4, width=8, in_channels=1).shape == (1, 4, 32, 32)


def test_lstm_classifier_every_size() -> None:
    from references import LSTMClassifier

    config = dict(vocab_size=300, embed_dim=12, hidden_size=20, num_layers=3, num_classes=5)
    assert count("lstm_classifier", **config) == sum(p.numel() for p in LSTMClassifier(**config).parameters())
    assert run("lstm_classifier", torch.randint(0, 300, (2, 7)), **config).shape == (2, 5)


def test_seq2seq_transformer_every_size() -> None:
    from references import Seq2SeqTransformer

    config = dict(
        src_vocab=50, tgt_vocab=70, d_model=48, nhead=6, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=80
    )
    reference = sum(p.numel() for p in Seq2SeqTransformer(**config).parameters())
    assert count("seq2seq_transformer", **config) == reference
    out = run("seq2seq_transformer", torch.randint(0, 50, (2, 6)), torch.randint(0, 70, (2, 5)), **config)
    assert out.shape == (2, 5, 70)


# --- every entry's configuration is what the docs list ---------------------------------------------------------

CONFIGURATION = {
    "resnet18": ["layers1", "layers2", "layers3", "layers4", "width", "num_classes"],
    "resnet50": ["layers1", "layers2", "layers3", "layers4", "width", "groups", "width_per_group", "num_classes"],
    "vit_b_16": [
        *("image_size", "patch_size", "depth", "num_heads", "hidden_dim", "mlp_dim", "dropout"),
        *("attention_dropout", "num_classes"),
    ],
    "vit_tiny_patch16_224": [
        *("image_size", "patch_size", "depth", "num_heads", "hidden_dim", "mlp_dim", "dropout", "num_classes"),
    ],
    "gpt2": ["vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "dropout"],
    "unet": ["num_classes", "width", "in_channels"],
    "lstm_classifier": ["vocab_size", "embed_dim", "hidden_size", "num_layers", "num_classes", "dropout"],
    "seq2seq_transformer": [
        *("src_vocab", "tgt_vocab", "d_model", "nhead", "num_encoder_layers", "num_decoder_layers"),
        *("dim_feedforward", "dropout", "max_len"),
    ],
    "llama": [
        *("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"),
        *("num_key_value_heads", "head_dim", "rope_theta", "rope_scaling", "rms_norm_eps", "attention_bias"),
        *("mlp_bias", "attention_dropout", "tie_word_embeddings"),
    ],
    "mistral": [
        *("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"),
        *("num_key_value_heads", "head_dim", "rope_theta", "sliding_window", "rms_norm_eps", "attention_dropout"),
    ],
    "bert": [
        *("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"),
        *("max_position_embeddings", "type_vocab_size", "pad_token_id", "layer_norm_eps", "hidden_dropout_prob"),
        "attention_probs_dropout_prob",
    ],
    "whisper_encoder": [
        *("num_mel_bins", "d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim"),
        *("max_source_positions", "dropout", "attention_dropout", "activation_dropout"),
    ],
    "t5_encoder": [
        *("vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads", "relative_attention_num_buckets"),
        *("relative_attention_max_distance", "layer_norm_epsilon", "dropout_rate"),
    ],
    "mobilenet_v3_small": ["width_mult", "num_classes", "dropout"],
    "convnext_tiny": [
        *("depths1", "depths2", "depths3", "depths4", "dims1", "dims2", "dims3", "dims4", "layer_scale"),
        *("stochastic_depth_prob", "num_classes"),
    ],
    "efficientnet_b0": [
        *("width_mult", "depth_mult", "stochastic_depth_prob", "dropout", "num_classes", "norm_eps"),
        "norm_momentum",
    ],
    "swin_t": [
        *("patch_size", "embed_dim", "depths1", "depths2", "depths3", "depths4", "num_heads1", "num_heads2"),
        *("num_heads3", "num_heads4", "window_size", "mlp_ratio", "dropout", "attention_dropout"),
        *("stochastic_depth_prob", "num_classes"),
    ],
    "densenet121": [
        *("growth_rate", "block_config1", "block_config2", "block_config3", "block_config4"),
        *("num_init_features", "bn_size", "drop_rate", "num_classes"),
    ],
}


def test_every_entrys_configuration_is_listed_in_the_docs() -> None:
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "weights.md").read_text(encoding="utf-8")
    assert list(CONFIGURATION) == hndl.zoo.names()
    for name, params in CONFIGURATION.items():
        assert list(hndl.zoo.get(name).params) == params
        (row,) = [line for line in docs.splitlines() if line.startswith(f"| `{name}` |")]
        assert row.split("|")[4].strip() == ", ".join(f"`{p}`" for p in params), name


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("resnet18", dict(layers1=1, layers4=3, width=8)),
        ("resnet50", dict(layers2=1, groups=2, width_per_group=16)),
        ("vit_b_16", dict(image_size=32, patch_size=8, hidden_dim=48, num_heads=4, depth=1)),
        ("vit_tiny_patch16_224", dict(image_size=48, hidden_dim=24, depth=1)),
        ("gpt2", dict(n_layer=1, n_embd=32, n_head=2)),
        ("unet", dict(width=4, in_channels=2)),
        ("lstm_classifier", dict(num_layers=3, hidden_size=8)),
        ("seq2seq_transformer", dict(d_model=32, nhead=2)),
        ("llama", dict(num_key_value_heads=4, rope_scaling={"rope_type": "linear", "factor": 2.0})),
        ("mistral", dict(sliding_window=None, num_hidden_layers=1)),
        ("bert", dict(num_hidden_layers=1, intermediate_size=32)),
        ("whisper_encoder", dict(max_source_positions=8, encoder_layers=1)),
        ("t5_encoder", dict(d_kv=8, num_heads=2)),
        ("mobilenet_v3_small", dict(width_mult=0.5, num_classes=10)),
        ("convnext_tiny", dict(depths3=2, dims1=16, dims2=32, dims3=64, dims4=128)),
        ("efficientnet_b0", dict(width_mult=0.5, depth_mult=0.5)),
        ("swin_t", dict(embed_dim=24, num_heads1=1, num_heads2=2, num_heads3=3, num_heads4=4, window_size=4)),
        ("densenet121", dict(growth_rate=8, block_config3=4, num_init_features=16)),
    ],
)
def test_a_configured_entry_round_trips_through_dumps(name: str, overrides: dict[str, int]) -> None:
    graph = hndl.zoo.get(name, **overrides)
    text = hndl.dumps(graph)
    assert hndl.dumps(hndl.loads(text)) == text
    with torch.device("meta"):
        ours = {k: tuple(v.shape) for k, v in hndl.build(graph).state_dict().items()}
        again = {k: tuple(v.shape) for k, v in hndl.build(hndl.loads(text)).state_dict().items()}
    assert again == ours
