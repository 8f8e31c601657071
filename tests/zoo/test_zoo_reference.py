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


@pytest.mark.parametrize("layers", [[1, 1, 1, 1], [1, 2, 1, 3]])
def test_resnet18_at_other_stage_depths_matches_torchvision(layers):
    models = require("torchvision.models")
    config = dict(layers1=layers[0], layers2=layers[1], layers3=layers[2], layers4=layers[3], num_classes=10)
    make = lambda: models.ResNet(models.resnet.BasicBlock, layers, num_classes=10)  # noqa: E731
    check_count("resnet18", make(), **config)
    check_outputs("resnet18", _seeded(make), [torch.randn(2, 3, 64, 64)], exact=True, **config)
    check_gradients("resnet18", _seeded(make), [torch.randn(2, 3, 64, 64)], **config)


def test_resnet50_at_other_stage_depths_matches_torchvision():
    models = require("torchvision.models")
    config = dict(layers1=1, layers2=1, layers3=2, layers4=1, num_classes=10)
    make = lambda: models.ResNet(models.resnet.Bottleneck, [1, 1, 2, 1], num_classes=10)  # noqa: E731
    check_count("resnet50", make(), **config)
    check_outputs("resnet50", _seeded(make), [torch.randn(2, 3, 64, 64)], exact=True, **config)
    check_gradients("resnet50", _seeded(make), [torch.randn(2, 3, 64, 64)], **config)


@pytest.mark.parametrize(
    ("variant", "config"),
    [
        ("resnet34", dict(layers1=3, layers2=4, layers3=6, layers4=3)),
        ("resnet101", dict(layers3=23)),
        ("resnext50_32x4d", dict(groups=32, width_per_group=4)),
        ("wide_resnet50_2", dict(width_per_group=128)),
    ],
)
def test_resnet_family_members_count_like_torchvision(variant, config):
    models = require("torchvision.models")
    check_count("resnet18" if variant == "resnet34" else "resnet50", getattr(models, variant)(), **config)


def test_resnext_matches_torchvision():
    models = require("torchvision.models")
    config = dict(layers1=1, layers2=1, layers3=1, layers4=1, groups=4, width_per_group=8, num_classes=5)
    make = lambda: models.ResNet(  # noqa: E731
        models.resnet.Bottleneck, [1, 1, 1, 1], num_classes=5, groups=4, width_per_group=8
    )
    check_count("resnet50", make(), **config)
    check_outputs("resnet50", _seeded(make), [torch.randn(2, 3, 64, 64)], exact=True, **config)


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


@pytest.mark.parametrize(("image_size", "patch_size"), [(64, 16), (32, 8)])
def test_vit_b_16_at_other_image_patch_width_and_depth_matches_torchvision(image_size, patch_size):
    models = require("torchvision.models")
    config = dict(image_size=image_size, patch_size=patch_size, hidden_dim=192, depth=2, num_heads=3, mlp_dim=384)
    config["num_classes"] = 10
    make = lambda: models.VisionTransformer(  # noqa: E731
        image_size, patch_size, num_layers=2, num_heads=3, hidden_dim=192, mlp_dim=384, num_classes=10
    )
    check_count("vit_b_16", make(), **config)
    image = torch.randn(2, 3, image_size, image_size)
    check_outputs("vit_b_16", _seeded(make), [image], exact=False, **config)
    check_gradients("vit_b_16", _seeded(make), [image], **config)


def test_vit_tiny_matches_timm():
    timm = require("timm")
    make = lambda: timm.create_model("vit_tiny_patch16_224", pretrained=False)  # noqa: E731
    check_count("vit_tiny_patch16_224", make())
    image = torch.randn(2, 3, 224, 224)
    check_outputs("vit_tiny_patch16_224", _seeded(make), [image], exact=False)
    check_gradients("vit_tiny_patch16_224", _seeded(make), [image])


def test_vit_tiny_at_other_image_patch_width_and_depth_matches_timm():
    timm = require("timm")
    config = dict(image_size=64, patch_size=8, hidden_dim=96, depth=2, num_heads=3, mlp_dim=384, num_classes=10)
    make = lambda: timm.create_model(  # noqa: E731
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=64,
        patch_size=8,
        embed_dim=96,
        depth=2,
        num_heads=3,
        mlp_ratio=4.0,
        num_classes=10,
    )
    check_count("vit_tiny_patch16_224", make(), **config)
    image = torch.randn(2, 3, 64, 64)
    check_outputs("vit_tiny_patch16_224", _seeded(make), [image], exact=False, **config)
    check_gradients("vit_tiny_patch16_224", _seeded(make), [image], **config)


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


def test_gpt2_with_two_layers_of_width_128_and_the_full_vocabulary():
    config = dict(n_layer=2, n_embd=128, n_head=4)
    check_count("gpt2", _gpt2(**config), **config)
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    tokens = torch.randint(0, 50257, (2, 12))
    logits = lambda out: out.logits  # noqa: E731
    check_outputs("gpt2", _seeded(lambda: _gpt2(**config)), [tokens], exact=False, output=logits, **config)
    check_gradients(
        "gpt2", _seeded(lambda: _gpt2(**config, **no_dropout)), [tokens], output=logits, dropout=0.0, **config
    )


def test_regression_features_kept_by_forward_hooks_on_resnet18_equal_torchvision():
    """Feature extraction as users write it: forward hooks that keep each conv's and BatchNorm's output (no
    clone), then an inference under ``no_grad``. Before issue 20's fix hndl's residual add wrote into the kept
    output of every block's last BatchNorm (``layer1.0.bn2``: off by up to 2.38). torchvision's own blocks run
    ``out += identity`` and ``relu(inplace=True)`` on those same tensors, so its hooks clone to see the values
    the layers returned; hndl's hooks keep the tensors themselves and must see the same values."""
    models = require("torchvision.models")
    import hndl

    reference = _seeded(models.resnet18)
    from parity import randomise_batchnorm

    randomise_batchnorm(reference)
    model = hndl.build(hndl.zoo.get("resnet18"))
    hndl.zoo.load_reference_state_dict(model, "resnet18", reference.state_dict())
    model.eval()
    reference.eval()

    def reference_name(hndl_name: str) -> str:
        name = ".".join(part.removeprefix("n_") for part in hndl_name.split(".")[1:])
        return name.replace("downsample_conv", "downsample.0").replace("downsample_bn", "downsample.1")

    ours: dict[str, torch.Tensor] = {}
    theirs: dict[str, torch.Tensor] = {}
    layers = [(n, m) for n, m in model.named_modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.BatchNorm2d))]
    for name, module in layers:
        module.register_forward_hook(lambda m, a, o, name=name: ours.__setitem__(name, o))
        reference.get_submodule(reference_name(name)).register_forward_hook(
            lambda m, a, o, name=name: theirs.__setitem__(name, o.clone())
        )
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        model(x)  # the first call validates; the second takes the fast path
        out = model(x)
        expected = reference(x)
    assert torch.equal(out, expected)
    assert "nodes.n_layer1.0.n_bn2" in ours
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name
