"""Rewriting causal self-attention written as ``sdpa`` (:mod:`._sdpa_pattern` found it): each ``sdpa`` node
takes its layer of the cache (``select`` on dim 0 at its layer index) and the interface's padding mask, with
``cache: true`` (or ``past: true``), ``causal: true`` and the window its mask had; its keys and values are those
before the grouped heads' repeat, when they came through one. The nodes that computed the masks go, the
positions nodes' readers take ``position_ids``, and whatever no output reads any more goes (the repeats, the
mask's arithmetic), and what a decoding step would compute again for the same value (:mod:`._sdpa_fold`: a node
repeating an earlier one, a ``scale`` by 1); every other node, name, parameter and state_dict key is kept."""

from __future__ import annotations

from .._graph import Graph, split_ref
from ._cache_rewrite import CacheRewriter
from ._graph_edit import checked_by_name, insert_nodes, new_node, rename_refs
from ._sdpa_fold import drop_unit_scales, merge_repeats
from ._sdpa_pattern import FoundSdpa

__all__ = ["SdpaRewriter"]


class SdpaRewriter(CacheRewriter):
    """The sdpa nodes' cached form; :meth:`run` gives the variant's graph."""

    def run(self) -> Graph:
        g, a = self.g, self.a
        self._last_logits()
        for layer, found in enumerate(a.sdpas):
            self._rewire(found, layer)
        renames = {name: "position_ids" for name in a.positions}
        if a.position_input is not None:
            renames[a.position_input] = "position_ids"
        rename_refs(g, renames)
        if self.grow:
            self._present()
        self._drop_unread()
        # What a decoding step would compute again for the same value (sdpa_fold's module docstring).
        drop_unit_scales(g, checked_by_name(self.checked.nodes))
        merge_repeats(g)
        self._inputs()
        return g

    def _rewire(self, found: FoundSdpa, layer: int) -> None:
        g = self.g
        node = g.nodes[found.node.name]
        source_k, source_v = ("past_k", "past_v") if self.grow else ("cache_k", "cache_v")
        k = self._select(g, node.name, source_k, layer, "layer_k")
        v = self._select(g, node.name, source_v, layer, "layer_v")
        params = dict(node.params)
        params.update(masked=True, causal=True)
        if found.window is not None:
            params["window"] = found.window
        inputs = [*node.inputs[:1], found.k, found.v, "attention_mask", k.name, v.name]
        if self.grow:
            params["past"] = True
        else:
            params["cache"] = True
            inputs.append("offset")
        node.inputs, node.params = inputs, params
        if self.grow:
            rename_refs(g, {node.name: f"{node.name}.0"})
            self._start_collecting(k.name)
            all_k = new_node(g, "concat", "all_k", [self.acc[0], f"{node.name}.3"], dim=2)
            all_v = new_node(g, "concat", "all_v", [self.acc[1], f"{node.name}.4"], dim=2)
            insert_nodes(g, node.name, [all_k, all_v], after=True)
            self.acc = (all_k.name, all_v.name)

    def _drop_unread(self) -> None:
        """Remove the nodes no output is computed from (the masks' nodes, the grouped heads' repeats); a
        parameter node stays, its state_dict key with it."""
        g = self.g
        read: set[str] = set()
        todo = [split_ref(r)[0] for r in g.outputs]
        while todo:
            name = todo.pop()
            if name in read:
                continue
            read.add(name)
            if name in g.nodes:
                todo.extend(split_ref(r)[0] for r in g.nodes[name].inputs)
        g.nodes = {n: node for n, node in g.nodes.items() if n in read or node.op == "parameter"}
