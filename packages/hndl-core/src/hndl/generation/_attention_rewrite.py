"""Rewriting a decoder built from hndl's ``attention`` op (:mod:`._attention_analysis` found its parts): each
attention node reads its layer of the cache (``select`` on dim 0 at its layer index; in a repeated subgraph, at
the repetition's) and the padding mask, with ``cache: true`` (or ``past: true``), ``causal: true`` and rope's
``position_ids``; the ``attention_mask`` folds and ``positions`` nodes go, their readers taking the interface's
``attention_mask`` and ``position_ids``."""

from __future__ import annotations

import itertools
from typing import Any

from .._graph import Graph, InputSpec, Node, OutputSpec
from .._graph_params import REPETITION
from ._attention_analysis import FoundAttention
from ._cache_rewrite import CacheRewriter
from ._graph_edit import checked_by_name, contract_of, fresh_name, fresh_symbols, insert_nodes, new_node, rename_refs

__all__ = ["AttentionRewriter"]


class AttentionRewriter(CacheRewriter):
    """The attention nodes' cached form; :meth:`run` gives the variant's graph."""

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
        rename_refs(g, renames)
        for att in self.a.attentions:
            if att.owner is None and self.grow:
                rename_refs(g, {att.node.name: f"{att.node.name}.0"})
                for node in g.nodes.values():  # the collecting concat reads the new keys themselves
                    node.inputs = [r.replace(f"{att.node.name}.0.", f"{att.node.name}.") for r in node.inputs]
        if self.grow:
            self._present()
        self._inputs()
        return g

    def _rewire(self, graph: Graph, att: FoundAttention, mask: str, layer: Any, extra: dict[str, str]) -> Node:
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

    def g_node(self, att: FoundAttention) -> Node:
        graph = self.g if att.owner is None else self.g.graphs[att.owner.params["graph"]]
        return graph.nodes[att.node.name]

    def _top_attention(self, att: FoundAttention) -> None:
        g = self.g
        extra = {"offset": "offset", "cache_k": "cache_k", "cache_v": "cache_v", "positions": "position_ids"}
        extra.update(past_k="past_k", past_v="past_v")
        node = self._rewire(g, att, "attention_mask", self.layer, extra)
        self.layer += 1
        if self.grow:
            self._start_collecting(node.name)
            k = new_node(g, "concat", "all_k", [self.acc[0], f"{node.name}.3"], dim=2)
            v = new_node(g, "concat", "all_v", [self.acc[1], f"{node.name}.4"], dim=2)
            insert_nodes(g, node.name, [k, v], after=True)
            self.acc = (k.name, v.name)

    def _subgraph(self, owner: Node, group: list[FoundAttention]) -> None:
        g = self.g
        sub = g.graphs[owner.params["graph"]]
        repeat = len(checked_by_name(self.checked.nodes)[owner.name].body)
        count = len(group)
        base = self.layer
        b, t, ly, h, m, d, s, n, c = fresh_symbols(sub, "B", "T", "L", "Hkv", "M", "Dh", "S", "N", "C")
        new_inputs: dict[str, tuple[list[Any], str | None, str]] = {}  # name in sub -> contract, top-level value
        # The mask: the subgraph input the attention nodes read it from, or a new one.
        mask_inputs = {
            att.node.inputs[1] for att in group if att.checked.params.masked and att.node.inputs[1] in sub.inputs
        }
        mask_shape: list[Any] = [b, n] if self.grow else [b, m]
        if mask_inputs:
            for name in mask_inputs:
                sub.inputs[name] = InputSpec(name, contract_of(mask_shape, "bool"), sub.inputs[name].location)
            mask = next(iter(mask_inputs))
        else:
            mask = fresh_name(sub, "mask")
            new_inputs[mask] = (mask_shape, "bool", "attention_mask")
        extra: dict[str, str] = {}
        if any(att.checked.params.rope is not None and not att.checked.params.position_ids for att in group):
            extra["positions"] = fresh_name(sub, "positions")
            new_inputs[extra["positions"]] = ([b, t], "int64", "position_ids")
        cache = [ly, b, h, s if self.grow else m, d]
        names = ("past_k", "past_v") if self.grow else ("offset", "cache_k", "cache_v")
        for name in names:
            extra[name] = fresh_name(sub, name)
            shape, dtype = ([], "int64") if name == "offset" else (cache, None)
            new_inputs[extra[name]] = (shape, dtype, name)
        for name, (shape, dtype, _) in new_inputs.items():
            sub.inputs[name] = InputSpec(name, contract_of(shape, dtype))
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
            acc_k, acc_v = fresh_name(sub, "new_k"), fresh_name(sub, "new_v")
            for name in (acc_k, acc_v):
                sub.inputs[name] = InputSpec(name, contract_of([b, h, c, d]))
            previous = (acc_k, acc_v)
            for node in nodes:
                rename_refs(sub, {node.name: f"{node.name}.0"})
                k = new_node(sub, "concat", "all_k", [previous[0], f"{node.name}.3"], dim=2)
                v = new_node(sub, "concat", "all_v", [previous[1], f"{node.name}.4"], dim=2)
                insert_nodes(sub, node.name, [k, v], after=True)
                previous = (k.name, v.name)
            outputs_before = len(sub.outputs)
            sub.outputs = [*sub.outputs, *previous]
            sub.output_locations = [*sub.output_locations, None, None]
            sub.output_specs = [*sub.output_specs, OutputSpec(), OutputSpec()]
            self._start_collecting(owner.name)
            owner.inputs = [*owner.inputs, *self.acc]
            if outputs_before == 1:
                rename_refs(g, {owner.name: f"{owner.name}.0"})
            self.acc = (f"{owner.name}.{outputs_before}", f"{owner.name}.{outputs_before + 1}")
