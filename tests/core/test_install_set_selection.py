"""``nox -s tests`` runs each test once, in the smallest install set that holds what it needs (tests/conftest.py).

Collected here in subprocesses, one per set, over a few files that cover each rule: a directory's need
(tests/func, tests/docs), a ``needs`` marker in tests/core, and ``every_install_set``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = [
    "tests/core/test_tie.py",
    "tests/core/test_packaging.py",
    "tests/func/test_copy.py",
    "tests/docs/test_install_docs.py",
]


def collected(install_set: str | None) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "HNDL_INSTALL_SET"}
    if install_set is not None:
        env["HNDL_INSTALL_SET"] = install_set
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--collect-only", *FILES]
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return {line for line in out.stdout.splitlines() if "::" in line}


# It collects tests/func and tests/docs, so it runs where every distribution is installed.
@pytest.mark.needs("hndl-docs")
@pytest.mark.skipif(
    any(__import__("importlib").util.find_spec(m) is None for m in ("hndl.func", "hndl.docs")),
    reason="collecting tests/func and tests/docs needs every hndl distribution installed",
)
def test_every_test_runs_in_one_set_except_those_that_check_the_install() -> None:
    everything = collected(None)
    by_set = {s: collected(s) for s in ("core", "core+func", "all")}
    assert set().union(*by_set.values()) == everything
    in_every_set = {t for t in everything if t.startswith("tests/core/test_packaging.py")}
    assert in_every_set
    assert all(in_every_set <= tests for tests in by_set.values())
    assert {t for t in everything if t.startswith("tests/func/")} <= by_set["core+func"]
    assert {t for t in everything if t.startswith("tests/docs/")} <= by_set["all"]
    needs_func = {t for t in everything if "test_tie.py::test_functional_call" in t}
    assert needs_func
    assert needs_func <= by_set["core+func"]
    assert not needs_func & by_set["core"]
    for name, tests in by_set.items():
        others = set().union(*(t for n, t in by_set.items() if n != name))
        assert tests & others <= in_every_set, name
