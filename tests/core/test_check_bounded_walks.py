"""Hostile graphs, part C (issue 20): bounded walks over subgraphs, graph parameters, ranks and meta builds.

Each case is a small spec that once raised RecursionError or MemoryError, or ran for seconds to minutes; each
test is named after it and asserts the HndlError it gets now, in the API and in ``hndl check/summary/draw``.
Times are CPU times (``process_time``) with a generous bound, as in test_check_bounded_work.py: each case takes
a fraction of a second now.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from spec_mutator import (
    HOSTILE,
    MUTUAL_USE,
    NESTED_EMPTY_REPEAT,
    SELF_USE,
    graph_parameter_laughs,
    high_rank,
    many_relus,
    nested_subgraphs,
)

import hndl
import hndl._check_limits
from hndl._check_limits import MAX_CHECKED_DIMS, MAX_EXPANDED_NODES, MAX_META_NODES, MAX_RANK
from hndl._dims import DimError
from hndl._param_binding import MAX_BOUND_VALUES
from hndl._resolve import MAX_NESTING
from hndl.cli import main


@contextmanager
def within_cpu_seconds(limit: float = 2.0) -> Iterator[None]:
    start = time.process_time()
    yield
    assert time.process_time() - start < limit


def check_error(text: str) -> hndl.HndlError:
    graph = hndl.loads(text)
    with within_cpu_seconds(), pytest.raises(hndl.HndlError) as info:
        hndl.check(graph)
    return info.value


def cli(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, *argv: str) -> tuple[int, str]:
    """``hndl COMMAND spec.yaml ...`` on ``text``; its exit status and output."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    args = [a.replace("SPEC", str(spec)) for a in argv]
    with within_cpu_seconds(4.0):  # summary imports torch first
        code = main(args)
    return code, capsys.readouterr().out


COMMANDS = [("check", "SPEC"), ("summary", "SPEC"), ("draw", "SPEC", "-o", "OUT.dot")]


# --- nesting and self-use -----------------------------------------------------------------------------------


def test_regression_249_nested_subgraphs_are_a_nesting_error_not_a_recursion_error() -> None:
    (problem,) = check_error(nested_subgraphs(249)).problems
    assert (problem.code, problem.node, problem.location) == ("E_PARAM", "m", "<string>:37:62")
    assert problem.message == (
        f"subgraphs nest more than {MAX_NESTING} levels deep: graph -> g0 -> g1 -> g2 -> ... -> g30 -> g31 -> g32"
    )
    assert problem.hint == "graph 'g31' runs graph 'g32' at level 33; flatten some levels into one graph"


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_regression_249_nested_subgraphs_in_the_command(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    code, out = cli(capsys, tmp_path, nested_subgraphs(249), *argv)
    assert code == 1
    assert f"E_PARAM graph 'm': subgraphs nest more than {MAX_NESTING} levels deep" in out
    assert "Traceback" not in out
    assert not (tmp_path / "out.dot").exists()


def test_subgraphs_nested_to_the_limit_still_check() -> None:
    checked = hndl.check(hndl.loads(nested_subgraphs(MAX_NESTING)))
    assert checked.nodes[0].body[0].graph.name == "g0"
    error = check_error(nested_subgraphs(MAX_NESTING + 1))
    assert error.code == "E_PARAM"


def test_regression_a_subgraph_that_uses_itself_is_a_cycle_before_any_walk() -> None:
    (problem,) = check_error(SELF_USE).problems
    assert (problem.code, problem.node, problem.location) == ("E_CYCLE", "m", "<string>:6:60")
    assert problem.message == "graph 'g' uses itself: g -> g"


def test_subgraphs_that_use_each_other_are_a_cycle() -> None:
    (problem,) = check_error(MUTUAL_USE).problems
    assert (problem.code, problem.message) == ("E_CYCLE", "graph 'g' uses itself: g -> f -> g")


@pytest.mark.parametrize("text", [SELF_USE, nested_subgraphs(249)], ids=["self-use", "249 levels"])
def test_regression_drawing_a_graph_that_does_not_walk_is_an_error_not_a_recursion_error(text: str) -> None:
    # draw pictures a graph that does not check, but not one whose subgraphs cannot be walked.
    with within_cpu_seconds(), pytest.raises(hndl.HndlError) as info:
        hndl.draw(hndl.loads(text), format="dot")
    assert info.value.code in ("E_CYCLE", "E_PARAM")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[0])
def test_regression_a_subgraph_that_uses_itself_in_the_command(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    code, out = cli(capsys, tmp_path, SELF_USE, *argv)
    assert code == 1
    assert "E_CYCLE graph 'm': graph 'g' uses itself: g -> g" in out


def test_a_subgraph_chosen_by_a_graph_parameter_that_uses_itself_is_caught_by_the_walk() -> None:
    # 'graph: $g' is only known once bound: the walk sees the cycle instead of the check before it.
    text = SELF_USE.replace("  g: {inputs:", "  g: {params: {g: g}, inputs:").replace(
        "nodes: {m: {op: graph, graph: g, in: h}}", "nodes: {m: {op: graph, graph: $g, in: h}}"
    )
    (problem,) = check_error(text).problems
    assert (problem.code, problem.message) == ("E_CYCLE", "graph uses itself: g -> g")


def test_subgraphs_chosen_by_graph_parameters_nest_no_deeper_than_the_limit() -> None:
    text = nested_subgraphs(MAX_NESTING + 5)
    for i in range(MAX_NESTING + 5):  # every use through a parameter, so the check before the walk sees none
        text = text.replace(f"graph: g{i + 1}, in: h}}", "graph: $next, in: h}").replace(
            f"  g{i}: {{inputs:", f"  g{i}: {{params: {{next: g{i + 1}}}, inputs:"
        )
    (problem,) = check_error(text).problems
    assert problem.code == "E_PARAM"
    assert problem.message == (
        f"subgraphs nest more than {MAX_NESTING} levels deep here (graph 'g{MAX_NESTING}' at level {MAX_NESTING + 1})"
    )


# --- graph parameters -----------------------------------------------------------------------------------------


def test_regression_graph_parameter_laughs_are_counted_before_they_are_copied() -> None:
    # Eight levels of q: [$q, $q, ...] in 1.4 KB: ten times the values per level, 10**7 at the last.
    (problem,) = check_error(graph_parameter_laughs(8)).problems  # reported once, where the budget ran out
    assert (problem.code, problem.node, problem.location) == ("E_PARAM", "n.m.m.m.m.m", "<string>:10:95")
    assert problem.message == f"params.q[6]: graph parameters expand to more than {MAX_BOUND_VALUES:,} values"


def test_a_large_parameter_value_copied_into_every_repetition_is_counted() -> None:
    # 1,000 repetitions of a 200-value list are 200,000 values to copy, though the spec holds 200.
    values = "[" + ", ".join(["1"] * 200) + "]"
    text = (
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\n"
        f"nodes: {{n: {{op: graph, graph: g, in: x, repeat: 1000, params: {{q: {values}}}}}}}\noutputs: [n]\n"
        "graphs:\n  g: {params: {q: 0}, inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: relu, in: h}}, outputs: [m]}\n"
    )
    (problem,) = check_error(text).problems
    assert (problem.code, problem.node) == ("E_PARAM", "n")
    assert problem.message == f"graph parameters expand to more than {MAX_BOUND_VALUES:,} values"
    assert problem.hint == "each repetition gets its own copy of its parameters' values"


def test_graph_parameters_within_the_budget_bind_as_before() -> None:
    checked = hndl.check(hndl.loads(graph_parameter_laughs(3)))  # 1 + 10 + 100 values: fine
    assert checked.nodes[0].body[0].nodes[0].params["params"]["q"] == [1] * 10


# --- rank, dims, expanded nodes, meta builds ------------------------------------------------------------------


@pytest.mark.parametrize("rank", [1000, 40_000])
def test_regression_a_reshape_to_a_huge_rank_is_a_shape_error(rank: int) -> None:
    (problem,) = check_error(high_rank(rank, repeat=1000 if rank == 1000 else 10)).problems
    assert (problem.code, problem.node, problem.location) == ("E_SHAPE", "r", "<string>:4:20")
    assert problem.message == f"the output would have {rank:,} dims, more than the {MAX_RANK} a shape may have"


def test_a_shape_of_the_largest_rank_checks() -> None:
    checked = hndl.check(hndl.loads(high_rank(MAX_RANK, repeat=2)))
    assert len(checked.output_types[0].shape) == MAX_RANK


def test_an_input_of_too_many_dims_is_a_shape_error() -> None:
    shape = "[" + ", ".join(["2"] * (MAX_RANK + 1)) + "]"
    text = f"hndl: 1\ninputs: {{x: {{shape: {shape}}}}}\nnodes: {{n: {{op: relu, in: x}}}}\noutputs: [n]\n"
    (problem,) = check_error(text).problems
    assert (problem.code, problem.node, problem.op) == ("E_SHAPE", "x", "input")
    assert problem.message == f"the shape has {MAX_RANK + 1} dims, more than the {MAX_RANK} a shape may have"


def test_the_dims_of_all_values_together_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # The bound is 1,000,000 (about a fifth of a second of checking); a smaller one shows where the walk stops.
    assert MAX_CHECKED_DIMS == 1_000_000
    monkeypatch.setattr(hndl._check_limits, "MAX_CHECKED_DIMS", 2000)
    (problem,) = check_error(high_rank(MAX_RANK, repeat=100)).problems
    assert (problem.code, problem.node) == ("E_SHAPE", "n")
    assert problem.message == (
        "the values of graph 'graph' hold more than 2,000 dims in all (nodes times dims, repetitions included; "
        "stopped at 'n.29.m')"
    )


def test_regression_100_x_999_relus_are_past_the_expanded_node_limit() -> None:
    (problem,) = check_error(many_relus(100, 999)).problems
    assert (problem.code, problem.node) == ("E_PARAM", "n")
    assert (
        problem.message
        == f"graph 'graph' expands to more than {MAX_EXPANDED_NODES:,} nodes with its subgraphs repeated"
    )


def test_regression_nested_repeats_of_an_empty_graph_count_their_repetitions() -> None:
    # A subgraph with no nodes added nothing to the count: three levels of 1,000 were a billion walks.
    (problem,) = check_error(NESTED_EMPTY_REPEAT).problems
    assert (problem.code, problem.node) == ("E_PARAM", "n")


@pytest.mark.parametrize(
    "command", [("summary", "SPEC"), ("check", "--build", "SPEC")], ids=["summary", "check --build"]
)
def test_regression_100_x_999_relus_in_the_command(
    command: tuple[str, ...], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # `hndl summary` took 40 s and 3.6 GB.
    code, out = cli(capsys, tmp_path, HOSTILE["100 x 999 relus"], *command)
    assert code == 1
    assert f"expands to more than {MAX_EXPANDED_NODES:,} nodes" in out


def test_a_graph_too_large_to_describe_is_not_built_on_the_meta_device(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert MAX_META_NODES == 5000
    monkeypatch.setattr(hndl._check_limits, "MAX_META_NODES", 50)
    text = many_relus(10, 6)  # 60 nodes: it checks, but is past the (patched) meta-build size
    assert len(hndl.check(hndl.loads(text)).nodes[0].body) == 6
    message = "has 60 nodes, more than the 50 hndl builds on the meta device to describe a graph"
    with pytest.raises(hndl.HndlError) as info:
        hndl.summary(hndl.loads(text))
    assert (info.value.code, info.value.problems[0].message) == ("E_PARAM", f"graph 'graph' {message}")
    code, out = cli(capsys, tmp_path, text, "summary", "SPEC")
    assert code == 1
    assert message in out
    assert "hint:     build the model yourself (hndl.build) and call model.summary()" in out
    # A built model is summarised as it is: the limit is on what hndl builds itself.
    assert len(hndl.summary(hndl.build(hndl.loads(text))).rows) == 60


def test_the_dims_of_a_meta_build_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hndl._check_limits, "MAX_META_DIMS", 100)
    with pytest.raises(hndl.HndlError) as info:
        hndl.summary(hndl.loads(high_rank(MAX_RANK, repeat=1)))
    assert info.value.problems[0].message == (
        "graph 'graph' has outputs of 128 dims in all, more than the 100 hndl builds on the meta device to "
        "describe a graph"
    )


# --- dims beyond int64 ----------------------------------------------------------------------------------------


def test_regression_dims_beyond_int64_in_summary_are_an_hndl_error() -> None:
    g = hndl.Graph("mlp")
    g.output(g.add("linear", g.input("x", ("B", 784)), name="hidden", out_features=512))
    model = hndl.build(g)
    with pytest.raises(hndl.HndlError) as info:
        hndl.summary(model, B=2**63 - 1)
    assert isinstance(info.value, DimError)
    assert info.value.code == "E_SHAPE"
    assert "beyond the limit of 2**63-1" in info.value.problems[0].message


def test_a_dim_error_is_an_hndl_error_and_keeps_its_reason_as_its_text() -> None:
    error = DimError("cannot parse dimension '(': it ends too early")
    assert isinstance(error, hndl.HndlError)
    assert isinstance(error, ValueError)
    assert (error.code, str(error)) == ("E_SHAPE", "cannot parse dimension '(': it ends too early")
    assert str(error.problems[0]) == "E_SHAPE: cannot parse dimension '(': it ends too early"


def test_regression_dims_beyond_int64_in_the_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = "hndl: 1\ninputs: {x: {shape: [B, 784]}}\nnodes: {n: {op: linear, in: x, out_features: 10}}\noutputs: [n]\n"
    code, out = cli(capsys, tmp_path, text, "summary", "SPEC", "--dims", "B=9223372036854775807")
    assert code == 1
    assert out.splitlines()[0].endswith(
        "E_INPUT: the sizes given (--dims B=9223372036854775807) make a dim too large: a dimension grows to "
        "7.231e+22, beyond the limit of 2**63-1"
    )


# --- ties -----------------------------------------------------------------------------------------------------


def test_regression_a_tie_between_float64_and_float32_layers_is_refused_at_build() -> None:
    # It built, and the first call failed inside the layer (mat1 and mat2 must have the same dtype).
    graph = hndl.loads(HOSTILE["tie float64 to float32"])
    hndl.check(graph)  # the layers' dtypes are the builder's: each follows its input's declared dtype
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(graph)
    (problem,) = info.value.problems
    assert (problem.code, problem.node, problem.op) == ("E_DTYPE", "b", "linear")
    assert problem.message == (
        "tie 'weight' = 'a.weight': linear 'b' has weight in float32, linear 'a' has weight in float64"
    )
    assert (problem.expected, problem.actual) == ("float32", "float64")


def test_a_tie_between_float64_and_float32_layers_in_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out = cli(capsys, tmp_path, HOSTILE["tie float64 to float32"], "check", "--build", "SPEC")
    assert code == 1
    assert "E_DTYPE linear 'b': tie 'weight' = 'a.weight'" in out


def test_regression_an_invalid_name_of_100k_characters_is_echoed_cut() -> None:
    g = hndl.Graph("g")
    with pytest.raises(hndl.HndlError) as info:
        g.input("-" * 100_000, ("B",))
    assert info.value.code == "E_NAME"
    assert len(str(info.value)) < 300


# --- found by the fuzzer --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("hndl: 1\nparams: {q: [{1: 8}]}\ninputs: {x: {shape: [B, 4]}}\nnodes: {n: {op: relu, in: x}}\noutputs: [n]\n", "2:15"),
        ("hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {n: {op: relu, in: x, zz: {a: [{1: 2}]}}}\noutputs: [n]\n", "3:40"),
    ],
    ids=["graph parameter", "node parameter"],
)  # fmt: skip
def test_regression_a_number_as_a_key_inside_a_value_is_refused_at_load(text: str, where: str) -> None:
    # It loaded, and dumps could not write it back ("mapping key 1 is not a string"): the fuzzer's round trip.
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(text)
    (problem,) = info.value.problems
    assert (problem.code, problem.location) == ("E_SPEC", f"<string>:{where}")
    assert problem.message.endswith("a key inside a value must be text, got integer 1")
