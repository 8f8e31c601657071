"""The fuzzer behind ``nox -s fuzz`` reports what it must: a non-HndlError, a case that runs too long and a
round trip that changes the text each become a failure with the spec text written to a file."""

from __future__ import annotations

import importlib.util
import random
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from spec_mutator import HOSTILE, HOSTILE_MODELS, MODEL_SEEDS, SEEDS, to_text

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
    assert where.startswith("test_fuzzer_reports.py:")  # the loop that was running, not the timer


def test_the_fuzzer_passes_a_good_spec_through_every_stage(fuzzer: ModuleType, timer: None, tmp_path: Path) -> None:
    run = fuzzer.Run(out=tmp_path, keep=1)
    fuzzer.run_case(run, MLP, "the mlp seed", 5.0, draw=True, svg=graphviz_available())
    assert (run.cases, run.failures) == (1, {})
    assert {k: v for k, v in run.stages.items() if v} == {
        "load": 1,
        "check": 1,
        "build": 1,
        "draw": 1,
        **({"svg": 1} if graphviz_available() else {}),
    }


def test_the_fuzzer_mutates_seeds_and_hostile_cases(fuzzer: ModuleType) -> None:
    choose = fuzzer.RandomChooser(random.Random(0))
    hostile = [text for text in HOSTILE.values() if len(text) < 20_000]
    labels = {fuzzer.next_case(choose, hostile)[1].split(" (")[0] for _ in range(300)}
    assert labels >= {"mutated data", "mutated seed text", "mutated hostile text"}


def graphviz_available() -> bool:
    return shutil.which("dot") is not None  # hndl runs dot itself; the graphviz package is not needed


def test_the_fuzzer_reports_a_picture_with_a_control_character(
    fuzzer: ModuleType, timer: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hndl, "draw", lambda graph, format=None: 'digraph { a [label="\x00"] }\n')
    run = fuzzer.Run(out=tmp_path, keep=1)
    fuzzer.run_case(run, MLP, "the mlp seed", 5.0, draw=True)
    ((kind, _), failure), *others = run.failures.items()
    assert (kind, failure.count, others) == ("draw: AssertionError", 1, [])
    assert failure.example == "the picture holds control characters ['\\x00']"


def test_the_fuzzer_runs_model_files_through_load_model(fuzzer: ModuleType, timer: None, tmp_path: Path) -> None:
    run = fuzzer.Run(out=tmp_path, keep=1)
    for name, data in [*MODEL_SEEDS.items(), *HOSTILE_MODELS.items()]:
        fuzzer.run_model_case(run, data, name, 5.0, tmp_path / "model.safetensors")
    assert run.failures == {}
    assert (run.stages["model"], run.stages["models loaded"]) == (
        len(MODEL_SEEDS) + len(HOSTILE_MODELS),
        len(MODEL_SEEDS),
    )


def test_the_fuzzer_reports_a_model_file_that_raises_with_its_bytes(
    fuzzer: ModuleType, timer: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(path: object, **kwargs: object) -> None:
        raise TypeError("boom")

    monkeypatch.setattr(hndl, "load_model", broken)
    run = fuzzer.Run(out=tmp_path / "out", keep=1)
    fuzzer.run_model_case(run, MODEL_SEEDS["mlp"], "the mlp model", 5.0, tmp_path / "model.safetensors")
    ((kind, _), failure), *others = run.failures.items()
    assert (kind, others) == ("load_model: TypeError", [])
    assert failure.reproducers[0].suffix == ".safetensors"
    assert failure.reproducers[0].read_bytes() == MODEL_SEEDS["mlp"]


def test_the_fuzzer_reports_a_case_that_raises_the_peak_memory(
    fuzzer: ModuleType, timer: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import resource

    peaks = iter([1 * 2**20, 3 * 2**20])  # kilobytes: 1 GB after the first case, 3 GB after the second

    class Usage:
        @property
        def ru_maxrss(self) -> int:
            return next(peaks)

    monkeypatch.setattr(resource, "getrusage", lambda who: Usage())
    run = fuzzer.Run(out=tmp_path, keep=1)
    fuzzer.run_case(run, MLP, "first", 5.0, case_memory=1.0)
    fuzzer.run_case(run, MLP, "second", 5.0, case_memory=1.0)
    ((kind, _), failure), *others = run.failures.items()
    assert (kind, failure.count, others) == ("build: MemoryGrowth", 1, [])
    assert failure.example == "the peak resident memory grew by 2.00 GB"


def test_the_fuzzer_mutates_model_files(fuzzer: ModuleType) -> None:
    choose = fuzzer.RandomChooser(random.Random(0))
    cases = [fuzzer.next_model_case(choose) for _ in range(200)]
    assert {label for _, label in cases} >= {f"mutated model file {name!r}" for name in MODEL_SEEDS}
    assert len({data for data, _ in cases}) > 150
