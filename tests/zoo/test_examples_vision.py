"""The vision example specs against the models they are written from, with the same weights: torchvision's
``regnet_y_400mf``, ``efficientnet_v2_s`` and ``maxvit_t``, and timm's ``efficientformerv2_s0``.

Each reference is built with random weights (every parameter and every batch norm's running statistics
perturbed, so that a layer that starts as the identity, a batch norm at ones and zeros, still tells a wrong
wiring apart), its ``state_dict`` is loaded into the spec's model with :func:`hndl.load_state_dict` and rules
from the reference's keys, and the outputs are compared with ``torch.equal`` in eval mode at two image sizes and
batch sizes, on small configurations so that the file stays fast. The parameter counts are compared at the
published size. Run in the reference session (``nox -s reference``); each test skips where its library does not
import.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from parity import require

import hndl
from hndl.weights import rule

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _perturb(module: torch.nn.Module, seed: int) -> None:
    """Every parameter and every batch norm's running statistics moved off their initial values."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.1)
        for m in module.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.add_(torch.randn(m.running_mean.shape, generator=generator) * 0.1)
                m.running_var.mul_(torch.rand(m.running_var.shape, generator=generator) + 0.5)


def _image(batch: int, size: tuple[int, int], seed: int = 3) -> torch.Tensor:
    return torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(seed))


def _equal_in_eval(spec: str, params: dict, reference: torch.nn.Module, rules: list, image: torch.Tensor) -> None:
    """Load the reference's weights into the spec's model and compare the two in eval mode."""
    reference.eval()
    _perturb(reference, seed=1)
    model = hndl.build(hndl.load(EXAMPLES / spec, params=params)).eval()
    hndl.load_state_dict(model, reference.state_dict(), rules)
    with torch.no_grad():
        expected = reference(image)
        actual = model(image)
    assert actual.shape == expected.shape
    assert torch.equal(actual, expected)


def _checks_without_warnings(spec: str) -> None:
    graph = hndl.load(EXAMPLES / spec)
    assert hndl.check(graph).warnings == []
    for sub in (graph, *graph.graphs.values()):
        assert all(node.op != "module" for node in sub.nodes.values()), sub.name


def _summary_runs(spec: str, capsys: pytest.CaptureFixture[str], count: int, *dims: str) -> None:
    from hndl.cli import main

    assert main(["summary", str(EXAMPLES / spec), *dims]) == 0
    out = capsys.readouterr().out
    assert f"{count:,}" in out


# --- RegNetY: torchvision's regnet_y_400mf ----------------------------------------------------------------------


def regnet_rules() -> list:
    """torchvision's keys: ``trunk_output.block{s}.block{s}-{b}`` is block ``b`` of the spec's ``stage{s}``."""
    rules = [
        rule("stem.0.{t}", "nodes.n_stem.n_conv.{t}"),
        rule("stem.1.{t}", "nodes.n_stem.n_bn.{t}"),
        rule("fc.{t}", "nodes.n_fc.{t}"),
    ]
    for s in range(1, 5):
        block = f"trunk_output.block{s}.block{s}-{{b}}"
        rules += [
            rule(f"{block}.proj.0.{{t}}", f"nodes.n_stage{s}.{{b}}.n_proj.n_conv.{{t}}"),
            rule(f"{block}.proj.1.{{t}}", f"nodes.n_stage{s}.{{b}}.n_proj.n_bn.{{t}}"),
            rule(f"{block}.f.se.{{fc}}.{{t}}", f"nodes.n_stage{s}.{{b}}.n_se.n_{{fc}}.{{t}}"),
            rule(f"{block}.f.{{layer}}.0.{{t}}", f"nodes.n_stage{s}.{{b}}.n_{{layer}}.n_conv.{{t}}"),
            rule(f"{block}.f.{{layer}}.1.{{t}}", f"nodes.n_stage{s}.{{b}}.n_{{layer}}.n_bn.{{t}}"),
        ]
    return rules


#: A RegNetY narrower and shallower than 400MF (torchvision's BlockParams written out), and the spec's parameters.
REGNET_SMALL = dict(
    depths1=1,
    depths2=2,
    depths3=2,
    depths4=1,
    widths1=16,
    widths2=32,
    widths3=48,
    widths4=64,
    group_width=8,
    se_ratio=0.25,
    stem_width=16,
    num_classes=10,
)


def _small_regnet():
    models = require("torchvision").models
    params = models.regnet.BlockParams(
        depths=[1, 2, 2, 1],
        widths=[16, 32, 48, 64],
        group_widths=[8] * 4,
        bottleneck_multipliers=[1.0] * 4,
        strides=[2] * 4,
        se_ratio=0.25,
    )
    return models.RegNet(params, num_classes=10, stem_width=16, norm_layer=torch.nn.BatchNorm2d)


@pytest.mark.parametrize(("batch", "size"), [(2, (64, 64)), (3, (45, 71))], ids=["2x64x64", "3x45x71"])
def test_regnety_example_equals_torchvision(batch, size):
    torch.manual_seed(0)
    _equal_in_eval("regnety.yaml", REGNET_SMALL, _small_regnet(), regnet_rules(), _image(batch, size))


def test_regnety_example_equals_torchvisions_regnet_y_400mf_at_a_small_image():
    models = require("torchvision").models
    torch.manual_seed(0)
    _equal_in_eval(
        "regnety.yaml", {"num_classes": 10}, models.regnet_y_400mf(num_classes=10), regnet_rules(), _image(1, (33, 40))
    )


def test_regnety_example_has_regnet_y_400mfs_parameter_count_and_800mfs_with_its_params():
    models = require("torchvision").models
    # (torchvision computes the stage table with tensors: these build on the CPU, not on the meta device)
    assert _count(hndl.build(hndl.load(EXAMPLES / "regnety.yaml"))) == _count(models.regnet_y_400mf()) == 4_344_144
    y800 = dict(
        depths1=1, depths2=3, depths3=8, depths4=2, widths1=64, widths2=144, widths3=320, widths4=784, group_width=16
    )
    assert _count(hndl.build(hndl.load(EXAMPLES / "regnety.yaml", params=y800))) == _count(models.regnet_y_800mf())


def test_regnety_example_runs_on_a_one_pixel_image():
    model = hndl.build(hndl.load(EXAMPLES / "regnety.yaml", params=REGNET_SMALL)).eval()
    assert model(torch.randn(1, 3, 1, 1)).shape == (1, 10)


def test_regnety_example_checks_without_warnings_and_summarises(capsys):
    _checks_without_warnings("regnety.yaml")
    _summary_runs("regnety.yaml", capsys, 4_344_144, "--dims", "B=1,H=224,W=224")


# --- EfficientNetV2: torchvision's efficientnet_v2_s -------------------------------------------------------------


def efficientnet_v2_rules(fused: dict[int, bool], stages: int = 6) -> list:
    """torchvision's keys: ``features.{s}`` is stage ``s`` (``fused[s]``: a fused stage, and whether it projects),
    ``features.0`` the stem, the feature after the last stage the 1x1 convolution, ``classifier.1`` the linear."""
    rules = [
        rule("features.0.0.{t}", "nodes.n_stem.n_conv.{t}"),
        rule("features.0.1.{t}", "nodes.n_stem.n_bn.{t}"),
        rule(f"features.{stages + 1}.0.{{t}}", "nodes.n_last.n_conv.{t}"),
        rule(f"features.{stages + 1}.1.{{t}}", "nodes.n_last.n_bn.{t}"),
        rule("classifier.1.{t}", "nodes.n_fc.{t}"),
    ]
    for s in range(1, stages + 1):
        if s in fused:
            names = ["fused", "project"] if fused[s] else ["fused"]
        else:
            names = ["expand", "depthwise", None, "project"]
        for i, name in enumerate(names):
            if name is None:
                rules.append(
                    rule(f"features.{s}.{{b}}.block.{i}.{{fc}}.{{t}}", f"nodes.n_stage{s}.{{b}}.n_se.n_{{fc}}.{{t}}")
                )
                continue
            for j, layer in enumerate(["conv", "bn"]):
                rules.append(
                    rule(f"features.{s}.{{b}}.block.{i}.{j}.{{t}}", f"nodes.n_stage{s}.{{b}}.n_{name}.n_{layer}.{{t}}")
                )
    return rules


#: A narrower, shallower table than V2-S's: (fused, expand_ratio, kernel, stride, in, out, blocks) per stage.
EFFNET_V2_SMALL_TABLE = [
    (True, 1, 3, 1, 16, 16, 1),
    (True, 4, 3, 2, 16, 24, 2),
    (True, 4, 3, 2, 24, 32, 1),
    (False, 4, 3, 2, 32, 48, 2),
    (False, 6, 3, 1, 48, 56, 1),
    (False, 6, 5, 2, 56, 64, 2),
]


def _small_efficientnet_v2():
    from functools import partial

    effnet = require("torchvision").models.efficientnet
    table = [
        (effnet.FusedMBConvConfig if fused else effnet.MBConvConfig)(*row) for fused, *row in EFFNET_V2_SMALL_TABLE
    ]
    reference = effnet.EfficientNet(
        table, dropout=0.2, last_channel=128, num_classes=10, norm_layer=partial(torch.nn.BatchNorm2d, eps=1e-3)
    )
    params = dict(stem_channels=16, last_channels=128, num_classes=10)
    for s, (_, expand, kernel, stride, _, out, blocks) in enumerate(EFFNET_V2_SMALL_TABLE, start=1):
        params.update(
            {
                f"expand{s}": expand,
                f"kernel{s}": kernel,
                f"stride{s}": stride,
                f"channels{s}": out,
                f"depths{s}": blocks,
            }
        )
        if s <= 3:
            params[f"project{s}"] = expand != 1
    return reference, params


@pytest.mark.parametrize(("batch", "size"), [(2, (64, 64)), (3, (37, 50))], ids=["2x64x64", "3x37x50"])
def test_efficientnet_v2_example_equals_torchvision(batch, size):
    torch.manual_seed(0)
    reference, params = _small_efficientnet_v2()
    rules = efficientnet_v2_rules({1: False, 2: True, 3: True})
    _equal_in_eval("efficientnet_v2.yaml", params, reference, rules, _image(batch, size))


def test_efficientnet_v2_example_equals_torchvisions_efficientnet_v2_s_at_a_small_image():
    models = require("torchvision").models
    torch.manual_seed(0)
    rules = efficientnet_v2_rules({1: False, 2: True, 3: True})
    _equal_in_eval(
        "efficientnet_v2.yaml",
        {"num_classes": 10},
        models.efficientnet_v2_s(num_classes=10),
        rules,
        _image(1, (32, 24)),
    )


def test_efficientnet_v2_example_has_efficientnet_v2_ss_parameter_count_and_v2_ms_with_its_table():
    models = require("torchvision").models
    with torch.device("meta"):
        assert (
            _count(hndl.build(hndl.load(EXAMPLES / "efficientnet_v2.yaml")))
            == _count(models.efficientnet_v2_s())
            == 21_458_488
        )
        v2_m = dict(seventh_stage=True, dropout=0.3)
        for s, (depth, width) in enumerate(zip([3, 5, 5, 7, 14, 18, 5], [24, 48, 80, 160, 176, 304, 512]), start=1):
            v2_m.update({f"depths{s}": depth, f"channels{s}": width})
        assert _count(hndl.build(hndl.load(EXAMPLES / "efficientnet_v2.yaml", params=v2_m))) == _count(
            models.efficientnet_v2_m()
        )


def test_efficientnet_v2_example_drops_paths_at_torchvisions_rates():
    models = require("torchvision").models
    with torch.device("meta"):
        reference = models.efficientnet_v2_s()
        model = hndl.build(hndl.load(EXAMPLES / "efficientnet_v2.yaml"))
    expected = [
        block.stochastic_depth.p for stage in reference.features[1:7] for block in stage if block.use_res_connect
    ]
    rates = [
        block.n_stochastic_depth.p
        for s in range(1, 7)
        for block in getattr(model.nodes, f"n_stage{s}")
        if hasattr(block, "n_stochastic_depth")
    ]
    assert rates == pytest.approx(expected)
    assert len(rates) == 40 - 5


def test_efficientnet_v2_example_checks_without_warnings_and_summarises(capsys):
    _checks_without_warnings("efficientnet_v2.yaml")
    _summary_runs("efficientnet_v2.yaml", capsys, 21_458_488, "--dims", "B=1,H=384,W=384")


# --- MaxViT: torchvision's maxvit_t ------------------------------------------------------------------------------


def maxvit_rules() -> list:
    """torchvision's keys: ``blocks.{s}.layers.{l}`` is layer ``l`` of the spec's ``stage{s+1}``."""
    layer = "blocks.{s}.layers.{l}.layers"
    block = "nodes.n_stage{s}.{l}"
    rules = [
        rule("stem.0.0.{t}", "nodes.n_stem_conv1.{t}"),
        rule("stem.0.1.{t}", "nodes.n_stem_bn.{t}"),
        rule("stem.1.0.{t}", "nodes.n_stem_conv2.{t}"),
        rule("classifier.2.{t}", "nodes.n_head_norm.{t}"),
        rule("classifier.3.{t}", "nodes.n_head_fc.{t}"),
        rule("classifier.5.{t}", "nodes.n_head_out.{t}"),
    ]
    for s in range(4):
        mb, spec = layer.replace("{s}", str(s)) + ".MBconv", block.replace("{s}", str(s + 1)) + ".n_mbconv"
        rules += [
            rule(f"{mb}.proj.1.{{t}}", f"{spec}.n_proj_conv.{{t}}"),
            rule(f"{mb}.layers.pre_norm.{{t}}", f"{spec}.n_pre_norm.{{t}}"),
            rule(f"{mb}.layers.conv_{{x}}.0.{{t}}", f"{spec}.n_conv_{{x}}.{{t}}"),
            rule(f"{mb}.layers.conv_{{x}}.1.{{t}}", f"{spec}.n_bn_{{x}}.{{t}}"),
            rule(f"{mb}.layers.conv_c.{{t}}", f"{spec}.n_conv_c.{{t}}"),
            rule(f"{mb}.layers.squeeze_excitation.{{fc}}.{{t}}", f"{spec}.n_se.n_{{fc}}.{{t}}"),
        ]
        for kind in ("window", "grid"):
            src = layer.replace("{s}", str(s)) + f".{kind}_attention"
            dst = block.replace("{s}", str(s + 1)) + f".n_{kind}_attention.n_block"
            rules += [
                rule(f"{src}.attn_layer.0.{{t}}", f"{dst}.n_attn_norm.{{t}}"),
                rule(
                    f"{src}.attn_layer.1.relative_position_bias_table", f"{dst}.n_relative_position_bias_table.weight"
                ),
                rule(f"{src}.attn_layer.1.relative_position_index", f"{dst}.n_relative_position_index.value"),
                rule(f"{src}.attn_layer.1.{{proj}}.{{t}}", f"{dst}.n_{{proj}}.{{t}}"),
                rule(f"{src}.mlp_layer.0.{{t}}", f"{dst}.n_mlp_norm.{{t}}"),
                rule(f"{src}.mlp_layer.1.{{t}}", f"{dst}.n_mlp_fc1.{{t}}"),
                rule(f"{src}.mlp_layer.3.{{t}}", f"{dst}.n_mlp_fc2.{{t}}"),
            ]
    return rules


#: A MaxViT narrower and shallower than maxvit_t, with partitions of 2 x 2 (images of a multiple of 64), and the
#: spec's parameters that say the same.
MAXVIT_SMALL = dict(
    stem_channels=16,
    partition_size=2,
    block_channels=[16, 32, 32, 64],
    block_layers=[1, 2, 1, 1],
    head_dim=8,
    stochastic_depth_prob=0.2,
    num_classes=10,
)
MAXVIT_SMALL_PARAMS = dict(
    stem_channels=16,
    partition_size=2,
    channels1=16,
    channels2=32,
    channels3=32,
    channels4=64,
    depths1=1,
    depths2=2,
    depths3=1,
    depths4=1,
    head_dim=8,
    num_classes=10,
)


@pytest.mark.parametrize(("batch", "side"), [(2, 64), (1, 128)], ids=["2x64x64", "1x128x128"])
def test_maxvit_example_equals_torchvision(batch, side):
    models = require("torchvision").models
    torch.manual_seed(0)
    reference = models.MaxVit(input_size=(side, side), **MAXVIT_SMALL)
    _equal_in_eval("maxvit.yaml", MAXVIT_SMALL_PARAMS, reference, maxvit_rules(), _image(batch, (side, side)))


def test_maxvit_example_computes_torchvisions_relative_position_index():
    # The index is a persistent buffer in both: the spec's own, before loading, equals torchvision's.
    models = require("torchvision").models
    reference = models.MaxVit(input_size=(64, 64), **MAXVIT_SMALL)
    built = hndl.build(hndl.load(EXAMPLES / "maxvit.yaml", params=MAXVIT_SMALL_PARAMS))
    loaded = hndl.build(hndl.load(EXAMPLES / "maxvit.yaml", params=MAXVIT_SMALL_PARAMS))
    hndl.load_state_dict(loaded, reference.state_dict(), maxvit_rules())
    indexes = [k for k in built.state_dict() if k.endswith("relative_position_index.value")]
    assert len(indexes) == 2 * 5
    for key in indexes:
        assert torch.equal(built.state_dict()[key], loaded.state_dict()[key]), key


def test_maxvit_example_runs_on_an_image_wider_than_high_and_refuses_a_size_off_the_partitions():
    model = hndl.build(hndl.load(EXAMPLES / "maxvit.yaml", params=MAXVIT_SMALL_PARAMS)).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 64, 128)).shape == (1, 10)
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(1, 3, 64, 96))
    assert info.value.problems[0].code == "E_INPUT"
    assert "64" in str(info.value)


def test_maxvit_example_has_maxvit_ts_parameter_count():
    models = require("torchvision").models
    with torch.device("meta"):
        reference = models.maxvit_t()
        model = hndl.build(hndl.load(EXAMPLES / "maxvit.yaml"))
    assert _count(model) == _count(reference) == 30_919_624


def test_maxvit_example_drops_paths_at_torchvisions_rates():
    models = require("torchvision").models
    with torch.device("meta"):
        reference = models.maxvit_t()  # stochastic_depth_prob 0.2, as the spec's default
        model = hndl.build(hndl.load(EXAMPLES / "maxvit.yaml"))
    expected = [layer.layers.window_attention.stochastic_dropout.p for b in reference.blocks for layer in b.layers]
    rates = [
        layer.n_window_attention.n_block.n_drop_path1.p
        for s in range(1, 5)
        for layer in getattr(model.nodes, f"n_stage{s}")
    ]
    assert rates == pytest.approx(expected)
    assert len(rates) == 11


def test_maxvit_example_checks_without_warnings_and_summarises(capsys):
    _checks_without_warnings("maxvit.yaml")
    _summary_runs("maxvit.yaml", capsys, 30_919_624, "--dims", "B=1,h=1,w=1")


# --- EfficientFormerV2: timm's efficientformerv2_s0 ---------------------------------------------------------------


def efficientformer_rules() -> list:
    """timm's keys: ``stages.{i}`` is the spec's ``stage{i+1}`` and ``downsample{i+1}``; a ConvNorm's ``conv`` and
    ``bn`` keep their names; a layer scale's ``gamma`` and an attention's ``attention_biases`` are parameters."""
    rules = [
        rule("stem.{conv}.{layer}.{t}", "nodes.n_stem_{conv}.n_{layer}.{t}"),
        rule("norm.{t}", "nodes.n_norm.{t}"),
        rule("head.{t}", "nodes.n_head.{t}"),
        rule("head_dist.{t}", "nodes.n_head_dist.{t}"),
    ]
    for i in range(4):
        down, stage = f"stages.{i}.downsample", f"stages.{i}.blocks.{{b}}"
        spec_down, spec_block = f"nodes.n_downsample{i + 1}", f"nodes.n_stage{i + 1}.{{b}}"
        rules += [
            rule(f"{down}.conv.{{layer}}.{{t}}", f"{spec_down}.n_conv.n_{{layer}}.{{t}}"),
            rule(f"{down}.attn.attention_biases", f"{spec_down}.n_attn.n_attention_biases.weight"),
            rule(f"{down}.attn.q.local.{{t}}", f"{spec_down}.n_attn.n_q.n_local.{{t}}"),
            rule(f"{down}.attn.q.proj.{{layer}}.{{t}}", f"{spec_down}.n_attn.n_q.n_proj.n_{{layer}}.{{t}}"),
            rule(f"{down}.attn.{{x}}.{{layer}}.{{t}}", f"{spec_down}.n_attn.n_{{x}}.n_{{layer}}.{{t}}"),
            rule(f"{stage}.token_mixer.attention_biases", f"{spec_block}.n_token_mixer.n_attention_biases.weight"),
            rule(
                f"{stage}.token_mixer.talking_head{{n}}.{{t}}", f"{spec_block}.n_token_mixer.n_talking_head{{n}}.{{t}}"
            ),
            rule(f"{stage}.token_mixer.{{x}}.{{layer}}.{{t}}", f"{spec_block}.n_token_mixer.n_{{x}}.n_{{layer}}.{{t}}"),
            rule(f"{stage}.ls{{n}}.gamma", f"{spec_block}.n_ls{{n}}.weight"),
            rule(f"{stage}.mlp.{{fc}}.{{layer}}.{{t}}", f"{spec_block}.n_mlp.n_{{fc}}.n_{{layer}}.{{t}}"),
        ]
    return rules


#: Narrower than S0 (timm's keyword arguments, and the spec's parameters that say the same).
EFFICIENTFORMER_NARROW = dict(embed_dims=(16, 24, 32, 48), num_classes=10)
EFFICIENTFORMER_NARROW_PARAMS = dict(widths1=16, widths2=24, widths3=32, widths4=48, num_classes=10)


@pytest.mark.parametrize(("batch", "img_size"), [(2, 96), (1, 160)])
def test_efficientformer_example_equals_timm(batch, img_size):
    timm = require("timm")
    torch.manual_seed(0)
    reference = timm.create_model("efficientformerv2_s0", img_size=img_size, **EFFICIENTFORMER_NARROW)
    params = dict(EFFICIENTFORMER_NARROW_PARAMS, img_size=img_size)
    image = _image(batch, (img_size, img_size))
    _equal_in_eval("efficientformer.yaml", params, reference, efficientformer_rules(), image)


def test_efficientformer_example_has_efficientformerv2_s0s_parameter_count():
    timm = require("timm")
    reference = timm.create_model("efficientformerv2_s0")
    model = hndl.build(hndl.load(EXAMPLES / "efficientformer.yaml"))
    assert _count(model) == _count(reference) == 3_600_256


def test_efficientformer_example_computes_timms_attention_bias_indexes():
    # timm's attention_bias_idxs are non-persistent buffers: compared here, not loaded.
    timm = require("timm")
    reference = timm.create_model("efficientformerv2_s0", img_size=96, **EFFICIENTFORMER_NARROW)
    model = hndl.build(
        hndl.load(EXAMPLES / "efficientformer.yaml", params=dict(EFFICIENTFORMER_NARROW_PARAMS, img_size=96))
    )
    theirs = [m.attention_bias_idxs for m in reference.modules() if hasattr(m, "attention_bias_idxs")]
    ours = [m.n_bias_index() for m in model.modules() if hasattr(m, "n_bias_index")]
    assert len(ours) == len(theirs) == 5
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_efficientformer_example_drops_paths_at_timms_rates():
    # timm's schedule: a float32 linspace from 0 to drop_path_rate over all 14 blocks (so to 1e-7).
    timm = require("timm")
    reference = timm.create_model("efficientformerv2_s0", drop_path_rate=0.1)
    expected = [
        b.drop_path2.drop_prob if hasattr(b.drop_path2, "drop_prob") else 0.0
        for s in reference.stages
        for b in s.blocks
    ]
    model = hndl.build(hndl.load(EXAMPLES / "efficientformer.yaml", params={"drop_path_rate": 0.1}))
    rates = [block.n_drop_path2.p for i in range(1, 5) for block in getattr(model.nodes, f"n_stage{i}")]
    assert rates == pytest.approx(expected, abs=1e-7)
    assert len(rates) == 14


def test_efficientformer_example_refuses_another_image_size():
    model = hndl.build(
        hndl.load(EXAMPLES / "efficientformer.yaml", params=dict(EFFICIENTFORMER_NARROW_PARAMS, img_size=96))
    )
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(1, 3, 128, 128))
    assert info.value.problems[0].code == "E_INPUT"
    assert "96" in str(info.value)


def test_efficientformer_example_checks_without_warnings_and_summarises(capsys):
    _checks_without_warnings("efficientformer.yaml")
    _summary_runs("efficientformer.yaml", capsys, 3_600_256, "--dims", "B=1")
