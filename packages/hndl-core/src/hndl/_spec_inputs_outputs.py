"""The ``inputs`` and ``outputs`` sections of a spec: the values a graph takes and returns, with their contracts.

An input is a mapping of its contract's keys (:data:`INPUT_KEYS`); an output is a reference, or a named
output that declares a contract too (:data:`OUTPUT_KEYS`). Each key of a contract is parsed on its own here
(:class:`~hndl._contracts.Contract`, :class:`~hndl._contracts.ShapePattern`), so a problem is reported at the
key it is about; whether an output's contract holds is :func:`hndl.check`'s to say.
"""

from __future__ import annotations

from typing import Any

from ._contracts import Contract, ShapePattern, parse_dtype_rule
from ._errors import HndlError
from ._graph import Graph
from ._param_expressions import is_reference
from ._spec_checks import SpecChecks, bounded
from ._spec_dumper import flow_yaml
from ._yaml_reader import Located, describe
from .naming import excerpt, suggestion

__all__ = ["INPUT_KEYS", "OUTPUT_KEYS", "read_inputs", "read_outputs"]

#: The keys of an input: its contract.
INPUT_KEYS = ("shape", "dtype", "device", "ranges")
#: The keys of a named output (``outputs: {logits: {from: head, shape: [B, 10]}}``): what it returns, and its contract
#: in the words an input's contract uses.
OUTPUT_KEYS = ("from", "shape", "dtype")


def read_inputs(checks: SpecChecks, graph: Graph, entry: Located, what: str) -> None:
    """The ``inputs`` section of ``what`` (the spec, or one of its graphs) added to ``graph``: a mapping of
    input name to its contract (``{shape: [...], dtype: ..., device: ..., ranges: ...}``)."""
    if not isinstance(entry.value, dict):
        checks.add(
            "E_SPEC",
            f"'inputs' of {what} must be a mapping of input name to {{shape: [...]}}, got {describe(entry.value)}",
            entry.loc,
            hint="e.g. inputs: {x: {shape: [B, 784]}}",
        )
        return
    checks.duplicate_names(entry, "input")
    for name, spec in entry.value.items():
        loc = entry.keys[name]
        if not checks.name_ok(name, "input", loc) or spec.failed:
            continue
        checks.duplicates(spec, node=name, op="input")
        if not isinstance(spec.value, dict):
            shape = flow_yaml(spec.plain()) if isinstance(spec.value, list) else ""
            checks.add(
                "E_SPEC",
                f"an input must be a mapping such as {{shape: [B, 784]}}, got {describe(spec.value)}",
                spec.loc,
                node=name,
                op="input",
                # Suggested only when short: the hint echoes the value.
                hint=f"write {name}: {{shape: {shape}}}" if 0 < len(shape) <= 60 else None,
            )
            continue
        _input(checks, graph, name, loc, spec)


def _input(checks: SpecChecks, graph: Graph, name: str, loc: str, spec: Located) -> None:
    """Input ``name`` (a mapping, written at ``loc``) added to ``graph`` once each key of its contract reads."""
    ok = spec.ok
    for key, key_at in spec.keys.items():
        if key not in INPUT_KEYS:
            hint = suggestion(key, INPUT_KEYS) or "an input takes: shape, dtype, device, ranges"
            checks.add("E_SPEC", f"unknown key {excerpt(key)}", key_at, node=name, op="input", hint=hint)
            ok = False
    shape = spec.value.get("shape")
    if shape is None:
        checks.add("E_SPEC", "missing key 'shape'", loc, node=name, op="input", hint="add shape: [B, ...]")
        return
    if not isinstance(shape.value, list) and not shape.failed:
        checks.add(
            "E_SPEC",
            f"'shape' must be a list such as [B, 784], got {describe(shape.value)}",
            shape.loc,
            node=name,
            op="input",
        )
        return
    if not ok:
        return
    # Each key of the contract on its own, so that a problem is reported at the key it is about.
    contract_ok = True
    for key in INPUT_KEYS:
        part = spec.value.get(key)
        if part is None:
            continue
        try:
            if key == "ranges":  # a range names symbols of the shape (judged once the shape is right)
                if contract_ok:
                    Contract.make(shape.plain(), ranges=part.plain())
            else:
                Contract.make(**{"shape": (), key: part.plain()})
        except ValueError as exc:
            value = part.plain()
            # A graph parameter is named in an input shape as a plain dim, the way symbols are.
            dollar = key == "shape" and isinstance(value, list) and any(is_reference(d) for d in value)
            checks.add(
                "E_SPEC",
                bounded(str(exc)),
                part.loc,
                node=name,
                op="input",
                hint="an input shape names a graph parameter without '$': [B, width, H, W]" if dollar else None,
            )
            contract_ok = False
    if not contract_ok:
        return
    dtype, device, ranges = spec.value.get("dtype"), spec.value.get("device"), spec.value.get("ranges")
    try:
        graph.input(
            name,
            shape.plain(),
            dtype=None if dtype is None else dtype.value,
            device=None if device is None else device.value,
            ranges=None if ranges is None else ranges.plain(),
        )
    except HndlError as exc:  # the name is taken (by a node of the same name)
        for p in exc.problems:
            checks.add(p.code, p.message, loc, node=name, op="input", hint=p.hint)
        return
    graph.inputs[name].location = loc


def read_outputs(checks: SpecChecks, graph: Graph, entry: Located, what: str) -> None:
    """The ``outputs`` section of ``what`` added to ``graph``: a list of references (``[out]``, or one reference), or a mapping of output name to a reference or to
    ``{from: ref, shape: [...], dtype: ...}``: a named output with its contract."""
    if isinstance(entry.value, dict):
        _named_outputs(checks, graph, entry, what)
        return
    if not isinstance(entry.value, (list, str)):
        checks.add(
            "E_SPEC",
            f"'outputs' of {what} must be a list of references, or a mapping of output name to a reference or "
            f"{{from: ..., shape: [...]}}, got {describe(entry.value)}",
            entry.loc,
            hint="e.g. outputs: [out], or outputs: {logits: {from: out, shape: [B, 10]}}",
        )
        return
    # A single reference is accepted as a one-item list.
    items = entry.value if isinstance(entry.value, list) else [entry]
    for i, item in enumerate(items):
        if item.failed:
            continue
        if not isinstance(item.value, str):
            checks.add(
                "E_SPEC",
                f"output {i} of {what} must be a reference (an input or node name, or node.port), "
                f"got {describe(item.value)}",
                item.loc,
                hint="a named output with a contract goes in a mapping: outputs: {logits: {from: out, shape: [B, 10]}}"
                if isinstance(item.value, dict)
                else None,
            )
            continue
        graph.output(item.value)
        graph.output_locations[-1] = item.loc


def _named_outputs(checks: SpecChecks, graph: Graph, entry: Located, what: str) -> None:
    """Outputs written as a mapping of output name to a reference, or to ``{from: ref, shape: [...], dtype:
    ...}``: each key of a contract checked on its own."""
    checks.duplicate_names(entry, "output")
    for name, spec in entry.value.items():
        loc = entry.keys[name]
        if not checks.name_ok(name, "output", loc) or spec.failed:
            continue
        checks.duplicates(spec, node=name, op="output")
        if isinstance(spec.value, str):  # a name for a reference, no contract
            _output(checks, graph, name, spec.value, spec.loc, None, None)
            continue
        if not isinstance(spec.value, dict):
            checks.add(
                "E_SPEC",
                f"an output must be a reference or a mapping such as {{from: out, shape: [B, 10]}}, "
                f"got {describe(spec.value)}",
                spec.loc,
                node=name,
                op="output",
            )
            continue
        ok = spec.ok
        for key, key_at in spec.keys.items():
            if key not in OUTPUT_KEYS:
                hint = suggestion(key, OUTPUT_KEYS) or "an output takes: from, shape, dtype"
                checks.add("E_SPEC", f"unknown key {excerpt(key)}", key_at, node=name, op="output", hint=hint)
                ok = False
        ref = spec.value.get("from")
        if ref is None:
            checks.add(
                "E_SPEC",
                "missing key 'from'",
                loc,
                node=name,
                op="output",
                hint="add from: <the node whose value this output returns>",
            )
            continue
        if not ref.failed and not isinstance(ref.value, str):
            checks.add(
                "E_SPEC",
                f"'from' must be a reference (an input or node name, or node.port), got {describe(ref.value)}",
                ref.loc,
                node=name,
                op="output",
            )
            ok = False
        shape, dtype = spec.value.get("shape"), spec.value.get("dtype")
        # Each key of the contract on its own, so that a problem is reported at the key it is about.
        for key, make in (("shape", ShapePattern.parse), ("dtype", parse_dtype_rule)):
            part = spec.value.get(key)
            if part is None:
                continue
            if part.failed:  # reported where it was read
                ok = False
                continue
            if key == "dtype" and part.value is None:  # dtype: null declares none
                continue
            if key == "shape" and not isinstance(part.value, list):
                checks.add(
                    "E_SPEC",
                    f"'shape' must be a list such as [B, 10], got {describe(part.value)}",
                    part.loc,
                    node=name,
                    op="output",
                )
                ok = False
                continue
            try:
                make(part.plain())
            except ValueError as exc:
                checks.add("E_SPEC", bounded(str(exc)), part.loc, node=name, op="output")
                ok = False
        if ok:
            _output(
                checks,
                graph,
                name,
                ref.value,
                ref.loc,
                None if shape is None else shape.plain(),
                None if dtype is None else dtype.value,
                declared_at=loc,
            )


def _output(
    checks: SpecChecks,
    graph: Graph,
    name: str,
    ref: str,
    loc: str,
    shape: Any,
    dtype: Any,
    *,
    declared_at: str | None = None,
) -> None:
    """Output ``name`` of ``graph``: the value ``ref`` (written at ``loc``) with its declared shape and dtype
    (``None``: not declared); ``declared_at``, where the named output was declared, is where its contract's
    problems point."""
    try:
        graph.output(ref, name, shape=shape, dtype=dtype)
    except HndlError as exc:
        for p in exc.problems:
            checks.add(p.code, p.message, declared_at or loc, node=name, op="output", hint=p.hint)
        return
    graph.output_locations[-1] = loc
    graph.output_specs[-1].location = declared_at or loc
