"""Hostile spec text: bounded work, only HndlError, short escaped excerpts, no silent non-finite parameters.

Each test is named after what it guards (issue 10). Bounded work is asserted as work, not time (the normal
run has no timed assertions): text over the limit never reaches the YAML parser, and the parser composes at
most a limit's worth of values before it stops.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import hndl
from hndl import _yaml_reader

HEAD = "hndl: 1\ninputs: {x: {shape: [B, 4]}}\n"


@pytest.fixture
def composed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many YAML nodes the reader composed (one entry per call), to show where parsing stopped."""
    calls: list[int] = []
    compose_node = _yaml_reader._Bounded.compose_node

    def counting(self: Any, parent: Any, index: Any) -> Any:
        calls.append(1)
        return compose_node(self, parent, index)

    monkeypatch.setattr(_yaml_reader._Bounded, "compose_node", counting)
    return calls


def spec_error(text: str | bytes) -> hndl.HndlError:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(text)
    return info.value


def check_error(text: str) -> hndl.HndlError:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    return info.value


# --- bounded work ----------------------------------------------------------------------------------------------


def test_a_spec_longer_than_the_text_limit_is_refused_before_it_is_parsed(tmp_path: Path, composed: list[int]) -> None:
    # One long list of 2.5 million values, 5 MB: parsing it used to take 50 s and 2.3 GB.
    text = HEAD + "nodes: {}\noutputs: []\nx: [" + "1," * 2_500_000 + "]\n"
    path = tmp_path / "big.yaml"
    path.write_text(text)
    for source in (text, text.encode()):
        error = spec_error(source)
        assert error.code == "E_SPEC"
        assert "longer than 2,000,000" in error.problems[0].message
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(path)
    assert composed == []  # refused before the YAML parser saw any of it
    assert info.value.problems[0].message == f"spec file {str(path)!r} is longer than 2,000,000 bytes"


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_loading_an_endless_file_reads_at_most_the_limit(composed: list[int]) -> None:
    # Reading /dev/zero to its end never returns: getting an answer at all shows the read is bounded.
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(Path("/dev/zero"))
    assert composed == []
    assert info.value.problems[0].message == "spec file '/dev/zero' is longer than 2,000,000 bytes"


def test_values_are_counted_while_parsing_not_after(monkeypatch: pytest.MonkeyPatch, composed: list[int]) -> None:
    # With a limit of 1,000 values, a list of 300,000 stops at the 1,001st: reading all of it takes seconds.
    monkeypatch.setattr(_yaml_reader, "MAX_VALUES", 1000)
    text = "hndl: 1\nx: [" + "7, " * 300_000 + "]\n"
    error = spec_error(text)
    assert len(composed) < 1010  # stopped at the limit, not after the 300,000 items
    (problem,) = error.problems
    assert problem.message == "the spec has more than 1,000 values"
    # The 1,001st value: after the document, its version 1 and the list, the 998th item (item 997 from 0).
    assert problem.location == f"<string>:2:{5 + 3 * 997}"


def test_aliases_that_expand_past_the_value_limit_are_still_refused() -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]" for i in range(1, 9)]
    error = spec_error("\n".join(lines) + "\n")
    assert error.problems[0].message == "the spec expands to more than 50,000 values"


def test_a_long_list_stops_at_the_value_limit_quickly(composed: list[int]) -> None:
    # 250,000 values in 500 kB: under the text limit, so the value limit must stop the parser early.
    error = spec_error("hndl: 1\nx: [" + "1," * 250_000 + "]\n")
    assert len(composed) < 50_010
    assert [p.message for p in error.problems] == ["the spec has more than 50,000 values"]


def test_deep_nesting_stops_at_the_depth_limit_quickly(composed: list[int]) -> None:
    # The YAML scanner's cost grows with the square of the nesting: 50,000 brackets took seconds.
    (problem,) = spec_error("hndl: 1\nx: " + "[" * 50_000 + "]" * 50_000 + "\n").problems
    assert len(composed) < 80
    assert (problem.message, problem.location) == ("values are nested more than 64 levels deep", "<string>:2:68")


@pytest.mark.parametrize(
    "literal",
    ["1" + "0" * 4300, "-" + "9" * 4301, "0x" + "f" * 3600, "0o" + "7" * 4800, "+" + "0" * 10 + "1" * 4301],
    ids=["decimal", "negative", "hex", "octal", "padded"],
)
@pytest.mark.parametrize("where", ["version", "repeat", "param", "dim"])
def test_integers_of_more_than_4300_digits_are_spec_errors(literal: str, where: str) -> None:
    texts = {
        "version": f"hndl: {literal}\ninputs: {{}}\nnodes: {{}}\noutputs: []\n",
        "repeat": HEAD + f"nodes: {{n: {{op: graph, graph: g, in: x, repeat: {literal}}}}}\noutputs: [n]\n",
        "param": HEAD + f"nodes: {{n: {{op: linear, in: x, out_features: {literal}}}}}\noutputs: [n]\n",
        "dim": f"hndl: 1\ninputs: {{x: {{shape: [B, {literal}]}}}}\nnodes: {{}}\noutputs: [x]\n",
    }
    (problem,) = spec_error(texts[where]).problems
    assert problem.code == "E_SPEC"
    assert problem.message.endswith("has more than 4,300 digits")
    assert len(problem.message) < 80


def test_an_integer_of_exactly_4300_digits_is_read() -> None:
    big = "9" * 4300
    error = spec_error(f"hndl: {big}\ninputs: {{}}\nnodes: {{}}\noutputs: []\n")
    assert error.problems[0].message.startswith("unsupported format version 9999")
    assert len(error.problems[0].message) < 100


# --- messages echo short, escaped excerpts ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "contract", ['{shape: [B, "C+%s)"]}', '{shape: [B], dtype: "f%s"}'], ids=["shape entry", "dtype"]
)
def test_a_long_bad_contract_value_is_quoted_as_a_short_excerpt(contract: str) -> None:
    text = f"hndl: 1\ninputs: {{x: {contract % ('Q' * 5000)}}}\nnodes: {{}}\noutputs: [x]\n"
    (problem,) = spec_error(text).problems
    assert problem.code == "E_SPEC"
    assert len(problem.message) <= 300


def test_a_file_name_with_control_characters_is_escaped_in_locations(tmp_path: Path) -> None:
    path = tmp_path / "a\x1b[2J\nb.yaml"
    path.write_text("hndl: 2\ninputs: {}\nnodes: {}\noutputs: []\n")
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(path)
    location = info.value.problems[0].location
    assert location == f"{tmp_path}/a\\x1b[2J\\nb.yaml:1:7"
    assert "\x1b" not in str(info.value)
    assert "\nb.yaml" not in str(info.value)


# --- non-finite parameter values -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
@pytest.mark.parametrize(
    "node",
    [
        "{op: layernorm, in: x, eps: %s}",
        "{op: rmsnorm, in: x, eps: %s}",
        "{op: groupnorm, in: x, num_groups: 2, eps: %s}",
        "{op: batchnorm1d, in: x, eps: %s}",
        "{op: batchnorm1d, in: x, momentum: %s}",
        "{op: dropout, in: x, p: %s}",
    ],
    ids=["layernorm eps", "rmsnorm eps", "groupnorm eps", "batchnorm eps", "batchnorm momentum", "dropout p"],
)
def test_non_finite_float_parameters_are_refused_at_check(node: str, value: str) -> None:
    (problem,) = check_error(HEAD + f"nodes: {{n: {node % value}}}\noutputs: [n]\n").problems
    assert problem.code == "E_PARAM"
    assert "must be a finite number, got " in problem.message
    assert problem.location is not None
    assert problem.location.startswith("<string>:3:")


def test_nan_is_outside_every_range() -> None:
    # NaN compares false with everything, so "v < min or v > max" used to let it through.
    bounded = hndl.Param("p", "float", min=0, max=1, finite=False)
    assert bounded.validate(float("nan")) == (None, "must be >= 0, got nan")
    assert hndl.Param("p", "float", max=1, finite=False).validate(float("nan")) == (None, "must be <= 1, got nan")


def test_a_parameter_may_opt_out_of_finite_values() -> None:
    limit = hndl.Param("limit", "float", finite=False)
    assert limit.validate(float("inf")) == (float("inf"), "")
    assert limit.validate(-float("inf")) == (-float("inf"), "")
    assert hndl.Param("limit", "float").validate(float("inf")) == (None, "must be a finite number, got inf")
    assert hndl.Param("n", "float").validate(2) == (2, "")


# --- names longer than YAML's implicit keys ---------------------------------------------------------------------


@pytest.mark.parametrize("length", [999, 1000, 1001, 1024, 1025, 5000])
def test_names_of_any_length_the_api_accepts_round_trip_through_dumps(length: int) -> None:
    # YAML limits an implicit key to 1024 characters; the dumper writes longer names as explicit keys.
    sub = hndl.Graph("s" * length)
    h = sub.input("q" * length, ["B", 4])
    sub.output(sub.add("relu", h, name="r" * length))
    g = hndl.Graph("g" * length)
    x = g.input("a" * length, ["B", 4])
    g.add_subgraph(sub)
    g.output(g.add("graph", x, graph=sub.name, name="b" * length))
    text = hndl.dumps(g)
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    assert list(again.inputs) == ["a" * length]
    assert list(again.nodes) == ["b" * length]
    assert list(again.graphs["s" * length].nodes) == ["r" * length]
    hndl.check(again)
