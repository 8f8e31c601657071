"""The ops of issue 21 against the libraries they reproduce, and the tutorial's MobileNetV2 against
torchvision's. These references import only in `nox -s reference` (torch 2.14.1 with torchvision, transformers)
and skip elsewhere; tests/core/test_ops_vision.py holds the same ops to the published code written out."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from parity import require  # noqa: E402

import hndl  # noqa: E402

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"


def one_node(op: str, input_shape: tuple, **params: object) -> hndl.GraphModule:
    g = hndl.Graph(op)
    g.output(g.add(op, *([g.input("x", input_shape)] if input_shape else []), name="n", **params))
    return hndl.build(g)


@pytest.mark.parametrize("mode", ["row", "batch"])
def test_drop_path_is_torchvisions_stochastic_depth_bit_for_bit(mode):
    ops = require("torchvision.ops")
    model = one_node("drop_path", ("B", 8, 4, 4), p=0.3, mode=mode).train()
    reference = ops.StochasticDepth(0.3, mode).train()
    x = torch.randn(32, 8, 4, 4, requires_grad=True)
    torch.manual_seed(5)
    ours = model(x)
    torch.manual_seed(5)
    theirs = reference(x)
    assert torch.equal(ours, theirs)
    assert torch.equal(*(torch.autograd.grad(y.sum(), x)[0] for y in (ours, theirs)))
    assert model.eval()(x) is x


def test_layernorm2d_is_convnexts_and_loads_its_state_dict():
    convnext = require("torchvision.models.convnext")
    reference = convnext.LayerNorm2d(96, eps=1e-6)
    torch.nn.init.normal_(reference.weight)
    torch.nn.init.normal_(reference.bias)
    model = one_node("layernorm2d", ("B", 96, "H", "W"), eps=1e-6)
    model.nodes["n_n"].load_state_dict(reference.state_dict())
    x = torch.randn(2, 96, 14, 14)
    assert torch.equal(model(x), reference(x))


def test_the_relative_position_index_is_torchvisions_swin_buffer():
    swin = require("torchvision.models.swin_transformer")
    attention = swin.ShiftedWindowAttention(96, [7, 7], [3, 3], num_heads=3)
    model = one_node("buffer", (), shape=[49 * 49], init="relative_position_index", window=7)
    assert torch.equal(model(), attention.relative_position_index)


def test_the_whisper_table_is_transformers_sinusoids():
    whisper = require("transformers.models.whisper.modeling_whisper")
    model = one_node("buffer", (), shape=[1500, 384], init="sinusoidal_whisper")
    assert torch.equal(model(), whisper.sinusoids(1500, 384))


def tutorial_spec(name: str) -> str:
    """The spec text the tutorial writes to ``name``."""
    text = TUTORIAL.read_text(encoding="utf-8")
    found = re.search(rf'Path\("{re.escape(name)}"\)\.write_text\("""\\\n(.*?)"""\)', text, re.S)
    assert found, f"the tutorial writes no {name}"
    return found.group(1)


def test_the_tutorials_mobilenet_v2_is_torchvisions():
    models = require("torchvision.models")
    graph = hndl.loads(tutorial_spec("mobilenet_v2.yaml"))
    graph.params["dropout"] = 0.0  # training-mode gradients compared without random masks
    model = hndl.build(graph)
    torch.manual_seed(0)
    reference = models.mobilenet_v2(dropout=0.0)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in reference.parameters()) == 3_504_872
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # statistics and affine parameters that matter
        for key, value in reference.state_dict().items():
            if key.endswith("running_var"):
                value.copy_(torch.rand(value.shape, generator=gen) + 0.5)
            elif key.endswith(("running_mean", "bias")):
                value.copy_(0.2 * torch.randn(value.shape, generator=gen))
    theirs = reference.state_dict()
    assert [tuple(v.shape) for v in model.state_dict().values()] == [tuple(v.shape) for v in theirs.values()]
    model.load_state_dict(dict(zip(model.state_dict(), theirs.values())))
    x = torch.randn(2, 3, 224, 224)
    model.eval()
    reference.eval()
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))
    model.train()
    reference.train()
    projection = torch.randn(2, 1000, generator=gen)
    (model(x) * projection).sum().backward()
    (reference(x) * projection).sum().backward()
    for (key, ours), theirs_p in zip(model.named_parameters(), reference.parameters()):
        scale = max(1.0, float(theirs_p.grad.abs().max()))
        torch.testing.assert_close(ours.grad, theirs_p.grad, atol=1e-5 * scale, rtol=1e-4, msg=key)
