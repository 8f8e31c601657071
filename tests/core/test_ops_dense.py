"""Dense ops: linear, embedding, dropout, identity. Inferred shapes, real shapes, and every error path."""

from __future__ import annotations

import torch
from op_helpers import infer, one_node_graph, problem, runs_as_inferred

import hndl
from hndl._contracts import format_shape

# --- linear ---------------------------------------------------------------------------------------------


def test_linear_infers_in_features_and_keeps_batch_dims():
    assert infer("linear", ("B", "T", 64), out_features=10) == ["[B, T, 10]"]
    assert infer("linear", ("*batch", 64), out_features=10) == ["[*batch, 10]"]
    node = hndl.check(one_node_graph("linear", (("B", 64),), None, {"out_features": 3})).nodes[0]
    assert node.params["in_features"] == 64


def test_linear_runs_as_inferred():
    (y,) = runs_as_inferred("linear", ("B", "T", 64), env={"B": 2, "T": 5}, out_features=10, bias=False)
    assert y.dtype == torch.float32


def test_linear_given_in_features_must_agree():
    p = problem("linear", ("B", 784), out_features=10, in_features=512)
    assert (p.code, p.node, p.op, p.port) == ("E_SHAPE", "n", "linear", "x")
    assert p.message == "dim 1 is in_features, bound to 512, but got 784"
    assert (p.expected, p.actual) == ("[*batch, in_features]", "[B, 784]")
    assert p.hint == "drop in_features: hndl infers it from the input"


def test_linear_symbolic_feature_dim_cannot_size_the_layer():
    p = problem("linear", ("B", "D"), out_features=10)
    assert p.code == "E_SHAPE"
    assert p.message == "parameter 'in_features' follows from an input dim that is not a fixed number"
    assert (p.expected, p.actual) == ("an int", "D")
    assert p.hint == "give that input dim as an int in the input's shape, or set in_features"


def test_linear_bad_out_features():
    p = problem("linear", ("B", 4), out_features=0)
    assert (p.code, p.node, p.message) == ("E_PARAM", "n", "parameter 'out_features' must be >= 1, got 0")


# --- embedding ------------------------------------------------------------------------------------------


def test_embedding_appends_embedding_dim_and_outputs_the_models_floating_dtype():
    g = one_node_graph("embedding", (("B", "T"),), ["int64"], {"num_embeddings": 10, "embedding_dim": 4})
    (t,) = hndl.check(g).nodes[0].out_types
    assert (format_shape(t.shape), t.dtype) == ("[B, T, 4]", "float")  # the weight's dtype, whichever it is
    (y,) = runs_as_inferred(
        "embedding", ("B", "T"), env={"B": 2, "T": 5}, dtypes=["int64"], num_embeddings=10, embedding_dim=4
    )
    assert y.dtype == torch.float32


def test_embedding_padding_idx_row_is_zero():
    (y,) = runs_as_inferred(
        "embedding", (3,), env={}, dtypes=["int64"], num_embeddings=4, embedding_dim=2, padding_idx=-1
    )
    assert y.shape == (3, 2)
    g = one_node_graph("embedding", ((1,),), ["int64"], {"num_embeddings": 4, "embedding_dim": 2, "padding_idx": -1})
    assert torch.equal(hndl.build(g)(torch.tensor([3])), torch.zeros(1, 2))


def test_embedding_needs_integer_indices():
    p = problem("embedding", ("B", "T"), num_embeddings=10, embedding_dim=4)
    assert (p.code, p.node, p.port) == ("E_DTYPE", "n", "x")
    assert p.message == "needs dtype int, got float"
    assert (p.expected, p.actual) == ("int", "float")
    assert p.hint == "declare the input's dtype, e.g. dtype: int64"


def test_embedding_padding_idx_out_of_range():
    p = problem("embedding", ("B",), dtypes=["int64"], num_embeddings=10, embedding_dim=4, padding_idx=10)
    assert (p.code, p.node) == ("E_PARAM", "n")
    assert p.message == "padding_idx 10 is not an index into 10 embeddings"
    assert (p.expected, p.actual) == ("-10 .. 9", 10)


# --- dropout, identity ----------------------------------------------------------------------------------


def test_dropout_keeps_shape_and_is_identity_in_eval():
    assert infer("dropout", ("B", "T", 8), p=0.1) == ["[B, T, 8]"]
    runs_as_inferred("dropout", ("B", 8), env={"B": 3}, p=0.9)
    g = one_node_graph("dropout", (("B", 8),), None, {"p": 0.5})
    model = hndl.build(g).eval()
    x = torch.randn(4, 8)
    assert torch.equal(model(x), x)
    assert (model.train()(torch.ones(1000, 8)) == 0).any()


def test_dropout_probability_bounds():
    p = problem("dropout", ("B", 3), p=1.5)
    assert (p.code, p.message) == ("E_PARAM", "parameter 'p' must be <= 1, got 1.5")
    p = problem("dropout", ("B", 3), p=-0.1)
    assert (p.code, p.message) == ("E_PARAM", "parameter 'p' must be >= 0, got -0.1")


def test_identity_passes_any_dtype_through():
    g = one_node_graph("identity", (("B", 3),), ["int64"], {})
    (t,) = hndl.check(g).nodes[0].out_types
    assert (format_shape(t.shape), t.dtype) == ("[B, 3]", "int64")
    x = torch.arange(6).reshape(2, 3)
    assert hndl.build(g)(x) is x


def test_identity_takes_no_parameters():
    p = problem("identity", ("B", 3), p=0.5)
    assert (p.code, p.message, p.hint) == ("E_PARAM", "unknown parameter 'p'", "identity takes no parameters")


def test_regression_a_converted_model_with_an_embedding_runs():
    # The embedding's output was declared float32, so .double() or FSDP's bf16 made the next call E_CONTRACT.
    g = one_node_graph("embedding", (("B", "T"),), ["int64"], {"num_embeddings": 10, "embedding_dim": 4})
    model = hndl.build(g)
    ids = torch.randint(0, 10, (2, 3))
    for convert in (model.double, model.bfloat16, model.float):
        convert()
        assert model(ids).dtype == model.nodes["n_" + model.plan.steps[0].node.name].weight.dtype
