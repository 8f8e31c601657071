"""Writing spec files: :func:`dumps` turns a :class:`~hndl.Graph` into spec text, and :func:`flow_yaml` writes
one value as one line of YAML, the form every input and node of a spec takes.

The output is deterministic, and ``loads(dumps(g))`` builds the same model as ``g``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import ProblemList
from ._flow_yaml import flow_yaml
from ._graph import Graph
from .naming import NAME_RE, excerpt

__all__ = ["FORMAT_VERSION", "NODE_KEYS", "dumps", "flow_yaml"]

#: The spec format version this hndl reads and writes (the ``hndl:`` key).
FORMAT_VERSION = 1

#: The keys of a spec node that are not parameters of its op.
NODE_KEYS = ("op", "in", "tie", "when", "otherwise", "module_path")

# YAML limits an implicit ("simple") key to 1024 characters; a longer name is written as an explicit key.
_LONGEST_SIMPLE_KEY = 1000


def dumps(graph: Graph) -> str:
    """Write ``graph`` as spec text (YAML), deterministically.

    Keys come in a fixed order (``hndl``, ``name``, ``inputs``, ``nodes``, ``outputs``, ``graphs``), nodes
    in the graph's order, one node per line. Outputs are a list of references, or, when one has a name or a
    contract, a mapping of name to reference or ``{from, shape, dtype}``. Parameters are written as they were given: inferred ones
    (``in_features``) stay out unless the graph states them. ``loads(dumps(g))`` builds the same model as
    ``g`` (same modules, parameter names and shapes).

    Raises:
        HndlError: E_SPEC when a parameter value cannot be written as plain data (a Python object, a
            function), naming the node and parameter.
    """
    problems = ProblemList()
    lines = [f"hndl: {FORMAT_VERSION}", f"name: {flow_yaml(graph.name)}"]
    if graph.kind is not None:
        lines.append(f"kind: {graph.kind}")
    lines += _graph_lines(graph, "", problems)
    if graph.graphs:
        lines.append("graphs:")
        for name, sub in graph.graphs.items():
            lines += _entry("  ", name, "")
            lines += _graph_lines(sub, "    ", problems)
    problems.raise_if_any(title=f"graph '{graph.name}'")
    return "\n".join(lines) + "\n"


def _graph_lines(graph: Graph, indent: str, problems: ProblemList) -> list[str]:
    lines = []
    if graph.params:
        plain, reason = _plain_param(graph.params)
        if reason:
            problems.add("E_SPEC", f"graph {graph.name!r}: params cannot be written to a spec: {reason}")
        else:
            lines.append(f"{indent}params: {flow_yaml(plain)}")
    lines.append(f"{indent}inputs:" if graph.inputs else f"{indent}inputs: {{}}")
    for name, spec in graph.inputs.items():
        lines += _entry(f"{indent}  ", name, flow_yaml(spec.contract.to_spec()))
    lines.append(f"{indent}nodes:" if graph.nodes else f"{indent}nodes: {{}}")
    for name, node in graph.nodes.items():
        entry: dict[str, Any] = {"op": node.op}
        if len(node.inputs) == 1:
            entry["in"] = node.inputs[0]
        elif node.inputs:
            entry["in"] = list(node.inputs)
        if node.tie:
            entry["tie"] = dict(node.tie)
        if node.when is not True:
            entry["when"] = node.when
        if node.otherwise is not None:
            entry["otherwise"] = node.otherwise
        if node.module_path is not None:
            entry["module_path"] = node.module_path
        for key, value in node.params.items():
            if key in NODE_KEYS or not isinstance(key, str):
                problems.add(
                    "E_SPEC",
                    f"parameter {excerpt(key)} cannot be written: the name is not a valid parameter key",
                    node=name,
                    op=node.op,
                )
                continue
            plain, reason = _plain_param(value)
            if reason:
                problems.add(
                    "E_SPEC", f"parameter {key!r} cannot be written to a spec: {reason}", node=name, op=node.op
                )
                continue
            entry[key] = plain
        lines += _entry(f"{indent}  ", name, flow_yaml(entry))
    named = _named_outputs(graph)
    if named is None:
        lines.append(f"{indent}outputs: {flow_yaml(list(graph.outputs))}")
    else:
        lines.append(f"{indent}outputs:")
        for name, value in named.items():
            lines += _entry(f"{indent}  ", name, flow_yaml(value))
    return lines


def _named_outputs(graph: Graph) -> dict[str, Any] | None:
    """The outputs as ``{name: ref or {from, shape, dtype}}`` when one has a name or a contract, else ``None``
    (the list form). An output without a name takes its reference's, or ``output_<i>`` when that is not a name
    or is taken."""
    specs = [graph.output_specs[i] if i < len(graph.output_specs) else None for i in range(len(graph.outputs))]
    if not any(spec is not None and (spec.name is not None or spec.declares) for spec in specs):
        return None
    taken = {spec.name for spec in specs if spec is not None and spec.name is not None}
    out: dict[str, Any] = {}
    for i, (ref, spec) in enumerate(zip(graph.outputs, specs)):
        name = spec.name if spec is not None else None
        if name is None:
            candidate = ref.replace(".", "_")
            name = candidate if NAME_RE.match(candidate) and candidate not in taken else f"output_{i}"
            while name in taken:
                name = f"_{name}"
            taken.add(name)
        if spec is None or not spec.declares:
            out[name] = ref
            continue
        value: dict[str, Any] = {"from": ref}
        if spec.shape is not None:
            value["shape"] = spec.shape.to_spec()
        if spec.dtype is not None:
            value["dtype"] = spec.dtype
        out[name] = value
    return out


def _entry(indent: str, key: str, value: str) -> list[str]:
    """The line ``key: value`` of a block mapping (``value`` empty when a block follows); a key too long for
    YAML's implicit keys is written explicitly, as ``? key`` and ``: value`` on two lines."""
    key_text = flow_yaml(key)
    if len(key_text) <= _LONGEST_SIMPLE_KEY:
        return [f"{indent}{key_text}: {value}".rstrip()]
    return [f"{indent}? {key_text}", f"{indent}: {value}".rstrip()]


def _plain_param(value: Any) -> tuple[Any, str]:
    """``value`` as plain spec data (tuples become lists, a Graph its name), or ``(None, reason)``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value, ""
    if isinstance(value, Graph):
        return value.name, ""
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            plain, reason = _plain_param(item)
            if reason:
                return None, reason
            out.append(plain)
        return out, ""
    if isinstance(value, Mapping):
        mapping = {}
        for k, item in value.items():
            if not isinstance(k, str):
                return None, f"mapping key {excerpt(k)} is not a string"
            plain, reason = _plain_param(item)
            if reason:
                return None, reason
            mapping[k] = plain
        return mapping, ""
    return None, f"{type(value).__name__} {excerpt(value)} is not plain data"
