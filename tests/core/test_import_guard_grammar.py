"""The grammar torch.export's guards are read with (no eval): it evaluates as Python does, and reads nothing else."""

from __future__ import annotations

import ast
import operator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hndl.importer._guard_grammar import read_guard

_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod}

sizes = st.fixed_dictionaries({"a": st.integers(1, 500), "b": st.integers(1, 500)})


@st.composite
def expressions(draw: st.DrawFn, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(["a", "b", "L['x'].size()[0]"]) | st.integers(1, 99).map(str))
    op = draw(st.sampled_from(sorted(_OPS)))
    left, right = draw(expressions(depth - 1)), draw(expressions(depth - 1))
    if draw(st.booleans()):
        return f"{draw(st.sampled_from(['Max', 'Min', 'torch.sym_max']))}({left}, {right})"
    return f"({left} {op} {right})"


@settings(max_examples=300, deadline=None)
@given(expressions(), expressions(), st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), sizes)
def test_a_guard_read_evaluates_as_python_does(left: str, right: str, compare: str, env: dict[str, int]) -> None:
    text = f"{left} {compare} {right}".replace("L['x'].size()[0]", "a")
    read = read_guard(text, ("a", "b"))
    assert read is not None
    namespace = {"Max": max, "Min": min, "torch": type("t", (), {"sym_max": staticmethod(max)}), **env}
    try:
        expected = bool(
            eval(compile(ast.parse(text, mode="eval"), "<guard>", "eval"), namespace)
        )  # the reference: Python's own reading
    except ZeroDivisionError:
        expected = False  # a guard that cannot be evaluated at a size does not hold there
    assert read.holds(env) is expected


@pytest.mark.parametrize(
    "text",
    ["__import__('os').system('true') == 0", "L['x'].size()[0] == 2", "a.real == 2", "'a' == 'a'", "a if b else 2"],
)
def test_a_guard_outside_the_grammar_is_not_read(text: str) -> None:
    assert read_guard(text, ("a", "b")) is None


@pytest.mark.parametrize(
    ("text", "env", "as_one"),
    [
        # torch's 0/1 specialisation: the map after a stride of 32 taken to be more than 1
        ("(w // 32) > 1", {"w": 32}, True),
        ("(w // 32) != 1", {"w": 40}, True),
        ("torch.sym_max(1, w // 32) < torch.sym_max(1, w // 32)*torch.sym_max(1, h // 32)", {"w": 64, "h": 32}, True),
        ("1 + ((-1 + w) // 32) < (1 + ((-1 + w) // 32))*(1 + ((-1 + h) // 32))", {"w": 64, "h": 32}, True),
        # branches of a module: Swin's shift is off where the padded map is one window of 2
        ("2*(w // 16) > 2", {"w": 16}, False),
        ("w > 2", {"w": 2}, False),
        # not a strict comparison, or not failing by an equality
        ("w >= 2", {"w": 1}, False),
        ("w > 5", {"w": 1}, False),
    ],
)
def test_a_failure_that_is_only_torchs_size_not_1_assumption_is_told_apart(
    text: str, env: dict[str, int], as_one: bool
) -> None:
    guard = read_guard(text, set(env))
    assert guard is not None
    assert not guard.holds(env)
    assert guard.fails_as_one(env) is as_one
