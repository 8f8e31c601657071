"""hndl's checkpointing against transformers' on the same GPT-2 weights (issue 26): every block recomputed on
both sides, one training step, the same gradients. transformers does not import beside the default sessions'
torch, so this runs in `nox -s reference` and skips elsewhere."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import require  # noqa: E402

import hndl  # noqa: E402
import hndl.weights  # noqa: E402
import hndl.zoo  # noqa: E402

CONFIG = {"vocab_size": 97, "n_positions": 32, "n_embd": 32, "n_layer": 3, "n_head": 2}


def test_gradients_with_every_block_recomputed_equal_transformers_gradient_checkpointing() -> None:
    transformers = require("transformers")
    torch.manual_seed(0)
    reference = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(**CONFIG, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ).train()
    reference.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model = hndl.build(hndl.zoo.get("gpt2", dropout=0.0, **CONFIG)).train()
    hndl.zoo.load_reference_state_dict(model, "gpt2", reference.state_dict())
    assert model.checkpointing(["h"]) == ("h.0", "h.1", "h.2")
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    projection = torch.randn(2, 16, 97, generator=torch.Generator().manual_seed(2))
    (model(tokens) * projection).sum().backward()
    (reference(tokens).logits * projection).sum().backward()
    grads = {k: p.grad for k, p in reference.named_parameters(remove_duplicate=False)}
    expected = hndl.weights.convert_state_dict(model, grads, hndl.zoo.entry("gpt2").rules, strict=False)
    own = dict(model.named_parameters(remove_duplicate=False))
    assert set(expected) == set(own)
    for key, grad in expected.items():
        scale = max(1.0, float(grad.abs().max()))
        torch.testing.assert_close(own[key].grad, grad, atol=1e-5 * scale, rtol=1e-4, msg=lambda m, k=key: f"{k}: {m}")
