"""hndl draw / hndl.draw: DOT and Mermaid as text, SVG and PNG through Graphviz, subgraphs as clusters."""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import hndl
from hndl.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
has_dot = pytest.mark.skipif(
    shutil.which("dot") is None or not hasattr(__import__("importlib").util.find_spec("graphviz"), "name"),
    reason="Graphviz (the dot program and the graphviz package) is not installed",
)


def test_dot_has_one_box_per_node_and_a_cluster_per_subgraph() -> None:
    graph = hndl.load(EXAMPLES / "transformer_block.yaml")
    text = hndl.draw(graph, format="dot", B=2)
    assert isinstance(text, str)
    assert text.count("subgraph cluster_") == 1
    assert 'label="blocks: graph block x4"' in text
    assert '[label="blocks.attn: attention\\n[2, T, 128]", shape=box];' in text
    assert '[label="norm: layernorm\\n[2, T, 128]", shape=box];' in text
    collapsed = hndl.draw(graph, format="dot", depth=1)
    assert "cluster_" not in collapsed
    assert '[label="blocks: graph block x4\\n[B, T, 128]", shape=box];' in collapsed


def test_mermaid_of_the_mlp() -> None:
    assert hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), format="mermaid") == (
        "flowchart TD\n"
        '    i1(["x<br/>[B, 784] float"])\n'
        '    n2["hidden: linear<br/>[B, 512]"]\n'
        '    n3["act: relu<br/>[B, 512]"]\n'
        '    n4["drop: dropout<br/>[B, 512]"]\n'
        '    n5["out: linear<br/>[B, 10]"]\n'
        '    o6[/"output"/]\n'
        "    i1 --> n2\n"
        "    n2 --> n3\n"
        "    n3 --> n4\n"
        "    n4 --> n5\n"
        "    n5 --> o6\n"
    )


def test_a_graph_that_does_not_check_is_drawn_with_its_mistake() -> None:
    text = hndl.draw(hndl.load(EXAMPLES / "broken.yaml"), format="mermaid")
    assert '{"hiden<br/>not defined"}' in text
    assert '["act: reluu<br/>?"]' in text


@has_dot
def test_cli_draws_a_valid_svg_with_one_box_per_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.svg"
    assert main(["draw", str(EXAMPLES / "transformer_block.yaml"), "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    svg = ET.parse(out).getroot()
    boxes = [g for g in svg.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "node"]
    assert len(boxes) == 1 + 8 + 1 + 1  # input, the block's nodes, norm, output
    png = tmp_path / "t.png"
    assert main(["draw", str(EXAMPLES / "mlp.yaml"), "-o", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")


def test_missing_graphviz_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz now raises ImportError
    with pytest.raises(hndl.HndlError) as info:
        hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), tmp_path / "m.svg")
    assert info.value.code == "E_RUNTIME"
    assert "needs the graphviz Python package" in str(info.value)
    assert "apt-get install graphviz" in str(info.value)


def test_text_formats_need_no_graphviz(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "graphviz", None)
    for name in ("m.dot", "m.mmd"):
        assert main(["draw", str(EXAMPLES / "mlp.yaml"), "-o", str(tmp_path / name)]) == 0
    assert (tmp_path / "m.dot").read_text().startswith("digraph hndl {")


def test_unknown_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["draw", str(EXAMPLES / "mlp.yaml"), "-o", str(tmp_path / "m.jpg")]) == 1
    assert "E_INPUT: cannot draw to '.jpg'" in capsys.readouterr().out
