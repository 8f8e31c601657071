"""What one training step holds in memory, for the summary: parameters, gradients, optimizer state, activations.

Parameters, gradients and optimizer state are read from the model's parameters (each tensor once, tied weights
once; a frozen parameter has no gradient and no state). The optimizer's state is what torch's optimizers keep per
trainable parameter, in its dtype: none for plain SGD, a momentum buffer for SGD with momentum, two moments and
a scalar step for Adam and AdamW. Activations are :mod:`hndl._memory`'s estimate of the peak kept for backward,
without checkpointing and with the model's current checkpointing. No torch import here (the summary must not
import it); the model's tensors are only asked their sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import _memory
from ._errors import HndlError, Problem
from ._plan import Plan
from .naming import suggestion

__all__ = ["OPTIMIZERS", "TrainingMemory", "step_weight_bytes", "training_memory"]

#: Per optimizer: (state tensors per trainable parameter, each its size; bytes per parameter tensor besides).
OPTIMIZERS: Mapping[str, tuple[int, int]] = {
    "sgd": (0, 0),
    "sgd-momentum": (1, 0),  # momentum_buffer
    "adam": (2, 4),  # exp_avg, exp_avg_sq, and ``step``: a float32 scalar tensor per parameter
    "adamw": (2, 4),
}


@dataclass(frozen=True)
class TrainingMemory:
    """The memory of one training step, in bytes (``Summary.training``).

    Attributes:
        optimizer: the optimizer its state is counted for (a key of :data:`OPTIMIZERS`).
        parameter_bytes: every parameter, frozen ones too.
        gradient_bytes: a gradient per trainable parameter, in its dtype.
        optimizer_bytes: the optimizer's state.
        activation_bytes: the estimated activation peak without checkpointing (None while a dim is unbound).
        checkpointed_activation_bytes: the same with :attr:`checkpointed` recomputed (None while a dim is unbound).
        checkpointed: the subgraph uses the model recomputes now (``GraphModule.checkpointed``).
    """

    optimizer: str
    parameter_bytes: int
    gradient_bytes: int
    optimizer_bytes: int
    activation_bytes: int | None
    checkpointed_activation_bytes: int | None
    checkpointed: tuple[str, ...]

    @property
    def total_bytes(self) -> int | None:
        """Parameters, gradients, optimizer state and activations with the current checkpointing."""
        if self.checkpointed_activation_bytes is None:
            return None
        return self.parameter_bytes + self.gradient_bytes + self.optimizer_bytes + self.checkpointed_activation_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "optimizer": self.optimizer,
            "parameter_bytes": self.parameter_bytes,
            "gradient_bytes": self.gradient_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activation_bytes": self.activation_bytes,
            "checkpointed_activation_bytes": self.checkpointed_activation_bytes,
            "checkpointed": list(self.checkpointed),
            "total_bytes": self.total_bytes,
        }

    def lines(self) -> list[str]:
        """The summary's training block: one line per part, then the total."""

        def amount(value: int | None) -> str:
            return "unknown: bind every dim" if value is None else f"{value:,} B"

        states, _ = OPTIMIZERS[self.optimizer]
        which = ", ".join(self.checkpointed) if self.checkpointed else "none"
        rows = [
            ("parameters", amount(self.parameter_bytes), ""),
            ("gradients", amount(self.gradient_bytes), ""),
            ("optimizer", amount(self.optimizer_bytes), f"({states} state{'' if states == 1 else 's'} per parameter)"),
            ("activations", amount(self.activation_bytes), "(kept for backward, estimated peak)"),
            ("checkpointed", amount(self.checkpointed_activation_bytes), f"(recomputing: {which})"),
            ("total", amount(self.total_bytes), "(with the current checkpointing)"),
        ]
        return [f"training:    one step with {self.optimizer}"] + [
            f"  {label + ':':<14}{value}" + (f" {after}" if after and value[0].isdigit() else "")
            for label, value, after in rows
        ]


def step_weight_bytes(model: Any, plan: Plan) -> list[int]:
    """Per step of ``plan``, the bytes of its layer's trainable parameters: the gradient its backward makes
    before adding it to ``.grad`` (a tied weight counts at each layer that uses it: each makes its own).

    A step's ``node.path`` is its layer's path from the GraphModule (``("nodes", "n_fc")``, or a ``module_path``
    such as ``("model", "layers", "0", "mlp", "gate_proj")``), so the layer is looked up from the model itself,
    through any activation wrapper on the way (``node_module``)."""
    sizes = []
    for step in plan.steps:
        layer = model.node_module(step.node.path)
        params = () if layer is None else layer.parameters()
        sizes.append(sum(p.numel() * p.element_size() for p in params if p.requires_grad))
    return sizes


def training_memory(model: Any, env: Mapping[str, int], optimizer: str, unbound: bool) -> TrainingMemory:
    """The training memory of ``model`` (a built GraphModule) at the dims ``env``; ``unbound`` says a symbol of
    the inputs has no size, so activations are unknown.

    Raises:
        HndlError: E_INPUT for an optimizer that is not one of :data:`OPTIMIZERS`.
    """
    key = optimizer.lower().replace("_", "-") if isinstance(optimizer, str) else optimizer
    if key not in OPTIMIZERS:
        raise HndlError(
            Problem(
                "E_INPUT",
                f"no optimizer {optimizer!r} to count the state of",
                expected=", ".join(OPTIMIZERS),
                actual=repr(optimizer),
                hint=suggestion(str(optimizer), list(OPTIMIZERS)),
            )
        )
    params = list({id(p): p for p in model.parameters()}.values())
    trainable = [p for p in params if p.requires_grad]
    states, per_tensor = OPTIMIZERS[key]
    grad_bytes = sum(p.numel() * p.element_size() for p in trainable)
    sizes = {p.element_size() for p in params if p.is_floating_point()}
    float_bytes = sizes.pop() if len(sizes) == 1 else 4
    plain = checkpointed = None
    chosen: frozenset[int] = getattr(model, "_checkpointed", frozenset())
    plan: Plan = model.plan
    if not unbound:
        acts = _memory.activations(plan, env, float_bytes, step_weight_bytes(model, plan))
        plain = _memory.peak_bytes(plan, acts)
        checkpointed = _memory.peak_bytes(plan, acts, chosen)
    return TrainingMemory(
        optimizer=key,
        parameter_bytes=sum(p.numel() * p.element_size() for p in params),
        gradient_bytes=grad_bytes,
        optimizer_bytes=states * grad_bytes + per_tensor * len(trainable),
        activation_bytes=plain,
        checkpointed_activation_bytes=checkpointed,
        checkpointed=tuple(plan.groups[i].qualname for i in sorted(chosen, key=lambda i: plan.groups[i].start)),
    )
