"""Copying and pickling a built model: its runtime is rebuilt for the new instance, never copied.

The runtime (:mod:`._runtime`: the stores record, the generated code, the signature cache, the per-step store) and
the state version describe one instance's modules. A deepcopy, a ``copy.copy`` or an unpickled model gets a fresh
runtime, not verified (the original's tensors may have been edited before they were copied), so its first call
validates and nothing of the original's runtime state, nor any tensor made from its inputs, travels with it.
``GraphModule.__getstate__``/``__setstate__``/``__reduce_ex__``/``__deepcopy__`` delegate here.
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

from ._built import BuiltModel
from ._forward import restore, sign, unsigned
from ._guards import VERSION_ATTR
from ._runtime import start

__all__ = ["RUNTIME_KEYS", "deep_copy", "reduced", "restart", "without_runtime"]

M = TypeVar("M", bound=BuiltModel)

#: Attributes rebuilt for every instance (after deepcopy, copy or unpickling) rather than copied.
RUNTIME_KEYS = ("_runtime", VERSION_ATTR)


def without_runtime(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (``nn.Module.__getstate__``'s) without the runtime's attributes."""
    for key in RUNTIME_KEYS:
        state.pop(key, None)
    return state


def restart(model: BuiltModel, plain: Any) -> None:
    """Give an unpickled ``model`` (its ``__dict__`` restored) a fresh runtime and its signed class again;
    ``plain`` is the unsigned ``forward`` (:func:`._forward.sign`)."""
    start(model, verified=False)
    sign(model, model.plan.input_names, plain)


def reduced(model: BuiltModel, reduction: Any) -> Any:
    """``model``'s ``__reduce_ex__`` from ``nn.Module``'s ``reduction``: the signed class is not importable by
    name, so unpickling makes an instance of the class it was derived from (:func:`._forward.restore`), which
    ``__setstate__`` signs again."""
    base = unsigned(type(model))
    if base is type(model) or not isinstance(reduction, tuple) or len(reduction) < 3:
        return reduction
    return (restore, (base,), *reduction[2:])


def deep_copy(model: M, memo: dict[int, Any]) -> M:
    """A deep copy of ``model`` (of its class, signed or not) from its ``__getstate__``, with its own runtime:
    the record, generated code and signature cache are rebuilt for the clone's own modules."""
    cls = type(model)
    clone = cls.__new__(cls)
    memo[id(model)] = clone
    for key, value in model.__getstate__().items():
        clone.__dict__[key] = copy.deepcopy(value, memo)
    start(clone, verified=False)
    return clone
