"""``with_kv_cache`` on a graph: the decoder with the static or growing cache interface (SPEC 17.5), derived from
any graph whose attention is causal self-attention, every node name, parameter and state_dict key kept.

What the cached variant changes, and nothing else:

- the inputs become the interface's: the token ids (the first input, ``[B, T]``), ``position_ids [B, T]``, the
  padding ``attention_mask`` over the cache's slots, and the caches (static: ``offset``, ``cache_k``,
  ``cache_v`` ``[L, B, Hkv, M, Dh]``; growing: ``past_k``, ``past_v`` ``[L, B, Hkv, S, Dh]``);
- each ``attention`` node (at the top level, or in a subgraph used once, with or without ``repeat``) reads its
  layer of the cache (``select`` on dim 0 at its layer index) and the padding mask, with ``cache: true`` (or
  ``past: true``), ``causal: true`` and rope's ``position_ids``;
- an ``attention_mask`` node (the causal fold of the padding mask) goes: its readers take the padding mask, the
  causal pattern (and window) being the attention's own, counted from the cache's offset;
- a ``positions`` node (``0 .. T-1`` for a learned position embedding) goes: its readers take ``position_ids``;
- a ``select`` of the last token (``last``, ``when: $last_logits``) goes before the run of per-token nodes
  that ends the graph (the final norm and the head), so the prefill computes one token's logits;
- growing: each attention's new keys and values are collected along dim 2 through the layers and come out as
  ``present_k``, ``present_v`` after the past.

Anything the variant would compute differently is refused (``E_INPUT`` naming the node and why): the cached call
runs only the new tokens, so a node that mixes tokens other than through attention (a ``mean`` over T, a
``conv1d``, a recurrent op, an op not known to act on each token alone), an attention that is not causal
self-attention, a mask that is not the padding mask, or an input the interface has no place for.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

from .._contracts import Contract
from .._dims import free_symbols
from .._errors import HndlError, Problem
from .._graph import Graph, InputSpec, Node, split_ref
from .._graph_params import REPETITION

__all__ = ["KINDS", "transform"]

#: The kinds of key/value cache: ``"static"`` (preallocated, written in place), ``"grow"`` (concatenated);
#: ``hndl.zoo.KV_CACHE_KINDS`` repeats them for the zoo's torch-free import (a test holds the two equal).
KINDS = ("static", "grow")

#: Ops that act on each token alone whatever their parameters (elementwise, or over the features only).
PER_TOKEN = frozenset(
    [
        "abs",
        "add",
        "cast",
        "ceil",
        "celu",
        "clamp",
        "cos",
        "div",
        "drop_path",
        "dropout",
        "elu",
        "eq",
        "erf",
        "exp",
        "floor",
        "ge",
        "gelu",
        "gt",
        "hardsigmoid",
        "hardswish",
        "hardtanh",
        "identity",
        "le",
        "leaky_relu",
        "linear",
        "linear_in_out",
        "log",
        "log1p",
        "logical_and",
        "logical_not",
        "logical_or",
        "logical_xor",
        "logsigmoid",
        "lt",
        "maximum",
        "minimum",
        "mish",
        "mul",
        "ne",
        "neg",
        "pow",
        "reciprocal",
        "relu",
        "relu6",
        "round",
        "rsqrt",
        "scale",
        "selu",
        "sigmoid",
        "sign",
        "silu",
        "sin",
        "softplus",
        "softsign",
        "sqrt",
        "sub",
        "tanh",
        "type_as",
        "where",
        "embedding",
        "parameter",
        "buffer",
    ]
)
#: Ops that act along one dim (``dim``): per token when that dim is not the sequence's.
ALONG_DIM = frozenset(["chunk", "split", "concat", "select", "slice", "softmax", "log_softmax", "glu", "mean"])
#: Ops that rearrange a tensor: per token when every dim up to the sequence's is left as it is.
LAYOUT = frozenset(["reshape", "flatten", "permute", "transpose"])
#: Norms over the last ``len(normalized_shape)`` dims.
NORMS = frozenset({"layernorm", "rmsnorm"})
#: Per-token ops of one input the last token's ``select`` may move before (the final norm and the head).
BEFORE_LAST = frozenset(
    [
        "linear",
        "linear_in_out",
        "layernorm",
        "rmsnorm",
        "dropout",
        "identity",
        "scale",
        "gelu",
        "relu",
        "silu",
        "tanh",
        "sigmoid",
        "cast",
    ]
)


def _refuse(message: str, node: str | None = None, hint: str | None = None) -> HndlError:
    return HndlError(
        Problem(
            "E_INPUT",
            "with_kv_cache cannot make the cached variant: " + message,
            node=node,
            expected="a decoder whose attention nodes are causal self-attention (op attention), every other node "
            "acting on each token alone",
            hint=hint
            or "the cached variant runs only the new tokens through the graph: a node that reads the sequence "
            "another way would compute something else",
        )
    )


@dataclass
class _Attention:
    graph: Graph
    node: Node
    checked: Any
    owner: Node | None  # the top-level graph node running graph, None for a top-level attention
    layer: int = 0
    mask_source: str | None = None  # the top-level value its mask comes from (a fold or the padding input)
    window: Any = None  # a window folded into its mask


@dataclass
class _Analysis:
    ids: str
    batch: str
    length: str
    attentions: list[_Attention] = field(default_factory=list)
    folds: dict[str, Any] = field(default_factory=dict)  # top-level attention_mask nodes -> checked
    positions: list[str] = field(default_factory=list)  # top-level positions nodes
    padding: str | None = None
    position_input: str | None = None
    layers: int = 0
    heads: tuple[int, int] = (0, 0)  # every attention's key/value heads and head dim


def _checked_by_name(nodes: Any) -> dict[str, Any]:
    return {n.name: n for n in nodes}


def _consumers(graph: Graph) -> dict[str, list[tuple[Node, int]]]:
    found: dict[str, list[tuple[Node, int]]] = {}
    for node in graph.nodes.values():
        for index, ref in enumerate(node.inputs):
            found.setdefault(split_ref(ref)[0], []).append((node, index))
    return found


def _has_t(dim: Any, t: str) -> bool:
    try:
        return t in free_symbols(dim)
    except Exception:  # an open run or an unknown dim: not provably free of T
        return not isinstance(dim, int)


def _subgraph_uses(graph: Graph) -> dict[str, int]:
    uses: dict[str, int] = {}
    for g in itertools.chain([graph], graph.graphs.values()):
        for node in g.nodes.values():
            if node.op == "graph" and isinstance(node.params.get("graph"), str):
                uses[node.params["graph"]] = uses.get(node.params["graph"], 0) + 1
    return uses


class _Analyzer:
    """Walks the plain graph with its checked types: finds the attention nodes, folds, positions and inputs the
    variant changes, and refuses any node the cached call would compute differently."""

    def __init__(self, graph: Graph, checked: Any) -> None:
        self.graph = graph
        self.checked = checked
        ids = next(iter(graph.inputs), None)
        if ids is None:
            raise _refuse("the graph has no inputs; the first input is the token ids [B, T]")
        contract = graph.inputs[ids].contract
        entries = contract.shape.entries
        if len(entries) != 2 or contract.shape.variadic is not None or not all(isinstance(e, str) for e in entries):
            raise _refuse(
                f"the first input {ids!r} is {contract.shape}, not token ids [B, T] with symbolic B and T",
                ids,
                hint="declare the token ids first, as {shape: [B, T], dtype: int64}",
            )
        self.a = _Analysis(ids=ids, batch=str(entries[0]), length=str(entries[1]))
        self.uses = _subgraph_uses(graph)

    # -- the walk ----------------------------------------------------------------------------------------

    def run(self) -> _Analysis:
        if len(self.graph.outputs) != 1:
            raise _refuse(
                f"the graph has {len(self.graph.outputs)} outputs; the cached variant returns the logits alone "
                "(and, growing, the caches)",
                hint="return only the logits [B, T, vocab]",
            )
        self._walk(self.graph, _checked_by_name(self.checked.nodes), None, 0)
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
                    raise _refuse(
                        f"node {where!r} runs an attention two subgraphs deep; the variant maps attention at the "
                        "top level or in a subgraph the top level uses",
                        where,
                        hint="flatten the inner subgraph into its parent",
                    )
                if self._holds_attention(sub):
                    if self.uses.get(sub.name, 0) != 1:
                        raise _refuse(
                            f"subgraph {sub.name!r} holds attention and is used by {self.uses.get(sub.name, 0)} "
                            "nodes; the variant gives each use's attention its own cache layers",
                            where,
                            hint="give each use its own copy of the subgraph",
                        )
                    if REPETITION in sub.params:
                        raise _refuse(
                            f"subgraph {sub.name!r} declares a parameter {REPETITION!r}, which the variant needs "
                            "for each repetition's cache layer",
                            where,
                        )
                self._walk(sub, _checked_by_name(c.body[0].nodes), node if depth == 0 else owner, depth + 1)
                continue
            if op == "attention":
                self._attention(graph, node, c, owner, where)
            elif op == "attention_mask":
                if owner is not None:
                    raise _refuse(
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
                self._along(node, c, where, t)
            elif op in LAYOUT:
                self._layout(node, c, where, t)
            else:
                raise _refuse(
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

    def _along(self, node: Node, c: Any, where: str, t: str) -> None:
        for typ in c.in_types:
            shape = typ.shape
            if shape is None:
                raise _refuse(f"node {where!r} (op {node.op!r}) has an input of unknown shape", where)
            rank = len(shape)
            if node.op in NORMS:
                dims = list(range(rank - len(c.params.normalized_shape), rank))
            else:
                dim = c.params.dim
                dims = list(dim) if isinstance(dim, (list, tuple)) else [dim] if dim is not None else list(range(rank))
                dims = [d % rank if rank else 0 for d in dims]
            if any(d < rank and _has_t(shape[d], t) for d in dims):
                raise _refuse(
                    f"node {where!r} (op {node.op!r}) acts along the sequence dim {t} of its input "
                    f"{list(map(str, shape))}; the cached variant gives it only the new tokens",
                    where,
                )

    def _layout(self, node: Node, c: Any, where: str, t: str) -> None:
        before, after = c.in_types[0].shape, c.out_types[0].shape
        at = None if before is None else next((i for i, d in enumerate(before) if _has_t(d, t)), None)
        if at is None:
            return
        if after is None or len(after) <= at or [str(d) for d in before[: at + 1]] != [str(d) for d in after[: at + 1]]:
            raise _refuse(
                f"node {where!r} (op {node.op!r}) moves or merges the sequence dim {t}: "
                f"{list(map(str, before))} -> {list(map(str, after or ()))}",
                where,
            )

    def _attention(self, graph: Graph, node: Node, c: Any, owner: Node | None, where: str) -> None:
        from ..ops._attention_ports import AttentionPorts

        p = c.params
        ports = AttentionPorts.of(p, len(node.inputs))
        if p.cache or p.past:
            raise _refuse(f"attention node {where!r} already has a key/value cache", where)
        if ports.kv is not None:
            raise _refuse(
                f"attention node {where!r} is cross-attention (a kv input); the cache holds self-attention's "
                "keys and values",
                where,
            )
        if p.score_bias:
            raise _refuse(
                f"attention node {where!r} adds a score bias, which is made for T queries and T keys; the cached "
                "call has T queries and the cache's keys",
                where,
            )
        found = _Attention(graph, node, c, owner)
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
                raise _refuse(
                    f"the mask of attention node {where!r} comes from {source!r}, not from a padding mask input "
                    "[B, T] of bool (directly or through an attention_mask node)",
                    where,
                    hint="declare the padding mask as an input {shape: [B, T], dtype: bool} and fold it with "
                    "{op: attention_mask, causal: true}",
                )
            self._one_padding(pad, where)
            found.mask_source = source
        if not causal:
            raise _refuse(
                f"attention node {where!r} is not causal (causal: false, and no causal attention_mask reaches it); "
                "a token's output would change as later tokens arrive",
                where,
                hint="causal: true on the attention node, or on the attention_mask node its mask comes from",
            )
        if p.position_ids:
            source = self._to_top(graph, node.inputs[ports.positions or -1], owner, where, "positions")
            if source not in self.graph.inputs:
                raise _refuse(
                    f"the positions of attention node {where!r} come from {source!r}, not from a position ids input",
                    where,
                )
            self._one_position_input(source, where)
        found.layer = len(self.a.attentions)
        self.a.attentions.append(found)

    def _fold_params(self, name: str) -> Any:
        found = self.a.folds.get(name) or _checked_by_name(self.checked.nodes)[name]
        return found.params

    def _to_top(self, graph: Graph, ref: str, owner: Node | None, where: str, what: str) -> str:
        """The top-level value an attention input of a subgraph comes from (through the subgraph's input)."""
        name, port = split_ref(ref)
        if owner is None:
            return name
        if port is not None or name not in graph.inputs:
            raise _refuse(
                f"the {what} of attention node {where!r} is computed inside the subgraph ({ref!r}); the variant "
                f"maps a {what} passed in from the top level",
                where,
            )
        index = list(graph.inputs).index(name)
        shared = owner.params.get("shared") or ()
        repeat = owner.params.get("repeat", 1)
        if repeat != 1 and name not in shared:
            raise _refuse(
                f"the {what} of attention node {where!r} is the subgraph input {name!r}, carried from one "
                f"repetition to the next; the variant needs it shared by every repetition",
                where,
                hint=f"add {name!r} to shared: of node {owner.name!r}",
            )
        if index >= len(owner.inputs):
            raise _refuse(f"node {owner.name!r} passes no value for input {name!r}", owner.name)
        return split_ref(owner.inputs[index])[0]

    def _is_padding(self, name: str) -> bool:
        contract = self.graph.inputs[name].contract
        return len(contract.shape.entries) == 2 and contract.dtype == "bool"

    def _one_padding(self, name: str, where: str) -> None:
        if self.a.padding not in (None, name):
            raise _refuse(
                f"attention node {where!r} reads the padding mask {name!r}, another one {self.a.padding!r}", where
            )
        self.a.padding = name

    def _one_position_input(self, name: str, where: str) -> None:
        if self.a.position_input not in (None, name):
            raise _refuse(f"node {where!r} reads positions {name!r}, others {self.a.position_input!r}", where)
        self.a.position_input = name

    def _positions(self, graph: Graph, node: Node, c: Any, owner: Node | None, where: str) -> None:
        shape = c.in_types[0].shape
        dim = c.params.dim
        if owner is not None or shape is None or not shape or shape[dim % len(shape)] != _symbol(self.a.length):
            raise _refuse(
                f"positions node {where!r} does not count the sequence dim {self.a.length} at the top level; the "
                "variant maps 0 .. T-1 to the position_ids of the new tokens",
                where,
            )
        consumers = _consumers(graph)
        for reader, _ in consumers.get(node.name, []):
            if reader.op != "embedding" or any(r.op != "add" for r, _ in consumers.get(reader.name, [])):
                raise _refuse(
                    f"node {reader.name!r} reads the positions of {where!r} other than as a position embedding "
                    "added to the tokens'; the variant's positions are position_ids [B, T], not [T]",
                    reader.name,
                )
        self.a.positions.append(node.name)

    def _classify_inputs(self) -> None:
        a = self.a
        consumers = _consumers(self.graph)
        for name in self.graph.inputs:
            if name == a.ids:
                continue
            if name == a.padding:
                for reader, _ in consumers.get(name, []):
                    if reader.op not in ("attention_mask", "attention", "graph"):
                        raise _refuse(
                            f"node {reader.name!r} reads the padding mask {name!r}; the variant's mask is over the "
                            "cache's slots, not the T tokens",
                            reader.name,
                        )
                continue
            if name == "position_ids" and a.position_input is None:
                a.position_input = name
            if name == a.position_input:
                continue
            raise _refuse(
                f"input {name!r} is neither the token ids, a padding mask read by attention, nor position ids; "
                "the cache interface has no place for it",
                name,
            )
        for fold in a.folds:
            for reader, _ in consumers.get(fold, []):
                if reader.op not in ("attention", "graph"):
                    raise _refuse(
                        f"node {reader.name!r} reads the folded mask {fold!r} other than as an attention mask", fold
                    )
        if not a.attentions:
            raise _refuse("the graph has no attention node; there are no keys and values to cache")
        first = a.attentions[0].checked.params
        heads = (first.kv_heads or first.num_heads, first.head_dim or first.embed_dim // first.num_heads)
        for att in a.attentions[1:]:
            p = att.checked.params
            mine = (p.kv_heads or p.num_heads, p.head_dim or p.embed_dim // p.num_heads)
            if mine != heads:
                raise _refuse(
                    f"attention node {att.node.name!r} has {mine[0]} key/value heads of {mine[1]}, the first "
                    f"{heads[0]} of {heads[1]}; one cache tensor holds every layer's",
                    att.node.name,
                )
        a.heads = heads


def _symbol(name: str) -> Any:
    from .._dims import symbol

    return symbol(name)


# -- the rewrite ---------------------------------------------------------------------------------------------


def _fresh(graph: Graph, base: str) -> str:
    if base not in graph.nodes and base not in graph.inputs:
        return base
    for i in itertools.count(1):
        if f"{base}_{i}" not in graph.nodes and f"{base}_{i}" not in graph.inputs:
            return f"{base}_{i}"
    raise AssertionError


def _symbols_of(graph: Graph) -> set[str]:
    taken = set(graph.params)
    for spec in graph.inputs.values():
        for entry in spec.contract.shape.entries:
            if isinstance(entry, str):
                taken.update(entry.replace("*", " ").replace("+", " ").replace("/", " ").split())
    return taken


def _fresh_symbols(graph: Graph, *bases: str) -> list[str]:
    taken = _symbols_of(graph)
    out = []
    for base in bases:
        name = base
        i = 1
        while name in taken:
            name, i = f"{base}{i}", i + 1
        taken.add(name)
        out.append(name)
    return out


def _insert(graph: Graph, before: str | None, nodes: list[Node], after: bool = False) -> None:
    """Put ``nodes`` before (or after) node ``before`` (``None``: at the end), keeping the order of the rest."""
    items = list(graph.nodes.items())
    at = len(items) if before is None else [k for k, _ in items].index(before) + int(after)
    graph.nodes = dict(items[:at] + [(n.name, n) for n in nodes] + items[at:])


def _rename(graph: Graph, mapping: dict[str, str]) -> None:
    """Rewrite references: a whole reference found in ``mapping`` becomes its value."""
    for node in graph.nodes.values():
        node.inputs = [mapping.get(r, r) for r in node.inputs]
        if node.otherwise is not None:
            node.otherwise = mapping.get(node.otherwise, node.otherwise)
    graph.outputs = [mapping.get(r, r) for r in graph.outputs]


def _add(graph: Graph, op: str, base: str, inputs: list[str], **params: Any) -> Node:
    return Node(_fresh(graph, base), op, inputs, params)


def _contract(shape: list[Any], dtype: str | None = None) -> Contract:
    return Contract.make(shape, dtype)


class _Rewriter:
    def __init__(self, plain: Graph, checked: Any, analysis: _Analysis, kind: str) -> None:
        self.plain = plain
        self.checked = checked
        self.a = analysis
        self.g = copy.deepcopy(plain)
        self.grow = kind == "grow"
        self.layer = 0  # the next attention's cache layer
        self.acc = ("", "")  # growing: the keys and values collected so far

    def run(self) -> Graph:
        g, a = self.g, self.a
        self._last_logits()
        for owner_name, group in itertools.groupby(
            a.attentions, key=lambda att: None if att.owner is None else att.owner.name
        ):
            members = list(group)
            if owner_name is None:
                for att in members:
                    self._top_attention(att)
            else:
                self._subgraph(g.nodes[owner_name], members)
        renames: dict[str, str] = {}
        padding = "attention_mask"
        if a.padding is not None:
            renames[a.padding] = padding
        for fold in a.folds:
            renames[fold] = padding
            del g.nodes[fold]
        for name in a.positions:
            renames[name] = "position_ids"
            del g.nodes[name]
        if a.position_input is not None:
            renames[a.position_input] = "position_ids"
        _rename(g, renames)
        for att in self.a.attentions:
            if att.owner is None and self.grow:
                _rename(g, {att.node.name: f"{att.node.name}.0"})
                for node in g.nodes.values():  # the collecting concat reads the new keys themselves
                    node.inputs = [r.replace(f"{att.node.name}.0.", f"{att.node.name}.") for r in node.inputs]
        if self.grow:
            self._present()
        self._inputs()
        return g

    # -- the pieces --------------------------------------------------------------------------------------

    def _inputs(self) -> None:
        g, a = self.g, self.a
        b, t = a.batch, a.length
        m, s = _fresh_symbols(self.plain, "M", "S")
        ids = g.inputs[a.ids]
        # The sizes as the check resolved them from the plain graph's configuration: a cache of another layer
        # count, head count or head dim is refused at the call by the input's contract, before anything is
        # written (the attention layer's own check runs later, on the write).
        heads, width = self.a.heads
        cache: list[Any] = [self.a.layers, b, heads, s if self.grow else m, width]
        wanted: list[tuple[str, list[Any], str | None]] = [("position_ids", [b, t], "int64")]
        if self.grow:
            wanted += [("attention_mask", [b, f"{s}+{t}"], "bool"), ("past_k", cache, None), ("past_v", cache, None)]
        else:
            wanted += [("attention_mask", [b, m], "bool"), ("offset", [], "int64")]
            wanted += [("cache_k", cache, None), ("cache_v", cache, None)]
        inputs = {a.ids: ids}
        for name, shape, dtype in wanted:
            if name in g.nodes:
                raise _refuse(
                    f"node {name!r} has the name of the cache interface's input {name!r}",
                    name,
                    hint=f"rename node {name!r}",
                )
            if name == a.ids:
                raise _refuse(f"the token ids input is named {name!r}, an input of the cache interface", name)
            inputs[name] = InputSpec(name, _contract(shape, dtype))
        g.inputs = inputs

    def _last_logits(self) -> None:
        g = self.g
        key = "last_logits"
        while key in g.params:
            key = "_" + key
        g.params[key] = True
        checked = _checked_by_name(self.checked.nodes)
        out = split_ref(g.outputs[0])[0]
        consumers = _consumers(g)
        chain: list[Node] = []
        current = g.nodes.get(out) if split_ref(g.outputs[0])[1] is None else None
        while (
            current is not None
            and current.op in BEFORE_LAST
            and current.when is True
            and len(current.inputs) == 1
            and len(consumers.get(current.name, [])) == (0 if not chain else 1)
        ):
            chain.append(current)
            current = g.nodes.get(split_ref(current.inputs[0])[0])
        t = self.a.length
        # The select goes where dim 1 is still the sequence; an output that is not [B, T, vocab] is refused.
        out_type = self.checked.output_types[0].shape
        if out_type is None or len(out_type) < 2 or str(out_type[1]) != t:
            raise _refuse(
                f"the output {g.outputs[0]!r} is {list(map(str, out_type or ()))}, not logits [B, {t}, vocab]",
                hint="return the logits of every token, [B, T, vocab]",
            )
        while chain:
            head = chain[-1]
            shape = checked[head.name].in_types[0].shape if head.name in checked else None
            if shape is not None and len(shape) >= 2 and str(shape[1]) == t:
                break
            chain.pop()
        last = _add(g, "select", "last", [chain[-1].inputs[0] if chain else g.outputs[0]], dim=1, index=-1)
        last.when = f"${key}"
        if chain:
            _insert(g, chain[-1].name, [last])
            chain[-1].inputs = [last.name]
        else:
            _insert(g, None, [last])
            g.outputs = [last.name]
        for spec in g.output_specs:
            spec.shape = None  # [B, T, vocab] or [B, vocab] by last_logits: the checker infers which

    def _select(self, graph: Graph, before: str, source: str, index: Any, base: str) -> Node:
        node = _add(graph, "select", base, [source], dim=0, index=index)
        _insert(graph, before, [node])
        return node

    def _rewire(self, graph: Graph, att: _Attention, mask: str, layer: Any, extra: dict[str, str]) -> Node:
        """Attention node ``att`` reading its cache layer, the padding ``mask`` and the interface's ``extra``
        values (offset, positions) in ``graph``; for a growing cache, the node whose collected keys follow."""
        from ..ops._attention_ports import AttentionPorts

        node = self.g_node(att)
        p = att.checked.params
        ports = AttentionPorts.of(p, len(node.inputs))
        x = node.inputs[0]
        positions = node.inputs[ports.positions or -1] if p.position_ids else extra.get("positions")
        source_k, source_v = ("past_k", "past_v") if self.grow else ("cache_k", "cache_v")
        k = self._select(graph, node.name, extra[source_k], layer, "layer_k")
        v = self._select(graph, node.name, extra[source_v], layer, "layer_v")
        inputs = [x, mask, k.name, v.name]
        params = dict(node.params)
        params.update(masked=True, causal=True)
        if att.window is not None and p.window is None:
            params["window"] = att.window
        elif att.window is not None:
            params["window"] = min(att.window, p.window)
        if self.grow:
            params["past"] = True
        else:
            params["cache"] = True
            inputs.append(extra["offset"])
        if p.rope is not None:
            params["position_ids"] = True
            inputs.append(positions)  # type: ignore[arg-type]
        node.inputs, node.params = inputs, params
        return node

    def g_node(self, att: _Attention) -> Node:
        graph = self.g if att.owner is None else self.g.graphs[att.owner.params["graph"]]
        return graph.nodes[att.node.name]

    def _top_attention(self, att: _Attention) -> None:
        g = self.g
        extra = {"offset": "offset", "cache_k": "cache_k", "cache_v": "cache_v", "positions": "position_ids"}
        extra.update(past_k="past_k", past_v="past_v")
        node = self._rewire(g, att, "attention_mask", self.layer, extra)
        self.layer += 1
        if self.grow:
            self._start_collecting(node.name)
            k = _add(g, "concat", "all_k", [self.acc[0], f"{node.name}.3"], dim=2)
            v = _add(g, "concat", "all_v", [self.acc[1], f"{node.name}.4"], dim=2)
            _insert(g, node.name, [k, v], after=True)
            self.acc = (k.name, v.name)

    def _start_collecting(self, before: str) -> None:
        if self.acc[0]:
            return
        g = self.g
        first_k = _add(g, "select", "first_k", ["past_k"], dim=0, index=0)
        first_v = _add(g, "select", "first_v", ["past_v"], dim=0, index=0)
        _insert(g, before, [first_k, first_v])
        none_k = _add(g, "slice", "none_k", [first_k.name], dim=2, start=0, end=0)
        none_v = _add(g, "slice", "none_v", [first_v.name], dim=2, start=0, end=0)
        _insert(g, before, [none_k, none_v])
        self.acc = (none_k.name, none_v.name)

    def _subgraph(self, owner: Node, group: list[_Attention]) -> None:
        g = self.g
        sub = g.graphs[owner.params["graph"]]
        repeat = len(_checked_by_name(self.checked.nodes)[owner.name].body)
        count = len(group)
        base = self.layer
        b, t, ly, h, m, d, s, n, c = _fresh_symbols(sub, "B", "T", "L", "Hkv", "M", "Dh", "S", "N", "C")
        new_inputs: dict[str, tuple[list[Any], str | None, str]] = {}  # name in sub -> contract, top-level value
        # The mask: the subgraph input the attention nodes read it from, or a new one.
        mask_inputs = {
            att.node.inputs[1] for att in group if att.checked.params.masked and att.node.inputs[1] in sub.inputs
        }
        mask_shape: list[Any] = [b, n] if self.grow else [b, m]
        if mask_inputs:
            for name in mask_inputs:
                sub.inputs[name] = InputSpec(name, _contract(mask_shape, "bool"), sub.inputs[name].location)
            mask = next(iter(mask_inputs))
        else:
            mask = _fresh(sub, "mask")
            new_inputs[mask] = (mask_shape, "bool", "attention_mask")
        extra: dict[str, str] = {}
        if any(att.checked.params.rope is not None and not att.checked.params.position_ids for att in group):
            extra["positions"] = _fresh(sub, "positions")
            new_inputs[extra["positions"]] = ([b, t], "int64", "position_ids")
        cache = [ly, b, h, s if self.grow else m, d]
        names = ("past_k", "past_v") if self.grow else ("offset", "cache_k", "cache_v")
        for name in names:
            extra[name] = _fresh(sub, name)
            shape, dtype = ([], "int64") if name == "offset" else (cache, None)
            new_inputs[extra[name]] = (shape, dtype, name)
        for name, (shape, dtype, _) in new_inputs.items():
            sub.inputs[name] = InputSpec(name, _contract(shape, dtype))
        shared = list(owner.params.get("shared") or ())
        owner.inputs = list(owner.inputs) + [top for _, _, top in new_inputs.values()]
        owner.params = {**owner.params, "shared": shared + list(new_inputs)}
        nodes = []
        for j, att in enumerate(group):
            index: Any = (
                base + j
                if repeat == 1
                else f"${REPETITION}*{count}+{base + j}"
                if count > 1 or base
                else f"${REPETITION}"
            )
            mask_ref = att.node.inputs[1] if att.checked.params.masked and att.node.inputs[1] in sub.inputs else mask
            nodes.append(self._rewire(sub, att, mask_ref, index, extra))
        self.layer = base + count * repeat
        if self.grow:
            acc_k, acc_v = _fresh(sub, "new_k"), _fresh(sub, "new_v")
            for name in (acc_k, acc_v):
                sub.inputs[name] = InputSpec(name, _contract([b, h, c, d]))
            previous = (acc_k, acc_v)
            for node in nodes:
                _rename(sub, {node.name: f"{node.name}.0"})
                k = _add(sub, "concat", "all_k", [previous[0], f"{node.name}.3"], dim=2)
                v = _add(sub, "concat", "all_v", [previous[1], f"{node.name}.4"], dim=2)
                _insert(sub, node.name, [k, v], after=True)
                previous = (k.name, v.name)
            outputs_before = len(sub.outputs)
            sub.outputs = [*sub.outputs, *previous]
            sub.output_locations = [*sub.output_locations, None, None]
            from .._graph import OutputSpec

            sub.output_specs = [*sub.output_specs, OutputSpec(), OutputSpec()]
            self._start_collecting(owner.name)
            owner.inputs = [*owner.inputs, *self.acc]
            if outputs_before == 1:
                _rename(g, {owner.name: f"{owner.name}.0"})
            self.acc = (f"{owner.name}.{outputs_before}", f"{owner.name}.{outputs_before + 1}")

    def _present(self) -> None:
        g = self.g
        made = []
        for which in ("k", "v"):
            flip = _add(g, "permute", f"flip_{which}", [self.acc[0 if which == "k" else 1]], dims=[0, 1, 3, 2])
            g.nodes[flip.name] = flip
            split = _add(g, "reshape", f"new_{which}", [flip.name], start_dim=3, shape=[self.a.layers, -1])
            g.nodes[split.name] = split
            layer = _add(g, "permute", f"layer_{which}", [split.name], dims=[3, 0, 1, 4, 2])
            g.nodes[layer.name] = layer
            present = _add(g, "concat", f"present_{which}", [f"past_{which}", layer.name], dim=3)
            g.nodes[present.name] = present
            made.append(present.name)
        g.output(made)


def transform(graph: Graph, kind: str) -> Graph:
    """``graph`` (a plain decoder) with the cache interface of ``kind``: see the module docstring.

    Raises:
        HndlError: the checker's problems for a graph that does not check; E_INPUT naming the node for anything
            the cached variant would compute differently.
    """
    from .._check import check

    checked = check(graph)
    analysis = _Analyzer(graph, checked).run()
    analysis.layers = _count_layers(analysis, checked)
    result = _Rewriter(graph, checked, analysis, kind).run()
    result.source = graph.source
    return result


def _count_layers(a: _Analysis, checked: Any) -> int:
    top = _checked_by_name(checked.nodes)
    total = 0
    for att in a.attentions:
        total += 1 if att.owner is None else len(top[att.owner.name].body)
    return total
