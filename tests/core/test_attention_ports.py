"""One map of an attention node's inputs (hndl.ops._attention_ports.AttentionPorts), read by inference, cost and
memory alike: it agrees with the op's declared ports, and the estimates read the ports the checker read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hndl
from hndl.ops._attention_ports import AttentionPorts

FLAGS = ("masked", "score_bias", "cache", "past", "position_ids")


@given(flags=st.fixed_dictionaries({name: st.booleans() for name in FLAGS}), kv=st.booleans())
def test_ports_follow_the_ops_declared_port_order(flags: dict[str, bool], kv: bool) -> None:
    declared = [p.name for p in hndl.registry.find("attention").active_inputs(flags)]
    if not kv:
        declared.remove("kv")
    ports = AttentionPorts.of(flags, len(declared))
    assert [(name, getattr(ports, name)) for name in declared] == [(name, i) for i, name in enumerate(declared)]
    absent = {"kv", "mask", "score_bias", "cache_k", "cache_v", "offset", "past_k", "past_v", "positions"}
    assert all(getattr(ports, name) is None for name in absent - set(declared))


def _rope_with_positions(position_ids: bool = True) -> hndl.Graph:
    g = hndl.Graph("rope_positions")
    x = g.input("x", ("B", "T", 32))
    inputs = [x, g.input("positions", ("B", "T"), dtype="int64")] if position_ids else [x]
    a = g.add("attention", inputs, name="attn", num_heads=4, rope={}, position_ids=position_ids, causal=True)
    g.output(g.add("linear", a, name="head", out_features=8))
    return g


def test_summary_of_attention_with_rope_and_position_ids_is_not_an_index_error() -> None:
    # Was: hndl.check passed, then the cost rule counted the inputs itself, took the positions for a kv input and
    # failed with IndexError: tuple index out of range.
    graph = _rope_with_positions()
    hndl.check(graph)
    table = hndl.summary(graph, B=2, T=16)
    model = hndl.build(graph)
    assert table.trainable_params == sum(p.numel() for p in model.parameters())
    # Self-attention: 4 projections of 16 x 32 x 32 MACs each at B=2, T=16, then 2 x (2 x 4 x 16 x 16 x 8).
    attn = next(row for row in table.rows if row.name == "attn")
    assert attn.macs == 4 * 32 * 32 * 32 + 2 * (2 * 4 * 16 * 16 * 8)


def test_memory_estimate_reads_the_positions_as_positions_not_as_keys() -> None:
    # The memory rule counted the inputs itself and took the positions [B, T] for a kv input: the estimate must be
    # the same as for the same attention computing its own positions.
    def smallest_budget(graph: hndl.Graph) -> str:
        with pytest.raises(hndl.HndlError, match="smallest feasible budget") as caught:
            hndl.build(graph).checkpointing(budget=1, B=2, T=16)
        return str(caught.value).split("smallest feasible budget is ")[1].split(" bytes")[0]

    assert smallest_budget(_rope_with_positions()) == smallest_budget(_rope_with_positions(position_ids=False))


def test_a_missing_port_is_a_lookup_error_not_a_wrong_tensor() -> None:
    ports = AttentionPorts.of({"masked": True}, 2)
    assert ports.take(["x", "mask"], "mask") == "mask"
    with pytest.raises(LookupError, match="no past_k"):
        ports.take(["x", "mask"], "past_k")
