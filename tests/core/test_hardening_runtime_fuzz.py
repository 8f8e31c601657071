"""The runtime fuzz, small and derandomized: random valid graphs from the registry agree on the checked, fast
and unchecked paths (issue 10; ``nox -s fuzz`` runs the same for a time budget)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from graph_maker import call_three_ways, eligible_ops, random_graph

import hndl


def test_every_op_with_an_example_takes_part_in_the_runtime_fuzz() -> None:
    # An op whose own example does not run alone would silently drop out of the fuzz: none may.
    expected = {
        o.name
        for o in hndl.registry
        if o.example and o.input_shape_example is not None and not o.runs_subgraph and not o.imports_code
    }
    assert set(eligible_ops()) == expected


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("seed", range(8))
def test_random_graphs_agree_on_the_checked_fast_and_unchecked_paths(seed: int) -> None:
    made = random_graph(random.Random(seed))
    assert made.ops
    call_three_ways(made)
