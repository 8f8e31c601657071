"""What every attention layer of a decoding step computes alike, computed once: the rotary tables, the causal
pattern against the cache and the cache slots of the step's queries.

In a decoder each attention layer gets the same cache offset (a 0-d tensor, a graph input), so each made the
same ``arange``, the same ``cos``/``sin`` tables and the same pattern again: about a dozen small ops per layer
per token, where transformers makes its tables and mask once per step in the model's ``forward``. On the small
LLaMA of the generation benchmark (8 layers, 19 ms a token on one thread) that was 2-3% of each token.
:class:`PerStep` keeps the last value made under each name with the inputs it was made from, and gives it again
while those inputs are the same (:func:`shared`):

- a tensor input is the same when it is the same object at the same version (no kernel runs), or, on the CPU
  only, an equal tensor (each layer's rotary frequencies are its own buffer with equal values: ``torch.equal``
  on 32 floats is cheaper than the tables it saves; on an accelerator it would wait for the device);
- other inputs compare with ``==`` and by type;
- an input that requires grad (a learned float mask) is never shared: what is made from it belongs to one
  forward's autograd graph.

Nothing here is written into after it is made (SDPA and the rotations read the tables; no fast-path write
reaches them: they are no node's output), so handing the same tensor to every layer is safe. Under
``torch.compile`` or a ``torch.func`` transform the value is made each time, as before: a trace must see the
ops, and a transform's tensors are wrapped per call. Inference mode is part of every key (a tensor made under
it cannot be used for autograd later).

**Where the values live.** One :class:`PerStep` per model, never a process-wide table: each layer that shares
(``Attention``, ``SDPA``) holds a ``per_step`` store, its own from construction, and a GraphModule points its
steps' layers at one store (``_runtime.start``; ``replace_layer`` for a layer put in), so every layer of a step
shares while two models never see each other's tensors. A copy or an unpickled model gets empty stores (nothing made from the original's
inputs travels with it). A layer without a store (``per_step=None``) makes each value each time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
from torch import Tensor

from ._tracing import transforms_active

__all__ = ["KEEP_BYTES", "PerStep", "adopt", "shared"]

T = TypeVar("T")


class PerStep:
    """One model's values made once per step: ``last`` maps a name to (the inputs as ``(value, version)``
    pairs, the value made from them). One entry a name: a decoding step's layers ask in turn for the same
    inputs, and the next step's offset replaces the entry."""

    __slots__ = ("last",)

    def __init__(self) -> None:
        self.last: dict[str, tuple[tuple[tuple[Any, int], ...], Any]] = {}

    # A copy or a pickle starts empty: the values belong to the original's inputs (and the copy module's memo
    # keeps layers that shared one store sharing one in the copy).
    def __deepcopy__(self, memo: dict[int, Any]) -> PerStep:
        return PerStep()

    def __reduce__(self) -> tuple[type[PerStep], tuple[()]]:
        return (PerStep, ())

    # Two stores compare equal: a store is no setting of its layer, only values it can make again (a layer
    # compared with a fresh build of itself is the same layer).
    def __eq__(self, other: object) -> bool:
        return isinstance(other, PerStep)

    def __hash__(self) -> int:
        return hash(PerStep)

    def __repr__(self) -> str:
        return f"PerStep({sorted(self.last)})"


def adopt(modules: Iterable[Any], store: PerStep) -> None:
    """Point every module of ``modules`` that holds a store (``per_step``) at ``store``: called while a model's
    runtime starts, before the stores record is taken (the attribute is replaced, never added). ``None`` (a
    step whose layer is gone) is skipped."""
    for module in modules:
        if module is not None and isinstance(module.__dict__.get("per_step"), PerStep):
            module.__dict__["per_step"] = store


def _held(value: Any) -> tuple[Any, int]:
    return (value, value._version) if isinstance(value, Tensor) else (value, -1)


def _same(held: tuple[tuple[Any, int], ...], inputs: tuple[Any, ...]) -> bool:
    if len(held) != len(inputs):
        return False
    for (was, version), now in zip(held, inputs):
        if isinstance(now, Tensor):
            if not isinstance(was, Tensor) or was._version != version:
                return False
            if was is now:
                continue
            if (
                now.device.type != "cpu"
                or was.device != now.device
                or was.dtype != now.dtype
                or was.shape != now.shape
                or type(now) is not Tensor
                or not torch.equal(was, now)
            ):
                return False
        elif type(was) is not type(now) or was != now:
            return False
    return True


def shared(store: PerStep | None, name: str, inputs: tuple[Any, ...], make: Callable[[], T]) -> T:
    """``make()``, or what it gave last under ``name`` in ``store`` when ``inputs`` are the same as then (see the
    module docstring); ``inputs`` must hold everything the value depends on. Without a store, ``make()``."""
    if store is None or transforms_active() or any(isinstance(v, Tensor) and v.requires_grad for v in inputs):
        return make()  # a value made from a tensor that requires grad belongs to one forward's graph
    inputs = (*inputs, torch.is_inference_mode_enabled())
    table = store.last
    last = table.get(name)
    if last is not None and _same(last[0], inputs):
        return last[1]
    value = make()
    if _bytes(value) <= KEEP_BYTES:
        table[name] = (tuple(_held(v) for v in inputs), value)
    else:
        table.pop(name, None)
    return value


#: The largest value kept between calls. A decoding step's tables and mask are a few KiB; a long prefill's
#: combined mask ``[B, 1, T, S]`` can be tens of MiB, which would stay alive after the call: that one is made
#: per layer, as before.
KEEP_BYTES = 1 << 20


def _bytes(value: Any) -> int:
    if isinstance(value, Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, tuple):
        return sum(_bytes(v) for v in value)
    return 0
