"""The hand-written vision examples at the image sizes their architecture allows: a symbolic H and W where the
layers accept any size (or any multiple), the one size where a layer fixes it (a learned position embedding, a
classifier whose in_features is C*H*W), and a clear E_INPUT for a size outside what the spec says."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import hndl  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _model(name: str) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.load(EXAMPLES / name)).eval()


def _refused(model: hndl.GraphModule, image: torch.Tensor) -> hndl.HndlError:
    with pytest.raises(hndl.HndlError) as info:
        model(image)
    assert info.value.problems[0].code == "E_INPUT"
    return info.value


@pytest.mark.parametrize(("batch", "size"), [(2, (64, 64)), (3, (40, 72))])
def test_resnet18_example_runs_at_any_size(batch, size):
    model = _model("resnet18.yaml")
    with torch.no_grad():
        assert model(torch.randn(batch, 3, *size)).shape == (batch, 1000)


@pytest.mark.parametrize(("batch", "size"), [(2, (64, 64)), (1, (36, 20))])
def test_unet_example_runs_at_multiples_of_four_and_keeps_the_size(batch, size):
    model = _model("unet.yaml")
    with torch.no_grad():
        assert model(torch.randn(batch, 3, *size)).shape == (batch, 2, *size)


def test_unet_example_refuses_a_size_its_skip_connections_cannot_meet():
    # 30 pools to 15, then 7, which comes back as 14: the skip connection would not meet. The spec says 4*h.
    error = _refused(_model("unet.yaml"), torch.randn(1, 3, 30, 32))
    assert "4*h" in str(error)


@pytest.mark.parametrize(("size", "tokens"), [((224, 224), 196), ((100, 260), 6 * 16)])
def test_vit_patch_embedding_example_makes_one_token_per_whole_patch(size, tokens):
    model = _model("vit_patch_embedding.yaml")
    with torch.no_grad():
        assert model(torch.randn(2, 3, *size)).shape == (2, tokens, 192)


def test_vit_patch_embedding_example_refuses_an_image_smaller_than_a_patch():
    error = _refused(_model("vit_patch_embedding.yaml"), torch.randn(1, 3, 15, 64))
    assert "16" in str(error)


@pytest.mark.parametrize(("name", "size"), [("vit.yaml", 32), ("conv_stack.yaml", 32)])
def test_examples_with_a_size_fixed_by_a_learned_table_run_there_and_refuse_another(name, size):
    # vit: the position embedding has a row per patch; conv_stack: the classifier's in_features is 64*8*8.
    model = _model(name)
    with torch.no_grad():
        assert model(torch.randn(2, 3, size, size)).shape == (2, 10)
    error = _refused(model, torch.randn(2, 3, 64, 64))
    assert "32" in str(error)
    assert "64" in str(error)
