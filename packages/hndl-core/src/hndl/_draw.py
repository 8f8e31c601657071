"""Pictures of a graph: Graphviz DOT and Mermaid text, and SVG or PNG through Graphviz's ``dot`` program.

One box per node (its name, op and key settings, ``conv2d 3x3/2, 64``; its inferred output shape; its
parameter count), rounded boxes for the inputs, slanted ones for the outputs, an arrow per wire (labelled with
the port of a node with several outputs), and each subgraph node as a cluster holding one repetition of its
subgraph (its label says how many, and their parameters), or as one box below ``depth``. :func:`layout` makes
that picture as data once; :func:`dot` and :func:`mermaid` only write it out, so the two formats cannot
disagree. A graph that does not check is still drawn (shapes ``?``, a dangling reference as a box that says
so), which is how the docs show a broken example.

Parameter counts come from the layers: a built model's own, a graph's built on PyTorch's meta device (nothing
allocated). SVG and PNG run Graphviz's ``dot`` program directly (:func:`render`): the ``graphviz`` Python
package is a wrapper around the same program, so requiring it would add a dependency without removing the
one that matters, and the program missing is then one clear message.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._check import check
from ._checked import CheckedGraph, CheckedNode
from ._errors import HndlError, Problem, ProblemList
from ._graph import Graph, split_ref
from ._graph_params import with_sizes
from ._registry import REQUIRED, OpDef, registry
from ._resolve import check_subgraph_uses
from ._spec_dumper import flow_yaml
from ._summary import _bind
from ._summary_text import amount, shape_text
from .naming import printable

__all__ = ["DEFAULT_DPI", "FORMATS", "Picture", "dot", "draw", "layout", "mermaid", "render"]

#: file suffix -> format
FORMATS = {".svg": "svg", ".png": "png", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid"}
#: A PNG's resolution unless asked otherwise: print quality (Graphviz's own default, 96, made a 5-node MLP 270
#: pixels wide).
DEFAULT_DPI = 300
#: How long ``dot`` may take before the drawing is given up (a graph of 100,000 nodes takes minutes to lay out).
DOT_TIMEOUT = 120.0


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
    graph, checked, model = _graph_and_types(with_sizes(source, dims) if isinstance(source, Graph) else source)
    if checked is None:  # drawn although it does not check: its subgraphs must still be walkable
        problems = ProblemList()
        if not check_subgraph_uses(graph, problems):
            problems.raise_if_any(title=f"graph '{graph.name}'")
    env = _bind(checked, dims) if checked is not None else {}
    maker = _Maker(graph, env, depth, model)
    sources = {}
    for name, spec in graph.inputs.items():
        box = maker.box("input", name, _input_shape(checked, name, spec, env))
        maker.picture.items.append(box)
        sources[name] = box.ident
    outputs = maker.walk(graph, checked, sources, maker.picture.items, 1, "")
    for i, ref in enumerate(graph.outputs):
        named = i < len(graph.output_specs) and graph.output_specs[i].name is not None
        label = f"output {graph.output_name(i)}" if named else f"output {i}" if len(graph.outputs) > 1 else "output"
        box = maker.box("output", label)
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
                label = _dot_text(*item.lines)
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
    dpi: int = DEFAULT_DPI,
    **dims: int,
) -> str | bytes:
    """Draw a graph or a built model; write it to ``path`` when given, and return it.

    Args:
        source: a :class:`~hndl.Graph` or a built :class:`~hndl.torch.GraphModule`.
        path: the file to write; its suffix picks the format (``.svg``, ``.png``, ``.dot``/``.gv``, ``.mmd``).
        format: ``"svg"``, ``"png"``, ``"dot"`` or ``"mermaid"``, when there is no path (or to override it).
        depth: draw subgraph nodes deeper than this as one box; ``None`` draws every leaf.
        dpi: a PNG's resolution in dots per inch (300, print quality, unless told); other formats are vector
            or text and ignore it.
        **dims: sizes of the inputs' symbols, filled into the shapes.

    Returns:
        The text (DOT, Mermaid) or the image's bytes (SVG, PNG).

    Raises:
        HndlError: E_INPUT for an unknown format or a dpi that is not a positive int; E_RUNTIME when SVG or PNG
            is asked for and Graphviz's ``dot`` is not installed (the message says how to install it) or fails.
    """
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
    if not isinstance(dpi, int) or isinstance(dpi, bool) or not 1 <= dpi <= 2400:
        raise HndlError(Problem("E_INPUT", f"dpi must be an int from 1 to 2400, not {dpi!r}", hint="e.g. dpi=300"))
    text = mermaid(source, depth=depth, **dims) if fmt == "mermaid" else dot(source, depth=depth, **dims)
    result: str | bytes = text if fmt in ("dot", "mermaid") else render(text, fmt, dpi=dpi)
    if path is not None:
        if isinstance(result, bytes):
            Path(path).write_bytes(result)
        else:
            Path(path).write_text(result, encoding="utf-8")
    return result


_INSTALL = (
    "install Graphviz's dot program with your system's package manager (`apt-get install graphviz`, "
    "`brew install graphviz`, `conda install graphviz`); .dot and .mmd need nothing"
)


def render(dot_text: str, fmt: str, *, dpi: int = DEFAULT_DPI) -> bytes:
    """DOT text rendered by Graphviz's ``dot`` program as ``fmt`` (``"svg"``, ``"png"``; a PNG at ``dpi``).

    Runs ``dot`` directly, with the text on its stdin, for at most :data:`DOT_TIMEOUT` seconds.

    Raises:
        HndlError: E_RUNTIME when ``dot`` is not installed (with how to install it), fails, or takes too long.
    """
    program = shutil.which("dot")
    what = f"drawing {fmt.upper()}"
    if program is None:
        raise HndlError(Problem("E_RUNTIME", f"{what} needs Graphviz's dot program, not found on PATH", hint=_INSTALL))
    command = [program, f"-T{fmt}"] + ([f"-Gdpi={dpi}"] if fmt == "png" else [])
    try:
        done = subprocess.run(command, input=dot_text.encode(), capture_output=True, timeout=DOT_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise HndlError(
            Problem(
                "E_RUNTIME",
                f"{what}: Graphviz's dot took more than {DOT_TIMEOUT:g} s",
                hint="draw fewer boxes with depth=1 (hndl draw --depth 1), or write .dot and lay it out yourself",
            )
        ) from None
    except OSError as exc:
        raise HndlError(
            Problem("E_RUNTIME", f"{what}: Graphviz's dot could not run: {exc.strerror or exc}", hint=_INSTALL)
        ) from None
    if done.returncode != 0 or not done.stdout:
        lines = done.stderr.decode(errors="replace").strip().splitlines()
        raise HndlError(
            Problem(
                "E_RUNTIME",
                f"{what}: Graphviz's dot failed (exit status {done.returncode})" + (f": {lines[0]}" if lines else ""),
            )
        )
    return done.stdout


# --- the walk -----------------------------------------------------------------------------------------------


def _graph_and_types(source: Any) -> tuple[Graph, CheckedGraph | None, Any]:
    """The graph, its checked form (``None`` when it does not check) and a built model to count parameters in
    (``None`` when there is none: a graph that does not check, or whose layers cannot be built)."""
    plan = getattr(source, "plan", None)
    if plan is not None and hasattr(plan, "checked"):
        return plan.checked.graph, plan.checked, source
    if not isinstance(source, Graph):
        raise HndlError(
            Problem("E_INPUT", f"draw takes a hndl.Graph or a built GraphModule, not {type(source).__name__}")
        )
    try:
        checked = check(source)
    except HndlError:
        return source, None, None  # drawn anyway: the picture shows what is wrong
    from .torch._meta import build_on_meta

    try:
        return source, checked, build_on_meta(source)
    except HndlError:
        return source, checked, None  # a layer that cannot be built: drawn without counts


def _input_shape(checked: CheckedGraph | None, name: str, spec: Any, env: Mapping[str, int]) -> str:
    if checked is not None and name in checked.input_names:
        t = checked.types[checked.input_ids[checked.input_names.index(name)]]
        return f"{shape_text(t.shape, env)} {t.dtype}"
    return f"{spec.contract.shape} {spec.contract.dtype}"


class _Maker:
    def __init__(self, root: Graph, env: Mapping[str, int], depth: int | None, model: Any) -> None:
        self.root = root
        self.env = env
        self.depth = depth
        self.model = model
        self.picture = Picture()
        self.count = 0
        self.undefined: dict[str, str] = {}
        self.counted: dict[int, str] = {}  # id of each parameter a box counted -> that node (tied ones count once)

    def params_line(self, node: CheckedNode | None, *, cluster: bool = False) -> list[str]:
        """``["9.41 k params"]`` for a node whose layer has parameters (``"tied parameters"`` for one whose
        parameters another box counted), else ``[]``. A cluster's count (every repetition of its subgraph) marks
        nothing counted: the boxes inside count their own."""
        if node is None or self.model is None:
            return []
        module = self.model.node_module(node.path)
        if module is None:
            return []
        total = 0
        tied: dict[str, None] = {}  # the nodes that counted this one's tied parameters, in order
        for p in {id(p): p for p in module.parameters()}.values():
            if id(p) in self.counted:
                tied[self.counted[id(p)]] = None
                continue
            if not cluster:
                self.counted[id(p)] = node.qualname
            total += p.numel()
        shared = f"tied to {', '.join(tied)}" if tied else ""
        if not total:
            return [f"parameters {shared}"] if tied else []
        return [f"{amount(total)} params" + (f", {shared}" if tied else "")]

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
            repeat = len(cn.body) if cn is not None and cn.body else node.params.get("repeat", 1)
            op_text = f"graph {sub_name}" + (f" x{repeat}" if repeat != 1 else "") if is_graph else node.op
            if is_graph and sub is not None and (self.depth is None or level < self.depth):
                self.count += 1
                counted = self.params_line(cn, cluster=True)
                cluster = Cluster(
                    f"c{self.count}", f"{prefix}{name}: {op_text}" + (f", {counted[0]}" if counted else "")
                )
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
                ", ".join(shape_text(t.shape, self.env) for t in cn.out_types)
                if cn is not None and cn.out_types
                else "?"
            )
            settings = _settings(opdef, cn.params if cn is not None else node.params) if not is_graph else ""
            box = self.box(
                "node",
                f"{prefix}{name}: {op_text}" + (f" {settings}" if settings else ""),
                shapes,
                *self.params_line(cn),
            )
            items.append(box)
            for ref in node.inputs:
                self.wire(sources, ref, box.ident, items)
            sources[name] = box.ident
        return sources


#: The longest line of a label, in characters: a longer one (a name thousands of characters long) keeps its
#: start and end around a visible ``...``. Graphviz refuses strings of more than 16,384 characters, and no
#: picture is helped by a line wider than the page.
MAX_LABEL_LINE = 80


def _label_line(line: str) -> str:
    """One line of a label as drawn: every character that is not printable (NUL, escape codes, line breaks,
    ``\\u2028``) written as its Python escape, so the line stays one line and the file stays valid text (an SVG
    with a control character is not valid XML); then cut to :data:`MAX_LABEL_LINE` around ``...``."""
    text = printable(line)
    if len(text) <= MAX_LABEL_LINE:
        return text
    tail = (MAX_LABEL_LINE - 3) // 3
    return text[: MAX_LABEL_LINE - 3 - tail] + "..." + text[len(text) - tail :]


def _dot_text(*lines: str) -> str:
    """``lines`` as one quoted DOT label: each line made safe by :func:`_label_line`, then DOT's escapes
    (backslash, quote) and ``&`` as ``&amp;``, since Graphviz reads HTML entities in labels (``&lt;`` would
    be drawn as ``<``); the lines joined by DOT's ``\\n``."""
    escaped = (_label_line(line).replace("\\", "\\\\").replace('"', '\\"').replace("&", "&amp;") for line in lines)
    return '"' + "\\n".join(escaped) + '"'


#: Characters written as Mermaid entity codes (``#35;``) in a label: ``#`` first, since it starts the codes;
#: ``&``, ``<`` and ``>``, which the browser would read as HTML; the quote that ends the label; and the backtick,
#: which starts a Markdown string.
_MERMAID_ESCAPES = {"#": "#35;", "&": "#38;", "<": "#lt;", ">": "#gt;", '"': "#quot;", "`": "#96;"}
_MERMAID_TABLE = str.maketrans(_MERMAID_ESCAPES)


# --- a layer's key settings ------------------------------------------------------------------------------------

#: The longest settings text a box shows; the rest is cut with "...".
_SETTINGS_WIDTH = 40


def _settings(opdef: OpDef | None, params: Mapping[str, Any]) -> str:
    """A layer's key settings as a box shows them after its op: ``3x3/2, 64`` for a conv2d (kernel, stride,
    channels), ``2x2/2`` for a pool, ``512`` for a linear, ``50257, 768`` for an embedding; for other ops, the
    required parameters' values and the others that differ from their defaults (``p=0.1``, ``causal``).
    Inferred parameters (``in_features``) are left out: the shapes above say them."""
    if opdef is None:
        return ""
    declared = {p.name: p for p in opdef.params if not p.inferred}
    given = {k: v for k, v in params.items() if k in declared}
    if "kernel_size" in given:
        text = _window(opdef.name, given)
    else:
        parts = [_value(given[k]) for k, p in declared.items() if p.default is REQUIRED and k in given]
        for k, p in declared.items():
            if p.default is REQUIRED or k not in given or given[k] == p.default:
                continue
            value = given[k]
            parts.append(k if value is True else f"no {k}" if value is False else f"{k}={_value(value)}")
        text = ", ".join(parts)
    return text if len(text) <= _SETTINGS_WIDTH else text[: _SETTINGS_WIDTH - 3] + "..."


def _window(op: str, params: Mapping[str, Any]) -> str:
    """``3x3/2, 64``: kernel, stride when not 1 (a pool's default stride is its kernel), channels, and groups or
    dilation when not 1."""
    planar = op.endswith("2d")

    def one(value: Any) -> Any:  # (2, 2) -> 2: a pair of equal sizes is said once
        # Compared by ==, not through a set: a spec that does not check can hold lists here ([[3]]), and it is
        # still drawn.
        if isinstance(value, (list, tuple)) and value and all(v == value[0] for v in value):
            return value[0]
        return value

    kernel, stride = one(params.get("kernel_size")), one(params.get("stride"))
    text = "x".join(str(v) for v in kernel) if isinstance(kernel, (list, tuple)) else str(kernel)
    if planar and not isinstance(kernel, (list, tuple)):
        text = f"{kernel}x{kernel}"
    if stride is not None and stride != 1 and stride != kernel:
        text += "/" + ("x".join(str(v) for v in stride) if isinstance(stride, (list, tuple)) else str(stride))
    parts = [text]
    if "out_channels" in params:
        parts.append(str(params["out_channels"]))
    for key in ("groups", "dilation"):
        if params.get(key) not in (None, 1, (1, 1), [1, 1]):
            parts.append(f"{key} {_value(params[key])}")
    return ", ".join(parts)


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return flow_yaml(_head(value))
    except HndlError:  # not plain data (a Python object given in code)
        return type(value).__name__


def _head(value: Any) -> Any:
    """``value`` with each list and mapping cut to its first :data:`_SETTINGS_WIDTH` items: a box shows only
    that many characters, and each item takes at least one, so the text up to the cut is the same, while a
    40,000-entry shape no longer costs a second of YAML writing to draw."""
    if isinstance(value, (list, tuple)):
        return [_head(v) for v in value[:_SETTINGS_WIDTH]]
    if isinstance(value, Mapping):
        return {k: _head(v) for k, v in list(value.items())[:_SETTINGS_WIDTH]}
    return value


def _mermaid_text(lines: list[str]) -> str:
    """``lines`` as one quoted Mermaid label: each line made safe by :func:`_label_line`, the characters Mermaid
    or the browser would read written as entity codes, the lines joined by ``<br/>``."""
    return '"' + "<br/>".join(_label_line(line).translate(_MERMAID_TABLE) for line in lines) + '"'
