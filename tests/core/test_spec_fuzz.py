"""Fuzzing the spec loader: whatever the text, load + build either succeeds or raises HndlError.

Valid specs are mutated at random by ``tests/support/spec_mutator.py``, both as data and as text, with
Hypothesis drawing the choices (so that a failure shrinks); completely random text and bytes are thrown in too.
Nothing may escape but :class:`hndl.HndlError`. Whatever loads must also survive ``dumps`` and load back to the
same graph. These are the fast property tests of every run; ``nox -s fuzz`` runs the same mutator for minutes.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from spec_mutator import JUNK_CHARACTERS, KEYS, NAMES, OPS, SEEDS, mutate_data, mutate_text, to_text

import hndl

T = TypeVar("T")


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=24),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from(NAMES + OPS + KEYS + ["float32", "int64", "cpu", "*b", "C*H", "B+1", "(", "1e5"]),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS + NAMES) | st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=12,
)


class DrawChooser:
    """The mutator's choices drawn by Hypothesis, so that what it finds shrinks."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw

    def choice(self, options: Sequence[T]) -> T:
        return self.draw(st.sampled_from(options))

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(min_value=low, max_value=high))

    def value(self) -> Any:
        return self.draw(values)

    def junk(self) -> str:
        return self.draw(st.text(alphabet=st.sampled_from(JUNK_CHARACTERS), max_size=6) | st.text(max_size=4))

    def character(self) -> str:
        return self.draw(st.characters())


@st.composite
def mutated_data(draw: st.DrawFn) -> Any:
    return mutate_data(DrawChooser(draw), draw(st.sampled_from(SEEDS)))


def load_and_build(source: Any) -> hndl.Graph | None:
    """Load and build; returns the graph if both worked. Anything but HndlError fails the test."""
    try:
        graph = hndl.loads(source)
        hndl.build(graph)
    except hndl.HndlError as exc:
        error = exc
    else:
        return graph
    # Every problem is well formed: a known code, a message, and it renders.
    assert all(p.code in hndl.CODES and p.message for p in error.problems), error.problems
    assert str(error)
    return None


def load_only(source: Any) -> hndl.Graph | None:
    try:
        return hndl.loads(source)
    except hndl.HndlError:
        return None


def structure(graph: hndl.Graph) -> Any:
    def one(g: hndl.Graph) -> Any:
        return (
            g.name,
            [(n, s.contract) for n, s in g.inputs.items()],
            [(n.name, n.op, n.inputs, n.params) for n in g.nodes.values()],
            g.outputs,
        )

    return one(graph), [one(sub) for sub in graph.graphs.values()]


def assert_round_trip(graph: hndl.Graph) -> None:
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert repr(structure(again)) == repr(structure(graph))  # repr: nan params compare equal as text
    assert hndl.dumps(again) == text


@fuzz(1200)
@given(tree=mutated_data(), style=st.sampled_from(["block", "flow", "json"]))
def test_mutated_specs_load_and_build_or_raise_hndl_error(tree: Any, style: str) -> None:
    text = to_text(tree, style)
    graph = load_and_build(text)
    loaded = graph or load_only(text)
    if loaded is not None:
        assert_round_trip(loaded)


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    text = to_text(draw(st.sampled_from(SEEDS)), draw(st.sampled_from(["block", "flow", "json"])))
    return mutate_text(DrawChooser(draw), text)


@fuzz(1200)
@given(text=mutated_text())
def test_mutated_text_loads_and_builds_or_raises_hndl_error(text: str) -> None:
    graph = load_and_build(text)
    if graph is not None:
        assert_round_trip(graph)


@fuzz(600)
@given(text=st.text(max_size=200))
def test_random_text_raises_hndl_error(text: str) -> None:
    load_and_build(text)


@fuzz(300)
@given(text=st.text(max_size=60).map(lambda t: t + "\n") | st.text(max_size=60).map(lambda t: "hndl:" + t))
def test_load_refuses_any_text_without_reading_a_file(text: str) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(text)
    assert info.value.problems[0].hint == "hndl.load takes a path; pass spec text to hndl.loads"


@fuzz(400)
@given(data=st.binary(max_size=200))
def test_random_bytes_raise_hndl_error(data: bytes) -> None:
    load_and_build(data)


# "op" and "in" are node keys, "name" is Graph.add's own keyword: none of them can be a parameter.
param_keys = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=6).filter(
    lambda k: k not in ("op", "in", "name", "tie", "when")  # node keys
)
param_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(),
        st.sampled_from(["yes", "no", "on", "off", "~", "null", "1e5", "0x1F", "1:30", "*a", "&b", "!t", "<<", "- x"]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@fuzz(400)
@given(params=st.dictionaries(param_keys, param_values, max_size=5), shape=st.sampled_from([["B", 4], ["*b", "C*H"]]))
def test_dumps_round_trips_any_plain_params(params: dict[str, Any], shape: list[Any]) -> None:
    g = hndl.Graph("g")
    x = g.input("x", shape)
    g.output(g.add("relu", x, name="r", **params))
    text = hndl.dumps(g)
    again = hndl.loads(text)
    assert again.nodes["r"].params == params
    assert again.inputs["x"].contract == g.inputs["x"].contract
    assert hndl.dumps(again) == text
