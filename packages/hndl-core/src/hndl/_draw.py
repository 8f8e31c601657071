"""Pictures of a graph: Graphviz DOT and Mermaid text, and SVG or PNG through Graphviz.

One box per node (its name, op and inferred output shape), rounded boxes for the inputs, slanted ones for the
outputs, an arrow per wire (labelled with the port of a node with several outputs), and each subgraph node as
a cluster holding one repetition of its subgraph (its label says how many), or as one box below ``depth``.
:func:`layout` makes that picture as data once; :func:`dot` and :func:`mermaid` only write it out, so the two
formats cannot disagree. A graph that does not check is still drawn (shapes ``?``, a dangling reference as a
box that says so), which is how the docs show a broken example.

No torch here; SVG and PNG need the ``graphviz`` Python package and Graphviz's ``dot`` program.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._check import CheckedGraph, CheckedNode, check
from ._errors import HndlError, Problem
from ._graph import Graph, split_ref
from ._registry import registry
from ._summary import _bind, _shape

__all__ = ["FORMATS", "Picture", "dot", "draw", "layout", "mermaid"]

#: file suffix -> format
FORMATS = {".svg": "svg", ".png": "png", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid"}


@dataclass
class Box:
    ident: str
    lines: list[str]
    kind: str  # "input", "node", "output", "undefined"


@dataclass
class Cluster:
    ident: str
    label: str
    items: list[Box | Cluster] = field(default_factory=list)


@dataclass
class Picture:
    """A graph's picture as data: nested boxes and clusters, and edges ``(from, to, label)`` between boxes."""

    items: list[Box | Cluster] = field(default_factory=list)
    edges: list[tuple[str, str, str]] = field(default_factory=list)


def layout(source: Any, *, depth: int | None = None, **dims: int) -> Picture:
    """The picture of a :class:`~hndl.Graph` or a built model (see the module docstring)."""
    graph, checked = _graph_and_types(source)
    env = _bind(checked, dims) if checked is not None else {}
    maker = _Maker(graph, env, depth)
    sources = {}
    for name, spec in graph.inputs.items():
        box = maker.box("input", name, _input_shape(checked, name, spec, env))
        maker.picture.items.append(box)
        sources[name] = box.ident
    outputs = maker.walk(graph, checked, sources, maker.picture.items, 1, "")
    for i, ref in enumerate(graph.outputs):
        box = maker.box("output", f"output {i}" if len(graph.outputs) > 1 else "output")
        maker.picture.items.append(box)
        maker.wire(outputs, ref, box.ident, maker.picture.items)
    return maker.picture


def dot(source: Any, *, depth: int | None = None, **dims: int) -> str:
    """The picture as Graphviz DOT text."""
    picture = layout(source, depth=depth, **dims)
    shapes = {"input": "box, style=rounded", "node": "box", "output": "parallelogram", "undefined": "diamond"}
    out = [
        "digraph hndl {",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11];',
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9];',
    ]

    def emit(items: list[Box | Cluster], indent: str) -> None:
        for item in items:
            if isinstance(item, Cluster):
                out.append(f"{indent}subgraph cluster_{item.ident} {{")
                out.append(f"{indent}  label={_dot_text(item.label)}; style=rounded;")
                emit(item.items, indent + "  ")
                out.append(f"{indent}}}")
            else:
                label = _dot_text("\n".join(item.lines))
                out.append(f"{indent}{item.ident} [label={label}, shape={shapes[item.kind]}];")

    emit(picture.items, "  ")
    for a, b, label in picture.edges:
        out.append(f"  {a} -> {b}" + (f" [label={_dot_text(label)}]" if label else "") + ";")
    out.append("}")
    return "\n".join(out) + "\n"


def mermaid(source: Any, *, depth: int | None = None, **dims: int) -> str:
    """The picture as a Mermaid flowchart."""
    picture = layout(source, depth=depth, **dims)
    brackets = {"input": ("([", "])"), "node": ("[", "]"), "output": ("[/", "/]"), "undefined": ("{", "}")}
    out = ["flowchart TD"]

    def emit(items: list[Box | Cluster], indent: str) -> None:
        for item in items:
            if isinstance(item, Cluster):
                out.append(f"{indent}subgraph {item.ident}[{_mermaid_text([item.label])}]")
                emit(item.items, indent + "  ")
                out.append(f"{indent}end")
            else:
                left, right = brackets[item.kind]
                out.append(f"{indent}{item.ident}{left}{_mermaid_text(item.lines)}{right}")

    emit(picture.items, "    ")
    for a, b, label in picture.edges:
        arrow = f" -->|{_mermaid_text([label])}| " if label else " --> "
        out.append(f"    {a}{arrow}{b}")
    return "\n".join(out) + "\n"


def draw(
    source: Any,
    path: str | os.PathLike[str] | None = None,
    *,
    format: str | None = None,
    depth: int | None = None,
    **dims: int,
) -> str | bytes:
    """Draw a graph or a built model; write it to ``path`` when given, and return it.

    Args:
        source: a :class:`~hndl.Graph` or a built :class:`~hndl.torch.GraphModule`.
        path: the file to write; its suffix picks the format (``.svg``, ``.png``, ``.dot``/``.gv``, ``.mmd``).
        format: ``"svg"``, ``"png"``, ``"dot"`` or ``"mermaid"``, when there is no path (or to override it).
        depth: draw subgraph nodes deeper than this as one box; ``None`` draws every leaf.
        **dims: sizes of the inputs' symbols, filled into the shapes.

    Returns:
        The text (DOT, Mermaid) or the image's bytes (SVG, PNG).

    Raises:
        HndlError: E_INPUT for an unknown format; E_RUNTIME when SVG or PNG is asked for and Graphviz is not
            installed (the message says how to install it).
    """
    from .importer import imported_source  # an nn.Module with input_size=... is imported first

    source, dims = imported_source(source, dims)
    fmt = format or (FORMATS.get(Path(path).suffix.lower()) if path is not None else "dot")
    if fmt not in set(FORMATS.values()):
        suffix = Path(path).suffix if path is not None else format
        raise HndlError(
            Problem(
                "E_INPUT",
                f"cannot draw to {suffix!r}",
                expected="a file ending in .svg, .png, .dot, .gv or .mmd",
                actual=str(path if path is not None else format),
            )
        )
    text = mermaid(source, depth=depth, **dims) if fmt == "mermaid" else dot(source, depth=depth, **dims)
    result: str | bytes = text if fmt in ("dot", "mermaid") else render(text, fmt)
    if path is not None:
        if isinstance(result, bytes):
            Path(path).write_bytes(result)
        else:
            Path(path).write_text(result, encoding="utf-8")
    return result


_INSTALL = (
    "install Graphviz: `pip install graphviz` for the Python package, and its `dot` program from your system's "
    "package manager (`apt-get install graphviz`, `brew install graphviz`, `conda install graphviz`); "
    ".dot and .mmd need neither"
)


def render(dot_text: str, fmt: str) -> bytes:
    """DOT text rendered by Graphviz's ``dot`` as ``fmt`` (``"svg"``, ``"png"``)."""
    try:
        import graphviz
    except ImportError:
        raise HndlError(
            Problem("E_RUNTIME", f"drawing {fmt.upper()} needs the graphviz Python package", hint=_INSTALL)
        ) from None
    try:
        return bytes(graphviz.Source(dot_text).pipe(format=fmt))
    except graphviz.ExecutableNotFound:
        raise HndlError(
            Problem("E_RUNTIME", f"drawing {fmt.upper()} needs Graphviz's `dot` program, not found", hint=_INSTALL)
        ) from None


# --- the walk -----------------------------------------------------------------------------------------------


def _graph_and_types(source: Any) -> tuple[Graph, CheckedGraph | None]:
    plan = getattr(source, "plan", None)
    if plan is not None and hasattr(plan, "checked"):
        return plan.checked.graph, plan.checked
    if not isinstance(source, Graph):
        raise HndlError(
            Problem("E_INPUT", f"draw takes a hndl.Graph or a built GraphModule, not {type(source).__name__}")
        )
    try:
        return source, check(source)
    except HndlError:
        return source, None  # drawn anyway: the picture shows what is wrong


def _input_shape(checked: CheckedGraph | None, name: str, spec: Any, env: Mapping[str, int]) -> str:
    if checked is not None and name in checked.input_names:
        t = checked.types[checked.input_ids[checked.input_names.index(name)]]
        return f"{_shape(t.shape, env)} {t.dtype}"
    return f"{spec.contract.shape} {spec.contract.dtype}"


class _Maker:
    def __init__(self, root: Graph, env: Mapping[str, int], depth: int | None) -> None:
        self.root = root
        self.env = env
        self.depth = depth
        self.picture = Picture()
        self.count = 0
        self.undefined: dict[str, str] = {}

    def box(self, kind: str, *lines: str) -> Box:
        self.count += 1
        return Box(f"{kind[0]}{self.count}", list(lines), kind)

    def undefined_box(self, name: str, items: list[Box | Cluster]) -> str:
        """The box of a name nothing defines (drawn once), so the picture shows the dangling reference."""
        if name not in self.undefined:
            box = self.box("undefined", name, "not defined")
            self.undefined[name] = box.ident
            items.append(box)
        return self.undefined[name]

    def wire(self, sources: Mapping[str, str], ref: str, target: str, items: list[Box | Cluster]) -> None:
        name, port = split_ref(ref)
        ident = sources.get(ref) or sources.get(name) or self.undefined_box(name, items)
        label = port if port is not None and ref not in sources else ""
        self.picture.edges.append((ident, target, label))

    def walk(
        self,
        graph: Graph,
        checked: CheckedGraph | None,
        sources: dict[str, str],
        items: list[Box | Cluster],
        level: int,
        prefix: str,
    ) -> dict[str, str]:
        """Draw ``graph``'s nodes into ``items``; ``sources`` maps each name a ref may use to the box it comes
        from (inputs on entry; nodes are added). Returns ``sources``."""
        by_name: dict[str, CheckedNode] = {cn.name: cn for cn in checked.nodes} if checked is not None else {}
        for name, node in graph.nodes.items():
            cn = by_name.get(name)
            opdef = registry.find(node.op)
            sub_name = node.params.get("graph")
            sub = self.root.graphs.get(sub_name) if isinstance(sub_name, str) else None
            is_graph = opdef is not None and opdef.runs_subgraph and sub is not None
            repeat = node.params.get("repeat", 1)
            op_text = f"graph {sub_name}" + (f" x{repeat}" if repeat != 1 else "") if is_graph else node.op
            if is_graph and sub is not None and (self.depth is None or level < self.depth):
                self.count += 1
                cluster = Cluster(f"c{self.count}", f"{prefix}{name}: {op_text}")
                items.append(cluster)
                inner: dict[str, str] = {}
                inner_checked = cn.body[0] if cn is not None and cn.body else None
                # The subgraph's inputs are wires from the node's own inputs: edges go straight to the consumers.
                for input_name, ref in zip(sub.inputs, node.inputs):
                    src, _ = split_ref(ref)
                    inner[input_name] = sources.get(ref) or sources.get(src) or self.undefined_box(src, items)
                self.walk(sub, inner_checked, inner, cluster.items, level + 1, f"{prefix}{name}.")
                outs = [inner.get(split_ref(r)[0], "") for r in sub.outputs]
                sources[name] = outs[0] if len(outs) == 1 else ""
                for i, ident in enumerate(outs):
                    sources[f"{name}.{i}"] = ident
                continue
            shapes = (
                ", ".join(_shape(t.shape, self.env) for t in cn.out_types) if cn is not None and cn.out_types else "?"
            )
            box = self.box("node", f"{prefix}{name}: {op_text}", shapes)
            items.append(box)
            for ref in node.inputs:
                self.wire(sources, ref, box.ident, items)
            sources[name] = box.ident
        return sources


def _dot_text(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _mermaid_text(lines: list[str]) -> str:
    text = "<br/>".join(line.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;") for line in lines)
    return f'"{text}"'
