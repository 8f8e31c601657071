"""zoo:mobilenet_v3_small against torchvision's mobilenet_v3_small (count, multiply-adds, outputs, gradients,
other widths; parity.py). The references run in `nox -s reference` (torchvision) and skip elsewhere; the spec's
own checks (built-in ops only, the summary's numbers) run everywhere."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import check_count, check_gradients, check_outputs, require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

NAME = "mobilenet_v3_small"
PARAMETERS = 2_542_856
MACS_224 = 56_510_400


def _seeded(make):
    torch.manual_seed(0)
    return make()


def _by_hand(width_mult: float, **kwargs):
    """torchvision's MobileNetV3 from its table at ``width_mult``, as mobilenet_v3_small() builds it."""
    mobilenetv3 = require("torchvision.models.mobilenetv3")
    setting, last_channel = mobilenetv3._mobilenet_v3_conf(NAME, width_mult=width_mult)
    return mobilenetv3.MobileNetV3(setting, last_channel, **kwargs)


def test_the_count_is_torchvisions_and_the_entrys():
    models = require("torchvision.models")
    check_count(NAME, models.mobilenet_v3_small())
    assert hndl.zoo.entry(NAME).parameters == PARAMETERS


def test_the_summary_at_224_gives_the_entrys_count_and_the_multiply_adds():
    table = hndl.summary(hndl.zoo.get(NAME), B=1, H=224, W=224)
    assert (table.total_params, table.macs) == (hndl.zoo.entry(NAME).parameters, MACS_224)


def test_the_multiply_adds_at_224_round_to_torchvisions_published_cost():
    models = require("torchvision.models")
    published = models.MobileNet_V3_Small_Weights.IMAGENET1K_V1.meta["_ops"]  # GFLOPS, counted as multiply-adds
    assert round(MACS_224 / 1e9, 3) == published


def test_outputs_and_gradients_match_torchvision():
    models = require("torchvision.models")
    image = torch.randn(2, 3, 64, 64)
    # exact: the same convolutions, batch norms, activations, products and additions in the same order
    check_outputs(NAME, _seeded(models.mobilenet_v3_small), [image], exact=True)
    # train mode with the classifier's dropout (0.2) on: the same seed draws the same mask on both sides
    check_gradients(NAME, _seeded(models.mobilenet_v3_small), [image], seed=0)


@pytest.mark.parametrize("width_mult", [0.75, 0.5, 1.25])
def test_other_widths_match_torchvision_built_from_its_table(width_mult):
    # At 0.5 the seventh block's widths (40 and 48 at 1.0) round to one and torchvision adds its input; at 0.75
    # and 1.25 they do not.
    config = dict(width_mult=width_mult, num_classes=10, dropout=0.3)
    reference = _by_hand(width_mult, num_classes=10, dropout=0.3)
    assert reference.features[7].use_res_connect == (width_mult == 0.5)
    check_count(NAME, reference, **config)
    make = lambda: _by_hand(width_mult, num_classes=10, dropout=0.3)  # noqa: E731
    check_outputs(NAME, _seeded(make), [torch.randn(2, 3, 48, 48)], exact=True, **config)


def test_gradients_at_the_width_whose_seventh_block_adds_its_input():
    config = dict(width_mult=0.5, num_classes=10)
    make = lambda: _by_hand(0.5, num_classes=10)  # noqa: E731
    check_gradients(NAME, _seeded(make), [torch.randn(2, 3, 48, 48)], seed=0, **config)


def test_the_spec_uses_built_in_ops_only():
    graph = hndl.zoo.get(NAME)
    ops = {node.op for g in (graph, *graph.graphs.values()) for node in g.nodes.values()}
    assert "module" not in ops
    assert {"hardswish", "hardsigmoid", "conv2d", "batchnorm2d", "mul"} <= ops


def test_hndl_summary_prints_the_count_and_multiply_adds(capsys):
    from hndl.cli import main

    assert main(["summary", f"zoo:{NAME}", "--dims", "B=1,H=224,W=224"]) == 0
    out = capsys.readouterr().out
    assert f"{PARAMETERS:,}" in out
    assert f"{MACS_224:,}" in out
