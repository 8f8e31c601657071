"""Stack signatures that passed ``ensemble_call``'s check, remembered per base module without holding a tensor.

A *stack signature* is what the check's verdict depends on: the stacked parameters' and buffers' names, and each
tensor's shape (ensemble size included), dtype and device. Together with the base module's state version (a
registration or a conversion of the base gives it a new one, and may change the names and dtypes a stack needs)
it decides whether a stack is known. A known stack skips the whole check, so a repeated ``ensemble_call`` costs
one tuple build and one dict lookup on top of ``vmap(torch.func.functional_call)``.

The record is a :class:`PassedSignatures`, as functional_call's is: keyed weakly by the base, holding strings,
``torch.Size``, dtypes and devices only, never a tensor.
"""

from __future__ import annotations

import operator
import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any

from ._passed import PassedSignatures

__all__ = ["PASSED_STACKS", "KnownStacks", "KNOWN_STACKS", "stack_signature"]

# Stack signatures that passed, per base and state version.
PASSED_STACKS = PassedSignatures(limit=32)

# shape, dtype and device of a tensor in one C call; AttributeError for a value that is not a tensor.
_META = operator.attrgetter("shape", "dtype", "device")


def stack_signature(params: Any, buffers: Any) -> Hashable | None:
    """The signature of a stack, or None when it has none (not two dicts of tensors): then it is always checked."""
    if type(params) is not dict or type(buffers) is not dict:
        return None
    try:
        return (tuple(params), tuple(map(_META, params.values())), tuple(buffers), tuple(map(_META, buffers.values())))
    except AttributeError:  # a value that is not a tensor: the check reports it
        return None


def _load_tensor_guards() -> Any:
    try:
        from torch._C._dynamo import guards
    except ImportError:  # pragma: no cover - every supported torch has it
        return None
    return getattr(guards, "TensorGuards", None)


_TensorGuards: Any = _load_tensor_guards()


class KnownStacks:
    """The last few stacks that passed, per base, as PyTorch's C++ tensor guard: a known stack's call costs two
    key-tuple compares and one C++ pass over the tensors instead of building and hashing its signature.

    The guard (``torch._C._dynamo.guards.TensorGuards``, what ``torch.compile`` guards tensors with, and what
    hndl-core's stores record uses) compares dtype, device, shape, strides, ``requires_grad`` and dispatch keys of
    each tensor, a superset of a stack signature's shape, dtype and device, so a stack it passes has the
    signature that passed. One it fails (a tensor swapped for one with other strides, a call under
    ``inference_mode``) is looked up by signature as before. It holds no tensor. Keyed by the base's ``id``
    with a weak reference (a ``WeakKeyDictionary`` lookup builds a weak reference per call); the entry goes
    when the base dies.
    """

    #: Stacks remembered per base, most recent first.
    PER_BASE = 4

    def __init__(self) -> None:
        self._by_id: dict[
            int, tuple[weakref.ref[Any], list[tuple[Any, tuple[str, ...], tuple[str, ...], Callable[..., bool]]]]
        ] = {}
        self._write = threading.Lock()

    def known(self, base: Any, version: Any, params: dict[str, Any], buffers: dict[str, Any]) -> bool:
        """Whether this exact stack (names in order; each tensor's dtype, device, shape, strides) passed for
        ``base`` at ``version``."""
        entry = self._by_id.get(id(base))
        if entry is None or entry[0]() is not base:
            return False
        names, buffer_names = tuple(params), tuple(buffers)
        for recorded, pkeys, bkeys, check in entry[1]:
            if recorded == version and pkeys == names and bkeys == buffer_names:
                try:
                    if check(*params.values(), *buffers.values()):
                        return True
                except Exception:  # a value the guard cannot read (not a tensor): not this stack
                    return False
        return False

    def remember(self, base: Any, version: Any, params: dict[str, Any], buffers: dict[str, Any]) -> None:
        """Add the stack that just passed (a no-op where PyTorch has no tensor guard, or it cannot describe the
        tensors: the signature record still knows the stack)."""
        tensors = (*params.values(), *buffers.values())
        if _TensorGuards is None or not tensors:
            return
        try:
            guard = _TensorGuards(
                *tensors,
                dynamic_dims_sizes=[list(t.size()) for t in tensors],
                dynamic_dims_strides=[list(t.stride()) for t in tensors],
            )
            check: Callable[..., bool] = guard.check
            if not check(*tensors):
                return
        except Exception:  # sparse layouts, values that are not tensors
            return
        key = id(base)
        with self._write:
            entry = self._by_id.get(key)
            ref = entry[0] if entry is not None and entry[0]() is base else weakref.ref(base, self._drop)
            older = [] if entry is None or entry[0] is not ref else [s for s in entry[1] if s[0] == version]
            # A new list, not an edit of the old: a reader iterating the old one sees it whole.
            self._by_id[key] = (ref, [(version, tuple(params), tuple(buffers), check), *older[: self.PER_BASE - 1]])

    def _drop(self, ref: weakref.ref[Any]) -> None:
        """The weak reference's callback: its base died. No lock (the collector may run this inside
        :meth:`remember`, which holds it); only the entry of that reference goes, not a newer one under a
        reused id."""
        for key, entry in list(self._by_id.items()):
            if entry[0] is ref:
                self._by_id.pop(key, None)


KNOWN_STACKS = KnownStacks()
