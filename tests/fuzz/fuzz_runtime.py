"""Fuzz the runtime for a time budget: random valid graphs from the op registry (``tests/support/graph_maker.py``),
each built and called on the checked path, the fast path and the unchecked path, results compared bit for bit.

Part of ``nox -s fuzz`` (after the spec fuzzer). Prints graphs per second; exits 1 when any graph failed, with the
seed of each failing graph (``random_graph(random.Random(seed))`` rebuilds it). ``HNDL_FUZZ_RUNTIME_SECONDS``
sets the default budget (60 s).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from graph_maker import call_three_ways, eligible_ops, random_graph


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_seconds = float(os.environ.get("HNDL_FUZZ_RUNTIME_SECONDS", "60"))
    parser.add_argument("--seconds", type=float, default=default_seconds, help="time budget (default 60)")
    parser.add_argument("--seed", type=int, default=None, help="first graph seed (default: a new one, printed)")
    args = parser.parse_args(argv)
    first = args.seed if args.seed is not None else random.randrange(2**32)
    warnings.filterwarnings("ignore", category=UserWarning)  # zero-element initialisation and the like
    print(f"runtime fuzz for {args.seconds:g} s from graph seed {first}; ops: {', '.join(eligible_ops())}", flush=True)
    start = time.perf_counter()
    failures: list[tuple[int, str]] = []
    seed = first
    while time.perf_counter() - start < args.seconds:
        made = random_graph(random.Random(seed))
        try:
            call_three_ways(made)
        except Exception as exc:  # anything at all: a valid graph must build, run and agree on all three paths
            failures.append((seed, f"{made.ops}: {''.join(traceback.format_exception_only(exc)).strip()}"))
        seed += 1
    count = seed - first
    elapsed = time.perf_counter() - start
    print(f"{count} graphs in {elapsed:.0f} s ({count / max(elapsed, 1e-9):.1f}/s): {len(failures)} failures")
    for failed_seed, what in failures[:20]:
        print(f"- graph seed {failed_seed}: {what}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
