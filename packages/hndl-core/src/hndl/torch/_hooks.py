"""Who owns which module, and PyTorch's global registration hooks that bump a GraphModule's state version.

What a bump means for the next call is :mod:`._guards`' business; this module only decides whom to bump.

``torch.nn.Module.register_parameter`` / ``register_buffer`` and submodule assignment call process-wide
registration hooks. hndl installs one of each, once per process. A hook must only invalidate the GraphModules
that own the module being changed: a user creating ``nn.Linear`` layers in a loop (each registers two
parameters) must not force every model in the process to revalidate. So each GraphModule registers the modules
of its tree in :data:`_owners`, keyed by ``id(module)``, holding only weak references on both sides: the map
never keeps a module or a GraphModule alive, and an entry disappears when its module dies.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

import torch.nn.modules.module as _torch_module
from torch import nn

from ._guards import bump

__all__ = ["own", "owners_of"]

_lock = threading.Lock()
_installed = False
# id(module) -> (weak reference to the module, {id(GraphModule): weak reference} of the GraphModules whose tree
# holds it). Plain dicts of weak references rather than WeakSets: a WeakSet costs tens of microseconds to make,
# and a 10,000-node graph registers 10,000 modules.
_owners: dict[int, tuple[weakref.ref[nn.Module], dict[int, weakref.ref[nn.Module]]]] = {}


def _on_registration(module: nn.Module, name: str, value: Any) -> None:
    entry = _owners.get(id(module))
    if entry is not None and entry[0]() is module:
        for ref in list(entry[1].values()):
            gm = ref()
            if gm is not None:
                bump(gm)
    return None  # never replace the value being registered


def _install() -> None:
    global _installed
    with _lock:
        if _installed:
            return
        _torch_module.register_module_parameter_registration_hook(_on_registration)
        _torch_module.register_module_buffer_registration_hook(_on_registration)
        _torch_module.register_module_module_registration_hook(_on_registration)
        _installed = True


def _forget(ref: weakref.KeyedRef[int, nn.Module]) -> None:
    """A module died: its entry goes (``ref.key`` is its id). One function for every module, where a closure per
    module cost a function object each (a 10,000-node graph registers 10,000 modules)."""
    _owners.pop(ref.key, None)


def own(gm: nn.Module, modules: Iterable[nn.Module], previous: frozenset[int]) -> frozenset[int]:
    """Record that ``gm``'s tree holds ``modules``; drop ``gm`` from modules it held before and no longer does.

    Returns the ids now owned, to pass back as ``previous`` next time.
    """
    _install()
    ids: set[int] = set()
    me = id(gm)
    # A dead GraphModule's reference just answers None; a later one reusing its id overwrites the entry.
    ref = weakref.ref(gm)
    with _lock:
        for module in modules:
            key = id(module)
            ids.add(key)
            entry = _owners.get(key)
            if entry is None or entry[0]() is not module:
                entry = (weakref.KeyedRef(module, _forget, key), {})
                _owners[key] = entry
            entry[1][me] = ref
        for key in previous - ids:
            entry = _owners.get(key)
            if entry is not None:
                entry[1].pop(me, None)
    return frozenset(ids)


def owners_of(module: nn.Module) -> list[nn.Module]:
    """The GraphModules registered as owning ``module`` (for tests and debugging)."""
    entry = _owners.get(id(module))
    if entry is None or entry[0]() is not module:
        return []
    return [gm for gm in (ref() for ref in entry[1].values()) if gm is not None]
