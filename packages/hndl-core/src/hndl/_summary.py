"""The summary of a model: one row per node, and totals, as data that prints as a table.

:func:`summary` takes a :class:`~hndl.Graph` (built on PyTorch's meta device, which allocates nothing) or a
built :class:`~hndl.torch.GraphModule` (its live layers: a frozen parameter counts as non-trainable). Shapes,
multiply-adds and activation memory come from the checked types (``_costs``), symbolic over the graph inputs'
dims until the caller binds them (``summary(model, B=8)``). Parameters and buffers come from the layers, each
tensor counted once however many names it has (tied weights).
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import _costs
from ._check import CheckedGraph, CheckedNode, check
from ._contracts import Variadic, format_shape
from ._dim_factor import factored_text
from ._dims import Dim, dim_add, free_symbols, substitute
from ._errors import HndlError, Problem
from ._graph import Graph
from .naming import excerpt, printable, suggestion

__all__ = ["Summary", "SummaryRow", "build_on_meta", "summary"]

WIDTH = 100  # the table fits a terminal this wide


@dataclass(frozen=True)
class SummaryRow:
    """One row of a :class:`Summary`: a leaf node, or a subgraph node collapsed to its subtotals.

    Attributes:
        name: the qualified name (``blocks.3.attn``).
        op: the op (``graph`` for a collapsed subgraph node).
        layer: the class of the node's torch module (``Linear``), or for a collapsed subgraph node the subgraph
            and its repeat count (``block x4``); ``""`` when the node has no module.
        inputs: what feeds the node: graph inputs and node names (for a node with several outputs
            ``node.port``).
        output_shapes: each output's shape as text, with the given dims filled in.
        params: parameter elements of the node's module (of all its repetitions for a subgraph node).
        trainable: those of ``params`` that require grad.
        macs: multiply-adds: an ``int`` when every dim is bound, otherwise the exact expression as text, with
            strided output sizes as factors (``9408*B*((H-1)//2+1)*((W-1)//2+1)``); ``None`` when hndl cannot
            know them (op ``module``).
        depth: 1 for a node of the top graph, 2 inside a subgraph node, ...
    """

    name: str
    op: str
    layer: str
    inputs: tuple[str, ...]
    output_shapes: tuple[str, ...]
    params: int
    trainable: int
    macs: int | str | None
    depth: int


@dataclass(frozen=True)
class Summary:
    """A model's summary; ``print(summary)`` shows the table, the attributes hold the same facts as data.

    Attributes:
        name: the graph's name.
        inputs, outputs: name -> shape text of the graph's inputs and outputs (the given dims filled in).
        dims: the dims the caller bound (``{"B": 8}``).
        rows: the table's rows, in execution order.
        trainable_params, non_trainable_params: parameter elements, each tensor once (tied weights once).
        buffer_elements: buffer elements (BatchNorm's running statistics, ...), each tensor once.
        param_bytes, buffer_bytes: their storage size.
        macs: multiply-adds of one forward pass, counted as ``torch.utils.flop_counter.FlopCounterMode`` counts
            FLOPs (matrix products and convolutions; FLOPs = 2 x MACs): an ``int`` when every dim is bound,
            the expression as text otherwise.
        uncounted: nodes whose multiply-adds hndl cannot know (op ``module``); ``macs`` leaves them out.
        activation_bytes: the bytes of every node's outputs for one forward pass (what training keeps for the
            backward pass, at most), ``int`` or expression text like ``macs``.
    """

    name: str
    inputs: Mapping[str, str]
    outputs: Mapping[str, str]
    dims: Mapping[str, int]
    rows: tuple[SummaryRow, ...]
    trainable_params: int
    non_trainable_params: int
    buffer_elements: int
    param_bytes: int
    buffer_bytes: int
    macs: int | str
    uncounted: tuple[str, ...]
    activation_bytes: int | str

    @property
    def total_params(self) -> int:
        return self.trainable_params + self.non_trainable_params

    @property
    def size_mb(self) -> float:
        """Parameters and buffers in megabytes (10**6 bytes, as torchinfo counts)."""
        return (self.param_bytes + self.buffer_bytes) / 1e6

    def totals(self) -> dict[str, Any]:
        """The totals as a plain dict (what the table's last lines say)."""
        return {
            "total_params": self.total_params,
            "trainable_params": self.trainable_params,
            "non_trainable_params": self.non_trainable_params,
            "buffer_elements": self.buffer_elements,
            "size_mb": self.size_mb,
            "macs": self.macs,
            "activation_bytes": self.activation_bytes,
        }

    def lines(self, width: int = WIDTH) -> list[str]:
        """The table as lines of at most ``width`` characters (cells wrap; nothing is cut)."""
        dims = ", ".join(f"{k}={v}" for k, v in self.dims.items())
        head = [
            f"{self.name}" + (f" ({dims})" if dims else ""),
            "inputs:  " + (", ".join(f"{k} {v}" for k, v in self.inputs.items()) or "none"),
            "outputs: " + (", ".join(f"{k} {v}" for k, v in self.outputs.items()) or "none"),
            "",
        ]
        header = ("node", "op (layer)", "input from", "output shape", "params", "MACs")
        cells = [
            (
                "  " * (row.depth - 1) + row.name,
                f"{row.op} ({row.layer})" if row.layer else row.op,
                ", ".join(row.inputs),
                ", ".join(row.output_shapes),
                f"{row.params:,}",
                _amount(row.macs),
            )
            for row in self.rows
        ]
        # MACs may be an expression: it wraps in its column, at its operators (see _wrap_expression).
        table = _table(header, cells, right=(4, 5), expressions=(5,), width=width)
        uncounted = f" (without {', '.join(self.uncounted)})" if self.uncounted else ""
        label = 13  # the totals' values start in this column; a long one wraps under its label
        tail = [
            f"params:      {self.total_params:,} (trainable {self.trainable_params:,}, "
            f"non-trainable {self.non_trainable_params:,})",
            f"buffers:     {self.buffer_elements:,} elements",
            f"size:        {self.size_mb:,.2f} MB of parameters and buffers",
        ]
        tail = [wrapped for line in tail for wrapped in textwrap.wrap(line, width, subsequent_indent=" " * label)]
        # An expression wraps at its operators (a factor like ((H-1)//2+1) stays whole), the words after it at
        # spaces. A symbolic byte count says "bytes": "8096*B B" would read as a symbol.
        bytes_unit = "bytes" if isinstance(self.activation_bytes, str) else "B"
        for name, value, after in (
            ("MACs:", _amount(self.macs, long=True), uncounted),
            (
                "activations:",
                _amount(self.activation_bytes, long=True, unit=bytes_unit),
                "(every node's outputs, one forward)",
            ),
        ):
            lines = _wrap_expression(value, width - label)
            if after and len(lines[-1]) + len(after.rstrip()) + 1 <= width - label:
                lines[-1] += " " + after.strip()
            elif after:
                lines += textwrap.wrap(after.strip(), width - label)
            tail += [(name if i == 0 else "").ljust(label) + line for i, line in enumerate(lines)]
        if not self.dims and (isinstance(self.macs, str) or isinstance(self.activation_bytes, str)):
            tail += textwrap.wrap("(give dims for numbers: summary(model, B=8) or hndl summary FILE --dims B=8)", width)
        return [printable(line) for line in head] + [printable(line) for line in table + tail]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython shows the table
        p.text(str(self))


def summary(source: Any, *, depth: int | None = None, **dims: int) -> Summary:
    """The :class:`Summary` of a :class:`~hndl.Graph` or a built :class:`~hndl.torch.GraphModule`.

    Args:
        source: a graph (checked, then built on the meta device) or a built model (its live layers).
        depth: show subgraph nodes deeper than this collapsed to one row with their subtotals (``1``: one row
            per node of the top graph); ``None`` shows every leaf.
        **dims: sizes of the graph inputs' symbols (``B=8, T=128``); shapes, multiply-adds and activation
            memory of unbound symbols stay expressions.

    Raises:
        HndlError: E_INPUT for a dim the graph does not have or a size that is not a positive int; whatever
            checking or building the graph raises.
    """
    from .importer import imported_source  # an nn.Module with input_size=... is imported first

    source, dims = imported_source(source, dims)
    model = source if hasattr(source, "plan") and hasattr(source, "node_module") else None
    if model is None:
        if not isinstance(source, Graph):
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"summary() takes a hndl.Graph or a built GraphModule, not {type(source).__name__}",
                    hint="load a spec file with hndl.load(path), or build one with hndl.build(graph)",
                )
            )
        model = build_on_meta(source)
    checked: CheckedGraph = model.plan.checked
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool) or depth < 1):
        raise HndlError(Problem("E_INPUT", f"depth must be an int >= 1, not {excerpt(depth)}"))
    env = _bind(checked, dims)
    maker = _RowMaker(model, env, depth)
    rows = tuple(maker.rows(checked, {v: n for n, v in zip(checked.input_names, checked.input_ids)}, 1))
    params = {id(p): p for p in model.parameters()}.values()
    buffers = {id(b): b for b in model.buffers()}.values()
    trainable = sum(p.numel() for p in params if p.requires_grad)
    macs, activations = maker.total_macs, maker.total_bytes
    return Summary(
        name=checked.graph.name,
        inputs={n: _shape(checked.types[v].shape, env) for n, v in zip(checked.input_names, checked.input_ids)},
        outputs={str(ref): _shape(t.shape, env) for ref, t in zip(checked.graph.outputs, checked.output_types)},
        dims=dict(dims),
        rows=rows,
        trainable_params=trainable,
        non_trainable_params=sum(p.numel() for p in params) - trainable,
        buffer_elements=sum(b.numel() for b in buffers),
        param_bytes=sum(p.numel() * p.element_size() for p in params),
        buffer_bytes=sum(b.numel() * b.element_size() for b in buffers),
        macs=_value(macs, env) if macs is not None else "unknown",
        uncounted=tuple(maker.uncounted),
        activation_bytes=_value(activations, env) if activations is not None else "unknown",
    )


_META_HINT = "hndl builds the model on PyTorch's meta device, which allocates no memory; the layer failed there"


def build_on_meta(graph: Graph) -> Any:
    """Build ``graph`` on PyTorch's ``meta`` device: the layers' constructors run and parameters get their
    shapes, but no memory is allocated, so a model with billions of parameters is as quick as a small one and a
    hostile spec cannot make hndl allocate gigabytes. A layer that fails there is reported as failing there
    (there is no retry with a real build).
    """
    import torch

    from .torch import build_module

    checked = check(graph)  # static problems are raised as they are: only the build below runs on the meta device
    try:
        with torch.device("meta"):
            return build_module(graph, checked)
    except HndlError as exc:
        # The graph checked, so these are the layers' own constructors failing; say where they ran.
        problems = [p if p.hint else dataclasses.replace(p, hint=_META_HINT) for p in exc.problems]
        raise HndlError(problems, title=exc.title) from exc
    except Exception as exc:
        raise HndlError(
            Problem(
                "E_PARAM",
                f"the model could not be built on PyTorch's meta device: {type(exc).__name__}: {excerpt(str(exc))}",
                hint="hndl builds on the meta device to count parameters, so that it allocates no memory",
            )
        ) from exc


# --- rows ---------------------------------------------------------------------------------------------------


class _RowMaker:
    """Walks a checked graph, nesting and all, into rows; adds up multiply-adds and output bytes on the way."""

    def __init__(self, model: Any, env: Mapping[str, int], depth: int | None) -> None:
        self.model = model
        self.env = env
        self.depth = depth
        self.total_macs: Dim | None = 0
        self.total_bytes: Dim | None = 0
        self.uncounted: list[str] = []

    def rows(self, cg: CheckedGraph, labels: dict[str, str], level: int) -> Iterator[SummaryRow]:
        """``cg``'s rows; ``labels`` maps each value id to what the table calls its producer, and gets the
        labels of ``cg``'s node outputs added."""
        for node in cg.nodes:
            inputs = tuple(dict.fromkeys(labels.get(v, v) for v in node.inputs))
            if node.body and (self.depth is None or level < self.depth):
                current = [labels.get(v, v) for v in node.inputs]
                for sub in node.body:
                    inner = dict(zip(sub.input_ids, current))
                    yield from self.rows(sub, inner, level + 1)
                    current = [inner.get(v, v) for v in sub.output_ids]
                labels.update(zip(node.outputs, current))
                continue
            labels.update(self._output_labels(node))
            macs, _size = self._costs(node)
            module = self.model.node_module(node.path)
            params = {id(p): p for p in module.parameters()}.values() if module is not None else ()
            yield SummaryRow(
                name=node.qualname,
                op=node.op,
                layer=_layer(node, module),
                inputs=inputs,
                output_shapes=tuple(_shape(t.shape, self.env) for t in node.out_types),
                params=sum(p.numel() for p in params),
                trainable=sum(p.numel() for p in params if p.requires_grad),
                macs=None if macs is None else _value(macs, self.env),
                depth=level,
            )

    def _costs(self, node: CheckedNode) -> tuple[Dim | None, Dim | None]:
        """A node's multiply-adds and output bytes (a subgraph node's: its leaves'), added to the totals."""
        if node.body:
            macs: Dim | None = 0
            size: Dim | None = 0
            for leaf in _leaves(node):
                m, s = self._costs(leaf)
                macs = None if macs is None or m is None else dim_add(macs, m)
                size = None if size is None or s is None else dim_add(size, s)
            return macs, size
        macs = _costs.macs(node)
        size = _costs.output_bytes(node)
        if macs is None:
            self.uncounted.append(node.qualname)
        elif self.total_macs is not None:
            self.total_macs = dim_add(self.total_macs, macs)
        self.total_bytes = None if self.total_bytes is None or size is None else dim_add(self.total_bytes, size)
        return macs, size

    @staticmethod
    def _output_labels(node: CheckedNode) -> dict[str, str]:
        if len(node.outputs) == 1:
            return {node.outputs[0]: node.qualname}
        names = node.opdef.output_names(node.params)
        return {v: f"{node.qualname}.{n}" for v, n in zip(node.outputs, names)}


def _leaves(node: CheckedNode) -> Iterator[CheckedNode]:
    for sub in node.body:
        for inner in sub.nodes:
            if inner.body:
                yield from _leaves(inner)
            else:
                yield inner


def _layer(node: CheckedNode, module: Any) -> str:
    if node.body:
        graph = node.params.get("graph")
        name = graph if isinstance(graph, str) else getattr(graph, "name", "graph")
        return f"{name} x{len(node.body)}" if len(node.body) != 1 else str(name)
    return "" if module is None else type(module).__name__


# --- dims ---------------------------------------------------------------------------------------------------


def _bind(checked: CheckedGraph, dims: Mapping[str, Any]) -> dict[str, int]:
    """The caller's dims, checked against the symbols of the graph's inputs."""
    symbols: set[str] = set()
    for v in checked.input_ids:
        for d in checked.types[v].shape or ():
            if not isinstance(d, Variadic):
                symbols |= free_symbols(d)
    problems = []
    for name, size in dims.items():
        if name not in symbols:
            hint = suggestion(name, symbols)
            problems.append(
                Problem(
                    "E_INPUT",
                    f"the graph's inputs have no dim {name!r}",
                    expected=", ".join(sorted(symbols)) or "no symbolic dims",
                    actual=name,
                    hint=hint or ("its dims: " + ", ".join(sorted(symbols)) if symbols else None),
                )
            )
        elif not isinstance(size, int) or isinstance(size, bool) or size < 1:
            problems.append(Problem("E_INPUT", f"dim {name!r} must be a positive int, not {excerpt(size)}"))
    if problems:
        raise HndlError(problems, title="summary")
    return dict(dims)


_TOO_LONG = "<a number too long to print>"


def _value(d: Dim, env: Mapping[str, int]) -> int | str:
    """``d`` with ``env`` filled in: an int, or while symbols remain its exact expression, with the products
    that strided outputs expand into regrouped (``9408*B*((H-1)//2+1)*((W-1)//2+1)``, see ``_dim_factor``).
    A number too long to print in decimal (a product of literals in a hostile spec can exceed Python's 4,300
    digits) is described instead."""
    value = substitute(d, env)
    if isinstance(value, int):
        return value if value.bit_length() < 14_000 else _TOO_LONG
    return factored_text(value)


def _dim_text(d: Any) -> str:
    try:
        return format_shape([d])[1:-1]
    except ValueError:
        return "<a dim too long to print>"


def _shape(shape: Sequence[Any] | None, env: Mapping[str, int]) -> str:
    if shape is None:
        return "?"
    filled = [str(d) if isinstance(d, Variadic) else _dim_text(substitute(d, env)) for d in shape]
    return "[" + ", ".join(filled) + "]"


_PREFIXES = ((10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def _amount(value: int | str | None, *, long: bool = False, unit: str = "") -> str:
    """A count for the table: ``12.3 M`` (and in the totals the exact number too)."""
    if value is None:
        return "?"
    if isinstance(value, str):
        return value + (f" {unit}" if unit and long else "")
    for scale, prefix in _PREFIXES:
        if value >= scale:
            short = f"{value / scale:.2f} {prefix}{unit}"
            return f"{value:,} {unit} ({short})".replace("  ", " ") if long else short
    return f"{value:,}" + (f" {unit}" if unit else "")


def _table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[int],
    expressions: Sequence[int] = (),
    width: int,
) -> list[str]:
    """Columns sized to their content, then the widest wrappable ones narrowed until the table fits ``width``;
    a narrowed cell wraps onto more lines: text at spaces where it can, an ``expressions`` column at its
    operators. ``right`` columns are right-aligned, and the ones that are not expressions never wrap."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    narrowable = [i for i in range(len(widths)) if i not in right or i in expressions]
    gap = 2
    while sum(widths) + gap * (len(widths) - 1) > width:
        widest = max(narrowable, key=lambda i: widths[i])
        if widths[widest] <= 10:
            break  # nothing sensible left to narrow: the table is wider than asked, but whole
        widths[widest] -= 1

    def wrap(i: int, cell: str, w: int) -> list[str]:
        if i in expressions:
            return _wrap_expression(cell, w)
        if i in right:
            return [cell]
        return textwrap.wrap(cell, w, break_on_hyphens=False) or [""]

    def render(cells: Sequence[str]) -> list[str]:
        wrapped = [wrap(i, cell, w) for i, (cell, w) in enumerate(zip(cells, widths))]
        # A wrapped expression in a right-aligned column: its lines flush left to each other, the block right.
        for i in expressions:
            longest = max(len(line) for line in wrapped[i])
            wrapped[i] = [line.ljust(longest) for line in wrapped[i]]
        out = []
        for k in range(max(len(c) for c in wrapped)):
            parts = []
            for i, (lines, w) in enumerate(zip(wrapped, widths)):
                text = lines[k] if k < len(lines) else ""
                parts.append(text.rjust(w) if i in right else text.ljust(w))
            out.append((" " * gap).join(parts).rstrip())
        return out

    rule = (" " * gap).join("-" * w for w in widths)
    lines = [*render(header), rule]
    for row in rows:
        lines += render(row)
    return [*lines, rule]


def _wrap_expression(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken after a ``+``, ``-`` or ``*`` outside parentheses (so a
    factor like ``((H-1)//2+1)`` stays whole), and only where nothing else fits, inside a piece."""
    pieces: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in "+-*" and i > 0:
            pieces.append(text[start : i + 1])
            start = i + 1
    pieces.append(text[start:])
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
        while len(lines[-1]) > width:
            lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    return lines
