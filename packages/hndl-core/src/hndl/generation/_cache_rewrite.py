"""The parts of the cached variant every decoder gets, whatever its attention is written with: the cache
interface's inputs (SPEC 17.5), the ``select`` of the last token's logits before the head, and, for a growing
cache, each layer's new keys and values collected into ``present_k``, ``present_v``."""

from __future__ import annotations

import copy
from typing import Any

from .._graph import Graph, InputSpec, Node, split_ref
from ._graph_edit import (
    checked_by_name,
    consumers_of,
    contract_of,
    fresh_symbols,
    insert_nodes,
    new_node,
    refuse,
)
from ._token_rules import BEFORE_LAST

__all__ = ["CacheRewriter"]


class CacheRewriter:
    """What a rewriter of a decoder's attention shares. ``analysis`` says the token ids (``ids``), their symbols
    (``batch``, ``length``), the cache's ``layers`` and ``heads`` (key/value heads, head dim)."""

    def __init__(self, plain: Graph, checked: Any, analysis: Any, kind: str) -> None:
        self.plain = plain
        self.checked = checked
        self.a = analysis
        self.g = copy.deepcopy(plain)
        self.grow = kind == "grow"
        self.layer = 0  # the next attention's cache layer
        self.acc = ("", "")  # growing: the keys and values collected so far

    def _inputs(self) -> None:
        g, a = self.g, self.a
        b, t = a.batch, a.length
        m, s = fresh_symbols(self.plain, "M", "S")
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
                raise refuse(
                    f"node {name!r} has the name of the cache interface's input {name!r}",
                    name,
                    hint=f"rename node {name!r}",
                )
            if name == a.ids:
                raise refuse(f"the token ids input is named {name!r}, an input of the cache interface", name)
            inputs[name] = InputSpec(name, contract_of(shape, dtype))
        g.inputs = inputs

    def _last_logits(self) -> None:
        g = self.g
        key = "last_logits"
        while key in g.params:
            key = "_" + key
        g.params[key] = True
        checked = checked_by_name(self.checked.nodes)
        out = split_ref(g.outputs[0])[0]
        consumers = consumers_of(g)
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
            raise refuse(
                f"the output {g.outputs[0]!r} is {list(map(str, out_type or ()))}, not logits [B, {t}, vocab]",
                hint="return the logits of every token, [B, T, vocab]",
            )
        while chain:
            head = chain[-1]
            shape = checked[head.name].in_types[0].shape if head.name in checked else None
            if shape is not None and len(shape) >= 2 and str(shape[1]) == t:
                break
            chain.pop()
        last = new_node(g, "select", "last", [chain[-1].inputs[0] if chain else g.outputs[0]], dim=1, index=-1)
        last.when = f"${key}"
        if chain:
            insert_nodes(g, chain[-1].name, [last])
            chain[-1].inputs = [last.name]
        else:
            insert_nodes(g, None, [last])
            g.outputs = [last.name]
        for spec in g.output_specs:
            spec.shape = None  # [B, T, vocab] or [B, vocab] by last_logits: the checker infers which

    def _select(self, graph: Graph, before: str, source: str, index: Any, base: str) -> Node:
        node = new_node(graph, "select", base, [source], dim=0, index=index)
        insert_nodes(graph, before, [node])
        return node

    def _start_collecting(self, before: str) -> None:
        if self.acc[0]:
            return
        g = self.g
        first_k = new_node(g, "select", "first_k", ["past_k"], dim=0, index=0)
        first_v = new_node(g, "select", "first_v", ["past_v"], dim=0, index=0)
        insert_nodes(g, before, [first_k, first_v])
        none_k = new_node(g, "slice", "none_k", [first_k.name], dim=2, start=0, end=0)
        none_v = new_node(g, "slice", "none_v", [first_v.name], dim=2, start=0, end=0)
        insert_nodes(g, before, [none_k, none_v])
        self.acc = (none_k.name, none_v.name)

    def _present(self) -> None:
        g = self.g
        made = []
        for which in ("k", "v"):
            flip = new_node(g, "permute", f"flip_{which}", [self.acc[0 if which == "k" else 1]], dims=[0, 1, 3, 2])
            g.nodes[flip.name] = flip
            split = new_node(g, "reshape", f"new_{which}", [flip.name], start_dim=3, shape=[self.a.layers, -1])
            g.nodes[split.name] = split
            layer = new_node(g, "permute", f"layer_{which}", [split.name], dims=[3, 0, 1, 4, 2])
            g.nodes[layer.name] = layer
            present = new_node(g, "concat", f"present_{which}", [f"past_{which}", layer.name], dim=3)
            g.nodes[present.name] = present
            made.append(present.name)
        g.output(made)
