"""How hndl names things in messages: dtype names and did-you-mean suggestions.

Public so that hndl-func and hndl-docs word their messages exactly as hndl-core does; every suggestion in hndl
goes through :func:`closest`, so all of them use one cutoff.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

__all__ = ["SUGGESTION_CUTOFF", "closest", "dtype_name", "suggestion"]

#: How similar (difflib ratio) a known name must be to an unknown one to be offered as "did you mean".
SUGGESTION_CUTOFF = 0.6


def closest(name: object, choices: Iterable[object]) -> str | None:
    """The known name closest to ``name`` (an unknown key, op, reference), or None if none is close."""
    text = str(name)
    close = difflib.get_close_matches(text, [str(c) for c in choices], n=1, cutoff=SUGGESTION_CUTOFF)
    return close[0] if close else None


def suggestion(name: object, choices: Iterable[object]) -> str | None:
    """``"did you mean 'x'?"`` for the closest choice, or None: the hint text every message uses."""
    close = closest(name, choices)
    return f"did you mean '{close}'?" if close is not None else None


def dtype_name(dtype: Any) -> str:
    """``float32`` for ``torch.float32`` (or the string ``"torch.float32"``); works without importing torch."""
    return str(dtype).removeprefix("torch.")
