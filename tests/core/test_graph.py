"""The Graph API: inputs, nodes, handles, names, subgraphs. Pure data: no torch needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

import hndl


def test_the_design_example_builds_the_expected_structure():
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 784))
    h = g.add("linear", x, name="hidden", out_features=512)
    a = g.add("relu", h, name="act")
    g.output(g.add("linear", a, name="out", out_features=10))
    assert list(g.inputs) == ["x"]
    assert list(g.nodes) == ["hidden", "act", "out"]
    assert g.nodes["hidden"].inputs == ["x"]
    assert g.nodes["hidden"].params == {"out_features": 512}
    assert g.outputs == ["out"]


def test_names_are_generated_from_the_op_when_omitted():
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    names = [g.add("relu", x).node for _ in range(3)]
    assert names == ["relu", "relu_1", "relu_2"]


def test_generated_names_skip_taken_ones():
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    g.add("relu", x, name="relu_1")
    assert g.add("relu", x).node == "relu"
    assert g.add("relu", x).node == "relu_2"


@pytest.mark.parametrize("bad", ["1x", "a-b", "a.b", "", "with space"])
def test_invalid_names_are_e_name(bad):
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    with pytest.raises(hndl.HndlError) as info:
        g.add("relu", x, name=bad)
    assert info.value.code == "E_NAME"
    assert "is not valid" in str(info.value)


def test_duplicate_names_are_e_name_and_leave_the_graph_intact():
    g = hndl.Graph()
    x = g.input("x", ("B", 4))
    g.add("relu", x, name="a")
    with pytest.raises(hndl.HndlError) as info:
        g.add("tanh", x, name="a")
    assert info.value.code == "E_NAME"
    assert info.value.node == "a"
    assert "already taken by a node" in str(info.value)
    assert g.nodes["a"].op == "relu"
    with pytest.raises(hndl.HndlError, match="already taken by an input"):
        g.add("relu", x, name="x")


def test_a_handle_from_another_graph_is_e_ref():
    g1, g2 = hndl.Graph("one"), hndl.Graph("two")
    x1 = g1.input("x", ("B", 4))
    g2.input("x", ("B", 4))
    with pytest.raises(hndl.HndlError) as info:
        g2.add("relu", x1, name="r")
    assert info.value.code == "E_REF"
    assert "belongs to graph 'one'" in str(info.value)


def test_malformed_input_contract_is_e_spec():
    g = hndl.Graph()
    with pytest.raises(hndl.HndlError) as info:
        g.input("x", ("B", "*a", "*b"))
    assert info.value.code == "E_SPEC"
    assert info.value.node == "x"
    with pytest.raises(hndl.HndlError, match="unknown dtype"):
        g.input("y", ("B",), dtype="float33")


def test_multi_output_handles_index_and_unpack():
    g = hndl.Graph()
    x = g.input("x", ("B", 6))
    parts = g.add("split", x, name="parts", sections=3, dim=-1)
    a, b, c = parts
    assert [a.ref, b.ref, c.ref] == ["parts.0", "parts.1", "parts.2"]
    assert parts["1"].ref == "parts.1"


def test_lists_of_handles_count_as_several_inputs():
    g = hndl.Graph()
    a = g.input("a", ("B", 2))
    b = g.input("b", ("B", 3))
    cat = g.add("concat", [a, b], dim=-1)
    assert g.nodes[cat.node].inputs == ["a", "b"]


def test_a_graph_param_registers_the_subgraph():
    block = hndl.Graph("block")
    h = block.input("h", ("B", 8))
    block.output(block.add("relu", h))
    g = hndl.Graph("outer")
    x = g.input("x", ("B", 8))
    g.output(g.add("graph", x, name="blocks", graph=block, repeat=3))
    assert g.graphs == {"block": block}
    assert g.nodes["blocks"].params == {"graph": "block", "repeat": 3}


def test_two_different_subgraphs_with_one_name_are_e_name():
    g = hndl.Graph()
    x = g.input("x", ("B", 8))
    g.add("graph", x, graph=hndl.Graph("block"))
    with pytest.raises(hndl.HndlError) as info:
        g.add("graph", x, graph=hndl.Graph("block"))
    assert info.value.code == "E_NAME"


def test_describing_and_checking_a_graph_does_not_import_torch():
    code = (
        "import sys, hndl\n"
        "g = hndl.Graph('m'); x = g.input('x', ('B', 4)); g.output(g.add('linear', x, out_features=2))\n"
        "c = hndl.check(g)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print(c.output_types[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[B, 2] float"
