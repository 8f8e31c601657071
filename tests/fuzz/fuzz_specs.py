"""Fuzz spec files, one-file models and pictures for a time budget: ``nox -s fuzz`` (``-- --seconds 60`` for a
short run).

Runs the hardening cases of ``spec_mutator.HOSTILE`` and ``HOSTILE_MODELS`` first, then mutants of the seed
specs (graph parameters included) and of those cases (``tests/support/spec_mutator.py``, the mutator the
property tests use), each through ``hndl.loads`` -> ``hndl.check`` -> ``hndl.build`` on PyTorch's meta device
(for those that check, and within the size hndl builds there to describe a graph), and ``dumps``/``loads`` for
those that load; a share of those that load are also drawn (DOT and Mermaid text, which must hold no control
character, and now and then SVG through Graphviz's ``dot``, which must parse as XML). A share of the cases are
one-file models instead: the seed and hostile ``.safetensors`` files mutated (header as data, the spec in
their metadata as text, their ties, their bytes) through ``hndl.load_model`` and a call, and a few are
``config.json`` files: the hostile ones of ``hostile_loads.HOSTILE_CONFIGS`` and mutants of a small llama's config,
through ``hndl.zoo.from_pretrained`` (the hostile ``*.index.json`` files and state dicts of the same module run
once, through ``hndl.load_state_dict``). Anything but
:class:`hndl.HndlError` is a failure, and so is a case that runs past ``--case-seconds`` of CPU time, one that
raises the process's peak memory by more than ``--case-memory-gb``, a round trip that changes the text, or a
picture that is not clean. Each distinct failure (exception type and where it was raised) is reported with its
count and reproducers: the case in a file, the traceback beside it.

Prints cases per second (of wall time, and per CPU second, which other load on the machine does not change)
as it goes; exits 1 when anything failed, 0 otherwise. Skips nothing: every case is
run through every stage it reaches. ``HNDL_FUZZ_SECONDS`` sets the default budget (600 s).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import signal
import string
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from hostile_loads import HOSTILE_CONFIGS, HOSTILE_INDEXES, HOSTILE_STATE_DICTS, SMALL_LLAMA
from spec_mutator import (
    HOSTILE,
    HOSTILE_MODELS,
    JUNK_CHARACTERS,
    KEYS,
    MODEL_SEEDS,
    NAMES,
    OPS,
    SEEDS,
    mutate_data,
    mutate_model,
    mutate_text,
    to_text,
)

import hndl

T = TypeVar("T")

# Scalars the mutator writes, beyond random ones: the values that once escaped as non-HndlErrors or took
# unbounded work (issue 10), and those that border the limits.
SPECIAL_SCALARS: list[Any] = [
    10**4300 - 1,
    -(10**4299),
    10**20,
    2**63,
    -1,
    0,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    "(" * 300 + "B" + ")" * 300,
    "B" + "//2" * 300,
    "*".join(["(A+B+C+D)"] * 8),
    "\x1b[2J\nother.yaml: OK",
    "self",
    "a" * 1100,
    "float64",
    "int8",
    "*b",
    "C*H",
    "B+1",
    "(",
    "1e5",
    # graph parameters (issue 20): references, expressions, and a list of references that grows per level
    "$width",
    "$q",
    "$width*2",
    "$nope",
    ["$q", "$q", "$q", "$q"],
    "n" * 20_000,
    "a\x00b&amp;#quot;<b>`",
]
STRINGS = NAMES + OPS + KEYS + ["float32", "int64", "cpu", "meta", "$depth", "$act", "$hidden", "block"]
TEXT_CHARACTERS = string.printable + "\x00\x1b\r\u2028\u202e\ufeffé"


class RandomChooser:
    """The mutator's choices from :class:`random.Random`: fast, and reproducible from the seed."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def choice(self, options: Sequence[T]) -> T:
        return self.rng.choice(options)

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def value(self, depth: int = 0) -> Any:
        kind = self.rng.randrange(10 if depth < 2 else 8)
        if kind == 0:
            return self.rng.choice([None, True, False])
        if kind == 1:
            return self.rng.randint(-3, 24)
        if kind == 2:
            return self.rng.choice([self.rng.uniform(-2, 2), 0.0, 1e-5, -0.0])
        if kind == 3:
            return self.rng.choice(SPECIAL_SCALARS)
        if kind in (4, 5):
            return self.rng.choice(STRINGS)
        if kind in (6, 7):
            return "".join(self.rng.choice(TEXT_CHARACTERS) for _ in range(self.rng.randint(0, 8)))
        if kind == 8:
            return [self.value(depth + 1) for _ in range(self.rng.randint(0, 4))]
        keys = KEYS + NAMES
        return {self.rng.choice(keys): self.value(depth + 1) for _ in range(self.rng.randint(0, 4))}

    def junk(self) -> str:
        alphabet = JUNK_CHARACTERS if self.rng.random() < 0.7 else TEXT_CHARACTERS
        return "".join(self.rng.choice(alphabet) for _ in range(self.rng.randint(0, 6)))

    def character(self) -> str:
        return self.rng.choice(TEXT_CHARACTERS)


class CaseTimeout(Exception):
    """A case used more than --case-seconds of CPU time (raised from a profiling-timer signal, which counts the
    process's own CPU time: other load on the machine does not make a case fail)."""


@dataclass
class Failure:
    kind: str
    count: int = 0
    reproducers: list[Path] = field(default_factory=list)
    example: str = ""


@dataclass
class Run:
    out: Path
    keep: int
    failures: dict[tuple[str, str], Failure] = field(default_factory=dict)
    cases: int = 0
    cpu: float = 0.0  # CPU seconds the fuzzing used (summed over workers): the rate other load cannot change
    stages: dict[str, int] = field(
        default_factory=lambda: {
            "load": 0,
            "check": 0,
            "build": 0,
            "draw": 0,
            "svg": 0,
            "model": 0,
            "models loaded": 0,
            "weights": 0,
        }
    )
    peak: int = 0  # the process's peak resident memory after the last case, in bytes

    def record(self, text: str | bytes, stage: str, exc: BaseException, label: str) -> None:
        frames = traceback.extract_tb(exc.__traceback__)
        if isinstance(exc, CaseTimeout) and len(frames) > 1:
            frames = frames[:-1]  # the last frame is the timer's handler; the one before is what was running
        where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
        key = (f"{stage}: {type(exc).__name__}", where)
        failure = self.failures.setdefault(key, Failure(kind=f"{stage}: {type(exc).__name__} at {where}"))
        failure.count += 1
        if len(failure.reproducers) < self.keep:
            self.out.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                path = self.out / f"case-{self.cases:07d}.safetensors"
                path.write_bytes(text)
            else:
                path = self.out / f"case-{self.cases:07d}.yaml"
                path.write_text(text, encoding="utf-8", errors="surrogatepass")
            detail = "".join(traceback.format_exception(exc))
            path.with_suffix(".txt").write_text(f"{label}\nstage: {stage}\n\n{detail}", encoding="utf-8")
            failure.reproducers.append(path)
            failure.example = (str(exc).splitlines() or [""])[0][:200]


class MemoryGrowth(Exception):
    """A case raised the process's peak memory by more than --case-memory-gb."""


def run_case(
    run: Run,
    text: str,
    label: str,
    case_seconds: float,
    round_trip: bool = True,
    *,
    draw: bool = False,
    svg: bool = False,
    case_memory: float = 1.0,
) -> None:
    """One case through load -> check -> meta build (and, with ``round_trip``, ``dumps``/``loads`` of what
    loaded; with ``draw``, DOT and Mermaid text of what loaded, and with ``svg`` an SVG through Graphviz);
    failures recorded."""
    import torch

    from hndl._check_limits import meta_build_problem
    from hndl.torch import build_module

    run.cases += 1
    stage = "load"
    signal.setitimer(signal.ITIMER_PROF, case_seconds)
    try:
        try:
            graph = hndl.loads(text)
        except hndl.HndlError:
            return
        run.stages["load"] += 1
        if round_trip:
            stage = "round trip"
            dumped = hndl.dumps(graph)
            if hndl.dumps(hndl.loads(dumped)) != dumped:
                raise AssertionError("dumps(loads(dumps(g))) differs from dumps(g)")
        if draw:
            stage = "draw"
            if draw_case(graph, svg):
                run.stages["draw"] += 1
                run.stages["svg"] += svg
        stage = "check"
        try:
            checked = hndl.check(graph)
        except hndl.HndlError:
            return
        run.stages["check"] += 1
        stage = "build"
        if meta_build_problem(checked) is not None:  # as hndl summary does: too large to build only to describe
            return
        try:
            with torch.device("meta"):
                build_module(graph, checked)
        except hndl.HndlError:
            return
        run.stages["build"] += 1
    except hndl.HndlError as exc:  # from dumps, or loading what dumps wrote: the round trip failed
        run.record(text, stage, exc, label)
    except (Exception, RecursionError, MemoryError, CaseTimeout) as exc:
        run.record(text, stage, exc, label)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        _check_memory(run, text, stage, label, case_memory)


def draw_case(graph: hndl.Graph, svg: bool) -> bool:
    """Draw ``graph`` as DOT and Mermaid text (and, with ``svg``, as SVG through Graphviz); ``False`` when it
    cannot be drawn (an HndlError), an AssertionError when a picture is not clean."""
    try:
        texts = [hndl.draw(graph, format="dot"), hndl.draw(graph, format="mermaid")]
    except hndl.HndlError:
        return False
    for text in texts:
        assert isinstance(text, str)
        bad = sorted({ch for ch in text if ch != "\n" and not ch.isprintable()})
        if bad:
            raise AssertionError(f"the picture holds control characters {bad!r}")
        if max(map(len, text.splitlines()), default=0) > 2000:
            raise AssertionError("the picture has a line of more than 2,000 characters")
    if svg:
        import xml.etree.ElementTree as ET

        image = hndl.draw(graph, format="svg")
        try:
            ET.fromstring(image)
        except ET.ParseError as exc:
            raise AssertionError(f"the SVG is not valid XML: {exc}") from exc
    return True


def run_model_case(
    run: Run, data: bytes, label: str, case_seconds: float, path: Path, *, case_memory: float = 1.0
) -> None:
    """One model file through ``hndl.load_model`` and, when it loads, a call on example inputs; failures
    recorded (the file kept as the reproducer)."""
    run.cases += 1
    run.stages["model"] += 1
    stage = "load_model"
    signal.setitimer(signal.ITIMER_PROF, case_seconds)
    try:
        path.write_bytes(data)
        try:
            model = hndl.load_model(path)
        except hndl.HndlError:
            return
        run.stages["models loaded"] += 1
        stage = "call"
        try:
            model(*model.example_inputs(B=2))
        except hndl.HndlError:
            return
    except (Exception, RecursionError, MemoryError, CaseTimeout) as exc:
        run.record(data, stage, exc, label)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        _check_memory(run, data, stage, label, case_memory)


def run_weights_case(
    run: Run, text: str, label: str, case_seconds: float, folder: Path, kind: str, *, case_memory: float = 1.0
) -> None:
    """One weights case: ``text`` as ``config.json`` through ``hndl.zoo.from_pretrained`` (``kind`` "config"),
    as ``model.safetensors.index.json`` through ``hndl.load_state_dict`` ("index"), or the name of a hostile state
    dict loaded into a small model ("state dict"), in ``folder`` (emptied first); failures recorded. A message
    of more than 100,000 characters is a failure too."""
    import hndl.zoo

    run.cases += 1
    run.stages["weights"] += 1
    stage = f"weights ({kind})"
    signal.setitimer(signal.ITIMER_PROF, case_seconds)
    try:
        for old in folder.iterdir():
            old.unlink()
        try:
            if kind == "config":
                (folder / "config.json").write_text(text, encoding="utf-8", errors="surrogatepass")
                hndl.zoo.from_pretrained(folder)
            else:
                g = hndl.Graph("mlp")
                g.output(g.add("linear", g.input("x", ("B", 4)), name="a", out_features=4))
                model = hndl.build(g)
                if kind == "index":
                    (folder / "model.safetensors.index.json").write_text(text, encoding="utf-8")
                    hndl.load_state_dict(model, folder)
                else:
                    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
                    hndl.load_state_dict(model, HOSTILE_STATE_DICTS[text](state))
        except hndl.HndlError as exc:
            if len(str(exc)) > 100_000:
                raise AssertionError(f"a message of {len(str(exc)):,} characters") from exc
    except (Exception, RecursionError, MemoryError, CaseTimeout) as exc:
        run.record(text, stage, exc, label)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        _check_memory(run, text, stage, label, case_memory)


def _check_memory(run: Run, case: str | bytes, stage: str, label: str, gigabytes: float) -> None:
    """Record the case when it raised the process's peak resident memory by more than ``gigabytes`` (the peak
    only grows, so this sees a case that used that much more than any before it)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
    grew, run.peak = peak - run.peak, max(run.peak, peak)
    if run.cases > 1 and gigabytes > 0 and grew > gigabytes * 2**30:
        try:
            raise MemoryGrowth(f"the peak resident memory grew by {grew / 2**30:.2f} GB")
        except MemoryGrowth as exc:
            run.record(case, stage, exc, label)


#: The seeds as text in each style, written once: the seeds never change, and writing them was a tenth of the run.
SEED_TEXTS = [to_text(seed, style) for seed in SEEDS for style in ("block", "flow", "json")]
#: The share of loaded cases that also go through the dumps/loads round trip: it parses the spec twice more,
#: so checking it on every case would halve the cases run; a third still round-trips tens of thousands.
ROUND_TRIP_SHARE = 0.33


#: The share of cases that are one-file models rather than spec texts, of loaded specs that are also drawn as
#: DOT and Mermaid text, and of those drawn that also go through Graphviz to SVG (a process per picture).
MODEL_SHARE = 0.15
#: The share of cases that are mutated config.json files (cheap: a folder without weights is refused once read).
CONFIG_SHARE = 0.05
DRAW_SHARE = 0.2
SVG_SHARE = 0.05


def next_model_case(choose: RandomChooser) -> tuple[bytes, str]:
    name, data = choose.choice([*MODEL_SEEDS.items(), *HOSTILE_MODELS.items()])
    return mutate_model(choose, data), f"mutated model file {name!r}"


def next_config_case(choose: RandomChooser) -> str:
    """A small llama's config.json mutated as data, now and then with a rope field or model_type of any value."""
    seed = {**SMALL_LLAMA, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    tree = mutate_data(choose, seed)
    if isinstance(tree, dict) and choose.integer(0, 3) == 0:
        tree[choose.choice(["rope_scaling", "rope_parameters", "model_type"])] = choose.value()
    try:
        return json.dumps(tree, allow_nan=True)
    except (ValueError, OverflowError, TypeError):  # an integer too long to print
        return json.dumps(seed)


def next_case(choose: RandomChooser, hostile: list[str]) -> tuple[str, str]:
    roll = choose.rng.random()
    if roll < 0.5:
        tree = mutate_data(choose, choose.choice(SEEDS))
        # JSON (a YAML subset) most of the time: json.dumps is C, and the loader reads it as any YAML.
        style = choose.choice(["block", "flow", "json", "json"])
        try:
            return to_text(tree, style), f"mutated data ({style})"
        except (ValueError, OverflowError):  # json/yaml of an integer too long to print: write it as YAML text
            return choose.choice(SEED_TEXTS), f"seed ({style})"
    if roll < 0.9:
        return mutate_text(choose, choose.choice(SEED_TEXTS)), "mutated seed text"
    return mutate_text(choose, choose.choice(hostile)), "mutated hostile text"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    out = Path(args.out) if args.out else Path(tempfile.gettempdir()) / f"hndl-fuzz-{seed}"
    jobs = max(1, args.jobs)
    print(f"fuzzing for {args.seconds:g} s in {jobs} processes, seed {seed}; reproducers go to {out}", flush=True)
    settings = (args.seconds, args.keep, args.case_seconds, args.memory_gb, args.report_every, args.case_memory_gb)
    start = time.perf_counter()
    if jobs == 1:
        runs = [fuzz(0, seed, out, *settings)]
    else:
        # Spawned, not forked: each worker imports torch itself and sets its own timer and memory cap.
        context = multiprocessing.get_context("spawn")
        with context.Pool(jobs) as pool:
            runs = pool.starmap(fuzz, [(worker, seed, out, *settings) for worker in range(jobs)])
    elapsed = time.perf_counter() - start
    total = Run(out=out, keep=args.keep)
    for run in runs:
        total.cases += run.cases
        total.cpu += run.cpu
        for stage, count in run.stages.items():
            total.stages[stage] += count
        for key, failure in run.failures.items():
            merged = total.failures.setdefault(key, Failure(kind=failure.kind, example=failure.example))
            merged.count += failure.count
            merged.reproducers += failure.reproducers[: max(0, args.keep - len(merged.reproducers))]
    print(_progress(total, elapsed))
    return _report(total)


def fuzz(
    worker: int,
    seed: int,
    out: Path,
    seconds: float,
    keep: int,
    case_seconds: float,
    memory_gb: float,
    report_every: float,
    case_memory_gb: float = 1.0,
) -> Run:
    """One process's share: worker 0 runs the hostile cases first; every worker then mutates for the budget,
    from its own random stream (``seed`` and the worker number), writing reproducers under ``out/worker-N``."""
    import torch  # before the memory cap: importing it reserves address space

    del torch
    run = Run(out=out / f"worker-{worker}", keep=keep)
    signal.signal(signal.SIGPROF, _timeout)
    _limit_memory(memory_gb)
    scratch = Path(tempfile.mkdtemp(prefix=f"hndl-fuzz-models-{worker}-")) / "model.safetensors"
    folder = Path(tempfile.mkdtemp(prefix=f"hndl-fuzz-folders-{worker}-"))
    start, cpu_start = time.perf_counter(), time.process_time()
    if worker == 0:
        for name, text in HOSTILE.items():
            # A long text costs about a second to parse (25 us a value): its round trip would parse it twice more.
            short = len(text) < 20_000
            label = f"hostile case {name!r}"
            # Parsing is linear in the text: a long one gets its budget per 20,000 characters, so a machine four
            # times slower than this one (CI's, measured in CPU seconds per case) does not fail the 80,000-
            # character case that a quadratic step would still push past it.
            budget = case_seconds * max(1.0, len(text) / 20_000)
            run_case(run, text, label, budget, short, draw=True, case_memory=case_memory_gb)
        for name, data in HOSTILE_MODELS.items():
            run_model_case(run, data, f"hostile model {name!r}", case_seconds, scratch, case_memory=case_memory_gb)
        for kind, cases in (("config", HOSTILE_CONFIGS), ("index", HOSTILE_INDEXES)):
            for name, text in cases.items():
                label = f"hostile {kind} {name!r}"
                run_weights_case(run, text, label, case_seconds, folder, kind, case_memory=case_memory_gb)
        for name in HOSTILE_STATE_DICTS:
            label = f"hostile state dict {name!r}"
            run_weights_case(run, name, label, case_seconds, folder, "state dict", case_memory=case_memory_gb)
    choose = RandomChooser(random.Random(seed * 1000 + worker))
    # Mutants of the long hostile texts cost seconds each to parse; the short ones are mutated.
    hostile = [text for text in HOSTILE.values() if len(text) < 20_000]
    last_report = start
    while time.perf_counter() - start < seconds:
        where = f"seed {seed}, worker {worker}, case {run.cases + 1}"
        roll = choose.rng.random()
        if roll < MODEL_SHARE:
            data, label = next_model_case(choose)
            run_model_case(run, data, f"{label}, {where}", case_seconds, scratch, case_memory=case_memory_gb)
        elif roll < MODEL_SHARE + CONFIG_SHARE:
            label = f"mutated config.json, {where}"
            text = next_config_case(choose)
            run_weights_case(run, text, label, case_seconds, folder, "config", case_memory=case_memory_gb)
        else:
            text, label = next_case(choose, hostile)
            round_trip = choose.rng.random() < ROUND_TRIP_SHARE
            draw = choose.rng.random() < DRAW_SHARE
            svg = draw and choose.rng.random() < SVG_SHARE
            run_case(
                run,
                text,
                f"{label}, {where}",
                case_seconds,
                round_trip,
                draw=draw,
                svg=svg,
                case_memory=case_memory_gb,
            )
        now = time.perf_counter()
        run.cpu = time.process_time() - cpu_start
        if now - last_report >= report_every:
            last_report = now
            print(f"[worker {worker}] {_progress(run, now - start)}", flush=True)
    return run


def _progress(run: Run, elapsed: float) -> str:
    failures = sum(f.count for f in run.failures.values())
    return (
        f"{run.cases} cases in {elapsed:.0f} s ({run.cases / max(elapsed, 1e-9):.0f}/s, "
        f"{run.cases / max(run.cpu, 1e-9):.0f} per CPU second): "
        f"{run.stages['load']} loaded, {run.stages['check']} checked, {run.stages['build']} built, "
        f"{run.stages['draw']} drawn ({run.stages['svg']} as SVG); {run.stages['model']} model files, "
        f"{run.stages['models loaded']} loaded; {run.stages['weights']} weights cases; {failures} failures"
    )


def _report(run: Run) -> int:
    if not run.failures:
        print("no failures: every case loaded, checked, built and drew, or raised HndlError")
        return 0
    print(f"\n{len(run.failures)} distinct failures:")
    for failure in sorted(run.failures.values(), key=lambda f: -f.count):
        print(f"- {failure.kind}: {failure.count} cases; {failure.example}")
        for path in failure.reproducers:
            print(f"    {path} (traceback: {path.with_suffix('.txt').name})")
    return 1


def _timeout(signum: int, frame: Any) -> None:
    raise CaseTimeout("the case used more than --case-seconds of CPU time")


def _limit_memory(gigabytes: float) -> None:
    """Cap the address space, so that a case that would allocate gigabytes fails with MemoryError here
    instead of taking the machine's memory."""
    if gigabytes <= 0:
        return
    try:
        import resource
    except ImportError:  # not on Windows
        return
    limit = int(gigabytes * 2**30)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_seconds = float(os.environ.get("HNDL_FUZZ_SECONDS", "600"))
    parser.add_argument("--seconds", type=float, default=default_seconds, help="time budget (default 600)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a new one, printed)")
    parser.add_argument("--out", default=None, help="directory for reproducers (default: a temp directory)")
    parser.add_argument("--keep", type=int, default=3, help="reproducers kept per distinct failure (default 3)")
    # The bound is 1 s per case; twice that leaves room for a slow machine.
    parser.add_argument("--case-seconds", type=float, default=2.0, help="a case using more CPU time fails (default 2)")
    parser.add_argument("--memory-gb", type=float, default=6.0, help="address-space cap, 0 for none (default 6)")
    parser.add_argument(
        "--case-memory-gb",
        type=float,
        default=1.0,
        help="a case raising the peak resident memory by more than this fails, 0 for no check (default 1)",
    )
    parser.add_argument("--report-every", type=float, default=30.0, help="seconds between progress lines")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per CPU)")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
