"""Graph-parameter overrides at load (``hndl.load``/``loads``'s ``params=``, ``hndl.zoo.get``'s keywords), and the
expression grammar as docs/spec-files.md#expressions writes it down."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import hndl
from hndl._errors import ProblemList
from hndl._param_binding import resolve
from hndl._yaml_reader import read_yaml

ROOT = Path(__file__).resolve().parents[2]

SPEC = """\
hndl: 1
name: patches
params:
  image_size: 32
  patch: 8
  dim: 64
  dropout: 0.1
  act: gelu
  extra: null
graphs:
  block:
    params: {width: 8}
    inputs: {h: {shape: [B, N, width]}}
    nodes:
      ff: {op: linear, in: h, out_features: $width}
    outputs: [ff]
inputs:
  image: {shape: [B, 3, image_size, image_size]}
nodes:
  embed:  {op: conv2d, in: image, out_channels: $dim, kernel_size: $patch, stride: $patch}
  tokens: {op: flatten, in: embed, start_dim: 2}
  wide:   {op: linear, in: tokens, out_features: "$(image_size // patch) * (image_size // patch) * 2"}
  scale:  {op: scale, in: wide, factor: "$pow(dim, -0.5)"}
  drop:   {op: dropout, in: scale, p: $dropout}
outputs: [drop]
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "patches.yaml"
    path.write_text(SPEC, encoding="utf-8")
    return path


def _messages(exc: pytest.ExceptionInfo[hndl.HndlError]) -> list[str]:
    return [p.message for p in exc.value.problems]


# --- overrides act as the spec's own values -----------------------------------------------------------------


def test_load_with_params_builds_as_if_the_spec_had_that_value(spec_file: Path) -> None:
    graph = hndl.load(spec_file, params={"image_size": 64})
    assert graph.params["image_size"] == 64
    model = hndl.build(graph)
    # the input shape names it, and the expression '$(image_size // patch) * (image_size // patch) * 2' follows
    assert model.nodes["n_wide"].out_features == (64 // 8) ** 2 * 2
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 64, 128)
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 3, 32, 32))  # the old size is no longer the model's
    assert info.value.code == "E_INPUT"


def test_an_override_feeding_an_expression_re_evaluates(spec_file: Path) -> None:
    model = hndl.build(hndl.load(spec_file, params={"dim": 16, "dropout": 0}))
    assert model.nodes["n_scale"].factor == 16**-0.5
    assert model.nodes["n_drop"].p == 0
    assert model.nodes["n_embed"].out_channels == 16


def test_loads_takes_params_and_the_design_signature_is_positional(spec_file: Path) -> None:
    assert hndl.loads(SPEC, params={"patch": 4}).params["patch"] == 4
    assert hndl.loads(SPEC, {"patch": 4}, False).params["patch"] == 4
    assert hndl.load(spec_file, {"patch": 4}, False).params["patch"] == 4
    assert hndl.load(spec_file, params=None).params == hndl.loads(SPEC).params


def test_dumps_after_an_override_writes_it_and_round_trips(spec_file: Path) -> None:
    graph = hndl.load(spec_file, params={"image_size": 48, "act": "relu", "extra": (1, 2)})
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert again.params == {**hndl.loads(SPEC).params, "image_size": 48, "act": "relu", "extra": [1, 2]}
    assert hndl.dumps(again) == text
    shapes = [tuple(p.shape) for p in hndl.build(again).parameters()]
    assert shapes == [tuple(p.shape) for p in hndl.build(graph).parameters()]


def test_an_override_does_not_keep_the_callers_objects(spec_file: Path) -> None:
    value = [1, 2]
    graph = hndl.load(spec_file, params={"extra": value})
    value.append(3)
    assert graph.params["extra"] == [1, 2]


def test_zoo_get_and_load_of_a_zoo_name_take_the_same_overrides() -> None:
    assert hndl.zoo.get("resnet18", num_classes=10).params["num_classes"] == 10
    assert hndl.load("zoo:resnet18", params={"num_classes": 10}).params["num_classes"] == 10
    graph = hndl.load("zoo:llama@llama-2-7b", params={"num_hidden_layers": 2})
    assert (graph.params["num_hidden_layers"], graph.params["hidden_size"]) == (2, 4096)


# --- checked: unknown names, wrong kinds ------------------------------------------------------------------


def test_an_unknown_override_is_e_param_with_did_you_mean_at_the_params_line(spec_file: Path) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(spec_file, params={"imagesize": 64, "dim": 32})
    (problem,) = info.value.problems
    assert problem.code == "E_PARAM"
    assert problem.message == "graph 'patches' has no parameter 'imagesize'"
    assert problem.hint == "did you mean 'image_size'?"
    assert problem.expected == "one of image_size, patch, dim, dropout, act, extra"
    assert problem.location == f"{spec_file}:4:3"  # where the spec's params are declared


def test_an_unknown_override_of_a_spec_without_params_says_so() -> None:
    text = "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {a: {op: relu, in: x}}\noutputs: [a]\n"
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(text, params={"width": 3})
    problem = info.value.problems[0]
    assert problem.code == "E_PARAM"
    assert problem.expected == "none: the spec declares no params"
    assert "params:" in (problem.hint or "")


def test_a_subgraph_parameter_is_not_an_override_and_the_hint_says_whose_it_is(spec_file: Path) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(spec_file, params={"width": 16})
    assert "is a parameter of graph 'block'" in (info.value.problems[0].hint or "")


def test_an_override_of_the_wrong_kind_is_e_param_at_its_declaration(spec_file: Path) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(spec_file, params={"image_size": "96", "patch": 4.5, "act": 3, "dropout": True})
    problems = info.value.problems
    assert [p.code for p in problems] == ["E_PARAM"] * 4
    assert (
        problems[0].message
        == "parameter 'image_size' of graph 'patches' is an integer (32 in the spec), got string '96'"
    )
    assert problems[0].hint == "pass the number 96, not the text '96'"
    assert problems[0].location == f"{spec_file}:4:3"
    assert problems[1].message.endswith("is an integer (8 in the spec), got number 4.5")
    assert problems[1].location == f"{spec_file}:5:3"
    assert problems[2].message.endswith("is text ('gelu' in the spec), got integer 3")
    assert problems[3].message.endswith("is a number (0.1 in the spec), got boolean true")


def test_a_float_parameter_takes_an_integer_and_null_replaces_any(spec_file: Path) -> None:
    graph = hndl.load(spec_file, params={"dropout": 0, "act": None, "extra": {"any": ["thing", 1]}})
    assert (graph.params["dropout"], graph.params["act"], graph.params["extra"]) == (0, None, {"any": ["thing", 1]})


def test_an_expression_as_an_override_is_refused_with_a_hint_to_the_docs(spec_file: Path) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(spec_file, params={"dim": "$patch * 8"})
    assert "docs/spec-files.md#expressions" in (info.value.problems[0].hint or "")


def test_a_value_that_is_not_plain_data_is_e_param(spec_file: Path) -> None:
    looped: list[object] = []
    looped.append(looped)
    for value, words in [
        (object(), "object is not a value a spec file can hold"),
        (looped, "contains itself"),
        ({1: 2}, "a key inside the value must be text"),
        (torch.ones(2), "Tensor is not a value"),
    ]:
        with pytest.raises(hndl.HndlError) as info:
            hndl.load(spec_file, params={"extra": value})
        assert info.value.problems[0].code == "E_PARAM"
        assert words in info.value.problems[0].message


def test_params_that_are_not_a_mapping_are_e_param(spec_file: Path) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(spec_file, params=[("dim", 3)])  # type: ignore[arg-type]
    assert info.value.code == "E_PARAM"
    assert "must be a mapping of parameter name to value, got list" in info.value.problems[0].message


def test_overrides_are_all_or_nothing_and_every_problem_is_listed() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.get("resnet18", num_classes="ten", widht=3)
    assert [p.code for p in info.value.problems] == ["E_PARAM", "E_PARAM"]
    assert info.value.problems[0].location is not None
    assert info.value.problems[0].location.startswith("zoo:resnet18:")
    assert hndl.zoo.get("resnet18").params["num_classes"] == 1000


def test_zoo_get_keeps_its_unknown_override_message() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.get("resnet18", num_class=10)
    problem = info.value.problems[0]
    assert problem.message == "zoo:resnet18 has no parameter 'num_class'"
    assert problem.hint == "did you mean 'num_classes'?"


# --- hints that point to the expression grammar -------------------------------------------------------------


def _check_problem(text: str) -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    return info.value.problems[0]


def test_a_hand_typed_expression_without_dollar_gets_a_hint_to_the_docs() -> None:
    problem = _check_problem(SPEC.replace('factor: "$pow(dim, -0.5)"', 'factor: "pow(dim, -0.5)"'))
    assert problem.code == "E_PARAM"
    assert (
        problem.hint
        == "to compute it, write it as an expression: '$pow(dim, -0.5)' (see docs/spec-files.md#expressions)"
    )


def test_python_functions_the_grammar_lacks_get_the_functions_it_has() -> None:
    problem = _check_problem(SPEC.replace('factor: "$pow(dim, -0.5)"', 'factor: "dim ** -0.5"'))
    assert (
        problem.hint == "to compute it, write it as an expression: '$dim ** -0.5' (see docs/spec-files.md#expressions)"
    )
    problem = _check_problem(SPEC.replace('factor: "$pow(dim, -0.5)"', 'factor: "1 / rsqrt(dim)"'))
    assert "expressions have no rsqrt()" in (problem.hint or "")
    assert "sqrt" in (problem.hint or "")


def test_a_bad_expression_is_e_param_with_a_hint_to_the_docs() -> None:
    problem = _check_problem(SPEC.replace('factor: "$pow(dim, -0.5)"', 'factor: "$dim *** -0.5"'))
    assert problem.code == "E_PARAM"
    assert "is neither a graph parameter nor an expression over them" in problem.message
    assert (problem.hint or "").endswith("see docs/spec-files.md#expressions")


def test_the_grammar_hint_names_every_function_and_operator() -> None:
    from hndl._hints import EXPRESSION_HINT
    from hndl._param_expressions import FUNCTIONS

    for word in [*FUNCTIONS, "**", "//", "%"]:
        assert word in EXPRESSION_HINT.replace(",", " ").replace(";", " ").split(), word


def test_an_expression_in_params_was_not_computed_and_now_is() -> None:
    text = SPEC.replace("  dim: 64\n", '  dim: 64\n  half: "$dim // 2"\n').replace(
        "out_channels: $dim", "out_channels: $half"
    )
    model = hndl.build(hndl.loads(text))
    assert model.nodes["n_embed"].out_channels == 32
    assert hndl.build(hndl.loads(text, params={"dim": 128})).nodes["n_embed"].out_channels == 64


# --- the grammar as the docs write it -----------------------------------------------------------------------


def _docs_table() -> list[tuple[str, str, str, int]]:
    """The rows of the table in docs/spec-files.md's Expressions section: (written, parameters, value, line)."""
    lines = (ROOT / "docs" / "spec-files.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("## Expressions")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("## "))
    rows = []
    for number, line in enumerate(lines[start:end], start + 1):
        cells = re.fullmatch(r"\| `(.+)` \| `(.+)` \| (.+) \|", line)
        if cells:
            rows.append((cells.group(1), cells.group(2), cells.group(3), number))
    return rows


def _yaml(text: str) -> object:
    problems = ProblemList()
    read = read_yaml(text, "docs", problems)
    assert not problems.problems, text
    assert read is not None
    return read.plain()


def test_the_docs_have_an_expressions_section_with_examples() -> None:
    rows = _docs_table()
    assert len(rows) >= 30
    assert sum(value.startswith("error: ") for _, _, value, _ in rows) >= 5


@pytest.mark.parametrize(
    ("written", "parameters", "value", "line"), [pytest.param(*row, id=row[0]) for row in _docs_table()]
)
def test_every_example_of_the_docs_expressions_section_evaluates_as_written(
    written: str, parameters: str, value: str, line: int
) -> None:
    bindings = _yaml(parameters)
    assert isinstance(bindings, dict)
    got, reason, _ = resolve(written, bindings)
    if value.startswith("error: "):
        assert got is None
        assert value[len("error: ") :] in reason, f"docs/spec-files.md:{line}: {reason}"
        return
    want = _yaml(value.strip("`"))
    assert reason == "", f"docs/spec-files.md:{line}: {reason}"
    assert (got, type(got)) == (want, type(want)), f"docs/spec-files.md:{line}"
