"""The input signatures one model has validated: what the generated call looks a call up in (``sig in sigs``).

A signature is each input's shape, dtype and device, then the model's state version
(:func:`._guards.signature_source` builds it). The cache is per model, never global, so it keeps no model
alive; it holds at most :data:`SIGNATURE_CACHE_SIZE` signatures and forgets the oldest first, so a model called
with ever-changing shapes costs one validation per new shape and bounded memory.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SIGNATURE_CACHE_SIZE", "SignatureCache"]

#: How many input signatures one GraphModule remembers. When full, the oldest is forgotten (FIFO).
SIGNATURE_CACHE_SIZE = 64


class SignatureCache:
    """The signatures that passed, oldest first. ``entries`` is the dict the generated call binds as ``sigs``
    (a dict for the lookup, kept in insertion order); it is cleared, never replaced, so the binding stays valid.
    Writers hold the model's lock; the lookup reads without it."""

    __slots__ = ("entries", "version")

    def __init__(self) -> None:
        self.entries: dict[tuple[Any, ...], None] = {}
        self.version: Any = None  # the state version of the signatures held

    def remember(self, sig: tuple[Any, ...]) -> None:
        """Add a signature that passed; the last item of a signature is its state version."""
        entries = self.entries
        if self.version != sig[-1]:
            entries.clear()  # signatures of an older state version can never match again
            self.version = sig[-1]
        if sig not in entries:
            while len(entries) >= SIGNATURE_CACHE_SIZE:
                del entries[next(iter(entries))]
            entries[sig] = None
