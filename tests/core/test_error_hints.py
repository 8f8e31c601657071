"""Errors that say how to fix: messages name the nodes wired in, and hints propose the likely fix."""

from __future__ import annotations

import re
from pathlib import Path

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


# --- problems between wired tensors name the nodes wired in ----------------------------------------------

BROADCAST = """
hndl: 1
inputs:
  x: {shape: [B, 784]}
  mask: {shape: [B, 100]}
nodes:
  hidden: {op: linear, in: x, out_features: 512}
  gate: {op: add, in: [hidden, mask]}
outputs: [gate]
"""


def test_broadcast_error_names_the_nodes_wired_in_not_the_ports() -> None:
    # Regression: the message read "'a' [B, 512] and 'b' [B, 100]", the op's port names.
    p = spec_problem(BROADCAST)
    assert (p.code, p.node, p.port) == ("E_SHAPE", "gate", "b")
    assert p.message == (
        "'hidden' [B, 512] and 'mask' [B, 100] do not broadcast: dim -1 is 512 in 'hidden' and 100 in 'mask'"
    )
    assert p.expected == "dim -1 equal to 512, or 1 (broadcast with 'hidden' [B, 512])"
    assert p.hint == "make dim -1 of 'mask' 512 (or 1, to broadcast), or that of 'hidden' 100"


def test_dtype_clash_between_inputs_names_the_nodes_wired_in() -> None:
    p = spec_problem(
        "hndl: 1\ninputs:\n  a: {shape: [B, 3, 4], dtype: float32}\n  w: {shape: [4, 2], dtype: float64}\n"
        "nodes:\n  y: {op: matmul, in: [a, w]}\noutputs: [y]\n"
    )
    assert (p.code, p.port, p.message) == ("E_DTYPE", "b", "dtype must match 'a' (float32), got float64 in 'w'")
    assert p.hint == "give both the same dtype: declare it on the graph inputs they come from, e.g. dtype: float32"


# --- hints that propose the likely fix --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "in_features", "hint"),
    [
        ("[B, 28, 28]", 784, "add a node {op: flatten, start_dim: 1} before it: it makes [B, 28, 28] into [B, 784]"),
        ("[64, 28, 28]", 784, "add a node {op: flatten, start_dim: 1} before it: it makes [64, 28, 28] into [64, 784]"),
        (
            "[B, 64, 7, 7]",
            3136,
            "add a node {op: flatten, start_dim: 1} before it: it makes [B, 64, 7, 7] into [B, 3136]",
        ),
    ],
)
def test_rank_mismatch_that_a_flatten_resolves_hints_flatten(shape: str, in_features: int, hint: str) -> None:
    # Regression: the hint said to drop in_features, which would have applied the layer to the last dim only.
    p = spec_problem(
        f"hndl: 1\ninputs:\n  x: {{shape: {shape}}}\n"
        f"nodes:\n  fc: {{op: linear, in: x, in_features: {in_features}, out_features: 10}}\noutputs: [fc]\n"
    )
    assert (p.code, p.node, p.port) == ("E_SHAPE", "fc", "x")
    assert p.hint == hint


def test_conv_output_into_a_linear_hints_flatten() -> None:
    p = spec_problem(
        "hndl: 1\ninputs:\n  x: {shape: [B, 1, 28, 28]}\nnodes:\n"
        "  conv: {op: conv2d, in: x, out_channels: 4, kernel_size: 3, padding: 1}\n"
        "  fc: {op: linear, in: conv, in_features: 3136, out_features: 10}\noutputs: [fc]\n"
    )
    assert p.hint == "add a node {op: flatten, start_dim: 1} before it: it makes [B, 4, 28, 28] into [B, 3136]"


def test_features_that_no_flatten_gives_keep_the_drop_hint() -> None:
    p = spec_problem(
        "hndl: 1\ninputs:\n  x: {shape: [B, 28, 28]}\n"
        "nodes:\n  fc: {op: linear, in: x, in_features: 700, out_features: 10}\noutputs: [fc]\n"
    )
    assert p.hint == "drop in_features: hndl infers it from the input"


def test_integer_input_into_a_float_layer_hints_the_dtype_to_declare() -> None:
    p = spec_problem(
        "hndl: 1\ninputs:\n  x: {shape: [B, 4], dtype: int64}\nnodes:\n  a: {op: relu, in: x}\noutputs: [a]\n"
    )
    assert (p.code, p.message) == ("E_DTYPE", "needs dtype float, got int64")
    assert p.hint == "declare the input's dtype: float32, and pass a floating tensor (x.float() in torch)"


# --- a float64 input into a float32 model is caught by the input contract -----------------------------------


def test_float64_input_into_a_float32_model_is_an_input_error_with_the_conversion_hint() -> None:
    # Regression: it failed inside the first linear as E_RUNTIME "mat1 and mat2 must have the same dtype".
    torch = pytest.importorskip("torch")
    model = hndl.build(
        hndl.loads(
            "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {fc: {op: linear, in: x, out_features: 2}}\noutputs: [fc]\n"
        )
    )
    with pytest.raises(hndl.HndlError) as info:
        model(torch.zeros(3, 4, dtype=torch.float64))
    (p,) = info.value.problems
    assert (p.code, p.node, p.message) == (
        "E_INPUT",
        "x",
        "dtype float64 does not match the model's float32 parameters",
    )
    assert (p.expected, p.actual) == ("float32", "float64")
    assert p.hint == "convert the input with x.float(), or declare dtype: float64 and convert the model with .double()"
    assert model.double()(torch.zeros(3, 4, dtype=torch.float64)).dtype == torch.float64


def test_float64_input_into_a_model_without_parameters_runs() -> None:
    torch = pytest.importorskip("torch")
    model = hndl.build(
        hndl.loads("hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {a: {op: relu, in: x}}\noutputs: [a]\n")
    )
    assert model(torch.ones(2, 4, dtype=torch.float64)).dtype == torch.float64


def test_input_declared_float64_is_taken_at_its_word() -> None:
    torch = pytest.importorskip("torch")
    spec = "hndl: 1\ninputs: {x: {shape: [B, 4], dtype: float64}}\nnodes: {fc: {op: linear, in: x, out_features: 2}}\noutputs: [fc]\n"
    model = hndl.build(hndl.loads(spec)).double()
    assert model(torch.zeros(3, 4, dtype=torch.float64)).dtype == torch.float64


# --- the closest name for every misspelling ----------------------------------------------------------------


def test_misspelt_choice_suggests_the_closest_one() -> None:
    p = spec_problem(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {p: {op: pad, in: x, pad: [1, 1], mode: reflekt}}\noutputs: [p]\n"
    )
    assert (p.code, p.hint) == ("E_PARAM", "did you mean 'reflect'?")


def test_out_of_range_parameter_hints_what_it_is() -> None:
    p = spec_problem(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {fc: {op: linear, in: x, out_features: 0}}\noutputs: [fc]\n"
    )
    assert (p.code, p.hint) == ("E_PARAM", "out_features: size of each output sample")


def test_unknown_reference_with_no_close_name_lists_the_names() -> None:
    p = spec_problem(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {fc: {op: linear, in: zzz, out_features: 2}}\noutputs: [fc]\n"
    )
    assert (p.code, p.hint) == ("E_REF", "the graph has 'x'")


def test_every_message_in_the_error_reference_shows_its_hint() -> None:
    page = (Path(__file__).parents[2] / "docs" / "reference" / "errors.md").read_text()
    messages = re.findall(r"Message:\s*```\w*\n(.*?)```", page, re.S)
    assert len(messages) >= 12
    assert [m for m in messages if "    hint:" not in m] == []
