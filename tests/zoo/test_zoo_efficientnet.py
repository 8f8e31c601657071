"""zoo:efficientnet_b0 against torchvision's efficientnet_b0 (count, multiply-adds, outputs, gradients with
stochastic depth drawing the same numbers, B1 and other configurations; parity.py). The references run in
`nox -s reference` (torchvision) and skip elsewhere; the spec's own checks run everywhere."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import check_count, check_gradients, check_outputs, require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

NAME = "efficientnet_b0"
PARAMETERS = 5_288_548
MACS_224 = 385_814_752


def _seeded(make):
    torch.manual_seed(0)
    return make()


def _by_hand(width_mult: float, depth_mult: float, **kwargs):
    """torchvision's EfficientNet from its table at ``width_mult`` and ``depth_mult``."""
    efficientnet = require("torchvision.models.efficientnet")
    setting, last_channel = efficientnet._efficientnet_conf(NAME, width_mult=width_mult, depth_mult=depth_mult)
    return efficientnet.EfficientNet(setting, last_channel=last_channel, **kwargs)


def test_the_count_is_torchvisions_and_the_entrys():
    models = require("torchvision.models")
    check_count(NAME, models.efficientnet_b0())
    assert hndl.zoo.entry(NAME).parameters == PARAMETERS


def test_the_summary_at_224_gives_the_entrys_count_and_the_multiply_adds():
    table = hndl.summary(hndl.zoo.get(NAME), B=1, H=224, W=224)
    assert (table.total_params, table.macs) == (hndl.zoo.entry(NAME).parameters, MACS_224)


def test_the_multiply_adds_at_224_round_to_torchvisions_published_cost():
    models = require("torchvision.models")
    published = models.EfficientNet_B0_Weights.IMAGENET1K_V1.meta["_ops"]  # GFLOPS, counted as multiply-adds
    assert round(MACS_224 / 1e9, 3) == published


def test_the_stochastic_depth_rates_are_torchvisions():
    models = require("torchvision.models")
    for config, make in [({}, models.efficientnet_b0), ({"depth_mult": 1.1}, models.efficientnet_b1)]:
        with torch.device("meta"):
            model = hndl.build(hndl.zoo.get(NAME, **config))
            reference = make()
        ours = [m.p for m in model.modules() if type(m).__name__ == "DropPath"]
        # torchvision gives every block a StochasticDepth; a block without the residual never calls it
        theirs = [b.stochastic_depth.p for stage in reference.features[1:8] for b in stage if b.use_res_connect]
        assert ours == theirs


def test_outputs_and_gradients_match_torchvision():
    models = require("torchvision.models")
    image = torch.randn(2, 3, 64, 64)
    # exact: the same convolutions, batch norms, activations, products and additions in the same order
    check_outputs(NAME, _seeded(models.efficientnet_b0), [image], exact=True)
    # train mode with stochastic depth (0.2) and dropout (0.2) on: one seed draws the same numbers on both sides
    check_gradients(NAME, _seeded(models.efficientnet_b0), [image], seed=0)


@pytest.mark.parametrize(("variant", "config"), [("efficientnet_b1", dict(depth_mult=1.1))])
def test_b1_counts_and_computes_like_torchvision(variant, config):
    models = require("torchvision.models")
    make = getattr(models, variant)
    check_count(NAME, make(), **config)
    check_outputs(NAME, _seeded(make), [torch.randn(2, 3, 64, 64)], exact=True, **config)


@pytest.mark.parametrize(
    ("variant", "config"),
    [
        ("efficientnet_b2", dict(width_mult=1.1, depth_mult=1.2, dropout=0.3)),
        ("efficientnet_b3", dict(width_mult=1.2, depth_mult=1.4, dropout=0.3)),
        ("efficientnet_b5", dict(width_mult=1.6, depth_mult=2.2, dropout=0.4, norm_eps=0.001, norm_momentum=0.01)),
    ],
)
def test_larger_variants_count_like_torchvision(variant, config):
    models = require("torchvision.models")
    with torch.device("meta"):
        reference = getattr(models, variant)()
    check_count(NAME, reference, **config)
    with torch.device("meta"):
        model = hndl.build(hndl.zoo.get(NAME, **config))
    bn = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    theirs = next(m for m in reference.modules() if isinstance(m, torch.nn.BatchNorm2d))
    assert (bn.eps, bn.momentum) == (theirs.eps, theirs.momentum)


def test_a_narrow_shallow_configuration_matches_torchvision_in_training():
    config = dict(width_mult=0.5, depth_mult=0.5, stochastic_depth_prob=0.5, dropout=0.1, num_classes=10)
    make = lambda: _by_hand(0.5, 0.5, dropout=0.1, stochastic_depth_prob=0.5, num_classes=10)  # noqa: E731
    check_count(NAME, make(), **config)
    image = torch.randn(4, 3, 48, 48)
    check_outputs(NAME, _seeded(make), [image], exact=True, **config)
    # At this seed stochastic depth drops whole rows (below), so the gradients agree only if both sides drew the
    # same rows: hndl's drop_path draws torchvision's numbers in torchvision's order.
    check_gradients(NAME, _seeded(make), [image], seed=0, **config)
    model = hndl.build(hndl.zoo.get(NAME, **config)).train()
    dropped = []
    for module in model.modules():
        if type(module).__name__ == "DropPath":
            module.register_forward_hook(lambda m, i, out: dropped.append(int((out == 0).flatten(1).all(1).sum())))
    torch.manual_seed(0)
    model(image)
    assert sum(dropped) > 0


def test_the_spec_uses_built_in_ops_only():
    graph = hndl.zoo.get(NAME)
    ops = {node.op for g in (graph, *graph.graphs.values()) for node in g.nodes.values()}
    assert "module" not in ops
    assert {"silu", "sigmoid", "drop_path", "conv2d", "batchnorm2d", "mul"} <= ops


def test_hndl_summary_prints_the_count_and_multiply_adds(capsys):
    from hndl.cli import main

    assert main(["summary", f"zoo:{NAME}", "--dims", "B=1,H=224,W=224"]) == 0
    out = capsys.readouterr().out
    assert f"{PARAMETERS:,}" in out
    assert f"{MACS_224:,}" in out
