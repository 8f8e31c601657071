"""PEFT and dynamic quantization on zoo models against the same tools on transformers' models with the same
weights (issue 36). Runs in `nox -s reference` (transformers, peft) and skips elsewhere.

- LoRA with the ``target_modules`` transformers' docs give for LLaMA, on zoo:llama (2 layers) and on
  ``LlamaForCausalLM``: the same 14 adapted modules under the same names, the same LoRA weights (copied), three
  AdamW steps on the same batches with the same losses bit for bit, then the adapter saved, reloaded into fresh
  models (``PeftModel.from_pretrained``) and merged (``merge_and_unload``), with equal outputs throughout.
- ``quantize_dynamic`` on zoo:bert and ``BertModel``: every ``nn.Linear`` of both is quantized, and the outputs
  are equal. transformers' GPT-2 computes its projections with ``Conv1D``, which ``quantize_dynamic`` does not
  swap, so on ``GPT2LMHeadModel`` it quantizes the LM head alone: what is comparable is (1) the head alone on
  both sides (zoo:gpt2 quantized for its head's module name only), and (2) every linear, after the test turns
  transformers' ``Conv1D`` layers into the ``nn.Linear`` layers they compute (weight transposed). Both are equal
  with the reference built with ``activation_function="gelu_pytorch_tanh"`` (torch's tanh GELU, as zoo:gpt2
  computes it; transformers' default ``gelu_new`` computes the same formula in other steps, 6e-8 apart).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from parity import llama_reference, require  # noqa: E402
from torch import nn  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

pytestmark = pytest.mark.filterwarnings(
    "ignore:torch.ao.quantization is deprecated:DeprecationWarning", "ignore:.*quantized tensor:UserWarning"
)

#: transformers' PEFT docs' LoRA targets for LLaMA: every projection of attention and of the MLP.
LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _llama_pair() -> tuple[hndl.GraphModule, Any]:
    tf = require("transformers")
    params = dict(hndl.zoo.get("llama").params)
    torch.manual_seed(0)
    reference = llama_reference(tf, params, "sdpa")
    model = hndl.build(hndl.zoo.get("llama"))
    hndl.zoo.load_reference_state_dict(model, "llama", reference.state_dict())
    return model, reference


def _tuned(model: nn.Module) -> dict[str, nn.Module]:
    """The tuner layers of a PEFT model, by module name below PEFT's ``base_model.model.``."""
    prefix = "base_model.model."
    return {
        name.removeprefix(prefix): module
        for name, module in model.named_modules()
        if isinstance(module, peft.tuners.tuners_utils.BaseTunerLayer)
    }


def _batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(7)
    out = []
    for _ in range(3):
        ids = torch.randint(0, 256, (2, 9), generator=gen)
        mask = torch.ones(2, 9, dtype=torch.bool)
        mask[1, 6:] = False  # a padded row
        out.append((ids, mask))
    return out


def _loss(logits: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    targets = ids[:, 1:].masked_fill(~mask[:, 1:], -100)
    return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _ours(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = model(ids, mask)
    return out


def _theirs(model: Any, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = model(input_ids=ids, attention_mask=mask.long()).logits
    return out


def test_lora_on_zoo_llama_trains_saves_reloads_and_merges_as_on_transformers_llama(tmp_path: Any) -> None:
    # Was E_RUNTIME at the first call: "submodule '...q_proj' was replaced: the build made Linear, now it is Linear".
    model, reference = _llama_pair()
    config = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": LLAMA_TARGETS}
    ours = peft.get_peft_model(model, peft.LoraConfig(**config))
    theirs = peft.get_peft_model(reference, peft.LoraConfig(**config))
    mine, other = _tuned(ours), _tuned(theirs)
    assert len(mine) == len(other) == 14  # 7 projections in each of the 2 layers
    assert list(mine) == list(other)  # transformers' module names (model.layers.0.self_attn.q_proj, ...)
    with torch.no_grad():  # the same LoRA initialisation: lora_B is zero, lora_A random, copied across
        for name, layer in mine.items():
            for part in ("lora_A", "lora_B"):
                getattr(layer, part)["default"].weight.copy_(getattr(other[name], part)["default"].weight)
    trainable = [n for n, p in ours.named_parameters() if p.requires_grad]
    assert len(trainable) == 28  # lora_A and lora_B of each; the base model is frozen
    opt_ours = torch.optim.AdamW([p for p in ours.parameters() if p.requires_grad], lr=1e-2)
    opt_theirs = torch.optim.AdamW([p for p in theirs.parameters() if p.requires_grad], lr=1e-2)
    ours.train()
    theirs.train()
    for step, (ids, mask) in enumerate(_batches()):
        for net, run, opt in ((ours, _ours, opt_ours), (theirs, _theirs, opt_theirs)):
            opt.zero_grad()
            loss = _loss(run(net, ids, mask), ids, mask)
            loss.backward()
            opt.step()
            if net is ours:
                ours_loss = loss.detach()
        assert torch.equal(ours_loss, loss.detach()), (step, ours_loss, loss)  # bit for bit, each step
    assert model.validations == 1  # the swap's validation; then the fast path, whatever the steps did
    ours.eval()
    theirs.eval()
    ids, mask = _batches()[0]
    with torch.no_grad():
        trained = _ours(ours, ids, mask)
        assert torch.equal(trained, _theirs(theirs, ids, mask))

    ours.save_pretrained(tmp_path / "adapter")
    fresh, fresh_reference = _llama_pair()
    reloaded = peft.PeftModel.from_pretrained(fresh, tmp_path / "adapter")
    # the adapter hndl saved names transformers' modules: it loads into LlamaForCausalLM as it is
    reloaded_reference = peft.PeftModel.from_pretrained(fresh_reference, tmp_path / "adapter")
    assert len(_tuned(reloaded)) == 14
    with torch.no_grad():
        assert torch.equal(_ours(reloaded.eval(), ids, mask), trained)
        assert torch.equal(_theirs(reloaded_reference.eval(), ids, mask), trained)
        merged = reloaded.merge_and_unload()
        merged_reference = reloaded_reference.merge_and_unload()
        assert merged is fresh
        assert not _tuned(merged)
        out = _ours(merged, ids, mask)
        assert torch.equal(out, _theirs(merged_reference, ids, mask))  # the same merge, the same forward
        torch.testing.assert_close(out, trained, atol=1e-5, rtol=1e-5)  # W + BA in one matmul, not two
    assert "model.layers.0.self_attn.q_proj.weight" in fresh.build_state.tensors  # the plain layer, adopted again


def test_all_linear_leaves_the_lm_head_out_given_its_name_from_get_output_embeddings() -> None:
    """peft 0.21 drops the output head from ``target_modules="all-linear"`` only for transformers'
    ``PreTrainedModel`` (it checks the class before calling ``get_output_embeddings``); on a GraphModule
    ``exclude_modules`` with the head's name, found through ``get_output_embeddings()``, gives the same set."""
    model, reference = _llama_pair()
    head = model.get_output_embeddings()
    assert head is not None
    name = next(n for n, m in model.named_modules() if m is head)
    assert name == "lm_head"
    ours = peft.get_peft_model(model, peft.LoraConfig(target_modules="all-linear", exclude_modules=[name]))
    theirs = peft.get_peft_model(reference, peft.LoraConfig(target_modules="all-linear"))
    assert sorted(_tuned(ours)) == sorted(_tuned(theirs))
    assert len(_tuned(ours)) == 14
    assert model.get_input_embeddings() is model.get_submodule("model.embed_tokens")


# --- dynamic quantization -----------------------------------------------------------------------------------


def _quantize(model: nn.Module, spec: Any = None) -> nn.Module:
    quantized: nn.Module = torch.ao.quantization.quantize_dynamic(model, spec or {nn.Linear}, dtype=torch.qint8)
    return quantized


def _quantized_names(model: nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]


def test_quantize_dynamic_of_zoo_bert_equals_the_same_quantization_of_transformers_bert() -> None:
    tf = require("transformers")
    p = dict(hndl.zoo.get("bert").params)
    torch.manual_seed(0)
    reference = tf.BertModel(
        tf.BertConfig(
            vocab_size=p["vocab_size"],
            hidden_size=p["hidden_size"],
            num_hidden_layers=p["num_hidden_layers"],
            num_attention_heads=p["num_attention_heads"],
            intermediate_size=p["intermediate_size"],
            max_position_embeddings=p["max_position_embeddings"],
            type_vocab_size=p["type_vocab_size"],
            pad_token_id=p["pad_token_id"],
            layer_norm_eps=p["layer_norm_eps"],
            attn_implementation="sdpa",
        ),
        add_pooling_layer=True,
    ).eval()
    model = hndl.build(hndl.zoo.get("bert")).eval()
    hndl.zoo.load_reference_state_dict(model, "bert", reference.state_dict())
    gen = torch.Generator().manual_seed(3)
    ids, types = torch.randint(1, 256, (2, 9), generator=gen), torch.randint(0, 2, (2, 9), generator=gen)
    mask = torch.ones(2, 9, dtype=torch.bool)
    with torch.no_grad():
        ours, theirs = _quantize(model), _quantize(reference)
        assert len(_quantized_names(ours)) == len(_quantized_names(theirs)) == 2 * 6 + 1  # q k v o, in, out; pooler
        hidden, pooled = ours(ids, mask, types)
        expected = theirs(input_ids=ids, attention_mask=mask.long(), token_type_ids=types)
    assert torch.equal(hidden, expected.last_hidden_state)
    assert torch.equal(pooled, expected.pooler_output)


def _gpt2_pair() -> tuple[hndl.GraphModule, Any]:
    tf = require("transformers")
    config = {"vocab_size": 97, "n_positions": 32, "n_embd": 32, "n_layer": 2, "n_head": 2}
    torch.manual_seed(0)
    reference = tf.GPT2LMHeadModel(
        tf.GPT2Config(
            **config,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            activation_function="gelu_pytorch_tanh",
            attn_implementation="sdpa",
            bos_token_id=0,
            eos_token_id=0,
        )
    ).eval()
    model = hndl.build(hndl.zoo.get("gpt2", dropout=0.0, **config)).eval()
    hndl.zoo.load_reference_state_dict(model, "gpt2", reference.state_dict())
    return model, reference


def _as_linear(model: nn.Module) -> nn.Module:
    """``model`` with each of transformers' ``Conv1D`` layers replaced by the ``nn.Linear`` it computes."""
    from transformers.pytorch_utils import Conv1D

    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, Conv1D):
                linear = nn.Linear(*child.weight.shape)
                with torch.no_grad():
                    linear.weight.copy_(child.weight.t())
                    linear.bias.copy_(child.bias)
                setattr(module, name, linear)
    return model


def test_quantize_dynamic_of_zoo_gpt2_equals_the_same_quantization_of_transformers_gpt2() -> None:
    model, reference = _gpt2_pair()
    tokens = torch.randint(0, 97, (2, 10), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert torch.equal(model(tokens), reference(tokens).logits)  # the float models agree bit for bit
        # (1) what quantize_dynamic swaps in GPT2LMHeadModel: its head alone (Conv1D is not nn.Linear)
        theirs = _quantize(reference)
        assert _quantized_names(theirs) == ["lm_head"]
        head = next(n for n, m in model.named_modules() if m is model.get_output_embeddings())
        ours = _quantize(model, {head: torch.ao.quantization.default_dynamic_qconfig})
        assert _quantized_names(ours) == [head]
        assert torch.equal(ours(tokens), theirs(tokens).logits)
        # (2) every linear layer, transformers' Conv1D turned into the nn.Linear it computes
        ours_all, theirs_all = _quantize(model), _quantize(_as_linear(copy.deepcopy(reference)))
        assert len(_quantized_names(ours_all)) == len(_quantized_names(theirs_all)) == 2 * 4 + 1
        assert torch.equal(ours_all(tokens), theirs_all(tokens).logits)
