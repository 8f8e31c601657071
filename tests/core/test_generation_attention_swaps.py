"""``hndl.generate`` with a tool's layers inside attention (issue 36): a LoRA-style wrapper (what PEFT's
``lora.Linear`` exposes: the built layer as ``base_layer``) or a dynamically quantized Linear in the place of
``q_proj``/``k_proj``/``v_proj``/``o_proj`` is carried into the cached variant's attention layer, so the greedy
tokens are the plain model's, recomputed over the whole sequence each step. Before: E_INPUT "the attention layer
of node 'layers.0.self_attn' was replaced". Also: what the tool changes in place later is followed (a merge
recorded in the layer's own list), and generate leaves frozen weights frozen. No PEFT here (tests/zoo/
test_peft_generate.py has the real one, against transformers).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

import hndl
import hndl.zoo
from hndl.generation import with_kv_cache

# torch 2.14 warns that the quantized tensor types will go; the layers still work, and users still call it.
pytestmark = pytest.mark.filterwarnings(
    "ignore:torch.ao.quantization is deprecated:DeprecationWarning", "ignore:.*quantized tensor:UserWarning"
)

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")


class Lora(nn.Module):
    """What PEFT's LoRA ``Linear`` exposes and does: the built layer as ``base_layer``, the adapter in
    ``ModuleDict``s, ``merge()`` adding B @ A into the base weight in place and recording it in the layer's own
    ``merged_adapters`` list, which the forward reads (a merged adapter is not added again)."""

    def __init__(self, base: nn.Linear, r: int = 4) -> None:
        super().__init__()
        self.base_layer = base
        self.in_features, self.out_features = base.in_features, base.out_features
        self.lora_A = nn.ModuleDict({"default": nn.Linear(base.in_features, r, bias=False)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, base.out_features, bias=False)})
        nn.init.normal_(self.lora_B["default"].weight, std=0.5)  # nonzero: the adapter changes the tokens
        self.merged_adapters: list[str] = []

    def merge(self) -> None:
        # through .data, as PEFT merges: no attribute of any module is set, nothing but the tensors and the list change
        delta = self.lora_B["default"].weight.data @ self.lora_A["default"].weight.data
        self.base_layer.weight.data += delta
        self.merged_adapters.append("default")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        if not self.merged_adapters:
            out = out + self.lora_B["default"](self.lora_A["default"](x))
        return out


def llama() -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("llama")).eval()


def with_lora(model: hndl.GraphModule) -> list[Lora]:
    """A Lora in the place of every attention projection, set as PEFT sets it (setattr on the parent)."""
    layers = []
    for name, module in list(model.named_modules()):
        if name.rpartition(".")[2] in PROJECTIONS:
            parent, _, leaf = name.rpartition(".")
            layers.append(Lora(module))
            setattr(model.get_submodule(parent), leaf, layers[-1])
    return layers


def recompute_greedy(model: hndl.GraphModule, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The whole sequence through the plain model (with its swapped layers) for each new token."""
    with torch.no_grad():
        for _ in range(steps):
            logits = model(ids, torch.ones_like(ids, dtype=torch.bool))[:, -1]
            ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
    return ids


def prompt() -> torch.Tensor:
    return torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(4))


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
def test_lora_on_the_attention_projections_generates_the_recomputed_tokens(kv_cache: str) -> None:
    model = llama()
    ids = prompt()
    plain = hndl.generate(model, ids, 10, kv_cache=kv_cache)
    layers = with_lora(model)
    assert len(layers) == 8  # four projections in each of two layers
    tokens = hndl.generate(model, ids, 10, kv_cache=kv_cache)
    assert torch.equal(tokens, recompute_greedy(model, ids, 10))
    assert not torch.equal(tokens, plain)  # the adapters change the tokens: the comparison tells
    variant = with_kv_cache(model, kv_cache)
    carried = variant.get_submodule("model.layers.0.self_attn.q_proj")
    assert isinstance(carried, Lora)
    assert carried is not layers[0]  # a copy, in eval mode ...
    assert carried.lora_A["default"].weight is layers[0].lora_A["default"].weight  # ... holding the user's tensors


def test_an_adapter_trained_in_place_is_seen_and_a_merge_is_not_added_twice() -> None:
    model = llama()
    ids = prompt()
    layers = with_lora(model)
    hndl.generate(model, ids, 4)
    variant = with_kv_cache(model)
    with torch.no_grad():
        for layer in layers:
            layer.lora_B["default"].weight.mul_(-2.0)  # a training step, in place
    assert torch.equal(hndl.generate(model, ids, 10), recompute_greedy(model, ids, 10))
    unmerged = hndl.generate(model, ids, 10)
    for layer in layers:
        layer.merge()  # the base weight changed in place, the merge recorded in the layer's own list
    assert with_kv_cache(model) is variant  # nothing was rebound: the variant's copies see the list itself
    merged = hndl.generate(model, ids, 10)
    # Was: the copies kept lists of their own, so the variant added the merged adapters a second time.
    assert torch.equal(merged, recompute_greedy(model, ids, 10))
    assert torch.equal(merged, unmerged)


def test_quantized_attention_projections_are_carried_and_the_prefill_gives_the_recomputed_token() -> None:
    model = llama()
    ids = prompt()
    names = {n for n, _ in model.named_modules() if n.rpartition(".")[2] in PROJECTIONS}
    quantized = torch.ao.quantization.quantize_dynamic(model, names, dtype=torch.qint8)
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    assert isinstance(quantized.get_submodule("model.layers.1.self_attn.v_proj"), dynamic)
    # Dynamic quantization scales each call's activations by their own range, so a step over one new token and a
    # recomputation over the whole sequence quantize differently: only the prefill (the same tokens in the same
    # projections) is the same computation, and its token is the recomputed one.
    assert torch.equal(hndl.generate(quantized, ids, 1), recompute_greedy(quantized, ids, 1))
    assert hndl.generate(quantized, ids, 8).shape == (2, 13)
    assert isinstance(with_kv_cache(quantized).get_submodule("model.layers.1.self_attn.v_proj"), dynamic)


def test_generate_leaves_frozen_weights_frozen() -> None:
    # Was: the variant's load_state_dict(assign=True) set requires_grad=True on every weight it took from the
    # model, so a LoRA model's frozen base trained from the next step on.
    model = llama()
    with_lora(model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("lora_" in name)
    before = {name: p.requires_grad for name, p in model.named_parameters()}
    hndl.generate(model, prompt(), 3)
    assert {name: p.requires_grad for name, p in model.named_parameters()} == before
    assert sum(before.values()) == 16  # (the adapters alone)


def test_a_hook_on_the_attention_layer_itself_is_still_refused() -> None:
    model = llama()
    model.layer("layers.1.self_attn").register_forward_hook(lambda module, args, out: None)
    with pytest.raises(hndl.HndlError) as info:
        hndl.generate(model, prompt(), 2)
    problem = info.value.problems[0]
    assert problem.code == "E_INPUT"
    assert problem.node == "layers.1.self_attn"
    assert "given a hook of its own" in problem.message
    assert "a PEFT LoRA layer on q_proj) is carried" in (problem.hint or "")


def test_a_swap_the_variant_builds_otherwise_is_refused_naming_merge_and_unload() -> None:
    from hndl.generation._derive import _inside_attention

    # No zoo attention builds a submodule otherwise in its cached variant; the guard is met here directly.
    built = nn.Module()
    built.proj = nn.Linear(4, 4)
    live, variant = nn.Module(), nn.Module()
    live.proj, variant.proj = Lora(nn.Linear(4, 4)), nn.Linear(4, 8)
    step = SimpleNamespace(node=SimpleNamespace(qualname="attn", path=("attn",)))
    with pytest.raises(hndl.HndlError) as info:
        _inside_attention(step, live, built, variant)
    problem = info.value.problems[0]
    assert problem.code == "E_INPUT"
    assert "submodule 'proj' of the attention layer of node 'attn' was swapped (Lora)" in problem.message
    assert "merge_and_unload()" in (problem.hint or "")


def test_a_peft_style_wrapper_passed_to_generate_is_refused_naming_its_base_model() -> None:
    model = llama()

    class PeftModel(nn.Module):  # what hndl reads of peft.PeftModel: base_model, get_base_model()
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.base_model = inner

        def get_base_model(self) -> Any:
            return self.base_model

    with pytest.raises(hndl.HndlError) as info:
        hndl.generate(PeftModel(model), prompt(), 2)
    problem = info.value.problems[0]
    assert problem.message == "model is PeftModel, not a built hndl model"
    assert "hndl.generate(peft_model.get_base_model(), ...)" in (problem.hint or "")
