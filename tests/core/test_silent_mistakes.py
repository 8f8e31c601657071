"""Mistakes that have the right shapes and the wrong meaning (issue 38), each caught before any layer runs or
warned about by the checker:

| mistake | caught as |
|---|---|
| a ``[T, T]`` mask fed to ``attention`` (read as ``[B, S]`` when ``B == T``) | E_SHAPE, statically |
| a sequence longer than a learned position table | E_INPUT before any layer (E_SHAPE for an int size) |
| ``causal: true`` forgotten in a model declared ``kind: decoder`` | a W_CAUSAL warning |
| rotary over the full head, or 6 dims instead of 8, against a declared fraction | a W_ROTARY warning |

Rotary dims with no declared fraction (no ``partial_rotary_factor``/``rotary_pct`` parameter) are indistinguishable:
any even number of dims up to the head dim is a valid rotary embedding. A mask whose shape inference does not
know (made by a ``module`` node, or an input declared ``[*dims]``) is read as ``[B, S]``; at ``B == T`` its sizes
cannot tell the two readings apart, and at ``B != T`` torch refuses it (E_RUNTIME naming the mask port).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import hndl
from hndl.cli import main


def _masked(mask_shape: list, x_shape: list | None = None) -> hndl.Graph:
    g = hndl.Graph("clip_like")
    x = g.input("x", x_shape or ["B", "T", 32])
    mask = g.input("mask", mask_shape, dtype="float")
    g.output(g.add("attention", [x, mask], num_heads=4, masked=True, name="attn"))
    return g


# --- the mask's contract ------------------------------------------------------------------------------------


def test_tt_mask_read_as_padding_mask_is_refused_statically() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(_masked(["T", "T"]))
    err = info.value
    assert err.code == "E_SHAPE"
    assert err.node == "attn"
    assert err.port == "mask"
    text = str(err)
    assert "read as a padding mask [B, S]" in text
    assert "dim 0 is T, not the batch B" in text
    assert "[1, 1, T, S]" in text
    assert "expand" in text
    assert "causal: true" in text


def test_th_mask_of_rank_3_whose_first_dim_is_not_the_batch_is_refused() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(_masked(["H", "T", "T"]))
    assert info.value.code == "E_SHAPE"
    assert "dim 0 is H, not the batch B" in str(info.value)


def test_tt_mask_declared_at_rank_4_is_shared_by_the_batch_and_matches_at_b_equal_t() -> None:
    torch.manual_seed(0)
    model = hndl.build(_masked([1, 1, "T", "T"]))
    x = torch.randn(5, 5, 32)
    causal = torch.zeros(5, 5).masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), float("-inf"))
    got = model(x, causal[None, None])
    g = hndl.Graph("ref")
    gx = g.input("x", ["B", "T", 32])
    g.output(g.add("attention", gx, num_heads=4, causal=True, name="attn"))
    reference = hndl.build(g)
    reference.load_state_dict(model.state_dict())
    torch.testing.assert_close(got, reference(x))


def test_tt_mask_through_expand_is_accepted() -> None:
    g = hndl.Graph("expanded")
    x = g.input("x", ["B", "T", 32])
    mask = g.input("mask", ["T", "T"], dtype="float")
    wide = g.add("expand", mask, shape=[1, 1, -1, -1])
    g.output(g.add("attention", [x, wide], num_heads=4, masked=True))
    hndl.check(g)


@pytest.mark.parametrize("shape", [["B", "T"], [1, "T"], ["B", "T", "T"], ["B", 1, "T", "T"]])
def test_padding_and_batch_masks_still_check(shape: list) -> None:
    hndl.check(_masked(shape))


def test_sdpa_tt_mask_is_refused_statically() -> None:
    g = hndl.Graph("sdpa")
    q = g.input("q", ["B", 4, "T", 8])
    mask = g.input("mask", ["T", "T"], dtype="bool")
    g.output(g.add("sdpa", [q, q, q, mask], masked=True))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert info.value.code == "E_SHAPE"
    assert info.value.port == "mask"


def test_mask_of_unknown_shape_at_b_not_t_names_the_mask_port() -> None:
    model = hndl.build(_masked(["*dims"]))
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 5, 32), torch.zeros(5, 5))
    assert info.value.code == "E_RUNTIME"
    assert "mask [5, 5]" in str(info.value)
    assert "kv [5, 5]" not in str(info.value)


# --- a position table's size is an input contract ---------------------------------------------------------


def _gpt2(**params: object) -> hndl.Graph:
    return hndl.zoo.get("gpt2", n_positions=16, n_layer=1, n_embd=32, n_head=2, vocab_size=50, **params)


def test_sequence_longer_than_position_table_is_e_input_before_any_layer() -> None:
    model = hndl.build(_gpt2())
    with pytest.raises(hndl.HndlError) as info:
        model(torch.zeros(1, 17, dtype=torch.long))
    err = info.value
    assert err.code == "E_INPUT"
    assert err.node == "tokens"
    assert "T <= 16" in str(err)
    assert "embedding 'wpe' has 16 rows" in str(err)
    assert err.__cause__ is None  # refused by the contract, not by the layer
    assert model(torch.zeros(1, 16, dtype=torch.long)).shape == (1, 16, 50)


def test_position_table_range_is_derived_not_written_to_the_dump() -> None:
    graph = _gpt2()
    checked = hndl.check(graph)
    (limit,) = checked.contracts[0].ranges
    assert (limit.symbol, limit.maximum) == ("T", 16)
    assert "ranges" not in hndl.dumps(graph)
    assert hndl.check(hndl.loads(hndl.dumps(graph))).contracts[0].ranges == (limit,)


def test_position_table_keeps_a_tighter_range_given_by_hand() -> None:
    g = hndl.Graph("tight")
    tokens = g.input("tokens", ["B", "T"], dtype="int64", ranges={"T": {"max": 8}})
    pos = g.add("positions", tokens, dim=1)
    g.output(g.add("embedding", pos, num_embeddings=16, embedding_dim=4))
    (limit,) = hndl.check(g).contracts[0].ranges
    assert limit.maximum == 8
    assert limit.why is None


def test_int_sequence_longer_than_position_table_is_e_shape() -> None:
    g = hndl.Graph("fixed")
    tokens = g.input("tokens", [2, 20], dtype="int64")
    pos = g.add("positions", tokens, dim=1, name="pos")
    g.output(g.add("embedding", pos, num_embeddings=16, embedding_dim=4, name="wpe"))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert info.value.code == "E_SHAPE"
    assert info.value.node == "wpe"
    assert "20 positions" in str(info.value)
    assert "16 rows" in str(info.value)


# --- what a model declares it is ---------------------------------------------------------------------------


_DECODER = """
hndl: 1
name: tiny_decoder
kind: decoder
params: {causal: true, partial_rotary_factor: 0.25, dims: 4}
inputs:
  x: {shape: [B, T, 64]}
nodes:
  attn: {op: attention, in: x, num_heads: 4, causal: $causal, rope: {dims: $dims}}
outputs: [attn]
"""


def test_decoder_with_causal_attention_and_matching_rotary_dims_has_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", hndl.HndlWarning)
        assert hndl.check(hndl.loads(_DECODER)).warnings == []


def test_causal_forgotten_in_a_decoder_warns() -> None:
    graph = hndl.loads(_DECODER, params={"causal": False})
    with pytest.warns(hndl.HndlWarning, match="declared a decoder"):
        checked = hndl.check(graph)
    (problem,) = checked.warnings
    assert problem.code == "W_CAUSAL"
    assert problem.node == "attn"
    assert "causal: true" in (problem.hint or "")


@pytest.mark.parametrize(("dims", "said"), [(16, "rope's dims 16"), (6, "rope's dims 6")])
def test_rotary_dims_disagreeing_with_declared_fraction_warn(dims: int, said: str) -> None:
    # NeoX: rotary over the whole head (16) where rotary_pct 0.25 rotates 4; Phi: 6 dims where 8 were meant.
    text = _DECODER.replace(
        "partial_rotary_factor: 0.25", "partial_rotary_factor: 0.5" if dims == 6 else "rotary_pct: 0.25"
    )
    with pytest.warns(hndl.HndlWarning, match="rotate"):
        checked = hndl.check(hndl.loads(text, params={"dims": dims}))
    (problem,) = checked.warnings
    assert problem.code == "W_ROTARY"
    assert said in problem.message
    assert problem.expected.endswith(f"= {16 // (2 if dims == 6 else 4)} dims")


def test_causal_attention_in_a_declared_encoder_warns() -> None:
    text = _DECODER.replace("kind: decoder", "kind: encoder")
    with pytest.warns(hndl.HndlWarning, match="declared an encoder"):
        hndl.check(hndl.loads(text))


def test_unknown_kind_is_e_spec() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(_DECODER.replace("kind: decoder", "kind: decodr"))
    assert info.value.code == "E_SPEC"
    assert "decoder" in str(info.value)


def test_kind_survives_a_dump() -> None:
    assert hndl.loads(hndl.dumps(hndl.loads(_DECODER))).kind == "decoder"


def test_decoder_mask_made_causal_by_attention_mask_through_a_repeated_block_has_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", hndl.HndlWarning)
        for name in ("gpt2", "llama", "mistral"):
            assert hndl.check(hndl.zoo.get(name)).warnings == [], name


def test_decoder_with_non_causal_attention_mask_warns_once_per_repeated_block() -> None:
    graph = hndl.zoo.get("llama")
    graph.nodes["mask"].params["causal"] = False
    with pytest.warns(hndl.HndlWarning):
        checked = hndl.check(graph)
    assert [p.node for p in checked.warnings] == ["layers.0.self_attn"]


def test_hndl_check_prints_warning_lines(tmp_path, capsys) -> None:
    spec = tmp_path / "decoder.yaml"
    spec.write_text(_DECODER.replace("causal: true,", "causal: false,"))
    assert main(["check", str(spec)]) == 0
    out = capsys.readouterr().out
    assert "W_CAUSAL attention 'attn'" in out
    assert "OK (1 node, 1 warning)" in out
