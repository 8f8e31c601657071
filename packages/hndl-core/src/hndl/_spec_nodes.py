"""The ``nodes`` section of a spec: each node's structure checked and the node added to its graph.

A node is a mapping with an ``op``, its inputs (``in``), the node keys every node may have (``tie``, ``when``,
``otherwise``, ``module_path``; :data:`hndl._spec_dumper.NODE_KEYS`) and the op's parameters. This module
checks what the spec text alone can tell (types, text keys, the forms of ``tie`` and ``when``); what needs
the op registry or the whole graph is :func:`hndl.check`'s, at the locations recorded here.
"""

from __future__ import annotations

from typing import Any

from ._errors import HndlError
from ._graph import Graph
from ._spec_checks import SpecChecks, is_name
from ._spec_dumper import NODE_KEYS
from ._yaml_reader import Located, describe

__all__ = ["read_nodes"]


def read_nodes(checks: SpecChecks, graph: Graph, entry: Located, what: str) -> None:
    """The ``nodes`` section of ``what`` (the spec, or one of its graphs) added to ``graph``, each node with its
    location and those of its keys; a node with a problem is reported and left out."""
    if not isinstance(entry.value, dict):
        checks.add(
            "E_SPEC",
            f"'nodes' of {what} must be a mapping of node name to {{op: ..., in: ...}}, got {describe(entry.value)}",
            entry.loc,
            hint="e.g. nodes: {hidden: {op: linear, in: x, out_features: 512}}",
        )
        return
    checks.duplicate_names(entry, "node")
    for name, spec in entry.value.items():
        loc = entry.keys[name]
        if not checks.name_ok(name, "node", loc) or spec.failed:
            continue
        checks.duplicates(spec, node=name)
        if not isinstance(spec.value, dict):
            checks.add(
                "E_SPEC",
                f"a node must be a mapping such as {{op: linear, in: x}}, got {describe(spec.value)}",
                spec.loc,
                node=name,
                hint=f"write {name}: {{op: {spec.value}, in: ...}}" if is_name(spec.value) else None,
            )
            continue
        _node(checks, graph, name, loc, spec)


def _node(checks: SpecChecks, graph: Graph, name: str, loc: str, spec: Located) -> None:
    """Node ``name`` (a mapping, written at ``loc``) added to ``graph``: its op, inputs, node keys and
    parameters. Only its structure is checked here; its op and parameter values are :func:`hndl.check`'s."""
    fields = spec.value
    op_entry = fields.get("op")
    op = op_entry.value if op_entry is not None else None
    ok = spec.ok
    if op_entry is None:
        checks.add("E_SPEC", "missing key 'op'", loc, node=name, hint="add op: <name>, e.g. op: linear")
        ok = False
    elif not isinstance(op, str) and not op_entry.failed:
        checks.add(
            "E_SPEC",
            f"'op' must be an op name, got {describe(op)}",
            op_entry.loc,
            node=name,
            hint="e.g. op: linear",
        )
        ok = False
    named_op = op if isinstance(op, str) else None
    refs = _refs(checks, fields.get("in"), name, named_op)
    for key in fields:
        if not isinstance(key, str):
            checks.add(
                "E_SPEC", f"a node key must be a name, got {describe(key)}", spec.keys[key], node=name, op=named_op
            )
            ok = False
        elif key not in NODE_KEYS and not checks.text_keys(fields[key], key, node=name, op=named_op):
            ok = False
    tie = _tie(checks, fields.get("tie"), name, named_op)
    if not ok or refs is None or named_op is None or tie is None:
        return
    when = fields.get("when")
    if when is not None and not (
        isinstance(when.value, bool) or (isinstance(when.value, str) and when.value.startswith("$"))
    ):
        checks.add(
            "E_SPEC",
            f"'when' must be true, false or '$name' of a bool graph parameter, got {describe(when.value)}",
            when.loc,
            node=name,
            op=named_op,
        )
        return
    otherwise = fields.get("otherwise")
    if otherwise is not None and not isinstance(otherwise.value, str):
        checks.add(
            "E_SPEC",
            f"'otherwise' must name one of the node's inputs, got {describe(otherwise.value)}",
            otherwise.loc,
            node=name,
            op=named_op,
        )
        return
    module_path = fields.get("module_path")
    if module_path is not None and not isinstance(module_path.value, str):
        checks.add(
            "E_SPEC",
            f"'module_path' must be a dotted module path such as 'mlp.gate_proj', got {describe(module_path.value)}",
            module_path.loc,
            node=name,
            op=named_op,
        )
        return
    try:
        graph.add(
            named_op,
            refs,
            name=name,
            tie=tie,
            when=True if when is None else when.value,
            otherwise=None if otherwise is None else otherwise.value,
            module_path=None if module_path is None else module_path.value,
        )
    except HndlError as exc:
        for p in exc.problems:
            checks.add(p.code, p.message, loc, node=name, hint=p.hint)
        return
    node = graph.nodes[name]
    # Set directly rather than as **kwargs: a key 'name' would collide with Graph.add's own keyword (the
    # checker then reports it as a parameter no op takes).
    node.params = {k: v.plain() for k, v in fields.items() if k not in NODE_KEYS}
    node.location = loc
    node.key_locations = dict(spec.keys)


def _tie(checks: SpecChecks, entry: Located | None, node: str, op: str | None) -> dict[str, Any] | None:
    """A node's ``tie``: a mapping of its own parameter to ``node.parameter`` (both strings), and an optional
    ``when`` (``true``, ``false`` or ``'$name'`` of a bool graph parameter) that says whether it applies."""
    if entry is None:
        return {}
    if entry.failed:
        return None
    value = entry.value
    when = value.get("when") if isinstance(value, dict) else None
    if when is not None and not (
        isinstance(when.value, bool) or (isinstance(when.value, str) and when.value.startswith("$"))
    ):
        checks.add(
            "E_SPEC",
            f"the tie's 'when' must be true, false or '$name' of a bool graph parameter, got {describe(when.value)}",
            when.loc,
            node=node,
            op=op,
            hint="e.g. tie: {weight: embed_tokens.weight, when: $tie_word_embeddings}",
        )
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and (k == "when" or isinstance(v.value, str)) for k, v in value.items()
    ):
        checks.add(
            "E_SPEC",
            f"'tie' must map this node's parameter to 'node.parameter', got {describe(value)}",
            entry.loc,
            node=node,
            op=op,
            hint="e.g. tie: {weight: wte.weight}",
        )
        return None
    return {k: v.value for k, v in value.items()}


def _refs(checks: SpecChecks, entry: Located | None, node: str, op: str | None) -> list[str] | None:
    """A node's ``in``: one reference or a list of them, as a list (empty when not written); ``None`` once a
    problem is reported."""
    if entry is None:
        return []
    if entry.failed:
        return None
    items = entry.value if isinstance(entry.value, list) else [entry]
    bad = (
        entry
        if not isinstance(entry.value, (list, str))
        else next((i for i in items if not isinstance(i.value, str)), None)
    )
    if bad is not None:
        if not bad.failed:
            checks.add(
                "E_SPEC",
                "'in' must be a reference (an input or node name, or node.port) or a list of them, "
                f"got {describe(bad.value)}",
                bad.loc,
                node=node,
                op=op,
                hint="e.g. in: x, or in: [a, b]",
            )
        return None
    return [i.value for i in items]
