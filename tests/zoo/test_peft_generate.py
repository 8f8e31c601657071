"""``hndl.generate`` on zoo:llama with PEFT LoRA adapters against transformers' ``LlamaForCausalLM`` with the same
LoRA (issue 36): greedy tokens equal (``torch.equal``), with the static cache and the growing one, for LoRA on the
attention projections (inside hndl's attention layer, carried into the cached variant) and on every projection.
Then what PEFT changes in place afterwards: a training step, ``merge_adapter``/``unmerge_adapter``,
``disable_adapter``. Runs in `nox -s reference` (transformers, peft) and skips elsewhere.

Before: ``E_INPUT`` "the attention layer of node 'layers.0.self_attn' was replaced; the variant's attention reads
and writes the cache, so it cannot run another layer in its place".
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from parity import llama_reference, require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
EVERY = [*ATTENTION, "gate_proj", "up_proj", "down_proj"]
NEW = 12
PAD = 0


def _lora_pair(targets: list[str]) -> tuple[hndl.GraphModule, Any, Any]:
    """zoo:llama and LlamaForCausalLM with the same weights, each with LoRA on ``targets`` holding the same
    nonzero adapter weights (``init_lora_weights=False``: lora_B random, not zero, so the adapter changes the
    tokens): (zoo model, its PeftModel, the reference's PeftModel)."""
    tf = require("transformers")
    torch.manual_seed(0)
    reference = llama_reference(tf, dict(hndl.zoo.get("llama").params), "sdpa")
    model = hndl.build(hndl.zoo.get("llama"))
    hndl.zoo.load_reference_state_dict(model, "llama", reference.state_dict())
    config = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": targets, "init_lora_weights": False}
    theirs = peft.get_peft_model(reference, peft.LoraConfig(**config))
    ours = peft.get_peft_model(model, peft.LoraConfig(**config))
    adapters = {k: v for k, v in theirs.state_dict().items() if ".lora_" in k}
    assert len(adapters) == 2 * len(targets) * 2  # lora_A and lora_B of each target in each of 2 layers
    result = ours.load_state_dict(adapters, strict=False)  # the same names: transformers' module paths
    assert result.unexpected_keys == []
    return model, ours.eval(), theirs.eval()


def _prompts() -> tuple[torch.Tensor, torch.Tensor]:
    """Two prompts, the second left-padded by 3."""
    ids = torch.randint(3, 256, (2, 8), generator=torch.Generator().manual_seed(5))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = PAD, 0
    return ids, mask


def _theirs(peft_model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out: torch.Tensor = peft_model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=PAD,
        )
    return out


def _ours(model: hndl.GraphModule, ids: torch.Tensor, mask: torch.Tensor, kv_cache: str = "static") -> torch.Tensor:
    return hndl.generate(model, ids, NEW, attention_mask=mask, pad_token_id=PAD, kv_cache=kv_cache)


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
@pytest.mark.parametrize("targets", [ATTENTION, EVERY], ids=["attention", "every-projection"])
def test_greedy_tokens_with_lora_equal_transformers_with_the_same_lora(targets: list[str], kv_cache: str) -> None:
    model, _, theirs = _lora_pair(targets)
    ids, mask = _prompts()
    expected = _theirs(theirs, ids, mask)
    tokens = _ours(model, ids, mask, kv_cache)
    assert torch.equal(tokens, expected)
    with theirs.disable_adapter():  # the adapters change the tokens: the test compares something
        assert not torch.equal(_theirs(theirs, ids, mask), expected)
    # the variant runs copies of PEFT's layers, holding the model's own adapter tensors
    variant = hndl.generation.with_kv_cache(model, kv_cache)
    lora_a = dict(variant.named_parameters())["model.layers.0.self_attn.q_proj.lora_A.default.weight"]
    assert lora_a is dict(model.named_parameters())["model.layers.0.self_attn.q_proj.lora_A.default.weight"]


def test_after_a_training_step_generate_uses_the_trained_adapter() -> None:
    model, ours, theirs = _lora_pair(ATTENTION)
    ids, mask = _prompts()
    batch = torch.randint(3, 256, (2, 9), generator=torch.Generator().manual_seed(6))  # no padding: equal losses
    real = torch.ones_like(batch, dtype=torch.bool)
    # A first training call sets the model's runtime state (an attribute the variant's key follows): made here,
    # before the variant is, so that what the test sees below is the step alone.
    ours.train()(batch, real).sum().backward()
    ours.zero_grad()
    before = _ours(model, ids, mask)  # the variant is derived here, then kept
    variant = hndl.generation.with_kv_cache(model)
    losses = []
    for net, call in (
        (ours, lambda: ours(batch, real)),
        (theirs, lambda: theirs(input_ids=batch, attention_mask=real.long()).logits),
    ):
        opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=1.0)
        net.train()
        logits = call()
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        net.eval()
        losses.append(loss.detach())
    assert torch.equal(losses[0], losses[1])
    after = _ours(model, ids, mask)
    assert hndl.generation.with_kv_cache(model) is variant  # trained in place: the same variant sees the step
    assert not torch.equal(after, before)
    assert torch.equal(after, _theirs(theirs, ids, mask))


def test_merge_unmerge_and_disable_adapter_are_followed_by_generate() -> None:
    model, ours, theirs = _lora_pair(ATTENTION)
    ids, mask = _prompts()
    adapted = _ours(model, ids, mask)
    assert torch.equal(adapted, _theirs(theirs, ids, mask))
    # merge_adapter() adds BA into the base weight in place and records it in the layer's merged_adapters list;
    # a variant whose copies kept a list of their own added the adapter a second time (other tokens, silently).
    ours.merge_adapter()
    theirs.merge_adapter()
    assert torch.equal(_ours(model, ids, mask), _theirs(theirs, ids, mask))
    ours.unmerge_adapter()
    theirs.unmerge_adapter()
    assert torch.equal(_ours(model, ids, mask), adapted)
    with ours.disable_adapter(), theirs.disable_adapter():
        plain = _ours(model, ids, mask)
        assert torch.equal(plain, _theirs(theirs, ids, mask))
    assert not torch.equal(plain, adapted)
    assert torch.equal(_ours(model, ids, mask), adapted)  # enabled again


def test_the_peft_wrapper_itself_is_refused_naming_the_model_to_pass() -> None:
    model, ours, _ = _lora_pair(ATTENTION)
    ids, mask = _prompts()
    with pytest.raises(hndl.HndlError) as info:
        hndl.generate(ours, ids, NEW, attention_mask=mask)
    problem = info.value.problems[0]
    assert problem.code == "E_INPUT"
    assert problem.message == "model is PeftModel, not a built hndl model"
    assert "hndl.generate(peft_model.get_base_model(), ...)" in (problem.hint or "")
    assert ours.get_base_model() is model
    assert torch.equal(hndl.generate(ours.get_base_model(), ids, NEW, attention_mask=mask), _ours(model, ids, mask))
