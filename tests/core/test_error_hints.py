"""Errors that say how to fix: messages name the nodes wired in, and hints propose the likely fix."""

from __future__ import annotations

import pytest

import hndl


def spec_problem(text: str) -> hndl.Problem:
    """The one problem that loading and checking ``text`` reports."""
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    (problem,) = info.value.problems
    return problem


# --- YAML syntax errors point at the construct left open ---------------------------------------------------


def test_unclosed_flow_mapping_is_reported_where_it_was_opened() -> None:
    # Regression: PyYAML notices the missing '}' on the next line, which is where the error used to point.
    p = spec_problem("hndl: 1\ninputs:\n  x: {shape: [B, 4]\nnodes:\n  fc: {op: linear, in: x, out_features: 2}\n")
    assert p.location == "<string>:3:6"
    assert p.message == (
        "YAML syntax error: the '{' opened at 3:6 is not closed: expected ',' or '}', but got '<scalar>' at 4:1"
    )
    assert p.hint == "close it with '}', or separate its entries with ','"


def test_bracket_left_open_at_the_end_of_the_text_is_reported_where_it_was_opened() -> None:
    p = spec_problem("hndl: 1\nnodes: {a: [\n")
    assert p.location == "<string>:2:12"
    assert p.message.startswith("YAML syntax error: the '[' opened at 2:12 is not closed: ")
    assert p.message.endswith(" at 3:1")


def test_unclosed_quote_is_reported_where_it_was_opened() -> None:
    p = spec_problem('hndl: 1\nname: "abc\nnodes: 3\n')
    assert p.location == "<string>:2:7"
    assert p.message.startswith("YAML syntax error: the quoted string opened at 2:7 is not closed: ")
    assert p.hint == "close it with the same quote"


def test_wrong_closing_bracket_on_the_same_line_is_reported_where_it_is() -> None:
    p = spec_problem("hndl: 1\ninputs:\n  x: {shape: [B, 784}\n")
    assert p.location == "<string>:3:21"
    assert p.message == (
        "YAML syntax error: the '[' opened at 3:14 is not closed: expected ',' or ']', but got '}' at 3:21"
    )
