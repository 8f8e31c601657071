"""The entries whose reference is a library (torchvision, timm, transformers), each against it: count, outputs,
gradients (parity.py). The references do not import beside the default sessions' torch, so these run in
`nox -s reference` (torch 2.14.1 with torchvision 0.29.1, timm, transformers) and skip elsewhere. Every
reference is built from code with random weights: nothing is downloaded."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import check_count, check_gradients, check_outputs, require  # noqa: E402


def _seeded(make):
    torch.manual_seed(0)
    return make()


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_resnets_match_torchvision(name):
    models = require("torchvision.models")
    make = getattr(models, name)
    check_count(name, make())
    # exact: the same convolutions, batch norms and additions in the same order
    check_outputs(name, _seeded(make), [torch.randn(2, 3, 64, 64)], exact=True)
    check_gradients(name, _seeded(make), [torch.randn(2, 3, 64, 64)])


def test_resnet18_with_ten_classes_and_half_width_counts_like_torchvision():
    models = require("torchvision.models")
    check_count("resnet18", models.resnet18(num_classes=10), num_classes=10)
    check_outputs(
        "resnet18",
        _seeded(lambda: models.resnet18(num_classes=10)),
        [torch.randn(1, 3, 40, 56)],
        exact=True,
        num_classes=10,
    )


def test_vit_b_16_matches_torchvision():
    models = require("torchvision.models")
    check_count("vit_b_16", models.vit_b_16())
    image = torch.randn(2, 3, 224, 224)
    # allclose: torchvision's MultiheadAttention and hndl's SDPA-based attention may differ in the last bits
    check_outputs("vit_b_16", _seeded(models.vit_b_16), [image], exact=False)
    check_gradients("vit_b_16", _seeded(models.vit_b_16), [image])


def test_vit_b_16_at_other_depth_and_classes():
    models = require("torchvision.models")
    ref = models.VisionTransformer(224, 16, num_layers=2, num_heads=12, hidden_dim=768, mlp_dim=3072, num_classes=7)
    check_count("vit_b_16", ref, depth=2, num_classes=7)


def test_vit_tiny_matches_timm():
    timm = require("timm")
    make = lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False)  # noqa: E731
    check_count("vit_tiny_patch16_224", make())
    image = torch.randn(2, 3, 224, 224)
    check_outputs("vit_tiny_patch16_224", _seeded(make), [image], exact=False)
    check_gradients("vit_tiny_patch16_224", _seeded(make), [image])


def _gpt2(**config):
    transformers = require("transformers")
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**config))


def test_gpt2_matches_transformers():
    check_count("gpt2", _gpt2())
    tokens = torch.randint(0, 50257, (2, 16))
    logits = lambda out: out.logits  # noqa: E731
    # allclose: transformers' gelu_new and torch's tanh GELU are the same formula computed differently
    check_outputs("gpt2", _seeded(_gpt2), [tokens], exact=False, output=logits)
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    check_gradients("gpt2", _seeded(lambda: _gpt2(**no_dropout)), [tokens], output=logits, dropout=0.0)


def test_gpt2_with_a_small_configuration():
    config = dict(vocab_size=100, n_positions=32, n_embd=64, n_layer=2, n_head=4)
    check_count("gpt2", _gpt2(**config), **config)
    check_outputs(
        "gpt2",
        _seeded(lambda: _gpt2(**config)),
        [torch.randint(0, 100, (2, 8))],
        exact=False,
        output=lambda o: o.logits,
        **config,
    )
