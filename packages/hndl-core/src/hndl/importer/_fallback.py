"""Layers hndl's ops cannot express, as ``module`` nodes that rebuild them.

A ``module`` node names a class (``package.module:Class``) and the keyword arguments to build it with; nothing
else of the original object survives into the spec. So a layer becomes one only when its constructor arguments
can be read back from the object (each ``__init__`` parameter stored under its own name, as torch.nn's layers
and most hand-written ones do) and the object built from them is the same layer: same class, same ``repr``, same
plain attributes, same state-dict keys, shapes and dtypes, and the same submodules. Anything less is reported
with what could not be recovered, never written as a node that builds something else.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["NotRebuildable", "Rebuilt", "rebuild"]


class NotRebuildable(Exception):
    """The layer cannot be written as a ``module`` node; the message says why."""


@dataclass(frozen=True)
class Rebuilt:
    """What a ``module`` node needs to rebuild a layer."""

    target: str
    kwargs: dict[str, Any]


_PLAIN = (int, float, str, bool, type(None))


def _plain(value: Any) -> Any:
    """``value`` as spec data (tuples as lists), or raise when it is not plain data."""
    if isinstance(value, float) and not math.isfinite(value):
        raise NotRebuildable(f"the value {value!r} cannot be written in a spec")
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise NotRebuildable(f"a {type(value).__name__} is not plain data")


def _importable(cls: type) -> str:
    """The shortest ``package.module:Class`` that names ``cls`` (``torch.nn:ReLU6``, not
    ``torch.nn.modules.activation:ReLU6``)."""
    import importlib

    if "<locals>" in cls.__qualname__ or cls.__module__ == "__main__":
        raise NotRebuildable(f"class {cls.__qualname__} cannot be imported by name (defined in a function or __main__)")
    parts = cls.__module__.split(".")
    for end in range(1, len(parts) + 1):
        module_name = ".".join(parts[:end])
        try:
            found: Any = importlib.import_module(module_name)
        except ImportError:
            continue
        for attr in cls.__qualname__.split("."):
            found = getattr(found, attr, None)
        if found is cls:
            return f"{module_name}:{cls.__qualname__}"
    raise NotRebuildable(f"{cls.__module__}:{cls.__qualname__} does not name the class")


def _arguments(module: Any) -> dict[str, Any]:
    """The constructor's arguments read back from the object: each parameter of ``__init__`` from the attribute
    of the same name; a tensor or ``None`` for a bool parameter (``bias``) as whether it is there."""
    import torch

    cls = type(module)
    signature = inspect.signature(cls.__init__)
    kwargs: dict[str, Any] = {}
    missing: list[str] = []
    for name, p in list(signature.parameters.items())[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or name in ("device", "dtype"):
            continue
        if name in vars(module) or hasattr(module, name):
            value = getattr(module, name)
            if isinstance(p.default, bool) and (value is None or isinstance(value, torch.Tensor)):
                value = value is not None
            if isinstance(value, (torch.nn.Module, torch.Tensor)):
                missing.append(name)
                continue
            try:
                value = _plain(value)
            except NotRebuildable as exc:
                raise NotRebuildable(f"constructor argument {name!r}: {exc}") from None
            if p.default is not p.empty and _same(value, p.default):
                continue
            kwargs[name] = value
        elif p.default is p.empty:
            missing.append(name)
    if missing:
        raise NotRebuildable(f"constructor argument(s) {', '.join(missing)} cannot be read back from the layer")
    return kwargs


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(_plain(b) == a) and type(_plain(b)) is type(a)
    except NotRebuildable:
        return False


def _fingerprint(module: Any) -> tuple[Any, ...]:
    """What must agree between the layer and its rebuild."""
    plain = {
        k: v
        for k, v in vars(module).items()
        if not k.startswith("_") and k != "training" and isinstance(v, (*_PLAIN, list, tuple))
    }
    state = {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict(keep_vars=True).items()}
    children = [(name, type(m)) for name, m in module.named_modules()]
    hooks = any(
        getattr(m, attr)
        for m in module.modules()
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_state_dict_hooks")
    )
    return type(module), repr(module), repr(plain), state, children, hooks


def rebuild(module: Any) -> Rebuilt:
    """The class path and keyword arguments that rebuild ``module``.

    Raises:
        NotRebuildable: when they cannot be recovered, or the layer built from them differs from ``module``.
    """
    import torch

    if any(getattr(module, a) for a in ("_forward_hooks", "_forward_pre_hooks")):
        raise NotRebuildable("it has forward hooks, which a rebuilt layer would not have")
    target = _importable(type(module))
    kwargs = _arguments(module)
    try:
        with torch.device("meta"):
            twin = type(module)(**kwargs)
    except Exception as exc:
        raise NotRebuildable(f"{target}(**{kwargs}) fails: {type(exc).__name__}: {exc}") from None
    twin.train(module.training)
    if _fingerprint(twin) != _fingerprint(module):
        raise NotRebuildable(f"{target}(**{kwargs}) builds a different layer than the one in the model")
    return Rebuilt(target, kwargs)
