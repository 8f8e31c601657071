"""A failed import's problems as a message that fits on a screen.

The importer reports one problem per layer and reason, each with the chain of enclosing layers it tried to keep
whole as module nodes. For a model whose many blocks share one missing operation, that is the same sentence
dozens of times with a different path in it (73,820 characters for torchvision's MaxViT, for two missing ops).
Here the problems are grouped by what went wrong: one entry per reason, with how often it happened, in how
many layers of which classes, the first few distinct source lines, and the enclosing layers that could not be
module nodes, each class once.

Only the message is grouped: :class:`~hndl.HndlError` keeps every problem in ``problems``, ``hndl import
--verbose`` prints each one, and a message that already fits is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from .._errors import HndlError, Problem
from ._trace import cut

__all__ = ["SCREEN", "grouped", "import_error", "shown"]

#: A message longer than this many characters is grouped (about a terminal screen of text).
SCREEN = 2000
#: The most groups shown; the rest are counted.
_GROUPS = 8
#: The most distinct source lines, layer paths and enclosing classes named per group.
_SHOWN = 3

# The refusal layout of ``_refusals``: "REASON[, N times][ (at `CODE`)][; and no layer around it can be a module
# node: PATH (CLASS): WHY; ...]". Any other message matches with all of it as the reason.
_REFUSAL = re.compile(
    r"^(?P<reason>.*?)(?:, (?P<count>\d+) times)?(?: \(at `(?P<code>.*)`\))?"
    r"(?:; and no layer around it can be a module node: (?P<tried>.*))?$",
    re.DOTALL,
)
_TRIED = re.compile(r"^(?P<path>\S+) \((?P<cls>[^()]+)\): (?P<why>.*)$", re.DOTALL)
_VERBOSE = "hndl import --verbose, or the HndlError's .problems, lists each"


@dataclass
class _Group:
    """The problems of one reason."""

    code: str
    reason: str
    hint: str | None
    first: Problem
    count: int = 0
    layers: dict[str, str] = field(default_factory=dict)  # layer path -> class name, in order found
    sources: dict[tuple[str | None, str], None] = field(default_factory=dict)  # (location, code), in order
    tried: dict[str, str] = field(default_factory=dict)  # class name -> why it cannot be a module node
    plain: bool = True  # every member is a plain problem (no count, source or tried layers to merge)


def grouped(problems: Sequence[Problem]) -> list[Problem]:
    """``problems`` with those of one reason merged into one problem each: how many times, in which layers
    and classes, at which source lines (the first three), and which enclosing layers could not be module
    nodes (each class once). More than :data:`_GROUPS` groups end in one problem that counts the rest."""
    groups: dict[tuple[str, str, str | None], _Group] = {}
    for problem in problems:
        match = _REFUSAL.match(problem.message)
        reason = match["reason"] if match else problem.message
        key = (problem.code, reason, problem.hint)
        group = groups.get(key)
        if group is None:
            group = groups[key] = _Group(problem.code, reason, problem.hint, problem)
        group.count += int(match["count"]) if match and match["count"] else 1
        if problem.node is not None:
            group.layers.setdefault(problem.node, problem.op or "")
        if match and (match["count"] or match["code"] or match["tried"]):
            group.plain = False
        if match and match["code"]:
            group.sources.setdefault((problem.location, match["code"]), None)
        if match and match["tried"]:
            for cls, why in _tried(match["tried"]):
                group.tried.setdefault(cls, why)
    out = [_merged(g) for g in list(groups.values())[:_GROUPS]]
    rest = list(groups.values())[_GROUPS:]
    if rest:
        count = sum(g.count for g in rest)
        out.append(
            Problem(
                "E_IMPORT",
                f"and {count} more problem(s) of {len(rest)} other kind(s), such as: {cut(rest[0].reason, 200)}",
                hint=_VERBOSE,
            )
        )
    return out


def shown(problems: Sequence[Problem], title: str | None = None) -> list[Problem]:
    """The problems as a message shows them: as they are when their message fits on a screen
    (:data:`SCREEN` characters), else :func:`grouped`."""
    if len(_text(problems, title)) <= SCREEN:
        return list(problems)
    return grouped(problems)


def import_error(problems: Sequence[Problem], *, title: str) -> HndlError:
    """The ``HndlError`` for a failed import: ``problems`` holds every problem; the message groups them when
    they would not fit on a screen, and ``full_message`` is the message with every problem in full."""
    error = HndlError(list(problems), title=title)
    full = str(error)
    error.full_message = full  # type: ignore[attr-defined]
    if len(full) > SCREEN:
        groups = grouped(problems)
        count = len(problems)
        head = (
            f"{count} problem{'s' if count != 1 else ''} in {title}, grouped by reason into {len(groups)} ({_VERBOSE}):"
        )
        error.args = ("\n".join([head, *(str(p) for p in groups)]),)
    return error


def _merged(group: _Group) -> Problem:
    """One group as one problem (a lone plain problem as it was)."""
    if group.plain and group.count == 1:
        return group.first
    first = group.first
    message = group.reason
    layers = list(group.layers.items())
    if group.count > 1 or len(layers) > 1:
        message += f", {group.count} time{'s' if group.count != 1 else ''}"
        if len(layers) > 1:
            message += f" in {len(layers)} {_classes(layers)}"
    sources = list(group.sources)
    if sources:
        location, code = sources[0]
        message += f" (at `{code}`"
        base = _file(location)
        for other_location, other_code in sources[1:_SHOWN]:
            where = other_location or "?"
            if base is not None and _file(other_location) == base:
                where = "line " + where.rsplit(":", 1)[-1]
            message += f"; {where}: `{other_code}`"
        if len(sources) > _SHOWN:
            message += f"; and {len(sources) - _SHOWN} more line(s)"
        message += ")"
    if len(layers) > 1:
        paths = [path for path, _ in layers]
        message += (
            "; layers "
            + ", ".join(paths[:_SHOWN])
            + (f" and {len(paths) - _SHOWN} more" if len(paths) > _SHOWN else "")
        )
    if group.tried:
        tried = [f"{cls} ({cut(why, 100)})" for cls, why in list(group.tried.items())[:_SHOWN]]
        more = len(group.tried) - _SHOWN
        message += (
            "; no layer around it can be a module node: "
            + "; ".join(tried)
            + (f"; and {more} more class(es)" if more > 0 else "")
        )
    node, op = (first.node, first.op) if len(layers) <= 1 else (None, None)
    return Problem(first.code, message, node=node, op=op, location=first.location, hint=group.hint)


def _classes(layers: list[tuple[str, str]]) -> str:
    """``Mix layers``, or ``layers (MBConv x12, FusedMBConv x4)``: the layers' classes with their counts, in
    order found."""
    counts: dict[str, int] = {}
    for _, cls in layers:
        counts[cls or "?"] = counts.get(cls or "?", 0) + 1
    if len(counts) == 1:
        return f"{next(iter(counts))} layers"
    return "layers (" + ", ".join(f"{cls} x{n}" if n > 1 else cls for cls, n in counts.items()) + ")"


def _tried(text: str) -> list[tuple[str, str]]:
    """``PATH (CLASS): WHY; PATH (CLASS): WHY`` as (class, why) pairs; a part that is not one goes with the
    one before it (a reason may itself hold ``; ``)."""
    pairs: list[tuple[str, str]] = []
    for part in text.split("; "):
        match = _TRIED.match(part)
        if match:
            pairs.append((match["cls"], match["why"]))
        elif pairs:
            pairs[-1] = (pairs[-1][0], f"{pairs[-1][1]}; {part}")
        else:
            pairs.append(("?", part))
    return pairs


def _file(location: str | None) -> str | None:
    """The file part of ``file:line``."""
    if location is None:
        return None
    head, sep, tail = location.rpartition(":")
    return head if sep and tail.isdigit() else location


def _text(problems: Sequence[Problem], title: str | None) -> str:
    return str(HndlError(list(problems), title=title))
