"""Graph -> modules: one torch module per node, sized by inference, in a ``ModuleDict`` keyed ``n_<name>``, or at
the node's ``module_path`` (``model.embed_tokens``; SPEC 6.7) with plain containers on the way.

A ``graph`` node becomes a ``ModuleList`` with one :class:`._blocks.Block` (a ``ModuleDict`` with a ``forward``) per
repetition, so a 12-layer block reads
``nodes.n_blocks.11.n_attn...`` in the ``state_dict``, the way a hand-written ``ModuleList`` would; a graph used
without ``repeat`` becomes its ``Block`` (``nodes.n_stem.n_conv...``).

Tied parameters (a node's ``tie``) are made one ``Parameter`` after every layer is built, exactly as a
hand-written model ties them (``lm_head.weight = wte.weight``): both names are in ``state_dict`` and in
``named_parameters(remove_duplicate=False)``, ``parameters()`` yields it once, and ``copy.deepcopy`` keeps the tie.
"""

from __future__ import annotations

import gc
import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn

from .._check import check
from .._checked import CheckedGraph, CheckedNode
from .._contracts import FLOAT_DTYPES
from .._errors import HndlError, ProblemList
from .._graph import Graph
from .._module_paths import NODES
from .._plan import Plan, lower
from .._registry import InferError
from ..naming import dtype_name, suggestion
from ._blocks import Block
from ._containers import Container, place

if TYPE_CHECKING:
    from ._module import GraphModule


def build_module(graph: Graph, checked: CheckedGraph | None = None) -> GraphModule:
    """Check ``graph`` (unless ``checked`` is given) and build its :class:`GraphModule`."""
    from ._module import GraphModule

    with collection_paused():
        if checked is None:
            checked = check(graph)
        problems = ProblemList()
        causes: list[BaseException] = []
        nodes = build_nodes(checked, problems, causes)
        plan = lower(checked)
        if not problems:
            tie_parameters(plan, nodes, problems)
        if problems:
            # The message has the first line of each failure; the first failure itself stays chained, traceback
            # and all, for whoever needs more than that line.
            raise HndlError(problems.problems, title=f"graph '{graph.name}'") from (causes[0] if causes else None)
        return GraphModule(plan, nodes)


# Builds in progress in this process, and whether the collector was on when the first of them began.
_pause_lock = threading.Lock()
_pauses = 0
_was_enabled = False


@contextmanager
def collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the duration of a build.

    Why: a build allocates many long-lived containers (torch's ``Module.__init__`` alone makes a dozen dicts
    per layer), and each full collection rescans every one built so far, so with the collector on the time
    per node grows with the graph (measured when the pause came in: 73 us at 1,000 nodes, 154 us at 10,000; ~2x). No setting that is
    not process-wide avoids that: the collector's thresholds, ``gc.freeze`` and ``gc.disable`` are all global.

    Why it is safe: only *cyclic* collection pauses; reference counting frees everything else at once, in
    every thread, as usual. Cycles any thread makes meanwhile are collected by the first collection after the
    pause, which lasts as long as the build (about half a second for 10,000 nodes). The collector is restored
    in ``finally``, also when the build raises. Concurrent builds share one pause: it starts with the first and
    ends with the last, which restores the collector as it was when the first began (left off if it was off).
    A thread that turns the collector off while another thread builds has it turned back on when that build
    ends; tests/core/test_build.py pins all of this.
    """
    global _pauses, _was_enabled
    with _pause_lock:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
                gc.enable()


def build_nodes(
    cg: CheckedGraph,
    problems: ProblemList,
    causes: list[BaseException] | None = None,
    *,
    kind: type = Container,
    base: tuple[str, ...] = (),
) -> nn.Module:
    """The modules of ``cg``'s nodes, each registered at its path below ``base`` (the path of the module made
    here); a node whose builder fails adds a problem, and its exception to ``causes``.

    The root level (``kind``: a :class:`._containers.Container`) holds the GraphModule's children: ``nodes``, a
    ``ModuleDict`` of the nodes without a ``module_path``, first, then the names the ``module_path`` of the others
    begin with. Each subgraph use is a :class:`._blocks.Block`; names on the way to a ``module_path`` are
    containers (:func:`._containers.place`)."""
    modules = kind()
    if not base:
        modules.add_module(NODES, nn.ModuleDict())
    depth = len(base)
    for node in cg.nodes:
        where = node.path[depth:]
        if node.body:
            if node.indexed:
                blocks = [
                    build_nodes(sub, problems, causes, kind=Block, base=(*node.path, str(r)))
                    for r, sub in enumerate(node.body)
                ]
                place(modules, where, nn.ModuleList(blocks))
            else:
                place(modules, where, build_nodes(node.body[0], problems, causes, kind=Block, base=node.path))
            continue
        module = _build_leaf(node, problems, causes)
        if module is not None:
            place(modules, where, module)
    return modules


def first_line(exc: BaseException, limit: int = 200) -> str:
    """``Type: first line of the message``, cut to about ``limit`` characters: torch's errors often carry a C++
    stack trace after their first line, which belongs in the chained exception, not in hndl's message."""
    try:
        text = str(exc).strip()
    except Exception:  # a message that cannot be formatted (an integer too long to print)
        text = ""
    line = text.splitlines()[0] if text else ""
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _build_leaf(node: CheckedNode, problems: ProblemList, causes: list[BaseException] | None) -> nn.Module | None:
    try:
        module = node.opdef.build(node.params, node.in_types)
    except InferError as exc:
        problems.append_problem(
            node.problem(exc.code if exc.code != "E_SHAPE" else "E_PARAM", exc.message, hint=exc.hint)
        )
        return None
    except Exception as exc:  # a builder (often torch's own constructor) rejected the parameters
        problems.append_problem(node.problem("E_PARAM", f"building the layer failed: {first_line(exc)}"))
        if causes is not None:
            causes.append(exc)
        return None
    if not isinstance(module, nn.Module):
        problems.append_problem(
            node.problem(
                "E_PARAM",
                f"the op's builder returned {type(module).__name__}, not a torch.nn.Module",
            )
        )
        return None
    _follow_input_dtype(node, module)
    return module


def tie_parameters(plan: Plan, nodes: nn.Module, problems: ProblemList) -> None:
    """Make each tied parameter the very ``Parameter`` of the node it names (both built by now).

    Reports an unknown target (E_REF), a parameter the node's own layer does not have (E_PARAM), two shapes
    that differ (E_SHAPE, naming both nodes; the layouts must agree, torch ties no transposes) and two dtypes
    that differ (E_DTYPE: a layer fed float64 is built in float64, one fed float32 in float32).
    """
    if not any(step.node.ties for step in plan.steps):
        return  # nothing tied (most graphs): no need for the table of every layer below
    layers = {step.node.qualname: (step.node, _module_at(nodes, step.node.path)) for step in plan.steps}
    for step in plan.steps:
        node = step.node
        for own, target in node.ties.items():
            owner = _layer_of(target, layers)
            if owner is None:
                problems.append_problem(
                    node.problem(
                        "E_REF",
                        f"tie {own!r}: {target!r} names no layer of the graph",
                        hint="tie to 'node.parameter' of a node with a layer (not a graph node)",
                    )
                )
                continue
            target_node, target_path = owner
            source = _parameter(layers[target_node][1], target_path)
            if source is None:
                problems.append_problem(
                    node.problem(
                        "E_REF",
                        f"tie {own!r}: {_describe(layers[target_node][0])} has no parameter {target_path!r}",
                        hint=suggestion(target_path, _parameter_names(layers[target_node][1])),
                    )
                )
                continue
            layer = layers[node.qualname][1]
            current = _parameter(layer, own)
            if current is None:
                problems.append_problem(
                    node.problem(
                        "E_PARAM",
                        f"tie: the layer has no parameter {own!r} to share",
                        expected=", ".join(_parameter_names(layer)) or "no parameters",
                        actual=own,
                        hint=suggestion(own, _parameter_names(layer)),
                    )
                )
                continue
            if tuple(current.shape) != tuple(source.shape):
                swapped = tuple(current.shape) == tuple(reversed(source.shape))
                problems.append_problem(
                    node.problem(
                        "E_SHAPE",
                        f"tie {own!r} = {target!r}: {node.op} '{node.qualname}' has {own} of shape "
                        f"{list(current.shape)}, {_describe(layers[target_node][0])} has {target_path} of "
                        f"shape {list(source.shape)}",
                        expected=list(current.shape),
                        actual=list(source.shape),
                        hint="the shapes are each other's transpose: a tie shares one tensor as it is, so the layouts "
                        "must agree"
                        if swapped
                        else "size this node so that its parameter has the tied parameter's shape",
                    )
                )
                continue
            if current.dtype != source.dtype:
                # Each layer follows its input's declared dtype (_follow_input_dtype): one tensor cannot be both,
                # and the first call would fail inside the layer.
                problems.append_problem(
                    node.problem(
                        "E_DTYPE",
                        f"tie {own!r} = {target!r}: {node.op} '{node.qualname}' has {own} in "
                        f"{dtype_name(current.dtype)}, {_describe(layers[target_node][0])} has {target_path} in "
                        f"{dtype_name(source.dtype)}",
                        expected=dtype_name(current.dtype),
                        actual=dtype_name(source.dtype),
                        hint="declare the same float dtype for the inputs of both nodes",
                    )
                )
                continue
            holder_path, _, name = own.rpartition(".")
            holder = layer.get_submodule(holder_path) if holder_path else layer
            setattr(holder, name, source)


def _describe(node: CheckedNode) -> str:
    return f"{node.op} '{node.qualname}'"


def _module_at(nodes: nn.Module, path: tuple[str, ...]) -> nn.Module:
    module: nn.Module = nodes
    for key in path:
        module = module._modules[key]  # type: ignore[assignment]
    return module


def _layer_of(target: str, layers: dict[str, tuple[CheckedNode, nn.Module]]) -> tuple[str, str] | None:
    """``(qualified node, parameter path)`` for a qualified parameter name: the longest node name that prefixes it."""
    head, _, tail = target.rpartition(".")
    while head:
        if head in layers:
            return head, tail
        head, _, rest = head.rpartition(".")
        tail = f"{rest}.{tail}"
    return None


def _parameter(layer: nn.Module, name: str) -> nn.Parameter | None:
    holder_path, _, leaf = name.rpartition(".")
    try:
        holder = layer.get_submodule(holder_path) if holder_path else layer
    except AttributeError:
        return None
    value = holder._parameters.get(leaf)
    return value if isinstance(value, nn.Parameter) else None


def _parameter_names(layer: nn.Module) -> list[str]:
    return [name for name, _ in layer.named_parameters(remove_duplicate=False)]


def _follow_input_dtype(node: CheckedNode, module: nn.Module) -> None:
    """A layer whose floating inputs are declared with one concrete float dtype (``float64``) gets its floating
    parameters and buffers in that dtype: torch builds layers in its default dtype (``float32``), and a
    ``float64`` input would otherwise fail at every call (``mat1 and mat2 must have the same dtype``). Inputs
    declared ``float`` (the default) leave the layer as torch built it."""
    declared = {t.dtype for t in node.in_types if t.dtype in FLOAT_DTYPES}
    if len(declared) != 1:
        return
    dtype = getattr(torch, declared.pop())
    tensors = itertools.chain(module.parameters(), module.buffers())
    if any(t.is_floating_point() and t.dtype != dtype for t in tensors):
        module.to(dtype)


__all__ = ["build_module", "build_nodes", "collection_paused", "tie_parameters"]
