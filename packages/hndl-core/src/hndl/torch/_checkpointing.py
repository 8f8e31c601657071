"""Activation checkpointing planned from the graph: which subgraph uses recompute in backward, and running them so.

A GraphModule keeps a set of checkpointed uses (indices into ``plan.groups``): at build, those of ``graph``
nodes written with ``checkpoint: true``; :meth:`GraphModule.checkpointing` replaces it, with names or with a
byte budget (``hndl._memory.choose``). A checkpointed use is one step of the generated call, like a block a hook
observes (``_blocks.collapse``), and that step runs its block through :class:`Recompute`:
``torch.utils.checkpoint.checkpoint`` (non-reentrant) while gradients are recorded, a plain call otherwise. So
switching needs no rebuild: the call is generated again for the same stores record, and the next call takes
the fast path with every check in place. SPEC 16 is the behaviour.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.modules.batchnorm import _NormBase
from torch.utils.checkpoint import checkpoint

from .. import _memory
from .._errors import HndlError, Problem
from .._plan import Plan
from .._training_memory import step_weight_bytes
from ..naming import excerpt, suggestion
from ._built import BuiltModel

__all__ = ["Recompute", "choose", "float_bytes", "flagged", "names_of", "planned", "resolve", "runners"]


class Recompute:
    """A checkpointed use's step: its block under ``torch.utils.checkpoint`` while gradients are recorded.

    With no gradient recorded (``torch.no_grad``, ``inference_mode``) there is nothing to save and the block is
    called as it is, so evaluation runs exactly as without checkpointing. ``preserve_rng_state`` (torch's
    default) makes the recomputation draw the same dropout masks, so gradients equal those without it.

    The recomputation runs in backward, maybe after ``torch.func.functional_call`` has put the model's own
    tensors back: it would then recompute with other weights than the forward used, and give wrong gradients.
    So the forward hands the checkpoint the block's registered tensors as they are, and a recomputation that
    finds others registered runs the block with those it was given.

    A BatchNorm in train mode moves its running statistics (and counts the batch) each time it runs, and the
    recomputation is a second run of the same batch: torch's checkpointing moves them twice per step. Here what
    a recomputation moves is put back (:func:`_statistics_kept`), so after a step they are what they would be
    without checkpointing."""

    __slots__ = ("block",)

    def __init__(self, block: nn.Module) -> None:
        self.block = block

    def __call__(self, *inputs: Any) -> Any:
        if torch.is_grad_enabled():
            # ``runs`` counts the calls of this checkpoint's function: the forward's, then each recomputation's.
            runs = [0]
            return checkpoint(self._run, runs, _registered(self.block), *inputs, use_reentrant=False)
        return self.block(*inputs)

    forward = __call__  # the generated call's FORWARD form reads ``.forward``

    def _run(self, runs: list[int], tensors: dict[str, torch.Tensor], *inputs: Any) -> Any:
        runs[0] += 1
        if runs[0] == 1:
            return self._call(tensors, inputs)
        with _statistics_kept(self.block, tensors):
            return self._call(tensors, inputs)

    def _call(self, tensors: dict[str, torch.Tensor], inputs: tuple[Any, ...]) -> Any:
        now = _registered(self.block)
        if now.keys() == tensors.keys() and all(now[k] is t for k, t in tensors.items()):
            return self.block(*inputs)
        return functional_call(self.block, tensors, inputs, tie_weights=False, strict=False)


@contextmanager
def _statistics_kept(block: nn.Module, tensors: dict[str, torch.Tensor]) -> Iterator[None]:
    """Put back, when it closes, the running statistics and batch counts of the norms below ``block`` that move
    them (train mode, ``track_running_stats``), as ``tensors`` (what the recomputation runs with) holds them.

    The recomputation itself runs the norms as the forward did, moving the statistics again: it must save for
    backward the same tensors as the forward (torch's checkpoint counts them), which rules out running without
    the running buffers; putting back a few per-channel vectors afterwards costs next to nothing."""
    kept = []
    for name, module in block.named_modules():
        if isinstance(module, _NormBase) and module.training and module.track_running_stats:
            for leaf in ("running_mean", "running_var", "num_batches_tracked"):
                found = tensors.get(f"{name}.{leaf}" if name else leaf)
                if found is not None:
                    kept.append((found, found.clone()))
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in kept:
                buffer.copy_(value)


def _registered(block: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors registered below ``block`` now, by name (a tied tensor under each of its names)."""
    found: dict[str, torch.Tensor] = dict(block.named_parameters(remove_duplicate=False))
    found.update(block.named_buffers(remove_duplicate=False))
    return found


def flagged(plan: Plan) -> frozenset[int]:
    """The uses of ``graph`` nodes written with ``checkpoint: true``."""
    return frozenset(i for i, group in enumerate(plan.groups) if group.node.params.get("checkpoint") is True)


def names_of(plan: Plan, chosen: Iterable[int]) -> tuple[str, ...]:
    """The qualified names of the uses ``chosen``, in step order."""
    return tuple(plan.groups[i].qualname for i in sorted(chosen, key=lambda i: (plan.groups[i].start, i)))


def resolve(plan: Plan, nodes: Sequence[str] | str) -> frozenset[int]:
    """The uses named: a ``graph`` node's name stands for all its uses (``"h"``), a use's for one (``"h.3"``).

    Raises:
        HndlError: E_PARAM for a name that is neither, with the closest name, and for ``nodes`` that is neither a
            name nor a list, tuple or set of names (``checkpointing(5)``: a budget is ``budget=``).
    """
    if isinstance(nodes, str):
        nodes = [nodes]
    if not isinstance(nodes, (list, tuple, set, frozenset)):
        raise HndlError(
            Problem(
                "E_PARAM",
                f"checkpointing takes the names of subgraph uses, and nodes is {excerpt(nodes)}",
                expected="a name, or a list of names ('h', ['h.0', 'h.1']), or None",
                actual=excerpt(nodes),
                hint="a byte budget is a keyword: model.checkpointing(budget=2 * 1024**3, B=8, T=512)"
                if isinstance(nodes, (int, float)) and not isinstance(nodes, bool)
                else None,
            )
        )
    chosen: set[int] = set()
    for name in nodes:
        found = (
            {i for i, g in enumerate(plan.groups) if name in (g.qualname, g.node.qualname)}
            if isinstance(name, str)
            else set()
        )
        if not isinstance(name, str) or not found:
            names = sorted({g.node.qualname for g in plan.groups} | {g.qualname for g in plan.groups})
            leaf = isinstance(name, str) and any(s.node.qualname == name for s in plan.steps)
            raise HndlError(
                Problem(
                    "E_PARAM",
                    f"graph '{plan.checked.graph.name}' has no subgraph use {excerpt(name)} to checkpoint"
                    + (": it is a single layer; only a graph node (a subgraph use or repeat) can be" if leaf else ""),
                    node=name if isinstance(name, str) else None,
                    expected="a graph node or one of its uses: "
                    + (", ".join(names[:8]) or "none in this graph")
                    + (", ..." if len(names) > 8 else ""),
                    actual=excerpt(name),
                    hint=suggestion(name, names) if isinstance(name, str) else None,
                )
            )
        chosen |= found
    return frozenset(chosen)


def float_bytes(model: nn.Module) -> int:
    """Bytes per element of a value typed ``float``: the model's floating parameters' (4 when it has none)."""
    sizes = {p.element_size() for p in model.parameters() if p.is_floating_point()}
    return sizes.pop() if len(sizes) == 1 else 4


def bind_dims(plan: Plan, dims: Mapping[str, Any]) -> dict[str, int]:
    """The caller's dims, each a positive int naming a symbol of the graph's inputs.

    Raises:
        HndlError: E_INPUT for a dim the inputs do not have or a size that is not a positive int.
    """
    symbols = {str(e) for c in plan.checked.contracts for e in c.shape.entries if isinstance(e, str)}
    for name, size in dims.items():
        if name not in symbols:
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"the graph's inputs have no dim {name!r}",
                    expected=", ".join(sorted(symbols)) or "no symbolic dims",
                    actual=name,
                    hint=suggestion(name, sorted(symbols)),
                )
            )
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise HndlError(
                Problem("E_INPUT", f"dim {name!r} must be a positive int", expected="an int >= 1", actual=repr(size))
            )
    return dict(dims)


def planned(model: BuiltModel, budget: Any, dims: Mapping[str, Any]) -> frozenset[int]:
    """The uses to recompute so the estimated activation peak of a training step fits ``budget`` bytes.

    Raises:
        HndlError: E_PARAM for a budget that is not a non-negative int, or one that cannot be met (naming the
            smallest that can); E_INPUT for a bad dim.
    """
    if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
        raise HndlError(
            Problem(
                "E_PARAM",
                "the activation budget must be a number of bytes",
                expected="an int >= 0",
                actual=repr(budget),
                hint="model.checkpointing(budget=2 * 1024**3, B=8, T=512)",
            )
        )
    plan = model.plan
    weights = step_weight_bytes(model, plan)
    return _memory.choose(plan, bind_dims(plan, dims), budget, float_bytes(model), weights).chosen


def choose(
    model: BuiltModel, nodes: Sequence[str] | str | None, budget: int | None, dims: Mapping[str, Any]
) -> frozenset[int]:
    """The uses ``GraphModule.checkpointing(nodes, budget, **dims)`` asks for: those named (:func:`resolve`),
    those a budget needs (:func:`planned`), or none for ``nodes=None``. Changes nothing.

    Raises:
        HndlError: E_PARAM for both ``nodes`` and ``budget``, dims without a budget, and what :func:`resolve`
            and :func:`planned` refuse; E_INPUT for a bad dim.
    """
    if nodes is not None and budget is not None:
        raise HndlError(
            Problem(
                "E_PARAM",
                "checkpointing takes the uses to recompute or a budget, not both",
                expected="nodes=... or budget=...",
                actual="both",
            )
        )
    if dims and budget is None:
        raise HndlError(
            Problem(
                "E_PARAM",
                "dims size a budget; without budget= they mean nothing",
                expected="budget=... with the dims",
                actual=", ".join(dims),
            )
        )
    if budget is not None:
        return planned(model, budget, dims)
    return frozenset() if nodes is None else resolve(model.plan, nodes)


def runners(plan: Plan, running: Plan, modules: Sequence[nn.Module | None], chosen: frozenset[int]) -> list[Any]:
    """``modules`` (one per step of ``running``, the collapsed plan) with each checkpointed use's block in a
    :class:`Recompute`; a use nested in another called block runs as part of that one."""
    if not chosen:
        return list(modules)
    paths = {plan.groups[i].path for i in chosen}
    return [Recompute(m) if m is not None and step.node.path in paths else m for step, m in zip(running.steps, modules)]
