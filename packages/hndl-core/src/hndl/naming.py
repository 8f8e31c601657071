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
    "NAME_RE",
    "SHORT_WORD",
    "SPELLING_EDITS",
    "closest",
    "closest_key",
    "dtype_name",
    "excerpt",
    "normal_name",
    "printable",
    "suggestion",
]

#: What a name of a graph, input, node, output, graph parameter or op may be: letters, digits and underscores, not
#: starting with a digit. Here, at the bottom of the imports, because the graph, the registry, the loader and the
#: schema all ask it.
NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: How many spelling edits a name may be from the one offered: one for names shorter than :data:`LONG_NAME`
#: characters, two for longer ones (case and the separators ``_ - .`` and spaces are not counted).
SPELLING_EDITS = (1, 2)
#: From this many characters (separators not counted) a name may be two edits away from the one offered.
LONG_NAME = 8
#: A word shorter than this may only have two neighbouring letters swapped: one letter more, less or different
#: makes another word (``sin``/``sign``, ``ne``/``neg``, ``add``/``pad``, ``or``/``xor``, ``relu``/``gelu``).
SHORT_WORD = 5
_SEPARATORS = re.compile(r"[\s_.\-]+")
_NUMBERS = re.compile(r"\d+")
_WORDS = re.compile(r"[^\W\d_]+")


def normal_name(name: object) -> str:
    """``name`` as spelling compares it: lower case, without ``_``, ``-``, ``.`` and spaces (``Layer_Norm``
    and ``layernorm`` are one spelling)."""
    return _SEPARATORS.sub("", str(name)).casefold()


def closest(name: object, choices: Iterable[object]) -> str | None:
    """The known name that ``name`` (an unknown key, op, reference) is a misspelling of, or None.

    A suggestion fixes spelling only; it never changes what was meant. Names are compared word by word (words
    are the runs of letters; case and separators aside), and a choice is offered when

    - it has the same numbers, in the same order (``conv3d`` is not a misspelt ``conv2d``, ``layer_norm2d`` not
      a misspelt ``layernorm``, ``relu6`` not ``relu``);
    - each word is the choice's word, or a misspelling of it: a word of :data:`SHORT_WORD` letters or more
      may have one letter added, dropped or changed after its first, or two neighbours swapped; a shorter word
      only two neighbours swapped; any word may have a letter doubled or undoubled (``reluu``, ``atention``)
      and gain or lose a plural ``s`` or ``es``. So a word or a prefix added,
      dropped or changed is not a misspelling (``hardsigmoid`` of ``sigmoid``, ``drop_path`` of ``dropout``,
      ``logical_xor`` of ``logical_or``, ``sin`` of ``sign``, ``relu`` of ``prelu``). Words written together or
      apart must otherwise be spelt alike (``layer_norm`` is ``layernorm``);
    - at most one edit in all (two for names of :data:`LONG_NAME` characters or more), and no other choice is
      as close: between ``rleu``'s neighbours there is no doubt, between ``pelu``'s (``relu``, ``gelu``,
      ``prelu``, ...) there is, so none is offered.
    """
    text = str(name)
    wanted = normal_name(text)
    if not wanted:
        return None
    numbers = _NUMBERS.findall(wanted)
    allowed = SPELLING_EDITS[len(wanted) >= LONG_NAME]
    words = _WORDS.findall(text.casefold())
    best: list[tuple[int, str, str]] = []
    for choice in choices:
        known_text = str(choice)
        known = normal_name(known_text)
        if abs(len(known) - len(wanted)) > allowed or _NUMBERS.findall(known) != numbers:
            continue
        edits = _word_edits(words, _WORDS.findall(known_text.casefold()), wanted == known)
        if edits <= allowed:
            best.append((edits, known, known_text))
    if not best:
        return None
    fewest = min(e for e, _, _ in best)
    found = {known: text for e, known, text in best if e == fewest}
    return next(iter(found.values())) if len(found) == 1 else None


_TOO_MANY = 99


def _word_edits(words: list[str], known: list[str], same_letters: bool) -> int:
    """The spelling edits that turn the words ``words`` into ``known``, or a large number when one is not a
    misspelling of the other (see :func:`closest`)."""
    if same_letters:
        return 0
    if len(words) != len(known):
        return _TOO_MANY
    return sum(_misspelling(w, k) for w, k in zip(words, known))


def _misspelling(word: str, known: str) -> int:
    """0 for the same word, 1 for a misspelling of ``known`` (see :func:`closest`), else a large number."""
    if word == known:
        return 0
    if any(a + end == b for a, b in ((word, known), (known, word)) for end in ("s", "es")):
        return 1
    if _doubled(word, known) or _doubled(known, word):
        return 1
    if len(known) < SHORT_WORD:
        swapped = len(word) == len(known) and [i for i, (a, b) in enumerate(zip(word, known)) if a != b]
        if swapped and len(swapped) == 2 and swapped[1] == swapped[0] + 1:
            i = swapped[0]
            if word[i] == known[i + 1] and word[i + 1] == known[i]:
                return 1
        return _TOO_MANY
    # A misspelling keeps the first letter: one added or changed there makes another word (prelu, rsqrt).
    return 1 if word[:1] == known[:1] and _edits(word, known, 1) <= 1 else _TOO_MANY


def _doubled(longer: str, shorter: str) -> bool:
    """Whether ``longer`` is ``shorter`` with one letter written twice (``reluu``, ``kk``)."""
    return len(longer) == len(shorter) + 1 and any(
        longer[i] == longer[i + 1] and longer[:i] + longer[i + 1 :] == shorter for i in range(len(longer) - 1)
    )


def _edits(a: str, b: str, limit: int) -> int:
    """The edit distance of ``a`` and ``b`` (insertions, deletions, substitutions and swaps of neighbours,
    each counted once), or ``limit + 1`` as soon as it is known to exceed ``limit``."""
    if a == b:
        return 0
    if abs(len(a) - len(b)) > limit:
        return limit + 1
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


def suggestion(name: object, choices: Iterable[object], *, keys: bool = False) -> str | None:
    """``"did you mean 'x'?"`` for the closest choice, or None: the hint text every message uses. With ``keys``,
    the names are ``state_dict`` keys and :func:`closest_key` chooses."""
    close = closest_key(name, choices) if keys else closest(name, choices)
    return f"did you mean '{close}'?" if close is not None else None


_KEY_PREFIX = re.compile(r"(^|\.)n_")


def _key_words(key: str) -> str:
    """A ``state_dict`` key without what hndl adds to a layer's path: the ``nodes.`` root and each node's
    ``n_`` (``nodes.n_h.0.n_ln_1.weight`` is ``h.0.ln_1.weight``)."""
    return _KEY_PREFIX.sub(r"\1", key.removeprefix("nodes."))


def closest_key(key: object, choices: Iterable[object]) -> str | None:
    """The model key a checkpoint's ``key`` most likely means, or None: the one key whose path, with hndl's
    ``nodes.``/``n_`` naming taken off, is ``key``'s path, or ends with it, or starts after a prefix of ``key``
    (``transformer.h.0.ln_1.weight``); else a misspelling of one of them by :func:`closest`'s rule."""
    text = str(key)
    known = [str(c) for c in choices]
    bare = {c: _key_words(c) for c in known}
    wanted = _key_words(text)
    for match in (
        [c for c, b in bare.items() if b == wanted],
        [c for c, b in bare.items() if b.endswith("." + wanted) or wanted.endswith("." + b)],
    ):
        if len(match) == 1:
            return match[0]
    by_bare = {b: c for c, b in bare.items()}
    close = closest(wanted, by_bare)
    return by_bare[close] if close is not None else None


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
