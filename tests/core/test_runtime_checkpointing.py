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


def test_recomputing_a_batchnorm_block_moves_its_statistics_again() -> None:
    # Documented limit, as with torch.utils.checkpoint: backward runs a checkpointed block's forward again, in
    # train mode, so its BatchNorm running statistics are updated twice per step.
    torch.manual_seed(0)
    graph = hndl.zoo.get("resnet50", layers1=1, layers2=1, layers3=1, layers4=1, width=4, num_classes=5)
    model = hndl.build(graph)
    model.checkpointing(["layer1"])
    bn = model.nodes.n_layer1[0].n_bn1
    model(torch.randn(2, 3, 32, 32)).sum().backward()
    assert int(bn.num_batches_tracked) == 2
    stem = model.nodes.n_bn1
    assert int(stem.num_batches_tracked) == 1
