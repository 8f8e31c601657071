"""How hndl names things in messages: dtype names, did-you-mean suggestions, and values shown safely.

Public so that hndl-func and hndl-docs word their messages exactly as hndl-core does; every suggestion in hndl
goes through :func:`closest`, so all of them follow one rule. A spec may be untrusted and a message is read in a
terminal or a log, so a value is echoed through :func:`excerpt` (short, ``repr``-escaped) and text shown as it
is through :func:`printable` (control characters escaped); :class:`hndl.HndlError` applies ``printable`` to
every field it renders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = [
    "EXCERPT_LIMIT",
    "SPELLING_EDITS",
    "closest",
    "dtype_name",
    "excerpt",
    "normal_name",
    "printable",
    "suggestion",
]

#: How many edits (a letter added, dropped, changed, or two neighbours swapped) turn a misspelt name into the
#: one offered: one for names shorter than :data:`LONG_NAME` characters, two for longer ones. Case and the
#: separators ``_ - .`` and spaces are not counted (:func:`normal_name`).
SPELLING_EDITS = (1, 2)
#: From this many characters (separators not counted) a name may be two edits away from the one offered.
LONG_NAME = 8
_SEPARATORS = re.compile(r"[\s_.\-]+")
_NUMBERS = re.compile(r"\d+")


def normal_name(name: object) -> str:
    """``name`` as spelling compares it: lower case, without ``_``, ``-``, ``.`` and spaces (``Layer_Norm``
    and ``layernorm`` are one spelling)."""
    return _SEPARATORS.sub("", str(name)).casefold()


def closest(name: object, choices: Iterable[object]) -> str | None:
    """The known name that ``name`` (an unknown key, op, reference) is a misspelling of, or None.

    A suggestion fixes spelling only; it never changes what was meant. So a choice is offered when

    - it has the same numbers, in the same order (``conv3d`` is not a misspelt ``conv2d``, ``layer_norm2d`` not
      a misspelt ``layernorm``, ``relu6`` not ``relu``);
    - it is at most one edit away (two for names of :data:`LONG_NAME` characters or more), case and separators
      aside: a whole word added, dropped or swapped is more than that (``hardsigmoid`` is not a misspelt
      ``sigmoid``, nor ``drop_path`` a misspelt ``dropout``, nor ``maxpool`` ``avgpool``);
    - no other choice is as close: between ``pelu``'s neighbours ``relu``, ``gelu``, ``elu`` and ``prelu`` there
      is no telling which was meant, so none is offered.
    """
    wanted = normal_name(name)
    if not wanted:
        return None
    numbers = _NUMBERS.findall(wanted)
    allowed = SPELLING_EDITS[len(wanted) >= LONG_NAME]
    best: list[tuple[int, str, str]] = []
    for choice in choices:
        text = str(choice)
        known = normal_name(text)
        if abs(len(known) - len(wanted)) > allowed or _NUMBERS.findall(known) != numbers:
            continue
        edits = _edits(wanted, known, allowed)
        if edits <= allowed:
            best.append((edits, known, text))
    if not best:
        return None
    fewest = min(e for e, _, _ in best)
    found = {known: text for e, known, text in best if e == fewest}
    return next(iter(found.values())) if len(found) == 1 else None


def _edits(a: str, b: str, limit: int) -> int:
    """The edit distance of ``a`` and ``b`` (insertions, deletions, substitutions and swaps of neighbours,
    each counted once), or ``limit + 1`` as soon as it is known to exceed ``limit``."""
    if a == b:
        return 0
    before: list[int] | None = None
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            cost = 0 if ca == cb else 1
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if before is not None and i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], before[j - 2] + 1)
        if min(row) > limit:
            return limit + 1
        before, previous = previous, row
    return previous[-1]


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
