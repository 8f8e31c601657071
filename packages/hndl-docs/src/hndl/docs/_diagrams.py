"""Diagrams of the example spec files (``examples/*.yaml``), as Mermaid flowcharts.

Mermaid rather than Graphviz: the diagrams are text, so ``--check`` compares them byte for byte like every
other page, and they need no ``dot`` program at build time (CI has none); the browser renders them
(sphinxcontrib-mermaid on the site, and GitHub renders the same fences natively).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hndl
from hndl import Graph, split_ref

from ._text import HEADER, code, scrub, table


def _label(*lines: str) -> str:
    text = "<br/>".join(lines)
    return '"' + text.replace('"', "#quot;") + '"'


def _types(checked: Any) -> dict[str, str]:
    types: dict[str, str] = {}
    for name, vid in zip(checked.input_names, checked.input_ids):
        types[name] = str(checked.types[vid])
    for cn in checked.nodes:
        names = cn.opdef.output_names(cn.params)
        shown = [str(t) for t in cn.out_types]
        types[cn.name] = shown[0] if len(shown) == 1 else "; ".join(f"{n}: {t}" for n, t in zip(names, shown))
    return types


def mermaid(graph: Graph, checked: Any = None) -> tuple[str, list[list[str]]]:
    """The graph as a Mermaid flowchart (inputs, nodes with op and inferred output, outputs, edges), and a
    table of its nodes. ``checked`` is its :class:`CheckedGraph`; without one, shapes show as ``?``."""
    types = _types(checked) if checked is not None else {}
    lines = ["flowchart TD"]
    for name, spec in graph.inputs.items():
        declared = f"{spec.contract.shape} {spec.contract.dtype}"
        lines.append(f"    i_{name}([{_label(name, types.get(name, declared))}])")
    rows = []
    for name, node in graph.nodes.items():
        op = node.op
        opdef = hndl.registry.find(op)
        if opdef is not None and opdef.runs_subgraph and isinstance(node.params.get("graph"), str):
            repeat = node.params.get("repeat", 1)
            op = f"graph {node.params['graph']}" + (f" \u00d7{repeat}" if repeat != 1 else "")
        lines.append(f"    n_{name}[{_label(f'{name}: {op}', types.get(name, '?'))}]")
        rows.append([code(name), code(node.op), code(types.get(name, "?"))])
    undefined: list[str] = []

    def source(ref: str) -> tuple[str, str]:
        src, port = split_ref(ref)
        if src in graph.inputs:
            ident = f"i_{src}"
        elif src in graph.nodes:
            ident = f"n_{src}"
        else:  # a dangling reference (the graph does not check): draw it, so the diagram shows the mistake
            ident = f"u_{src}"
            if src not in undefined:
                undefined.append(src)
                lines.append(f"    {ident}{{{_label(src, 'not defined')}}}")
        return ident, (f" -->|{port}| " if port is not None else " --> ")

    for name, node in graph.nodes.items():
        for ref in node.inputs:
            ident, arrow = source(ref)
            lines.append(f"    {ident}{arrow}n_{name}")
    for i, ref in enumerate(graph.outputs):
        ident, arrow = source(ref)
        lines.append(f"    o_{i}[/{_label(f'output {i}')}/]")
        lines.append(f"    {ident}{arrow}o_{i}")
    return "\n".join(lines) + "\n", rows


def _bodies(checked: Any, found: dict[str, Any]) -> dict[str, Any]:
    """Subgraph name -> the checked body of its first use (first repetition), searched depth first."""
    for cn in checked.nodes:
        if cn.body:
            found.setdefault(cn.body[0].graph.name, cn.body[0])
            _bodies(cn.body[0], found)
    return found


def examples_page(root: Path, roots: Sequence[Path] = ()) -> str:
    out = [HEADER, "# Example graphs\n\n"]
    out.append(
        "Each spec file in the repository's `examples/` folder, drawn from its checked graph: inputs (rounded), "
        "nodes with their op and the output type hndl inferred, and outputs. The diagrams are Mermaid, generated "
        "as text by `python -m hndl.docs` and rendered by your browser; Mermaid was chosen over Graphviz so that "
        "building the docs needs no `dot` program and `--check` can compare diagrams like any other page.\n\n"
    )
    files = sorted((root / "examples").glob("*.yaml")) if (root / "examples").is_dir() else []
    if not files:
        out.append("*There are no example spec files (`examples/*.yaml`) yet.*\n")
        return "".join(out)
    for path in files:
        rel = path.relative_to(root).as_posix()
        out.append(f"## `{rel}`\n\n")
        try:
            graph = hndl.load(path)
        except hndl.HndlError as exc:
            out.append("This file does not load:\n\n```text\n" + scrub(str(exc), [root, *roots]) + "\n```\n\n")
            continue
        try:
            checked = hndl.check(graph)
        except hndl.HndlError as exc:
            checked = None
            out.append("This graph does not check (it is here to show the error output):\n\n```text\n")
            out.append(scrub(str(exc), [root, *roots]) + "\n```\n\n")
        out.append(_graph_section(graph, checked))
        bodies = _bodies(checked, {}) if checked is not None else {}
        for sub_name in sorted(graph.graphs):
            out.append(f"### Subgraph `{sub_name}`\n\n")
            if sub_name in bodies:
                out.append("Shapes as inferred for its first use.\n\n")
            out.append(_graph_section(graph.graphs[sub_name], bodies.get(sub_name)))
        out.append(f"```{{literalinclude}} ../../{rel}\n:language: yaml\n:caption: {rel}\n```\n\n")
    return "".join(out).rstrip("\n") + "\n"


def _graph_section(graph: Graph, checked: Any = None) -> str:
    chart, rows = mermaid(graph, checked)
    out: list[Any] = ["```mermaid\n", chart, "```\n\n"]
    if rows:
        out.append(table(["node", "op", "output"], rows))
        out.append("\n")
    return "".join(out)
