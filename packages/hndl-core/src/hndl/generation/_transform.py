"""``with_kv_cache`` on a graph: the decoder with the static or growing cache interface (SPEC 17.5), derived from
any graph whose attention is causal self-attention, every node name, parameter and state_dict key kept. The
attention is hndl's ``attention`` op (the zoo's decoders, hand-written specs: :mod:`._attention_analysis`,
:mod:`._attention_rewrite`) or ``sdpa`` over keys and values projected by nodes of their own, its mask and
positions computed from the inputs (an imported transformers decoder: :mod:`._sdpa_pattern`,
:mod:`._sdpa_rewrite`); :mod:`._cache_rewrite` holds what both rewrites share, :mod:`._token_rules` the nodes
that act on each token alone.

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
- for an ``sdpa`` decoder (:mod:`._sdpa_fold`): nodes that repeat an earlier one (same weightless op,
  parameters and inputs: transformers' per-layer ``unsqueeze`` of one rotary table) and ``scale`` by 1 of a
  floating value go, their readers taking the value they would have made bit for bit.

Anything the variant would compute differently is refused (``E_INPUT`` naming the node and why): the cached call
runs only the new tokens, so a node that mixes tokens other than through attention (a ``mean`` over T, a
``conv1d``, a recurrent op, an op not known to act on each token alone), an attention that is not causal
self-attention, a mask that is not the padding mask, or an input the interface has no place for.
"""

from __future__ import annotations

from .._graph import Graph

__all__ = ["KINDS", "transform"]

#: The kinds of key/value cache: ``"static"`` (preallocated, written in place), ``"grow"`` (concatenated);
#: ``hndl.zoo.KV_CACHE_KINDS`` repeats them for the zoo's torch-free import (a test holds the two equal).
KINDS = ("static", "grow")


def _ops_in(graph: Graph) -> set[str]:
    return {node.op for g in (graph, *graph.graphs.values()) for node in g.nodes.values()}


def transform(graph: Graph, kind: str) -> Graph:
    """``graph`` (a plain decoder) with the cache interface of ``kind``: see the module docstring.

    Raises:
        HndlError: the checker's problems for a graph that does not check; E_INPUT naming the node for anything
            the cached variant would compute differently.
    """
    from .._check import check
    from ._graph_edit import refuse

    checked = check(graph)
    ops = _ops_in(graph)
    if "sdpa" in ops and "attention" in ops:
        raise refuse(
            "the graph has both attention and sdpa nodes; the variant maps a decoder written with one of them",
            hint="write every layer's attention the same way",
        )
    if not ops & {"sdpa", "attention"}:
        # Said first: the per-token rule would otherwise name whichever node it met first (an ``arange``).
        raise refuse(
            "the graph has no attention node and no sdpa node; the cached variant caches their keys and values (attention "
            "written out as matmul, a masked softmax and matmul is not recognised)",
            expected="a decoder whose attention is attention or sdpa nodes",
            hint="write the attention as F.scaled_dot_product_attention(q, k, v, is_causal=True) (an sdpa node) or "
            "an attention node",
        )
    if "sdpa" in ops:
        from ._sdpa_pattern import analyze
        from ._sdpa_rewrite import SdpaRewriter

        result = SdpaRewriter(graph, checked, analyze(graph, checked), kind).run()
    else:
        from ._attention_analysis import AttentionAnalyzer, count_layers
        from ._attention_rewrite import AttentionRewriter

        analysis = AttentionAnalyzer(graph, checked).run()
        analysis.layers = count_layers(analysis, checked)
        result = AttentionRewriter(graph, checked, analysis, kind).run()
    result.source = graph.source
    return result
