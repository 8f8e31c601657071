"""The summary of a model: one row per node, and totals, as data that prints as a table.

:func:`summary` takes a built :class:`~hndl.torch.GraphModule` (its live layers: a frozen parameter counts as
non-trainable); :func:`hndl.summary` builds a :class:`~hndl.Graph` on PyTorch's meta device first. Shapes,
multiply-adds and activation memory come from the checked types (``_costs``), symbolic over the graph inputs'
dims until the caller binds them (``summary(model, B=8)``). Parameters and buffers come from the layers, each
tensor counted once however many names it has (tied weights).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from . import _costs
from ._checked import CheckedGraph, CheckedNode, repetition_inputs
from ._contracts import Variadic, format_shape
from ._dims import Dim, dim_add, dim_mul, free_symbols
from ._errors import HndlError, Problem
from ._graph_params import size_parameters
from ._hints import shape_fix
from ._summary_text import amount, shape_text, value_at, wrap_expression
from ._summary_text import table as text_table
from ._training_memory import TrainingMemory, training_memory
from .naming import excerpt, printable, suggestion

__all__ = ["Summary", "SummaryRow", "summary"]

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
        tied: the node's parameters that an earlier row already counted (tied weights), each as
            ``"weight = wte.weight"``; ``params`` and ``trainable`` leave them out, so the rows add up to the
            totals.
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
    tied: tuple[str, ...] = ()


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
        unbound: the inputs' symbols the caller did not bind (the counts stay expressions in them), sorted.
        training: with ``train=True``, the memory of one training step (:class:`~hndl.TrainingMemory`):
            parameters, gradients, optimizer state, activations kept for backward with and without the
            model's current checkpointing; ``None`` otherwise.
        cache_bytes: for a model with the key/value cache interface (inputs ``cache_k`` and ``cache_v``, what
            ``hndl.zoo.get(name, kv_cache=True)`` builds), the bytes of the two caches in the model's floating
            dtype: ``summary(model, B=8, M=256)`` is what ``hndl.generate`` allocates for 8 rows of 256 tokens
            (prompt and new); ``int``, or expression text while ``B`` or ``M`` is unbound. For a model with the
            growing cache interface (inputs ``past_k`` and ``past_v``, ``kv_cache="grow"``), the bytes of the
            cache it returns, ``present_k`` and ``present_v`` at ``S+T`` slots: ``summary(model, B=8, S=255,
            T=1)`` is the cache after the last step of 128 + 128 tokens. ``None`` otherwise.
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
    unbound: tuple[str, ...] = ()
    training: TrainingMemory | None = None
    cache_bytes: int | str | None = None
    #: What ``cache_bytes`` counts: the inputs ``cache_k``, ``cache_v`` or the outputs ``present_k``, ``present_v``.
    cache_names: tuple[str, ...] = ()

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
            **({"training": self.training.as_dict()} if self.training is not None else {}),
            **({"cache_bytes": self.cache_bytes} if self.cache_bytes is not None else {}),
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
                f"{row.params:,}" + (" (tied)" if row.tied else ""),
                amount(row.macs),
            )
            for row in self.rows
        ]
        # MACs may be an expression: it wraps in its column, at its operators (see wrap_expression).
        table = text_table(header, cells, right=(4, 5), expressions=(5,), width=width)
        uncounted = f" (without {', '.join(self.uncounted)})" if self.uncounted else ""
        label = 13  # the totals' values start in this column; a long one wraps under its label
        ties = [f"{row.name}.{tie}" for row in self.rows for tie in row.tied]
        tail = [
            f"params:      {self.total_params:,} (trainable {self.trainable_params:,}, "
            f"non-trainable {self.non_trainable_params:,})",
            *(["tied:        " + "; ".join(ties) + " (counted once, in the first row that has it)"] if ties else []),
            f"buffers:     {self.buffer_elements:,} elements",
            f"size:        {self.size_mb:,.2f} MB of parameters and buffers",
        ]
        tail = [wrapped for line in tail for wrapped in textwrap.wrap(line, width, subsequent_indent=" " * label)]
        # An expression wraps at its operators (a factor like ((H-1)//2+1) stays whole), the words after it at
        # spaces. A symbolic byte count says "bytes": "8096*B B" would read as a symbol.
        bytes_unit = "bytes" if isinstance(self.activation_bytes, str) else "B"
        for name, value, after in (
            ("MACs:", amount(self.macs, long=True), uncounted),
            (
                "activations:",
                amount(self.activation_bytes, long=True, unit=bytes_unit),
                "(every node's outputs, one forward)",
            ),
        ):
            lines = wrap_expression(value, width - label)
            if after and len(lines[-1]) + len(after.rstrip()) + 1 <= width - label:
                lines[-1] += " " + after.strip()
            elif after:
                lines += textwrap.wrap(after.strip(), width - label)
            tail += [(name if i == 0 else "").ljust(label) + line for i, line in enumerate(lines)]
        if self.cache_bytes is not None:
            unit = "bytes" if isinstance(self.cache_bytes, str) else "B"
            names = ", ".join(self.cache_names or _CACHE_INPUTS)
            tail.append("kv cache:".ljust(label) + amount(self.cache_bytes, long=True, unit=unit) + f" ({names})")
        if self.unbound and (isinstance(self.macs, str) or isinstance(self.activation_bytes, str)):
            given = [f"{k}={v}" for k, v in self.dims.items()]
            wanted = [*given, *(f"{name}=..." for name in self.unbound)]
            names = " and ".join(
                [", ".join(self.unbound[:-1]), self.unbound[-1]] if len(self.unbound) > 1 else self.unbound
            )
            tail += textwrap.wrap(
                f"({names} {'is' if len(self.unbound) == 1 else 'are'} not bound: give "
                f"{'its size' if len(self.unbound) == 1 else 'their sizes'} for numbers, summary(model, "
                f"{', '.join(wanted)}) or hndl summary FILE --dims {','.join(wanted)}; or the inputs' sizes, "
                "input_size=(...) or --input-size)",
                width,
            )
        if self.training is not None:
            tail += [
                wrapped
                for line in self.training.lines()
                for wrapped in textwrap.wrap(line, width, subsequent_indent=" " * 16)
            ]
        return [printable(line) for line in head] + [printable(line) for line in table + tail]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython shows the table
        p.text(str(self))


def summary(
    source: Any,
    *,
    depth: int | None = None,
    input_size: Any = None,
    train: bool = False,
    optimizer: str | None = None,
    **dims: int,
) -> Summary:
    """The :class:`Summary` of a built :class:`~hndl.torch.GraphModule`; :func:`hndl.summary` builds a
    :class:`~hndl.Graph` on the meta device first (this module reads a built model and imports no torch, so that
    ``GraphModule.summary`` can call it without an import cycle).

    Args:
        source: a built model (its live layers).
        depth: show subgraph nodes deeper than this collapsed to one row with their subtotals (``1``: one row
            per node of the top graph); ``None`` shows every leaf.
        input_size: the inputs' sizes, as torchinfo takes them: ``(8, 3, 224, 224)`` for one input, a list of
            such tuples for several (in the graph's input order); the symbols of the inputs' contracts are bound
            from them (``B=8, H=224, W=224``).
        train: also count the memory of one training step (:attr:`Summary.training`).
        optimizer: whose state to count with ``train``: ``"sgd"``, ``"sgd-momentum"``, ``"adam"`` or
            ``"adamw"`` (the default); giving one implies ``train``.
        **dims: sizes of the graph inputs' symbols (``B=8, T=128``); shapes, multiply-adds and activation
            memory of unbound symbols stay expressions. A size parameter of the graph (SPEC 8.5.4) may be
            given too, at the value the model was built with.

    Raises:
        HndlError: E_INPUT for a dim the graph does not have, a size that is not a positive int, a size
            parameter at another value than the model's, or an
            ``input_size`` that does not fit the inputs' contracts (with the edit that would make it fit), or an
            optimizer hndl does not know.
    """
    model = source if hasattr(source, "plan") and hasattr(source, "node_module") else None
    if model is None:
        raise HndlError(
            Problem(
                "E_INPUT",
                f"summary() takes a hndl.Graph or a built GraphModule, not {type(source).__name__}",
                hint="load a spec file with hndl.load(path), or build one with hndl.build(graph)",
            )
        )
    checked: CheckedGraph = model.plan.checked
    if depth is not None and (not isinstance(depth, int) or isinstance(depth, bool) or depth < 1):
        raise HndlError(Problem("E_INPUT", f"depth must be an int >= 1, not {excerpt(depth)}"))
    if input_size is not None:
        dims = {**_dims_from_sizes(checked, input_size, dims), **dims}
    env = _bind(checked, dims)
    maker = _RowMaker(model, env, depth)
    rows = tuple(maker.rows(checked, {v: n for n, v in zip(checked.input_names, checked.input_ids)}, 1))
    params = {id(p): p for p in model.parameters()}.values()
    buffers = {id(b): b for b in model.buffers()}.values()
    trainable = sum(p.numel() for p in params if p.requires_grad)
    macs, activations = maker.total_macs, maker.total_bytes
    graph = checked.graph
    unbound = tuple(sorted(_input_symbols(checked) - dims.keys()))
    training = None
    if train or optimizer is not None:
        training = training_memory(model, env, "adamw" if optimizer is None else optimizer, bool(unbound))
    return Summary(
        name=graph.name,
        inputs={n: shape_text(checked.types[v].shape, env) for n, v in zip(checked.input_names, checked.input_ids)},
        outputs={graph.output_name(i): shape_text(t.shape, env) for i, t in enumerate(checked.output_types)},
        dims=dict(dims),
        rows=rows,
        trainable_params=trainable,
        non_trainable_params=sum(p.numel() for p in params) - trainable,
        buffer_elements=sum(b.numel() for b in buffers),
        param_bytes=sum(p.numel() * p.element_size() for p in params),
        buffer_bytes=sum(b.numel() * b.element_size() for b in buffers),
        macs=value_at(macs, env) if macs is not None else "unknown",
        uncounted=tuple(maker.uncounted),
        activation_bytes=value_at(activations, env) if activations is not None else "unknown",
        unbound=unbound,
        training=training,
        cache_bytes=_cache_bytes(model, checked, env, params),
        cache_names=_PRESENT_OUTPUTS if _grows(checked) else _CACHE_INPUTS,
    )


#: The inputs that hold a key/value cache in the cache interface (hndl.generation).
_CACHE_INPUTS = ("cache_k", "cache_v")
#: The inputs of the growing cache interface, and the outputs that return it grown.
_PAST_INPUTS = ("past_k", "past_v")
_PRESENT_OUTPUTS = ("present_k", "present_v")


def _grows(checked: CheckedGraph) -> bool:
    """Whether the graph has the growing cache interface's inputs (``past_k``, ``past_v``)."""
    return all(name in checked.input_names for name in _PAST_INPUTS)


def _cache_bytes(model: Any, checked: CheckedGraph, env: Mapping[str, Any], params: Any) -> int | str | None:
    """The bytes of the ``cache_k`` and ``cache_v`` inputs ``[layers, B, kv_heads, M, head_dim]``, in the dtype
    of the model's floating parameters (what ``hndl.generate`` makes the cache in); ``None`` for a graph without
    both. A symbol the spec leaves for the head count or width (zoo:llama's ``Dh``: its ``head_dim`` may be
    null) is bound from the model's cached attention layers, which know it."""
    shapes = {n: checked.types[v].shape for n, v in zip(checked.input_names, checked.input_ids)}
    found = [shapes.get(name) for name in _CACHE_INPUTS]
    if _grows(checked):
        # A growing cache: what the model returns, past and new (the outputs named present_k and present_v).
        outputs = {checked.graph.output_name(i): v for i, v in enumerate(checked.output_ids)}
        found = [checked.types[outputs[name]].shape if name in outputs else None for name in _PRESENT_OUTPUTS]
    cache_shapes = [shape for shape in found if shape is not None]
    if len(cache_shapes) != len(_CACHE_INPUTS):
        return None
    size = next((p.element_size() for p in params if p.is_floating_point()), 4)
    layer = next(
        (
            m
            for m in model.modules()
            if (getattr(m, "cache", False) is True or getattr(m, "past", False) is True) and hasattr(m, "head_dim")
        ),
        None,
    )
    env = dict(env)
    for shape in cache_shapes:
        if layer is not None and len(shape) == 5:
            for axis, value in ((2, layer.kv_heads), (4, layer.head_dim)):
                names = free_symbols(shape[axis])
                if len(names) == 1 and str(shape[axis]) in names:  # a bare symbol, not an expression
                    env.setdefault(names.pop(), value)
    total: Dim = 0
    for shape in cache_shapes:
        count = _costs.numel(shape)
        if count is None:
            return None
        total = dim_add(total, count)
    return value_at(dim_mul(total, size), env)


def _dims_from_sizes(checked: CheckedGraph, input_size: Any, dims: Mapping[str, Any]) -> dict[str, int]:
    """The symbols the inputs' contracts bind when the inputs have these sizes (torchinfo's ``input_size``):
    each size matched against its input's contract as a call's tensor would be; a size that does not fit is
    E_INPUT with the edit that would make it fit. A variadic entry (``*batch``) binds nothing a summary shows."""
    sizes: list[Any] = list(input_size) if isinstance(input_size, (list, tuple)) else [input_size]
    several = bool(sizes) and all(isinstance(item, (list, tuple)) for item in sizes)
    per_input: list[tuple[Any, ...]] = [tuple(item) for item in sizes] if several else [tuple(sizes)]
    names = checked.input_names
    if len(per_input) != len(names) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for size in per_input for d in size
    ):
        form = ", ".join(f"{n} {c.shape}" for n, c in zip(names, checked.contracts))
        raise HndlError(
            Problem(
                "E_INPUT",
                f"input_size must give {len(names)} size{'s' if len(names) != 1 else ''} of ints, one per input "
                f"({form}), not {excerpt(input_size)}",
                hint="input_size=(8, 3, 224, 224) for one input, [(8, 128), (8, 128)] for two",
            )
        )
    env: dict[str, Any] = {k: v for k, v in dims.items() if isinstance(v, int)}
    for name, contract, size in zip(names, checked.contracts, per_input):
        before = dict(env)
        reason = contract.shape.match(size, env, strict=True)
        if reason:
            fix = shape_fix(contract.shape, size, before)
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"input_size {format_shape(size)} does not fit: {reason}",
                    node=name,
                    op="input",
                    expected=str(contract.shape),
                    actual=format_shape(size),
                    bindings=before or None,
                    hint=None
                    if fix is None
                    else f"give it as {tuple(fix.result)}" + (f" ({fix.why})" if fix.why else ""),
                )
            )
    return {k: v for k, v in env.items() if isinstance(v, int)}


def _input_symbols(checked: CheckedGraph) -> set[str]:
    """The symbols of the graph inputs' shapes (what ``dims`` may bind)."""
    symbols: set[str] = set()
    for v in checked.input_ids:
        for d in checked.types[v].shape or ():
            if not isinstance(d, Variadic):
                symbols |= free_symbols(d)
    return symbols


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
        self.counted: dict[int, str] = {}  # id of each parameter a row counted -> its qualified name there

    def rows(self, cg: CheckedGraph, labels: dict[str, str], level: int) -> Iterator[SummaryRow]:
        """``cg``'s rows; ``labels`` maps each value id to what the table calls its producer, and gets the
        labels of ``cg``'s node outputs added."""
        for node in cg.nodes:
            inputs = tuple(dict.fromkeys(labels.get(v, v) for v in node.inputs))
            if node.body and (self.depth is None or level < self.depth):
                outer = [labels.get(v, v) for v in node.inputs]
                previous: list[str] | None = None
                for sub in node.body:
                    inner = dict(zip(sub.input_ids, repetition_inputs(node, outer, previous)))
                    yield from self.rows(sub, inner, level + 1)
                    previous = [inner.get(v, v) for v in sub.output_ids]
                labels.update(zip(node.outputs, previous or []))
                continue
            labels.update(self._output_labels(node))
            macs, _size = self._costs(node)
            module = self.model.node_module(node.path)
            params, tied = self._own_parameters(node.qualname, module)
            yield SummaryRow(
                name=node.qualname,
                op=node.op,
                layer=_layer(node, module),
                inputs=inputs,
                output_shapes=tuple(shape_text(t.shape, self.env) for t in node.out_types),
                params=sum(p.numel() for p in params),
                trainable=sum(p.numel() for p in params if p.requires_grad),
                macs=None if macs is None else value_at(macs, self.env),
                depth=level,
                tied=tied,
            )

    def _own_parameters(self, row: str, module: Any) -> tuple[list[Any], tuple[str, ...]]:
        """The parameters ``row`` counts (each tensor once, in the first row that has it), and the ones an
        earlier row counted, as ``"weight = wte.weight"``."""
        if module is None:
            return [], ()
        own: list[Any] = []
        tied: list[str] = []
        for local, p in module.named_parameters(remove_duplicate=False):
            first = self.counted.get(id(p))
            if first is None:
                self.counted[id(p)] = f"{row}.{local}"
                own.append(p)
            elif not first.startswith(f"{row}."):  # the same tensor twice within one layer is one parameter
                tied.append(f"{local} = {first}")
        return own, tuple(tied)

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
    symbols = _input_symbols(checked)
    sizes = size_parameters(checked.graph)
    problems = []
    for name, size in dims.items():
        known = symbols | sizes.keys()
        if name not in known:
            hint = suggestion(name, known)
            problems.append(
                Problem(
                    "E_INPUT",
                    f"the graph's inputs have no dim {name!r}",
                    expected=", ".join(sorted(known)) or "no symbolic dims",
                    actual=name,
                    hint=hint or ("its dims: " + ", ".join(sorted(known)) if known else None),
                )
            )
        elif not isinstance(size, int) or isinstance(size, bool) or size < 1:
            problems.append(Problem("E_INPUT", f"dim {name!r} must be a positive int, not {excerpt(size)}"))
        elif name not in symbols and size != sizes[name]:
            problems.append(_fixed_size(checked.graph.name, name, size, sizes[name]))
    if problems:
        raise HndlError(problems, title="summary")
    return dict(dims)


def _fixed_size(graph: str, name: str, size: Any, built: int) -> Problem:
    """E_INPUT: ``name`` is a size parameter of a model built at another size (SPEC 8.5.4)."""
    return Problem(
        "E_INPUT",
        f"dim {name!r} is a parameter of graph {graph!r}, and this model was built with {name}={built}",
        expected=f"{name}={built}",
        actual=f"{name}={excerpt(size)}",
        hint=f"summarise the graph instead (hndl.summary(graph, {name}=...) builds it at that size), or build "
        f"the model from a graph with params[{name!r}] set",
    )
