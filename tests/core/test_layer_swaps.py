"""Swaps well-known tools make in a built layer's place (issue 36; ``hndl/torch/_swaps.py``, SPEC 11.2): a PEFT-like
tuner layer holding the built layer as ``base_layer``, a quantized Linear from ``quantize_dynamic``, the held layer
put back (``merge_and_unload``), adapters added to and dropped from an adopted wrapper. Each is adopted as the
node's build by the validation that finds it, which then runs every node with its outputs checked; later edits
are compared against it. No PEFT here: the tuner layer is faked with what PEFT's layers expose (tests/zoo has
the real one). An unknown swap stays E_RUNTIME, naming both classes with their modules."""

from __future__ import annotations

import threading
import warnings
from typing import Any

import pytest
import torch
from torch import nn

import hndl
import hndl.zoo

X = torch.randn(3, 8)

# torch 2.14 warns that the quantized tensor types will go; the layers still work, and users still call it.
pytestmark = pytest.mark.filterwarnings(
    "ignore:torch.ao.quantization is deprecated:DeprecationWarning", "ignore:.*quantized tensor:UserWarning"
)


def mlp() -> hndl.GraphModule:
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 8))
    h = g.add("linear", x, name="hidden", out_features=16)
    h = g.add("relu", h, name="act")
    g.output(g.add("linear", h, name="out", out_features=4))
    model = hndl.build(g)
    model(X)
    return model


class Tuner(nn.Module):
    """What PEFT's LoRA ``Linear`` exposes: the built layer as ``base_layer``, its adapters in ``ModuleDict``s
    keyed by adapter name, ``in_features``/``out_features`` as plain attributes."""

    def __init__(self, base: nn.Module, r: int = 2, adapter: str = "default") -> None:
        super().__init__()
        self.base_layer = base
        self.in_features, self.out_features = base.in_features, base.out_features
        self.lora_A = nn.ModuleDict()
        self.lora_B = nn.ModuleDict()
        self.active = adapter
        self.add_adapter(adapter, r)

    def add_adapter(self, name: str, r: int = 2) -> None:
        self.lora_A[name] = nn.Linear(self.in_features, r, bias=False)
        self.lora_B[name] = nn.Linear(r, self.out_features, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base_layer(x) + self.lora_B[self.active](self.lora_A[self.active](x))


def expected(model: hndl.GraphModule) -> torch.Tensor:
    hidden = model.nodes.n_hidden
    return model.nodes.n_out(torch.relu(hidden(X)))


def _module_at(model: nn.Module, suffix: str) -> tuple[nn.Module, str, nn.Module]:
    """(parent, name, module) of the first module whose dotted name ends with ``suffix``: found by suffix, as
    PEFT's ``target_modules`` finds them, so the test holds whatever the zoo's module paths are."""
    name = next(n for n, _ in model.named_modules() if n == suffix or n.endswith("." + suffix))
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name)
    return parent, child, getattr(parent, child)


# --- accepted swaps -----------------------------------------------------------------------------------------


def test_peft_like_tuner_layer_is_adopted_and_validated_once_not_refused_as_linear_now_linear() -> None:
    # Was E_RUNTIME "submodule 'nodes.n_hidden' was replaced: the build made Linear, now it is Tuner".
    model = mlp()
    before = model.validations
    model.nodes.n_hidden = Tuner(model.nodes.n_hidden)
    out = model(X)
    assert model.validations == before + 1  # the swap's validation, with every node's outputs checked
    assert torch.equal(out, expected(model))
    model(X)
    assert model.validations == before + 1  # then the fast path
    tensors = model.build_state.tensors
    assert "nodes.n_hidden.base_layer.weight" in tensors
    assert "nodes.n_hidden.lora_A.default.weight" in tensors
    assert tensors["nodes.n_hidden.lora_A.default.weight"].node == "hidden"


def test_a_tuner_layer_inside_a_nodes_layer_is_adopted_for_that_node() -> None:
    model = hndl.build(hndl.zoo.get("llama"))
    ids = torch.randint(0, 256, (2, 5))
    mask = torch.ones(2, 5, dtype=torch.bool)
    plain = model(ids, mask)
    parent, name, q_proj = _module_at(model, "self_attn.q_proj")
    tuner = Tuner(q_proj)
    nn.init.zeros_(tuner.lora_B["default"].weight)  # LoRA's initialisation: the model's function is unchanged
    setattr(parent, name, tuner)
    assert torch.equal(model(ids, mask), plain)
    adopted = [s for s in model.build_state.tensors.values() if s.name.endswith("lora_A.default.weight")]
    assert len(adopted) == 1
    assert adopted[0].node == "layers.0.self_attn"


def test_quantize_dynamic_of_zoo_gpt2_and_bert_runs_checked_not_refused_at_the_first_call() -> None:
    # Was E_RUNTIME "... was replaced: the build made Linear, now it is Linear" for each quantized layer.
    cases: dict[str, tuple[Any, tuple[torch.Tensor, ...]]] = {
        "gpt2": (
            hndl.zoo.get("gpt2", vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=2, dropout=0.0),
            (torch.randint(0, 50, (2, 6)),),
        ),
        "bert": (
            hndl.zoo.get("bert"),
            (torch.randint(0, 256, (2, 6)), torch.ones(2, 6, dtype=torch.bool), torch.zeros(2, 6, dtype=torch.long)),
        ),
    }
    for name, (graph, inputs) in cases.items():
        model = hndl.build(graph).eval()
        linears = sum(isinstance(m, nn.Linear) for m in model.modules())
        with torch.no_grad():
            floating = model(*inputs)
            quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
            dynamic = torch.ao.nn.quantized.dynamic.Linear
            assert sum(isinstance(m, dynamic) for m in quantized.modules()) == linears, name
            assert not any(type(m) is nn.Linear for m in quantized.modules()), name
            out = quantized(*inputs)
            validations = quantized.validations
            again = quantized(*inputs)
        assert quantized.validations == validations  # adopted: the next call takes the fast path
        for a, b, c in zip(*(o if isinstance(o, tuple) else (o,) for o in (out, again, floating)), strict=True):
            assert torch.equal(a, b)
            # quantized to 8 bits: close to the float model, not equal to it
            assert (a - c).abs().max() <= 0.1 * c.abs().max(), (name, (a - c).abs().max())


def test_the_held_layer_put_back_is_adopted_and_a_second_wrap_works() -> None:
    model = mlp()
    base = model.nodes.n_hidden
    model.nodes.n_hidden = Tuner(base)
    model(X)
    model.nodes.n_hidden = base  # what merge_and_unload/unload do: the layer the wrapper held, in its place
    assert torch.equal(model(X), expected(model))
    assert "nodes.n_hidden.weight" in model.build_state.tensors
    assert not any(".lora_" in n for n in model.build_state.tensors)
    model.nodes.n_hidden = Tuner(base, r=3)  # a second swap is accepted too
    assert torch.equal(model(X), expected(model))


def test_adapters_added_to_and_dropped_from_an_adopted_tuner_are_adopted_again() -> None:
    model = mlp()
    tuner = Tuner(model.nodes.n_hidden)
    model.nodes.n_hidden = tuner
    model(X)
    tuner.add_adapter("other", r=4)  # PEFT's load_adapter
    tuner.active = "other"
    assert torch.equal(model(X), expected(model))
    assert model.build_state.tensors["nodes.n_hidden.lora_A.other.weight"].shape == (4, 8)
    del tuner.lora_A["default"], tuner.lora_B["default"]  # PEFT's delete_adapter
    assert torch.equal(model(X), expected(model))
    assert "nodes.n_hidden.lora_A.default.weight" not in model.build_state.tensors
    tuner.lora_A["other"] = nn.Linear(8, 5, bias=False)  # an adapter that stays keeps its record
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert info.value.code == "E_RUNTIME"
    assert info.value.node == "hidden"
    assert "'nodes.n_hidden.lora_A.other.weight' has shape [5, 8], the build made [4, 8]" in str(info.value)


def test_calls_from_many_threads_after_a_swap_all_pass_and_agree() -> None:
    model = mlp()
    model.nodes.n_hidden = Tuner(model.nodes.n_hidden)
    outs: list[torch.Tensor] = []
    errors: list[BaseException] = []

    def call() -> None:
        try:
            outs.append(model(X))
        except BaseException as e:  # collected for the assertion below
            errors.append(e)

    threads = [threading.Thread(target=call) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(torch.equal(o, outs[0]) for o in outs)
    assert len(outs) == 6
    assert torch.equal(outs[0], expected(model))


def test_torch_compile_runs_an_adopted_tuner_layer() -> None:
    model = mlp()
    model.nodes.n_hidden = Tuner(model.nodes.n_hidden)
    eager = model(X)
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    assert torch.equal(compiled(X), eager)


# --- refused swaps and edits after a swap -------------------------------------------------------------------


def test_an_unknown_swap_names_both_classes_with_their_modules() -> None:
    # Was "the build made Linear, now it is Linear" for a class of the same name from another module.
    class Linear(nn.Module):  # a user's layer named like torch's
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    model = mlp()
    model.nodes.n_out = Linear()
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    err = info.value
    assert err.code == "E_RUNTIME"
    assert err.node == "out"
    assert (
        f"submodule 'nodes.n_out' was replaced: the build made torch.nn.Linear, now it is {__name__}."
        "test_an_unknown_swap_names_both_classes_with_their_modules.<locals>.Linear" in str(err)
    )
    assert "model.replace_layer" in str(err)


def test_a_wrapper_whose_base_layer_has_another_shape_is_refused_naming_the_node_and_both_classes() -> None:
    model = mlp()
    model.nodes.n_hidden = Tuner(nn.Linear(8, 12))
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    err = info.value
    assert err.code == "E_RUNTIME"
    assert err.node == "hidden"
    message = str(err)
    assert f"the build made torch.nn.Linear, now it is {__name__}.Tuner" in message
    assert "does not keep the layer's contract: its base_layer 'weight' has shape [12, 8], the build made [16, 8]" in (
        message
    )


def test_a_wrapper_around_a_layer_of_another_class_is_refused() -> None:
    model = mlp()
    tuner = Tuner(model.nodes.n_hidden)
    tuner.base_layer = nn.Bilinear(8, 8, 16)
    model.nodes.n_hidden = tuner
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert "its base_layer is a torch.nn.Bilinear" in str(info.value)


def test_a_quantized_linear_of_other_features_or_dtype_is_refused() -> None:
    model = mlp()
    model.nodes.n_hidden = torch.ao.nn.quantized.dynamic.Linear(8, 12)
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    message = str(info.value)
    assert "the build made torch.nn.Linear, now it is torch.ao.nn.quantized.dynamic.Linear" in message
    assert "it maps 8 to 12 features, the build made 8 to 16" in message
    model = mlp().double()
    model.nodes.n_hidden = torch.ao.nn.quantized.dynamic.Linear(8, 16)
    with pytest.raises(hndl.HndlError) as info:
        model(X.double())
    assert "its kernels compute in float32, the build's weight is float64" in str(info.value)


def test_a_quantized_linear_in_place_of_an_activation_is_refused() -> None:
    model = mlp()
    model.nodes.n_act = torch.ao.nn.quantized.dynamic.Linear(16, 16)
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert "it stands for a linear layer, the build made torch.nn.ReLU" in str(info.value)


def test_an_edit_after_an_accepted_swap_is_caught_and_putting_it_back_passes() -> None:
    model = mlp()
    tuner = Tuner(model.nodes.n_hidden)
    model.nodes.n_hidden = tuner
    model(X)
    weight = tuner.base_layer.weight
    del tuner.base_layer.weight
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert info.value.code == "E_RUNTIME"
    assert info.value.node == "hidden"
    assert "parameter 'nodes.n_hidden.base_layer.weight' was removed" in str(info.value)
    tuner.base_layer.weight = weight
    model(X)
    good = tuner.lora_A["default"]
    tuner.lora_A["default"] = nn.Linear(8, 3, bias=False)
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert info.value.node == "hidden"
    assert "'nodes.n_hidden.lora_A.default.weight' has shape [3, 8], the build made [2, 8]" in str(info.value)
    tuner.lora_A["default"] = good
    assert torch.equal(model(X), expected(model))


def test_a_parameter_added_to_the_held_layer_is_not_taken_for_a_new_adapter() -> None:
    model = mlp()
    tuner = Tuner(model.nodes.n_hidden)
    model.nodes.n_hidden = tuner
    model(X)
    tuner.base_layer.scale = nn.Parameter(torch.ones(1))
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert "parameter 'nodes.n_hidden.base_layer.scale' was added" in str(info.value)


def test_a_swap_that_breaks_the_contract_downstream_is_caught_by_the_validation() -> None:
    class Wide(Tuner):
        """Keeps the built layer but gives more features than it: the node's contract catches it."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cat([super().forward(x), x], dim=-1)

    model = mlp()
    model.nodes.n_hidden = Wide(model.nodes.n_hidden)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(hndl.HndlError) as info:
            model(X)
    assert info.value.code == "E_CONTRACT"
    assert info.value.node == "hidden"


# --- the head and the embedding, as transformers' methods name them ------------------------------------------


def test_get_output_and_input_embeddings_find_a_language_models_head_and_token_embedding() -> None:
    llama = hndl.build(hndl.zoo.get("llama"))
    head, embed = llama.get_output_embeddings(), llama.get_input_embeddings()
    assert isinstance(head, nn.Linear)
    assert head.weight.shape == (256, 64)
    assert isinstance(embed, nn.Embedding)
    assert embed.weight.shape == (256, 64)
    assert next(n for n, m in llama.named_modules() if m is head).endswith("lm_head")
    gpt2 = hndl.build(hndl.zoo.get("gpt2", vocab_size=50, n_positions=50, n_embd=32, n_layer=1, n_head=2))
    tied = gpt2.get_output_embeddings()
    assert tied is not None
    assert tied.weight is gpt2.get_input_embeddings().weight
    bert = hndl.build(hndl.zoo.get("bert"))
    assert bert.get_output_embeddings() is None
    assert next(n for n, m in bert.named_modules() if m is bert.get_input_embeddings()).endswith("word_embeddings")
    assert mlp().get_output_embeddings() is None
    assert mlp().get_input_embeddings() is None
