"""How hndl names things in messages: dtype names, did-you-mean suggestions, and values shown safely.

Public so that hndl-func and hndl-docs word their messages exactly as hndl-core does; every suggestion in hndl
goes through :func:`closest`, so all of them use one cutoff. A spec may be untrusted and a message is read in a
terminal or a log, so a value is echoed through :func:`excerpt` (short, ``repr``-escaped) and text shown as it
is through :func:`printable` (control characters escaped); :class:`hndl.HndlError` applies ``printable`` to
every field it renders.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "EXCERPT_LIMIT",
    "NAME_RE",
    "SUGGESTION_CUTOFF",
    "closest",
    "dtype_name",
    "excerpt",
    "printable",
    "suggestion",
]

#: What a name of a graph, input, node, output, graph parameter or op may be: letters, digits and underscores, not
#: starting with a digit. Here, at the bottom of the imports, because the graph, the registry, the loader and the
#: schema all ask it.
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

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


#: How many characters of a value a message may echo: a long value is cut, control characters stay escaped.
EXCERPT_LIMIT = 60


def excerpt(value: Any, limit: int = EXCERPT_LIMIT) -> str:
    """``repr(value)``, cut to about ``limit`` characters: what a message may echo of a value.

    Tuples (the normal form of list parameters) are shown as the lists a user wrote; an integer too long for
    Python to print (more than 4,300 digits) is named by its size.
    """
    try:
        text = repr(list(value) if isinstance(value, tuple) else value)
    except ValueError:
        text = f"<an integer of {value.bit_length():,} bits>" if isinstance(value, int) else "<unprintable value>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def printable(text: str) -> str:
    """``text`` with every character that is not printable (line breaks, tabs, escape codes, bidirectional
    controls) written as its Python escape (``\\n``, ``\\x1b``, ``\\u202e``), and nothing else changed: how text
    taken from a spec or a file name may appear inside a message, on one line, with no effect on a terminal."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
