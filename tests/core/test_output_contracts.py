"""Output contracts: ``g.output(handle, name=None, shape=None, dtype=None)`` and named ``outputs`` in specs,
checked statically (E_SHAPE/E_DTYPE at the node that made the output) and on each validating call
(E_CONTRACT, for what inference could not prove)."""

from __future__ import annotations

import pytest
import torch

import hndl

# The example: a flatten forgotten before the classifier, so the model returns [B, 16, 16, 10].
FORGOTTEN_FLATTEN = """\
hndl: 1
name: cnn
inputs:
  x: {shape: [B, 1, 16, 16]}
nodes:
  conv: {op: conv2d, in: x, out_channels: 16, kernel_size: 3, padding: 1}
  act: {op: relu, in: conv}
  fc: {op: linear, in: act, out_features: 10}
outputs:
  logits: {from: fc, shape: [B, 10], dtype: float}
"""


def problems(graph: hndl.Graph) -> list[hndl.Problem]:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(graph)
    return info.value.problems


# --- declaring ----------------------------------------------------------------------------------------------


def test_python_declares_name_shape_and_dtype() -> None:
    g = hndl.Graph("mlp")
    h = g.add("linear", g.input("x", ("B", 784)), name="fc", out_features=10)
    g.output(h, "logits", shape=("B", 10), dtype="float32")
    (spec,) = g.output_specs
    assert (g.outputs, spec.name, str(spec.shape), spec.dtype) == (["fc"], "logits", "[B, 10]", "float32")
    assert g.output_name(0) == "logits"


def test_a_list_declares_several_outputs_without_contracts() -> None:
    g = hndl.Graph("two")
    x = g.input("x", ("B", 4))
    g.output([g.add("relu", x, name="a"), g.add("tanh", x, name="b")])
    assert g.outputs == ["a", "b"]
    assert [g.output_name(i) for i in range(2)] == ["a", "b"]


def test_a_second_handle_where_the_name_goes_says_to_pass_a_list() -> None:
    g = hndl.Graph("two")
    x = g.input("x", ("B", 4))
    with pytest.raises(hndl.HndlError) as info:
        g.output(g.add("relu", x, name="a"), g.add("tanh", x, name="b"))  # type: ignore[arg-type]
    (p,) = info.value.problems
    assert (p.code, p.message) == ("E_REF", "g.output takes one value, then its name: several outputs go in one list")
    assert p.hint == "g.output([a, b]), or call g.output once per output"


@pytest.mark.parametrize(
    ("kwargs", "code", "message"),
    [
        ({"name": "2x"}, "E_NAME", "output name '2x' is not valid"),
        ({"shape": ("B", "**")}, "E_SPEC", "output 'x': '**' is not a valid variadic entry; write '*name'"),
        ({"dtype": "float33"}, "E_SPEC", "output 'x': unknown dtype 'float33'; use one of float, int, any, "),
    ],
)
def test_a_bad_name_or_contract_is_refused_where_it_is_declared(kwargs: dict, code: str, message: str) -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    with pytest.raises(hndl.HndlError) as info:
        g.output(x, **kwargs)
    (p,) = info.value.problems
    assert p.code == code
    assert p.message.startswith(message)
    assert g.outputs == []  # nothing half-declared


def test_an_output_name_is_used_once() -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    g.output(x, "y")
    with pytest.raises(hndl.HndlError) as info:
        g.output(g.add("relu", x), "y")
    assert info.value.problems[0].message == "output name 'y' is already taken by output 0"


# --- specs: the mapping form, its problems, and dumps -----------------------------------------------------------


def test_spec_named_outputs_load_with_their_contracts_and_locations() -> None:
    g = hndl.loads(FORGOTTEN_FLATTEN)
    (spec,) = g.output_specs
    assert (spec.name, str(spec.shape), spec.dtype, spec.location) == ("logits", "[B, 10]", "float", "<string>:10:3")
    assert g.output_locations == ["<string>:10:18"]


def test_spec_shorthand_names_a_reference() -> None:
    g = hndl.loads("hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {a: {op: relu, in: x}}\noutputs: {y: a}\n")
    assert (g.outputs, g.output_specs[0].name, g.output_specs[0].declares) == (["a"], "y", False)


@pytest.mark.parametrize(
    ("outputs", "where", "message", "hint"),
    [
        ("{y: {shape: [B, 4]}}", "4:11", "missing key 'from'", "add from: <the node whose value this output returns>"),
        ("{y: {from: a, shap: [B, 4]}}", "4:24", "unknown key 'shap'", "did you mean 'shape'?"),
        ("{y: {from: a, shape: B}}", "4:31", "'shape' must be a list such as [B, 10], got string 'B'", None),
        (
            "{y: {from: [a], dtype: float}}",
            "4:21",
            "'from' must be a reference (an input or node name, or node.port), got a list",
            None,
        ),
        (
            "[{from: a}]",
            "4:11",
            "output 0 of the spec must be a reference (an input or node name, or node.port), got a mapping",
            "a named output with a contract goes in a mapping: outputs: {logits: {from: out, shape: [B, 10]}}",
        ),
    ],
)
def test_spec_output_problems_are_located_at_their_key(
    outputs: str, where: str, message: str, hint: str | None
) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(
            f"hndl: 1\ninputs: {{x: {{shape: [B, 4]}}}}\nnodes: {{a: {{op: relu, in: x}}}}\noutputs: {outputs}\n"
        )
    (p,) = info.value.problems
    assert (p.code, p.location.removeprefix("<string>:"), p.message, p.hint) == ("E_SPEC", where, message, hint)


def test_dumps_round_trips_named_outputs() -> None:
    g = hndl.loads(FORGOTTEN_FLATTEN)
    text = hndl.dumps(g)
    assert text.endswith("outputs:\n  logits: {from: fc, shape: [B, 10], dtype: float}\n")
    again = hndl.loads(text)
    assert hndl.dumps(again) == text
    assert [(s.name, str(s.shape), s.dtype) for s in again.output_specs] == [("logits", "[B, 10]", "float")]


def test_dumps_names_an_unnamed_output_with_a_contract_after_its_reference() -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    parts = g.add("split", x, name="parts", sections=2)
    g.output(parts[0], shape=("B", 2))
    g.output(parts[1])
    text = hndl.dumps(g)
    assert text.endswith("outputs:\n  parts_0: {from: parts.0, shape: [B, 2]}\n  parts_1: parts.1\n")
    assert hndl.loads(text).outputs == ["parts.0", "parts.1"]


def test_dumps_keeps_the_list_form_when_nothing_is_named_or_declared() -> None:
    g = hndl.Graph("g")
    g.output(g.add("relu", g.input("x", ("B", 4)), name="a"))
    assert hndl.dumps(g).endswith("outputs: [a]\n")


# --- checked statically ---------------------------------------------------------------------------------------


def test_the_forgotten_flatten_is_an_e_shape_at_the_node_that_made_the_shape_with_the_fix() -> None:
    (p,) = problems(hndl.loads(FORGOTTEN_FLATTEN))
    assert (p.code, p.node, p.op, p.port, p.location) == ("E_SHAPE", "fc", "linear", "logits", "<string>:8:3")
    assert p.message == "output 'logits' is declared [B, 10], but this node makes it [B, 16, 16, 10]"
    assert (p.expected, p.actual) == ("[B, 10]", "[B, 16, 16, 10]")
    assert p.hint == (
        "add a node {op: flatten, start_dim: 1} before linear 'fc': it makes [B, 16, 16, 16] into [B, 4096], "
        "and the output is then [B, 10]"
    )


def test_the_node_named_is_where_the_shape_changed_not_a_shape_keeping_node_after_it() -> None:
    text = FORGOTTEN_FLATTEN.replace(
        "  fc: {op: linear, in: act, out_features: 10}\n",
        "  fc: {op: linear, in: act, out_features: 10}\n  out: {op: relu, in: fc}\n",
    ).replace("from: fc", "from: out")
    (p,) = problems(hndl.loads(text))
    assert (p.node, p.message) == (
        "fc",
        "output 'logits' is declared [B, 10], but this node makes it [B, 16, 16, 10] (through 'out')",
    )


def test_a_direct_edit_of_the_output_is_offered_when_it_fits() -> None:
    (p,) = problems(hndl.loads(FORGOTTEN_FLATTEN.replace("[B, 10]", "[B, 10, 16, 16]")))
    assert (
        p.message
        == "output 'logits' is declared [B, 10, 16, 16], but this node makes it [B, 16, 16, 10]: dim 1 expected 10, got 16"
    )
    assert p.hint == (
        "add a node {op: permute, dims: [0, 3, 1, 2]} after linear 'fc': it makes [B, 16, 16, 10] into "
        "[B, 10, 16, 16] (channels-last to channels-first)"
    )


def test_a_declared_dtype_the_graph_cannot_make_is_e_dtype() -> None:
    (p,) = problems(hndl.loads(FORGOTTEN_FLATTEN.replace("[B, 10], dtype: float", "[B, 16, 16, 10], dtype: int64")))
    assert (p.code, p.node, p.message) == ("E_DTYPE", "fc", "output 'logits' is declared int64, but it is float")


def test_a_contract_that_holds_is_proven_and_reads_the_graph_parameters() -> None:
    text = FORGOTTEN_FLATTEN.replace("name: cnn\n", "name: cnn\nparams: {classes: 10}\n").replace(
        "  act: {op: relu, in: conv}\n", "  act: {op: relu, in: conv}\n  flat: {op: flatten, in: act}\n"
    )
    text = text.replace("in: act, out_features: 10", "in: flat, out_features: $classes").replace(
        "[B, 10]", "[B, classes]"
    )
    (declared,) = hndl.check(hndl.loads(text)).declared_outputs
    assert declared is not None
    assert (declared.label, str(declared.expected), declared.proven) == ("logits", "[B, 10] float", True)


def test_a_new_symbol_binds_once_for_every_output() -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 8))
    g.output(g.add("linear", x, name="a", out_features=4), "a", shape=("B", "N"))
    g.output(g.add("linear", x, name="b", out_features=5), "b", shape=("B", "N"))
    (p,) = problems(g)
    assert (p.code, p.node, p.message) == (
        "E_SHAPE",
        "b",
        "output 'b' is declared [B, N], but this node makes it [B, 5]: dim 1 is N, bound to 4, but got 5",
    )


def test_a_subgraph_output_contract_is_checked_for_each_repetition() -> None:
    block = hndl.Graph("block")
    h = block.input("h", ("B", "D"))
    block.output(block.add("linear", h, name="fc", out_features=8), shape=("B", "D"))
    g = hndl.Graph("top")
    g.output(g.add("graph", g.input("x", ("B", 4)), name="blocks", graph=block, repeat=2))
    (p,) = problems(g)
    assert (p.code, p.node) == ("E_SHAPE", "blocks.0.fc")
    assert (
        p.message == "output 'fc' is declared [B, D], but this node makes it [B, 8]: dim 1 is D, bound to 4, but got 8"
    )


# --- checked at run time ----------------------------------------------------------------------------------------


def unproven_model() -> hndl.torch.GraphModule:
    g = hndl.Graph("g")
    g.output(g.add("relu", g.input("x", ("B", "N")), name="act"), "logits", shape=("B", 10))
    return hndl.build(g)


def test_what_inference_cannot_prove_is_e_contract_on_the_validating_call() -> None:
    model = unproven_model()
    assert hndl.check(model.graph).declared_outputs[0].proven is False  # type: ignore[union-attr]
    assert model(torch.randn(4, 10)).shape == (4, 10)
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(4, 12))
    assert str(info.value) == (
        "E_CONTRACT relu 'act' port 'logits': output 'logits' is declared [B, 10]: dim 1 expected 10, got 12\n"
        "    expected: [4, 10]\n"
        "    actual:   [4, 12]\n"
        "    bound:    B=4 N=12\n"
        "    hint:     change the graph so that it makes what the output declares, or declare what it makes"
    )


def test_a_new_binding_of_the_symbols_is_checked_too() -> None:
    # Without the contract, a new binding of validated symbols is admitted without a full validation.
    model = unproven_model()
    model(torch.randn(4, 10))
    with pytest.raises(hndl.HndlError, match="E_CONTRACT"):
        model(torch.randn(5, 11))


def test_the_check_runs_once_per_signature_not_on_the_fast_path() -> None:
    model = unproven_model()
    for _ in range(3):
        model(torch.randn(4, 10))
    assert model.validations == 1


def test_a_module_output_is_held_to_its_declared_dtype_at_run_time() -> None:
    g = hndl.Graph("g")
    g.output(g.add("module", g.input("x", ("B", 8)), name="mod", target="torch.nn:Identity"), "y", dtype="float64")
    model = hndl.build(g)
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 8))
    (p,) = info.value.problems
    assert (p.code, p.node, p.port, p.message) == (
        "E_CONTRACT",
        "mod",
        "y",
        "output 'y' is declared float64, got float32",
    )
    assert model(torch.randn(2, 8, dtype=torch.float64)).dtype == torch.float64


def test_the_fix_goes_before_the_first_node_that_should_have_had_it() -> None:
    # Regression: in a classifier with two linears after the convolutions, a flatten before the last linear
    # also makes [B, 10], but the first linear would then run over a spatial dim.
    text = FORGOTTEN_FLATTEN.replace(
        "  fc: {op: linear, in: act, out_features: 10}\n",
        "  hidden: {op: linear, in: act, out_features: 64}\n  act2: {op: relu, in: hidden}\n"
        "  fc: {op: linear, in: act2, out_features: 10}\n",
    )
    (p,) = problems(hndl.loads(text))
    assert (p.node, p.message) == ("fc", "output 'logits' is declared [B, 10], but this node makes it [B, 16, 16, 10]")
    assert p.hint == (
        "add a node {op: flatten, start_dim: 1} before linear 'hidden': it makes [B, 16, 16, 16] into [B, 4096], "
        "and the output is then [B, 10]"
    )
