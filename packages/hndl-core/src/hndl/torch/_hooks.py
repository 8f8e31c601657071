"""Who owns which module, and PyTorch's global registration hooks that bump a GraphModule's state version.

``torch.nn.Module.register_parameter`` / ``register_buffer`` and submodule assignment call process-wide
registration hooks. hndl installs one of each, once per process. A hook must only invalidate the GraphModules
that own the module being changed: a user creating ``nn.Linear`` layers in a loop (each registers two
parameters) must not force every model in the process to revalidate. So each GraphModule registers the modules
of its tree in :data:`_owners`, keyed by ``id(module)``, holding only weak references on both sides: the map
never keeps a module or a GraphModule alive, and an entry disappears when its module dies.

This module also answers the question the fast path asks at code generation: which node modules have forward
or backward hooks (those must be called through ``nn.Module.__call__``), and the global hook dicts, which the
stores record watches.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import torch.nn.modules.module as _torch_module
from torch import nn

__all__ = ["GLOBAL_HOOK_DICTS", "bump", "global_hooks_active", "has_call_hooks", "hook_dicts", "own", "owners_of"]

#: The global hook dicts ``nn.Module._call_impl`` consults. Registering a global hook mutates one of these in
#: place, so the stores record can watch them.
GLOBAL_HOOK_DICTS: tuple[dict[Any, Any], ...] = (
    _torch_module._global_forward_hooks,
    _torch_module._global_forward_pre_hooks,
    _torch_module._global_backward_hooks,
    _torch_module._global_backward_pre_hooks,
)

# State versions come from one process-wide counter, so a version is never reused by any GraphModule.
_versions = itertools.count(1)
_lock = threading.Lock()
_installed = False
# id(module) -> (weak reference to the module, {id(GraphModule): weak reference} of the GraphModules whose tree
# holds it). Plain dicts of weak references rather than WeakSets: a WeakSet costs tens of microseconds to make,
# and a 10,000-node graph registers 10,000 modules.
_owners: dict[int, tuple[weakref.ref[nn.Module], dict[int, weakref.ref[nn.Module]]]] = {}


def next_version() -> int:
    """A fresh state version."""
    return next(_versions)


def bump(gm: nn.Module) -> None:
    """Give ``gm`` a new state version: its next call validates. Writes ``__dict__`` directly (no Module hooks)."""
    gm.__dict__["_state_version"] = next(_versions)


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


def _forget(key: int) -> Any:
    def callback(_ref: Any) -> None:
        _owners.pop(key, None)

    return callback


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
                entry = (weakref.ref(module, _forget(key)), {})
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


def hook_dicts(module: nn.Module) -> tuple[dict[Any, Any], ...]:
    """The four per-module hook dicts ``nn.Module._call_impl`` checks before calling ``forward``."""
    return (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks)


def global_hooks_active() -> bool:
    """Whether any global forward/backward hook is registered (then every module runs through ``__call__``)."""
    return any(GLOBAL_HOOK_DICTS)


def has_call_hooks(module: nn.Module) -> bool:
    """Whether calling ``module.forward`` directly would skip a hook that ``module(...)`` would run."""
    return any(hook_dicts(module)) or global_hooks_active()
