"""Timing side by side in one process: interleaved rounds, alternating order, fastest round's median.

Absolute times on a shared machine are noise; a ratio of two things timed in the same process, in interleaved
rounds, is not. Each round times both sides (``repeat`` samples of ``number`` calls each) and keeps each side's
median sample; the order of the two sides alternates from round to round, so neither always runs on a warm
cache or a quiet moment. The ratio compares the fastest round's median of each side.

The clock is the calling thread's CPU time (``time.thread_time``): the benchmarks run one torch thread, so all
the work of a call is this thread's, and time spent waiting for a core another process holds is not counted.
With wall-clock time the same code read conv_stack at batch 16 anywhere from 0.99x to 1.46x within an hour on
the shared 2-core machine; in thread CPU time it read 1.01-1.02x.
"""

from __future__ import annotations

import statistics
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Comparison:
    """Per-call seconds of each side (fastest round's median) and their ratio (hndl / twin)."""

    hndl: float
    twin: float

    @property
    def ratio(self) -> float:
        return self.hndl / self.twin


CLOCK = time.thread_time


def per_call(fn: Callable[[], object], number: int, repeat: int) -> float:
    """The median per-call time of ``repeat`` samples of ``number`` calls."""
    return statistics.median(timeit.repeat(fn, number=number, repeat=repeat, timer=CLOCK)) / number


def calibrate(fn: Callable[[], object], target: float = 0.02) -> int:
    """How many calls make one sample of about ``target`` seconds."""
    number = 1
    while True:
        elapsed = timeit.timeit(fn, number=number, timer=CLOCK)
        if elapsed >= target or number >= 1 << 20:
            return max(1, int(number * target / max(elapsed, 1e-9)))
        number *= 4


def _compare(
    hndl_fn: Callable[[], object], twin_fn: Callable[[], object], rounds: int = 10, repeat: int = 5
) -> Comparison:
    """Time both sides in ``rounds`` interleaved rounds, alternating which goes first."""
    hndl_fn()
    twin_fn()  # warm up (and, for hndl, validate)
    number = calibrate(twin_fn)
    best_hndl = best_twin = float("inf")
    for r in range(rounds):
        if r % 2 == 0:
            h = per_call(hndl_fn, number, repeat)
            t = per_call(twin_fn, number, repeat)
        else:
            t = per_call(twin_fn, number, repeat)
            h = per_call(hndl_fn, number, repeat)
        best_hndl, best_twin = min(best_hndl, h), min(best_twin, t)
    return Comparison(best_hndl, best_twin)


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:,.2f} us"
