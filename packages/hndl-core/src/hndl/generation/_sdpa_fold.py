"""Work an imported decoder's cached variant would repeat at every decoding step, left out where the value is the
same bit for bit: transformers' LLaMA-style decoders (Qwen2's import, measured) give each layer its own
``unsqueeze`` of the one rotary table (two ``reshape`` nodes a layer, the same inputs, the same parameters) and
scale the tables by an ``attention_scaling`` of 1.0. The zoo's attention makes its tables once a step and
rotates without them; each node the variant runs is a layer call and a few guard terms on every new token (the
fast path's cost per node, not the tensor work, is what separates an imported decoder's step from the zoo's).

- **Repeated nodes** (:func:`merge_repeats`): a node with the op, parameters, inputs and ``when`` of an earlier
  one computes the same value; its readers read the earlier node. Only ops that hold no tensors of their own
  and draw nothing random (:data:`MERGEABLE`): two ``linear`` nodes on one input have their own weights.
- **Multiplying by one** (:func:`drop_unit_scales`): ``scale`` with ``factor: 1`` on a floating input is that
  input bit for bit (``x * 1.0``, -0.0, infinities and NaN included); on an integer input it is a float32
  cast, and stays.

Nothing else changes: every parameter and state_dict key stays, and a removed node holds no tensors. A layer
put in with ``replace_layer`` at a removed node is refused by ``with_kv_cache``, as at any node the variant lacks.
On the 8-layer Qwen2 of ``benchmarks/test_bench_generate_imported.py`` (tiny widths, where the per-node cost
shows) the two leave out 16 of 471 nodes, 3.8% of a step's instructions (callgrind).
"""

from __future__ import annotations

from typing import Any

from .._graph import Graph, split_ref
from ._graph_edit import rewrite_refs
from ._token_rules import ALONG_DIM, LAYOUT, PER_TOKEN

__all__ = ["MERGEABLE", "drop_unit_scales", "merge_repeats"]

#: Ops whose value is a function of their inputs and parameters alone: no weights, buffers or randomness.
MERGEABLE = (LAYOUT | ALONG_DIM | {"expand"} | PER_TOKEN) - {
    "linear",
    "linear_in_out",
    "embedding",
    "parameter",
    "buffer",
    "dropout",
    "drop_path",
}

_FLOATING = frozenset(["float", "float16", "bfloat16", "float32", "float64"])


def _moved(ref: str, mapping: dict[str, str]) -> str:
    """``ref`` with its node replaced by ``mapping``'s value: a node (the same port read) or, for a node of one
    output, a reference (its port 0 is that reference)."""
    name, port = split_ref(ref)
    if name not in mapping:
        return ref
    target = mapping[name]
    return target if port is None or split_ref(target)[1] is not None else f"{target}.{port}"


def _rename(graph: Graph, mapping: dict[str, str]) -> None:
    rewrite_refs(graph, lambda r: _moved(r, mapping))


def _key(node: Any) -> tuple[Any, ...]:
    # repr: parameters are JSON-like values (lists, mappings); sorted so the order they were written in is no part.
    return (node.op, repr(sorted(node.params.items())), tuple(node.inputs), repr(node.when), node.otherwise)


def merge_repeats(graph: Graph) -> int:
    """Each node of :data:`MERGEABLE` that repeats an earlier one (op, parameters, inputs, ``when``) removed, its
    readers reading the earlier node; how many went. ``graph.nodes`` is in order, so an earlier node's inputs
    are already merged when a later one's key is taken."""
    seen: dict[tuple[Any, ...], str] = {}
    merged: dict[str, str] = {}
    for name in list(graph.nodes):
        node = graph.nodes[name]
        if merged:
            node.inputs = [_moved(r, merged) for r in node.inputs]
            node.otherwise = None if node.otherwise is None else _moved(node.otherwise, merged)
        if node.op not in MERGEABLE or not node.inputs or node.tie:
            continue
        key = _key(node)
        if key in seen:
            merged[name] = seen[key]
            del graph.nodes[name]
        else:
            seen[key] = name
    if merged:
        _rename(graph, merged)
    return len(merged)


def drop_unit_scales(graph: Graph, checked: dict[str, Any]) -> int:
    """Each ``scale`` node with ``factor`` 1 whose input the check typed as floating removed, its readers reading
    that input; how many went. ``checked``: the plain graph's checked nodes by name (the node's input type)."""
    gone: dict[str, str] = {}
    for name, node in list(graph.nodes.items()):
        if node.op != "scale" or node.params.get("factor") != 1 or len(node.inputs) != 1 or node.when is not True:
            continue
        c = checked.get(name)
        dtype = None if c is None or not c.in_types else c.in_types[0].dtype
        if dtype is None or str(dtype) not in _FLOATING:
            continue
        gone[name] = _moved(node.inputs[0], gone)
        del graph.nodes[name]
    if gone:
        _rename(graph, gone)
    return len(gone)
