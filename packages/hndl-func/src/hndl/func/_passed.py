"""Signatures that passed a check, remembered per module and state version without holding a tensor.

``functional_call`` and ``ensemble_call`` both turn "is this dict (or stack) right for this module?" into a
lookup: a *signature* (names, shapes, dtypes, ... built with C-level ``attrgetter`` calls) that passed the full
check once is remembered with the module's state version, so the next call with it skips the check. A
registration or a conversion gives the module a new version, which forgets every signature of the old one.

The record is keyed weakly by module (it never keeps a module alive; a deepcopy starts empty) and holds
signatures only, never a tensor. Writes take a lock, so threads that evict at once cannot delete one key twice;
reads take none: a read is one ``WeakKeyDictionary.get`` and one ``in`` test, each atomic, and a reader that
races a writer at worst misses a signature being added and runs the check once more.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Hashable
from typing import Any

from torch import nn

__all__ = ["PassedSignatures"]


class PassedSignatures:
    """Per module: its state version when the signatures passed, and up to ``limit`` of them (oldest dropped)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._by_module: weakref.WeakKeyDictionary[nn.Module, tuple[Any, dict[Hashable, None]]] = (
            weakref.WeakKeyDictionary()
        )
        self._write = threading.Lock()

    def known(self, module: nn.Module, version: Any, signature: Hashable) -> bool:
        """Whether ``signature`` passed for ``module`` at state version ``version``."""
        record = self._by_module.get(module)
        if record is None or record[0] != version:
            return False
        try:  # tuples do not cache their hash: on the known path this membership test is the only hashing
            return signature in record[1]
        except TypeError:  # an unhashable signature never passed, so it is not known
            return False

    def remember(self, module: nn.Module, version: Any, signature: Hashable) -> None:
        """Record that ``signature`` passed for ``module`` at ``version`` (forgetting those of an older one)."""
        with self._write:
            record = self._by_module.get(module)
            if record is None or record[0] != version:
                record = (version, {})
                self._by_module[module] = record
            seen = record[1]
            if signature in seen:
                return
            while len(seen) >= self.limit:
                del seen[next(iter(seen))]
            seen[signature] = None

    def forget(self, module: nn.Module) -> None:
        """Drop everything remembered for ``module``."""
        with self._write:
            self._by_module.pop(module, None)

    def count(self, module: nn.Module) -> int:
        """How many signatures are remembered for ``module`` (at whatever version they passed)."""
        record = self._by_module.get(module)
        return 0 if record is None else len(record[1])
