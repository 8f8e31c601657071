"""Activation checkpointing in the graph (issue 26): ``checkpoint: true`` on a subgraph use, the runtime switch
``model.checkpointing(...)`` with names or a byte budget, and what they leave unchanged (the checks, eval)."""

from __future__ import annotations

import copy
import pickle
import textwrap

import jsonschema
import pytest
import torch
from torch import nn

import hndl
from hndl.torch import _checkpointing

SPEC = textwrap.dedent(
    """\
    hndl: 1
    name: stack
    inputs:
      x: {shape: [B, 8]}
    nodes:
      stem: {op: linear, in: x, out_features: 16}
      blocks: {op: graph, in: stem, graph: block, repeat: 3, checkpoint: true}
      head: {op: linear, in: blocks, out_features: 4}
    outputs: [head]
    graphs:
      block:
        inputs:
          h: {shape: [B, 16]}
        nodes:
          up: {op: linear, in: h, out_features: 64}
          act: {op: gelu, in: up}
          drop: {op: dropout, in: act, p: 0.2}
          down: {op: linear, in: drop, out_features: 16}
          residual: {op: add, in: [h, down]}
        outputs: [residual]
    """
)


def stack(checkpoint: bool = True) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.loads(SPEC if checkpoint else SPEC.replace(", checkpoint: true", "")))


def tiny_gpt2() -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("gpt2", vocab_size=97, n_positions=16, n_embd=32, n_layer=3, n_head=2, dropout=0.1))


def gradients(model: nn.Module, *inputs: torch.Tensor) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    torch.manual_seed(7)  # the same dropout masks for every run
    model(*inputs).square().sum().backward()
    return [p.grad.clone() for p in model.parameters()]


def saved_bytes(model: nn.Module, *inputs: torch.Tensor) -> int:
    """What forward actually leaves for backward: the bytes of every tensor autograd saves, parameters aside."""
    parameters = {p.data_ptr() for p in model.parameters()}
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.data_ptr() not in parameters:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(*inputs)
    return sum(storages.values())


X = torch.randn(4, 8)


# --- the spec flag ------------------------------------------------------------------------------------------


def test_spec_checkpoint_flag_checkpoints_every_repetition() -> None:
    assert stack().checkpointed == ("blocks.0", "blocks.1", "blocks.2")
    assert stack(checkpoint=False).checkpointed == ()


def test_spec_checkpoint_flag_round_trips_and_meets_the_schema() -> None:
    graph = hndl.loads(SPEC)
    text = hndl.dumps(graph)
    assert "checkpoint: true" in text
    assert hndl.build(hndl.loads(text)).checkpointed == ("blocks.0", "blocks.1", "blocks.2")
    import yaml

    jsonschema.validate(yaml.safe_load(text), hndl.spec_schema())


def test_python_checkpoint_flag_on_a_graph_node() -> None:
    block = hndl.Graph("block")
    h = block.input("h", ("B", 8))
    block.output(block.add("linear", h, name="l", out_features=8))
    g = hndl.Graph("g")
    x = g.input("x", ("B", 8))
    g.output(g.add("graph", x, name="stem", graph=block, checkpoint=True))
    assert hndl.build(g).checkpointed == ("stem",)


def test_checkpoint_flag_on_a_layer_is_an_error_naming_the_node() -> None:
    text = SPEC.replace(
        "head: {op: linear, in: blocks, out_features: 4}",
        "head: {op: linear, in: blocks, out_features: 4, checkpoint: true}",
    )
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(text))
    problem = info.value.problems[0]
    assert (problem.code, problem.node, problem.op) == ("E_PARAM", "head", "linear")
    assert "only a graph node (a subgraph use or repeat) can be checkpointed" in problem.message
    assert "checkpoint: true" in (problem.hint or "")


def test_checkpoint_flag_must_be_a_bool() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(SPEC.replace("checkpoint: true", "checkpoint: 3")))
    assert info.value.code == "E_PARAM"
    assert "checkpoint" in str(info.value)


# --- what checkpointing changes and what it does not -----------------------------------------------------------


def test_checkpointed_gradients_equal_those_without_with_dropout() -> None:
    plain, checkpointed = stack(checkpoint=False), stack()
    assert all(torch.equal(a, b) for a, b in zip(gradients(plain, X), gradients(checkpointed, X)))


def test_gpt2_checkpointing_every_block_keeps_gradients_and_saves_less() -> None:
    model = tiny_gpt2()
    tokens = model.example_inputs(B=2, T=8)
    want, without = gradients(model, *tokens), saved_bytes(model, *tokens)
    assert model.checkpointing(["h"]) == ("h.0", "h.1", "h.2")
    assert all(torch.equal(a, b) for a, b in zip(want, gradients(model, *tokens)))
    assert saved_bytes(model, *tokens) < without / 2


def test_resnet50_checkpointing_one_stage_keeps_gradients() -> None:
    torch.manual_seed(0)
    model = hndl.build(hndl.zoo.get("resnet50", layers1=2, layers2=1, layers3=1, layers4=1, width=4, num_classes=5))
    image = torch.randn(2, 3, 32, 32)
    want = gradients(model, image)
    assert model.checkpointing(["layer1.1", "layer2"]) == ("layer1.1", "layer2.0")
    assert all(torch.equal(a, b) for a, b in zip(want, gradients(model, image)))


def test_switching_needs_no_rebuild_and_no_validation() -> None:
    model = stack(checkpoint=False)
    gradients(model, X)
    validations = model.validations
    for setting in (["blocks"], None, ["blocks.1"]):
        model.checkpointing(setting)
        gradients(model, X)
    assert model.validations == validations
    assert "# graph 'blocks.1'" in model.code


def test_runtime_check_still_finds_a_change_while_checkpointing() -> None:
    model = stack()
    gradients(model, X)
    model.nodes.n_blocks[1].n_up.weight = nn.Parameter(torch.randn(3, 16))
    with pytest.raises(hndl.HndlError) as info:
        model(X)
    assert info.value.code == "E_RUNTIME"
    assert "nodes.n_blocks.1.n_up.weight" in str(info.value)


def test_a_failing_layer_in_a_checkpointed_block_is_named() -> None:
    model = stack()
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(4, 8).double())  # the first call validates, through the checkpointed blocks
    assert info.value.code == "E_INPUT"
    model(X)
    model.nodes.n_blocks[2].n_down.forward = lambda x: (_ for _ in ()).throw(ValueError("boom"))  # type: ignore
    with pytest.raises(hndl.HndlError) as info:
        model(X).sum().backward()
    assert "blocks.2.down" in str(info.value)


def test_no_grad_runs_as_without_checkpointing(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = _checkpointing.checkpoint
    monkeypatch.setattr(_checkpointing, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    plain, checkpointed = stack(checkpoint=False).eval(), stack().eval()
    with torch.no_grad():
        assert torch.equal(plain(X), checkpointed(X))
        assert torch.equal(plain(X), checkpointed(X))
    assert calls == []
    checkpointed(X)
    assert calls == [1, 1, 1]


def test_setting_survives_deepcopy_and_pickle() -> None:
    model = stack(checkpoint=False)
    model.checkpointing(["blocks.0"])
    assert copy.deepcopy(model).checkpointed == ("blocks.0",)
    clone = pickle.loads(pickle.dumps(model))
    assert clone.checkpointed == ("blocks.0",)
    assert all(torch.equal(a, b) for a, b in zip(gradients(model, X), gradients(clone, X)))


# --- a budget ---------------------------------------------------------------------------------------------------


def test_budget_chooses_fewer_segments_for_a_larger_budget() -> None:
    model = tiny_gpt2()
    assert model.checkpointing(budget=10**12, B=8, T=16) == ()
    smallest = _smallest_budget(model, B=8, T=16)
    # Not h.2: the last block's backward runs first, right after forward, so recomputing it lowers no peak.
    assert model.checkpointing(budget=smallest, B=8, T=16) == ("h.0", "h.1")
    between = model.checkpointing(budget=smallest * 2, B=8, T=16)
    assert 0 < len(between) < 2


def _smallest_budget(model: hndl.GraphModule, **dims: int) -> int:
    with pytest.raises(hndl.HndlError) as info:
        model.checkpointing(budget=0, **dims)
    return int(info.value.problems[0].expected.removeprefix(">= ").removesuffix(" bytes").replace(",", ""))


def test_budget_that_cannot_be_met_names_the_smallest_feasible_budget() -> None:
    model = tiny_gpt2()
    model.checkpointing(["h.1"])
    with pytest.raises(hndl.HndlError) as info:
        model.checkpointing(budget=1000, B=2, T=16)
    problem = info.value.problems[0]
    assert problem.code == "E_PARAM"
    smallest = _smallest_budget(model, B=2, T=16)
    assert f"the smallest feasible budget is {smallest:,} bytes" in problem.message
    assert model.checkpointed == ("h.1",)  # unchanged by the error
    model(*model.example_inputs(B=2, T=16))  # and usable


def test_budget_lowers_the_saved_activations() -> None:
    model = tiny_gpt2()
    tokens = model.example_inputs(B=2, T=16)
    without = saved_bytes(model, *tokens)
    model.checkpointing(budget=_smallest_budget(model, B=2, T=16), B=2, T=16)
    assert saved_bytes(model, *tokens) < without / 2


@pytest.mark.parametrize(
    ("kwargs", "code", "text"),
    [
        ({"nodes": ["blokcs"]}, "E_PARAM", "has no subgraph use 'blokcs'"),
        ({"nodes": ["head"]}, "E_PARAM", "it is a single layer"),
        ({"nodes": ["blocks"], "budget": 10}, "E_PARAM", "not both"),
        ({"budget": "1GB", "B": 4}, "E_PARAM", "must be a number of bytes"),
        ({"budget": 10**9, "Q": 4}, "E_INPUT", "no dim 'Q'"),
        ({"budget": 10**9, "B": 0}, "E_INPUT", "must be a positive int"),
        ({"budget": 10**9}, "E_PARAM", "unknown under the dims given"),
        ({"B": 4}, "E_PARAM", "without budget="),
    ],
)
def test_bad_checkpointing_arguments(kwargs: dict[str, object], code: str, text: str) -> None:
    model = stack()
    with pytest.raises(hndl.HndlError) as info:
        model.checkpointing(**kwargs)  # type: ignore[arg-type]
    assert info.value.code == code
    assert text in str(info.value)
    assert model.checkpointed == ("blocks.0", "blocks.1", "blocks.2")


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(hndl.HndlError) as info:
        stack().checkpointing(["blokcs"])
    assert "blocks" in (info.value.problems[0].hint or "")


# --- documented limits and compositions --------------------------------------------------------------------------


def test_torch_compile_runs_without_recomputing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Documented limit: the compiled call runs each block as a plain call.
    calls = []
    real = _checkpointing.checkpoint
    monkeypatch.setattr(_checkpointing, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    plain, checkpointed = stack(checkpoint=False), stack()
    want = gradients(plain, X)
    compiled = torch.compile(checkpointed, backend="eager")
    assert all(torch.equal(a, b) for a, b in zip(want, gradients(compiled, X)))
    assert calls == []


def test_a_hooked_checkpointed_block_fires_its_hook_inside_the_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    # As FSDP2's fully_shard per block with checkpointing: the block's pre-hook (where FSDP2 gathers the
    # parameters) runs in forward and again when backward recomputes the block.
    calls = []
    real = _checkpointing.checkpoint
    monkeypatch.setattr(_checkpointing, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    model = stack()
    fired = []
    model.nodes.n_blocks[1].register_forward_pre_hook(lambda *_: fired.append(1))
    want = gradients(stack(checkpoint=False), X)
    assert all(torch.equal(a, b) for a, b in zip(want, gradients(model, X)))
    assert calls == [1, 1, 1]
    assert fired == [1, 1]


def test_functional_call_gradients_with_checkpointing_use_the_tensors_swapped_in() -> None:
    # Was: backward after torch.func.functional_call recomputed the blocks with the model's own weights (put back
    # by then), so the gradients of the tensors swapped in were wrong.
    want = []
    for checkpoint in (False, True):
        model = stack(checkpoint=checkpoint)
        swapped = {k: (v.detach() * 1.5).requires_grad_() for k, v in model.named_parameters()}
        torch.manual_seed(7)
        torch.func.functional_call(model, swapped, (X,)).square().sum().backward()
        want.append([swapped[k].grad for k in sorted(swapped)])
    assert all(torch.equal(a, b) for a, b in zip(*want))


NORM_SPEC = textwrap.dedent(
    """\
    hndl: 1
    name: norms
    inputs:
      x: {shape: [B, 3, 8, 8]}
    nodes:
      stem: {op: conv2d, in: x, out_channels: 4, kernel_size: 3, padding: 1}
      blocks: {op: graph, in: stem, graph: block, repeat: 2}
      head: {op: mean, in: blocks, dim: [2, 3]}
    outputs: [head]
    graphs:
      block:
        inputs:
          h: {shape: [B, 4, 8, 8]}
        nodes:
          conv: {op: conv2d, in: h, out_channels: 4, kernel_size: 3, padding: 1}
          ema: {op: batchnorm2d, in: conv, num_features: 4}
          act: {op: relu, in: ema}
          conv2: {op: conv2d, in: act, out_channels: 4, kernel_size: 1}
          cumulative: {op: batchnorm2d, in: conv2, num_features: 4, momentum: null}
          residual: {op: add, in: [h, cumulative]}
        outputs: [residual]
    """
)


def norms(checkpointed: bool) -> hndl.GraphModule:
    torch.manual_seed(0)
    model = hndl.build(hndl.loads(NORM_SPEC))
    if checkpointed:
        model.checkpointing(["blocks"])
    return model


def buffers(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.named_buffers()}


def test_recomputed_batchnorm_moves_its_running_statistics_once_per_step() -> None:
    # Was: backward's recomputation ran each BatchNorm again in train mode, so its running statistics moved twice
    # per step (and a cumulative one counted the batch twice), as they do under torch.utils.checkpoint.
    plain, checkpointed = norms(False), norms(True)
    torch.manual_seed(1)
    for x in torch.randn(3, 2, 3, 8, 8):
        want = gradients(plain, x)
        assert all(torch.equal(a, b) for a, b in zip(want, gradients(checkpointed, x)))
        assert all(torch.equal(a, b) for a, b in zip(buffers(plain).values(), buffers(checkpointed).values()))
    assert int(checkpointed.nodes.n_blocks[1].n_cumulative.num_batches_tracked) == 3


def test_zoo_resnet50_checkpointed_statistics_equal_those_without() -> None:
    graph = hndl.zoo.get("resnet50", layers1=1, layers2=1, layers3=1, layers4=1, width=4, num_classes=5)
    torch.manual_seed(0)
    plain = hndl.build(graph)
    checkpointed = copy.deepcopy(plain)
    checkpointed.checkpointing(["layer1", "layer2", "layer3", "layer4"])
    image = torch.randn(2, 3, 32, 32)
    assert all(torch.equal(a, b) for a, b in zip(gradients(plain, image), gradients(checkpointed, image)))
    assert buffers(plain).keys() == buffers(checkpointed).keys()
    assert all(torch.equal(a, b) for a, b in zip(buffers(plain).values(), buffers(checkpointed).values()))
    assert int(checkpointed.nodes.n_layer1[0].n_bn1.num_batches_tracked) == 1


def test_statistics_swapped_in_by_functional_call_move_once() -> None:
    # The recomputation runs with the buffers the forward was given, not the model's own: those are the ones
    # put back, and the model's own stay as they were.
    moved = []
    for checkpointed in (False, True):
        model = norms(checkpointed)
        own = buffers(model)
        swapped = {k: v.clone() for k, v in model.named_buffers()}
        torch.manual_seed(3)
        torch.func.functional_call(model, swapped, (torch.randn(2, 3, 8, 8),)).square().sum().backward()
        assert all(torch.equal(own[k], v) for k, v in model.named_buffers())
        moved.append(swapped)
    assert all(torch.equal(moved[0][k], moved[1][k]) for k in moved[0])
    assert int(moved[1]["nodes.n_blocks.0.n_cumulative.num_batches_tracked"]) == 1


def test_instance_norm_in_a_module_node_moves_its_statistics_once() -> None:
    spec = NORM_SPEC.replace(
        "ema: {op: batchnorm2d, in: conv, num_features: 4}",
        'ema: {op: module, in: conv, target: "torch.nn:InstanceNorm2d", '
        "kwargs: {num_features: 4, track_running_stats: true}}",
    )
    plain, checkpointed = (hndl.build(hndl.loads(spec, allow_imports=True)) for _ in range(2))
    checkpointed.load_state_dict(plain.state_dict())
    checkpointed.checkpointing(["blocks"])
    x = torch.randn(2, 3, 8, 8)
    assert all(torch.equal(a, b) for a, b in zip(gradients(plain, x), gradients(checkpointed, x)))
    assert all(torch.equal(a, b) for a, b in zip(buffers(plain).values(), buffers(checkpointed).values()))
    assert checkpointed.nodes.n_blocks[0].n_ema.running_mean.abs().sum() > 0  # it moved, once


def test_each_recomputation_keeps_the_statistics() -> None:
    # backward(retain_graph=True) twice recomputes each block twice; the forward alone moves the statistics.
    plain, checkpointed = norms(False), norms(True)
    x = torch.randn(2, 3, 8, 8)
    for model in (plain, checkpointed):
        loss = model(x).square().sum()
        loss.backward(retain_graph=True)
        loss.backward()
    assert all(torch.equal(a, b) for a, b in zip(buffers(plain).values(), buffers(checkpointed).values()))
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(plain.parameters(), checkpointed.parameters()))


def test_a_failing_recomputation_puts_the_statistics_back() -> None:
    plain, model = norms(False), norms(True)
    x = torch.randn(2, 3, 8, 8)
    plain(x)  # the forward alone moves the statistics; the failed recomputation must add nothing
    calls = []

    def second_run_fails(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        calls.append(1)
        if len(calls) == 2:  # the recomputation, after its first BatchNorm has run again
            raise RuntimeError("recomputation failed")

    handle = model.nodes.n_blocks[0].n_conv2.register_forward_pre_hook(second_run_fails)
    with pytest.raises(Exception, match="recomputation failed"):
        model(x).sum().backward()
    handle.remove()
    assert len(calls) == 2
    assert all(torch.equal(a, b) for a, b in zip(buffers(plain).values(), buffers(model).values()))
    assert torch.isfinite(gradients(model, x)[0]).all()  # the next step runs


def test_eval_mode_recomputation_uses_the_running_statistics() -> None:
    plain, checkpointed = norms(False), norms(True)
    batch = torch.randn(4, 3, 8, 8)
    for model in (plain, checkpointed):
        gradients(model, batch)  # moves the statistics away from 0 and 1
        model.eval()
    x = torch.randn(2, 3, 8, 8)
    assert all(torch.equal(a, b) for a, b in zip(gradients(plain, x), gradients(checkpointed, x)))
    assert all(torch.equal(a, b) for a, b in zip(buffers(plain).values(), buffers(checkpointed).values()))


class CountingReLU(nn.Module):
    """A layer with state of its own that it changes as it runs: a count of its train-mode calls."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls.add_(1)
        return torch.relu(x)


def test_other_state_a_layer_changes_changes_again_when_recomputed() -> None:
    # Documented limit: only norms' running statistics are put back; a layer's own counter counts the
    # recomputation too.
    model = norms(True)
    model.replace_layer("blocks.0.act", CountingReLU())
    gradients(model, torch.randn(2, 3, 8, 8))
    assert int(model.nodes.n_blocks[0].n_act.calls) == 2
    model.checkpointing(None)
    gradients(model, torch.randn(2, 3, 8, 8))
    assert int(model.nodes.n_blocks[0].n_act.calls) == 3


def test_torch_checkpoint_around_the_model_moves_the_statistics_twice() -> None:
    # Documented limit: torch.utils.checkpoint around a whole GraphModule recomputes it in train mode, and hndl
    # cannot tell torch's recomputation from a forward, so the BatchNorms move twice, as in any torch model.
    model = norms(False)
    x = torch.randn(2, 3, 8, 8)
    torch.utils.checkpoint.checkpoint(model, x, use_reentrant=False).sum().backward()
    assert int(model.nodes.n_blocks[0].n_cumulative.num_batches_tracked) == 2
