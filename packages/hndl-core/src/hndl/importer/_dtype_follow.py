"""Which folded constants take the activations' dtype, and the activation each takes it from.

A constant whose dtype comes from an activation (``arange(n, dtype=h.dtype)``, ``cos.to(x.dtype)``,
``h.new_full(...)``) is a float32 literal in the trace. When a floating value folds that may be one (computed
from a floating dtype argument, a ``new_*`` of an activation or a floating constant: :func:`may_follow`; a buffer
read as it is never is), the module is traced again with float64 floating parameters and inputs (``_trace.retrace_float64``), held to the same operations
(``_fold.same_program``, else ``E_IMPORT``), and ``_fold.followers`` compares each frontier value's dtype and
numbers: such a constant *follows* the activations' dtype. When one can be written as its ``buffer`` node cast to
an activation's dtype, a third trace under ``autocast(bfloat16)`` (``_trace.retrace_autocast``), where activations
differ in dtype, tells which activation: the translator reads it through a ``type_as`` to the first activation
(among what its reader reads, then the values already emitted, nearest first) whose dtype is the constant's in all
three traces. :class:`Followers` carries these findings, by traced node name, to another translation of the same
module (``_compare_modes``), which then traces neither again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .._errors import HndlError, Problem
from ._buffers import program_tensors
from ._fold import META_ONLY, Folding, fold, followers, same_program
from ._table import Emit, Unsupported
from ._trace import Traced, cut, node_location, retrace_autocast, retrace_float64

__all__ = ["Followers", "Following", "find_following", "may_follow"]


@dataclass
class Followers:
    """What one translation found out about the constants whose dtype follows the activations', by traced node
    name, for another translation of the same module (traced in training mode) to reuse without tracing again.

    Attributes:
        reasons: node -> "" (written through ``type_as``) or why it cannot be.
        buffers: node -> its ``buffer`` :class:`Emit`, for those of the frontier.
        dtypes: node -> its dtype in the trace, with float64 activations and under autocast.
        widths: node -> its dtype in the trace and with float64 activations, for the conversions and fills
            between activations (``_cast_follow``).
    """

    reasons: dict[str, str]
    buffers: dict[str, Emit]
    dtypes: dict[str, tuple[Any, ...]]
    widths: dict[str, tuple[Any, ...]] = dataclasses.field(default_factory=dict)


class Following:
    """The folded values of one translation whose dtype follows the activations'.

    Attributes:
        folding: what folds at import (``_fold``).
        reasons: traced node -> ``""`` when, cast to the activation it takes its dtype from (``type_as``), it gives
            what the module computes, else why it cannot.
        dtypes: traced node -> its dtype in the trace, with float64 activations and under autocast.
    """

    def __init__(self, folding: Folding, reasons: dict[Any, str], dtypes: dict[Any, tuple[Any, ...]]) -> None:
        self.folding = folding
        self.reasons = reasons
        self.dtypes = dtypes

    def follows(self, value: Any) -> bool:
        """Whether ``value`` is a traced value whose dtype follows the activations'."""
        import torch

        return isinstance(value, torch.fx.Node) and value in self.reasons

    def alias(self, node: Any, value: Any) -> None:
        """``node`` is ``value`` under another name (an ``Alias``): it follows as ``value`` does."""
        if self.follows(value):
            self.reasons[node] = self.reasons[value]

    def check_reads(self, result: Any) -> Any:
        """``result``, unless it reads a constant whose dtype follows the activations' and that cannot be written
        as its ``buffer`` node cast to an activation's dtype.

        Raises:
            Unsupported: naming the constant's source and the reason.
        """
        import torch

        if not self.reasons or not isinstance(result, Emit):
            return result
        for c in _flat_inputs(result):
            if isinstance(c, torch.fx.Node) and self.reasons.get(c):
                raise Unsupported(
                    f"reads a constant whose dtype follows the activations'{_made(c)}, and {self.reasons[c]}"
                )
        return result

    def source(self, constant: Any, reads: Sequence[Any], emitted: dict[Any, Any], node: str) -> Any:
        """The activation ``constant`` takes its dtype from at run time, where node ``node`` reads it: one whose
        dtype is the constant's in the trace, with float64 activations and under autocast; among ``reads`` (what
        the node reads) first, else the nearest of ``emitted`` (the traced values already in the graph, in the
        order they were added).

        Raises:
            HndlError: ``E_IMPORT`` naming ``node`` when the constant cannot be cast, or no activation fits.
        """
        like = None if self.reasons[constant] else self._like(constant, reads, emitted)
        if like is None:
            why = self.reasons[constant] or (
                "no activation before it has its dtype in the trace, with float64 activations and under autocast, "
                "to take that dtype from at run time"
            )
            raise HndlError(
                Problem(
                    "E_IMPORT",
                    f"reads a constant whose dtype follows the activations'{_made(constant)}, and {why}",
                    node=node,
                )
            )
        return like

    def _like(self, constant: Any, reads: Sequence[Any], emitted: dict[Any, Any]) -> Any:
        import torch

        want = self.dtypes.get(constant)
        for v in [*reads, *reversed(emitted)]:
            if not isinstance(v, torch.fx.Node) or v in self.folding.folded or v in self.reasons:
                continue
            if want and self.dtypes.get(v) == want:
                return v
        return None

    def check_returned(self, leaves: Sequence[Any], op: str) -> None:
        """Raise ``E_IMPORT`` when the module (of class ``op``) returns one of these constants: the graph cannot
        tell which activation's dtype it takes."""
        for v in leaves:
            if self.follows(v):
                raise HndlError(
                    Problem(
                        "E_IMPORT",
                        f"the module returns a constant whose dtype follows the activations'{_made(v)}, and the "
                        "graph cannot tell which activation's",
                        node="<root>",
                        op=op,
                        hint="give it an explicit dtype (dtype=torch.float32) where the module makes it",
                    )
                )

    def findings(self, widths: dict[str, tuple[Any, ...]] | None = None) -> Followers:
        """What this translation found (and ``widths``, ``_cast_follow``'s), for another translation's ``known``."""
        return Followers(
            {n.name: reason for n, reason in self.reasons.items()},
            {n.name: self.folding.frontier[n] for n in self.reasons if n in self.folding.frontier},
            {n.name: dtypes for n, dtypes in self.dtypes.items()},
            dict(widths or {}),
        )


def find_following(
    traced: Traced,
    folding: Folding,
    known: Followers | None,
    notes: list[str],
    op: str,
    numbers: Collection[Any] = (),
) -> Following:
    """The frontier values of ``folding`` whose dtype follows the activations' (``_fold.followers``), from a second
    trace in float64, made only when a floating frontier value may follow (:func:`may_follow`), and a third under
    autocast when one can be cast.

    Args:
        traced: the trace ``folding`` was computed from.
        known: another translation's findings on the same module, used instead of tracing it again (its buffers
            replace those of ``folding``'s frontier, by node name).
        notes: the graph's notes, told when the module cannot be traced under autocast.
        op: the module's class name, for a message.
        numbers: frontier values read only as numbers (a fill's value, ``_region_writes``): no node holds them,
            so their dtype is nobody's to follow.

    Raises:
        HndlError: ``E_IMPORT`` when the float64 trace fails or is another program.
    """
    nodes = list(traced.program.graph.nodes)
    if known is not None:
        return _reuse(nodes, folding, known)
    dtypes: dict[Any, tuple[Any, ...]] = {}
    constants = frozenset(traced.program.graph_signature.inputs_to_lifted_tensor_constants)
    if not may_follow(folding, nodes, constants, frozenset(numbers)):
        return Following(folding, {}, dtypes)
    try:
        twin = retrace_float64(traced)
    except HndlError as exc:
        why = "traced again with float64 inputs and parameters (to tell which constants take the activations' dtype): "
        raise HndlError([dataclasses.replace(p, message=why + p.message) for p in exc.problems]) from exc
    twin_nodes = list(twin.program.graph.nodes)
    differs = same_program(nodes, twin_nodes)
    if differs:
        raise HndlError(
            Problem(
                "E_IMPORT",
                "traced again with float64 inputs and parameters, to tell which constants take the activations' "
                f"dtype, the module is another program ({differs}), so that cannot be told",
                node="<root>",
                op=op,
                hint="give the module's floating constants an explicit dtype (dtype=torch.float32), or make "
                "what it computes independent of its inputs' dtype",
            )
        )
    found = followers(folding, nodes, fold(twin_nodes, program_tensors(twin.program)), twin_nodes)
    traces = [nodes, twin_nodes]
    if any(reason == "" for reason in found.values()):
        # Under autocast activations differ in dtype (a linear's output is bfloat16, its input float32): that
        # trace shows which activation a constant takes its dtype from.
        cast = retrace_autocast(traced)
        other = list(cast.program.graph.nodes) if cast is not None else []
        if cast is not None and not same_program(nodes, other):
            traces.append(other)
        else:
            notes.append(
                "the module could not be traced under autocast, so a constant taking an activation's dtype takes "
                "that of the activation it meets, which autocast may make narrower than the module's"
            )
    for row in zip(*traces):
        dtypes[row[0]] = tuple(getattr(n.meta.get("val"), "dtype", None) for n in row)
    return Following(folding, found, dtypes)


def may_follow(
    folding: Folding, nodes: Sequence[Any], constants: frozenset[str], numbers: frozenset[Any] = frozenset()
) -> bool:
    """Whether a floating frontier value of ``folding`` may have another dtype in the float64 twin, so that only
    that trace can tell (:func:`find_following`).

    In the twin only the inputs and parameters are float64; buffers are the same tensors, and a folded value reads
    neither an input nor a parameter. So its dtype can differ there only where something in what it is computed
    from takes a dtype that may have been an activation's: a floating dtype argument (``arange(n,
    dtype=h.dtype)``, ``cos.to(x.dtype)``, ``.float()``: the trace shows ``torch.float32`` either way), a ``new_*``
    or ``*_like`` of a floating value that does not fold (``h.new_ones(...)``), or a floating constant tensor
    (``torch.tensor(2.0, dtype=x.dtype)`` is a constant of the trace). Without any (ResNet's folded running
    statistics are buffers read as they are), the twin would find the same dtypes, so it is not traced.

    Args:
        nodes: the traced nodes ``folding`` was computed from, in order.
        constants: the names of the program's lifted constant placeholders.
        numbers: frontier values read only as numbers (no node holds them).
    """

    sourced: set[Any] = set()  # folded values whose dtype may come from an activation's
    for n in nodes:
        if n not in folding.folded:
            continue
        if n.op == "placeholder":
            if n.name in constants and _floating(n.meta.get("val")):
                sourced.add(n)
        elif any(a in sourced for a in n.all_input_nodes) or _takes_dtype(n, folding.folded):
            sourced.add(n)
    return any(n in sourced and n not in numbers and _floating(folding.values.get(n)) for n in folding.frontier)


def _takes_dtype(node: Any, folded: set[Any]) -> bool:
    """Whether ``node`` is given a floating dtype, or takes the dtype of a floating value that does not fold."""
    import torch

    leaves, _ = torch.utils._pytree.tree_flatten((node.args, node.kwargs))
    if any(isinstance(a, torch.dtype) and a.is_floating_point for a in leaves):
        return True
    if str(node.target) not in META_ONLY or not node.args or node.kwargs.get("dtype") is not None:
        return False
    first = node.args[0]
    return first not in folded and _floating(getattr(first, "meta", {}).get("val"))


def _floating(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor) and value.is_floating_point()


def _reuse(nodes: Sequence[Any], folding: Folding, known: Followers) -> Following:
    """:func:`find_following` from another translation's findings, matched by traced node name."""
    found = {}
    dtypes = {}
    for n in nodes:
        dtypes[n] = known.dtypes.get(n.name, ())
        if n.name in known.reasons:
            found[n] = known.reasons[n.name]
        if n.name in known.buffers and n in folding.frontier:
            folding.frontier[n] = known.buffers[n.name]
    return Following(folding, found, dtypes)


def _made(node: Any) -> str:
    """`` (made by `code`)``: the source line of a traced value, for a message."""
    _, code = node_location(node)
    return f" (made by `{cut(code, 80)}`)" if code else ""


def _flat_inputs(emit: Emit) -> Iterator[Any]:
    """The traced values ``emit`` reads, also through the nodes of its own it makes first (an ``Emit`` input)."""
    for v in emit.inputs:
        if isinstance(v, Emit):
            yield from _flat_inputs(v)
        else:
            yield v
