"""Recognising a decoder built from hndl's ``attention`` op (the zoo's, a hand-written spec): the attention nodes
(at the top level or in a subgraph used once), the ``attention_mask`` folds and ``positions`` nodes the cached
variant replaces, the padding and position inputs; every other node must act on each token alone
(:mod:`._token_rules`). Anything else is an ``E_INPUT`` naming the node and why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._graph import Graph, Node, split_ref
from .._graph_params import REPETITION
from ._graph_edit import checked_by_name, consumers_of, refuse, subgraph_uses, symbol_of
from ._token_rules import ALONG_DIM, LAYOUT, NORMS, PER_TOKEN, check_along, check_layout

__all__ = ["Analysis", "AttentionAnalyzer", "FoundAttention", "count_layers"]


@dataclass
class FoundAttention:
    graph: Graph
    node: Node
    checked: Any
    owner: Node | None  # the top-level graph node running graph, None for a top-level attention
    layer: int = 0
    mask_source: str | None = None  # the top-level value its mask comes from (a fold or the padding input)
    window: Any = None  # a window folded into its mask


@dataclass
class Analysis:
    ids: str
    batch: str
    length: str
    attentions: list[FoundAttention] = field(default_factory=list)
    folds: dict[str, Any] = field(default_factory=dict)  # top-level attention_mask nodes -> checked
    positions: list[str] = field(default_factory=list)  # top-level positions nodes
    padding: str | None = None
    position_input: str | None = None
    layers: int = 0
    heads: tuple[int, int] = (0, 0)  # every attention's key/value heads and head dim


class AttentionAnalyzer:
    """Walks the plain graph with its checked types: finds the attention nodes, folds, positions and inputs the
    variant changes, and refuses any node the cached call would compute differently."""

    def __init__(self, graph: Graph, checked: Any) -> None:
        self.graph = graph
        self.checked = checked
        ids = next(iter(graph.inputs), None)
        if ids is None:
            raise refuse("the graph has no inputs; the first input is the token ids [B, T]")
        contract = graph.inputs[ids].contract
        entries = contract.shape.entries
        if len(entries) != 2 or contract.shape.variadic is not None or not all(isinstance(e, str) for e in entries):
            raise refuse(
                f"the first input {ids!r} is {contract.shape}, not token ids [B, T] with symbolic B and T",
                ids,
                hint="declare the token ids first, as {shape: [B, T], dtype: int64}",
            )
        self.a = Analysis(ids=ids, batch=str(entries[0]), length=str(entries[1]))
        self.uses = subgraph_uses(graph)

    # -- the walk ----------------------------------------------------------------------------------------

    def run(self) -> Analysis:
        if len(self.graph.outputs) != 1:
            raise refuse(
                f"the graph has {len(self.graph.outputs)} outputs; the cached variant returns the logits alone "
                "(and, growing, the caches)",
                hint="return only the logits [B, T, vocab]",
            )
        self._walk(self.graph, checked_by_name(self.checked.nodes), None, 0)
        self._classify_inputs()
        return self.a

    def _walk(self, graph: Graph, checked: dict[str, Any], owner: Node | None, depth: int) -> None:
        t = self.a.length
        for node in graph.nodes.values():
            c = checked.get(node.name)
            where = node.name if owner is None else f"{owner.name}.{node.name}"
            if c is None:  # left out by `when`: passes its input through
                continue
            op = node.op
            if op == "graph":
                used = str(node.params.get("graph"))
                sub = graph.graphs.get(used) or self.graph.graphs.get(used)
                if sub is None or not c.body:
                    continue
                if depth >= 1 and self._holds_attention(sub):
                    raise refuse(
                        f"node {where!r} runs an attention two subgraphs deep; the variant maps attention at the "
                        "top level or in a subgraph the top level uses",
                        where,
                        hint="flatten the inner subgraph into its parent",
                    )
                if self._holds_attention(sub):
                    if self.uses.get(sub.name, 0) != 1:
                        raise refuse(
                            f"subgraph {sub.name!r} holds attention and is used by {self.uses.get(sub.name, 0)} "
                            "nodes; the variant gives each use's attention its own cache layers",
                            where,
                            hint="give each use its own copy of the subgraph",
                        )
                    if REPETITION in sub.params:
                        raise refuse(
                            f"subgraph {sub.name!r} declares a parameter {REPETITION!r}, which the variant needs "
                            "for each repetition's cache layer",
                            where,
                        )
                self._walk(sub, checked_by_name(c.body[0].nodes), node if depth == 0 else owner, depth + 1)
                continue
            if op == "attention":
                self._attention(graph, node, c, owner, where)
            elif op == "attention_mask":
                if owner is not None:
                    raise refuse(
                        f"the attention_mask node {where!r} is inside a subgraph; the variant maps a padding mask "
                        "folded once at the top level",
                        where,
                    )
                self.a.folds[node.name] = c
            elif op == "positions":
                self._positions(graph, node, c, owner, where)
            elif op in PER_TOKEN:
                pass
            elif op in ALONG_DIM or op in NORMS:
                check_along(node, c, where, t)
            elif op in LAYOUT:
                check_layout(node, c, where, t)
            else:
                raise refuse(
                    f"node {where!r} (op {op!r}) is not known to act on each token alone; the cached variant runs "
                    "only the new tokens through it",
                    where,
                )

    def _holds_attention(self, sub: Graph) -> bool:
        for node in sub.nodes.values():
            if node.op == "attention":
                return True
            if node.op == "graph":
                inner = self.graph.graphs.get(str(node.params.get("graph")))
                if inner is not None and inner is not sub and self._holds_attention(inner):
                    return True
        return False

    def _attention(self, graph: Graph, node: Node, c: Any, owner: Node | None, where: str) -> None:
        from ..ops._attention_ports import AttentionPorts

        p = c.params
        ports = AttentionPorts.of(p, len(node.inputs))
        if p.cache or p.past:
            raise refuse(f"attention node {where!r} already has a key/value cache", where)
        if ports.kv is not None:
            raise refuse(
                f"attention node {where!r} is cross-attention (a kv input); the cache holds self-attention's "
                "keys and values",
                where,
            )
        if p.score_bias:
            raise refuse(
                f"attention node {where!r} adds a score bias, which is made for T queries and T keys; the cached "
                "call has T queries and the cache's keys",
                where,
            )
        found = FoundAttention(graph, node, c, owner)
        causal = bool(p.causal)
        if p.masked:
            source = self._to_top(graph, node.inputs[ports.mask or 1], owner, where, "mask")
            if source in self.graph.nodes and self.graph.nodes[source].op == "attention_mask":
                fold = self._fold_params(source)
                causal = causal or bool(fold.causal)
                found.window = fold.window
                pad = self.graph.nodes[source].inputs[0]
            else:
                pad = source
            if pad not in self.graph.inputs or not self._is_padding(pad):
                raise refuse(
                    f"the mask of attention node {where!r} comes from {source!r}, not from a padding mask input "
                    "[B, T] of bool (directly or through an attention_mask node)",
                    where,
                    hint="declare the padding mask as an input {shape: [B, T], dtype: bool} and fold it with "
                    "{op: attention_mask, causal: true}",
                )
            self._one_padding(pad, where)
            found.mask_source = source
        if not causal:
            raise refuse(
                f"attention node {where!r} is not causal (causal: false, and no causal attention_mask reaches it); "
                "a token's output would change as later tokens arrive",
                where,
                hint="causal: true on the attention node, or on the attention_mask node its mask comes from",
            )
        if p.position_ids:
            source = self._to_top(graph, node.inputs[ports.positions or -1], owner, where, "positions")
            if source not in self.graph.inputs:
                raise refuse(
                    f"the positions of attention node {where!r} come from {source!r}, not from a position ids input",
                    where,
                )
            self._one_position_input(source, where)
        found.layer = len(self.a.attentions)
        self.a.attentions.append(found)

    def _fold_params(self, name: str) -> Any:
        found = self.a.folds.get(name) or checked_by_name(self.checked.nodes)[name]
        return found.params

    def _to_top(self, graph: Graph, ref: str, owner: Node | None, where: str, what: str) -> str:
        """The top-level value an attention input of a subgraph comes from (through the subgraph's input)."""
        name, port = split_ref(ref)
        if owner is None:
            return name
        if port is not None or name not in graph.inputs:
            raise refuse(
                f"the {what} of attention node {where!r} is computed inside the subgraph ({ref!r}); the variant "
                f"maps a {what} passed in from the top level",
                where,
            )
        index = list(graph.inputs).index(name)
        shared = owner.params.get("shared") or ()
        repeat = owner.params.get("repeat", 1)
        if repeat != 1 and name not in shared:
            raise refuse(
                f"the {what} of attention node {where!r} is the subgraph input {name!r}, carried from one "
                f"repetition to the next; the variant needs it shared by every repetition",
                where,
                hint=f"add {name!r} to shared: of node {owner.name!r}",
            )
        if index >= len(owner.inputs):
            raise refuse(f"node {owner.name!r} passes no value for input {name!r}", owner.name)
        return split_ref(owner.inputs[index])[0]

    def _is_padding(self, name: str) -> bool:
        contract = self.graph.inputs[name].contract
        return len(contract.shape.entries) == 2 and contract.dtype == "bool"

    def _one_padding(self, name: str, where: str) -> None:
        if self.a.padding not in (None, name):
            raise refuse(
                f"attention node {where!r} reads the padding mask {name!r}, another one {self.a.padding!r}", where
            )
        self.a.padding = name

    def _one_position_input(self, name: str, where: str) -> None:
        if self.a.position_input not in (None, name):
            raise refuse(f"node {where!r} reads positions {name!r}, others {self.a.position_input!r}", where)
        self.a.position_input = name

    def _positions(self, graph: Graph, node: Node, c: Any, owner: Node | None, where: str) -> None:
        shape = c.in_types[0].shape
        dim = c.params.dim
        if owner is not None or shape is None or not shape or shape[dim % len(shape)] != symbol_of(self.a.length):
            raise refuse(
                f"positions node {where!r} does not count the sequence dim {self.a.length} at the top level; the "
                "variant maps 0 .. T-1 to the position_ids of the new tokens",
                where,
            )
        consumers = consumers_of(graph)
        for reader, _ in consumers.get(node.name, []):
            if reader.op != "embedding" or any(r.op != "add" for r, _ in consumers.get(reader.name, [])):
                raise refuse(
                    f"node {reader.name!r} reads the positions of {where!r} other than as a position embedding "
                    "added to the tokens'; the variant's positions are position_ids [B, T], not [T]",
                    reader.name,
                )
        self.a.positions.append(node.name)

    def _classify_inputs(self) -> None:
        a = self.a
        consumers = consumers_of(self.graph)
        for name in self.graph.inputs:
            if name == a.ids:
                continue
            if name == a.padding:
                for reader, _ in consumers.get(name, []):
                    if reader.op not in ("attention_mask", "attention", "graph"):
                        raise refuse(
                            f"node {reader.name!r} reads the padding mask {name!r}; the variant's mask is over the "
                            "cache's slots, not the T tokens",
                            reader.name,
                        )
                continue
            if name == "position_ids" and a.position_input is None:
                a.position_input = name
            if name == a.position_input:
                continue
            raise refuse(
                f"input {name!r} is neither the token ids, a padding mask read by attention, nor position ids; "
                "the cache interface has no place for it",
                name,
            )
        for fold in a.folds:
            for reader, _ in consumers.get(fold, []):
                if reader.op not in ("attention", "graph"):
                    raise refuse(
                        f"node {reader.name!r} reads the folded mask {fold!r} other than as an attention mask", fold
                    )
        if not a.attentions:
            raise refuse("the graph has no attention node; there are no keys and values to cache")
        first = a.attentions[0].checked.params
        heads = (first.kv_heads or first.num_heads, first.head_dim or first.embed_dim // first.num_heads)
        for att in a.attentions[1:]:
            p = att.checked.params
            mine = (p.kv_heads or p.num_heads, p.head_dim or p.embed_dim // p.num_heads)
            if mine != heads:
                raise refuse(
                    f"attention node {att.node.name!r} has {mine[0]} key/value heads of {mine[1]}, the first "
                    f"{heads[0]} of {heads[1]}; one cache tensor holds every layer's",
                    att.node.name,
                )
        a.heads = heads


def count_layers(a: Analysis, checked: Any) -> int:
    top = checked_by_name(checked.nodes)
    total = 0
    for att in a.attentions:
        total += 1 if att.owner is None else len(top[att.owner.name].body)
    return total
