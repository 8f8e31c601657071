"""The stores record: what the fast path compares, on every call, to notice hookless edits of registered state.

``del module.weight``, a direct write to ``module._parameters`` or ``module._modules`` and the like fire none
of PyTorch's registration hooks. The record remembers the shape of every store dict of the tree at the moment
the registered state was found to match the build, and the fast path compares it with the live dicts using
C-level builtins only:

* ``live == copies``: dicts whose *values* matter, compared with copies taken at record time. ``tuple.__eq__``
  and ``dict.__eq__`` compare identity first, so equal dicts cost a length check and one pointer compare per
  entry. These are the non-empty submodule dicts (a submodule replaced, set to ``None``, added or removed)
  and non-empty hook dicts. The copies hold only modules and hook functions, never a tensor.
* ``not any(empty)``: every dict that was empty. An empty dict equals its empty copy exactly when it is still
  empty, so the empty ``_parameters``/``_buffers``/``_modules`` and the (normally empty) hook dicts need only
  a truth test, the cheapest C-level check there is (an entry added to an empty dict).
* ``tuple(map(len, tensors)) == lens``: the non-empty ``_parameters``/``_buffers`` by length (an entry
  removed or added), then
  ``tuple(map(operator.is_, chain.from_iterable(map(dict.values, tensors)), repeat(None))) == nones``: which
  of their values are ``None`` (a bias set to ``None``).

The record holds the live dicts themselves (the tree owns them anyway) and no tensor: a tensor swapped in
under its registered name (``torch.func.functional_call``) is not kept alive, is never compared with
``Tensor.__eq__``, and is not a change. What this does not detect is listed in SPEC.md section 11.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

from torch import nn

from ._hooks import GLOBAL_HOOK_DICTS, hook_dicts
from ._state import _walk

__all__ = ["StoresRecord", "stores_match", "take_record"]

# An endless ``repeat(None)`` never runs out and holds no position, so one instance serves every call.
NONE = repeat(None)


@dataclass(frozen=True, eq=False)
class StoresRecord:
    """An immutable snapshot of the tree's store dicts. See the module docstring for the three comparisons."""

    live: tuple[dict[Any, Any], ...]
    copies: tuple[dict[Any, Any], ...]
    empty: tuple[dict[Any, Any], ...]
    tensors: tuple[dict[Any, Any], ...]
    lens: tuple[int, ...]
    nones: tuple[bool, ...]

    @property
    def counts(self) -> tuple[int, int, int]:
        """(dicts compared with copies, empty dicts, parameter/buffer dicts compared by shape)."""
        return len(self.live), len(self.empty), len(self.tensors)


def take_record(root: nn.Module, leaves: Sequence[nn.Module]) -> StoresRecord:
    """Snapshot the store dicts of ``root``'s tree, the hook dicts of the node modules ``leaves`` and the global
    hook dicts."""
    live: list[dict[Any, Any]] = []
    empty: list[dict[Any, Any]] = []
    tensors: list[dict[Any, Any]] = []

    def by_value(d: dict[Any, Any]) -> None:
        (live if d else empty).append(d)

    for _path, module in _walk(root):
        by_value(module._modules)
        for store in (module._parameters, module._buffers):
            (tensors if store else empty).append(store)
    seen: set[int] = set()
    for leaf in leaves:
        if id(leaf) not in seen:  # one module may serve as two nodes' layer
            seen.add(id(leaf))
            for d in hook_dicts(leaf):
                by_value(d)
    for d in GLOBAL_HOOK_DICTS:
        by_value(d)
    return StoresRecord(
        live=tuple(live),
        copies=tuple(dict(d) for d in live),
        empty=tuple(empty),
        tensors=tuple(tensors),
        lens=tuple(map(len, tensors)),
        nones=_nones(tensors),
    )


def _nones(tensors: Iterable[dict[Any, Any]]) -> tuple[bool, ...]:
    return tuple(map(operator.is_, chain.from_iterable(map(dict.values, tensors)), NONE))


def stores_match(record: StoresRecord) -> bool:
    """Whether the live dicts still look as recorded (the same comparison the generated fast path inlines)."""
    return (
        record.live == record.copies
        and not any(record.empty)
        and tuple(map(len, record.tensors)) == record.lens
        and tuple(map(operator.is_, chain.from_iterable(map(dict.values, record.tensors)), NONE)) == record.nones
    )
