"""The range of a dynamic dim that torch.export's violated guards allow, for the hint of a failed import.

A dim marked dynamic (``Dim("H")``) ranges over every size from 2 up. A CNN usually needs more: after five
stride-2 convolutions and a pooling to 1x1, ``1 + (H - 1) // 32 != 1`` holds only from H = 33. torch.export
then fails with "Not all values of H = L['x'].size()[2] in the specified range satisfy the generated guard
...", and suggests a fix only for some guards (none for this one; for others a bound that still fails). Here
each violated guard is read with :mod:`._guard_grammar` (nothing is ``eval``-ed), evaluated over the dim's
sizes, and the run of sizes around the traced example where every guard holds becomes the suggestion, in the
user's own dim names: ``Dim("H", min=33)``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from ._guard_grammar import read_guard, replace_sources

__all__ = ["Violation", "examples_of", "suggested_ranges", "violations"]

_LINE = re.compile(
    r"Not all values of (?P<name>\w+) = (?P<source>\S+) in the specified range(?P<range>[^\n]*?) "
    r"satisfy the generated guard (?P<guard>[^\n]+)"
)
_RANGE = re.compile(r"^\s*(?:(?P<min>\d+) <= )?\w+(?: <= (?P<max>\d+))?\s*$")
_SOURCE = re.compile(r"^L\['(?P<arg>\w+)'\]\.size\(\)\[(?P<axis>\d+)\]$")
#: Sizes checked one by one above the dim's lower bound; past them only the guards' own constants are checked.
_DENSE = 4096
#: Sizes checked past the dense ones: where a bound far up would show (besides each constant of the guards).
_FAR = (2**16, 2**20, 2**31)

Guard = Callable[[int], bool]


class Violation:
    """One dim's violated guards: its name, where torch found it (``L['x'].size()[2]``), the range the user
    gave (``None``: unbounded) and the guards as functions of the size."""

    def __init__(self, name: str, source: str, low: int | None, high: int | None) -> None:
        self.name = name
        self.source = source
        self.low = low
        self.high = high
        self.guards: list[Guard] = []
        self.constants: set[int] = set()
        self.readable = True  # every guard parsed


def violations(text: str) -> dict[str, Violation]:
    """The dims torch.export's constraint-violation ``text`` names, each with its guards, in order named."""
    found: dict[str, Violation] = {}
    matches = list(_LINE.finditer(text))
    sources = {m["source"]: m["name"] for m in matches}
    for match in matches:
        name = match["name"]
        bounds = _RANGE.match(match["range"]) if match["range"].strip() else None
        v = found.get(name)
        if v is None:
            low = int(bounds["min"]) if bounds and bounds["min"] else None
            high = int(bounds["max"]) if bounds and bounds["max"] else None
            v = found[name] = Violation(name, match["source"], low, high)
        guard = _guard(match["guard"].rstrip().removesuffix("."), sources, name)
        if guard is None:
            v.readable = False
        else:
            v.guards.append(guard[0])
            v.constants |= guard[1]
    return found


def suggested_ranges(text: str, examples: Mapping[str, int]) -> dict[str, tuple[int | None, int | None]]:
    """For each dim of ``text`` whose guards all parse and allow a range of more than one size: the range
    ``(min, max)`` around its example size (``examples[name]``; without one, the highest range) in which every
    guard holds. ``None`` for a bound the guards leave where the user had it."""
    out: dict[str, tuple[int | None, int | None]] = {}
    for name, v in violations(text).items():
        if not v.readable or not v.guards:
            continue
        found = _run(v, examples.get(name))
        if found is not None:
            out[name] = found
    return out


def _run(v: Violation, example: int | None) -> tuple[int | None, int | None] | None:
    start = max(2, v.low or 0)
    stop = min(v.high, start + _DENSE) if v.high is not None else start + _DENSE

    def holds(size: int) -> bool:
        return all(g(size) for g in v.guards)

    runs: list[list[int]] = []
    for size in range(start, stop + 1):
        if holds(size):
            if runs and runs[-1][1] == size - 1:
                runs[-1][1] = size
            else:
                runs.append([size, size])
    if not runs:
        return None
    chosen = runs[-1]
    if example is not None:
        chosen = next((r for r in runs if r[0] <= example <= r[1]), chosen)
    low: int = chosen[0]
    high: int | None = chosen[1]
    if high == stop and (v.high is None or stop < v.high):
        # The run reaches the end of the dense sizes: the first size past them where a guard fails ends it.
        far = sorted({c + d for c in v.constants for d in (-1, 0, 1)} | set(_FAR))
        far = [s for s in far if s > stop and (v.high is None or s <= v.high)]
        failing = next((s for s in far if not holds(s)), None)
        high = failing - 1 if failing is not None else v.high
    if low == high:
        return None  # one size: the model fixes the dim, which a range cannot say
    if low == start and high == v.high:
        return None  # every size the user allowed holds: the guards say nothing this reads
    return (low if low != start or v.low is not None else None, high)


def examples_of(found: Mapping[str, Violation], names: list[str], args: tuple[Any, ...]) -> dict[str, int]:
    """The traced size of each dim, read from ``args`` (named by ``names``, the forward's parameters) at the
    place torch names (``L['x'].size()[2]``)."""
    out = {}
    for name, v in found.items():
        match = _SOURCE.match(v.source)
        if match is None or match["arg"] not in names:
            continue
        index = names.index(match["arg"])
        shape = getattr(args[index], "shape", None) if index < len(args) else None
        axis = int(match["axis"])
        if shape is not None and axis < len(shape):
            out[name] = int(shape[axis])
    return out


# --- one dim's guards -----------------------------------------------------------------------------------------

_SYMBOL = "_size"


def _guard(text: str, sources: Mapping[str, str], name: str) -> tuple[Guard, set[int]] | None:
    """``text`` (a guard as torch prints it) as a function of the size of ``name``, with the integers it
    holds; ``None`` when it names another dim or holds anything outside the grammar."""
    mine = {source: _SYMBOL for source, dim in sources.items() if dim == name}
    if any(source in text for source, dim in sources.items() if dim != name):
        return None
    read = read_guard(replace_sources(text, mine), (_SYMBOL,))
    if read is None:
        return None
    return (lambda size: read.holds({_SYMBOL: size})), read.constants
