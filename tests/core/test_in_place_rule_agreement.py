"""The fast path's generated call and a block run through its ``forward`` write into the same operands while
gradients are recorded: both follow one rule (hndl/torch/_in_place.py), the root graph through ``in_place_steps``
and a checkpointed block through ``_block_in_place``. Each graph below is built once as a model's top graph and
once as a checkpointed ``graph`` node's block; the steps that may write, the operand each writes into, and the
writes one training step really makes must agree, and be the ones the rule promises."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import torch

import hndl
from hndl.torch import _block_in_place, _blocks
from hndl.torch._in_place import in_place_steps
from hndl.torch._runtime import leaves

# name -> (the inner graph's nodes, its outputs, {node: the operand it writes into while gradients are recorded})
GRAPHS: dict[str, tuple[str, list[str], dict[str, int]]] = {
    "relu of a value that is also an output": (
        "h: {op: linear, in: x, out_features: 4}\nr: {op: relu, in: h}",
        ["h", "r"],
        {},
    ),
    "relu of an input": ("r: {op: relu, in: x}", ["r"], {}),
    "relu of a linear under grad": (
        "h: {op: linear, in: x, out_features: 4}\nr: {op: relu, in: h}\no: {op: linear, in: r, out_features: 4}",
        ["o"],
        {"r": 0},
    ),
    "add of a linear and the input": (
        "h: {op: linear, in: x, out_features: 4}\na: {op: add, in: [h, x]}",
        ["a"],
        {"a": 0},
    ),
    "add of a sigmoid, kept for backward": (
        "h: {op: linear, in: x, out_features: 4}\ns: {op: sigmoid, in: h}\na: {op: add, in: [s, x]}",
        ["a"],
        {},
    ),
    "add into the operand whose producer keeps nothing of it": (
        "h: {op: linear, in: x, out_features: 4}\nr: {op: relu, in: h}\ng: {op: linear, in: x, out_features: 4}\n"
        "a: {op: add, in: [r, g]}",
        ["a"],
        {"r": 0, "a": 1},
    ),
    "a value two steps read": (
        "h: {op: linear, in: x, out_features: 4}\nr: {op: relu, in: h}\na: {op: add, in: [h, r]}",
        ["a"],
        {},
    ),
}


def _spec(nodes: str, outputs: list[str], *, as_block: bool) -> str:
    inner = textwrap.indent(nodes, "  " * (3 if as_block else 1))
    if not as_block:
        return f"hndl: 1\ninputs:\n  x: {{shape: [B, 4]}}\nnodes:\n{inner}\noutputs: {outputs}\n"
    names = ["blk"] if len(outputs) == 1 else [f"blk.{i}" for i in range(len(outputs))]
    return (
        "hndl: 1\ninputs:\n  x: {shape: [B, 4]}\nnodes:\n  blk: {op: graph, in: x, graph: inner, checkpoint: true}\n"
        f"outputs: {names}\ngraphs:\n  inner:\n    inputs:\n      x: {{shape: [B, 4]}}\n    nodes:\n{inner}\n"
        f"    outputs: {outputs}\n"
    )


def _build(spec: str) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.loads(spec)).train()


def _root_choice(model: hndl.GraphModule) -> dict[str, int]:
    steps = in_place_steps(model.plan, leaves(model), model._runtime.forms, model._runtime.hooked)
    return {model.plan.steps[i].node.name: s.operand for i, s in steps.items() if s.with_grad}


def _block_choice(model: hndl.GraphModule) -> dict[str, int]:
    program = model.nodes.n_blk.__dict__["_hndl_program"]
    return {item[4].node.name: operand for item, (operand, _) in zip(program.items, program.in_place) if operand >= 0}


class _InPlaceKernels(torch.utils._python_dispatch.TorchDispatchMode):
    """The in-place ReLUs and adds a forward runs, by op."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten.relu_.default:
            self.ops.append("relu")
        elif func is torch.ops.aten.add_.Tensor:
            self.ops.append("add")
        return func(*args, **(kwargs or {}))


def _loss(out: Any) -> torch.Tensor:
    return sum(o.square().sum() for o in (out if isinstance(out, tuple) else (out,)))  # type: ignore[return-value]


@pytest.mark.parametrize("name", list(GRAPHS))
def test_the_fast_path_and_a_block_choose_the_same_in_place_writes(name: str) -> None:
    nodes, outputs, expected = GRAPHS[name]
    root = _build(_spec(nodes, outputs, as_block=False))
    block = _build(_spec(nodes, outputs, as_block=True))
    assert _root_choice(root) == expected
    assert _block_choice(block) == expected


@pytest.mark.parametrize("name", list(GRAPHS))
def test_a_training_step_writes_the_same_steps_in_place_on_both_paths(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes, outputs, expected = GRAPHS[name]
    root = _build(_spec(nodes, outputs, as_block=False))
    block = _build(_spec(nodes, outputs, as_block=True))
    block.load_state_dict({f"nodes.n_blk.{k.removeprefix('nodes.')}": v for k, v in root.state_dict().items()})
    x = torch.randn(3, 4, requires_grad=True)
    root(x), block(x)  # the first calls validate, running each step with its checks instead

    with _InPlaceKernels() as kernels:
        out = root(x)
    _loss(out).backward()
    written: list[str] = []
    original = _block_in_place.write
    monkeypatch.setattr(_blocks, "write", lambda op, args, k: written.append(op) or original(op, args, k))
    block_out = block(x)
    in_forward = list(written)  # (the checkpoint's recomputation may stop before the block's last step)
    _loss(block_out).backward()

    assert sorted(kernels.ops) == sorted(_ops_of(root, expected))
    assert sorted(in_forward) == sorted(kernels.ops)
    for a, b in zip(_tensors(out), _tensors(block_out)):
        assert torch.equal(a, b)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(root.parameters(), block.parameters()))


def _tensors(out: Any) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)


def _ops_of(model: hndl.GraphModule, chosen: dict[str, int]) -> list[str]:
    """The op of each node in ``chosen``."""
    return [step.node.op for step in model.plan.steps if step.node.name in chosen]
