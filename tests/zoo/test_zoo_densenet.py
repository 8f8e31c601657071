"""zoo:densenet121 against torchvision's DenseNet: count, multiply-adds, outputs, gradients (parity.py), at the
defaults and at other configurations. torchvision imports only in `nox -s reference` (torch 2.14.1,
torchvision 0.29.1); the tests that need it skip elsewhere. References are built with random weights."""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")

from parity import check_count, check_gradients, check_outputs, require  # noqa: E402

import hndl  # noqa: E402
from hndl.cli import main  # noqa: E402


def _seeded(make):
    torch.manual_seed(0)
    return make()


def _config(block_config, **kwargs):
    return {**{f"block_config{i + 1}": n for i, n in enumerate(block_config)}, **kwargs}


def test_the_spec_uses_built_in_ops_only():
    graph = hndl.zoo.get("densenet121")
    ops = {n.op for g in (graph, *graph.graphs.values()) for n in g.nodes.values()}
    assert "module" not in ops
    assert {"concat", "batchnorm2d", "avgpool2d"} <= ops


def test_densenet121_counts_like_torchvision():
    models = require("torchvision.models")
    check_count("densenet121", models.densenet121())


def test_multiply_adds_at_224_round_to_torchvision_published_gflops():
    summary = hndl.summary(hndl.zoo.get("densenet121"), B=1, H=224, W=224)
    assert summary.macs == 2_834_161_664
    assert round(summary.macs / 1e9, 3) == 2.834
    models = require("torchvision.models")
    assert round(summary.macs / 1e9, 3) == models.DenseNet121_Weights.IMAGENET1K_V1.meta["_ops"]


@pytest.mark.parametrize(
    ("variant", "config"),
    [
        ("densenet169", _config([6, 12, 32, 32])),
        ("densenet201", _config([6, 12, 48, 32])),
        ("densenet161", _config([6, 12, 36, 24], growth_rate=48, num_init_features=96)),
    ],
)
def test_family_members_count_like_torchvision(variant, config):
    models = require("torchvision.models")
    check_count("densenet121", getattr(models, variant)(), **config)


def test_densenet121_matches_torchvision():
    models = require("torchvision.models")
    image = torch.randn(2, 3, 32, 32)
    reference = _seeded(models.densenet121)
    # exact: the same convolutions, batch norms, ReLUs and concatenations (per channel, so joining the feature
    # maps one layer at a time gives torchvision's joins of all of them)
    check_outputs("densenet121", reference, [image], exact=True)
    check_gradients("densenet121", reference, [image])


def test_other_configuration_with_dropout_matches_torchvision():
    models = require("torchvision.models")
    block_config = (2, 3, 1, 2)
    kwargs = dict(growth_rate=8, num_init_features=12, bn_size=2, drop_rate=0.3, num_classes=10)
    config = _config(block_config, **kwargs)
    make = lambda: models.DenseNet(block_config=block_config, **kwargs)  # noqa: E731
    check_count("densenet121", make(), **config)
    image = torch.randn(3, 3, 64, 48)
    check_outputs("densenet121", _seeded(make), [image], exact=True, **config)
    # dropout on every layer's new features: one seed, the same draws in the same order
    check_gradients("densenet121", _seeded(make), [image], seed=0, **config)


def _mapped(rules, key):
    return next(found.targets[0][0] for r in rules if (found := r.forward(key)) is not None)


def test_torchvision_keys_map_in_torchvision_order():
    """Every torchvision key names an hndl key (``denselayer1`` is repetition 0), one for one, in the order of
    the state_dicts."""
    models = require("torchvision.models")
    reference = models.densenet121()
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get("densenet121"))
    rules = hndl.zoo.entry("densenet121").rules
    assert [_mapped(rules, key) for key in reference.state_dict()] == list(model.state_dict())
    assert _mapped(rules, "features.denseblock3.denselayer1.conv1.weight") == "nodes.n_denseblock3.0.n_conv1.weight"


def test_a_missing_tensor_names_torchvision_s_key_counted_from_1():
    models = require("torchvision.models")
    config = _config([2, 1, 1, 1], growth_rate=4, num_init_features=8, bn_size=1)
    state = models.DenseNet(4, (2, 1, 1, 1), 8, 1).state_dict()
    del state["features.denseblock1.denselayer2.conv1.weight"]
    model = hndl.build(hndl.zoo.get("densenet121", **config))
    expected = re.escape("expected checkpoint key 'features.denseblock1.denselayer2.conv1.weight'")
    with pytest.raises(hndl.HndlError, match=expected):
        hndl.zoo.load_reference_state_dict(model, "densenet121", state)


def test_cli_summary_prints_the_parameter_count_and_multiply_adds(capsys):
    assert main(["summary", "zoo:densenet121", "--dims", "B=1,H=224,W=224"]) == 0
    out = capsys.readouterr().out
    assert "7,978,856" in out
    assert "2,834,161,664" in out
