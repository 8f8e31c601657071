"""torch's own activation checkpointing on hndl models and their parts, as written (issue 26).

``torch.utils.checkpoint.checkpoint`` (non-reentrant with and without early stop, reentrant),
``checkpoint_wrapper`` and ``apply_activation_checkpointing`` on zoo gpt2 and zoo resnet50 at tiny sizes: each
gives the gradients of the same model without checkpointing, bit for bit, and the model stays on its fast path.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    apply_activation_checkpointing,
    checkpoint_wrapper,
)
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

import hndl
from hndl.torch import Block

IMPLS = [CheckpointImpl.NO_REENTRANT, CheckpointImpl.REENTRANT]


def tiny_gpt2() -> hndl.GraphModule:
    torch.manual_seed(0)
    graph = hndl.zoo.get("gpt2", vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=2, dropout=0.0)
    return hndl.build(graph)


def tiny_resnet50() -> hndl.GraphModule:
    torch.manual_seed(0)
    graph = hndl.zoo.get("resnet50", layers1=1, layers2=1, layers3=1, layers4=1, width=4, num_classes=5)
    return hndl.build(graph)


def gpt2_inputs(model: hndl.GraphModule) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return model.example_inputs(B=2, T=8)


def resnet_inputs() -> tuple[torch.Tensor, ...]:
    torch.manual_seed(1)
    return (torch.randn(2, 3, 32, 32, requires_grad=True),)


def gradients(call: Any, model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict[str, torch.Tensor]:
    """The gradient of every parameter (by ``state_dict`` name) and of each floating input, after one backward."""
    model.zero_grad(set_to_none=True)
    for x in inputs:
        x.grad = None
    call(*inputs).float().square().sum().backward()
    found = {name.replace("._checkpoint_wrapped_module", ""): p.grad.clone() for name, p in model.named_parameters()}
    found.update({f"input{i}": x.grad.clone() for i, x in enumerate(inputs) if x.grad is not None})
    return found


def non_reentrant(model: nn.Module, early_stop: bool) -> Any:
    """``checkpoint(model, *x, use_reentrant=False)`` with early stop on or off. The context manager, not the
    ``early_stop=`` argument: torch 2.4's ``checkpoint`` has no such argument and passes it on to the model."""

    def call(*x: torch.Tensor) -> torch.Tensor:
        with set_checkpoint_early_stop(early_stop):
            return checkpoint(model, *x, use_reentrant=False)

    return call


def assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    unequal = [name for name in want if not torch.equal(got[name], want[name])]
    assert not unequal


@pytest.mark.parametrize("early_stop", [True, False])
def test_checkpoint_non_reentrant_stop_recomputation_is_not_a_layer_failure(early_stop: bool) -> None:
    # Was E_RUNTIME "linear 'lm_head': the layer failed ...: _StopRecomputationError" in backward.
    model = tiny_gpt2()
    inputs = gpt2_inputs(model)
    want = gradients(model, model, inputs)
    got = gradients(non_reentrant(model, early_stop), model, inputs)
    assert_same(got, want)


def test_checkpoint_reentrant_on_resnet50() -> None:
    model = tiny_resnet50()
    inputs = resnet_inputs()
    want = gradients(model, model, inputs)
    got = gradients(lambda *x: checkpoint(model, *x, use_reentrant=True), model, inputs)
    assert_same(got, want)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_of_model_inside_user_module(use_reentrant: bool) -> None:
    class Outer(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner
            self.scale = nn.Parameter(torch.tensor(0.5))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x * self.scale)

    outer = Outer(tiny_resnet50())
    inputs = resnet_inputs()
    want = gradients(outer, outer, inputs)
    got = gradients(lambda *x: checkpoint(outer, *x, use_reentrant=use_reentrant), outer, inputs)
    assert_same(got, want)


def test_checkpoint_stays_on_the_fast_path() -> None:
    model = tiny_gpt2()
    inputs = gpt2_inputs(model)
    gradients(model, model, inputs)
    before = model.validations
    for _ in range(2):
        gradients(non_reentrant(model, early_stop=True), model, inputs)
    assert model.validations == before


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_apply_activation_checkpointing_on_blocks_is_not_a_replaced_layer(impl: CheckpointImpl) -> None:
    # Was E_RUNTIME "submodule 'nodes.n_h.0' was replaced: the build made Block, now it is CheckpointWrapper".
    model = tiny_gpt2()
    inputs = gpt2_inputs(model)
    want = gradients(model, model, inputs)
    keys = list(model.state_dict())
    wrapped = copy.deepcopy(model)
    apply_activation_checkpointing(
        wrapped,
        checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, checkpoint_impl=impl),
        check_fn=lambda m: isinstance(m, Block),
    )
    assert type(wrapped.transformer.h[0]).__name__ == "CheckpointWrapper"
    assert_same(gradients(wrapped, wrapped, inputs), want)
    assert list(wrapped.state_dict()) == keys  # the wrapper's own hooks strip its prefix
    validations = wrapped.validations
    assert_same(gradients(wrapped, wrapped, inputs), want)
    assert wrapped.validations == validations


@pytest.mark.parametrize("impl", IMPLS, ids=lambda i: i.name)
def test_apply_activation_checkpointing_on_a_layer_class(impl: CheckpointImpl) -> None:
    model = tiny_resnet50()
    inputs = resnet_inputs()
    want = gradients(model, model, inputs)
    wrapped = copy.deepcopy(model)
    apply_activation_checkpointing(
        wrapped,
        checkpoint_wrapper_fn=lambda m: checkpoint_wrapper(m, checkpoint_impl=impl),
        check_fn=lambda m: isinstance(m, nn.Conv2d),
    )
    assert_same(gradients(wrapped, wrapped, inputs), want)


def test_checkpoint_wrapper_on_one_block_validates_its_layers() -> None:
    # The wrapped block's layers are still checked on a new signature: a broken layer inside is named.
    model = tiny_gpt2()
    inputs = gpt2_inputs(model)
    model.transformer.h[1] = checkpoint_wrapper(model.transformer.h[1])
    model(*inputs).sum().backward()
    inner = model.transformer.h[1]._checkpoint_wrapped_module
    inner.mlp.c_fc.weight = nn.Parameter(torch.randn(5, 32))
    with pytest.raises(hndl.HndlError) as info:
        model(*inputs)
    assert info.value.code == "E_RUNTIME"
    assert "transformer.h.1.mlp.c_fc.weight" in str(info.value)


def test_checkpoint_wrapper_survives_half_and_deepcopy() -> None:
    model = tiny_resnet50()
    model.nodes.n_layer1[0] = checkpoint_wrapper(model.nodes.n_layer1[0])
    inputs = resnet_inputs()
    want = gradients(model, model, inputs)
    clone = copy.deepcopy(model)
    assert_same(gradients(clone, clone, inputs), want)
    doubled = copy.deepcopy(model).double()
    assert doubled(inputs[0].double()).dtype == torch.float64


def test_offload_wrapper_on_a_block_is_seen_through_too() -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import offload_wrapper

    model = tiny_gpt2()
    inputs = gpt2_inputs(model)
    want = gradients(model, model, inputs)
    model.transformer.h[0] = offload_wrapper(model.transformer.h[0])
    assert_same(gradients(model, model, inputs), want)
