"""Pictures of hostile graphs (issue 20): every output format escapes what a name, an op, a reference or a port
may hold. A NUL or a 20,000-character name made Graphviz fail (a CalledProcessError traceback from ``hndl draw``),
control characters reached .dot and .mmd files raw and made the SVG invalid XML, and Mermaid passed ``&``,
entities and line breaks through."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from spec_mutator import DRAW_HOSTILE

import hndl
from hndl._draw import MAX_LABEL_LINE, _dot_text, _mermaid_text
from hndl.cli import main

LONG = "n" * 20_000


def graphviz_available() -> bool:
    # hndl runs Graphviz's dot program itself (issue 27): the graphviz Python package is not needed, and asking
    # for it skipped these tests everywhere once it left the test dependencies.
    return shutil.which("dot") is not None


with_graphviz = pytest.mark.skipif(not graphviz_available(), reason="needs Graphviz's dot program")


def harmless(text: str) -> bool:
    """Only printable characters and the line breaks between lines."""
    return all(ch == "\n" or ch.isprintable() for ch in text)


@pytest.fixture(scope="module")
def hostile() -> hndl.Graph:
    return hndl.loads(DRAW_HOSTILE)


def test_regression_dot_text_has_no_control_character(hostile: hndl.Graph) -> None:
    text = hndl.draw(hostile, format="dot")
    assert isinstance(text, str)
    assert harmless(text)
    assert '  n3 [label="b: r\\\\x00e\\\\x1b[2J&amp;amp;<b>\\\\n#quot;`|]\\n?", shape=box];' in text.splitlines()
    assert '  u4 [label="zz\\\\x00&amp;lt;\\\\u2028\\nnot defined", shape=diamond];' in text.splitlines()
    assert '  i1 -> n6 [label="\\\\x00"];' in text.splitlines()


def test_regression_mermaid_escapes_entities_and_line_breaks(hostile: hndl.Graph) -> None:
    text = hndl.draw(hostile, format="mermaid")
    assert isinstance(text, str)
    assert harmless(text)
    lines = text.splitlines()
    assert '    n3["b: r\\x00e\\x1b[2J#38;amp;#lt;b#gt;\\n#35;quot;#96;|]<br/>?"]' in lines
    assert '    u4{"zz\\x00#38;lt;\\u2028<br/>not defined"}' in lines
    assert '    subgraph c5["c: graph g x3\\n#38;"]' in lines


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_regression_a_20000_character_name_is_shortened_with_a_mark(hostile: hndl.Graph, fmt: str) -> None:
    text = hndl.draw(hostile, format=fmt)
    assert isinstance(text, str)
    (line,) = [line for line in text.splitlines() if "nnnn" in line]
    shown = "n" * 52 + "..." + "n" * 19 + ": relu"
    assert shown in line
    assert len(shown) == MAX_LABEL_LINE  # the whole line: "name: op"
    assert len(line) < 200


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_box_ids_stay_unique_when_labels_are_shortened(fmt: str) -> None:
    # Two names that differ only in their middle are drawn alike, as two boxes.
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    a = g.add("relu", x, name="a" * 100 + "x" + "a" * 100)
    b = g.add("relu", a, name="a" * 100 + "y" + "a" * 100)
    g.output(b)
    text = hndl.draw(g, format=fmt)
    assert isinstance(text, str)
    ids = [line.split("[")[0].split("(")[0].strip() for line in text.splitlines() if "aaa" in line]
    assert len(ids) == 2
    assert len(set(ids)) == 2


def test_the_escapes_of_each_format() -> None:
    assert _dot_text('say "hi"', "a\\b", "x&lt;y", "tab\there") == (
        '"say \\"hi\\"\\na\\\\b\\nx&amp;lt;y\\ntab\\\\there"'
    )
    assert _mermaid_text(['say "hi"', "a#b&c<d>`e`", "line\nbreak"]) == (
        '"say #quot;hi#quot;<br/>a#35;b#38;c#lt;d#gt;#96;e#96;<br/>line\\nbreak"'
    )


@with_graphviz
def test_regression_svg_of_a_hostile_graph_is_valid_xml(hostile: hndl.Graph) -> None:
    svg = hndl.draw(hostile, format="svg")
    assert isinstance(svg, bytes)
    root = ET.fromstring(svg)  # raises on a control character
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "zz\\x00&lt;\\u2028" in texts
    assert "b: r\\x00e\\x1b[2J&amp;<b>\\n#quot;`|]" in texts


@with_graphviz
def test_regression_png_of_a_hostile_graph_renders(hostile: hndl.Graph) -> None:
    png = hndl.draw(hostile, format="png")
    assert isinstance(png, bytes)
    assert png.startswith(b"\x89PNG")


@pytest.mark.parametrize("suffix", [".dot", ".mmd", pytest.param(".svg", marks=with_graphviz)])
def test_regression_hndl_draw_of_a_hostile_graph(
    suffix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(DRAW_HOSTILE)
    out = tmp_path / f"out{suffix}"
    assert main(["draw", str(spec), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    text = out.read_text(encoding="utf-8")
    assert harmless(text)
    if suffix == ".svg":
        ET.fromstring(text)


@pytest.mark.parametrize("fmt", ["dot", "mermaid"])
def test_regression_a_nested_list_kernel_size_is_drawn_not_a_type_error(fmt: str) -> None:
    # Found by the fuzzer: a spec that loads but does not check ("kernel_size": [[3]]) is still drawn, and the
    # box's settings text compared the kernel's sizes through a set, which raised TypeError on a list.
    text = (
        '{"hndl": 1, "name": "c", "inputs": {"img": {"shape": ["B", 3, 8, 8]}},'
        ' "nodes": {"conv": {"op": "conv2d", "in": "img", "out_channels": 4, "kernel_size": [[3]]}},'
        ' "outputs": ["conv"]}'
    )
    drawn = hndl.draw(hndl.loads(text), format=fmt)
    assert "conv2d 3, 4" in drawn  # the settings still say the kernel (as drawn for 3) and the channels


def test_regression_a_40000_entry_shape_is_drawn_from_its_first_entries() -> None:
    # Found by CI's fuzz run: drawing the hostile "reshape to rank 40000" case wrote the whole shape as YAML for
    # each format (a second of CPU time, over the case budget on a loaded machine), only to cut it to 40
    # characters. The box shows the same cut text; only the first entries are written.
    shape = list(range(1, 40_001))
    text = (
        '{"hndl": 1, "name": "r", "inputs": {"x": {"shape": ["B", 4]}},'
        f' "nodes": {{"r": {{"op": "reshape", "in": "x", "shape": {shape}}}}}, "outputs": ["r"]}}'
    )
    whole = "[" + ", ".join(str(v) for v in shape) + "]"  # the shape as the box would write all of it
    expected = f"r: reshape {whole[:37]}..."
    assert expected == "r: reshape [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1..."
    for fmt in ("dot", "mermaid"):
        assert expected in hndl.draw(hndl.loads(text), format=fmt)
