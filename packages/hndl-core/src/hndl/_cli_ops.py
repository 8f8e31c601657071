"""``hndl ops``: the registered ops listed, or one op described from its declaration (parameters, ports, shape
rule), as text columns."""

from __future__ import annotations

from typing import IO, Any

from ._cli_output import Failed, fail, say
from ._errors import Problem
from ._hints import EXPRESSIONS_DOC
from .naming import excerpt, suggestion


def run_ops(name: str | None, *, out: IO[str]) -> int:
    """``hndl ops``: every op with its summary, or one op described from its declaration (the facts its
    reference page shows, read from the same :class:`~hndl.OpDef`)."""
    from ._registry import registry

    if name is None:
        ops = sorted(registry, key=lambda o: o.name)
        width = max((len(o.name) for o in ops), default=0)
        for o in ops:
            say(f"{o.name.ljust(width)}  {o.summary}".rstrip(), out)
        say(f"{len(ops)} ops; `hndl ops NAME` describes one", out)
        say(
            f"a parameter may be computed from the graph's parameters, '$d // 2', '$pow(d, -0.5)': {EXPRESSIONS_DOC}",
            out,
        )
        return 0
    opdef = registry.find(name)
    if opdef is None:
        hint = suggestion(name, registry.names()) or "`hndl ops` lists them"
        return fail(Failed([Problem("E_OP", f"unknown op {excerpt(name)}", hint=hint)]), "hndl ops", out)
    for line in _describe_op(opdef):
        say(line, out)
    return 0


def _describe_op(o: Any) -> list[str]:
    """One op's description as lines: summary and documentation, what it builds, a table of parameters, the
    ports and the shape rule (:meth:`~hndl.OpDef.describe_inference`)."""
    lines = [f"{o.name}: {o.summary}" if o.summary else o.name]
    body = o.doc.strip().splitlines()[1:]
    if body:
        lines += [line.rstrip() for line in _dedent(body)]
    lines += ["", f"builds: {o.module or 'not declared'}"]
    if o.params:
        rows = [[p.name, p.type.name, p.describe_default(), p.describe_constraints(), p.doc] for p in o.params]
        lines += ["", "parameters:", *_columns(["name", "type", "default", "constraints", "description"], rows)]
    else:
        lines += ["", "parameters: none"]
    ports = []
    for direction, port in [("input", p) for p in o.inputs] + [("output", p) for p in o.outputs]:
        notes = " (one or more)" * port.variadic + " (optional)" * port.optional
        notes += f" (when {port.when})" if port.when is not None else ""
        shape = str(port.pattern) if port.pattern is not None else "any"
        ports.append([port.name + notes, direction, shape, port.dtype, port.doc])
    lines += ["", "ports:", *_columns(["port", "direction", "shape", "dtype", "description"], ports)]
    if o.count_outputs is not None:
        lines.append("  the number of outputs depends on the parameters; refer to them by index (node.0)")
    lines += ["", f"shape rule: {o.describe_inference().strip()}"]
    return lines


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:] for line in lines]


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    """``rows`` under ``header`` as aligned, indented text columns (the last column is not padded)."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in table]
