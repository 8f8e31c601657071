"""Hostile graphs, part B: bounded work in shapes and repetitions, only HndlError, no check that passes what fails.

Each test is named after what it guards (issue 10). Times are CPU times (``process_time``) with generous bounds:
each case takes milliseconds, and failed by seconds or minutes before the fix.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

import hndl
from hndl._check_limits import MAX_EXPANDED_NODES
from hndl._dims import MAX_DIM, MAX_EXPR_CHARS, MAX_NESTING, MAX_TERMS, DimError, dim_mul, parse_dim, symbol


def one_node(node: str, shape: str = "[B, 4]", dtype: str | None = None) -> str:
    contract = f"{{shape: {shape}{', dtype: ' + dtype if dtype else ''}}}"
    return f"hndl: 1\ninputs: {{x: {contract}}}\nnodes: {{n: {node}}}\noutputs: [n]\n"


@contextmanager
def under_a_second() -> Iterator[None]:
    start = time.process_time()
    yield
    assert time.process_time() - start < 1


def load_error(text: str) -> hndl.HndlError:
    with under_a_second(), pytest.raises(hndl.HndlError) as info:
        hndl.loads(text)
    return info.value


def check_error(text: str) -> hndl.HndlError:
    graph = hndl.loads(text)
    with under_a_second(), pytest.raises(hndl.HndlError) as info:
        hndl.check(graph)
    return info.value


# --- shape expressions --------------------------------------------------------------------------------------


def test_a_product_of_sums_in_a_shape_is_refused_before_it_expands() -> None:
    # 270 characters that took 14.6 s and 424 MB to expand: ten terms to the twelfth power.
    entry = "*".join(["(A+B+C+D+E+F+G+H+I+J)"] * 12)
    (problem,) = load_error(one_node("{op: relu, in: x}", f"[B, '{entry}']")).problems
    assert (problem.code, problem.node, problem.location) == ("E_SPEC", "x", "<string>:2:21")
    assert problem.message.endswith(f"a dimension expression expands to more than {MAX_TERMS} terms")


def test_a_product_of_sums_made_by_inference_is_a_shape_error() -> None:
    # flatten multiplies the dims it merges: eight dims of ten terms each would expand to millions of terms.
    dims = ", ".join(["'A+B+C+D+E+F+G+H+I+J'"] * 8)
    (problem,) = check_error(one_node("{op: flatten, in: x}", f"[{dims}]")).problems
    assert (problem.code, problem.node, problem.location) == ("E_SHAPE", "n", "<string>:3:26")
    assert problem.message == f"a dimension expression expands to more than {MAX_TERMS} terms"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("(" * 400 + "B" + ")" * 400, f"a dimension expression nests more than {MAX_NESTING} levels deep"),
        ("-" * 400 + "B", f"a dimension expression nests more than {MAX_NESTING} levels deep"),
        # Nested divisions by constants merge into one ((B//2)//2 = B//4): the 63rd reaches 2**63.
        ("B" + "//2" * 300, "a dimension grows to 9.223e+18, beyond the limit of 2**63-1"),
        ("B" + "+1" * 600, f"a dimension expression is longer than {MAX_EXPR_CHARS:,} characters"),
    ],
    ids=["parentheses", "unary minus", "floor divisions", "long"],
)
def test_deeply_nested_shape_expressions_are_spec_errors_not_recursion_errors(entry: str, reason: str) -> None:
    (problem,) = load_error(one_node("{op: relu, in: x}", f"[B, '{entry}']")).problems
    assert problem.code == "E_SPEC"
    assert problem.message.endswith(reason)
    assert len(problem.message) < 200  # the entry is echoed as a short excerpt


def test_floor_divisions_nested_by_inference_are_a_shape_error_not_a_recursion_error() -> None:
    # Each repetition halves an odd-offset dim: (((H-1)//2-1)//2-1)//2 ... nests one level per pool.
    text = (
        "hndl: 1\ninputs: {x: {shape: [B, C, H]}}\nnodes: {n: {op: graph, graph: p, repeat: 400, in: x}}\n"
        "outputs: [n]\ngraphs:\n"
        "  p: {inputs: {h: {shape: [B, C, L]}}, nodes: {m: {op: maxpool1d, in: h, kernel_size: 3, stride: 2}},"
        " outputs: [m]}\n"
    )
    error = check_error(text)
    assert error.code == "E_SHAPE"
    assert error.problems[0].message == f"a dimension nests floor divisions more than {MAX_NESTING} levels deep"


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("9" * 4300 + "*" + "9" * 4300, f"a dimension expression is longer than {MAX_EXPR_CHARS:,} characters"),
        ("99999999999*99999999999", "a dimension grows to 1.000e+22, beyond the limit of 2**63-1"),
        ("100000000000000000000*B", "a dimension has a number of 21 digits, beyond the limit of 2**63-1"),
        (str(2**63), "a dimension grows to 9.223e+18, beyond the limit of 2**63-1"),
    ],
    ids=["8600 digits", "product", "coefficient", "2**63"],
)
def test_dims_beyond_int64_are_refused_at_load(entry: str, reason: str) -> None:
    (problem,) = load_error(one_node("{op: relu, in: x}", f"[B, '{entry}']")).problems
    assert problem.code == "E_SPEC"
    assert problem.message.endswith(reason)


def test_the_largest_int64_dim_is_accepted() -> None:
    assert parse_dim(MAX_DIM) == MAX_DIM == 2**63 - 1
    assert parse_dim(str(MAX_DIM)) == MAX_DIM
    with pytest.raises(DimError):
        dim_mul(symbol("B"), 2**62) and dim_mul(dim_mul(symbol("B"), 2**62), 4)


def test_python_graphs_get_the_same_dim_limits() -> None:
    g = hndl.Graph("g")
    with pytest.raises(hndl.HndlError) as info:
        g.input("x", ("B", 10**5000))
    assert info.value.code == "E_SPEC"
    assert "a number of 16,610 bits" in str(info.value)


# --- repetitions and outputs ----------------------------------------------------------------------------------


def test_nested_repeats_are_bounded_by_the_expanded_node_count() -> None:
    # Three levels of repeat: 1000 are a billion nodes: this ran for minutes at 3 GB.
    text = (
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {n: {op: graph, graph: a, repeat: 1000, in: x}}\n"
        "outputs: [n]\ngraphs:\n"
        "  a: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: b, repeat: 1000, in: h}}, outputs: [m]}\n"
        "  b: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: c, repeat: 1000, in: h}}, outputs: [m]}\n"
        "  c: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: relu, in: h}}, outputs: [m]}\n"
    )
    (problem,) = check_error(text).problems
    assert (problem.code, problem.node, problem.location) == ("E_PARAM", "n", "<string>:3:34")  # at its repeat key
    assert problem.message == (
        f"graph 'graph' expands to more than {MAX_EXPANDED_NODES:,} nodes with its subgraphs repeated"
    )


def test_regression_repeats_given_by_a_graph_parameter_escaped_the_node_count() -> None:
    # The count before the walk read `repeat: $n` as 1, so three nested levels of 1000 were a billion nodes
    # again. The walk now keeps its own count and stops at the same limit.
    text = (
        "hndl: 1\nparams: {n: 1000}\ninputs: {x: {shape: [B, 4]}}\n"
        "nodes: {n: {op: graph, graph: a, repeat: $n, in: x, params: {n: $n}}}\noutputs: [n]\ngraphs:\n"
        "  a: {params: {n: 1}, inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: b, repeat: $n, in: h,"
        " params: {n: $n}}}, outputs: [m]}\n"
        "  b: {params: {n: 1}, inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: c, repeat: $n, in: h}},"
        " outputs: [m]}\n"
        "  c: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: relu, in: h}}, outputs: [m]}\n"
    )
    (problem,) = check_error(text).problems
    assert (problem.code, problem.node, problem.location) == ("E_PARAM", "n", "<string>:4:34")
    assert problem.message == (
        f"graph 'graph' expands to more than {MAX_EXPANDED_NODES:,} nodes with its subgraphs repeated"
    )


def test_the_walk_keeps_its_own_count_behind_the_count_before_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever the count before the walk misses, the walk stops at the same limit. A repetition counts as a node
    # (its relu another), so the 51st node is repetition 25.
    import hndl._check
    import hndl._check_limits

    monkeypatch.setattr(hndl._check_limits, "MAX_EXPANDED_NODES", 50)
    monkeypatch.setattr(hndl._check, "within_node_limit", lambda root, library, problems: True)
    text = (
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {n: {op: graph, graph: a, repeat: 100, in: x}}\n"
        "outputs: [n]\ngraphs:\n  a: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: relu, in: h}}, outputs: [m]}\n"
    )
    (problem,) = check_error(text).problems
    assert (problem.code, problem.node) == ("E_PARAM", "n")
    assert problem.message == (
        "graph 'graph' expands to more than 50 nodes with its subgraphs repeated (stopped at 'n.25')"
    )


def test_a_graph_at_the_expanded_node_limit_still_checks() -> None:
    block = hndl.Graph("block")
    h = block.input("h", ("B", 4))
    out = h
    for i in range(99):
        out = block.add("relu", out, name=f"r{i}")
    block.output(out)
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    g.output(g.add("graph", x, graph=block, repeat=200))  # 19,800 leaf nodes and 200 repetitions: 20,000
    assert MAX_EXPANDED_NODES == 20_000
    checked = hndl.check(g)
    assert len(checked.nodes[0].body) == 200


@pytest.mark.parametrize("op", ["split", "chunk"])
def test_split_sections_are_bounded_before_outputs_are_allocated(op: str) -> None:
    # sections: 1000000000 used to allocate a billion output ids: MemoryError at 5.8 GB.
    key = "sections" if op == "split" else "chunks"
    (problem,) = check_error(one_node(f"{{op: {op}, in: x, {key}: 1000000000}}")).problems
    assert (problem.code, problem.message) == ("E_PARAM", f"parameter '{key}' must be <= 10000, got 1000000000")


# --- only HndlError -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["split", "chunk"])
def test_split_on_a_0d_input_is_a_shape_error_not_an_index_error(op: str) -> None:
    key = "sections" if op == "split" else "chunks"
    error = check_error(one_node(f"{{op: {op}, in: x, {key}: 2}}", "[]"))
    assert (error.code, error.problems[0].message) == ("E_SHAPE", "a 0-d input has no dim to split")


def test_a_layer_failure_message_has_only_the_first_line_and_chains_the_cause() -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    g.output(g.add("linear", x, name="big", out_features=10**17))
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(g)
    (problem,) = info.value.problems
    assert problem.code == "E_PARAM"
    assert problem.message.startswith("building the layer failed: RuntimeError: ")
    assert "\n" not in problem.message
    assert len(problem.message) < 260
    assert isinstance(info.value.__cause__, RuntimeError)


def test_a_problem_formatting_a_huge_integer_does_not_raise() -> None:
    problem = hndl.Problem("E_SHAPE", "too big", expected=10**5000, actual=[10**5000], bindings={"B": 10**5000})
    text = str(hndl.HndlError(problem))
    assert "<an integer of 16,610 bits>" in text


# --- no check that passes what will fail ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "shape", "dtype", "code", "message"),
    [
        ("{op: batchnorm1d, in: x, eps: 0}", "[B, 4]", None, "E_PARAM", "eps must be > 0 for batch normalisation, got 0"),
        ("{op: batchnorm2d, in: x, eps: 0.0}", "[B, 4, 2, 2]", None, "E_PARAM", "eps must be > 0 for batch normalisation, got 0.0"),
        ("{op: layernorm, in: x, normalized_shape: []}", "[B, 4]", None, "E_PARAM", "normalized_shape is empty"),
        ("{op: rmsnorm, in: x, normalized_shape: []}", "[B, 4]", None, "E_PARAM", "normalized_shape is empty"),
        (
            "{op: embedding, in: x, num_embeddings: 4, embedding_dim: 2}",
            "[B, 4]",
            "int8",
            "E_DTYPE",
            "embedding takes int32 or int64 indices, got int8",
        ),
        (
            "{op: embedding, in: x, num_embeddings: 4, embedding_dim: 2}",
            "[B, 4]",
            "uint8",
            "E_DTYPE",
            "embedding takes int32 or int64 indices, got uint8",
        ),
        (
            "{op: attention, in: x, num_heads: 1}",
            "[B, 4, 0]",
            None,
            "E_SHAPE",
            "parameter 'embed_dim' follows from an input dim that must be >= 1, got 0",
        ),
        (
            "{op: split, in: x, sections: 2}",
            "[B, 0]",
            None,
            "E_SHAPE",
            "dim 1 of the input has length 0, which cannot be split into 2 sections",
        ),
        (
            "{op: conv2d, in: x, out_channels: 2, kernel_size: 1}",
            "[B, 0, 4, 4]",
            None,
            "E_SHAPE",
            "parameter 'in_channels' follows from an input dim that must be >= 1, got 0",
        ),
    ],
    ids=["batchnorm eps 0", "batchnorm2d eps 0", "layernorm []", "rmsnorm []", "embedding int8", "embedding uint8",
         "attention width 0", "split zero-length dim", "conv2d 0 channels"],
)  # fmt: skip
def test_a_node_that_would_fail_at_its_first_call_is_a_static_error(
    node: str, shape: str, dtype: str | None, code: str, message: str
) -> None:
    error = check_error(one_node(node, shape, dtype))
    assert (error.code, error.node, error.problems[0].message) == (code, "n", message)


def test_a_float64_input_gets_its_layers_in_float64() -> None:
    # Decision (SPEC §6.2): a layer follows its input's declared concrete float dtype. Before, a float64 input
    # checked fine and failed at every call ("mat1 and mat2 must have the same dtype").
    g = hndl.loads(
        "hndl: 1\ninputs: {x: {shape: [B, 4], dtype: float64}}\n"
        "nodes: {h: {op: linear, in: x, out_features: 3}, n: {op: batchnorm1d, in: h}}\noutputs: [n]\n"
    )
    model = hndl.build(g)
    assert model.nodes["n_h"].weight.dtype == torch.float64
    assert model.nodes["n_n"].running_mean.dtype == torch.float64
    assert model.nodes["n_n"].num_batches_tracked.dtype == torch.int64
    x = torch.randn(5, 4, dtype=torch.float64)
    out = model(x)
    assert out.dtype == torch.float64
    expected = model.nodes["n_n"](model.nodes["n_h"](x))
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_a_float_input_leaves_layers_in_the_default_dtype() -> None:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))  # dtype "float": any float; the layer stays as torch built it
    g.output(g.add("linear", x, name="h", out_features=3))
    assert hndl.build(g).nodes["n_h"].weight.dtype == torch.get_default_dtype()
