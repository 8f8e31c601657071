"""Test-wide settings.

Hypothesis explores new random cases on every local run (that is how it finds bugs), but CI (``CI=true``) uses a
fixed seed so a submission's result does not depend on luck; a failure found locally gets fixed and, where it
teaches something, pinned as a regression test.

Under ``nox -s tests`` (``HNDL_INSTALL_SET`` set) each test runs once, in the smallest install set that holds what
it needs, instead of the whole tree in every set: the "core" set runs every test that needs hndl-core alone (it
proves hndl-core stands alone, the strictest place to run them), "core+func" the tests that need hndl-func, and
"all" (the editable install) the tests that need hndl-docs. What a test needs is its directory (``tests/func``,
``tests/docs``) or its ``needs`` marker. Tests marked ``every_install_set`` (what the install itself decides: the
namespace, the zoo's packaged spec files, the doc pages' examples, whose hndl-core blocks must run without the
other distributions) run in every set. Plain ``pytest`` runs everything.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: The distribution each nox install set adds to the one before it.
ADDED_BY_SET = {"core": "hndl-core", "core+func": "hndl-func", "all": "hndl-docs"}
#: What the tests under a directory of tests/ need beyond hndl-core.
NEEDED_BY_DIRECTORY = {"func": "hndl-func", "docs": "hndl-docs"}
TESTS = Path(__file__).resolve().parent


def needed_distribution(item: pytest.Item) -> str:
    """The newest distribution (in install-set order) that ``item`` needs."""
    marker = item.get_closest_marker("needs")
    if marker is not None:
        # A misspelt distribution would match no set, and the test would silently never run under nox.
        if not marker.args or marker.args[0] not in ADDED_BY_SET.values():
            raise pytest.UsageError(f"{item.nodeid}: needs() takes one of {sorted(ADDED_BY_SET.values())}")
        return str(marker.args[0])
    relative = item.path.resolve().relative_to(TESTS)
    return NEEDED_BY_DIRECTORY.get(relative.parts[0], "hndl-core")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    install_set = os.environ.get("HNDL_INSTALL_SET")
    if install_set not in ADDED_BY_SET:
        return
    added = ADDED_BY_SET[install_set]
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        runs_here = item.get_closest_marker("every_install_set") or needed_distribution(item) == added
        (kept if runs_here else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def _subnormals_flush() -> bool:
    """Whether this thread's floating-point unit flushes subnormal numbers to zero (FTZ/DAZ)."""
    smallest_subnormal = 5e-324
    return smallest_subnormal * 1.0 == 0.0


@pytest.fixture(autouse=True)
def _restore_subnormals() -> Iterator[None]:
    """Turn subnormal flushing back off after a test that turned it on.

    On torch 2.4 (tests_torch24) the first ``torch.compile`` on the CPU loads a kernel library built with
    ``-ffast-math``, whose loader sets FTZ/DAZ for the rest of the process; hypothesis then refuses to draw floats
    (it cannot represent subnormals), so every property test after it on that xdist worker failed. hndl itself
    never touches the setting; this keeps one test's side effect out of the next.
    """
    yield
    if _subnormals_flush():
        import torch

        torch.set_flush_denormal(False)
