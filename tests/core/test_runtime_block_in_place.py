"""A called block (checkpointed, hooked) writes its ReLUs and adds into tensors it made and nobody else reads,
while gradients are recorded, as torchvision's bottleneck does (hndl/torch/_block_in_place.py, SPEC 16.4):
the same values and gradients, never a tensor a caller, a hook or a backward still holds."""

from __future__ import annotations

import textwrap

import pytest
import torch

import hndl
from hndl.torch import _block_in_place, _blocks

SPEC = textwrap.dedent(
    """\
    hndl: 1
    name: residual_stack
    inputs:
      x: {shape: [B, 4, 8, 8]}
    nodes:
      blocks: {op: graph, in: x, graph: block, repeat: 2, checkpoint: true}
      pool: {op: adaptive_avgpool2d, in: blocks, output_size: 1}
      flat: {op: flatten, in: pool}
      head: {op: linear, in: flat, out_features: 3}
    outputs: [head]
    graphs:
      block:
        inputs:
          h: {shape: [B, 4, 8, 8]}
        nodes:
          conv1: {op: conv2d, in: h, out_channels: 4, kernel_size: 3, padding: 1, bias: false}
          bn1: {op: batchnorm2d, in: conv1}
          relu1: {op: relu, in: bn1}
          conv2: {op: conv2d, in: relu1, out_channels: 4, kernel_size: 3, padding: 1, bias: false}
          bn2: {op: batchnorm2d, in: conv2}
          add: {op: add, in: [bn2, h]}
          relu2: {op: relu, in: add}
        outputs: [relu2]
    """
)


def build(spec: str = SPEC) -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.loads(spec)).train()


def gradients(model: hndl.GraphModule, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.square().sum().backward()
    return out.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The steps that wrote in place, by op, while the test ran."""
    seen: list[str] = []
    original = _block_in_place.write

    def counting(op: str, args: list[torch.Tensor], operand: int) -> torch.Tensor:
        seen.append(op)
        return original(op, args, operand)

    monkeypatch.setattr(_blocks, "write", counting)
    return seen


def test_a_checkpointed_block_writes_its_relus_and_add_in_place_with_equal_gradients(writes: list[str]) -> None:
    x = torch.randn(2, 4, 8, 8)
    plain = build(SPEC.replace(", checkpoint: true", ""))
    plain(x)
    expected, expected_grads = gradients(plain, x)
    model = build()  # the same seed: the same weights
    model(x)  # the first call validates, running each step with its checks instead
    writes.clear()
    out, grads = gradients(model, x)
    assert torch.equal(out, expected)
    assert all(torch.equal(a, b) for a, b in zip(grads, expected_grads))
    # Each of the two repetitions writes relu1, add and relu2, in the forward and again when recomputed.
    assert sorted(writes) == sorted(["relu", "add", "relu"] * 4)


def test_the_block_input_is_never_written(writes: list[str]) -> None:
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    kept = x.detach().clone()
    model = build()
    model(x)
    model(x).sum().backward()
    assert torch.equal(x.detach(), kept)
    assert writes  # the block did write, only not into its input


def test_a_kept_hook_output_is_not_overwritten(writes: list[str]) -> None:
    model = build()
    model(torch.randn(2, 4, 8, 8))
    kept: list[torch.Tensor] = []
    bn1 = model.nodes.n_blocks[0].n_bn1
    bn1.register_forward_hook(lambda _m, _i, out: kept.append(out))
    model(torch.randn(2, 4, 8, 8)).sum().backward()
    assert (kept[0] < 0).any()  # batch norm's output, not the ReLU written over it
    assert "relu" in writes  # relu2 of the same block and the other repetition still write


def test_no_write_into_what_a_backward_keeps() -> None:
    # sigmoid keeps its output for backward: the add that reads it must not write into it.
    spec = SPEC.replace("bn2: {op: batchnorm2d, in: conv2}", "bn2: {op: sigmoid, in: conv2}")
    model = build(spec)
    block = model.nodes.n_blocks[0]
    program = block.__dict__["_hndl_program"]
    chosen = {item[4].node.name: operand for item, operand in zip(program.items, program.in_place)}
    assert chosen["add"] == (-1, -1)
    assert chosen["relu1"] != (-1, -1)
    x = torch.randn(2, 4, 8, 8)
    model(x)
    _, grads = gradients(model, x)  # a write into sigmoid's output would fail here, in backward
    plain = build(spec.replace(", checkpoint: true", ""))
    plain.load_state_dict(model.state_dict())
    _, expected = gradients(plain, x)
    assert all(torch.equal(a, b) for a, b in zip(grads, expected))


def test_without_gradients_a_called_block_runs_out_of_place(writes: list[str]) -> None:
    model = build().eval()
    model.nodes.n_blocks[0].register_forward_hook(lambda *_: None)  # the block is called, not written out
    with torch.no_grad():
        model(torch.randn(2, 4, 8, 8))
    assert writes == []


def test_under_a_torch_func_transform_a_called_block_runs_out_of_place(writes: list[str]) -> None:
    model = build().eval()
    model.checkpointing(None)
    model.nodes.n_blocks[0].register_forward_hook(lambda *_: None)
    x = torch.randn(3, 2, 4, 8, 8)
    batched = torch.func.vmap(model)(x)
    assert writes == []
    assert torch.allclose(batched, torch.stack([model(row) for row in x]), atol=1e-6)
