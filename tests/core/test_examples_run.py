"""Every example spec in ``examples/`` checks, builds and runs on inputs made from its own input contracts.

``broken.yaml`` is the one example that is meant to fail (the quickstart shows its error).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import hndl
from hndl._dims import evaluate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RUNNABLE = sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != "broken.yaml")
#: Values for the symbols of the examples' inputs: small, and different from each other so that a mix-up of
#: two dims shows.
SIZES = {"B": 2, "T": 5, "S": 7, "H": 8, "W": 12, "h": 1, "w": 1}  # h, w: MaxViT, UNet tiles


def sizes(graph: hndl.Graph) -> dict[str, int]:
    """SIZES, raised to the minimum an input's ``ranges`` declare (ConvNeXt-V2's H and W are at least 32), and the
    integer graph parameters an input's shape names (DeiT's [B, in_chans, img_size, img_size])."""
    out = {**SIZES, **{k: v for k, v in graph.params.items() if type(v) is int}}
    for spec in graph.inputs.values():
        for r in spec.contract.ranges:
            if r.minimum is not None:
                out[r.symbol] = max(out.get(r.symbol, 0), r.minimum)
    return out


def contract_inputs(graph: hndl.Graph) -> list[torch.Tensor]:
    """One tensor per graph input, sized and typed by its contract (ids 0..1, masks with padding)."""
    out = []
    for spec in graph.inputs.values():
        shape = [evaluate(d, sizes(graph)) for d in spec.contract.shape.dims]
        dtype = spec.contract.dtype
        if dtype in ("int", "int64"):
            out.append(torch.randint(0, 2, shape))
        elif dtype == "bool":
            mask = torch.ones(shape, dtype=torch.bool)
            mask[0, ..., -1] = False  # the first sequence is padded at its end
            out.append(mask)
        else:
            out.append(torch.randn(shape))
    return out


def test_the_new_examples_are_here():
    names = {p.name for p in RUNNABLE}
    assert {"vit.yaml", "unet.yaml", "lstm_classifier.yaml", "encoder_decoder.yaml"} <= names
    assert {"qwen2.yaml", "gemma.yaml", "phi.yaml"} <= names  # issue 38's decoders (parity: tests/zoo)
    assert {"clip_text.yaml", "convnextv2.yaml"} <= names


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_example_builds_and_runs_on_inputs_from_its_contracts(path: Path):
    graph = hndl.load(path)
    checked = hndl.check(graph)
    torch.manual_seed(0)
    model = hndl.build(graph).eval()
    out = model(*contract_inputs(graph))
    outs = out if isinstance(out, tuple) else (out,)
    for t, y in zip(checked.output_types, outs):
        assert tuple(y.shape) == tuple(evaluate(d, sizes(graph)) for d in t.shape)
        assert torch.isfinite(y).all()
    assert model.validations == 1


def test_the_encoder_decoder_mask_hides_padding():
    graph = hndl.load(EXAMPLES / "encoder_decoder.yaml")
    torch.manual_seed(0)
    model = hndl.build(graph).eval()
    src, tgt, mask = contract_inputs(graph)
    changed = src.clone()
    changed[0, -1] = 1 - src[0, -1]  # a different token where the mask hides it
    assert torch.allclose(model(src, tgt, mask), model(changed, tgt, mask), atol=1e-6)
    changed[1, -1] = 1 - src[1, -1]  # and where it does not
    assert not torch.allclose(model(src, tgt, mask)[1], model(changed, tgt, mask)[1])


def test_gpt2_small_has_gpt2s_parameter_count_with_its_head_tied():
    with torch.device("meta"):
        model = hndl.build(hndl.load(EXAMPLES / "gpt2.yaml"))
    assert sum(p.numel() for p in model.parameters()) == 124_439_808
    assert model.nodes.n_lm_head.weight is model.nodes.n_wte.weight


def test_resnet18_has_torchvisions_parameter_count_and_layout():
    with torch.device("meta"):
        model = hndl.build(hndl.load(EXAMPLES / "resnet18.yaml"))
    assert sum(p.numel() for p in model.parameters()) == 11_689_512
    names = set(model.state_dict())
    assert "nodes.n_layer1.0.n_conv1.weight" in names
    assert "nodes.n_layer1.0.n_downsample.n_conv.weight" not in names  # stage 1 keeps its width: no shortcut conv
    assert "nodes.n_layer2.0.n_downsample.n_conv.weight" in names
    assert "nodes.n_layer2.1.n_downsample.n_conv.weight" not in names
    assert model.nodes.n_layer2[0].n_conv1.stride == (2, 2)
    assert model.nodes.n_layer2[1].n_conv1.stride == (1, 1)


def test_the_resnet_stem_on_symbolic_sizes_reads_as_one_division():
    checked = hndl.check(hndl.load(EXAMPLES / "resnet18.yaml"))
    layer4 = next(n for n in checked.nodes if n.name == "layer4")
    assert str(layer4.out_types[0]).startswith("[B, 512, (H-1)//32+1, (W-1)//32+1]")


def test_regression_a_resnet_block_without_padding_fails_check_naming_the_conv_and_the_add():
    # [B, 64, H-2, W-2] added to [B, 64, H, W]: they agree for no H (broadcast only at the isolated H = 3).
    text = (EXAMPLES / "resnet_basic_block.yaml").read_text()
    broken = text.replace(
        "in: relu1, out_channels: 64, kernel_size: 3, padding: 1", "in: relu1, out_channels: 64, kernel_size: 3"
    )
    assert broken != text
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(broken))
    (p,) = info.value.problems
    assert (p.code, p.node, p.op) == ("E_SHAPE", "skip", "add")
    assert "[B, 64, H-2, W-2]" in p.message
    assert p.message.endswith("(inputs from conv2d 'conv2' through 'bn2' and 'x')")
    assert p.hint == (
        "probable cause: conv2d 'conv2' has no padding, so its kernel of (3, 3) shrinks the size by 2; "
        "padding: 1 keeps it"
    )
    pinned = broken.replace("[B, 64, H, W]", "[B, 64, 32, 32]")
    with pytest.raises(hndl.HndlError, match="30 in 'bn2' and 32 in 'x'"):
        hndl.check(hndl.loads(pinned))
