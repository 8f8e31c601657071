"""Sessions: `nox -s tests lint docs` is what CI runs (.ci/run) and what the README tells you to run.

- tests: the install-set matrix. Each set gets its own venv, and each test runs once, in the smallest set that
  holds what it needs (tests/conftest.py selects them; the rest show as deselected): "core" runs every test that
  needs hndl-core alone, "core+func" those that need hndl-func, "all" those that need hndl-docs, and tests of
  what the install itself decides (tests/core/test_packaging.py, the zoo's package data) run in every set.
  "core" and "core+func" are regular installs; "all" is an editable install, so both install modes of the
  ``hndl`` namespace (see IMPLEMENTATION.md, "Packaging") are exercised on every run. pytest-xdist spreads a
  set's tests over the machine's cores (``-n auto``).
- lint: ruff check, ruff format --check, and mypy over the three packages' sources (``[tool.mypy]``).
- docs: the reference docs are current (``python -m hndl.docs --check``) and the Sphinx site builds.
- bench: the benchmarks (marked ``benchmark``, in benchmarks/ and tests/func/), which compare against
  hand-written PyTorch (and torch.func) in one process.
- install_docs: the README's set-up and drawing commands, the quickstart's shell and python blocks, and the
  tutorial's shell commands (after the set-up and its first python block), run exactly as written
  (``bash -euo pipefail``, fresh venvs) in a clean copy of the checkout's tracked files; a failing block is shown
  with its page and line. The blocks are read by tests/support/shell_blocks.py, as tests/docs/test_install_docs.py
  reads them.
- fuzz: the spec fuzzer (tests/fuzz/fuzz_specs.py) for a time budget, 10 minutes unless told otherwise:
  ``nox -s fuzz -- --seconds 60`` (or ``HNDL_FUZZ_SECONDS=60``); other options: ``-- --help``. It exits non-zero
  when any case raised anything but HndlError, ran too long, or failed to round-trip, and says where the
  reproducers are. Then the runtime fuzzer (tests/fuzz/fuzz_runtime.py, ``HNDL_FUZZ_RUNTIME_SECONDS``, 60 s):
  random valid graphs whose checked, fast and unchecked calls must agree.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint", "docs"]
# Locally a session keeps its venv and installs again only what changed (see _install_once): an unchanged tree
# reruns in seconds instead of rebuilding five venvs. `nox -R` also skips the install step entirely. CI starts
# from a clean clone and passes --no-reuse-existing-virtualenvs, so every install set is installed fresh there.
nox.options.reuse_existing_virtualenvs = True
# uv makes the venvs when it is installed (`pip install "nox[uv]"`, as the README and .ci/run do), pip otherwise.
# The first run builds five venvs that each hold torch: pip unpacked the 700 MB of torch's files five times (18.5
# minutes on 2 cores for `nox -s tests lint docs`), uv unpacks them once into its cache and links them into each
# venv. Seeded with pip: tests/zoo builds a wheel with `python -m pip wheel`.
nox.options.default_venv_backend = "uv|virtualenv"
os.environ.setdefault("UV_VENV_SEED", "1")


def _point_uv_where_pip_looks() -> None:
    """uv reads no pip configuration: give it pip's (a machine whose torch wheel is found through pip's
    ``find-links``, as the local CPU build is here, would otherwise resolve torch from PyPI). A variable already
    set wins. See tests/support/pip_to_uv.py."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "tests" / "support"))
    from pip_to_uv import uv_environment

    try:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):  # no pip beside nox: nothing to carry over
        return
    for variable, value in uv_environment(listed).items():
        os.environ.setdefault(variable, value)


_point_uv_where_pip_looks()

CORE = "packages/hndl-core"
FUNC = "packages/hndl-func"
DOCS = "packages/hndl-docs"
# jsonschema: tests/core/test_spec_schema.py holds the published schema to the loader; torchinfo:
# tests/core/test_summary_torchinfo.py holds hndl.summary's totals to torchinfo's; markdown-it-py:
# tests/docs/test_op_page_formulas.py renders the op pages as CommonMark. Without them those tests skip.
# pytest-xdist: the sessions spread tests over the cores (``-n auto``); plain ``pytest`` works without it.
TEST_DEPS = [
    "pytest>=8",
    "pytest-xdist>=3.5",
    "hypothesis>=6.100",
    "jsonschema>=4.18",
    "torchinfo>=1.8",
    "markdown-it-py>=3",
]
PYTEST = ["pytest", "-q", "-p", "no:cacheprovider", "-n", "auto"]
# Every session installs torch through this constraints file: hndl-core accepts a torch range, and without the
# pin pip would pick the newest release in it (a multi-GB CUDA build). tests_torch214 (below) uses its own.
TORCH_213 = ["-c", os.path.join("constraints", "torch-2.13.txt")]
TYPED_SOURCES = ["packages/hndl-core/src/hndl", "packages/hndl-func/src/hndl/func", "packages/hndl-docs/src/hndl/docs"]

INSTALL_SETS = {
    "core": ([CORE], False),
    "core+func": ([CORE, FUNC], False),
    "all": ([CORE, FUNC, DOCS], True),
}


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _install_once(session: nox.Session, *args: str) -> None:
    """``session.install(*args)``, skipped when this venv already holds exactly that install.

    The stamp in the venv is keyed on the arguments, the packages' pyproject.toml files and the constraints
    (what decides the dependencies) and, for regular (non-editable) installs of the local packages, their
    sources (an editable install follows the sources by itself). When only those sources changed, the local
    packages alone are reinstalled, without their dependencies.
    """
    local = [a for a in args if a.startswith("packages/")]
    editable = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "-e"}
    regular = [a.split("[")[0] for a in local if a not in editable]
    deps_key = _digest([*Path("packages").glob("*/pyproject.toml"), *Path("constraints").glob("*.txt")])
    deps_key = hashlib.sha256((repr(args) + deps_key).encode()).hexdigest()
    src_key = _digest([p for pkg in regular for p in Path(pkg, "src").rglob("*.py")])
    venv = getattr(session.virtualenv, "location", None)
    stamp = Path(venv, ".hndl-install") if venv else None
    previous = stamp.read_text().split() if stamp is not None and stamp.exists() else []
    if previous[:1] == [deps_key] and previous[1:] == [src_key]:
        session.log("dependencies and sources unchanged: reusing the installed packages")
        return
    if previous[:1] == [deps_key] and regular:
        reinstall = "--reinstall" if getattr(session, "venv_backend", "") == "uv" else "--force-reinstall"
        session.install("--no-deps", reinstall, *TORCH_213, *regular)
    else:
        session.install(*args)
    if stamp is not None:
        stamp.write_text(f"{deps_key} {src_key}")


def _install(session: nox.Session, packages: list[str], editable: bool) -> None:
    args: list[str] = []
    for package in packages:
        args += ["-e", package] if editable else [package]
    _install_once(session, *TORCH_213, *args, *TEST_DEPS)


@nox.session
@nox.parametrize("install_set", list(INSTALL_SETS))
def tests(session: nox.Session, install_set: str) -> None:
    """Run the test suite against one install set."""
    packages, editable = INSTALL_SETS[install_set]
    _install(session, packages, editable)
    session.run("python", "-c", "import hndl, hndl.torch; print('hndl from', hndl.__file__)")
    session.run(*PYTEST, *session.posargs, env={"HNDL_INSTALL_SET": install_set})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff check and ruff format --check over the whole repo, then mypy over the packages' sources."""
    _install_once(session, *TORCH_213, "-e", CORE, "-e", FUNC, "-e", DOCS, "mypy>=1.10", "ruff>=0.5")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # The packages are installed so mypy sees torch's (and the other dependencies') types; the hndl sources
    # come from mypy_path. Run from the repo root so pyproject.toml's [tool.mypy] applies.
    session.run("mypy", *TYPED_SOURCES)


@nox.session
def docs(session: nox.Session) -> None:
    """Reference docs are current, and the Sphinx site builds with warnings as errors."""
    # All three packages: the reference documents exactly what is installed (E_PARAMS needs hndl-func).
    _install_once(session, *TORCH_213, CORE, FUNC, f"{DOCS}[site]")
    session.run("python", "-m", "hndl.docs", "--check")
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", os.path.join("docs", "_build", "html"))


@nox.session(venv_backend="none")
def install_docs(session: nox.Session) -> None:
    """What a newcomer runs from the README and the quickstart, as written, in clean copies of the checkout.

    No venv of its own: the pages make theirs (``python3 -m venv .venv`` in the copy), one copy per page so each
    starts from nothing. The copies are removed when every block passed and kept (the path is printed) when one
    failed.
    """
    import shutil
    import sys
    import tempfile
    import time

    sys.path.insert(0, str(Path("tests", "support").resolve()))
    from shell_blocks import IN_PAGE_ORDER, BlockFailed, clean_copy, run_blocks, shown_output, walkthroughs

    checkout = Path.cwd()
    for page, blocks in walkthroughs(checkout).items():
        copy = Path(tempfile.mkdtemp(prefix="hndl-install-docs-"))
        session.log(f"{page}: {len(blocks)} blocks, in a clean copy at {copy}")
        started = time.monotonic()
        try:
            run_blocks(
                blocks,
                clean_copy(checkout, copy),
                shown=shown_output(page, checkout),
                log=session.log,
                in_order=page in IN_PAGE_ORDER,
            )
        except BlockFailed as exc:
            session.error(f"{exc}\n(the copy is kept at {copy})")
        shutil.rmtree(copy)
        session.log(f"{page}: every block ran as written ({time.monotonic() - started:.0f} s)")


# glibc's malloc moves its mmap and trim thresholds as a process frees memory, so whether a freed activation's
# memory goes back to the OS (and is page-faulted in again on the next call) depends on where earlier small
# allocations happened to land, not on the code timed: conv_stack at batch 16 re-faulted 240-700 pages a call,
# depending on the callable and the process, with the same tensor work (IMPLEMENTATION.md, "Measuring"). The
# benchmarks pin both thresholds (64 MiB, 256 MiB), as allocator tuning for PyTorch on CPU does (jemalloc or
# tcmalloc in PyTorch's performance guide), so both sides of a comparison keep their memory.
PINNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(256 << 20)}


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks against hand-written PyTorch twins (and hndl.func against torch.func); prints the tables."""
    _install(session, [CORE, FUNC], False)
    paths = session.posargs or ["benchmarks", "tests/func"]
    session.run("pytest", "-q", "-s", "-p", "no:cacheprovider", "-m", "benchmark", *paths, env=PINNED_MALLOC)


@nox.session
def fuzz(session: nox.Session) -> None:
    """Mutated spec files through load, check and a meta-device build for a time budget, then random valid graphs
    called on the checked, fast and unchecked paths; reports every failure."""
    session.install(*TORCH_213, CORE)
    session.run("python", "tests/fuzz/fuzz_specs.py", *session.posargs)
    session.run("python", "tests/fuzz/fuzz_runtime.py")


# --- interop (issue 13): other torch releases and the optional ONNX extra -----------------------------------


@nox.session
def tests_torch214(session: nox.Session) -> None:
    """The core and func tests on torch 2.14.1 (a CUDA build on local disk; it runs on the CPU).

    torch is installed first, then hndl-core and hndl-func without a pin of their own: that they keep the torch
    already there is part of what this session checks.
    """
    session.install("-c", os.path.join("constraints", "torch-2.14.txt"), "torch==2.14.1")
    session.install("-c", os.path.join("constraints", "torch-2.14.txt"), CORE, FUNC, *TEST_DEPS)
    session.run("python", "-c", "import torch; assert torch.__version__.startswith('2.14.1'), torch.__version__")
    session.run(*PYTEST, "tests/core", "tests/func", *session.posargs)


@nox.session
def tests_torch24(session: nox.Session) -> None:
    """The core and func tests on torch 2.4.1, the oldest release hndl-core's ``torch>=2.4`` admits (a CUDA
    build from the registry, about 2.5 GB with its libraries; it runs on the CPU).

    Tests that need what 2.4 lacks skip and say so: FSDP2 on the CPU with gloo, ``Schedule1F1B`` (deadlocks there),
    and torch.export of the zoo's convolutional and transformer entries (2.4 adds guards the dims' ranges cannot
    express). The metadata's range is what this session and tests_torch214 prove.
    """
    pin = ["-c", os.path.join("constraints", "torch-2.4.txt")]
    session.install(*pin, "torch==2.4.1", "numpy<2")
    session.install(*pin, CORE, FUNC, *TEST_DEPS)
    session.run("python", "-c", "import torch; assert torch.__version__.startswith('2.4.1'), torch.__version__")
    session.run(*PYTEST, "tests/core", "tests/func", *session.posargs)


@nox.session
def onnx(session: nox.Session) -> None:
    """ONNX export (torch.onnx.export, dynamo=True) checked against onnxruntime, with the hndl-core[onnx] extra;
    also the docs' ONNX blocks (docs/interop.md, docs/ecosystem.md), which every other session skips."""
    session.install(*TORCH_213, f"{CORE}[onnx]", *TEST_DEPS)
    args = session.posargs or [
        "tests/core/test_interop_onnx.py",
        "tests/docs/test_doc_examples.py",
        "-k",
        "onnx or interop or ecosystem",
    ]
    session.run("pytest", "-q", "-p", "no:cacheprovider", *args)


# --- the model zoo's references (issue 12) ------------------------------------------------------------------


@nox.session
def reference(session: nox.Session) -> None:
    """The zoo against its reference implementations: torchvision, timm and transformers on torch 2.14.1.

    They do not import beside the torch 2.13 CPU build of the other sessions (PyPI's torchvision fails with
    ``operator torchvision::nms does not exist``), so this session installs torch 2.14.1 and torchvision 0.29.1
    (local disk, pinned by constraints/torch-2.14.txt) and timm, transformers, peft and accelerate (HF Trainer
    needs it) from the registry. Every reference is built from code with random weights: nothing is downloaded
    from a model hub. By default it runs tests/zoo and the docs' examples (docs/weights.md loads torchvision weights); other arguments go to pytest:
    ``nox -s reference -- -m benchmark benchmarks/test_bench_zoo.py`` runs the zoo benchmarks and rewrites
    docs/zoo-performance.md.
    """
    pin = ["-c", os.path.join("constraints", "torch-2.14.txt")]
    session.install(*pin, "torch==2.14.1", "torchvision==0.29.1")
    session.install(*pin, "timm", "transformers", "peft", "accelerate", CORE, FUNC, *TEST_DEPS)
    session.run(
        "python",
        "-c",
        "import torch, torchvision, timm, transformers, peft, accelerate; print('torch', torch.__version__)",
    )
    args = session.posargs or ["tests/zoo", "tests/docs/test_doc_examples.py"]
    # Pinned malloc thresholds, as in `bench`: the zoo and checkpointing benchmarks run here. Unpinned, a resnet50
    # training step at batch 16 page-faulted 150,000-470,000 times, differently on each side and each step
    # (3-4% of the step), and the same kernels on both sides read 0.95-1.02x; pinned, 0-125,000 times (a loop
    # allocating and freeing one 51 MB tensor, pinned, still grew the heap and faulted it in every time).
    session.run("pytest", "-q", "-p", "no:cacheprovider", *args, env=PINNED_MALLOC)
