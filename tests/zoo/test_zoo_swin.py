"""zoo:swin_t against torchvision's Swin Transformer: parameter counts (Swin-T, -S, -B), multiply-adds against the
published cost, eval outputs bit for bit and train-mode gradients with stochastic depth drawing the same random
numbers, at 224 and at 256 (a map that is no multiple of the window: every stage pads, and every stage shifts),
and one built model at several image sizes (H and W are symbols: padding, shifts and the shift mask follow the
input when the model runs), odd and one-window maps included. The torchvision parts run in `nox -s reference`
and skip elsewhere; nothing is downloaded."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import check_count, check_gradients, check_outputs, require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

#: A small Swin at the reference's structure: heads of 24, 24, 32 and 48 channels (the query scale is a float
#: (dim/heads)**-0.5 that no expression writes exactly), two blocks per stage, so every stage has a shifted block.
SMALL = {"embed_dim": 24, "depths": [2, 2, 2, 2], "num_heads": [1, 2, 3, 4], "stochastic_depth_prob": 0.5}


def _overrides(config: dict) -> dict:
    out = {"embed_dim": config["embed_dim"]}
    for stage in range(4):
        out[f"depths{stage + 1}"] = config["depths"][stage]
        out[f"num_heads{stage + 1}"] = config["num_heads"][stage]
    if "stochastic_depth_prob" in config:
        out["stochastic_depth_prob"] = config["stochastic_depth_prob"]
    return out


def _torchvision_swin(config: dict):
    swin = require("torchvision.models.swin_transformer")
    torch.manual_seed(0)
    return swin.SwinTransformer(patch_size=[4, 4], window_size=[7, 7], **config)


def test_swin_t_counts_like_torchvision():
    models = require("torchvision.models")
    with torch.device("meta"):
        reference = models.swin_t()
    check_count("swin_t", reference)
    assert hndl.zoo.entry("swin_t").parameters == models.Swin_T_Weights.IMAGENET1K_V1.meta["num_params"]


@pytest.mark.parametrize(
    ("variant", "config"),
    [
        ("swin_s", {"depths3": 18, "stochastic_depth_prob": 0.3}),
        ("swin_b", {"depths3": 18, "embed_dim": 128, "num_heads1": 4, "num_heads2": 8, "num_heads3": 16,
                    "num_heads4": 32, "stochastic_depth_prob": 0.5}),
    ],
)  # fmt: skip
def test_swin_s_and_swin_b_are_other_depths_and_widths(variant, config):
    models = require("torchvision.models")
    with torch.device("meta"):
        reference = getattr(models, variant)()
    check_count("swin_t", reference, **config)


def test_swin_t_multiply_adds_are_torchvisions_published_cost():
    # torchvision's _ops is FlopCounterMode's count / 2 in GMACs: convolution, linear layers, both attention
    # products; hndl's summary counts the same products.
    table = hndl.summary(hndl.zoo.get("swin_t"), B=1, H=224, W=224)
    assert table.trainable_params == 28_288_354
    assert table.macs == 4_490_566_656
    models = require("torchvision.models")
    assert round(table.macs / 1e9, 3) == models.Swin_T_Weights.IMAGENET1K_V1.meta["_ops"]


def test_swin_t_matches_torchvision_at_224():
    models = require("torchvision.models")
    torch.manual_seed(0)
    reference = models.swin_t()
    image = torch.randn(1, 3, 224, 224)
    # exact: the same products, additions (bias, then mask) and softmax in torchvision's order
    check_outputs("swin_t", reference, [image], exact=True)
    # train mode at stochastic depth 0.2: blocks 1..11 draw, in torchvision's order (bit for bit, in fact)
    check_gradients("swin_t", reference, [image], seed=0)


def test_a_small_swin_matches_torchvision_at_256():
    # Maps of 64, 32, 16, 8 are padded to 70, 35, 21, 14 (at 224 no map pads and the last, 7 x 7, does not
    # shift): every stage pads, and every stage's odd block shifts and masks.
    reference = _torchvision_swin(SMALL)
    overrides = _overrides(SMALL)
    check_count("swin_t", reference, **overrides)
    image = torch.randn(2, 3, 256, 256)
    check_outputs("swin_t", reference, [image], exact=True, **overrides)
    # train mode, stochastic depth 0.5 (blocks 1..7 of 8 draw): the same draws from the same seed
    check_gradients("swin_t", _torchvision_swin(SMALL), [image], seed=0, **overrides)


def test_a_small_swin_matches_torchvision_on_an_image_wider_than_high():
    # 256 x 160: rows of 64, 32, 16, 8 and columns of 40, 20, 10, 5, padded to 42, 21, 14, 7. The last stage's
    # columns are one window, so its odd blocks shift along the rows only (torchvision zeroes one axis's shift),
    # and the mask's regions come from the row bands alone.
    reference = _torchvision_swin(SMALL)
    overrides = _overrides(SMALL)
    image = torch.randn(2, 3, 256, 160)
    check_outputs("swin_t", reference, [image], exact=True, **overrides)
    check_gradients("swin_t", _torchvision_swin(SMALL), [image], seed=0, **overrides)


def test_a_small_swin_with_dropout_and_attention_dropout_draws_as_torchvisions():
    # at 224, after the stochastic depth of each branch: attention weights, projection, both MLP dropouts
    config = {**SMALL, "dropout": 0.1, "attention_dropout": 0.2}
    reference = _torchvision_swin(config)
    overrides = {**_overrides(config), "dropout": 0.1, "attention_dropout": 0.2}
    check_gradients("swin_t", reference, [torch.randn(2, 3, 224, 224)], seed=3, **overrides)


def test_the_spec_uses_built_in_ops_only():
    graph = hndl.zoo.get("swin_t")
    ops = {node.op for g in (graph, *graph.graphs.values()) for node in g.nodes.values()}
    assert "module" not in ops
    # The padding and the roll are gathers (index) by positions computed from the input's size (arange).
    assert {"index", "arange", "embedding", "buffer", "matmul", "softmax", "drop_path", "where"} <= ops


def test_one_built_swin_matches_torchvision_at_every_image_size():
    # H and W are symbols: one model, built once, at sizes whose maps pad or not, are odd (the mergings pad a
    # row or a column), are one window along an axis (its shift turned off when the model runs: 224 x 96's last
    # map is 7 x 3) or several, square or not; torchvision's model at each.
    reference = _torchvision_swin(SMALL).eval()
    model = hndl.build(hndl.zoo.get("swin_t", **_overrides(SMALL))).eval()
    hndl.zoo.load_reference_state_dict(model, "swin_t", reference.state_dict())
    for height, width in [(224, 224), (256, 160), (224, 96), (100, 132), (36, 68), (32, 32)]:
        image = torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(height + width))
        with torch.no_grad():
            ours, theirs = model(image), reference(image)
        assert ours.shape == theirs.shape == (2, 1000)
        assert torch.equal(ours, theirs), (height, width, (ours - theirs).abs().max())


def test_the_image_sizes_are_symbols_not_parameters():
    graph = hndl.zoo.get("swin_t")
    assert list(graph.inputs["image"].contract.shape.entries) == ["B", 3, "H", "W"]
    assert "H" not in graph.params
    assert "W" not in graph.params


def test_the_summary_command_prints_the_count_and_the_cost(capsys):
    from hndl.cli import main

    # H and W are symbols of the image's shape: --dims gives them as it gives B.
    assert main(["summary", "zoo:swin_t", "--dims", "B=1,H=224,W=224", "--depth", "1"]) == 0
    out = capsys.readouterr().out
    assert "params:      28,288,354 (trainable 28,288,354, non-trainable 0)" in out
    assert "MACs:        4,490,566,656 (4.49 G)" in out
    assert "inputs:  image [1, 3, 224, 224]" in out


def test_the_summary_command_builds_it_at_the_size_given(capsys):
    from hndl.cli import main

    assert main(["summary", "zoo:swin_t", "--dims", "B=1,H=256,W=320", "--depth", "1"]) == 0
    out = capsys.readouterr().out
    at_size = hndl.summary(hndl.zoo.get("swin_t"), B=1, H=256, W=320)
    assert at_size.macs > 4_490_566_656
    assert f"MACs:        {at_size.macs:,}" in out
    assert "[1, 1000]" in out


def test_a_built_swin_gives_a_summary_at_any_size():
    model = hndl.build(hndl.zoo.get("swin_t", **_overrides(SMALL)))
    small, large = model.summary(B=1, H=112, W=112), model.summary(B=1, H=224, W=112)
    assert small.trainable_params == large.trainable_params == sum(p.numel() for p in model.parameters())
    assert large.macs > small.macs


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_a_small_swin_in_another_dtype_matches_torchvision(dtype):
    # The query scale is a Python float and the mask's -100 a buffer, so both follow the model's dtype as
    # torchvision's (a float and x.new_zeros) do.
    reference = _torchvision_swin(SMALL).to(dtype).eval()
    model = hndl.build(hndl.zoo.get("swin_t", **_overrides(SMALL))).to(dtype).eval()
    hndl.zoo.load_reference_state_dict(model, "swin_t", reference.state_dict())
    image = torch.randn(1, 3, 256, 256, dtype=dtype)
    with torch.no_grad():
        ours, theirs = model(image), reference(image)
    assert ours.dtype == dtype
    assert torch.equal(ours, theirs), (ours - theirs).abs().max()


SCALED = """
hndl: 1
name: scaled
params: {d: 24}
inputs: {x: {shape: [B, 4]}}
nodes:
  y: {op: scale, in: x, factor: "$pow(d, -0.5)"}
outputs: [y]
"""


def test_an_expressions_pow_is_pythons_power_as_a_float():
    # What the query scale of swin_t needs: (dim // heads) ** -0.5 exactly as torchvision's Python computes it.
    for d in (24, 32, 96):
        x = torch.ones(2, 4)
        model = hndl.build(hndl.loads(SCALED.replace("d: 24", f"d: {d}")))
        assert torch.equal(model(x), x * d**-0.5)
    with pytest.raises(hndl.HndlError, match="E_PARAM"):
        hndl.check(hndl.loads(SCALED.replace('"$pow(d, -0.5)"', '"$pow(0 - d, 0.5)"')))
