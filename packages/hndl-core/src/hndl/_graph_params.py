"""Graph parameters: a subgraph's declared parameters, the values one use of it passes, and the references
(``"$width"``, ``"$width*4"``) in its nodes that take those values.

A graph declares parameters with defaults (``Graph.params``, a spec graph's ``params:``). A node parameter
written ``"$name"`` takes the parameter's value as it is (any plain value); ``"$expr"`` is an integer expression
over integer parameters (``"$width*4"``, ``"$width//2"``), evaluated with the dims arithmetic, nothing
``eval``-ed. A reference is a whole parameter value, or a whole value inside a mapping parameter (so a
``graph`` node can pass ``params: {width: $width}`` on to a subgraph of its own). A node's ``when`` may be
``"$name"`` of a bool parameter. An input shape names an integer parameter as a dim (``[B, width, H, W]``).

Everything here returns reasons rather than raising; the checker (:mod:`hndl._check`) reports them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ._dims import DimError, evaluate, free_symbols, parse_dim
from ._graph import Graph, Node
from .naming import excerpt, suggestion

__all__ = ["PREFIX", "bind_node", "is_reference", "repetition_params"]

#: What starts a reference to a graph parameter in a node's parameters.
PREFIX = "$"


def is_reference(value: Any) -> bool:
    """Whether ``value`` is a reference to a graph parameter (a string starting with ``$``)."""
    return isinstance(value, str) and value.startswith(PREFIX)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def resolve(value: str, bindings: Mapping[str, Any]) -> tuple[Any, str, str | None]:
    """The value of the reference ``value`` under ``bindings``: ``(value, "", None)`` or ``(None, reason, hint)``."""
    text = value[len(PREFIX) :].strip()
    if text in bindings:
        return copy.deepcopy(bindings[text]), "", None
    try:
        expr = parse_dim(text)
    except DimError:
        return None, f"{excerpt(value)} is neither a graph parameter nor an integer expression over them", None
    names = sorted(free_symbols(expr))
    missing = [n for n in names if n not in bindings]
    if missing:
        declared = ", ".join(bindings) or "none"
        hint = suggestion(missing[0], bindings) or f"declared parameters: {declared}"
        return None, f"{excerpt(value)} names {missing[0]!r}, which is not a parameter of this graph", hint
    not_int = [n for n in names if not _is_int(bindings[n])]
    if not_int:
        name = not_int[0]
        return (
            None,
            f"{excerpt(value)} computes with {name!r}, which is {excerpt(bindings[name])}, not an integer",
            None,
        )
    try:
        return evaluate(expr, {n: bindings[n] for n in names}), "", None
    except DimError as exc:
        return None, f"{excerpt(value)}: {exc}", None


def bind_node(node: Node, bindings: Mapping[str, Any]) -> tuple[Node, list[tuple[str, str, str | None]]]:
    """``node`` with every reference in its parameters and ``when`` replaced by its value.

    Returns:
        The bound node (``node`` itself when it holds no reference) and the problems as
        ``(key, reason, hint)``; on a problem the parameter keeps its reference.
    """
    problems: list[tuple[str, str, str | None]] = []

    def value_of(key: str, value: Any) -> Any:
        if is_reference(value):
            resolved, reason, hint = resolve(value, bindings)
            if reason:
                problems.append((key, reason, hint))
                return value
            return resolved
        if isinstance(value, Mapping):
            return {k: value_of(key, v) if is_reference(v) else v for k, v in value.items()}
        if isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
            return [value_of(key, v) for v in value]
        return value

    if not _holds_reference(node):
        return node, problems
    params = {key: value_of(key, value) for key, value in node.params.items()}
    when = value_of("when", node.when)
    return replace(node, params=params, when=when), problems


def _holds_reference(node: Node) -> bool:
    def holds(value: Any) -> bool:
        if is_reference(value):
            return True
        if isinstance(value, Mapping):
            return any(is_reference(v) for v in value.values())
        if isinstance(value, list):
            return any(isinstance(v, Mapping) and holds(v) for v in value)
        return False

    return holds(node.when) or any(holds(v) for v in node.params.values())


def repetition_params(sub: Graph, passed: Any, repeat: int) -> tuple[list[dict[str, Any]], str, str | None]:
    """The parameter values of each repetition of ``sub``: its defaults, overridden by what the use passed.

    ``passed`` is ``None``, a mapping (for every repetition) or a list of ``repeat`` mappings (one each).

    Returns:
        ``(values per repetition, "", None)``, or ``([], reason, hint)``.
    """
    if passed is None:
        given: list[Mapping[str, Any]] = [{}] * repeat
    elif isinstance(passed, Mapping):
        given = [passed] * repeat
    else:
        given = list(passed)
        if len(given) != repeat:
            return (
                [],
                f"'params' lists {len(given)} mappings for {repeat} repetition{'s' if repeat != 1 else ''}",
                "give one mapping for all repetitions, or one per repetition",
            )
    out: list[dict[str, Any]] = []
    for values in given:
        for name in values:
            if name not in sub.params:
                declared = ", ".join(sub.params) or "none"
                hint = suggestion(name, sub.params) or f"graph {sub.name!r} declares: {declared}"
                return [], f"graph {sub.name!r} has no parameter {excerpt(name)}", hint
        out.append({**copy.deepcopy(sub.params), **copy.deepcopy(dict(values))})
    return out, "", None


def seed_env(bindings: Mapping[str, Any]) -> dict[str, Any]:
    """The integer parameters, as a shape-matching environment: a dim that names one must equal its value."""
    return {name: value for name, value in bindings.items() if _is_int(value)}
