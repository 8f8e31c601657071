"""Fuzzing the spec loader: whatever the text, load + build either succeeds or raises HndlError.

Valid specs are mutated at random, both as data (keys deleted, values replaced by other types, references
renamed, garbage inserted, values wrapped in lists or mappings) and as text (truncated, spliced with random
characters, lines duplicated so keys repeat, slices deleted), and completely random text and bytes are thrown
in too. Nothing may escape but :class:`hndl.HndlError`. Whatever loads must also survive ``dumps`` and load
back to the same graph.

Numbers stay small so that a mutated spec that still builds allocates little (``repeat`` and layer sizes are
parameters the fuzzer touches).
"""

from __future__ import annotations

import copy
import json
import string
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hndl


def fuzz(examples: int) -> settings:
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )


SEEDS: list[dict[str, Any]] = [
    {
        "hndl": 1,
        "name": "mlp",
        "inputs": {"x": {"shape": ["B", 12]}},
        "nodes": {
            "hidden": {"op": "linear", "in": "x", "out_features": 8},
            "act": {"op": "relu", "in": "hidden"},
            "out": {"op": "linear", "in": "act", "out_features": 3},
        },
        "outputs": ["out"],
    },
    {
        "hndl": 1,
        "name": "tiny_transformer",
        "inputs": {"x": {"shape": ["B", "T", 8]}},
        "nodes": {
            "blocks": {"op": "graph", "graph": "block", "repeat": 2, "in": "x"},
            "norm": {"op": "layernorm", "in": "blocks"},
        },
        "outputs": ["norm"],
        "graphs": {
            "block": {
                "inputs": {"h": {"shape": ["B", "T", "D"]}},
                "nodes": {
                    "ln": {"op": "layernorm", "in": "h"},
                    "attn": {"op": "attention", "in": "ln", "num_heads": 2, "causal": True},
                    "res": {"op": "add", "in": ["h", "attn"]},
                    "up": {"op": "linear", "in": "res", "out_features": 16},
                    "act": {"op": "gelu", "in": "up"},
                    "down": {"op": "linear", "in": "act", "out_features": 8},
                    "out": {"op": "add", "in": ["res", "down"]},
                },
                "outputs": ["out"],
            }
        },
    },
    {
        "hndl": 1,
        "name": "convs",
        "inputs": {"img": {"shape": ["B", 3, 8, 8]}, "ids": {"shape": ["B", "T"], "dtype": "int64"}},
        "nodes": {
            "conv": {"op": "conv2d", "in": "img", "out_channels": 4, "kernel_size": 3, "padding": 1},
            "bn": {"op": "batchnorm2d", "in": "conv"},
            "pool": {"op": "maxpool2d", "in": "bn", "kernel_size": 2},
            "flat": {"op": "flatten", "in": "pool", "start_dim": 1},
            "parts": {"op": "split", "in": "flat", "sections": 2},
            "sum": {"op": "add", "in": ["parts.0", "parts.1"]},
            "emb": {"op": "embedding", "in": "ids", "num_embeddings": 10, "embedding_dim": 4},
            "t": {"op": "transpose", "in": "emb", "dim0": 1, "dim1": 2},
            "drop": {"op": "dropout", "in": "sum", "p": 0.5},
        },
        "outputs": ["drop", "t"],
    },
]

NAMES = ["x", "h", "hidden", "act", "out", "blocks", "block", "norm", "parts.0", "parts.7", "img", "ids", "nope"]
OPS = ["linear", "relu", "graph", "add", "conv2d", "split", "layernorm", "module", "lineer", ""]
KEYS = ["op", "in", "shape", "dtype", "inputs", "nodes", "outputs", "graphs", "hndl", "name", "repeat", "graph", "zz"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=24),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
    st.sampled_from(NAMES + OPS + KEYS + ["float32", "int64", "cpu", "*b", "C*H", "B+1", "(", "1e5"]),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS + NAMES) | st.text(max_size=4), inner, max_size=4),
    ),
    max_leaves=12,
)


def paths(tree: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``tree`` (the root included)."""
    out = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            out += paths(value, (*prefix, key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            out += paths(value, (*prefix, i))
    return out


def parent_and_key(tree: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    node = tree
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


@st.composite
def mutated_data(draw: st.DrawFn) -> Any:
    tree = copy.deepcopy(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        all_paths = [p for p in paths(tree) if p]
        if not isinstance(tree, (dict, list)) or not all_paths:
            break
        # Most mutations go inside nodes, so that many mutants get past the loader to the checker and builder.
        inside_nodes = [p for p in all_paths if len(p) >= 3 and "nodes" in p[:-1]]
        pool = inside_nodes if inside_nodes and draw(st.integers(0, 9)) < 6 else all_paths
        path = draw(st.sampled_from(pool))
        parent, key = parent_and_key(tree, path)
        action = draw(st.sampled_from(["delete", "replace", "rename", "insert", "wrap_list", "wrap_dict", "op"]))
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = draw(values)
        elif action == "rename":
            parent[key] = draw(st.sampled_from(NAMES))
        elif action == "insert" and isinstance(parent, dict):
            parent[draw(st.sampled_from(KEYS + NAMES))] = draw(values)
        elif action == "insert" and isinstance(parent, list):
            parent.insert(draw(st.integers(0, len(parent))), draw(values))
        elif action == "wrap_list":
            parent[key] = [parent[key]]
        elif action == "wrap_dict":
            parent[key] = {draw(st.sampled_from(KEYS)): parent[key]}
        elif action == "op" and isinstance(parent[key], dict):
            parent[key]["op"] = draw(st.sampled_from(OPS))
    if draw(st.booleans()):
        tree = draw(st.sampled_from([tree, [tree], {"wrapped": tree}])) if draw(st.integers(0, 9)) == 0 else tree
    return tree


def to_text(tree: Any, style: str) -> str:
    if style == "json":
        return json.dumps(tree, allow_nan=True)
    return yaml.safe_dump(tree, default_flow_style=style == "flow", sort_keys=False, allow_unicode=True)


def load_and_build(source: Any) -> hndl.Graph | None:
    """Load and build; returns the graph if both worked. Anything but HndlError fails the test."""
    try:
        graph = hndl.loads(source)
        hndl.build(graph)
    except hndl.HndlError as exc:
        error = exc
    else:
        return graph
    # Every problem is well formed: a known code, a message, and it renders.
    assert all(p.code in hndl.CODES and p.message for p in error.problems), error.problems
    assert str(error)
    return None


def load_only(source: Any) -> hndl.Graph | None:
    try:
        return hndl.loads(source)
    except hndl.HndlError:
        return None


def structure(graph: hndl.Graph) -> Any:
    def one(g: hndl.Graph) -> Any:
        return (
            g.name,
            [(n, s.contract) for n, s in g.inputs.items()],
            [(n.name, n.op, n.inputs, n.params) for n in g.nodes.values()],
            g.outputs,
        )

    return one(graph), [one(sub) for sub in graph.graphs.values()]


def assert_round_trip(graph: hndl.Graph) -> None:
    text = hndl.dumps(graph)
    again = hndl.loads(text)
    assert repr(structure(again)) == repr(structure(graph))  # repr: nan params compare equal as text
    assert hndl.dumps(again) == text


@fuzz(1200)
@given(tree=mutated_data(), style=st.sampled_from(["block", "flow", "json"]))
def test_mutated_specs_load_and_build_or_raise_hndl_error(tree: Any, style: str) -> None:
    text = to_text(tree, style)
    graph = load_and_build(text)
    loaded = graph or load_only(text)
    if loaded is not None:
        assert_round_trip(loaded)


@st.composite
def mutated_text(draw: st.DrawFn) -> str:
    text = to_text(draw(st.sampled_from(SEEDS)), draw(st.sampled_from(["block", "flow", "json"])))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        action = draw(st.sampled_from(["truncate", "insert", "delete", "duplicate_line", "swap_char"]))
        at = draw(st.integers(min_value=0, max_value=len(text)))
        if action == "truncate":
            text = text[:at]
        elif action == "insert":
            junk = draw(
                st.text(
                    alphabet=st.sampled_from(list(":{}[],-&*!|>'\"#%@`?\t\n ") + list(string.ascii_letters)), max_size=6
                )
                | st.text(max_size=4)
            )
            text = text[:at] + junk + text[at:]
        elif action == "delete":
            end = draw(st.integers(min_value=at, max_value=min(len(text), at + 20)))
            text = text[:at] + text[end:]
        elif action == "duplicate_line":
            lines = text.split("\n")
            i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif action == "swap_char" and text:
            i = min(at, len(text) - 1)
            text = text[:i] + draw(st.characters()) + text[i + 1 :]
    return text


@fuzz(1200)
@given(text=mutated_text())
def test_mutated_text_loads_and_builds_or_raises_hndl_error(text: str) -> None:
    graph = load_and_build(text)
    if graph is not None:
        assert_round_trip(graph)


@fuzz(600)
@given(text=st.text(max_size=200))
def test_random_text_raises_hndl_error(text: str) -> None:
    load_and_build(text)


@fuzz(300)
@given(text=st.text(max_size=60).map(lambda t: t + "\n") | st.text(max_size=60).map(lambda t: "hndl:" + t))
def test_load_refuses_any_text_without_reading_a_file(text: str) -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.load(text)
    assert info.value.problems[0].hint == "hndl.load takes a path; pass spec text to hndl.loads"


@fuzz(400)
@given(data=st.binary(max_size=200))
def test_random_bytes_raise_hndl_error(data: bytes) -> None:
    load_and_build(data)


# "op" and "in" are node keys, "name" is Graph.add's own keyword: none of them can be a parameter.
param_keys = st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=6).filter(
    lambda k: k not in ("op", "in", "name")
)
param_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(),
        st.sampled_from(["yes", "no", "on", "off", "~", "null", "1e5", "0x1F", "1:30", "*a", "&b", "!t", "<<", "- x"]),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)


@fuzz(400)
@given(params=st.dictionaries(param_keys, param_values, max_size=5), shape=st.sampled_from([["B", 4], ["*b", "C*H"]]))
def test_dumps_round_trips_any_plain_params(params: dict[str, Any], shape: list[Any]) -> None:
    g = hndl.Graph("g")
    x = g.input("x", shape)
    g.output(g.add("relu", x, name="r", **params))
    text = hndl.dumps(g)
    again = hndl.loads(text)
    assert again.nodes["r"].params == params
    assert again.inputs["x"].contract == g.inputs["x"].contract
    assert hndl.dumps(again) == text
