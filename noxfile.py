"""Sessions: `nox -s tests lint docs` is what CI runs (.ci/run) and what the README tells you to run.

- tests: the install-set matrix. Each set gets its own venv and runs the whole test tree; tests of a
  package that is not installed skip themselves (``pytest.importorskip``), so the report shows what applies.
  "core" and "core+func" are regular installs; "all" is an editable install, so both install modes of the
  ``hndl`` namespace (see IMPLEMENTATION.md, "Packaging") are exercised on every run.
- lint: ruff check, ruff format --check, and mypy over the three packages' sources (``[tool.mypy]``).
- docs: the reference docs are current (``python -m hndl.docs --check``) and the Sphinx site builds.
- bench: the benchmarks (marked ``benchmark``, in benchmarks/ and tests/func/), which compare against
  hand-written PyTorch (and torch.func) in one process.
- fuzz: the spec fuzzer (tests/fuzz/fuzz_specs.py) for a time budget, 10 minutes unless told otherwise:
  ``nox -s fuzz -- --seconds 60`` (or ``HNDL_FUZZ_SECONDS=60``); other options: ``-- --help``. It exits non-zero
  when any case raised anything but HndlError, ran too long, or failed to round-trip, and says where the
  reproducers are.
"""

from __future__ import annotations

import os

import nox

nox.options.sessions = ["tests", "lint", "docs"]
nox.options.reuse_existing_virtualenvs = False

CORE = "packages/hndl-core"
FUNC = "packages/hndl-func"
DOCS = "packages/hndl-docs"
# jsonschema: tests/core/test_spec_schema.py holds the published schema to the loader; without it the test skips.
TEST_DEPS = ["pytest>=8", "hypothesis>=6.100", "jsonschema>=4.18"]
TYPED_SOURCES = ["packages/hndl-core/src/hndl", "packages/hndl-func/src/hndl/func", "packages/hndl-docs/src/hndl/docs"]

INSTALL_SETS = {
    "core": ([CORE], False),
    "core+func": ([CORE, FUNC], False),
    "all": ([CORE, FUNC, DOCS], True),
}


def _install(session: nox.Session, packages: list[str], editable: bool) -> None:
    args: list[str] = []
    for package in packages:
        args += ["-e", package] if editable else [package]
    session.install(*args, *TEST_DEPS)


@nox.session
@nox.parametrize("install_set", list(INSTALL_SETS))
def tests(session: nox.Session, install_set: str) -> None:
    """Run the test suite against one install set."""
    packages, editable = INSTALL_SETS[install_set]
    _install(session, packages, editable)
    session.run("python", "-c", "import hndl, hndl.torch; print('hndl from', hndl.__file__)")
    session.run("pytest", "-q", "-p", "no:cacheprovider", *session.posargs, env={"HNDL_INSTALL_SET": install_set})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repo, then mypy over the packages' sources."""
    session.install("ruff>=0.5")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # The packages are installed so mypy sees torch's (and the other dependencies') types; the hndl sources
    # come from mypy_path. Run from the repo root so pyproject.toml's [tool.mypy] applies.
    session.install("-e", CORE, "-e", FUNC, "-e", DOCS, "mypy>=1.10")
    session.run("mypy", *TYPED_SOURCES)


@nox.session
def docs(session: nox.Session) -> None:
    """Reference docs are current, and the Sphinx site builds with warnings as errors."""
    # All three packages: the reference documents exactly what is installed (E_PARAMS needs hndl-func).
    session.install(CORE, FUNC, f"{DOCS}[site]")
    session.run("python", "-m", "hndl.docs", "--check")
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", os.path.join("docs", "_build", "html"))


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against hand-written PyTorch twins (and hndl.func against torch.func); prints the tables."""
    _install(session, [CORE, FUNC], False)
    paths = session.posargs or ["benchmarks", "tests/func"]
    session.run("pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "benchmark", *paths)


@nox.session
def fuzz(session: nox.Session) -> None:
    """Mutated spec files through load, check and a meta-device build for a time budget; reports every failure."""
    session.install(CORE)
    session.run("python", "tests/fuzz/fuzz_specs.py", *session.posargs)
