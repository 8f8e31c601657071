"""Peak live activation bytes of one call on CPU, counted from the tensors the call's ops allocate.

CPU PyTorch keeps no allocator statistics (``torch.cuda.max_memory_allocated`` has no CPU twin) and the
profiler's memory events attach allocations to the ops that make them, so this counts directly: a
``TorchDispatchMode`` sees every op's outputs; the first time an output's storage appears it is counted as
allocated, and a ``weakref.finalize`` on the storage subtracts it when the storage is freed. Storages that the
call only reads (the input, the weights) are never counted, and a view shares its base's storage, so it adds
nothing. The figure is the peak of the running sum: what a caching allocator would have to hold at once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of storages allocated by ops while it is active; ``peak`` is the largest sum seen."""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._known: set[int] = set()  # data_ptr of every storage alive and seen, counted or not

    def _forget(self, key: int, nbytes: int) -> None:
        self._known.discard(key)
        self.live -= nbytes

    def _see(self, storage: torch.UntypedStorage, count: bool) -> None:
        key = storage.data_ptr()
        if key in self._known or not storage.nbytes():
            return
        self._known.add(key)
        nbytes = storage.nbytes() if count else 0
        self.live += nbytes
        weakref.finalize(storage, self._forget, key, nbytes)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor):
                self._see(t.untyped_storage(), count=False)
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self._see(t.untyped_storage(), count=True)
        self.peak = max(self.peak, self.live)
        return out


def peak_live_bytes(fn: Callable[[], object]) -> int:
    """The peak bytes of activations ``fn`` held at once under ``torch.no_grad()`` (its result included)."""
    with torch.no_grad(), LiveBytes() as counter:
        result = fn()
        del result
    return counter.peak
