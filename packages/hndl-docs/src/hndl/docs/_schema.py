"""The spec-file format as a JSON Schema (draft 2020-12), and a readable page generated from that schema.

The schema is built from the registry: the ``op`` key is an enum of the installed ops, and each op's
parameters are described by an ``if {op: const NAME} then {...}`` branch of the node schema's ``allOf``.
It describes the structure of a spec file; the rest (references resolve, shapes agree) is what
``hndl check`` decides.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hndl._contracts import DTYPE_CATEGORIES, DTYPES
from hndl._graph import NAME_RE
from hndl._registry import REQUIRED, OpDef, Param

from ._text import HEADER, code, table

NAME_PATTERN = "^" + NAME_RE.pattern.removesuffix("\\Z") + "$"
REF_PATTERN = NAME_PATTERN.removesuffix("$") + "(\\.[A-Za-z0-9_]+)?$"
SCHEMA_ID = "spec.schema.json"


def _param_schema(p: Param) -> dict[str, Any]:
    bounds: dict[str, Any] = {}
    if p.min is not None:
        bounds["minimum"] = p.min
    if p.max is not None:
        bounds["maximum"] = p.max
    t = p.type
    s: dict[str, Any]
    if t == "int":
        s = {"type": "integer", **bounds}
    elif t == "float":
        s = {"type": "number", **bounds}
    elif t == "bool":
        s = {"type": "boolean"}
    elif t == "str":
        s = {"type": "string"}
    elif t == "ints":
        s = {"type": "array", "items": {"type": "integer", **bounds}}
    elif t == "int_or_pair":
        item = {"type": "integer", **bounds}
        s = {"oneOf": [item, {"type": "array", "items": item, "minItems": 2, "maxItems": 2}]}
    elif t == "shape":
        s = {"type": "array", "items": {"type": "integer", "minimum": -1}}
    elif t == "dtype":
        s = {"$ref": "#/$defs/dtype"}
    elif t == "mapping":
        s = {"type": "object"}
    elif t == "graph":
        s = {"$ref": "#/$defs/name"}
    else:  # a type added to PARAM_TYPES that this generator does not know yet: accept anything
        s = {}
    if p.choices is not None:
        s = {**s, "enum": [_jsonable(c) for c in p.choices]}
    if p.nullable:
        s = {"anyOf": [s, {"type": "null"}]}
    if p.doc:
        s = {"description": p.doc, **s}
    if p.default is not REQUIRED:
        s["default"] = _jsonable(p.default)
    return s


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _op_branch(o: OpDef) -> dict[str, Any]:
    props: dict[str, Any] = {"op": True, "in": True}
    props.update({p.name: _param_schema(p) for p in o.params})
    then: dict[str, Any] = {"properties": props, "additionalProperties": False}
    required = [p.name for p in o.params if p.required]
    if required:
        then["required"] = required
    return {"if": {"properties": {"op": {"const": o.name}}, "required": ["op"]}, "then": then}


def spec_schema(ops: Sequence[OpDef]) -> dict[str, Any]:
    """The JSON Schema of a spec file for the ops in ``ops``."""
    graph_body = {
        "inputs": {
            "description": "the graph's inputs, in call order, each with its contract",
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/name"},
            "additionalProperties": {"$ref": "#/$defs/input"},
        },
        "nodes": {
            "description": "the nodes, in order; each key is the node's name",
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/name"},
            "additionalProperties": {"$ref": "#/$defs/node"},
        },
        "outputs": {
            "description": "the graph's outputs, in order: references to inputs, nodes or node ports",
            "type": "array",
            "items": {"$ref": "#/$defs/ref"},
            "minItems": 1,
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "hndl spec file",
        "description": "A model graph for hndl, written in YAML (or JSON with the same structure).",
        "type": "object",
        "properties": {
            "hndl": {"description": "format version", "const": 1},
            "name": {"description": "the graph's name", "$ref": "#/$defs/name"},
            "graphs": {
                "description": "reusable subgraphs, used by nodes with op 'graph'",
                "type": "object",
                "propertyNames": {"$ref": "#/$defs/name"},
                "additionalProperties": {"$ref": "#/$defs/graph"},
            },
            **graph_body,
        },
        "required": ["hndl", "inputs", "nodes", "outputs"],
        "additionalProperties": False,
        "$defs": {
            "name": {
                "description": "a name: letters, digits and underscores",
                "type": "string",
                "pattern": NAME_PATTERN,
            },
            "ref": {
                "description": "an input or node name, or 'node.port' for one output of a node",
                "type": "string",
                "pattern": REF_PATTERN,
            },
            "dim": {
                "description": "a size (int), a symbol ('B'), a variadic symbol ('*batch') or an expression ('C*H*W')",
                "anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}],
            },
            "shape": {
                "description": "a shape pattern: a list of dims",
                "type": "array",
                "items": {"$ref": "#/$defs/dim"},
            },
            "dtype": {
                "description": "a dtype or a dtype category",
                "enum": [*DTYPE_CATEGORIES, *DTYPES],
            },
            "input": {
                "description": "a graph input's contract",
                "type": "object",
                "properties": {
                    "shape": {"$ref": "#/$defs/shape"},
                    "dtype": {"$ref": "#/$defs/dtype", "default": "float"},
                    "device": {"description": "pin the input's device ('cpu', 'cuda', ...)", "type": "string"},
                },
                "required": ["shape"],
                "additionalProperties": False,
            },
            "graph": {
                "description": "a subgraph: inputs, nodes and outputs, as at the top level",
                "type": "object",
                "properties": graph_body,
                "required": ["inputs", "nodes", "outputs"],
                "additionalProperties": False,
            },
            "node": {
                "description": "a node: its op, its inputs ('in') and the op's parameters",
                "type": "object",
                "properties": {
                    "op": {"description": "the op's name", "enum": [o.name for o in ops]},
                    "in": {
                        "description": "the value(s) the node consumes",
                        "anyOf": [{"$ref": "#/$defs/ref"}, {"type": "array", "items": {"$ref": "#/$defs/ref"}}],
                    },
                },
                "required": ["op"],
                "allOf": [_op_branch(o) for o in ops],
            },
        },
    }


def schema_text(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=False, ensure_ascii=False) + "\n"


def spec_page(schema: dict[str, Any]) -> str:
    """A readable account of the schema: the top-level keys, inputs, nodes and each op's parameters."""
    defs = schema["$defs"]
    out = [HEADER, "# Spec-file format\n\n"]
    out.append(
        "This page is generated from the JSON Schema [`spec.schema.json`](spec.schema.json) "
        "(draft 2020-12), which editors can use to validate and complete spec files; for example, with the "
        "YAML language server put `# yaml-language-server: $schema=<path>/spec.schema.json` on the first "
        "line. The schema checks the structure; `hndl check` then checks references, shapes and dtypes. "
        "[Writing spec files](../spec-files.md) is the guide.\n\n"
    )
    out.append("## Top level\n\n")
    out.append(_props_table(schema["properties"], schema.get("required", [])))
    out.append("\n## Inputs\n\n`inputs` maps each input's name to its contract:\n\n")
    out.append(_props_table(defs["input"]["properties"], defs["input"]["required"]))
    out.append(f"\nA dimension is {defs['dim']['description']}. A dtype is one of {_enum(defs['dtype']['enum'])}.\n")
    out.append("\n## Nodes\n\n`nodes` maps each node's name to a mapping with these keys and the op's parameters:\n\n")
    out.append(_props_table(defs["node"]["properties"], defs["node"]["required"]))
    out.append(
        f"\nNames match `{defs['name']['pattern']}`; references match `{defs['ref']['pattern']}`.\n"
        "\n## Subgraphs\n\n`graphs` maps a name to a graph with its own `inputs`, `nodes` and `outputs`, used by "
        "a node with `op: graph`.\n\n## Parameters by op\n\n"
    )
    for branch in defs["node"]["allOf"]:
        name = branch["if"]["properties"]["op"]["const"]
        then = branch["then"]
        params = {k: v for k, v in then["properties"].items() if k not in ("op", "in")}
        out.append(f"### `{name}`\n\n")
        if params:
            out.append(_props_table(params, then.get("required", [])))
        else:
            out.append("No parameters.\n")
        out.append(f"\nSee [the `{name}` page](ops/{_page(name)}.md).\n\n")
    return "".join(out).rstrip("\n") + "\n"


def _page(name: str) -> str:
    from ._ops import _SAFE

    return _SAFE.sub("_", name) or "op"


def _props_table(props: dict[str, Any], required: Sequence[str]) -> str:
    rows = []
    for key, s in props.items():
        default = "required" if key in required else (code(json.dumps(s["default"])) if "default" in s else "optional")
        rows.append([code(key), _describe_type(s), default, s.get("description", "")])
    return table(["key", "value", "default", "description"], rows)


def _enum(values: Sequence[Any]) -> str:
    return ", ".join(code(json.dumps(v) if not isinstance(v, str) else v) for v in values)


def _describe_type(s: dict[str, Any]) -> str:
    """A schema fragment in words: ``integer >= 1``, ``list of integer``, ``one of 'a', 'b'``."""
    if "const" in s:
        return f"exactly {code(json.dumps(s['const']))}"
    if "enum" in s:
        return "one of " + _enum(s["enum"])
    if "$ref" in s:
        target = s["$ref"].rsplit("/", 1)[-1]
        return {"name": "name", "ref": "reference", "dtype": "dtype", "shape": "shape", "graph": "graph"}.get(
            target, target
        )
    for key in ("anyOf", "oneOf"):
        if key in s:
            return " or ".join(_describe_type(x) for x in s[key])
    t = s.get("type")
    words = {"integer": "integer", "number": "number", "boolean": "true/false", "string": "string", "null": "null"}
    if t == "array":
        text = "list of " + _describe_type(s.get("items", {}))
        if s.get("minItems") is not None and s.get("minItems") == s.get("maxItems"):
            text = f"list of {s['minItems']} " + _describe_type(s.get("items", {}))
        return text
    if t == "object":
        return "mapping"
    if t in words:
        text = words[t]
        if "minimum" in s:
            text += f" >= {_n(s['minimum'])}"
        if "maximum" in s:
            text += f" <= {_n(s['maximum'])}"
        return text
    return "anything"


def _n(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)
