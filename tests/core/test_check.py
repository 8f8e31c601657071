"""Static checking: every problem at once, each coded, named, with expected vs actual."""

from __future__ import annotations

import pytest
from small_models import mlp_graph

import hndl
from hndl._dims import symbol


def mlp() -> hndl.Graph:
    return mlp_graph(784, 512, 10)


def problems(g: hndl.Graph) -> list[hndl.Problem]:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    return info.value.problems


def test_inference_fills_in_shapes_and_inferred_params():
    checked = hndl.check(mlp())
    by_name = {n.name: n for n in checked.nodes}
    assert by_name["hidden"].params["in_features"] == 784
    assert by_name["out"].params["in_features"] == 512
    assert [str(t) for t in checked.output_types] == ["[B, 10] float"]
    assert by_name["out"].in_types[0].shape == (symbol("B"), 512)


def test_all_problems_come_back_at_once():
    g = hndl.Graph("bad")
    x = g.input("x", ("B", 784))
    g.add("linaer", x, name="typo")
    g.add("linear", x, name="wrong", in_features=512, out_features=3)
    g.add("linear", "nothing", name="dangling", out_features=3)
    g.add("linear", x, name="noparam")
    g.output("wrong")
    found = problems(g)
    assert [(p.code, p.node) for p in found] == [
        ("E_OP", "typo"),
        ("E_SHAPE", "wrong"),
        ("E_REF", "dangling"),
        ("E_PARAM", "noparam"),
    ]
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert info.value.code == "E_OP"
    assert str(info.value).startswith("4 problems in graph 'bad':\n")


def test_unknown_op_suggests_the_closest():
    g = hndl.Graph()
    g.output(g.add("linaer", g.input("x", ("B", 4)), name="l"))
    (p,) = problems(g)
    assert p.code == "E_OP"
    assert p.hint == "did you mean 'linear'?"


def test_explicit_inferred_param_that_disagrees_names_expected_and_actual():
    g = hndl.Graph()
    g.output(g.add("linear", g.input("x", ("B", 784)), name="hidden", in_features=512, out_features=3))
    (p,) = problems(g)
    assert str(p) == (
        "E_SHAPE linear 'hidden' port 'x': dim 1 is in_features, bound to 512, but got 784\n"
        "    expected: [*batch, in_features]\n"
        "    actual:   [B, 784]\n"
        "    hint:     drop in_features: hndl infers it from the input"
    )


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"out_features": 0}, "parameter 'out_features' must be >= 1, got 0"),
        ({"out_features": "ten"}, "parameter 'out_features' must be integer, got string 'ten'"),
        ({"out_features": 2, "bias": "yes"}, "parameter 'bias' must be true or false, got 'yes'"),
        ({"out_features": 2, "biass": True}, "unknown parameter 'biass'"),
        ({}, "missing required parameter 'out_features'"),
    ],
)
def test_bad_params_are_e_param(params, message):
    g = hndl.Graph()
    g.output(g.add("linear", g.input("x", ("B", 4)), name="l", **params))
    (p,) = problems(g)
    assert p.code == "E_PARAM"
    assert p.node == "l"
    assert p.message == message


def test_unknown_param_suggests_the_closest():
    g = hndl.Graph()
    g.output(g.add("linear", g.input("x", ("B", 4)), name="l", out_feature=3))
    found = problems(g)
    assert found[0].hint == "did you mean 'out_features'?"


def test_dangling_reference_suggests_a_known_name():
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    g.add("relu", x, name="act")
    g.output(g.add("relu", "atc", name="r"))
    (p,) = problems(g)
    assert (p.code, p.node, p.hint) == ("E_REF", "r", "did you mean 'act'?")


def test_unknown_output_is_e_ref():
    g = hndl.Graph()
    g.add("relu", g.input("x", ("B", 4)), name="act")
    g.output("nope")
    (p,) = problems(g)
    assert p.code == "E_REF"
    assert "unknown input or node 'nope'" in p.message


def test_a_graph_without_outputs_is_e_ref():
    g = hndl.Graph("empty")
    g.add("relu", g.input("x", ("B", 4)))
    (p,) = problems(g)
    assert p.code == "E_REF"
    assert p.message == "graph 'empty' declares no outputs"


@pytest.mark.parametrize("read", [True, False])
def test_subgraph_without_outputs_is_e_ref_not_an_assertion(read: bool) -> None:
    # Was (found by nox -s fuzz): a subgraph with `outputs: []` gave its node no output type, a node reading it
    # went unchecked with no problem reported, and hndl.check failed on an internal assertion.
    block = hndl.Graph("block")
    block.add("linear", block.input("h", ("B", 4)), name="up", out_features=4)
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    g.graphs["block"] = block
    stack = g.add("graph", x, name="stack", graph="block")
    g.output(g.add("linear", stack if read else x, name="out", out_features=2))
    (p,) = problems(g)
    assert p.code == "E_REF"
    assert p.node == "stack"
    assert p.message == "graph 'block' declares no outputs"
    assert p.hint == "add an 'outputs:' list to graph 'block'"


def test_cycles_are_listed():
    g = hndl.Graph()
    g.input("x", ("B", 4))
    g.add("add", "x", "c", name="a")
    g.add("relu", "a", name="b")
    g.add("relu", "b", name="c")
    g.output("c")
    found = problems(g)
    assert found[0].code == "E_CYCLE"
    assert "a -> c -> b -> a" in found[0].message or "a -> b -> c -> a" in found[0].message


def test_a_failed_node_does_not_cascade_into_its_consumers():
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    bad = g.add("linear", x, name="bad", out_features=-1)
    after = g.add("linear", bad, name="after", out_features=2)
    g.output(g.add("relu", after, name="end"))
    assert [(p.code, p.node) for p in problems(g)] == [("E_PARAM", "bad")]


def test_wrong_number_of_inputs_is_e_ref():
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    g.output(g.add("linear", x, x, name="l", out_features=2))
    (p,) = problems(g)
    assert p.code == "E_REF"
    assert p.message == "linear takes 1 input, got 2"


def test_dtype_incompatibility_is_e_dtype():
    g = hndl.Graph()
    tokens = g.input("tokens", ("B", 4), dtype="int64")
    g.output(g.add("linear", tokens, name="l", out_features=2))
    (p,) = problems(g)
    assert p.code == "E_DTYPE"
    assert (p.expected, p.actual) == ("float", "int64")


def test_inferred_param_from_a_symbolic_dim_asks_for_a_number():
    g = hndl.Graph()
    g.output(g.add("linear", g.input("x", ("B", "D")), name="l", out_features=2))
    (p,) = problems(g)
    assert p.code == "E_SHAPE"
    assert p.actual == "D"
    assert "give that input dim as an int" in p.hint


def block(width: int) -> hndl.Graph:
    b = hndl.Graph("block")
    h = b.input("h", ("B", "D"))
    b.output(b.add("relu", b.add("linear", h, name="fc", out_features=width), name="act"))
    return b


def test_subgraphs_infer_each_repetition_on_its_own():
    g = hndl.Graph("outer")
    x = g.input("x", ("B", 3))
    g.output(g.add("graph", x, name="blocks", graph=block(8), repeat=3))
    checked = hndl.check(g)
    (node,) = checked.nodes
    assert [sub.nodes[0].params["in_features"] for sub in node.body] == [3, 8, 8]
    assert [sub.nodes[0].qualname for sub in node.body] == ["blocks.0.fc", "blocks.1.fc", "blocks.2.fc"]
    assert node.body[1].nodes[0].path == ("nodes", "n_blocks", "1", "n_fc")
    assert str(checked.output_types[0]) == "[B, 8] float"


def test_problems_inside_subgraphs_name_the_qualified_node():
    b = hndl.Graph("block")
    h = b.input("h", ("B", "D"))
    b.output(b.add("linear", h, name="fc", out_features=4, in_features=99))
    g = hndl.Graph("outer")
    g.output(g.add("graph", g.input("x", ("B", 3)), name="blocks", graph=b, repeat=2))
    (p,) = problems(g)
    assert (p.code, p.node, p.op) == ("E_SHAPE", "blocks.0.fc", "linear")


def test_subgraph_input_contracts_are_checked():
    b = hndl.Graph("block")
    h = b.input("h", ("B", 16))
    b.output(b.add("relu", h))
    g = hndl.Graph("outer")
    g.output(g.add("graph", g.input("x", ("B", 3)), name="blk", graph=b))
    (p,) = problems(g)
    assert p.code == "E_SHAPE"
    assert p.message == "repetition 0: input 'h' of graph 'block': dim 1 expected 16, got 3"


def test_repeat_needs_matching_inputs_and_outputs():
    b = hndl.Graph("block")
    h = b.input("h", ("B", 4))
    b.output([b.add("relu", h), b.add("tanh", h)])
    g = hndl.Graph("outer")
    blk = g.add("graph", g.input("x", ("B", 4)), name="blk", graph=b, repeat=2)
    g.output(blk[0])
    (p,) = problems(g)
    assert p.code == "E_PARAM"
    assert "as many outputs as inputs" in p.message


def test_unknown_subgraph_is_e_ref():
    g = hndl.Graph("outer")
    g.output(g.add("graph", g.input("x", ("B", 4)), name="blk", graph="nope"))
    (p,) = problems(g)
    assert (p.code, p.message) == ("E_REF", "unknown graph 'nope'")


def test_a_subgraph_that_uses_itself_is_e_cycle():
    b = hndl.Graph("loop")
    h = b.input("h", ("B", 4))
    b.output(b.add("graph", h, name="again", graph="loop"))
    b.graphs["loop"] = b
    g = hndl.Graph("outer")
    g.output(g.add("graph", g.input("x", ("B", 4)), name="blk", graph=b))
    found = problems(g)
    assert found[0].code == "E_CYCLE"
    assert "loop -> loop" in found[0].message


def test_long_chains_check_without_recursion_limits():
    g = hndl.Graph("chain")
    h = g.input("x", ("B", 4))
    for _ in range(5000):
        h = g.add("relu", h)
    g.output(h)
    checked = hndl.check(g)
    assert len(checked.nodes) == 5000


def test_regression_every_module_node_shared_one_kwargs_dict():
    """The 'module' op's default kwargs ({}) was handed to every node as the same dict: a change to one node's
    kwargs changed every other node's, and the op's declared default."""
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    a = g.add("module", x, name="a", target="torch.nn:Identity")
    g.output(g.add("module", a, name="b", target="torch.nn:Identity"))
    first, second = hndl.check(g).nodes
    first.params["kwargs"]["inplace"] = True
    assert second.params["kwargs"] == {}
    assert hndl.registry.find("module").param("kwargs").default == {}
    assert hndl.check(g).nodes[0].params["kwargs"] == {}


EVIL_SPEC = """
hndl: 1
name: evil
inputs:
  x: {shape: [B, 4]}
nodes:
  run: {op: module, in: x, target: "subprocess:run", kwargs: {args: [touch, MARKER]}}
outputs: [run]
"""


def test_regression_an_untrusted_spec_imported_code_as_a_subgraph_of_a_python_graph(tmp_path):
    """The checker judged allow_imports by the root graph only: a spec loaded without it, used as a subgraph of
    a (trusted) Python-built graph, built its 'module' node, and subprocess.run ran during hndl.build."""
    marker = tmp_path / "ran"
    evil = hndl.loads(EVIL_SPEC.replace("MARKER", str(marker)))
    g = hndl.Graph("outer")
    g.output(g.add("graph", g.input("x", ("B", 4)), name="blk", graph=evil))
    (p,) = problems(g)
    assert (p.code, p.node, p.op) == ("E_PARAM", "blk.run", "module")
    assert p.message == "importing 'subprocess:run' is refused: this spec was loaded without allow_imports"
    with pytest.raises(hndl.HndlError, match="refused"):
        hndl.build(g)
    assert not marker.exists()


def test_a_trusted_python_subgraph_may_import_inside_a_spec_loaded_without_allow_imports():
    spec = hndl.loads("hndl: 1\nname: outer\ninputs:\n  x: {shape: [B, 4]}\nnodes: {}\noutputs: [x]\n")
    block = hndl.Graph("block")
    block.output(block.add("module", block.input("h", ("B", 4)), name="act", target="torch.nn:Tanh"))
    spec.outputs = [spec.add("graph", "x", name="blk", graph=block).ref]
    spec.output_locations = [None]
    checked = hndl.check(spec)
    assert checked.nodes[0].body[0].nodes[0].op == "module"


def test_a_two_output_subgraph_node_unpacks_into_two_handles():
    b = hndl.Graph("pair")
    h = b.input("h", ("B", 4))
    b.output([b.add("relu", h), b.add("tanh", h)])
    g = hndl.Graph("outer")
    first, second = g.add("graph", g.input("x", ("B", 4)), name="blk", graph=b)
    g.output([first, second])
    assert [str(t) for t in hndl.check(g).output_types] == ["[B, 4] float", "[B, 4] float"]
