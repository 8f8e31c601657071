"""zoo:convnext_tiny against torchvision's ConvNeXt: count, multiply-adds, outputs, gradients (parity.py), at the
defaults and at other block settings. torchvision imports only in `nox -s reference` (torch 2.14.1,
torchvision 0.29.1); the tests that need it skip elsewhere. References are built with random weights."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import check_count, check_gradients, check_outputs, require  # noqa: E402

import hndl  # noqa: E402
from hndl.cli import main  # noqa: E402


def _seeded(make):
    torch.manual_seed(0)
    return make()


def _convnext(models, depths, dims, **kwargs):
    cnf = models.convnext.CNBlockConfig
    setting = [cnf(dims[i], dims[i + 1] if i < 3 else None, depths[i]) for i in range(4)]
    return models.ConvNeXt(setting, **kwargs)


def _config(depths, dims, **kwargs):
    config = {f"depths{i + 1}": d for i, d in enumerate(depths)}
    config.update({f"dims{i + 1}": d for i, d in enumerate(dims)})
    return {**config, **kwargs}


def test_the_spec_uses_built_in_ops_only():
    graph = hndl.zoo.get("convnext_tiny")
    ops = {n.op for g in (graph, *graph.graphs.values()) for n in g.nodes.values()}
    assert "module" not in ops
    assert {"layernorm2d", "permute", "parameter", "drop_path", "gelu"} <= ops


def test_convnext_tiny_counts_like_torchvision():
    models = require("torchvision.models")
    check_count("convnext_tiny", models.convnext_tiny())


def test_multiply_adds_at_224_round_to_torchvision_published_gflops():
    summary = hndl.summary(hndl.zoo.get("convnext_tiny"), B=1, H=224, W=224)
    assert summary.macs == 4_455_531_264
    assert round(summary.macs / 1e9, 3) == 4.456
    models = require("torchvision.models")
    assert round(summary.macs / 1e9, 3) == models.ConvNeXt_Tiny_Weights.IMAGENET1K_V1.meta["_ops"]


@pytest.mark.parametrize(
    ("variant", "config"),
    [
        ("convnext_small", dict(depths3=27, stochastic_depth_prob=0.4)),
        ("convnext_base", dict(depths3=27, dims1=128, dims2=256, dims3=512, dims4=1024, stochastic_depth_prob=0.5)),
    ],
)
def test_family_members_count_like_torchvision(variant, config):
    models = require("torchvision.models")
    check_count("convnext_tiny", getattr(models, variant)(), **config)


def test_convnext_tiny_matches_torchvision():
    models = require("torchvision.models")
    image = torch.randn(2, 3, 32, 32)
    reference = _seeded(models.convnext_tiny)  # one reference for both checks: its weights take seconds to draw
    # exact: the same convolutions, permutes, norms, linears, GELU and products in torchvision's order
    check_outputs("convnext_tiny", reference, [image], exact=True)
    # train mode with convnext_tiny's stochastic depth (0.1 at the last block): one seed, the same draws
    check_gradients("convnext_tiny", reference, [image], seed=0)


@pytest.mark.parametrize("seed", [0, 3])
def test_other_block_settings_layer_scale_and_stochastic_depth_match_torchvision(seed):
    models = require("torchvision.models")
    depths, dims = [1, 2, 1, 2], [16, 24, 32, 48]
    kwargs = dict(stochastic_depth_prob=0.6, layer_scale=0.5, num_classes=10)
    config = _config(depths, dims, **kwargs)
    make = lambda: _convnext(models, depths, dims, **kwargs)  # noqa: E731
    check_count("convnext_tiny", make(), **config)
    image = torch.randn(4, 3, 64, 48)
    check_outputs("convnext_tiny", _seeded(make), [image], exact=True, **config)
    check_gradients("convnext_tiny", _seeded(make), [image], seed=seed, **config)


def test_stochastic_depth_schedule_is_torchvision_s():
    models = require("torchvision.models")
    depths, dims = [2, 1, 3, 2], [8, 8, 8, 8]
    ref = _convnext(models, depths, dims, stochastic_depth_prob=0.3)
    theirs = [m.p for m in ref.modules() if isinstance(m, models.convnext.StochasticDepth)]
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get("convnext_tiny", **_config(depths, dims, stochastic_depth_prob=0.3)))
    ours = [m.p for m in model.modules() if type(m).__name__ == "DropPath"]
    assert ours == theirs


def test_torchvision_keys_map_in_torchvision_order():
    """Every torchvision key names an hndl key, one for one, in the order of the state_dicts (a block's
    layer_scale before its layers, as torchvision registers it)."""
    models = require("torchvision.models")
    reference = _convnext(models, [1, 2, 1, 1], [8, 8, 16, 16])
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get("convnext_tiny", **_config([1, 2, 1, 1], [8, 8, 16, 16])))
    rules = hndl.zoo.entry("convnext_tiny").rules
    mapped = [
        next(f.targets[0][0] for r in rules if (f := r.forward(key)) is not None) for key in reference.state_dict()
    ]
    assert mapped == list(model.state_dict())


def test_cli_summary_prints_the_parameter_count_and_multiply_adds(capsys):
    assert main(["summary", "zoo:convnext_tiny", "--dims", "B=1,H=224,W=224"]) == 0
    out = capsys.readouterr().out
    assert "28,589,128" in out
    assert "4,455,531,264" in out
