"""hndl draw / hndl.draw: DOT and Mermaid as text, SVG and PNG through Graphviz's dot program, subgraphs as
clusters, each box with the layer's key settings and parameter count."""

from __future__ import annotations

import os
import shutil
import struct
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import hndl
from hndl._draw import layout
from hndl.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
has_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")


def test_dot_has_one_box_per_node_and_a_cluster_per_subgraph() -> None:
    graph = hndl.load(EXAMPLES / "transformer_block.yaml")
    text = hndl.draw(graph, format="dot", B=2)
    assert isinstance(text, str)
    assert text.count("subgraph cluster_") == 1
    assert 'label="blocks: graph block x4, 793.09 k params"' in text
    assert '[label="blocks.attn: attention 4, causal\\n[2, T, 128]\\n66.05 k params", shape=box];' in text
    assert '[label="norm: layernorm\\n[2, T, 128]\\n256 params", shape=box];' in text
    collapsed = hndl.draw(graph, format="dot", depth=1)
    assert "cluster_" not in collapsed
    assert '[label="blocks: graph block x4\\n[B, T, 128]\\n793.09 k params", shape=box];' in collapsed


def test_mermaid_of_the_mlp() -> None:
    assert hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), format="mermaid") == (
        "flowchart TD\n"
        '    i1(["x<br/>[B, 784] float"])\n'
        '    n2["hidden: linear 512<br/>[B, 512]<br/>401.92 k params"]\n'
        '    n3["act: relu<br/>[B, 512]"]\n'
        '    n4["drop: dropout p=0.1<br/>[B, 512]"]\n'
        '    n5["out: linear 10<br/>[B, 10]<br/>5.13 k params"]\n'
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


def test_missing_dot_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot on it
    with pytest.raises(hndl.HndlError) as info:
        hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), tmp_path / "m.svg")
    (p,) = info.value.problems
    assert (p.code, p.message) == ("E_RUNTIME", "drawing SVG needs Graphviz's dot program, not found on PATH")
    assert p.hint == (
        "install Graphviz's dot program with your system's package manager (`apt-get install graphviz`, "
        "`brew install graphviz`, `conda install graphviz`); .dot and .mmd need nothing"
    )
    assert not (tmp_path / "m.svg").exists()


def test_text_formats_need_no_graphviz(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for name in ("m.dot", "m.mmd"):
        assert main(["draw", str(EXAMPLES / "mlp.yaml"), "-o", str(tmp_path / name)]) == 0
    assert (tmp_path / "m.dot").read_text().startswith("digraph hndl {")


def test_the_graphviz_python_package_is_not_needed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "graphviz", None)  # import graphviz would raise ImportError
    if shutil.which("dot") is None:
        pytest.skip("Graphviz's dot program is not installed")
    assert hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), format="svg").startswith(b"<?xml")  # type: ignore[union-attr]


def fake_dot(tmp_path: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    program = tmp_path / "dot"
    program.write_text(f"#!/bin/sh\n{script}\n")
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


def test_a_failing_dot_is_e_runtime_with_its_message(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_dot(tmp_path, "echo 'Error: syntax error in line 1' >&2; exit 1", monkeypatch)
    with pytest.raises(hndl.HndlError) as info:
        hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), format="png")
    assert info.value.problems[0].message == (
        "drawing PNG: Graphviz's dot failed (exit status 1): Error: syntax error in line 1"
    )


def test_a_dot_that_runs_too_long_is_stopped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import hndl._draw

    fake_dot(tmp_path, "sleep 30", monkeypatch)
    monkeypatch.setattr(hndl._draw, "DOT_TIMEOUT", 0.5)
    with pytest.raises(hndl.HndlError) as info:
        hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), format="svg")
    (p,) = info.value.problems
    assert p.message == "drawing SVG: Graphviz's dot took more than 0.5 s"
    assert p.hint == "draw fewer boxes with depth=1 (hndl draw --depth 1), or write .dot and lay it out yourself"


def png_size(data: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", data[16:24])
    return width, height


@has_dot
def test_png_is_drawn_at_print_resolution_and_dpi_scales_it(tmp_path: Path) -> None:
    graph = hndl.load(EXAMPLES / "mlp.yaml")
    default = png_size(hndl.draw(graph, format="png"))  # type: ignore[arg-type]
    low = png_size(hndl.draw(graph, format="png", dpi=72))  # type: ignore[arg-type]
    assert default[0] >= 500  # 300 dpi: about 4x Graphviz's 72-dpi size (the PNGs were ~270 px wide)
    assert abs(default[0] / low[0] - 300 / 72) < 0.2
    out = tmp_path / "m.png"
    assert main(["draw", str(EXAMPLES / "mlp.yaml"), "-o", str(out), "--dpi", "150"]) == 0
    assert abs(png_size(out.read_bytes())[0] / low[0] - 150 / 72) < 0.2


def test_a_bad_dpi_is_refused() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.draw(hndl.load(EXAMPLES / "mlp.yaml"), format="png", dpi=0)
    assert info.value.problems[0].message == "dpi must be an int from 1 to 2400, not 0"
    with pytest.raises(SystemExit):
        hndl.cli.parser().parse_args(["draw", "m.yaml", "-o", "m.png", "--dpi", "x"])


@pytest.mark.parametrize(
    ("node", "label"),
    [
        ({"op": "conv2d", "out_channels": 64, "kernel_size": 3, "stride": 2, "padding": 1}, "conv2d 3x3/2, 64"),
        ({"op": "conv2d", "out_channels": 8, "kernel_size": [1, 3]}, "conv2d 1x3, 8"),
        ({"op": "conv2d", "out_channels": 32, "kernel_size": 3, "groups": 32}, "conv2d 3x3, 32, groups 32"),
        ({"op": "maxpool2d", "kernel_size": 2}, "maxpool2d 2x2"),
        ({"op": "maxpool2d", "kernel_size": 3, "stride": 2}, "maxpool2d 3x3/2"),
        ({"op": "linear", "out_features": 512}, "linear 512"),
        ({"op": "linear", "out_features": 10, "bias": False}, "linear 10, no bias"),
        ({"op": "dropout", "p": 0.1}, "dropout p=0.1"),
        ({"op": "relu"}, "relu"),
    ],
)
def test_boxes_show_the_layers_key_settings(node: dict, label: str) -> None:
    g = hndl.Graph("g")
    params = {k: v for k, v in node.items() if k != "op"}
    g.output(g.add(node["op"], g.input("x", ("B", 8, 16, 16)), name="n", **params))
    first = layout(g).items[1]
    assert first.lines[0] == f"n: {label}"  # type: ignore[union-attr]


def test_a_tied_parameter_is_counted_in_the_first_box_and_named_in_the_other() -> None:
    lines = hndl.draw(hndl.load("zoo:gpt2"), format="dot", depth=1).splitlines()
    assert '  n2 [label="wte: embedding 50257, 768\\n[B, T, 768]\\n38.60 M params", shape=box];' in lines
    assert '  n9 [label="lm_head: linear 50257, no bias\\n[B, T, 50257]\\nparameters tied to wte", shape=box];' in lines


def test_a_named_output_is_drawn_with_its_name() -> None:
    g = hndl.Graph("g")
    g.output(g.add("relu", g.input("x", ("B", 4)), name="a"), "logits")
    assert '[/"output logits"/]' in hndl.draw(g, format="mermaid")


def test_unknown_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["draw", str(EXAMPLES / "mlp.yaml"), "-o", str(tmp_path / "m.jpg")]) == 1
    assert "E_INPUT: cannot draw to '.jpg'" in capsys.readouterr().out
