"""What checking gives: :class:`CheckedGraph` (inputs with their contracts, nodes in execution order, the
outputs' declared contracts, warnings) and :class:`CheckedNode`, the data the builder, the plan, the summary and
the meaning checks read. :func:`hndl._check.check` makes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ._contracts import Contract, TensorType
from ._errors import Problem
from ._graph import Graph
from ._registry import OpDef, Params
from .ops._common import Requirement

__all__ = ["CheckedGraph", "CheckedNode", "DeclaredOutput", "repetition_inputs"]

T = TypeVar("T")


@dataclass
class CheckedNode:
    """A node after checking. ``path`` is its layer's key path from the GraphModule: ``("nodes", "n_x")``, or its
    ``module_path`` below its graph's module (``("model", "layers", "0", "mlp", "gate_proj")``)."""

    name: str
    qualname: str
    path: tuple[str, ...]
    opdef: OpDef
    params: Params
    inputs: list[str]  # value ids
    outputs: list[str]  # value ids
    in_types: list[TensorType]
    out_types: list[TensorType]
    location: str | None
    body: list[CheckedGraph] = field(default_factory=list)  # op 'graph': one checked subgraph per repetition
    #: op 'graph': whether the repetitions are a level of names (``blocks.0.attn``); a subgraph used without
    #: ``repeat`` runs once and its nodes are named ``block.attn``.
    indexed: bool = True
    #: Tied parameters: this node's parameter (dotted within its layer) -> the qualified name of the parameter
    #: it shares (``"wte.weight"``: node ``wte``'s parameter ``weight``). The builder makes them one Parameter.
    ties: dict[str, str] = field(default_factory=dict)
    # Bounds its shape arithmetic puts on symbolic dims (H >= 7), checked against the inputs on each validating call.
    requires: list[Requirement] = field(default_factory=list)
    #: op 'graph': for each input of the subgraph, whether every repetition reads it from the node's inputs
    #: (``shared``) rather than from the previous repetition's outputs; empty: none is.
    shared: tuple[bool, ...] = ()

    @property
    def op(self) -> str:
        return self.opdef.name

    def problem(self, code: str, message: str, **fields: Any) -> Problem:
        """A problem about this node, named and located the standard way (for build and run-time checks)."""
        return Problem(code, message, node=self.qualname, op=self.op, location=self.location, **fields)

    def __repr__(self) -> str:
        # Short on purpose: the dataclass repr printed the OpDef and every subgraph repetition in full.
        ins = ", ".join(str(t) for t in self.in_types) or "nothing"
        outs = ", ".join(str(t) for t in self.out_types) or "nothing"
        return f"<CheckedNode {self.op} '{self.qualname}': {ins} -> {outs}>"


@dataclass(frozen=True)
class DeclaredOutput:
    """An output's declared contract, as the run-time check reads it.

    Attributes:
        label: the output's name, or the reference it returns when it has none.
        expected: the declared shape with its symbols replaced by what the checker matched them to (dims over the
            graph inputs' symbols, so the call's bindings evaluate it; ``None`` when no shape is declared) and
            the declared dtype rule (``"any"`` when none is).
        proven: whether static inference proves the contract for every binding of the symbols; the run-time
            check then has nothing to add.
        node: the node whose shape the output is (through nodes that keep a shape), for messages.
        location: where the output was declared, for messages.
    """

    label: str
    expected: TensorType
    proven: bool
    node: CheckedNode | None
    location: str | None = None


@dataclass
class CheckedGraph:
    """A graph after checking: inputs with their contracts and static types, nodes in execution order."""

    graph: Graph
    input_names: list[str]
    input_ids: list[str]  # value ids of the inputs (same as names at the top level)
    contracts: list[Contract]
    nodes: list[CheckedNode]
    output_ids: list[str]
    types: dict[str, TensorType]  # value id -> type
    #: Per output, its declared contract (``None`` for an output that declares none).
    declared_outputs: list[DeclaredOutput | None] = field(default_factory=list)
    #: What the graph does that may not be what it means (a declared decoder with non-causal self-attention),
    #: as problems with a ``W_`` code (:mod:`hndl._meaning`); each is also emitted as a :class:`hndl.HndlWarning`.
    warnings: list[Problem] = field(default_factory=list)

    @property
    def output_types(self) -> list[TensorType]:
        return [self.types[v] for v in self.output_ids]

    def __repr__(self) -> str:
        """One line, whatever the graph's size: ``print(hndl.check(g))`` says what was checked, not every node
        (the dataclass repr of a ResNet-50 was 24.6 KB); the nodes are in :attr:`nodes`, the table in
        :func:`hndl.summary`."""
        ins = ", ".join(f"{n} {self.types[v]}" for n, v in zip(self.input_names, self.input_ids))
        outs = ", ".join(
            f"{self.graph.output_name(i)} {t}" if i < len(self.graph.outputs) else str(t)
            for i, t in enumerate(self.output_types)
        )
        leaves = _count_leaves(self)
        return (
            f"<CheckedGraph '{self.graph.name}': {ins or 'no inputs'} -> {outs or 'no outputs'}; "
            f"{leaves} node{'s' if leaves != 1 else ''} checked>"
        )


def _count_leaves(graph: CheckedGraph) -> int:
    return sum(sum(_count_leaves(body) for body in node.body) if node.body else 1 for node in graph.nodes)


def repetition_inputs(node: CheckedNode, outer: Sequence[T], previous: Sequence[T] | None) -> list[T]:
    """What one repetition of a ``graph`` node reads, given the node's own inputs ``outer`` and the previous
    repetition's outputs (``None`` for the first): its shared inputs and the first repetition's come from
    ``outer``; every other input takes the previous outputs, in order. The checker, the plan and the summary all
    feed repetitions through this one function."""
    if previous is None:
        return list(outer)
    carried = iter(previous)
    shared = node.shared or (False,) * len(outer)
    return [value if is_shared else next(carried) for value, is_shared in zip(outer, shared)]
