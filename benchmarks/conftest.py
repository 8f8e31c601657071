"""Benchmarks run in one thread (``torch.set_num_threads(1)``): the machines they run on are shared, and one
thread keeps the two sides of a comparison from fighting over cores; it also makes per-call overhead, which is
what hndl adds, a larger and more visible share of each call.

``nox -s bench`` also pins glibc's malloc thresholds (noxfile.py, ``PINNED_MALLOC``); the report header says
whether they are."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_report_header() -> str:
    mmap, trim = os.environ.get("MALLOC_MMAP_THRESHOLD_"), os.environ.get("MALLOC_TRIM_THRESHOLD_")
    if mmap and trim:
        return f"malloc: glibc thresholds pinned (mmap {mmap}, trim {trim} bytes)"
    return "malloc: glibc's moving thresholds; `nox -s bench` pins them (conv_stack ratios swing otherwise)"


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
