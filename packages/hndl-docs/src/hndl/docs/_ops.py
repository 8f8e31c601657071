"""Op reference pages, one per op in :data:`hndl.registry` (built-in and plugin ops alike)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import hndl
from hndl import DTYPES, OpDef, Param, Port, ShapePattern

from ._text import HEADER, code, flow, indent, table

#: Input shape used for an op's example when the op declares none.
DEFAULT_INPUT_SHAPE: tuple[Any, ...] = ("B", 16)
_SAFE = re.compile(r"[^A-Za-z0-9_]")


#: Pages of the ops folder that are not an op's: an op of such a name gets ``_op`` after it (the ``index`` op's
#: page is ``index_op.md``; written as ``index.md`` it replaced the list of every op).
_RESERVED = frozenset({"index"})


def page_name(op_name: str) -> str:
    """The file name (without ``.md``) of an op's page."""
    name = _SAFE.sub("_", op_name) or "op"
    return f"{name}_op" if name in _RESERVED else name


def origin(opdef: OpDef) -> str:
    """The module that registered the op: ``hndl.ops._dense`` for built-ins, the plugin's module otherwise."""
    return getattr(opdef.build, "__module__", None) or "?"


def op_pages(ops: Sequence[OpDef]) -> dict[str, str]:
    pages = {f"ops/{page_name(o.name)}.md": op_page(o) for o in ops}
    pages["ops/index.md"] = index_page(ops)
    return pages


def index_page(ops: Sequence[OpDef]) -> str:
    out = [HEADER, "# Ops\n\n"]
    out.append(
        f"{len(ops)} ops are registered in this installation: the built-in ones and those of any installed "
        "plugin (entry-point group `hndl.ops`). Each page is generated from the op's declaration: its builder's "
        "docstring, parameter schema, port contracts and inference rule.\n\n"
    )
    rows = []
    for o in ops:
        where = "built-in" if origin(o).startswith("hndl.") else f"plugin `{origin(o)}`"
        rows.append(
            [
                f"[`{o.name}`]({page_name(o.name)}.md)",
                formulas_as_code(o.summary) if o.summary else "(no docstring)",
                code(o.module or "?"),
                where,
            ]
        )
    out.append(table(["op", "summary", "builds", "from"], rows))
    out.append("\n```{toctree}\n:hidden:\n\n")
    out += [f"{page_name(o.name)}\n" for o in ops]
    out.append("```\n")
    return "".join(out)


def op_page(o: OpDef) -> str:
    out = [HEADER, f"# `{o.name}`\n\n"]
    doc = formulas_as_code(o.doc.strip())
    out.append(f"{doc}\n\n" if doc else "*This op's builder has no docstring.*\n\n")
    out.append(f"- **Builds:** {code(o.module) if o.module else 'not declared'}\n")
    out.append(f"- **Registered by:** `{origin(o)}`\n\n")
    out.append("## Parameters\n\n")
    if o.params:
        out.append(table(["name", "type", "default", "constraints", "description"], [_param_row(p) for p in o.params]))
        if any(p.inferred for p in o.params):
            out.append(
                "\n*Inferred* parameters follow from the input shapes; they may be written, and must then agree.\n"
            )
    else:
        out.append("None.\n")
    out.append("\n## Ports\n\n")
    rows = [_port_row("input", p) for p in o.inputs] + [_port_row("output", p) for p in o.outputs]
    out.append(table(["port", "direction", "shape", "dtype", "description"], rows))
    if o.count_outputs is not None:
        out.append("\nThe number of outputs depends on the parameters; they are referenced by index (`node.0`).\n")
    out.append(
        "\nNames in a shape are symbols bound per call, or the op's parameters (and values derived from them).\n"
    )
    out.append("\n## Inference\n\n")
    out.append(formulas_as_code(o.describe_inference().strip()) + "\n")
    out.append("\n## Example\n\n")
    out.append(example_section(o))
    if o.error_example is not None:
        out.append("\n## A mistake it catches\n\n")
        out.append(error_section(o))
    return "".join(out)


def _param_row(p: Param) -> list[str]:
    return [
        code(p.name),
        f"`{p.type.name}`: {formulas_as_code(p.type.description)}",
        p.describe_default(),
        p.describe_constraints(),
        formulas_as_code(p.doc),
    ]


def _port_row(direction: str, p: Port) -> list[str]:
    shape = code(str(ShapePattern.parse(p.shape))) if p.shape is not None else "any"
    name = code(p.name) + (" (one or more)" if p.variadic else "") + (" (optional)" if p.optional else "")
    name += f" (when {p.when})" if p.when is not None else ""
    name += f" (or a number: parameter `{p.name}`)" if p.scalar else ""
    return [name, direction, shape, code(p.dtype), formulas_as_code(p.doc)]


# --- formulas in prose ----------------------------------------------------------------------------------------

# An operand: a name or number (``kernel_h``, ``2``, ``torch.matmul``), optionally indexed (``pad[2i]``) or called
# (``floor(dim*scale)``); a parenthesised group without spaces (``(kernel_h-1)``); or a bracketed shape, spaces
# allowed (``[N, C*H*W]``, ``[..., n, k]``).
_NAME = r"[A-Za-z0-9_.]+(?:\[[^\[\]\s]*\]|\((?:[^()\s]|\([^()\s]*\))*\))?"
_GROUP = r"\((?:[^()\s]|\([^()\s]*\))*\)"
_SHAPE = r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
_OPERAND = f"(?:{_NAME}|{_GROUP}|{_SHAPE})"
# Operators: spaced or not (``4*T // 4 = T``, ``[..] -> [..]``, ``num_layers >= 2``); a minus only unspaced, so a
# dash in prose is not one.
_OPERATOR = r"(?:\s*(?://|->|>=|<=|[*/+@%=])\s*|-)"
_FORMULA = re.compile(f"{_OPERAND}(?:{_OPERATOR}{_OPERAND})*")
_CODE_SPAN = re.compile(r"(`+).+?\1")


def formulas_as_code(text: str) -> str:
    """``text`` (Markdown prose) with every formula in it as inline code: shapes (``[N, C*H*W]``), arithmetic
    (``(H+2*padding_h-kernel_h)//stride_h+1``, ``D//2``, ``T-1``), comparisons (``num_layers >= 2``) and
    indexing (``dims[i]``). Markdown reads ``*`` as emphasis, so ``[N, C*H*W]`` showed as ``[N, CHW]`` with
    ``H`` in italics; a ``*`` left outside code afterwards is escaped. Code spans already in ``text`` are kept."""
    out: list[str] = []
    last = 0
    for span in _CODE_SPAN.finditer(text):
        out.append(_wrap_formulas(text[last : span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(_wrap_formulas(text[last:]))
    return "".join(out)


def _wrap_formulas(prose: str) -> str:
    out: list[str] = []
    last = 0
    for match in _FORMULA.finditer(prose):
        out.append(_escaped(prose[last : match.start()]))
        found = match.group(0)
        if _is_formula(found):
            stripped = found.rstrip(".")  # a sentence's full stop is not part of it
            out.append(code(stripped) + found[len(stripped) :])
        else:
            out.append(_escaped(found))
        last = match.end()
    out.append(_escaped(prose[last:]))
    return "".join(out)


def _escaped(prose: str) -> str:
    """Prose with each ``*`` escaped: one that no formula took must not start emphasis either."""
    return prose.replace("*", "\\*")


def _is_formula(text: str) -> bool:
    if any(ch in text for ch in "[*/+=@%") or "->" in text or ">=" in text or "<=" in text:
        return True
    # T-1 is arithmetic; 1-d and 2-d are words.
    return "-" in text and any(ch.isdigit() for ch in text) and not re.fullmatch(r"[\d-]+|\d+-[a-z]+", text)


# --- the example -------------------------------------------------------------------------------------------


def example_section(o: OpDef) -> str:
    if not o.example and any(p.required for p in o.params):
        return "*This op declares no example.*\n"
    ex = build_example(o)
    out = ["```yaml\n", ex["yaml"], "```\n\n", "In Python:\n\n```python\n", ex["python"], "```\n\n"]
    if ex["error"] is None:
        outs = ", ".join(f"{code(n)}: {code(t)}" for n, t in ex["outputs"])
        out.append(f"Checked with hndl: the node's output is {outs}.\n")
    else:
        out.append("**This example does not check:**\n\n```text\n" + ex["error"] + "\n```\n")
    return "".join(out)


def build_example(o: OpDef) -> dict[str, Any]:
    """The op's example as spec text and Python, and what checking it infers."""
    node = {k: v for k, v in (o.example or {"op": o.name}).items() if k not in ("in", "op")}
    shape = list(o.input_shape_example if o.input_shape_example is not None else DEFAULT_INPUT_SHAPE)
    graph_params = [p.name for p in o.params if p.type.name == "graph"]
    inputs: list[tuple[str, dict[str, Any]]] = []
    # the ports this example's parameters open (a number may stand for one), without the optional ones
    ports_used = [p for p in o.active_inputs(node) if not p.optional]
    for port in ports_used:
        contract: dict[str, Any] = {"shape": shape}
        dtype = _example_dtype(port.dtype)
        if dtype is not None:
            contract["dtype"] = dtype
        count = (1 if graph_params else 2) if port.variadic else 1
        names = [port.name] if count == 1 else [f"{port.name}{i}" for i in range(count)]
        inputs += [(n, dict(contract)) for n in names]
    name = page_name(o.name) if page_name(o.name)[0].isalpha() else "node"
    if any(name == n for n, _ in inputs):
        name = f"{name}_node"
    refs = [n for n, _ in inputs]

    block = _example_block(shape) if graph_params else None
    lines = ["hndl: 1\n", f"name: {name}_example\n", "inputs:\n" if inputs else "inputs: {}\n"]
    lines += [f"  {n}: {flow(c)}\n" for n, c in inputs]
    if block is not None:
        lines.append("graphs:\n")
        for gname in sorted({str(node.get(p, "block")) for p in graph_params}):
            lines.append(f"  {gname}:\n" + indent(block["yaml"], "    ") + "\n")
    in_value: Any = refs[0] if len(refs) == 1 else refs
    try:
        ports = o.output_names(node)
    except Exception:  # parameters the op cannot count outputs from: the check below will say why
        ports = [p.name for p in o.outputs]
    outs = [name] if len(ports) == 1 else [f"{name}.{p}" for p in ports]
    written = {"op": o.name, "in": in_value, **node} if refs else {"op": o.name, **node}
    lines += ["nodes:\n", f"  {name}: {flow(written)}\n", f"outputs: {flow(outs)}\n"]

    py = ["import hndl\n\n", f"g = hndl.Graph({name + '_example'!r})\n"]
    for n, c in inputs:
        dt = f", dtype={c['dtype']!r}" if "dtype" in c else ""
        py.append(f"{n} = g.input({n!r}, {tuple(c['shape'])!r}{dt})\n")
    kwargs = "".join(f", {k}={v!r}" for k, v in node.items())
    args = "".join(f", {r}" for r in refs)
    if len(outs) == 1:
        py.append(f"g.output(g.add({o.name!r}{args}, name={name!r}{kwargs}))\n")
    else:
        py.append(f"node = g.add({o.name!r}{args}, name={name!r}{kwargs})\n")
        py.append("g.output([" + ", ".join(f"node[{int(p) if p.isdigit() else p!r}]" for p in ports) + "])\n")
    if block is not None:
        sub = []
        for gname in sorted({str(node.get(p, "block")) for p in graph_params}):
            sub += [
                f"{gname} = hndl.Graph({gname!r})\n",
                f"{gname}.output({gname}.add('linear', {gname}.input('x', {tuple(shape)!r}), name='ff', "
                f"out_features={_block_width(shape)}))\n",
                f"g.add_subgraph({gname})\n",
            ]
        py[2:2] = sub

    error: str | None = None
    outputs: list[tuple[str, str]] = []
    try:
        g = hndl.Graph(f"{name}_example")
        handles = [g.input(n, tuple(c["shape"]), dtype=c.get("dtype")) for n, c in inputs]
        for gname in sorted({str(node.get(p, "block")) for p in graph_params}):
            g.add_subgraph(_example_block_graph(gname, shape))
        handle = g.add(o.name, *handles, name=name, **node)
        g.output(handle if len(outs) == 1 else [handle[p] for p in ports])
        checked = hndl.check(g)
        cn = checked.nodes[-1]
        names = o.output_names(cn.params)
        outputs = [(f"{name}.{n}" if len(names) > 1 else name, str(t)) for n, t in zip(names, cn.out_types)]
    except hndl.HndlError as exc:
        error = str(exc)
    return {"yaml": "".join(lines), "python": "".join(py), "error": error, "outputs": outputs}


def error_section(o: OpDef) -> str:
    """The op's declared error example (:attr:`hndl.OpDef.error_example`) and the message hndl gives it."""
    ex = build_error_example(o)
    out = ["```yaml\n", ex["yaml"], "```\n\n"]
    if ex["error"] is None:
        out.append("**This example checks, though it is declared as a mistake.**\n")
    else:
        out.append("```text\n" + ex["error"] + "\n```\n")
    return "".join(out)


def build_error_example(o: OpDef) -> dict[str, Any]:
    """The op's error example as spec text, and the message checking it gives (``None`` if it checks)."""
    declared = o.error_example or {}
    params = dict(declared.get("params", {}))
    contracts: list[dict[str, Any]] = [
        dict(c) if isinstance(c, dict) else {"shape": list(c)} for c in declared.get("inputs", [])
    ]
    name = page_name(o.name) if page_name(o.name)[0].isalpha() else "node"
    names = [f"x{i}" if len(contracts) > 1 else "x" for i in range(len(contracts))]
    if name in names:
        name = f"{name}_node"
    written: dict[str, Any] = {"op": o.name}
    if names:
        written["in"] = names[0] if len(names) == 1 else names
    written.update(params)
    lines = ["hndl: 1\n", f"name: {name}_mistake\n", "inputs:\n" if names else "inputs: {}\n"]
    lines += [f"  {n}: {flow(c)}\n" for n, c in zip(names, contracts)]
    lines += ["nodes:\n", f"  {name}: {flow(written)}\n", f"outputs: [{name}]\n"]
    error: str | None = None
    try:
        g = hndl.Graph(f"{name}_mistake")
        handles = [g.input(n, tuple(c["shape"]), dtype=c.get("dtype")) for n, c in zip(names, contracts)]
        g.output(g.add(o.name, *handles, name=name, **params))
        hndl.check(g)
    except hndl.HndlError as exc:
        error = str(exc)
    return {"yaml": "".join(lines), "error": error}


def _example_dtype(rule: str) -> str | None:
    if rule in DTYPES:
        return rule
    if rule == "int":
        return "int64"
    return None


def _block_width(shape: Sequence[Any]) -> int:
    last = shape[-1] if shape else None
    return last if isinstance(last, int) and last > 0 else 16


def _example_block(shape: Sequence[Any]) -> dict[str, str]:
    """A one-layer subgraph for ops that take a ``graph`` parameter; its output matches its input."""
    text = (
        "inputs:\n"
        f"  x: {flow({'shape': list(shape)})}\n"
        "nodes:\n"
        f"  ff: {flow({'op': 'linear', 'in': 'x', 'out_features': _block_width(shape)})}\n"
        "outputs: [ff]"
    )
    return {"yaml": text}


def _example_block_graph(name: str, shape: Sequence[Any]) -> hndl.Graph:
    sub = hndl.Graph(name)
    x = sub.input("x", tuple(shape))
    sub.output(sub.add("linear", x, name="ff", out_features=_block_width(shape)))
    return sub
