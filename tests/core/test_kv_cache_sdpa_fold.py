"""The cached variant of an ``sdpa`` decoder leaves out what a decoding step would compute again for the same value
(``generation/_sdpa_fold.py``): a node repeating an earlier one (op, parameters, inputs) and ``scale`` by 1 on a
floating input. The variant's logits are bit for bit those of the variant without the folds, and the tokens
those of recomputing the whole sequence; nodes with weights of their own, and a scale that casts, stay."""

from __future__ import annotations

import pytest
import torch

import hndl
import hndl.generation._sdpa_rewrite as sdpa_rewrite

SPEC = """
hndl: 1
name: repeats
inputs:
  ids: {shape: [B, T], dtype: int64}
nodes:
  emb: {op: embedding, in: ids, num_embeddings: 50, embedding_dim: 32}
  q_proj: {op: linear, in: emb, out_features: 32}
  k_proj: {op: linear, in: emb, out_features: 16}
  v_proj: {op: linear, in: emb, out_features: 16}
  q_heads: {op: reshape, in: q_proj, shape: [4, 8], start_dim: 2}
  q: {op: transpose, in: q_heads, dim0: 1, dim1: 2}
  k_heads: {op: reshape, in: k_proj, shape: [2, 8], start_dim: 2}
  k: {op: transpose, in: k_heads, dim0: 1, dim1: 2}
  v_heads: {op: reshape, in: v_proj, shape: [2, 8], start_dim: 2}
  v: {op: transpose, in: v_heads, dim0: 1, dim1: 2}
  attn: {op: sdpa, in: [q, k, v], causal: true}
  merged: {op: transpose, in: attn, dim0: 1, dim1: 2}
  flat: {op: reshape, in: merged, shape: [32], start_dim: 2}
  twin_a: {op: reshape, in: flat, shape: [2, 16], start_dim: 2}
  twin_b: {op: reshape, in: flat, shape: [2, 16], start_dim: 2}
  unit: {op: scale, in: twin_b, factor: 1.0}
  both: {op: add, in: [twin_a, unit]}
  joined: {op: reshape, in: both, shape: [32], start_dim: 2}
  count: {op: scale, in: ids, factor: 1.0}
  count_col: {op: reshape, in: count, shape: [1], start_dim: 2}
  weighted: {op: mul, in: [joined, count_col]}
  head: {op: linear, in: weighted, out_features: 50}
outputs: [head]
"""


def _unfolded(graph: hndl.Graph, kind: str, monkeypatch: pytest.MonkeyPatch) -> hndl.Graph:
    with monkeypatch.context() as patch:
        patch.setattr(sdpa_rewrite, "merge_repeats", lambda graph: 0)
        patch.setattr(sdpa_rewrite, "drop_unit_scales", lambda graph, checked: 0)
        return hndl.generation.with_kv_cache(graph, kind)


@pytest.mark.parametrize("kind", ["static", "grow"])
def test_repeated_nodes_and_unit_scales_go_and_the_logits_stay_bit_for_bit(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = hndl.loads(SPEC)
    folded = hndl.generation.with_kv_cache(graph, kind)
    unfolded = _unfolded(graph, kind, monkeypatch)
    assert {"twin_b", "unit"} <= set(unfolded.nodes)
    assert not {"twin_b", "unit"} & set(folded.nodes)
    assert folded.nodes["both"].inputs == ["twin_a", "twin_a"]
    # Two linear nodes on one input (k_proj, v_proj) have their own weights; a scale by 1 of int64 ids casts.
    assert {"k_proj", "v_proj", "count"} <= set(folded.nodes)
    torch.manual_seed(0)
    plain = hndl.build(graph).eval()
    a, b = hndl.build(folded).eval(), hndl.build(unfolded).eval()
    a.load_state_dict(plain.state_dict())
    b.load_state_dict(plain.state_dict())
    assert a.state_dict().keys() == plain.state_dict().keys()
    ids = torch.randint(1, 50, (2, 5), generator=torch.Generator().manual_seed(1))
    layout = hndl.generation.cache_layout(a)
    cache = layout.shape(2, 0 if kind == "grow" else 8)
    inputs = {
        "position_ids": torch.arange(5).expand(2, 5),
        "attention_mask": torch.ones(2, 5 if kind == "grow" else 8, dtype=torch.bool),
        "offset": torch.tensor(0),
    }
    with torch.no_grad():
        outs = []
        for m in (a, b):
            state = {**inputs, "cache_k": torch.zeros(cache), "cache_v": torch.zeros(cache)}
            state.update(past_k=state["cache_k"], past_v=state["cache_v"])
            out = m(ids, *(state[name] for name in list(m.graph.inputs)[1:]))
            outs.append(out[0] if isinstance(out, tuple) else out)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("kind", ["static", "grow"])
def test_the_folded_variant_generates_the_recomputed_tokens(kind: str) -> None:
    torch.manual_seed(0)
    m = hndl.build(hndl.loads(SPEC)).eval()
    ids = torch.randint(1, 50, (1, 4), generator=torch.Generator().manual_seed(2))
    expected = ids
    with torch.no_grad():
        for _ in range(6):
            expected = torch.cat([expected, m(expected)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(hndl.generate(m, ids, 6, kv_cache=kind), expected)
