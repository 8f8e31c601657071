"""The runtime fuzz, small and derandomized: random valid graphs from the registry agree on the checked, fast
and unchecked paths (issue 10; ``nox -s fuzz`` runs the same for a time budget)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

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


def test_regression_a_graph_making_nan_agrees_on_the_three_paths() -> None:
    # The runtime fuzz called 29 of 236 random graphs different on the checked and fast paths: each made a NaN
    # (log, sqrt, pow of a negative input), and torch.equal says NaN differs from NaN. Graph seed 1727300815 is
    # one log node. The graph is written out here: a seed names another graph whenever an op joins the registry.
    from graph_maker import Made

    g = hndl.Graph("nan")
    g.output(g.add("log", g.input("x", (4,)), name="log"))
    made = Made(g, [torch.tensor([1.0, -1.0, 0.0, 2.0])], ["log"])
    call_three_ways(made)


def test_the_paths_comparison_still_tells_values_and_nan_apart() -> None:
    from graph_maker import identical

    a = torch.tensor([1.0, float("nan"), float("inf")])
    assert identical(a, a.clone())
    assert not identical(a, torch.tensor([1.0, 0.0, float("inf")]))  # NaN against a number
    assert not identical(a, torch.tensor([1.0, float("nan"), 3.0]))
    assert not identical(a, a.double())
    assert identical(torch.tensor([1, 2]), torch.tensor([1, 2]))
    assert not identical(torch.tensor([1]), torch.tensor([2]))
