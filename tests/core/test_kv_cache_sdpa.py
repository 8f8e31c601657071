"""``with_kv_cache`` on decoders whose attention is ``sdpa`` over keys and values projected by nodes of their own
(as an imported transformers decoder's is, here written by hand): the cached variant generates the tokens of
recomputing the whole sequence, and a graph off the recognised pattern is refused naming the node."""

from __future__ import annotations

import pytest
import torch

import hndl

SPEC = """
hndl: 1
name: sdpa_decoder
inputs:
  ids: {{shape: [B, T], dtype: int64}}
  padding: {{shape: [B, T], dtype: int64}}
nodes:
  emb: {{op: embedding, in: ids, num_embeddings: 50, embedding_dim: 32}}
  q_proj: {{op: linear, in: emb, out_features: 32}}
  k_proj: {{op: linear, in: emb, out_features: 16}}
  v_proj: {{op: linear, in: emb, out_features: 16}}
  q_heads: {{op: reshape, in: q_proj, shape: [4, 8], start_dim: 2}}
  q: {{op: transpose, in: q_heads, dim0: 1, dim1: 2}}
  k_heads: {{op: reshape, in: k_proj, shape: [2, 8], start_dim: 2}}
  k: {{op: transpose, in: k_heads, dim0: 1, dim1: 2}}
  v_heads: {{op: reshape, in: v_proj, shape: [2, 8], start_dim: 2}}
  v: {{op: transpose, in: v_heads, dim0: 1, dim1: 2}}
{mask}
  attn: {{op: sdpa, in: [q, k, v{mask_ref}], {attn}}}
  merged: {{op: transpose, in: attn, dim0: 1, dim1: 2}}
  flat: {{op: reshape, in: merged, shape: [32], start_dim: 2}}
  o_proj: {{op: linear, in: flat, out_features: 32}}
  res: {{op: add, in: [emb, o_proj]}}
{extra}
  head: {{op: linear, in: {last}, out_features: 50}}
outputs: [head]
"""

CAUSAL_MASK = """  key_at: {op: arange, in: padding}
  query_at: {op: reshape, in: key_at, shape: [-1, 1]}
  causal: {op: le, in: [key_at, query_at]}
  real: {op: cast, in: padding, dtype: bool}
  real_keys: {op: reshape, in: real, shape: [1, 1, -1], start_dim: 1}
  allowed: {op: logical_and, in: [real_keys, causal]}"""


def spec(mask: str = CAUSAL_MASK, attn: str = "masked: true", extra: str = "", last: str = "res") -> hndl.Graph:
    mask_ref = ", allowed" if mask else ""
    return hndl.loads(SPEC.format(mask=mask, mask_ref=mask_ref, attn=attn, extra=extra, last=last))


def recompute_greedy(m, ids: torch.Tensor, mask: torch.Tensor, steps: int) -> torch.Tensor:
    """The whole sequence through the plain model for each new token (positions do not enter this decoder)."""
    with torch.no_grad():
        for _ in range(steps):
            token = m(ids, mask)[:, -1].argmax(-1, keepdim=True)
            ids, mask = torch.cat([ids, token], dim=1), torch.cat([mask, torch.ones_like(token)], dim=1)
    return ids


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
def test_an_sdpa_decoder_with_a_computed_causal_padding_mask_generates_the_recomputed_tokens(kv_cache: str) -> None:
    torch.manual_seed(0)
    m = hndl.build(spec()).eval()
    ids = torch.randint(1, 50, (2, 6), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    ours = hndl.generate(m, ids, 8, attention_mask=mask, kv_cache=kv_cache)
    assert torch.equal(ours, recompute_greedy(m, ids, mask, 8))
    variant = hndl.generation.with_kv_cache(spec(), kv_cache)
    attn = variant.nodes["attn"]
    assert attn.params["causal"]
    assert attn.params["cache" if kv_cache == "static" else "past"]
    assert not {"key_at", "causal", "allowed"} & set(variant.nodes)  # the mask's nodes are gone


def test_an_sdpa_decoder_with_causal_true_and_no_mask_gets_the_cache() -> None:
    torch.manual_seed(0)
    graph = spec(mask="", attn="causal: true")
    m = hndl.build(graph).eval()
    ids = torch.randint(1, 50, (1, 5), generator=torch.Generator().manual_seed(2))
    assert torch.equal(hndl.generate(m, ids, 6), recompute_greedy(m, ids, torch.ones_like(ids), 6))


def test_an_sdpa_mask_that_is_not_causal_is_refused_naming_its_node() -> None:
    padding_only = """  real: {op: cast, in: padding, dtype: bool}
  allowed: {op: reshape, in: real, shape: [1, 1, -1], start_dim: 1}"""
    with pytest.raises(hndl.HndlError) as info:
        hndl.generation.with_kv_cache(spec(mask=padding_only))
    assert info.value.code == "E_INPUT"
    assert info.value.problems[0].node == "allowed"
    assert "not the causal padding mask" in str(info.value)


def test_an_sdpa_that_is_neither_causal_nor_masked_is_refused() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.generation.with_kv_cache(spec(mask="", attn="causal: false"))
    assert info.value.code == "E_INPUT"
    assert info.value.problems[0].node == "attn"
    assert "not causal" in str(info.value)


def test_a_node_mixing_tokens_beside_sdpa_is_refused_naming_it() -> None:
    extra = "  pooled: {op: mean, in: res, dim: [1], keepdim: true}\n  both: {op: add, in: [res, pooled]}"
    with pytest.raises(hndl.HndlError) as info:
        hndl.generation.with_kv_cache(spec(extra=extra, last="both"))
    assert info.value.code == "E_INPUT"
    assert info.value.problems[0].node == "pooled"
    assert "sequence dim" in str(info.value)


def test_a_value_computed_from_the_padding_outside_a_mask_is_refused() -> None:
    extra = "  count: {op: cast, in: padding, dtype: float32}\n  scaled: {op: mul, in: [res, count]}"
    with pytest.raises(hndl.HndlError) as info:
        hndl.generation.with_kv_cache(spec(extra=extra, last="scaled"))
    assert info.value.code == "E_INPUT"
    assert "other than the positions" in str(info.value)
