"""Benchmarks run in one thread (``torch.set_num_threads(1)``): the machines they run on are shared, and one
thread keeps the two sides of a comparison from fighting over cores; it also makes per-call overhead, which is
what hndl adds, a larger and more visible share of each call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
