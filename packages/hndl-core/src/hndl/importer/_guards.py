"""The sizes an imported graph takes: every guard of the trace held against the input contract.

A traced program computes what the module does only where each guard the trace recorded holds
(``program._guards_code``: ``(L['x'].size()[2] % 64) == 0`` after a branch on ``H % 64``). torch.export itself
refuses a named ``Dim`` whose range lets a guard fail, but not a derived one (``32*Dim("h")``: torch 2.4 to
2.14 keep that guard and their exported program refuses ``h = 3`` only when called), and under ``Dim.AUTO`` it
takes whatever the trace needs. An input contract holds ranges only. So each guard is read
(:mod:`._guard_grammar`), its sizes written in the graph's dims (``x.shape[2]`` is ``32*h``), and evaluated
over the sizes the contract would take: every size from the least up to 1,024 past it, the guard's own
constants around, and a few far ones (several dims at once: a grid of them). Size 1 is among them where the
contract takes it, a failure there that is only torch's assumption that sizes are not 1 (its ``W // 32 > 1``,
``ReadGuard.fails_as_one``) aside: torch traces every dynamic dim as 2 or more, but a branch it decided can fail
at 1 (Swin's shift, off where the map is one window).

Where a guard fails at a size the contract takes, the graph would compute something the module does not (the
branch not taken), or refuse with a shape error the module would not raise. A dim made dynamic without a name
is narrowed to the run of sizes around the example where its guards hold, as torch's program would take them
(``x[:, :3]`` traced at 8 guards ``size != 3``: the dim takes 4 and up). A named ``Dim``, a guard over several
dims, and a dim whose sizes are a multiple (no run says them) are refused with ``E_IMPORT``, naming the guard and
a size where it fails, with the fix: the range, or the multiple to write the dim as (``64*Dim("h")``).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._errors import Problem
from ._guard_grammar import ReadGuard, read_guard, replace_sources
from ._symbols import ASSUMED_MINIMUM, NotExpressible, Symbols

__all__ = ["RELATION", "held_ranges"]

#: A guard of torch.export's that orders two input dims: ``L['x'].size()[0] > L['y'].size()[0]`` (refused by
#: ``_inputs`` in words of its own).
RELATION = re.compile(r"^L\['(\w+)'\]\.size\(\)\[(\d+)\] (<=|>=|<|>) L\['(\w+)'\]\.size\(\)\[(\d+)\]$")

#: Sizes tried one by one from a dim's least size up.
_DENSE = 1024
#: How far down from the example a run of sizes is followed.
_WALK = 2**16
#: Sizes tried past the dense ones: where a bound far up would show (besides each constant of the guard).
_FAR = (2**16, 2**20, 2**31)
#: Assignments tried for a guard over several dims.
_GRID = 20_000
#: The longest period looked for in the sizes a dim takes (``64*Dim("h")``).
_PERIOD = 64

Ranges = dict[str, dict[str, int]]


class _Dims:
    """The graph's dims as the guards read them: each source torch names (``L['x'].size()[2]``) as its size in
    the graph's dims (``(32*h)``) and as the user wrote it (``x.shape[2]``); each dim's least and greatest size
    under the contract; its size in the example."""

    def __init__(self, user_inputs: Sequence[Any], symbols: Symbols, ranges: Ranges) -> None:
        from .._dims import free_symbols, parse_dim

        self.sizes: dict[str, str] = {}
        self.shown: dict[str, str] = {}
        self.owner: dict[str, str] = {}  # source -> the input it is a size of
        self.uses: dict[str, list[tuple[str, int, str]]] = {}  # dim -> (input, axis, size) of each size it is in
        for n in user_inputs:
            shape = getattr(n.meta.get("val"), "shape", None)
            for axis, size in enumerate(shape if shape is not None else ()):
                try:
                    entry = symbols.entry(size)
                except NotExpressible:
                    continue
                source = f"L['{n.name}'].size()[{axis}]"
                self.sizes[source] = f"({entry})"
                self.shown[source] = f"{n.name}.shape[{axis}]"
                self.owner[source] = n.name
                if isinstance(entry, str):
                    for dim in sorted(free_symbols(parse_dim(entry))):
                        self.uses.setdefault(dim, []).append((n.name, axis, entry))
        self.names = set(symbols.names.values())
        self.example = symbols.examples()
        self.automatic = symbols.automatic
        self.low = {d: max(ASSUMED_MINIMUM, ranges.get(d, {}).get("min", ASSUMED_MINIMUM)) for d in self.names}
        # whether the contract takes size 1: torch traces as if every dynamic dim were 2 or more (its guards
        # `W // 32 > 1` say only that), but a branch its trace decided can fail at 1 all the same (Swin turns the
        # shift off where the map is one window), and the contract takes 1 unless a min says not
        self.one = {d: "min" not in ranges.get(d, {}) and symbols.declared_min.get(d, 0) <= 1 for d in self.names}
        self.high: dict[str, int | None] = {d: ranges.get(d, {}).get("max") for d in self.names}

    def candidates(self, dim: str, constants: Iterable[int], dense: int) -> list[int]:
        """The sizes of ``dim`` a guard is tried at: 1 where the contract takes it, then ``dense`` from the least
        up, then the far ones and those around the guard's constants, all inside the contract's range."""
        low, high = self.low[dim], self.high[dim]
        top = low + dense if high is None else min(high, low + dense)
        far = {c + d for c in constants for d in (-1, 0, 1)} | set(_FAR)
        one = [1] if self.one[dim] and low <= ASSUMED_MINIMUM else []
        return [*one, *range(low, top + 1), *sorted(s for s in far if s > top and (high is None or s <= high))]


def held_ranges(program: Any, user_inputs: Sequence[Any], symbols: Symbols, ranges: Ranges) -> list[Problem]:
    """Hold each guard of ``program`` against the sizes the input contract takes (``ranges``, which this
    narrows in place for dims made dynamic without a name).

    Returns:
        An ``E_IMPORT`` problem for each named dim, guard over several dims or multiple that the contract cannot
        keep, and for each guard the grammar cannot read that reads a dynamic dim.
    """
    dims = _Dims(user_inputs, symbols, ranges)
    if not dims.names:
        return []
    problems: list[Problem] = []
    by_dim: dict[str, list[tuple[str, ReadGuard]]] = {}
    several: list[tuple[str, ReadGuard]] = []
    # torch repeats a guard once per place that asks for it (392 guards, 279 distinct, in a two-stage Swin)
    for text in dict.fromkeys(str(guard).strip() for guard in getattr(program, "_guards_code", None) or ()):
        if RELATION.match(text):
            continue
        written = replace_sources(text, dims.sizes)
        read = None if "L[" in written else read_guard(written, dims.names)
        if read is None or not read.holds(dims.example):
            if any(source in text for source in dims.sizes) and _reads_dynamic(text, dims):
                problems.append(_unreadable(text, dims))
            continue
        if len(read.names) == 1:
            if _failing(read, dims) is not None:
                by_dim.setdefault(next(iter(read.names)), []).append((text, read))
        elif read.names:
            fails, sole = _on_grid(read, dims)
            if sole is not None:  # written over several dims, decided by one (``x1*x2 != 3*x2`` is ``x1 != 3``)
                by_dim.setdefault(sole, []).append((text, read))
            elif fails:
                several.append((text, read))
    for dim, guards in by_dim.items():
        problem = _narrow(dim, guards, dims, ranges)
        if problem is not None:
            problems.append(problem)
    # a guard over several dims is held to the ranges as narrowed: the sizes a dim no longer takes cannot fail it
    for dim, entry in ranges.items():
        if dim in dims.names:
            dims.low[dim] = max(dims.low[dim], entry.get("min", ASSUMED_MINIMUM))
            dims.high[dim] = entry.get("max", dims.high[dim])
    for text, read in several:
        failing = _failing(read, dims)
        if failing is not None:
            problems.append(_over_several(text, failing, dims))
    return problems


def _holds(guard: ReadGuard, env: Mapping[str, int]) -> bool:
    """Whether ``guard`` holds at ``env``; where a size it reads is 1, a failure that is only torch's assumption
    that sizes are not 1 (``ReadGuard.fails_as_one``) counts as holding: the module computes the same there."""
    if guard.holds(env):
        return True
    return any(env.get(name) == 1 for name in guard.names) and guard.fails_as_one(env)


def _reads_dynamic(text: str, dims: _Dims) -> bool:
    """Whether ``text`` names a source whose size is not a plain int."""
    return any(source in text and not size.strip("()").isdigit() for source, size in dims.sizes.items())


def _failing(guard: ReadGuard, dims: _Dims) -> dict[str, int] | None:
    """A size of each dim ``guard`` reads, inside the contract, where it fails; ``None`` where none was found."""
    names = sorted(guard.names)
    if len(names) == 1:
        (dim,) = names
        for size in dims.candidates(dim, guard.constants, _DENSE):
            env = {**dims.example, dim: size}
            if not _holds(guard, env):
                return {dim: size}
        return None
    for env in _grid(names, guard, dims):
        if not _holds(guard, {**dims.example, **env}):
            return env
    return None


def _grid(names: list[str], guard: ReadGuard, dims: _Dims) -> Iterator[dict[str, int]]:
    """The assignments of sizes to several dims a guard over them is tried at: about ``_GRID`` of them, each dim
    taking its least sizes and a few of the far ones and those around the guard's constants."""
    dense = max(4, int(_GRID ** (1 / len(names))) - 8)
    axes = [dims.candidates(d, guard.constants, dense)[: dense + 9] for d in names]
    for sizes in itertools.product(*axes):
        yield dict(zip(names, sizes, strict=True))


def _on_grid(guard: ReadGuard, dims: _Dims) -> tuple[bool, str | None]:
    """Whether a guard over several dims fails somewhere on the grid, and the one dim whose size alone then
    decides it (for every size of that dim, it holds at all sizes of the others or at none), else ``None``."""
    names = sorted(guard.names)
    table = [(env, _holds(guard, {**dims.example, **env})) for env in _grid(names, guard, dims)]
    if all(held for _, held in table):
        return False, None
    for name in names:
        seen: dict[int, bool] = {}
        if all(seen.setdefault(env[name], held) == held for env, held in table):
            return True, name
    return True, None


def _narrow(dim: str, found: list[tuple[str, ReadGuard]], dims: _Dims, ranges: Ranges) -> Problem | None:
    """Narrow an unnamed ``dim`` to the run of sizes around its example where the guards ``found`` (torch's text,
    read) hold; a problem for a named one, or for sizes a run cannot say."""
    guards = [g for _, g in found]
    memo: dict[int, bool] = {}

    def holds(size: int) -> bool:
        if size not in memo:
            memo[size] = all(_holds(g, {**dims.example, dim: size}) for g in guards)
        return memo[size]

    sizes = dims.candidates(dim, set().union(*(g.constants for g in guards)), _DENSE)
    example = dims.example[dim]
    run = _run(holds, example, dims.low[dim], dims.high[dim], sizes)
    period = _period(holds, dims.low[dim], dims.high[dim], example)
    if dim in dims.automatic and period is None:
        low, high = run
        entry = ranges.setdefault(dim, {})
        if low > ASSUMED_MINIMUM or (dims.one[dim] and not holds(1)):
            entry["min"] = low
        if high is not None:
            entry["max"] = high
        return None
    bad = next(s for s in sizes if not holds(s))
    shown = "; ".join(f"`{_shown(text, dims)}`" for text, _ in found[:3]) + ("; ..." if len(found) > 3 else "")
    uses = [f"{name}.shape[{axis}] = {size}" for name, axis, size in dims.uses.get(dim, []) if size != dim]
    where = f" ({', '.join(uses[:2])})" if uses else ""
    return Problem(
        "E_IMPORT",
        f"the trace holds only where {shown}{where}; at {dim} = {bad} it does not: torch's exported program "
        f"refuses that size, and the graph would compute something the module does not",
        node=dims.uses[dim][0][0] if dims.uses.get(dim) else None,
        hint=_fix(dim, run, period, dims),
    )


def _run(
    holds: Callable[[int], bool], example: int, least: int, greatest: int | None, tried: list[int]
) -> tuple[int, int | None]:
    """The sizes around ``example`` where every guard holds, as ``(least, greatest)``: down to the contract's
    least size, up ``_DENSE`` sizes one by one and then through the far sizes of ``tried``; ``None`` for no
    bound below the contract's own."""
    low = example
    while low - 1 >= least and example - low < _WALK and holds(low - 1):
        low -= 1
    high = example
    while (greatest is None or high < greatest) and high - example < _DENSE and holds(high + 1):
        high += 1
    if high == greatest:
        return low, None
    if high - example < _DENSE:
        return low, high
    failing = next((s for s in tried if s > high and not holds(s)), None)
    return low, (failing - 1 if failing is not None else None)


def _period(holds: Callable[[int], bool], low: int, high: int | None, example: int) -> tuple[int, int, int] | None:
    """``(p, r, first)`` when the guards hold exactly at the sizes ``p*k + r`` from ``first`` up (every ``p``-th
    one, ``p`` > 1), over the sizes tried one by one."""
    dense = range(low, low + _DENSE + 1 if high is None else min(high, low + _DENSE) + 1)
    first = next((s for s in dense if holds(s)), None)
    if first is None:
        return None
    for p in range(2, _PERIOD + 1):
        r = example % p
        if first % p == r and all(holds(s) == (s % p == r) for s in dense if s >= first):
            return p, r, first
    return None


def _fix(dim: str, run: tuple[int, int | None], period: tuple[int, int, int] | None, dims: _Dims) -> str:
    """The hint: the multiple to write the dim as, the range it takes, or to leave it static."""
    from .._dims import dim_add, dim_mul, format_dim, parse_dim, substitute, symbol

    if period is not None:
        p, r, first = period
        least = (first - r) // p
        root = f'Dim("{dim}"' + (f", min={least})" if least > 1 else ")")
        written = []
        for name, axis, size in dims.uses.get(dim, []):
            new = format_dim(substitute(parse_dim(size), {dim: dim_add(dim_mul(p, symbol(dim)), r)}))
            torch_form = re.sub(rf"\b{re.escape(dim)}\b", root, str(new))
            written.append(f"dim {axis} of {name!r} as {torch_form}")
        which = f"a multiple of {p}" if r == 0 else f"{r} more than a multiple of {p}"
        which += f", from {first}" if first > dims.low[dim] + p - 1 else ""
        return f"it holds where {dim} is {which}: in dynamic_shapes, write " + ", ".join(dict.fromkeys(written))
    low, high = run
    if low == high:
        return f"it holds at {dim} = {low} only: leave the dim static"
    bounds = f"min={low}" + (f", max={high}" if high is not None else "")
    return f'give {dim} the sizes where it holds: Dim("{dim}", {bounds}), or leave the dim static'


def _over_several(text: str, failing: Mapping[str, int], dims: _Dims) -> Problem:
    at = ", ".join(f"{d} = {s}" for d, s in failing.items())
    return Problem(
        "E_IMPORT",
        f"the trace holds only where `{_shown(text, dims)}`; at {at} it does not: torch's exported program refuses "
        f"those sizes, and an input contract cannot keep a condition over several dims",
        node=_reader(text, dims),
        hint="leave one of those dims static, or give each a range in which the condition always holds",
    )


def _unreadable(text: str, dims: _Dims) -> Problem:
    return Problem(
        "E_IMPORT",
        f"the trace holds only where `{_shown(text, dims)}`, which the importer cannot read to keep in the input "
        f"contract",
        node=_reader(text, dims),
        hint="leave the dims it reads static",
    )


def _reader(text: str, dims: _Dims) -> str | None:
    """The first input whose size ``text`` reads."""
    return next((dims.owner[s] for s in sorted(dims.owner, key=text.find) if s in text), None)


def _shown(text: str, dims: _Dims) -> str:
    """A guard as the user would write it: ``x.shape[2] % 64 == 0``."""
    return replace_sources(text, dims.shown)
