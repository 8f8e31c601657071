"""``einsum``: the equation parser (property tests against torch's reading of random equations), the shape rule
over the letters (symbolic dims kept), the messages (E_PARAM with the position, E_SHAPE naming the letter), and its
multiply-adds against FlopCounterMode."""

from __future__ import annotations

import string
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.flop_counter import FlopCounterMode

import hndl
from hndl._dims import format_dim
from hndl.ops._einsum import ELLIPSIS, EquationError, parse_equation


def infer(equation: str, *shapes: Any, dtypes: Any = None) -> tuple[list[Any], str]:
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", tuple(s), dtype=(dtypes[i] if dtypes else "float32")) for i, s in enumerate(shapes)]
    g.output(g.add("einsum", *xs, name="n", equation=equation))
    (t,) = next(n for n in hndl.check(g).nodes if n.name == "n").out_types
    return [format_dim(d) for d in t.shape], t.dtype


@st.composite
def einsum_case(draw: Any) -> tuple[str, list[list[int]]]:
    """A valid equation and operand shapes: letters with sizes, some broadcast as 1, an optional '...'."""
    letters = draw(st.lists(st.sampled_from("abcdeijkBT"), min_size=1, max_size=5, unique=True))
    sizes = {c: draw(st.integers(1, 4)) for c in letters}
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    terms, shapes = [], []
    for _ in range(draw(st.integers(1, 3))):
        term = draw(st.lists(st.sampled_from(letters), min_size=0, max_size=4, unique=True))
        dims = [sizes[c] if draw(st.integers(0, 5)) else 1 for c in term]
        if draw(st.booleans()):
            k = draw(st.integers(0, len(term)))
            tail = batch[draw(st.integers(0, len(batch))) :]
            term = [*term[:k], ELLIPSIS, *term[k:]]
            dims = [*dims[:k], *tail, *dims[k:]]
        terms.append("".join(term))
        shapes.append(dims)
    used = {c for t in terms for c in t if c != "."}
    text = ",".join(terms)
    if draw(st.booleans()):
        out = draw(st.permutations(sorted(used)))
        out = out[: draw(st.integers(0, len(out)))]
        if any(ELLIPSIS in t for t in terms) and draw(st.booleans()):
            out = [ELLIPSIS, *out]
        text += "->" + "".join(out)
    return text, shapes


@settings(max_examples=80, deadline=None)
@given(einsum_case())
def test_einsum_infers_torchs_shape(case: tuple[str, list[list[int]]]) -> None:
    equation, shapes = case
    operands = [torch.randn(s) for s in shapes]
    try:
        expected = torch.einsum(equation, *operands)
    except RuntimeError:
        # torch refuses it (a letter of size 1 in one operand and 2 in another with a third size, ...): so must hndl
        with pytest.raises(hndl.HndlError):
            infer(equation, *shapes)
        return
    out_shape, dtype = infer(equation, *shapes)
    assert out_shape == list(expected.shape)
    assert dtype == "float32"
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", tuple(s)) for i, s in enumerate(shapes)]
    g.output(g.add("einsum", *xs, equation=equation))
    assert torch.equal(hndl.build(g)(*operands), expected)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.ascii_letters[:6] + ".,->  !1", max_size=14))
def test_the_parser_accepts_what_torch_accepts_and_says_where_it_stops(text: str) -> None:
    error: EquationError | None = None
    try:
        parsed = parse_equation(text)
    except EquationError as exc:
        error = exc
    if error is not None:
        assert 0 <= error.position < len(text)
        return
    # torch reads the same text the same way: one operand per term, each term's letters as its dims
    shapes = [[2] * len([e for e in term if e != ELLIPSIS]) for term in parsed.inputs]
    out = None
    try:
        out = torch.einsum(text, *[torch.ones(s) for s in shapes])
    except RuntimeError:
        pass
    if out is None:
        # torch refuses an equation of no letters at all; the parser reads it as 0-d operands
        assert not any(c.isalpha() for c in text), text
        return
    assert out.dim() == len([e for e in parsed.output if e != ELLIPSIS])


def test_implicit_output_is_the_letters_used_once_in_order_after_the_ellipsis() -> None:
    assert parse_equation("ba,ac").output == ("b", "c")
    assert parse_equation("...ij,jk").output == (ELLIPSIS, "i", "k")
    assert parse_equation("Ba,aB").output == ()
    assert parse_equation("b a , a c -> b c").inputs == (("b", "a"), ("a", "c"))


def test_einsum_keeps_symbolic_dims() -> None:
    assert infer("bhqd,bhkd->bhqk", ["B", 4, "T", 16], ["B", 4, "S", 16]) == (["B", 4, "T", "S"], "float32")
    assert infer("...d,de->...e", ["B", "T", 8], [8, 32]) == (["B", "T", 32], "float32")
    assert infer("bij->bji", ["B", "H", "W"]) == (["B", "W", "H"], "float32")


@pytest.mark.parametrize(
    ("equation", "position", "words"),
    [
        ("ij,jk->iq", 8, "'q' in the output is in no operand"),
        ("ij,j1->i", 4, "'1' is not a letter"),
        ("i..j,jk", 1, "'.' outside an ellipsis"),
        ("...i...,i", 4, "a second '...' in one term"),
        ("ij->i->j", 5, "a second '->'"),
        ("ij,jk->ii", 8, "'i' appears twice in the output"),
        ("ij-jk", 2, "'-' outside '->'"),
        ("ij,jk->i,k", 8, "',' after '->'"),
    ],
)
def test_regression_a_bad_equation_is_an_e_param_with_its_position(equation: str, position: int, words: str) -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer(equation, [2, 3], [3, 4])
    assert err.value.code == "E_PARAM"
    message = str(err.value)
    assert f"at position {position}" in message
    assert words in message
    assert " " * position + "^" in message  # the caret under the character


def test_a_letter_whose_sizes_disagree_is_an_e_shape_naming_the_letter() -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer("bhqd,bhkd->bhqk", ["B", 4, "T", 16], ["B", 4, "T", 32])
    assert err.value.code == "E_SHAPE"
    assert "letter 'd' is 16 in 'operands.0' and 32 in 'operands.1'" in str(err.value)


def test_a_repeated_letter_in_one_operand_needs_equal_sizes() -> None:
    assert infer("ii->i", [3, 3]) == ([3], "float32")
    with pytest.raises(hndl.HndlError) as err:
        infer("ii->i", [3, 4])
    assert err.value.code == "E_SHAPE"
    assert "letter 'i' names dims of sizes 3 and 4" in str(err.value)


def test_a_term_that_does_not_fit_the_rank_is_an_e_shape() -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer("ij,jk", [2, 3, 4], [3, 4])
    assert err.value.code == "E_SHAPE"
    assert "its term 'ij' names 2 dims" in str(err.value)


def test_more_terms_than_inputs_is_an_e_param() -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer("ij,jk,kl->il", [2, 3], [3, 4])
    assert err.value.code == "E_PARAM"
    assert "3 operand term(s), the node 2 input(s)" in str(err.value)


def test_operands_of_two_dtypes_are_an_e_dtype() -> None:
    with pytest.raises(hndl.HndlError) as err:
        infer("ij,jk", [2, 3], [3, 4], dtypes=["float32", "float64"])
    assert err.value.code == "E_DTYPE"


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bhqd,bhkd->bhqk", [[2, 3, 5, 4], [2, 3, 6, 4]]),
        ("ij,jk->ik", [[3, 4], [4, 5]]),
        ("i,j->ij", [[3], [4]]),  # no letter summed: a product, no multiply-adds
        ("bij,bjk", [[2, 3, 4], [2, 4, 5]]),
        ("ij->ji", [[3, 4]]),
    ],
)
def test_einsum_multiply_adds_are_what_flop_counter_mode_counts(equation: str, shapes: list[list[int]]) -> None:
    g = hndl.Graph("t")
    xs = [g.input(f"x{i}", tuple(s)) for i, s in enumerate(shapes)]
    g.output(g.add("einsum", *xs, equation=equation))
    model = hndl.build(g)
    counter = FlopCounterMode(display=False)
    with counter:
        model(*[torch.randn(s) for s in shapes])
    assert model.summary().macs * 2 == counter.get_total_flops()
