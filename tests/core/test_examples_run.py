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
SIZES = {"B": 2, "T": 5, "S": 7, "H": 8, "W": 12}


def contract_inputs(graph: hndl.Graph) -> list[torch.Tensor]:
    """One tensor per graph input, sized and typed by its contract (ids 0..1, masks with padding)."""
    out = []
    for spec in graph.inputs.values():
        shape = [evaluate(d, SIZES) for d in spec.contract.shape.dims]
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


@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: p.name)
def test_example_builds_and_runs_on_inputs_from_its_contracts(path: Path):
    graph = hndl.load(path)
    checked = hndl.check(graph)
    torch.manual_seed(0)
    model = hndl.build(graph).eval()
    out = model(*contract_inputs(graph))
    outs = out if isinstance(out, tuple) else (out,)
    for t, y in zip(checked.output_types, outs):
        assert tuple(y.shape) == tuple(evaluate(d, SIZES) for d in t.shape)
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
