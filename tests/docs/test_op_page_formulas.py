"""Op reference pages show formulas as code: rendered as CommonMark, no ``*`` of a formula becomes emphasis.

Regression: ten pages showed garbled formulas on the site (``*`` read as emphasis: conv2d's output-size rule,
flatten's ``[N, C*H*W]`` as ``[N, CHW]``), and ``sphinx-build -W`` did not notice, since emphasis is valid Markdown.
The pages are rendered with markdown-it (the parser MyST builds on) and every emphasis and inline-code token is
looked at.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
docs = pytest.importorskip("hndl.docs")
markdown_it = pytest.importorskip("markdown_it")

import hndl  # noqa: E402
from hndl.docs._ops import formulas_as_code  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: The pages' own italics, which are prose on purpose.
PROSE_EMPHASIS = {
    "Inferred",
    "This op declares no example.",
    "This op's builder has no docstring.",
    "Builds:",
    "Registered by:",
    "This example does not check:",
}


def rendered(text: str) -> tuple[list[str], list[str]]:
    """(the text inside each emphasis, the text of each inline code span) of Markdown ``text``."""
    emphasis: list[str] = []
    spans: list[str] = []
    for token in markdown_it.MarkdownIt("commonmark").enable("table").parse(text):
        children = token.children or []
        inside: list[str] | None = None
        for child in children:
            if child.type in ("em_open", "strong_open"):
                inside = []
            elif child.type in ("em_close", "strong_close") and inside is not None:
                emphasis.append("".join(inside))
                inside = None
            elif inside is not None:
                inside.append(child.content)
            if child.type == "code_inline":
                spans.append(child.content)
    return emphasis, spans


@pytest.fixture(scope="module")
def op_pages() -> dict[str, str]:
    return {path: text for path, text in docs.generate(ROOT).items() if path.startswith("ops/")}


def test_no_op_page_has_emphasis_other_than_its_prose(op_pages: dict[str, str]) -> None:
    for path, text in op_pages.items():
        emphasis, _ = rendered(text)
        stray = [e for e in emphasis if e not in PROSE_EMPHASIS]
        assert not stray, f"{path}: emphasis inside a formula: {stray}"


def test_every_declared_output_shape_is_one_code_span(op_pages: dict[str, str]) -> None:
    for opdef in hndl.registry:
        _, spans = rendered(op_pages[f"ops/{docs._ops.page_name(opdef.name)}.md"])
        for port in opdef.outputs:
            if port.pattern is not None:
                assert str(port.pattern) in spans, (opdef.name, str(port.pattern))


def test_the_regressions_of_the_issue_read_whole(op_pages: dict[str, str]) -> None:
    _, flatten = rendered(op_pages["ops/flatten.md"])
    assert "[N, C, H, W] -> [N, C*H*W]" in flatten
    _, conv = rendered(op_pages["ops/conv2d.md"])
    assert (
        "[N, out_channels, (H+2*padding_h-dilation_h*(kernel_h-1)-1)//stride_h+1, "
        "(W+2*padding_w-dilation_w*(kernel_w-1)-1)//stride_w+1]"
    ) in conv


@pytest.mark.parametrize(
    ("prose", "markdown"),
    [
        ("dims merge ([N, C, H, W] -> [N, C*H*W])", "dims merge (`[N, C, H, W] -> [N, C*H*W]`)"),
        ("L_out = (L+2*padding-k)//stride+1, torch's", "`L_out = (L+2*padding-k)//stride+1`, torch's"),
        ("e.g. 4*T // 4 = T; a count", "e.g. `4*T // 4 = T`; a count"),
        ("needs num_layers >= 2.", "needs `num_layers >= 2`."),
        ("grows by pad[2i] + pad[2i+1] (negative)", "grows by `pad[2i] + pad[2i+1]` (negative)"),
        ("floor(dim*scale) (2*H for an int)", "`floor(dim*scale)` (`2*H` for an int)"),
        ("T-1 for start 1; a 1-d operand", "`T-1` for start 1; a 1-d operand"),
        ("already ``y = x @ W.T + b`` code", "already ``y = x @ W.T + b`` code"),
        ("a channel-last image, see the note *", "a channel-last image, see the note \\*"),
    ],
)
def test_formulas_in_prose_become_code(prose: str, markdown: str) -> None:
    assert formulas_as_code(prose) == markdown
    emphasis, _ = rendered(markdown)
    assert emphasis == []
