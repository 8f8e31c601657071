"""The zoo's vision entries at an image size other than their published one, against their references there.

The convolutional entries take any height and width (symbols H and W): each is compared with its torchvision
reference, the same weights loaded, at a non-square size and a batch the other tests do not use. zoo:swin_t takes
any size too (its padding, shifts and shift mask follow the input when it runs: tests/zoo/test_zoo_swin.py runs one
built model at six sizes), and the ViT entries fix the size by their learned position embeddings: they refuse any
other with E_INPUT, as their references do. Run in ``nox -s reference``; the reference tests skip elsewhere.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import check_outputs, require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402


def _seeded(make):
    torch.manual_seed(0)
    return make()


def _convnext(models):
    cnf = models.convnext.CNBlockConfig
    dims = [16, 24, 32, 48]
    return models.ConvNeXt([cnf(dims[i], dims[i + 1] if i < 3 else None, 1) for i in range(4)], num_classes=10)


#: Each entry at a size no other test uses, not square, and not a multiple of the network's total stride (32)
#: where the architecture's rounding allows it (torchvision's layers floor, or for 3x3 stride-2 convolutions ceil,
#: each halving, and the spec's layers do the same); the larger entries in a smaller configuration, for speed.
#: name: (image size, the reference, the entry's parameters that say the same).
CNNS = {
    "resnet18": ((40, 72), lambda m: m.resnet18(), {}),
    "resnet50": (
        (56, 45),
        lambda m: m.ResNet(m.resnet.Bottleneck, [1, 1, 2, 1], num_classes=10),
        dict(layers1=1, layers2=1, layers3=2, layers4=1, num_classes=10),
    ),
    "mobilenet_v3_small": ((50, 70), lambda m: m.mobilenet_v3_small(), {}),
    "convnext_tiny": (
        (64, 96),
        _convnext,
        dict(depths1=1, depths2=1, depths3=1, depths4=1, dims1=16, dims2=24, dims3=32, dims4=48, num_classes=10),
    ),
    "efficientnet_b0": ((45, 61), lambda m: m.efficientnet_b0(), {}),
    "densenet121": (
        (72, 40),
        lambda m: m.DenseNet(block_config=(2, 1, 1, 1), growth_rate=4, num_init_features=8, bn_size=1),
        dict(
            block_config1=2,
            block_config2=1,
            block_config3=1,
            block_config4=1,
            growth_rate=4,
            num_init_features=8,
            bn_size=1,
        ),
    ),
}


@pytest.mark.parametrize("name", sorted(CNNS))
def test_a_convolutional_entry_equals_torchvision_at_another_size(name):
    models = require("torchvision.models")
    assert hndl.zoo.get(name).inputs["image"].contract.shape.entries == ("B", 3, "H", "W")
    size, make, config = CNNS[name]
    check_outputs(name, _seeded(lambda: make(models)), [torch.randn(3, 3, *size)], exact=True, **config)


@pytest.mark.parametrize("name", ["vit_b_16", "vit_tiny_patch16_224"])
def test_a_vit_entry_refuses_another_size_and_says_which(name):
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get(name, depth=1))
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(1, 3, 256, 256, device="meta"))
    assert info.value.problems[0].code == "E_INPUT"
    assert "224" in str(info.value)
    assert "256" in str(info.value)
