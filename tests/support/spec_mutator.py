"""Mutated spec files, for fuzzing the loader, the checker and the builder.

Valid seed specs are mutated as data (keys deleted, values replaced by other types, references renamed, garbage
inserted, values wrapped in lists or mappings) and as text (truncated, spliced with random characters, lines
duplicated so keys repeat, slices deleted). The mutations draw their choices from a :class:`Chooser`, so the
same mutator serves Hypothesis (``tests/core/test_spec_fuzz.py``, which shrinks what it finds) and the
time-budgeted fuzzer behind ``nox -s fuzz`` (``tests/fuzz/fuzz_specs.py``, plain ``random`` for speed).

``HOSTILE`` holds the spec texts of the hardening issue (huge integers, deep parentheses, nested ``repeat``,
long lists, control characters, NaN): the fuzzer runs each of them first, then mutates them like the seeds.
Numbers in the seeds stay small, so that a mutant that still builds allocates little.
"""

from __future__ import annotations

import copy
import json
import math
import string
import struct
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import yaml

T = TypeVar("T")

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
    {
        "hndl": 1,
        "name": "configured",
        "params": {"width": 8, "depth": 2, "act": True, "q": [1, 2]},
        "inputs": {"x": {"shape": ["B", "width"]}},
        "nodes": {
            "stack": {
                "op": "graph",
                "graph": "block",
                "repeat": "$depth",
                "in": "x",
                "params": [{"hidden": "$width*2", "gated": "$act", "sizes": "$q", "out": "$width"}, {"out": "$width"}],
            },
            "out": {"op": "linear", "in": "stack", "out_features": "$width//2"},
        },
        "outputs": ["out"],
        "graphs": {
            "block": {
                "params": {"hidden": 4, "gated": False, "sizes": [1], "out": 8},
                "inputs": {"h": {"shape": ["B", "D"]}},
                "nodes": {
                    "up": {"op": "linear", "in": "h", "out_features": "$hidden"},
                    "act": {"op": "relu", "in": "up", "when": "$gated"},
                    "down": {"op": "linear", "in": "act", "out_features": "$out"},
                },
                "outputs": ["down"],
            }
        },
    },
]


def _one_node(node: str, shape: str = "[B, 4]") -> str:
    return f"hndl: 1\ninputs: {{x: {{shape: {shape}}}}}\nnodes: {{n: {node}}}\noutputs: [n]\n"


_BIG = "9" * 4301
_NESTED_REPEAT = (
    "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {n: {op: graph, graph: a, repeat: 1000, in: x}}\n"
    "outputs: [n]\ngraphs:\n"
    "  a: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: b, repeat: 1000, in: h}}, outputs: [m]}\n"
    "  b: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: c, repeat: 1000, in: h}}, outputs: [m]}\n"
    "  c: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: relu, in: h}}, outputs: [m]}\n"
)


def nested_subgraphs(levels: int) -> str:
    """A graph whose subgraph ``g0`` runs ``g1``, which runs ``g2``, ... ``levels`` deep (issue 20: 249 levels,
    24 KB, were a RecursionError)."""
    lines = ["hndl: 1", "inputs: {x: {shape: [B, 4]}}", "nodes: {n: {op: graph, graph: g0, in: x}}", "outputs: [n]"]
    lines.append("graphs:")
    for i in range(levels):
        inner = f"{{op: graph, graph: g{i + 1}, in: h}}" if i < levels - 1 else "{op: relu, in: h}"
        lines.append(f"  g{i}: {{inputs: {{h: {{shape: [B, 4]}}}}, nodes: {{m: {inner}}}, outputs: [m]}}")
    return "\n".join(lines) + "\n"


def graph_parameter_laughs(levels: int, width: int = 10) -> str:
    """Graph parameters as a "billion laughs": each level passes on ``q: [$q, $q, ...]`` (issue 20: 8 levels,
    1.4 KB, grew without bound)."""
    refs = "[" + ", ".join(["$q"] * width) + "]"
    lines = ["hndl: 1", "inputs: {x: {shape: [B, 4]}}", "nodes: {n: {op: graph, graph: g0, in: x, params: {q: 1}}}"]
    lines += ["outputs: [n]", "graphs:"]
    for i in range(levels):
        inner = (
            f"{{op: graph, graph: g{i + 1}, in: h, params: {{q: {refs}}}}}" if i < levels - 1 else "{op: relu, in: h}"
        )
        lines.append(
            f"  g{i}: {{params: {{q: 0}}, inputs: {{h: {{shape: [B, 4]}}}}, nodes: {{m: {inner}}}, outputs: [m]}}"
        )
    return "\n".join(lines) + "\n"


def high_rank(rank: int, repeat: int = 1000) -> str:
    """A reshape to ``rank`` dims, then ``repeat`` relus that take any shape (``[*s]``): issue 20, rank 1,000 took
    25 s and rank 40,000 was a MemoryError."""
    return (
        "hndl: 1\ninputs: {x: {shape: [B]}}\nnodes:\n"
        f"  r: {{op: reshape, in: x, shape: [-1{',1' * (rank - 1)}]}}\n"
        f"  n: {{op: graph, graph: g, in: r, repeat: {repeat}}}\n"
        "outputs: [n]\ngraphs:\n"
        "  g: {inputs: {h: {shape: ['*s']}}, nodes: {m: {op: relu, in: h}}, outputs: [m]}\n"
    )


def many_relus(per_graph: int, repeat: int) -> str:
    """``repeat`` repetitions of a chain of ``per_graph`` relus (issue 20: 100 x 999 in 315 bytes made ``hndl
    summary`` take 40 s and 3.6 GB)."""
    chain = ", ".join(f"r{i}: {{op: relu, in: {'h' if i == 0 else f'r{i - 1}'}}}" for i in range(per_graph))
    return (
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\n"
        f"nodes: {{n: {{op: graph, graph: g, in: x, repeat: {repeat}}}}}\noutputs: [n]\ngraphs:\n"
        f"  g: {{inputs: {{h: {{shape: [B, 4]}}}}, nodes: {{{chain}}}, outputs: [r{per_graph - 1}]}}\n"
    )


SELF_USE = (
    "hndl: 1\n"
    "inputs: {x: {shape: [B, 4]}}\n"
    "nodes: {n: {op: graph, graph: g, in: x}}\n"
    "outputs: [n]\n"
    "graphs:\n"
    "  g: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: g, in: h}}, outputs: [m]}\n"
)
MUTUAL_USE = SELF_USE.replace("graph: g, in: h", "graph: f, in: h") + (
    "  f: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: graph, graph: g, in: h}}, outputs: [m]}\n"
)
TIE_FLOAT64_TO_FLOAT32 = (
    "hndl: 1\ninputs: {x: {shape: [B, 4], dtype: float64}, y: {shape: [B, 4]}}\n"
    "nodes:\n"
    "  a: {op: linear, in: x, out_features: 4}\n"
    "  b: {op: linear, in: y, out_features: 4, tie: {weight: a.weight}}\n"
    "outputs: [a, b]\n"
)
NESTED_EMPTY_REPEAT = _NESTED_REPEAT.replace("nodes: {m: {op: relu, in: h}}, outputs: [m]", "nodes: {}, outputs: [h]")

#: What a picture must escape (issue 20): a name of 20,000 characters (an explicit key: YAML reads implicit keys
#: of at most 1,024), an op with NUL, an escape code, entities, a line break, Mermaid's quote code and a backtick,
#: a reference with NUL and U+2028, a repeat that is text, and a port that is NUL. It does not check, and is
#: drawn anyway.
DRAW_HOSTILE = (
    "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes:\n"
    f"  ? {'n' * 20_000}\n  : {{op: relu, in: x}}\n"
    '  b: {op: "r\\0e\\x1b[2J&amp;<b>\\n#quot;`|]", in: "zz\\0&lt;\\u2028"}\n'
    '  c: {op: graph, graph: g, in: x, repeat: "3\\n&"}\n'
    f"outputs: [b, c, {'n' * 20_000}]\n"
    'graphs:\n  g: {inputs: {h: {shape: [B, 4]}}, nodes: {m: {op: relu, in: "h.\\0"}}, outputs: [m]}\n'
)

#: Spec texts from the hardening issue, each once bounded-time trouble or a non-HndlError.
HOSTILE: dict[str, str] = {
    "huge int version": f"hndl: {_BIG}\ninputs: {{}}\nnodes: {{}}\noutputs: []\n",
    "huge int repeat": _one_node(f"{{op: graph, graph: g, in: x, repeat: {_BIG}}}"),
    "huge int param": _one_node(f"{{op: linear, in: x, out_features: {_BIG}}}"),
    "huge int dim": _one_node("{op: relu, in: x}", f"[B, {_BIG}]"),
    "huge hex dim": _one_node("{op: relu, in: x}", "[B, 0x" + "f" * 3600 + "]"),
    "huge 4300-digit dim": _one_node("{op: linear, in: x, out_features: 2}", "[B, " + "9" * 4300 + "]"),
    "huge product dim": _one_node("{op: relu, in: x}", "[B, '" + "9" * 4300 + "*" + "9" * 4300 + "']"),
    "huge dim linear": _one_node("{op: linear, in: x, out_features: 2}", "[B, 99999999999999999999]"),
    "deep parens": _one_node("{op: relu, in: x}", "[B, '" + "(" * 400 + "B" + ")" * 400 + "']"),
    "deep floordiv": _one_node("{op: relu, in: x}", "[B, '" + "B" + "//2" * 400 + "']"),
    "shape product of sums": _one_node("{op: relu, in: x}", "[B, '" + "*".join(["(A+B+C+D+E+F+G+H+I+J)"] * 12) + "']"),
    "nested repeat": _NESTED_REPEAT,
    "split sections huge": _one_node("{op: split, in: x, sections: 1000000000}"),
    "split on 0-d": _one_node("{op: split, in: x, sections: 2}", "[]"),
    "long list": "hndl: 1\ninputs: {}\nnodes: {}\noutputs: []\nx: [" + "1," * 250_000 + "]\n",
    "control characters": _one_node('{op: relu, in: "x\\e[2J\\nother.yaml: OK"}'),
    "control characters in key": _one_node('{op: relu, in: x, "k\\e[2J\\r": 1}'),
    "eps nan": _one_node("{op: layernorm, in: x, eps: .nan}"),
    "eps inf": _one_node("{op: layernorm, in: x, eps: .inf}"),
    "momentum nan": _one_node("{op: batchnorm1d, in: x, momentum: .nan}"),
    "dropout nan": _one_node("{op: dropout, in: x, p: .nan}"),
    "batchnorm eps 0": _one_node("{op: batchnorm1d, in: x, eps: 0}"),
    "layernorm empty shape": _one_node("{op: layernorm, in: x, normalized_shape: []}"),
    "embedding int8": _one_node("{op: embedding, in: x, num_embeddings: 4, embedding_dim: 2}", "[B, 4], dtype: int8"),
    "conv2d zero channels": _one_node("{op: conv2d, in: x, out_channels: 2, kernel_size: 1}", "[B, 0, 4, 4]"),
    "attention width 0": _one_node("{op: attention, in: x, num_heads: 1}", "[B, 4, 0]"),
    "input named self": "hndl: 1\ninputs: {self: {shape: [B, 4]}}\nnodes: {n: {op: relu, in: self}}\noutputs: [n]\n",
    "long implicit key": _one_node("{op: relu, in: x}")
    .replace("n: {", "n" * 2000 + ": {")
    .replace("[n]", "[" + "n" * 2000 + "]"),
    "deep nesting": "hndl: 1\nx: " + "[" * 5000 + "]" * 5000 + "\n",
    "billion laughs": "a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    + "".join(f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]\n" for i in range(1, 10)),
    # issue 20
    "249 nested subgraphs": nested_subgraphs(249),
    "subgraph uses itself": SELF_USE,
    "subgraphs use each other": MUTUAL_USE,
    "graph parameter laughs": graph_parameter_laughs(8),
    "reshape to rank 1000": high_rank(1000),
    "reshape to rank 40000": high_rank(40_000, repeat=10),
    "100 x 999 relus": many_relus(100, 999),
    "nested repeats of an empty graph": NESTED_EMPTY_REPEAT,
    "tie float64 to float32": TIE_FLOAT64_TO_FLOAT32,
    "names a picture must escape": DRAW_HOSTILE,
}

NAMES = ["x", "h", "hidden", "act", "out", "blocks", "block", "norm", "parts.0", "parts.7", "img", "ids", "nope"]
OPS = ["linear", "relu", "graph", "add", "conv2d", "split", "layernorm", "module", "lineer", ""]
KEYS = ["op", "in", "shape", "dtype", "inputs", "nodes", "outputs", "graphs", "hndl", "name", "repeat", "graph", "zz"]
JUNK_CHARACTERS = list(":{}[],-&*!|>'\"#%@`?\t\n ") + list(string.ascii_letters)


class Chooser(Protocol):
    """Where a mutation's random choices come from: a Hypothesis ``draw``, or ``random.Random``."""

    def choice(self, options: Sequence[T]) -> T: ...

    def integer(self, low: int, high: int) -> int: ...

    def value(self) -> Any:
        """A plain value to write anywhere: None, booleans, numbers (NaN and infinities too), strings, and
        small lists and mappings of them."""
        ...

    def junk(self) -> str:
        """A few characters to splice into spec text."""
        ...

    def character(self) -> str: ...


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


def _parent_and_key(tree: Any, path: tuple[Any, ...]) -> tuple[Any, Any]:
    node = tree
    for key in path[:-1]:
        node = node[key]
    return node, path[-1]


def mutate_data(choose: Chooser, seed: Any) -> Any:
    """A copy of ``seed`` (plain data) with one to three mutations, most of them inside nodes."""
    tree = copy.deepcopy(seed)
    for _ in range(choose.integer(1, 3)):
        all_paths = [p for p in paths(tree) if p]
        if not isinstance(tree, (dict, list)) or not all_paths:
            break
        # Most mutations go inside nodes, so that many mutants get past the loader to the checker and builder.
        inside_nodes = [p for p in all_paths if len(p) >= 3 and "nodes" in p[:-1]]
        pool = inside_nodes if inside_nodes and choose.integer(0, 9) < 6 else all_paths
        parent, key = _parent_and_key(tree, choose.choice(pool))
        action = choose.choice(["delete", "replace", "rename", "insert", "wrap_list", "wrap_dict", "op"])
        if action == "delete":
            del parent[key]
        elif action == "replace":
            parent[key] = choose.value()
        elif action == "rename":
            parent[key] = choose.choice(NAMES)
        elif action == "insert" and isinstance(parent, dict):
            parent[choose.choice(KEYS + NAMES)] = choose.value()
        elif action == "insert" and isinstance(parent, list):
            parent.insert(choose.integer(0, len(parent)), choose.value())
        elif action == "wrap_list":
            parent[key] = [parent[key]]
        elif action == "wrap_dict":
            parent[key] = {choose.choice(KEYS): parent[key]}
        elif action == "op" and isinstance(parent[key], dict):
            parent[key]["op"] = choose.choice(OPS)
    if choose.integer(0, 19) == 0:
        tree = choose.choice([[tree], {"wrapped": tree}])
    return tree


def to_text(tree: Any, style: str) -> str:
    """``tree`` as spec text: ``"block"`` or ``"flow"`` YAML, or ``"json"``."""
    if style == "json":
        return json.dumps(tree, allow_nan=True)
    # libyaml's emitter when PyYAML has it: the pure-Python one took a third of the fuzzer's time.
    return yaml.dump(tree, Dumper=_DUMPER, default_flow_style=style == "flow", sort_keys=False, allow_unicode=True)


_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def mutate_text(choose: Chooser, text: str) -> str:
    """``text`` with one to three edits: truncated, spliced with junk, a slice deleted, a line duplicated (so
    keys repeat), a character swapped."""
    for _ in range(choose.integer(1, 3)):
        action = choose.choice(["truncate", "insert", "delete", "duplicate_line", "swap_char"])
        at = choose.integer(0, len(text))
        if action == "truncate":
            text = text[:at]
        elif action == "insert":
            text = text[:at] + choose.junk() + text[at:]
        elif action == "delete":
            end = choose.integer(at, min(len(text), at + 20))
            text = text[:at] + text[end:]
        elif action == "duplicate_line":
            lines = text.split("\n")
            i = choose.integer(0, len(lines) - 1)
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif action == "swap_char" and text:
            i = min(at, len(text) - 1)
            text = text[:i] + choose.character() + text[i + 1 :]
    return text


# --- one-file models (.safetensors) ----------------------------------------------------------------------------

_ITEMSIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def model_file(
    spec: str | None,
    tensors: dict[str, tuple[str, list[int]]],
    *,
    tied: Any = None,
    metadata: dict[str, Any] | None = None,
) -> bytes:
    """The bytes of a ``.safetensors`` file as :func:`hndl.save` writes it: ``tensors`` (name -> dtype code,
    shape) filled with zeros, ``spec`` and ``tied`` (a mapping, written as JSON, or any value as it is) in the
    metadata, then ``metadata`` on top. Written by hand, so a test can say anything the format allows and more."""
    header: dict[str, Any] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * _ITEMSIZE.get(dtype, 1)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    meta: dict[str, Any] = {"format": "pt", "hndl.format": "1"}
    if spec is not None:
        meta["hndl.spec"] = spec
    meta["hndl.tied"] = json.dumps(tied if tied is not None else {}) if not isinstance(tied, str) else tied
    meta.update(metadata or {})
    header["__metadata__"] = meta
    return header_bytes(json.dumps(header)) + b"\0" * offset


def header_bytes(text: str) -> bytes:
    """The length field and the header of a safetensors file (padded with spaces to 8 bytes, as safetensors does)."""
    raw = text.encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def edit_header(data: bytes, name: str, **fields: Any) -> bytes:
    """``data`` (a safetensors file) with ``fields`` of tensor ``name``'s header entry replaced (``name``
    ``"__metadata__"`` for the metadata), the data bytes kept."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header.setdefault(name, {}).update(fields)
    return header_bytes(json.dumps(header)) + data[8 + length :]


MLP_SPEC = (
    "hndl: 1\nname: mlp\ninputs: {x: {shape: [B, 4]}}\n"
    "nodes: {a: {op: linear, in: x, out_features: 4}, b: {op: linear, in: a, out_features: 4}}\noutputs: [b]\n"
)
MLP_TENSORS: dict[str, tuple[str, list[int]]] = {
    "nodes.n_a.weight": ("F32", [4, 4]),
    "nodes.n_a.bias": ("F32", [4]),
    "nodes.n_b.weight": ("F32", [4, 4]),
    "nodes.n_b.bias": ("F32", [4]),
}
BATCHNORM_SPEC = "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {n: {op: batchnorm1d, in: x}}\noutputs: [n]\n"
BATCHNORM_TENSORS: dict[str, tuple[str, list[int]]] = {
    "nodes.n_n.weight": ("F32", [4]),
    "nodes.n_n.bias": ("F32", [4]),
    "nodes.n_n.running_mean": ("F32", [4]),
    "nodes.n_n.running_var": ("F32", [4]),
    "nodes.n_n.num_batches_tracked": ("I64", []),
}
BIG_LINEAR_SPEC = (
    "hndl: 1\ninputs: {x: {shape: [B, 16384]}}\nnodes: {n: {op: linear, in: x, out_features: 16384}}\noutputs: [n]\n"
)


def _with_dtype(dtype: str) -> dict[str, tuple[str, list[int]]]:
    return {name: (dtype if name == "nodes.n_a.weight" else code, shape) for name, (code, shape) in MLP_TENSORS.items()}


#: Model files from the hardening issue (issue 20), each once a non-HndlError or unbounded work in load_model.
HOSTILE_MODELS: dict[str, bytes] = {
    "int weights": model_file(MLP_SPEC, _with_dtype("I64")),
    "bool weights": model_file(MLP_SPEC, _with_dtype("BOOL")),
    "uint8 weights": model_file(MLP_SPEC, _with_dtype("U8")),
    "header nested 100k deep": header_bytes('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
    "tied of the wrong type": model_file(MLP_SPEC, MLP_TENSORS, tied="[1, 2]"),
    "tied to a number": model_file(MLP_SPEC, MLP_TENSORS, tied={"nodes.n_b.weight": 1}),
    "tied as a JSON object": model_file(MLP_SPEC, MLP_TENSORS, metadata={"hndl.tied": {"a": "b"}}),
    "tie a parameter to a buffer": model_file(
        BATCHNORM_SPEC,
        {k: v for k, v in BATCHNORM_TENSORS.items() if k != "nodes.n_n.weight"},
        tied={"nodes.n_n.weight": "nodes.n_n.running_mean"},
    ),
    "16384x16384 linear in 221 bytes": model_file(BIG_LINEAR_SPEC, {}),
    "invented tie": model_file(
        MLP_SPEC,
        {k: v for k, v in MLP_TENSORS.items() if k != "nodes.n_b.weight"},
        tied={"nodes.n_b.weight": "nodes.n_a.weight"},
    ),
    "spec of another type": model_file(None, MLP_TENSORS, metadata={"hndl.spec": 7}),
    "unknown dtype": model_file(MLP_SPEC, _with_dtype("Q9")),
    "offsets disagree with the shape": edit_header(model_file(MLP_SPEC, MLP_TENSORS), "nodes.n_a.bias", shape=[5]),
    # found by the fuzzer: sizes whose product has more digits than Python prints
    "4000-digit sizes": edit_header(model_file(MLP_SPEC, MLP_TENSORS), "nodes.n_a.bias", shape=[10**4000] * 3),
    "sizes whose product is huge": edit_header(
        model_file(MLP_SPEC, MLP_TENSORS), "nodes.n_a.bias", shape=[2**62] * 100
    ),
    # issue 40: a tied name stored as well as tied (one of the two values was dropped without a word)
    "both tied names stored": model_file(
        MLP_SPEC.replace("out_features: 4}}", "out_features: 4, tie: {weight: a.weight}}}"),
        MLP_TENSORS,
        tied={"nodes.n_b.weight": "nodes.n_a.weight"},
    ),
}
#: Model files that load, for the fuzzer to mutate.
MODEL_SEEDS: dict[str, bytes] = {
    "mlp": model_file(MLP_SPEC, MLP_TENSORS),
    "batchnorm": model_file(BATCHNORM_SPEC, BATCHNORM_TENSORS),
    "tied mlp": model_file(
        MLP_SPEC.replace("out_features: 4}}", "out_features: 4, tie: {weight: a.weight}}}"),
        {k: v for k, v in MLP_TENSORS.items() if k != "nodes.n_b.weight"},
        tied={"nodes.n_b.weight": "nodes.n_a.weight"},
    ),
}


def mutate_model(choose: Chooser, data: bytes) -> bytes:
    """``data`` (a safetensors file) with one or two edits: its header mutated as data (entries' dtypes, shapes
    and offsets, metadata), the spec text in its metadata mutated as text, its ``hndl.tied`` replaced, or its
    bytes edited (truncated, a byte changed, bytes inserted)."""
    for _ in range(choose.integer(1, 2)):
        header, rest = _split_header(data)
        # The spec most often, so that many mutants get past the layout checks to the spec and the weights.
        action = choose.choice(["header", "header", "header", "spec", "spec", "spec", "spec", "tied", "tied", "bytes"])
        if action == "bytes" or header is None:
            at = choose.integer(0, len(data))
            kind = choose.choice(["truncate", "byte", "insert"])
            if kind == "truncate":
                data = data[:at]
            elif kind == "byte" and data:
                i = min(at, len(data) - 1)
                data = data[:i] + bytes([choose.integer(0, 255)]) + data[i + 1 :]
            else:
                data = data[:at] + choose.junk().encode("utf-8", "surrogatepass") + data[at:]
            continue
        meta = header.get("__metadata__") if isinstance(header, dict) else None
        if action == "spec" and isinstance(meta, dict) and isinstance(meta.get("hndl.spec"), str):
            meta["hndl.spec"] = mutate_text(choose, meta["hndl.spec"])
        elif action == "tied" and isinstance(meta, dict):
            names = [str(k) for k in header if k != "__metadata__"] + ["nodes.n_zz.weight"]
            meta["hndl.tied"] = choose.choice(
                [json.dumps({choose.choice(names): choose.choice(names)}), json.dumps(choose.value()), "{", ""]
            )
        else:
            header = mutate_data(choose, header)
        try:
            text = json.dumps(header, allow_nan=True)
        except (ValueError, OverflowError, TypeError):
            continue
        data = header_bytes(text) + rest
    return data


def _split_header(data: bytes) -> tuple[Any, bytes]:
    """The header of a safetensors file as data (``None`` if it is not readable) and the bytes after it."""
    if len(data) < 8:
        return None, data
    (length,) = struct.unpack("<Q", data[:8])
    try:
        return json.loads(data[8 : 8 + length]), data[8 + length :]
    except (ValueError, RecursionError):
        return None, data
