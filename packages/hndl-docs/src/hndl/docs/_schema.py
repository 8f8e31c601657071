"""The spec-file format's JSON Schema, written out, and a readable page generated from that schema.

The schema itself is hndl-core's (:func:`hndl.spec_schema`, built from the registry and the loader's rules);
this module only serialises it and renders it as Markdown, so the page and the schema cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ._ops import page_name
from ._text import HEADER, code, table


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
    dtypes = [d for d in defs["dtype"]["enum"] if not d.startswith("torch.")]
    out.append(
        f"\nA dimension is {defs['dim']['description']}. A dtype is one of {_enum(dtypes)}, "
        "also written with torch's `torch.` prefix.\n"
    )
    out.append("\n## Nodes\n\n`nodes` maps each node's name to a mapping with these keys and the op's parameters:\n\n")
    out.append(_props_table(defs["node"]["properties"], defs["node"]["required"]))
    out.append(
        f"\nNames match `{defs['name']['pattern']}`. A reference is {defs['ref']['description']}.\n"
        "\n## Subgraphs\n\n`graphs` maps a name to a graph with its own `params`, `inputs`, `nodes` and "
        "`outputs`, used by a node with `op: graph`. A graph's `params` declares its parameters with their "
        "defaults; its nodes write `$name` (or an integer expression such as `$width*4`) for any parameter "
        "value, and a use passes values with `params:`.\n\n## Parameters by op\n\n"
    )
    for branch in defs["node"]["allOf"]:
        name = branch["if"]["properties"]["op"]["const"]
        then = branch["then"]
        # The node's own keys (op, in, tie, when) are `true` in every branch: only the op's parameters remain.
        params = {k: v for k, v in then["properties"].items() if v is not True}
        out.append(f"### `{name}`\n\n")
        if params:
            out.append(_props_table(params, then.get("required", [])))
        else:
            out.append("No parameters.\n")
        out.append(f"\nSee [the `{name}` page](ops/{page_name(name)}.md).\n\n")
    return "".join(out).rstrip("\n") + "\n"


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
    if isinstance(t, list):
        return " or ".join(_describe_type({**s, "type": one}) for one in t)
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
