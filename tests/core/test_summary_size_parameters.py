"""Size parameters (SPEC 8.5.4): an integer parameter of the top graph that an input shape names is given to
summary and draw with the dims; a graph is built at that size, a built model keeps its own."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl.cli import main

torch = pytest.importorskip("torch")

SPEC = """
hndl: 1
name: patches
params: {size: 32, width: 8}
inputs:
  image: {shape: [B, 3, size, size]}
nodes:
  conv: {op: conv2d, in: image, out_channels: $width, kernel_size: 4, stride: 4}
  flat: {op: flatten, in: conv, start_dim: 1}
  head: {op: linear, in: flat, out_features: 10}
outputs: [head]
"""


def _graph() -> hndl.Graph:
    return hndl.loads(SPEC)


@settings(max_examples=20, deadline=None)
@given(size=st.integers(1, 16).map(lambda k: 4 * k), batch=st.integers(1, 8))
def test_a_graph_is_summarised_at_the_size_given(size: int, batch: int) -> None:
    graph = _graph()
    table = hndl.summary(graph, B=batch, size=size)
    tokens = (size // 4) ** 2
    assert table.inputs == {"image": f"[{batch}, 3, {size}, {size}]"}
    assert table.trainable_params == 3 * 16 * 8 + 8 + 8 * tokens * 10 + 10
    assert table.macs == batch * (tokens * 8 * 48 + 8 * tokens * 10)
    assert graph.params == {"size": 32, "width": 8}  # the graph given is left as it was


def test_the_default_size_needs_no_dim() -> None:
    assert hndl.summary(_graph(), B=1).inputs == {"image": "[1, 3, 32, 32]"}


def test_a_built_model_accepts_its_own_size_and_refuses_another() -> None:
    model = hndl.build(_graph())
    assert model.summary(B=2, size=32).macs == hndl.summary(_graph(), B=2).macs
    with pytest.raises(hndl.HndlError) as err:
        model.summary(B=2, size=64)
    (problem,) = err.value.problems
    assert problem.code == "E_INPUT"
    assert problem.message == "dim 'size' is a parameter of graph 'patches', and this model was built with size=32"
    assert (problem.expected, problem.actual) == ("size=32", "size=64")
    # nothing was spoiled: the next valid call works
    assert model.summary(B=1).inputs == {"image": "[1, 3, 32, 32]"}


def test_a_parameter_no_input_shape_names_is_not_a_dim() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(_graph(), B=1, width=16)
    (problem,) = err.value.problems
    assert problem.code == "E_INPUT"
    assert problem.message == "the graph's inputs have no dim 'width'"
    assert problem.expected == "B, size"


def test_a_size_must_be_a_positive_int() -> None:
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(_graph(), B=1, size=0)
    assert [p.message for p in err.value.problems] == ["dim 'size' must be a positive int, not 0"]


def test_a_size_that_does_not_check_names_the_node() -> None:
    # the configuration is checked like any other: 2 x 2 images are smaller than the 4 x 4 kernel
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(_graph(), B=1, size=2)
    assert err.value.problems[0].node == "conv"


def test_the_command_builds_a_spec_file_at_the_size_given(tmp_path, capsys) -> None:
    path = tmp_path / "patches.yaml"
    path.write_text(SPEC)
    assert main(["summary", str(path), "--dims", "B=1,size=64"]) == 0
    out = capsys.readouterr().out
    assert "inputs:  image [1, 3, 64, 64]" in out
    assert "outputs: head [1, 10]" in out


def test_draw_takes_a_size_as_a_dim() -> None:
    text = hndl.draw(_graph(), format="dot", B=1, size=64)
    assert "[1, 8, 16, 16]" in text
