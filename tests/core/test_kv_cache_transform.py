"""``hndl.generation.with_kv_cache`` on a graph: the cached variant of any causal decoder (the zoo's three and two
hand-written ones under examples/), equal to the plain model step by step and in greedy tokens, and an E_INPUT
naming the node for each graph it cannot map soundly.

Tokens are compared with ``torch.equal`` against the plain model recomputing each row alone (its padding
stripped) for every new token; logits with ``assert_close(atol=1e-5)`` (the cached call attends over the cache's
slots with a mask, the plain one over T keys: the kernels sum in another order, test_kv_cache.py).
"""

from __future__ import annotations

import pathlib

import pytest
import torch

import hndl
from hndl.generation import cache_layout, with_kv_cache

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
GPT2 = dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32)
DECODERS = ["gpt2", "llama", "mistral", "tiny_qwen2_decoder", "tiny_gpt_decoder"]


def plain_graph(name: str) -> hndl.Graph:
    if name.startswith("tiny_"):
        return hndl.load(EXAMPLES / f"{name}.yaml")
    return hndl.zoo.get(name, **(GPT2 if name == "gpt2" else {}))


def plain_model(name: str):
    torch.manual_seed(0)
    return hndl.build(plain_graph(name)).eval()


def full_logits(m, ids: torch.Tensor) -> torch.Tensor:
    """Every position's logits of the plain model, ``ids`` without padding."""
    if "attention_mask" in m.graph.inputs:
        return m(ids, torch.ones_like(ids, dtype=torch.bool))
    return m(ids)


def recompute_greedy(m, ids: torch.Tensor, steps: int) -> torch.Tensor:
    """The loop people write without a cache: the whole sequence through the plain model for each token."""
    with torch.no_grad():
        for _ in range(steps):
            ids = torch.cat([ids, full_logits(m, ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids


def vocab(m) -> int:
    head = "lm_head" if "lm_head" in m.graph.nodes else "head"
    return m.layer(head).out_features


@pytest.mark.parametrize("kind", ["static", "grow"])
@pytest.mark.parametrize("name", DECODERS)
def test_generate_with_left_padding_equals_recomputing_each_row_alone(name: str, kind: str) -> None:
    m = plain_model(name)
    gen = torch.Generator().manual_seed(3)
    rows = [torch.randint(0, vocab(m), (1, n), generator=gen) for n in (6, 3, 4)]
    ids = torch.cat([torch.cat([torch.zeros(1, 6 - r.shape[1], dtype=torch.long), r], dim=1) for r in rows])
    mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1]])
    out = hndl.generate(m, ids, 8, attention_mask=mask, kv_cache=kind)
    for i, row in enumerate(rows):
        assert torch.equal(out[i, 6 - row.shape[1] :], recompute_greedy(m, row, 8)[0])


@pytest.mark.parametrize("kind", ["static", "grow"])
@pytest.mark.parametrize("name", DECODERS)
def test_the_variants_logits_equal_the_plain_models_at_each_step(name: str, kind: str) -> None:
    m = plain_model(name)
    step = with_kv_cache(m, kind)
    layout = cache_layout(step)
    ids = torch.randint(0, vocab(m), (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = full_logits(m, ids)
        if kind == "static":
            ck = torch.zeros(layout.shape(2, 9))
            cv = torch.zeros_like(ck)
            slots = torch.ones(2, 9, dtype=torch.bool)
            for start, end in ((0, 5), (5, 6), (6, 7), (7, 9)):
                positions = torch.arange(start, end).expand(2, -1)
                logits = step(ids[:, start:end], positions, slots, torch.tensor(start), ck, cv)
                torch.testing.assert_close(logits, full[:, end - 1], atol=1e-5, rtol=1e-5)
        else:
            past_k = past_v = torch.zeros(layout.shape(2, 0))
            for start, end in ((0, 5), (5, 6), (6, 7), (7, 9)):
                positions = torch.arange(start, end).expand(2, -1)
                real = torch.ones(2, end, dtype=torch.bool)
                logits, past_k, past_v = step(ids[:, start:end], positions, real, past_k, past_v)
                torch.testing.assert_close(logits, full[:, end - 1], atol=1e-5, rtol=1e-5)
            assert past_k.shape == layout.shape(2, 9)


@pytest.mark.parametrize("kind", ["static", "grow"])
@pytest.mark.parametrize("name", DECODERS)
def test_the_variant_of_a_graph_keeps_every_state_dict_key(name: str, kind: str) -> None:
    graph = plain_graph(name)
    variant = with_kv_cache(graph, kind)
    assert isinstance(variant, hndl.Graph)
    plain, cached = hndl.build(graph), hndl.build(variant)
    assert {k: v.shape for k, v in plain.state_dict().items()} == {k: v.shape for k, v in cached.state_dict().items()}
    cached.load_state_dict(plain.state_dict())  # strict: the plain weights load unchanged
    assert list(graph.inputs) == list(plain_graph(name).inputs)  # the plain graph is left as it was


@pytest.mark.parametrize("kind", ["static", "grow"])
@pytest.mark.parametrize("name", ["gpt2", "llama", "mistral"])
def test_the_zoos_cached_variant_is_the_transform_of_the_plain_entry(name: str, kind: str) -> None:
    sizes = GPT2 if name == "gpt2" else {"num_hidden_layers": 3}
    assert hndl.dumps(hndl.zoo.get(name, kv_cache=kind, **sizes)) == hndl.dumps(
        with_kv_cache(hndl.zoo.get(name, **sizes), kind)
    )
    assert hndl.zoo.get(name, kv_cache=kind, last_logits=False).params["last_logits"] is False
    hndl.check(hndl.loads(hndl.zoo.kv_cache_spec_text(name, kind)))  # the text round-trips


def test_a_hand_written_decoder_generates_from_its_spec_file_directly() -> None:
    # The report: hndl.generate on a hand-written decoder was "no key/value cache interface".
    m = hndl.build(hndl.load(EXAMPLES / "tiny_qwen2_decoder.yaml")).eval()
    ids = torch.randint(0, 128, (2, 4), generator=torch.Generator().manual_seed(5))
    assert torch.equal(hndl.generate(m, ids, 10), recompute_greedy(m, ids, 10))


# --- refusals ---------------------------------------------------------------------------------------------


def decoder(attention: dict | None = None, extra: str = "", inputs: str = "", nodes: str = "") -> hndl.Graph:
    """A one-block decoder whose attention node and surroundings the refusal tests vary."""
    params = {"num_heads": 4, "causal": True, **(attention or {})}
    flow = ", ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items())
    return hndl.loads(f"""
hndl: 1
name: d
inputs:
  ids: {{shape: [B, T], dtype: int64}}
{inputs}
nodes:
  tok:  {{op: embedding, in: ids, num_embeddings: 50, embedding_dim: 32}}
{nodes}
  blk:  {{op: graph, graph: block, in: tok}}
  head: {{op: linear, in: blk, out_features: 50}}
outputs: [head]
graphs:
  block:
    inputs:
      x: {{shape: [B, T, 32]}}
{extra}
    nodes:
      attn: {{op: attention, in: [x{", kv" if "kv" in extra else ""}], {flow}}}
      res:  {{op: add, in: [x, attn]}}
    outputs: [res]
""")


def refusal(graph: hndl.Graph, kind: str = "static") -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as err:
        with_kv_cache(graph, kind)
    problem = err.value.problems[0]
    assert problem.code == "E_INPUT"
    return problem


def test_a_valid_one_block_decoder_is_mapped() -> None:
    assert list(with_kv_cache(decoder()).inputs) == [
        "ids",
        "position_ids",
        "attention_mask",
        "offset",
        "cache_k",
        "cache_v",
    ]


@pytest.mark.parametrize("kind", ["static", "grow"])
def test_a_non_causal_attention_is_refused_naming_it(kind: str) -> None:
    problem = refusal(decoder({"causal": False}), kind)
    assert problem.node == "blk.attn"
    assert "not causal" in problem.message


def test_cross_attention_is_refused() -> None:
    g = hndl.loads(
        hndl.dumps(decoder())
        .replace("in: [x]", "in: [x, x]")
        .replace("attn: {op: attention, in: x,", "attn: {op: attention, in: [x, x],")
    )
    problem = refusal(g)
    assert problem.node == "blk.attn"
    assert "cross-attention" in problem.message


def test_a_score_bias_is_refused() -> None:
    g = hndl.Graph("d")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    x = g.add("embedding", ids, name="tok", num_embeddings=50, embedding_dim=32)
    bias = g.add("relative_position_bias", x, name="bias", num_heads=4)
    g.output(g.add("attention", [x, bias], name="attn", num_heads=4, causal=True, score_bias=True))
    problem = refusal(g)
    assert problem.node == "bias"  # the bias is made for T queries and T keys: refused where it is made
    assert "not known to act on each token alone" in problem.message


def test_a_mean_over_the_sequence_is_refused() -> None:
    g = hndl.Graph("d")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    x = g.add("embedding", ids, name="tok", num_embeddings=50, embedding_dim=32)
    pooled = g.add("mean", x, name="pool", dim=[1], keepdim=True)
    y = g.add("add", [x, pooled], name="mix")
    y = g.add("attention", y, name="attn", num_heads=4, causal=True)
    g.output(g.add("linear", y, name="head", out_features=50))
    problem = refusal(g)
    assert problem.node == "pool"
    assert "sequence dim T" in problem.message


def test_an_op_not_known_to_act_per_token_is_refused() -> None:
    g = hndl.Graph("d")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    x = g.add("embedding", ids, name="tok", num_embeddings=50, embedding_dim=32)
    x = g.add("attention", x, name="attn", num_heads=4, causal=True)
    x = g.add("lstm", x, name="rnn", hidden_size=32)
    g.output(g.add("linear", x, name="head", out_features=50))
    problem = refusal(g)
    assert problem.node == "rnn"
    assert "'lstm'" in problem.message


def test_positions_read_other_than_by_a_position_embedding_are_refused() -> None:
    g = hndl.Graph("d")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    x = g.add("embedding", ids, name="tok", num_embeddings=50, embedding_dim=32)
    pos = g.add("positions", ids, name="pos", dim=1)
    scaled = g.add("cast", pos, name="as_float", dtype="float32")
    x = g.add("attention", x, name="attn", num_heads=4, causal=True)
    g.output(g.add("linear", g.add("add", [x, g.add("reshape", scaled, shape=[-1, 1])]), out_features=50))
    problem = refusal(g)
    assert problem.node == "as_float"
    assert "position embedding" in problem.message


def test_an_input_the_interface_has_no_place_for_is_refused() -> None:
    g = hndl.Graph("d")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    types = g.input("token_type_ids", ("B", "T"), dtype="int64")
    x = g.add("add", [g.add("embedding", ids, num_embeddings=50, embedding_dim=32),
                      g.add("embedding", types, num_embeddings=2, embedding_dim=32)])  # fmt: skip
    g.output(g.add("linear", g.add("attention", x, num_heads=4, causal=True), out_features=50))
    problem = refusal(g)
    assert problem.node == "token_type_ids"
    assert "no place for it" in problem.message


def test_a_mask_that_is_not_the_padding_mask_is_refused() -> None:
    g = hndl.Graph("d")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    bias = g.input("bias", ("B", 1, "T", "T"))
    x = g.add("embedding", ids, num_embeddings=50, embedding_dim=32)
    g.output(g.add("linear", g.add("attention", [x, bias], name="attn", num_heads=4, causal=True, masked=True),
                   out_features=50))  # fmt: skip
    problem = refusal(g)
    assert problem.node == "attn"
    assert "not from a padding mask input" in problem.message


def test_two_outputs_and_token_ids_without_a_symbolic_length_are_refused() -> None:
    g = decoder()
    g.output("tok")
    assert "2 outputs" in refusal(g).message
    fixed = hndl.loads(hndl.dumps(decoder()).replace("ids: {shape: [B, T]", "ids: {shape: [B, 7]"))
    assert "symbolic B and T" in refusal(fixed).message


def test_a_subgraph_with_attention_used_twice_is_refused() -> None:
    text = hndl.dumps(decoder()).replace(
        "  head: {op: linear, in: blk,", "  blk2: {op: graph, graph: block, in: blk}\n  head: {op: linear, in: blk2,"
    )
    problem = refusal(hndl.loads(text))
    assert "used by 2 nodes" in problem.message


def test_an_unknown_kind_is_an_e_param() -> None:
    with pytest.raises(hndl.HndlError) as err:
        with_kv_cache(decoder(), "paged")
    assert err.value.problems[0].code == "E_PARAM"
    assert "'static'" in err.value.problems[0].expected


def test_generate_on_a_refused_decoder_names_the_node_before_any_call() -> None:
    m = hndl.build(decoder({"causal": False})).eval()
    with pytest.raises(hndl.HndlError) as err:
        hndl.generate(m, torch.zeros(1, 3, dtype=torch.long), 2)
    assert err.value.problems[0].node == "blk.attn"
    assert m.validations == 0


def test_the_zoo_names_the_same_cache_kinds_as_generation() -> None:
    # hndl.zoo keeps its own copy (it imports no torch, and hndl.generation does); the two must agree.
    from hndl.generation._transform import KINDS

    assert hndl.zoo.KV_CACHE_KINDS == KINDS
