"""``hndl.generate(torch.compile(model), ids, n)`` on a plain decoder (issue 36 reported a raw RuntimeError from
``load_state_dict``: the compiled wrapper's ``_orig_mod.`` keys). The cached variant is derived from the model the
wrapper holds (``with_kv_cache`` reads ``_orig_mod``), so the tokens are the plain model's."""

from __future__ import annotations

import pytest
import torch

import hndl


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_generate_on_a_torch_compiled_plain_decoder_raised_runtime_error_and_now_equals_the_model(name):
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get(name)).eval()
    ids = torch.randint(0, 256, (2, 4))
    want = hndl.generate(model, ids, 3)
    compiled = torch.compile(model, backend="aot_eager")
    assert torch.equal(hndl.generate(compiled, ids, 3), want)
    mask = torch.tensor([[False, True, True, True], [True, True, True, True]])
    assert torch.equal(
        hndl.generate(compiled, ids, 3, attention_mask=mask), hndl.generate(model, ids, 3, attention_mask=mask)
    )


def test_generate_on_a_compiled_model_in_train_mode_generates_without_switching_its_mode():
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get("llama"))  # train mode; the derived variant runs in eval mode
    ids = torch.randint(0, 256, (1, 4))
    compiled = torch.compile(model, backend="aot_eager")
    assert torch.equal(hndl.generate(compiled, ids, 2), hndl.generate(model.eval(), ids, 2))
    assert compiled._orig_mod is model
