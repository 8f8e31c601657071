"""Weightless layers made as copies of a pristine instance instead of through their constructor.

``torch.nn.Module.__init__`` logs API usage and sets seventeen attributes, each through ``object.__setattr__``,
and a layer's own ``__init__`` then sets its settings through ``nn.Module.__setattr__``: ``torch.nn.ReLU()``
takes ~7.5 us, more than everything else a build does for the node (the check, the plan, the stores record and
the generated call together). A layer with no parameters, buffers or children is fully described by its
instance dict; when that dict holds only empty containers (the store and hook dicts, the non-persistent buffer
set) and immutable settings, a new instance whose dict has the same keys, in the same order, with *fresh* empty
containers and the same settings is the object the constructor makes. :func:`make_layer` builds such a copy
(~1.5 us) from a snapshot taken of the first instance it constructs for a class and settings.

It constructs normally, every time, whenever the premise may not hold: a class whose instance holds anything
else (a tensor, a list, a submodule, a non-empty dict), settings that cannot key a table, and a class whose
``__init__`` or ``__new__``, or ``nn.Module.__init__``, is no longer the function the snapshot was taken with
(a tool that patches constructors, as DeepSpeed's ``zero.Init`` does, runs its own code).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

__all__ = ["make_layer"]

# The container types ``nn.Module.__init__`` makes empty, copied as new empty ones; and the setting types
# shared between instances, which nothing can change in place.
_CONTAINERS = (dict, OrderedDict, set)
_IMMUTABLE = (bool, int, float, str, type(None))

#: (class, settings) -> the snapshot to copy: (the constructors it was taken under, (name, value, is a
#: container) per instance attribute), or None for a class and settings that are always constructed.
_snapshots: dict[tuple[Any, ...], tuple[tuple[Any, Any, Any], tuple[tuple[str, Any, bool], ...]] | None] = {}
_LIMIT = 512  # distinct (class, settings) pairs kept; past it, new pairs are constructed
_lock = threading.Lock()


def make_layer(cls: type, /, **settings: Any) -> Any:
    """``cls(**settings)``, as a copy of the first such instance when the module docstring's premise holds."""
    try:
        key = (cls, *sorted(settings.items()))
        known = key in _snapshots
    except TypeError:  # a setting that cannot key the table (a list): nothing is copied for it
        return cls(**settings)
    if not known:
        layer = cls(**settings)
        with _lock:
            if len(_snapshots) < _LIMIT:
                _snapshots[key] = _snapshot(cls, layer)
        return layer
    snapshot = _snapshots[key]
    if snapshot is None or snapshot[0] != _constructors(cls):
        return cls(**settings)
    layer = object.__new__(cls)
    state: dict[str, Any] = layer.__dict__
    for name, value, container in snapshot[1]:
        state[name] = type(value)() if container else value
    return layer


#: ``torch.nn.Module``, once a snapshot was taken (hndl itself imports without torch).
_Module: Any = None


def _constructors(cls: type) -> tuple[Any, Any, Any]:
    return cls.__init__, cls.__new__, _Module.__init__  # type: ignore[misc]


def _snapshot(cls: type, layer: Any) -> tuple[tuple[Any, Any, Any], tuple[tuple[str, Any, bool], ...]] | None:
    """What a copy of the freshly constructed ``layer`` needs, or None when it cannot stand for the constructor."""
    global _Module
    import torch

    _Module = torch.nn.Module
    if type(layer) is not cls or cls.__new__ is not object.__new__ or not isinstance(layer, torch.nn.Module):
        return None
    items: list[tuple[str, Any, bool]] = []
    for name, value in layer.__dict__.items():
        if type(value) in _CONTAINERS:
            if value:  # a parameter, buffer, child or hook the constructor registered
                return None
            items.append((name, value, True))
        elif type(value) in _IMMUTABLE:
            items.append((name, value, False))
        else:
            return None
    return _constructors(cls), tuple(items)
