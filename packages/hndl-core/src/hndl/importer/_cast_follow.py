"""Conversions and fills between activations whose dtype the trace shows at one dtype only.

The trace runs in float32, so ``h.to(x.dtype)``, ``h.to(torch.float32)`` and ``h.float()`` all read as a conversion
to float32, which is no conversion at all when ``h`` is float32 already; ``torch.zeros(B, T, dtype=x.dtype)`` reads
as zeros of dtype float32. Under ``.double()`` (or float16 inputs) the module converts to float32 in the second
case and to float64 in the first, and the fill follows ``x``. A row alone cannot tell them apart: this module reads
the same program traced with float64 inputs and parameters (``_trace.retrace_float64``, the twin the folded
constants are told by too), where each such operation's dtype is either the same as in the trace (an explicit
dtype: a ``cast``, kept even where the trace converts nothing) or the activations' (written through a
``type_as`` to the nearest activation before it whose dtype is the same in both traces, or, for a ``*_like`` or
``new_*`` fill of an activation that already has it, no dtype at all). Only values the import does not fold
are this module's job (a folded one is ``_dtype_follow``'s), and the twin is traced only when one exists (a
fill given no dtype, ``torch.zeros(B, 4)``, is at torch's default dtype in both traces and asks for none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import HndlError
from ._site import Alias, Emit, Unsupported
from ._trace import Traced, retrace_float64

__all__ = ["CONVERSIONS", "FILLS", "CastFollow", "twin_dtypes"]

#: Traced conversions: their row makes a ``cast`` to another dtype, or the value itself at its own.
CONVERSIONS = frozenset(["aten.to.dtype", "aten.to.dtype_layout", "aten.to.device", "aten._to_copy.default"])

#: Traced fills whose dtype a row writes: to the dtype of the first input (``*_like``, ``new_*``) where not named.
FILLS_FOLLOWING_INPUT = frozenset(
    [
        "aten.zeros_like.default",
        "aten.ones_like.default",
        "aten.full_like.default",
        "aten.new_zeros.default",
        "aten.new_ones.default",
        "aten.new_full.default",
    ]
)
FILLS = FILLS_FOLLOWING_INPUT | frozenset(
    [
        "aten.zeros.default",
        "aten.ones.default",
        "aten.full.default",
        "aten.arange.default",
        "aten.arange.start",
        "aten.arange.start_step",
    ]
)


def _floating_out(node: Any) -> bool:
    value = node.meta.get("val")
    return getattr(value, "is_floating_point", lambda: False)()


def _may_follow(node: Any) -> bool:
    """Whether ``node`` is a floating conversion or fill whose dtype the twin may show otherwise. A fill given no
    dtype is at its input's dtype (``x.new_zeros(...)``, ``zeros_like(x)``: so is the row's node, which then
    writes none) or at torch's default (``torch.zeros(B, 4)``) in both traces: neither asks for the twin."""
    target = str(node.target)
    if node.op != "call_function" or target not in CONVERSIONS | FILLS or not _floating_out(node):
        return False
    return target in CONVERSIONS or node.kwargs.get("dtype") is not None


def twin_dtypes(traced: Traced, nodes: Sequence[Any], skip: Any, notes: list[str]) -> dict[str, tuple[Any, ...]]:
    """Traced node name -> its dtype in the trace and in the float64 twin, for every node, when the trace has a
    floating conversion or fill ``skip`` (the folded values) does not hold whose dtype may follow the
    activations'; else ``{}``.

    A module that cannot be traced so, or traces to another program, keeps what the trace shows (said in
    ``notes``): its conversions are then written at the dtypes of the trace.
    """
    from ._fold import same_program

    if not any(_may_follow(n) for n in nodes if n not in skip):
        return {}
    try:
        twin = retrace_float64(traced)
    except HndlError:
        twin = None
    twin_nodes = list(twin.program.graph.nodes) if twin is not None else []
    if twin is None or same_program(nodes, twin_nodes):
        notes.append(
            "the module could not be traced again with float64 inputs and parameters, so its conversions between "
            "activations (h.to(x.dtype)) keep the dtypes of the trace"
        )
        return {}
    at = {m: i for i, m in enumerate(twin_nodes)}
    out: dict[str, tuple[Any, ...]] = {}
    for n, m in zip(nodes, twin_nodes, strict=True):
        dtypes = tuple(getattr(v.meta.get("val"), "dtype", None) for v in (n, m))
        out[n.name] = (*dtypes, _constants(n) == _constants(m), _rereads(n, m, nodes, at))
    return out


def _rereads(node: Any, twin: Any, nodes: Sequence[Any], at: Mapping[Any, int]) -> tuple[tuple[str, str], ...]:
    """``(conversion, its input)`` for each conversion ``node`` reads in the trace where the twin reads the
    conversion's input. A conversion to the dtype a tensor has returns the tensor itself, so the trace takes every
    later use of the tensor for a use of the conversion (LLaMA's residual ``hidden_states`` after RMSNorm's
    ``hidden_states.to(torch.float32)``); in the twin the conversion is a real one, and its uses are its own."""
    pairs = []
    ours, theirs = _node_args(node), _node_args(twin)
    if len(ours) != len(theirs):
        return ()
    for a, b in zip(ours, theirs):
        if str(getattr(a, "target", "")) in CONVERSIONS and b in at and nodes[at[b]] is not a:
            pairs.append((a.name, nodes[at[b]].name))
    return tuple(pairs)


def _node_args(node: Any) -> list[Any]:
    import torch

    found: list[Any] = []
    torch.fx.node.map_arg((node.args, node.kwargs), found.append)
    return found


def _constants(node: Any) -> list[Any]:
    """The numbers among the arguments of ``node`` (a fill value, a step), to compare across traces."""
    found: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, (list, tuple)):
            for v in value:
                walk(v)
        elif isinstance(value, (int, float)):
            found.append(value)

    walk((node.args, tuple(node.kwargs.values())))
    return found


class CastFollow:
    """Rewrites the row results of conversions and fills by what the float64 twin shows (the module's docstring).

    Args:
        widths: :func:`twin_dtypes`' table (empty: nothing to rewrite).
        nodes: the traced nodes, in order.
        emitted: whether a traced value is (or will be) a value of the graph, for the activations ``type_as``
            may read.
    """

    def __init__(self, widths: Mapping[str, tuple[Any, ...]], nodes: Sequence[Any], emitted: Any) -> None:
        self.widths = widths
        self.nodes = nodes
        self.at = {n: i for i, n in enumerate(nodes)}
        self.by_name = {n.name: n for n in nodes}
        self.emitted = emitted

    def _dtypes(self, value: Any) -> tuple[Any, ...]:
        entry = self.widths.get(getattr(value, "name", ""), ())
        return tuple(entry[:2])

    def adjust(self, node: Any, result: Any) -> Any:
        """``result`` (the row's) of ``node``, with its dtype made to follow as the twin shows.

        Raises:
            Unsupported: a fill whose value depends on the dtype (``torch.finfo(x.dtype).min``), or a conversion
                to an activation's dtype when no activation before it has that dtype in both traces.
        """
        import torch

        target = str(getattr(node, "target", ""))
        rereads = dict(self.widths[node.name][3]) if node.name in self.widths else {}
        if rereads:
            result = _reread(result, {v: self.by_name[rereads[v.name]] for v in self.nodes if v.name in rereads})
        if not self.widths or target not in CONVERSIONS | FILLS or not isinstance(result, (Emit, Alias)):
            return result
        out = self._dtypes(node)
        if len(out) != 2 or not isinstance(out[0], torch.dtype) or not out[0].is_floating_point:
            return result
        fixed = out[0] == out[1]
        if target in CONVERSIONS:
            x = node.args[0]
            if self._dtypes(x) == out:
                return result  # the value's own dtype in both traces (x.to(x.dtype), x.float() of float32 data)
            if fixed:  # an explicit dtype (x.float(), x.to(torch.float32)): a cast even where the trace has none
                return result if isinstance(result, Emit) else Emit("cast", [x], {"dtype": _name(out[0])})
            return Emit("type_as", [x, self._like(node, out, "converts to")])
        assert isinstance(result, Emit)
        if not self.widths[node.name][2]:
            raise Unsupported(
                "fills with a value that depends on the activations' dtype (torch.finfo(x.dtype).min, say); the "
                "graph holds one value for every dtype",
                waits="a fill value the same in every dtype (-inf, or a number), or an explicit dtype",
            )
        first = result.inputs[0] if result.inputs else None
        follows_input = target in FILLS_FOLLOWING_INPUT and first is not None
        if fixed:
            if follows_input and "dtype" not in result.params:  # new_zeros(h, dtype=torch.float32) of float32 h
                return Emit(result.op, result.inputs, {**result.params, "dtype": _name(out[0])}, result.weights)
            return result
        if follows_input and self._dtypes(first) == out:  # torch.zeros_like(h): h's dtype, read on every call
            params = {k: v for k, v in result.params.items() if k != "dtype"}
            return Emit(result.op, result.inputs, params, result.weights)
        return Emit("type_as", [result, self._like(node, out, "makes a tensor in")])

    def _like(self, node: Any, dtypes: tuple[Any, ...], what: str) -> Any:
        """The nearest traced value before ``node`` that is a value of the graph and has ``dtypes`` in both
        traces: the activation whose dtype ``node`` takes at run time."""
        for value in reversed(self.nodes[: self.at[node]]):
            if self._dtypes(value) == dtypes and self.emitted(value):
                return value
        raise Unsupported(
            f"{what} the activations' dtype (h.to(x.dtype)), and no activation before it has that dtype both in "
            "the trace and with float64 inputs, to take it from at run time",
            waits="an explicit dtype (torch.float32) where the module converts",
        )


def _reread(result: Any, instead: Mapping[Any, Any]) -> Any:
    """``result`` reading ``instead[v]`` wherever it reads a traced value ``v`` of ``instead``."""
    if isinstance(result, Alias):
        return Alias(instead.get(result.value, result.value))
    if isinstance(result, Emit):
        inputs = [_reread(v, instead) if isinstance(v, Emit) else instead.get(v, v) for v in result.inputs]
        return Emit(result.op, inputs, result.params, result.weights)
    return result


def _name(dtype: Any) -> str:
    from ..naming import dtype_name

    return dtype_name(dtype)
