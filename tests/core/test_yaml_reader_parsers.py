"""The spec reader's two parsers read every text alike.

``hndl._yaml_reader`` composes a text from libyaml's events where PyYAML has libyaml (five times faster on a long
spec), and from PyYAML's pure-Python parser otherwise, or where libyaml refuses the text or is known to read it
differently. Either way the values, their locations, the keys' locations and the duplicates must be the same:
these tests read seeds, hostile texts and their mutants both ways and compare everything the loader sees.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from spec_mutator import HOSTILE, SEEDS, mutate_text, to_text

from hndl import _yaml_reader
from hndl._errors import ProblemList

pytestmark = pytest.mark.skipif(_yaml_reader._CParser is None, reason="PyYAML was built without libyaml here")


class _Choices:
    """The mutator's choices from a seeded random stream (the mutator takes any chooser)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def choice(self, options: Any) -> Any:
        return self.rng.choice(options)

    def integer(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def value(self) -> Any:
        return self.rng.choice([None, True, 0, -1, 2.5, "B", "x", [1, 2], {"a": 1}])

    def junk(self) -> str:
        return "".join(self.rng.choice(":{}[],-&*!|>'\"#%@`? \n\tab") for _ in range(self.rng.randint(1, 4)))

    def character(self) -> str:
        return self.rng.choice(["\t", "\ufeff", "\x85", "?", "é", "\r", " ", ":"])


def _pure(text: str) -> Any:
    loader = _yaml_reader._Loader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _seen(located: _yaml_reader.Located) -> Any:
    """Everything of a located value the spec loader reads: value, location, keys' locations, duplicates."""
    value = located.value
    if isinstance(value, list):
        value = [_seen(item) for item in value]
    elif isinstance(value, dict):
        value = [(repr(key), _seen(item)) for key, item in value.items()]
    elif value != value:  # NaN: equal to itself here
        value = "nan"
    duplicates = [(repr(d.key), d.loc) for d in located.duplicates]
    return (
        repr(type(located.value)),
        value,
        located.loc,
        sorted(map(repr, located.keys.items())),
        located.ok,
        duplicates,
    )


def _both_ways(text: str) -> tuple[Any, Any] | None:
    """What each parser read, converted as the loader converts it; None where the fast one left the text."""
    try:
        fast = _yaml_reader._compose_fast(text)
    except _yaml_reader._TooBig:
        with pytest.raises(_yaml_reader._TooBig):
            _pure(text)
        return None
    if fast is _yaml_reader._UNREAD:
        return None
    pure = _pure(text)  # a text libyaml read, PyYAML must read too
    return _converted(fast), _converted(pure)


def _converted(node: Any) -> Any:
    # A reader of its own each time: it counts the values it expands (aliases), and the bound is per text.
    return node and _seen(_yaml_reader._Reader("spec.yaml", ProblemList()).convert(node, 0))


def _texts(count: int, seed: int) -> list[str]:
    choose = _Choices(seed)
    starts = [to_text(s, style) for s in SEEDS for style in ("block", "flow", "json")]
    starts += [t for t in HOSTILE.values() if len(t) < 20_000]
    texts = list(starts)
    for _ in range(count):
        text = choose.choice(starts)
        for _ in range(choose.integer(1, 3)):
            text = mutate_text(choose, text)
        texts.append(text)
    return texts


@pytest.mark.parametrize("seed", range(4))
def test_both_parsers_read_seeds_and_mutants_to_the_same_located_values(seed: int) -> None:
    read_fast = 0
    for text in _texts(800, seed):
        both = _both_ways(text)
        if both is not None:
            read_fast += 1
            assert both[0] == both[1], text
    assert read_fast > 80  # the mutants that stay plain ASCII go through libyaml


def test_the_long_hostile_texts_read_alike_and_the_bounds_hold_in_either() -> None:
    for name, text in HOSTILE.items():
        both = _both_ways(text)
        if both is not None:
            assert both[0] == both[1], name


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a: {b: , c: 1}\n", "an empty value is marked elsewhere by libyaml"),
        ("a: {b?: 1}\n", "libyaml reads a ? inside a flow key"),
        ("a: {b: 1}\t\n", "a tab"),
        ("\ufeffa: 1\n", "a byte-order mark"),
        ("a: é\n", "text beyond ASCII"),
    ],
)
def test_texts_the_parsers_read_differently_are_left_to_pypyaml(text: str, why: str) -> None:
    assert _yaml_reader._compose_fast(text) is _yaml_reader._UNREAD, why


def test_deep_nesting_meets_hndls_bound_whichever_parser_stops_first() -> None:
    # libyaml stops at 1,000 open brackets with an error of its own, which sends the text to PyYAML; below that,
    # hndl's bound of 64 is met while composing libyaml's events. The message is hndl's either way.
    for depth in (100, 2000):
        problems = ProblemList()
        assert _yaml_reader.read_yaml("a: " + "[" * depth + "]" * depth + "\n", "spec.yaml", problems) is None
        assert [p.message for p in problems.problems] == ["values are nested more than 64 levels deep"], depth


def test_regression_the_500_kb_hostile_list_reads_through_libyaml() -> None:
    # The fuzzer's "long list" and "reshape to rank 40000" cases took about a second each through the
    # pure-Python parser, past the fuzzer's 2 s CPU limit on a loaded CI machine; through libyaml a fifth of that.
    assert _yaml_reader._compose_fast(HOSTILE["reshape to rank 40000"]) is not _yaml_reader._UNREAD
    with pytest.raises(_yaml_reader._TooBig, match="more than 50,000 values"):
        _yaml_reader._compose_fast(HOSTILE["long list"])
