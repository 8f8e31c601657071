"""Graph-parameter overrides at load: ``hndl.load(path, params={"image_size": 96})``, ``hndl.loads``,
``hndl.zoo.get(name, **overrides)`` and the command's ``--param NAME=VALUE`` all come here.

An override acts exactly as if the spec's ``params:`` had been written with that value: it replaces the value in
``graph.params``, and everything that reads the parameter (a node's ``$name`` or ``$expression``, an input shape
that names it) sees the new value when the graph is checked. So this module checks only what the spec itself
cannot: that the name is one the spec declares (with the close ones when it is not) and that the value is of the
declared value's kind (an integer for ``image_size: 224``; for a parameter the spec computes from others, such as
``head_dim: "$hidden_size // num_heads"``, the kind of the value it computes to). An override of a parameter
that others are computed from is seen by them: they are computed when the graph is checked. Whether the value makes a consistent model (a head
count that divides the width) is the checker's job, at the spec line that uses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import HndlError, Problem
from ._graph import Graph
from ._hints import EXPRESSIONS_DOC
from ._param_binding import MAX_BOUND_VALUES, MAX_DEPTH, compute_params, expanded_size
from ._param_expressions import is_reference, looks_like_expression
from ._yaml_reader import describe
from .naming import excerpt, suggestion

__all__ = ["kind_of", "override_params"]


def override_params(graph: Graph, overrides: Mapping[str, Any] | None, *, what: str | None = None) -> Graph:
    """Set ``graph``'s parameters from ``overrides`` (in place; all of them or none) and return ``graph``.

    Args:
        graph: a graph just loaded (its ``params`` are the spec's top-level ``params:``).
        overrides: parameter name -> value: a number, text, true/false, null, or a list or mapping of those.
            A tuple is taken as a list (so :func:`hndl.dumps` writes it back as one).
        what: how messages name the graph (``"zoo:resnet18"``); ``graph 'NAME'`` by default.

    Raises:
        HndlError: E_PARAM for each name the spec does not declare (with the close ones), each value of
            another kind than the declared one, and each value that is not plain data; each at the line that
            declares the parameter when the graph came from a spec file.
    """
    if overrides is None:
        return graph
    label = what or f"graph {graph.name!r}"
    if not isinstance(overrides, Mapping):
        raise HndlError(
            Problem(
                "E_PARAM",
                f"the parameter overrides for {label} must be a mapping of parameter name to value, "
                f"got {type(overrides).__name__}",
                hint='e.g. params={"image_size": 96}',
            )
        )
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    computed: dict[str, Any] | None = None  # the spec's values, computed once and only when one is computed
    for name, value in overrides.items():
        reason = _unknown(graph, name, label)
        if reason is None:
            if computed is None and is_reference(graph.params[name]):
                computed, _ = compute_params(graph.params)  # one that cannot be computed takes any value
            reason = _wrong_kind(graph, name, value, label, computed or {})
        if reason is not None:
            problems.append(reason)
        else:
            values[name] = _plain(value)
    if problems:
        raise HndlError(problems, title=label)
    graph.params.update(values)
    return graph


def _unknown(graph: Graph, name: Any, label: str) -> Problem | None:
    """E_PARAM when ``graph`` declares no parameter ``name``."""
    if isinstance(name, str) and name in graph.params:
        return None
    declared = ", ".join(graph.params)
    sub = _declared_by_subgraph(graph, name)
    hint: str | None
    if sub is not None:
        hint = f"{excerpt(name)} is a parameter of graph {sub!r}: a node that uses it passes it (params: {{...}})"
    elif declared:
        hint = suggestion(name, graph.params) if isinstance(name, str) else None
    else:
        hint = "declare it under the spec's params: to make it configurable"
    return Problem(
        "E_PARAM",
        f"{label} has no parameter {excerpt(name)}",
        expected=f"one of {declared}" if declared else "none: the spec declares no params",
        actual=excerpt(name) if not isinstance(name, str) else name,
        # the spec's params: (where its first parameter is declared), or the spec itself when it has none
        location=next(iter(graph.param_locations.values()), graph.location),
        hint=hint,
    )


def _declared_by_subgraph(graph: Graph, name: Any) -> str | None:
    for sub in graph.graphs.values():
        if isinstance(name, str) and name in sub.params:
            return sub.name
    return None


def kind_of(value: Any) -> str | None:
    """The kind of a parameter's value as messages name it: ``"an integer"``, ``"a number"``, ``"text"``,
    ``"true or false"``, ``"a list"``, ``"a mapping"``; ``None`` for null (any kind may replace it)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return type(value).__name__


def _fits(declared: Any, value: Any) -> bool:
    """Whether ``value`` may replace the declared ``declared``: the same kind, an integer where a number is
    declared (``dropout: 0.1`` takes ``0``), and null anywhere (many parameters read it as "off")."""
    if declared is None or value is None:
        return True
    want, have = kind_of(declared), kind_of(value)
    return want == have or (want == "a number" and have == "an integer")


def _wrong_kind(graph: Graph, name: str, value: Any, label: str, computed: Mapping[str, Any]) -> Problem | None:
    """E_PARAM when ``value`` is not plain data, or not of the kind of the value the spec declares (for one the
    spec computes, of the value it computes to, found in ``computed``)."""
    where = graph.param_locations.get(name, graph.location)
    reason = _not_plain(value)
    if reason is not None:
        return Problem(
            "E_PARAM",
            f"parameter {name!r} of {label}: {reason}",
            expected="a number, text, true/false, null, or a list or mapping of them",
            actual=excerpt(value),
            location=where,
        )
    written = graph.params[name]
    # as the spec says it (a graph's params passed back, expressions included)
    if is_reference(written) and value == written:
        return None
    if is_reference(written) and name not in computed:
        return None  # computed from others, and not computable as written: the checker says why
    declared = computed[name] if is_reference(written) else written
    if _fits(declared, value):
        return None
    hint = None
    if isinstance(value, str) and _is_number_text(value) and kind_of(declared) in ("an integer", "a number"):
        hint = f"pass the number {value.strip()}, not the text {excerpt(value)}"
    elif isinstance(value, str) and looks_like_expression(value):
        hint = (
            "an override is a value, not an expression: pass the number (a parameter computed from others is "
            f"written in the spec's params:, see {EXPRESSIONS_DOC})"
        )
    in_spec = f"{excerpt(written)} = {excerpt(declared)}" if declared is not written else excerpt(declared)
    return Problem(
        "E_PARAM",
        f"parameter {name!r} of {label} is {kind_of(declared)} ({in_spec} in the spec), got {describe(value)}",
        expected=kind_of(declared),
        actual=excerpt(value),
        location=where,
        hint=hint,
    )


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _not_plain(value: Any) -> str | None:
    """Why ``value`` cannot be a spec's parameter value (``None`` when it can): one that is not YAML data, that
    contains itself, nests too deeply or holds too many values."""
    if expanded_size(value, MAX_BOUND_VALUES + 1) > MAX_BOUND_VALUES:
        return f"the value holds more than {MAX_BOUND_VALUES:,} values"
    inside: set[int] = set()  # the containers on the way down to the item looked at

    def why(item: Any, depth: int) -> str | None:
        if item is None or isinstance(item, (bool, int, float, str)):
            return None
        if not isinstance(item, (list, tuple, Mapping)):
            return f"{type(item).__name__} is not a value a spec file can hold"
        if depth >= MAX_DEPTH:
            return f"the value nests more than {MAX_DEPTH} levels deep"
        if id(item) in inside:
            return "the value contains itself"
        if isinstance(item, Mapping):
            bad = next((k for k in item if not isinstance(k, str)), None)
            if bad is not None:
                return f"a key inside the value must be text, got {excerpt(bad)}"
        inside.add(id(item))
        try:
            return next(
                filter(None, (why(v, depth + 1) for v in (item.values() if isinstance(item, Mapping) else item))), None
            )
        finally:
            inside.discard(id(item))

    return why(value, 0)


def _plain(value: Any) -> Any:
    """A copy of ``value`` as a spec holds it: lists for tuples, plain dicts; the caller's objects are not kept,
    so changing them later changes no graph."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
