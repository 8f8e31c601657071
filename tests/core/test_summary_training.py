"""The summary's training memory (issue 26): parameters, gradients, optimizer state for a named optimizer, and
the activations kept for backward with and without the model's checkpointing; ``hndl summary --train``."""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl.cli import main


def tiny_gpt2() -> hndl.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.zoo.get("gpt2", vocab_size=97, n_positions=16, n_embd=32, n_layer=3, n_head=2))


def parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in {id(p): p for p in model.parameters()}.values())


@pytest.mark.parametrize(
    ("optimizer", "torch_optimizer"),
    [
        ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1)),
        ("sgd-momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
        ("adam", lambda ps: torch.optim.Adam(ps)),
        ("adamw", lambda ps: torch.optim.AdamW(ps)),
    ],
)
def test_optimizer_state_is_what_torch_keeps(optimizer: str, torch_optimizer: object) -> None:
    model = tiny_gpt2()
    tokens = model.example_inputs(B=2, T=8)
    opt = torch_optimizer(model.parameters())  # type: ignore[operator]
    model(*tokens).sum().backward()
    opt.step()
    kept = sum(t.numel() * t.element_size() for s in opt.state.values() for t in s.values() if torch.is_tensor(t))
    training = model.summary(train=True, optimizer=optimizer, B=2, T=8).training
    assert training is not None
    assert training.optimizer_bytes == kept
    assert training.parameter_bytes == parameter_bytes(model)
    assert training.gradient_bytes == sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())


def test_frozen_parameters_have_no_gradient_or_state() -> None:
    model = tiny_gpt2()
    model.transformer.wpe.weight.requires_grad_(False)
    training = model.summary(train=True, B=2, T=8).training
    frozen = model.transformer.wpe.weight.numel() * 4
    assert training is not None
    assert training.gradient_bytes == parameter_bytes(model) - frozen
    assert training.optimizer_bytes == 2 * training.gradient_bytes + 4 * sum(
        1 for p in {id(p): p for p in model.parameters()}.values() if p.requires_grad
    )


def test_activations_with_and_without_the_current_checkpointing() -> None:
    model = tiny_gpt2()
    plain = model.summary(train=True, B=8, T=16).training
    assert plain is not None
    assert plain.checkpointed == ()
    assert plain.activation_bytes == plain.checkpointed_activation_bytes
    model.checkpointing(["h"])
    checkpointed = model.summary(train=True, B=8, T=16).training
    assert checkpointed is not None
    assert checkpointed.checkpointed == ("h.0", "h.1", "h.2")
    assert checkpointed.activation_bytes == plain.activation_bytes
    assert checkpointed.checkpointed_activation_bytes < plain.activation_bytes / 2  # type: ignore[operator]
    assert checkpointed.total_bytes == (
        checkpointed.parameter_bytes
        + checkpointed.gradient_bytes
        + checkpointed.optimizer_bytes
        + checkpointed.checkpointed_activation_bytes  # type: ignore[operator]
    )


def test_a_budget_the_planner_meets_is_the_summarys_estimate() -> None:
    model = tiny_gpt2()
    full = model.summary(train=True, B=2, T=16).training
    assert full is not None
    assert full.activation_bytes is not None
    budget = full.activation_bytes * 3 // 4
    model.checkpointing(budget=budget, B=2, T=16)
    planned = model.summary(train=True, B=2, T=16).training
    assert planned is not None
    assert planned.checkpointed
    assert planned.checkpointed_activation_bytes <= budget  # type: ignore[operator]


def test_unbound_dims_leave_activations_unknown() -> None:
    training = tiny_gpt2().summary(train=True, B=2).training
    assert training is not None
    assert training.activation_bytes is None
    assert training.total_bytes is None
    assert training.parameter_bytes > 0


def test_summary_without_train_has_no_training_block() -> None:
    table = tiny_gpt2().summary(B=2, T=8)
    assert table.training is None
    assert "training" not in table.totals()
    assert "training:" not in str(table)


def test_unknown_optimizer_is_an_input_error_with_the_known_ones() -> None:
    with pytest.raises(hndl.HndlError) as info:
        tiny_gpt2().summary(optimizer="adamx", B=2, T=8)
    problem = info.value.problems[0]
    assert problem.code == "E_INPUT"
    assert problem.expected == "sgd, sgd-momentum, adam, adamw"
    assert "adam" in (problem.hint or "")


def test_graph_summary_reads_the_spec_checkpoint_flag() -> None:
    graph = hndl.zoo.get("gpt2", vocab_size=97, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    text = hndl.dumps(graph).replace("repeat: $n_layer,", "repeat: $n_layer, checkpoint: true,")
    training = hndl.summary(hndl.loads(text), train=True, B=2, T=16).training
    assert training is not None
    assert training.checkpointed == ("h.0", "h.1")


def test_cli_summary_train(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["summary", "zoo:gpt2", "--dims", "B=4,T=512", "--train", "--optimizer", "sgd-momentum", "--depth", "1"]
    )
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    start = lines.index("training:    one step with sgd-momentum")
    assert [line.split(":")[0].strip() for line in lines[start + 1 : start + 7]] == [
        "parameters",
        "gradients",
        "optimizer",
        "activations",
        "checkpointed",
        "total",
    ]
    assert "  optimizer:    497,759,232 B (1 state per parameter)" in lines


def test_cli_summary_unknown_optimizer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["summary", "zoo:gpt2", "--optimizer", "rmsprop"]) == 1
    assert "E_INPUT: no optimizer 'rmsprop'" in capsys.readouterr().out
