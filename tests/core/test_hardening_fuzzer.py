"""The fuzzer behind ``nox -s fuzz`` reports what it must: a non-HndlError, a case that runs too long and a
round trip that changes the text each become a failure with the spec text written to a file."""

from __future__ import annotations

import importlib.util
import random
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from spec_mutator import HOSTILE, SEEDS, to_text

import hndl

FUZZER = Path(__file__).resolve().parents[1] / "fuzz" / "fuzz_specs.py"
MLP = to_text(SEEDS[0], "block")


@pytest.fixture(scope="module")
def fuzzer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fuzz_specs", FUZZER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_specs"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def timer(fuzzer: ModuleType) -> Iterator[None]:
    previous = signal.signal(signal.SIGPROF, fuzzer._timeout)
    yield
    signal.signal(signal.SIGPROF, previous)


def test_the_fuzzer_reports_a_non_hndl_error_with_a_reproducer(
    fuzzer: ModuleType, timer: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_check(graph: hndl.Graph) -> None:
        raise KeyError("boom")

    monkeypatch.setattr(hndl, "check", broken_check)
    run = fuzzer.Run(out=tmp_path, keep=2)
    for _ in range(3):
        fuzzer.run_case(run, MLP, "the mlp seed", 5.0)
    ((kind, _), failure), *others = run.failures.items()
    assert (kind, failure.count, others) == ("check: KeyError", 3, [])
    assert [p.read_text() for p in failure.reproducers] == [MLP, MLP]  # two kept, all three counted
    assert "KeyError: 'boom'" in failure.reproducers[0].with_suffix(".txt").read_text()


def test_the_fuzzer_reports_a_case_that_runs_too_long(
    fuzzer: ModuleType, timer: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def slow_check(graph: hndl.Graph) -> None:
        while True:
            pass

    monkeypatch.setattr(hndl, "check", slow_check)
    run = fuzzer.Run(out=tmp_path, keep=1)
    fuzzer.run_case(run, MLP, "the mlp seed", 0.2)
    ((kind, where),) = run.failures
    assert kind == "check: CaseTimeout"
    assert where.startswith("test_hardening_fuzzer.py:")  # the loop that was running, not the timer


def test_the_fuzzer_passes_a_good_spec_through_every_stage(fuzzer: ModuleType, timer: None, tmp_path: Path) -> None:
    run = fuzzer.Run(out=tmp_path, keep=1)
    fuzzer.run_case(run, MLP, "the mlp seed", 5.0)
    assert (run.cases, run.stages, run.failures) == (1, {"load": 1, "check": 1, "build": 1}, {})


def test_the_fuzzer_mutates_seeds_and_hostile_cases(fuzzer: ModuleType) -> None:
    choose = fuzzer.RandomChooser(random.Random(0))
    hostile = [text for text in HOSTILE.values() if len(text) < 20_000]
    labels = {fuzzer.next_case(choose, hostile)[1].split(" (")[0] for _ in range(300)}
    assert labels >= {"mutated data", "mutated seed text", "mutated hostile text"}
