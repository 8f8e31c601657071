"""Stack signatures that passed ``ensemble_call``'s check, remembered per base module without holding a tensor.

A *stack signature* is what the check's verdict depends on: the stacked parameters' and buffers' names, and each
tensor's shape (ensemble size included), dtype and device. Together with the base module's state version (a
registration or a conversion of the base gives it a new one, and may change the names and dtypes a stack needs)
it decides whether a stack is known. A known stack skips the whole check, so a repeated ``ensemble_call`` costs
one tuple build and one dict lookup on top of ``vmap(torch.func.functional_call)``.

The record is keyed weakly by the base (it never keeps a module alive; a deepcopy starts empty) and a signature
holds strings, ``torch.Size``, dtypes and devices only, never a tensor. Writes take a lock; reads do not: a read
is one ``WeakKeyDictionary.get`` and one ``in`` test on a dict, each atomic, and a reader that races a writer
at worst misses a signature being added and runs the check once more.
"""

from __future__ import annotations

import operator
import threading
import weakref
from collections.abc import Hashable
from typing import Any

from torch import nn

__all__ = ["is_known", "remember", "stack_signature"]

#: How many passing stack signatures one base remembers (oldest dropped first).
MAX_SIGNATURES = 32

# shape, dtype and device of a tensor in one C call; AttributeError for a value that is not a tensor.
_META = operator.attrgetter("shape", "dtype", "device")

# base -> (its state version when the signatures passed, {signature: None}).
_SEEN: weakref.WeakKeyDictionary[nn.Module, tuple[Any, dict[Hashable, None]]] = weakref.WeakKeyDictionary()
_WRITE = threading.Lock()


def stack_signature(params: Any, buffers: Any) -> Hashable | None:
    """The signature of a stack, or None when it has none (not two dicts of tensors): then it is always checked."""
    if type(params) is not dict or type(buffers) is not dict:
        return None
    try:
        return (tuple(params), tuple(map(_META, params.values())), tuple(buffers), tuple(map(_META, buffers.values())))
    except AttributeError:  # a value that is not a tensor: the check reports it
        return None


def is_known(base: nn.Module, version: Any, signature: Hashable) -> bool:
    """Whether ``signature`` passed the check for ``base`` at its state version ``version``."""
    record = _SEEN.get(base)
    if record is None or record[0] != version:
        return False
    try:  # tuples do not cache their hash: this membership test is the only hashing on the known path
        return signature in record[1]
    except TypeError:  # something tensor-like with an unhashable shape; it never passed, so it is not known
        return False


def remember(base: nn.Module, version: Any, signature: Hashable) -> None:
    """Record that ``signature`` passed for ``base`` at ``version`` (forgetting those of an older version)."""
    with _WRITE:
        record = _SEEN.get(base)
        if record is None or record[0] != version:
            record = (version, {})
            _SEEN[base] = record
        seen = record[1]
        if len(seen) >= MAX_SIGNATURES:
            del seen[next(iter(seen))]
        seen[signature] = None
