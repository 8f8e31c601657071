"""Dense ops: linear, embedding, dropout, identity. Inferred shapes, real shapes, and every error path."""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl._contracts import format_shape, is_unknown
from hndl._dims import evaluate, parse_dim

# --- helpers shared by the op tests (kept per file: tests/ is not a package) -----------------------------


def _graph(op: str, shapes: tuple, dtypes: list | None, params: dict) -> hndl.Graph:
    g = hndl.Graph("t")
    dtypes = dtypes or [None] * len(shapes)
    xs = [g.input(f"x{i}", s, dtype=d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    h = g.add(op, xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([h[i] for i in range(count)] if count > 1 else h)
    return g


def infer(op: str, *shapes, dtypes: list | None = None, **params) -> list[str]:
    """The inferred output shapes of one ``op`` node, as text (``[N, 4, (H-3)//2+1]``)."""
    node = hndl.check(_graph(op, shapes, dtypes, params)).nodes[0]
    return [format_shape(t.shape) for t in node.out_types]


def problem(op: str, *shapes, dtypes: list | None = None, **params) -> hndl.Problem:
    """The single problem the checker reports for one ``op`` node."""
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(_graph(op, shapes, dtypes, params))
    assert len(info.value.problems) == 1, str(info.value)
    return info.value.problems[0]


def runs_as_inferred(op: str, *shapes, env: dict, dtypes: list | None = None, **params) -> list[torch.Tensor]:
    """Build the node, run it in eval mode on tensors sized by ``env``: real shapes equal inferred ones."""
    g = _graph(op, shapes, dtypes, params)
    checked = hndl.check(g)
    model = hndl.build(g).eval()
    tensors = []
    for shape, dtype in zip(shapes, dtypes or [None] * len(shapes)):
        real = [evaluate(parse_dim(d), env) for d in shape]
        tensors.append(torch.randint(0, 4, real) if dtype == "int64" else torch.randn(real))
    out = model(*tensors)
    outs = out if isinstance(out, tuple) else (out,)
    types = checked.nodes[0].out_types
    assert len(outs) == len(types)
    for t, y in zip(types, outs):
        assert t.shape is not None
        assert len(t.shape) == y.dim()
        # an unknown dim (``?``) is one inference could not pin; the run-time check leaves it free too
        expected = tuple(real if is_unknown(d) else evaluate(d, env) for d, real in zip(t.shape, y.shape))
        assert tuple(y.shape) == expected
    return list(outs)


# --- linear ---------------------------------------------------------------------------------------------


def test_linear_infers_in_features_and_keeps_batch_dims():
    assert infer("linear", ("B", "T", 64), out_features=10) == ["[B, T, 10]"]
    assert infer("linear", ("*batch", 64), out_features=10) == ["[*batch, 10]"]
    node = hndl.check(_graph("linear", (("B", 64),), None, {"out_features": 3})).nodes[0]
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


def test_embedding_appends_embedding_dim_and_outputs_float32():
    g = _graph("embedding", (("B", "T"),), ["int64"], {"num_embeddings": 10, "embedding_dim": 4})
    (t,) = hndl.check(g).nodes[0].out_types
    assert (format_shape(t.shape), t.dtype) == ("[B, T, 4]", "float32")
    (y,) = runs_as_inferred(
        "embedding", ("B", "T"), env={"B": 2, "T": 5}, dtypes=["int64"], num_embeddings=10, embedding_dim=4
    )
    assert y.dtype == torch.float32


def test_embedding_padding_idx_row_is_zero():
    (y,) = runs_as_inferred(
        "embedding", (3,), env={}, dtypes=["int64"], num_embeddings=4, embedding_dim=2, padding_idx=-1
    )
    assert y.shape == (3, 2)
    g = _graph("embedding", ((1,),), ["int64"], {"num_embeddings": 4, "embedding_dim": 2, "padding_idx": -1})
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
    g = _graph("dropout", (("B", 8),), None, {"p": 0.5})
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
    g = _graph("identity", (("B", 3),), ["int64"], {})
    (t,) = hndl.check(g).nodes[0].out_types
    assert (format_shape(t.shape), t.dtype) == ("[B, 3]", "int64")
    x = torch.arange(6).reshape(2, 3)
    assert hndl.build(g)(x) is x


def test_identity_takes_no_parameters():
    p = problem("identity", ("B", 3), p=0.5)
    assert (p.code, p.message, p.hint) == ("E_PARAM", "unknown parameter 'p'", "identity takes no parameters")
