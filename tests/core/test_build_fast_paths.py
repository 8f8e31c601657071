"""Issue 35 (build time per node): the shortcuts the build takes for the common case answer as the long way does.

Each test pins one shortcut against what it stands in for: the stores record past the unroll limit (no term text
built) holds the same facts as the unrolled one; the activation-wrapper test that looks at the child slot first
still sees a wrapper and nothing else; the fixed-dims pass skips ops whose patterns name no dim and still fixes
the dims of the others; a node with nothing to bind comes back as it is; requirements are still collected per node.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl
from hndl._infer import fixed_dims
from hndl._param_binding import bind_node
from hndl.torch import _guards
from hndl.torch._activation_wrappers import is_activation_wrapper, unwrap


def _mlp() -> hndl.Graph:
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 8))
    h = g.add("linear", x, out_features=16, name="hidden")
    h = g.add("relu", h, name="act")
    g.output(g.add("linear", h, out_features=4, name="out"))
    return g


_FACTS = (
    "modules",
    "types",
    "module_dicts",
    "parameter_stores",
    "buffer_stores",
    "module_stores",
    "live",
    "copies",
    "empty",
    "submodules",
    "submodule_values",
    "keyed",
    "keys",
    "tensors",
    "nones",
    "shapes",
    "dtypes",
    "instance_dicts",
    "attr_counts",
)


def test_the_record_past_the_unroll_limit_holds_the_facts_the_unrolled_one_holds(monkeypatch):
    model = hndl.build(_mlp())
    leaves = [m for m in model.modules() if not list(m.children())]
    unrolled = _guards.take_record(model, leaves)
    monkeypatch.setattr(_guards, "UNROLL_LIMIT", 0)
    precise = _guards.take_record(model, leaves)
    assert any(t.startswith("type(r_m") for t in unrolled.terms)
    assert precise.terms == tuple(g.source for g in _guards.PRECISE)
    assert not any(name.startswith("r_") for name in precise.namespace)
    for fact in _FACTS:
        assert precise.namespace[fact] == unrolled.namespace[fact], fact
    assert precise.counts == unrolled.counts
    assert precise.tensor_slots == unrolled.tensor_slots
    assert precise.tensor_ids == unrolled.tensor_ids
    assert precise.keyed == unrolled.keyed
    for record in (precise, unrolled):
        assert record.matches()
        assert record.fast_matches()
    model.nodes.n_out.register_forward_hook(lambda *a: None)  # a hook on a node's layer: both forms see it
    for record in (precise, unrolled):
        assert not record.matches()
        assert not record.fast_matches()


def test_an_activation_wrapper_is_seen_through_and_a_module_with_its_child_name_is_not():
    wrappers = pytest.importorskip("torch.distributed.algorithms._checkpoint.checkpoint_wrapper")
    layer = nn.Linear(2, 2)
    wrapped = wrappers.checkpoint_wrapper(layer)
    assert is_activation_wrapper(wrapped)
    assert unwrap(wrappers.checkpoint_wrapper(wrapped)) is layer
    impostor = nn.Module()
    impostor.add_module(wrappers._CHECKPOINT_WRAPPED_MODULE, layer)  # the slot, but no wrapper
    assert not is_activation_wrapper(impostor)
    assert unwrap(impostor) is impostor
    for value in (None, 3, "x", nn.ReLU(), object()):
        assert not is_activation_wrapper(value)


def test_fixed_dims_skip_elementwise_ops_and_still_fix_the_dims_of_sized_ones():
    g = hndl.Graph("fix")
    x = g.input("x", ("B", "D"))
    h = g.add("relu", x, name="act")
    g.output(g.add("linear", h, in_features=16, out_features=4, name="fc"))
    checked = hndl.check(g)
    act, fc = checked.nodes
    assert fixed_dims(act.opdef, act.params, act.in_types) == []
    fixed = fixed_dims(fc.opdef, fc.params, fc.in_types)
    assert [(f.symbol, f.size, f.port, f.axis) for f in fixed] == [("D", 16, "x", 1)]
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(g)(torch.randn(2, 8))
    assert info.value.code == "E_INPUT"
    assert "D" in str(info.value)


def test_a_node_with_nothing_to_bind_is_returned_as_it_is_and_a_reference_still_binds():
    g = hndl.Graph("bind", params={"width": 16})
    x = g.input("x", ("B", 8))
    h = g.add("relu", x, name="act")
    g.output(g.add("linear", h, out_features="$width", name="fc"))
    plain, problems = bind_node(g.nodes["act"], {"width": 16})
    assert plain is g.nodes["act"]
    assert problems == []
    bound, problems = bind_node(g.nodes["fc"], {"width": 16})
    assert bound.params["out_features"] == 16
    assert problems == []
    assert hndl.build(g)(torch.randn(2, 8)).shape == (2, 16)


def test_requirements_are_collected_for_each_node_and_only_for_it():
    g = hndl.Graph("req")
    x = g.input("x", ("B", 3, "H", "W"))
    h = g.add("conv2d", x, out_channels=4, kernel_size=7, name="wide")
    h = g.add("relu", h, name="act")
    g.output(h)
    wide, act = hndl.check(g).nodes
    assert [str(r) for r in wide.requires] == ["H >= 7", "W >= 7"]
    assert act.requires == []


def _pair(first_op: str, swap_inputs: bool = False) -> hndl.Graph:
    g = hndl.Graph("pair")
    a = g.input("a", ("B", 4))
    b = g.input("b", ("B", 4))
    h = g.add(first_op, a, name="h")
    g.output(g.add("sub", [b, h] if swap_inputs else [h, b], name="out"))
    return g


def test_a_rebuild_finds_its_code_by_what_the_source_is_made_from_and_nothing_else():
    # The second index of the code cache keys an entry by the plan's steps, forms and in-place modes instead of
    # the source text: a rebuild shares the code object; a graph that differs in any of them gets its own.
    from hndl.torch._runtime import runtime_of

    a, b = torch.randn(3, 4), torch.randn(3, 4)
    first, again = hndl.build(_pair("relu")), hndl.build(_pair("relu"))
    assert runtime_of(again).compiled is runtime_of(first).compiled
    other_op = hndl.build(_pair("tanh"))
    swapped = hndl.build(_pair("relu", swap_inputs=True))
    assert runtime_of(other_op).compiled is not runtime_of(first).compiled
    assert runtime_of(swapped).compiled is not runtime_of(first).compiled
    assert torch.equal(first(a, b), torch.relu(a) - b)
    assert torch.equal(other_op(a, b), torch.tanh(a) - b)
    assert torch.equal(swapped(a, b), b - torch.relu(a))
