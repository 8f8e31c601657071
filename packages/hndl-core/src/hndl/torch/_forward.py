"""The signature of a built model's ``forward``: the graph's inputs by name, as tools that read it expect.

``GraphModule.forward`` takes ``(*args, **kwargs)`` and binds them itself (:mod:`._binding`), so that a missing,
unknown or doubled input is ``E_INPUT`` naming it. Tools that read the signature instead of calling (HF
``Trainer`` keeps only the dataset columns ``forward`` names; ``torch.export`` binds ``args`` and matches
``dynamic_shapes`` by parameter name) need the inputs named there. As ``torch.fx.GraphModule`` does, a built model
gets a class of its own, a subclass of its class named like it, whose ``forward`` is the same code with a
``__signature__`` naming the inputs in order (``inspect.signature`` reads it): the call itself is unchanged,
costs nothing more, and keeps its errors. The class is shared by every model of one class with the same input
names (a bounded number: one per distinct input list), so a build creates none after the first.

A signed class is not importable by name, so pickling goes through :func:`restore`, which makes an instance of
the class it was derived from; ``__setstate__`` gives it its signed class again (:func:`sign`).
"""

from __future__ import annotations

import inspect
import keyword
import threading
import types
from typing import Any, cast

import torch

__all__ = ["restore", "sign", "unsigned"]

_lock = threading.Lock()
_SIGNED: dict[tuple[type, tuple[str, ...]], type] = {}  # (base class, input names) -> its signed class
_BASE: dict[type, type] = {}  # signed class -> the class it was derived from


def _signed_class(base: type, names: tuple[str, ...], plain: types.FunctionType) -> type:
    """``base``'s subclass whose ``forward`` is ``plain`` (its code, globals and defaults) with a signature naming
    ``names``; made once per (class, names)."""
    key = (base, names)
    with _lock:
        cls = _SIGNED.get(key)
        if cls is not None:
            return cls
        forward = types.FunctionType(
            plain.__code__, plain.__globals__, "forward", plain.__defaults__, plain.__closure__
        )
        forward.__kwdefaults__ = plain.__kwdefaults__
        forward.__doc__ = plain.__doc__
        forward.__module__ = plain.__module__
        forward.__qualname__ = f"{base.__qualname__}.forward"
        tensor = inspect.Parameter.POSITIONAL_OR_KEYWORD
        parameters = [inspect.Parameter("self", tensor)]
        parameters += [inspect.Parameter(name, tensor, annotation=torch.Tensor) for name in names]
        forward.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
        namespace = {"forward": forward, "__module__": base.__module__, "__qualname__": base.__qualname__}
        cls = type(base.__name__, (base,), namespace)
        _SIGNED[key] = cls
        _BASE[cls] = base
        return cls


def unsigned(cls: type) -> type:
    """The class a signed class was derived from (``cls`` itself for any other class)."""
    return _BASE.get(cls, cls)


def sign(model: Any, names: tuple[str, ...], plain: Any) -> None:
    """Give ``model`` the signed class of its class for input ``names``. ``plain`` is the unsigned ``forward``
    (``GraphModule.forward``): a subclass that defines its own ``forward`` names its own arguments and is left as
    it is, as is a model whose class was already signed (a copy, or one FSDP gave a class of its own)."""
    cls = type(model)
    if any(c in _BASE for c in cls.__mro__) or getattr(cls, "forward", None) is not plain:
        return
    if any(keyword.iskeyword(name) for name in names):
        return  # no signature can name it (Graph.input refuses such a name; a graph made by hand may have one)
    object.__setattr__(model, "__class__", _signed_class(cls, names, cast(types.FunctionType, plain)))


def restore(base: Any) -> Any:
    """A new, empty instance of ``base`` for unpickling: ``__setstate__`` fills it and signs it again."""
    return base.__new__(base)
