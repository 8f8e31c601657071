"""The spec-file format as a JSON Schema (draft 2020-12), produced from the same facts the loader uses.

The structure (keys, names, the version) comes from the loader's constants, dtypes from the contracts, and
each op parameter's schema from its :class:`~hndl.Param` and :class:`~hndl.ParamType`: the ``op`` key is an
enum of the ops given, and each op's parameters are an ``if {op: const NAME} then {...}`` branch of the node
schema's ``allOf``. A document the schema accepts is one :func:`hndl.loads` accepts and whose parameters
:func:`hndl.check` accepts; what the schema cannot see is listed in SPEC.md §4.9.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ._contracts import DTYPE_CATEGORIES, DTYPES
from ._meaning import KINDS
from ._registry import OpDef, registry
from ._spec_builder import REQUIRED_KEYS
from ._spec_dumper import FORMAT_VERSION, NODE_KEYS
from ._spec_inputs_outputs import OUTPUT_KEYS
from .naming import NAME_RE

__all__ = ["NAME_PATTERN", "SCHEMA_ID", "spec_schema"]

#: Names of graphs, inputs and nodes, as a JSON Schema (ECMA 262) pattern: ``NAME_RE``, anchored at both ends.
NAME_PATTERN = "^" + NAME_RE.pattern.removesuffix("\\Z") + "$"
SCHEMA_ID = "spec.schema.json"


def spec_schema(ops: Iterable[OpDef] | None = None) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a spec file whose nodes use ``ops`` (every registered op by default).

    Editors can validate and complete spec files with it; ``python -m hndl.docs`` publishes it as
    ``docs/reference/spec.schema.json``. It accepts exactly the documents that :func:`hndl.loads` reads and
    whose op names and parameter values :func:`hndl.check` accepts, except for what a schema cannot see
    (SPEC.md §4.9): references, shapes, keys written twice, and integers written as ``2.0``.

    Returns:
        A new dict each call, which the caller may change.
    """
    ops = list(registry if ops is None else ops)
    ref = {
        "description": "an input or node name, or 'node.port' for one output of a node",
        "type": "string",
    }
    refs = {"anyOf": [{"$ref": "#/$defs/ref"}, {"type": "array", "items": {"$ref": "#/$defs/ref"}}]}
    graph_body: dict[str, Any] = {
        "params": {
            "description": "the graph's parameters and their defaults; nodes refer to them as '$name'",
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/name"},
        },
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
        },
        "outputs": {
            "description": (
                "the graph's outputs, in order: a reference, a list of references, or a mapping of output name to "
                "a reference or to {from, shape, dtype} (a named output with its contract)"
            ),
            "anyOf": [
                *refs["anyOf"],
                {
                    "type": "object",
                    "propertyNames": {"$ref": "#/$defs/name"},
                    "additionalProperties": {"anyOf": [{"$ref": "#/$defs/ref"}, {"$ref": "#/$defs/output"}]},
                },
            ],
        },
    }
    # A graph that declares parameters may write '$name' for any parameter value of its nodes.
    nodes_of = {
        "if": {"required": ["params"]},
        "then": {"properties": {"nodes": {"additionalProperties": {"$ref": "#/$defs/param_node"}}}},
        "else": {"properties": {"nodes": {"additionalProperties": {"$ref": "#/$defs/node"}}}},
    }
    top = {
        "hndl": {"description": "format version", "type": "integer", "const": FORMAT_VERSION},
        "name": {"description": "the graph's name", "$ref": "#/$defs/name"},
        "kind": {
            "description": "what the model is; the checker warns where its attention disagrees",
            "enum": list(KINDS),
        },
        "graphs": {
            "description": "reusable subgraphs, used by nodes with op 'graph'",
            "type": "object",
            "propertyNames": {"$ref": "#/$defs/name"},
            "additionalProperties": {"$ref": "#/$defs/graph"},
        },
        **graph_body,
    }
    node_keys = {
        "op": {"description": "the op's name", "enum": [o.name for o in ops]},
        "in": {"description": "the value(s) the node consumes", **refs},
        "tie": {
            "description": "parameters shared with another node: {own parameter: 'node.parameter'}, and whether "
            "the tie applies: when: true, false, or a '$' condition over graph parameters",
            "type": "object",
            "propertyNames": {"type": "string"},
            "properties": {"when": {"anyOf": [{"type": "boolean"}, {"$ref": "#/$defs/param_ref"}]}},
            "additionalProperties": {"type": "string"},
        },
        "when": {
            "description": "whether the node exists: true, false, or a '$' condition over graph parameters",
            "anyOf": [{"type": "boolean"}, {"$ref": "#/$defs/param_ref"}],
        },
        "otherwise": {
            "description": "the input a node left out by 'when' passes through (one of its inputs)",
            "type": "string",
        },
        "module_path": {
            "description": "where the node's layer is registered: a dotted path relative to the module of its graph "
            "('mlp.gate_proj'); default n_<name>",
            "type": "string",
            "pattern": "^[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z_][A-Za-z0-9_]*)*$",
        },
    }
    input_keys = {
        "shape": {"$ref": "#/$defs/shape"},
        "dtype": {"anyOf": [{"$ref": "#/$defs/dtype"}, {"type": "null"}], "default": "float"},
        "device": {"description": "pin the input's device ('cpu', 'cuda', ...)", "type": ["string", "null"]},
        "ranges": {
            "description": "the sizes some of the shape's symbols may take ({B: {min: 5}, T: {max: 512}})",
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "properties": {
                    "min": {"type": "integer", "minimum": 0},
                    "max": {"type": "integer", "minimum": 0},
                },
                "additionalProperties": False,
                "minProperties": 1,
            },
        },
    }
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "hndl spec file",
        "description": "A model graph for hndl, written in YAML (or JSON with the same structure).",
        "type": "object",
        "properties": top,
        "required": ["hndl", *REQUIRED_KEYS],
        "additionalProperties": False,
        **nodes_of,
        "$defs": {
            "name": {
                "description": "a name: letters, digits and underscores, not starting with a digit",
                "type": "string",
                "pattern": NAME_PATTERN,
            },
            "ref": ref,
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
                "description": "a dtype or a dtype category (torch's 'torch.' prefix is accepted too)",
                "enum": [*DTYPE_CATEGORIES, *DTYPES, *(f"torch.{d}" for d in (*DTYPE_CATEGORIES, *DTYPES))],
            },
            "input": {
                "description": "a graph input's contract",
                "type": "object",
                "properties": input_keys,
                "required": ["shape"],
                "additionalProperties": False,
            },
            "output": {
                "description": "a named output: the value it returns and its contract, in an input's words",
                "type": "object",
                "properties": {
                    "from": {"description": "the value the output returns", "$ref": "#/$defs/ref"},
                    "shape": {"$ref": "#/$defs/shape"},
                    "dtype": {"anyOf": [{"$ref": "#/$defs/dtype"}, {"type": "null"}]},
                },
                "required": list(OUTPUT_KEYS[:1]),
                "additionalProperties": False,
            },
            "graph": {
                "description": "a subgraph: inputs, nodes and outputs, as at the top level",
                "type": "object",
                "required": list(REQUIRED_KEYS),
                "additionalProperties": False,
                # A subgraph's nodes may always refer: each repetition binds '$repetition', and the symbols its
                # input shapes bind to numbers are numbers too, by '$C' or by the bare name (SPEC 1.6.2).
                "properties": {
                    **graph_body,
                    "nodes": {**graph_body["nodes"], "additionalProperties": {"$ref": "#/$defs/param_node"}},
                },
            },
            "param_ref": {
                "description": "a graph parameter ('$width') or an integer expression over them ('$width*4')",
                "type": "string",
                "pattern": "^[$]",
            },
            "value": {
                "description": (
                    "a parameter's value: plain data, where every mapping's keys are text (YAML allows other keys; "
                    "a spec's keys are names, and hndl.dumps writes the value back)"
                ),
                "anyOf": [
                    {"type": ["null", "boolean", "number", "string"]},
                    {"type": "array", "items": {"$ref": "#/$defs/value"}},
                    {
                        "type": "object",
                        "propertyNames": {"type": "string"},
                        "additionalProperties": {"$ref": "#/$defs/value"},
                    },
                ],
            },
            "node": {
                "description": "a node: its op, its inputs ('in') and the op's parameters",
                "type": "object",
                "properties": node_keys,
                "propertyNames": {"type": "string"},
                "additionalProperties": {"$ref": "#/$defs/value"},
                "required": ["op"],
                "allOf": [_op_branch(o) for o in ops],
            },
            "param_node": {
                "description": (
                    "a node of a graph with parameters or of a subgraph: any parameter value, or item of a list "
                    "value, may be '$name', or the name of a size its input shapes bind ('C' of [B, C, H, W])"
                ),
                "type": "object",
                "properties": node_keys,
                "propertyNames": {"type": "string"},
                "additionalProperties": {"$ref": "#/$defs/value"},
                "required": ["op"],
                "allOf": [_op_branch(o, references=True, sizes=True) for o in ops],
            },
        },
    }


def _op_branch(o: OpDef, *, references: bool = False, sizes: bool = False) -> dict[str, Any]:
    props: dict[str, Any] = {key: True for key in NODE_KEYS}
    for p in o.params:
        props[p.name] = _referable(p.schema(), sizes) if references else p.schema()
    then: dict[str, Any] = {"properties": props, "additionalProperties": False}
    required = [p.name for p in o.params if p.required]
    if required:
        then["required"] = required
    return {"if": {"properties": {"op": {"const": o.name}}, "required": ["op"]}, "then": then}


_PARAM_REF = {"$ref": "#/$defs/param_ref"}


_SIZE_NAME = {"$ref": "#/$defs/name"}


def _referable(schema: dict[str, Any], sizes: bool = False) -> dict[str, Any]:
    """``schema`` where the value, and each item of a list or value of a mapping at any depth, may also be a
    reference ('$width'): references may stand inside lists (``kernel_size: [$k, $k]``) and inside the mappings
    whose keys a parameter names (``rope: {theta: $rope_theta}``); a free-form mapping's values are not
    constrained by any schema, so they need nothing here."""
    return {"anyOf": [_items_referable(schema, sizes), _PARAM_REF, *([_SIZE_NAME] if sizes else [])]}


def _items_referable(schema: Any, sizes: bool = False) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if isinstance(out.get("items"), dict):
        out["items"] = _referable(out["items"], sizes)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {key: _referable(value, sizes) for key, value in out["properties"].items()}
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(out.get(key), list):
            out[key] = [_items_referable(s, sizes) for s in out[key]]
    return out
