"""Graph parameters: a subgraph's declared parameters, the values one use of it passes, and the references
(``"$width"``, ``"$width*4"``) in its nodes that take those values.

A graph declares parameters with defaults (``Graph.params``, a spec graph's ``params:``). A node parameter
written ``"$name"`` takes the parameter's value as it is (any plain value); ``"$expr"`` is an expression over
number parameters (``"$width*4"``, ``"$width//2"``, ``"$rate * $k / ($n - 1)"``, ``"$hidden_size ** 0.5"``)
that computes as Python does, parsed by a small grammar, nothing ``eval``-ed. A graph parameter's own value may
be a reference too (``head_dim: "$hidden_size // num_heads"``): :func:`compute_params` computes those in the
order their references need, refusing cycles, each time the graph is checked, so the graph keeps the text (for
:func:`hndl.dumps`) and an override of a parameter they use is seen by them. Each repetition of a subgraph also
binds ``repetition``, its index (0-based), unless the graph declares a parameter of that name. A reference may
stand anywhere in a parameter's value: the whole value, an item of a list (``shape: [1, "$tokens+1", $dim]``,
``kernel_size: [$k, $k]``) or a value inside a mapping (so a ``graph`` node can pass ``params: {width: $width}``
on to a subgraph of its own), at any depth. Where an op's parameter holds integers, a whole float a reference
gives is its integer (``"$d * 0.25"``), and any other float a problem. A node's ``when`` may be ``"$name"`` of
a bool parameter, or a condition (``"$not parallel"``, ``"$depth > 2"``). An input shape names an integer parameter as a dim (``[B, width, H, W]``), at the top level
as in a subgraph.

This module holds what a graph declares and passes (a repetition's values, input shapes that name parameters, the
sizes a summary is given); the expression language is :mod:`hndl._param_expressions`, binding references to
values :mod:`hndl._param_binding`.

Everything here returns reasons rather than raising; the checker (:mod:`hndl._check`) reports them.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ._contracts import Contract, ShapePattern
from ._dims import MAX_DIM, DimError, format_dim, free_symbols, substitute
from ._graph import Graph
from ._param_binding import ValueBudget, compute_params
from ._param_expressions import is_int
from .naming import excerpt, suggestion

__all__ = [
    "REPETITION",
    "bind_contract",
    "repetition_params",
    "repetition_uses",
    "seed_env",
    "size_parameters",
    "with_sizes",
]

#: The parameter each repetition of a subgraph binds to its index (0-based), unless the graph declares one of
#: that name: a drop-path rate that grows with depth is ``p: "$rate * ($first + $repetition) / ($blocks - 1)"``.
REPETITION = "repetition"


def repetition_uses(mappings: list[Any], repeat: int) -> list[tuple[Any, int]]:
    """How a per-repetition ``params`` list spreads over ``repeat`` repetitions: ``(mapping, how many
    repetitions it serves)``, each mapping but the last serving one in turn and the last every repetition after
    them. ``mappings`` holds at most ``repeat + 1`` entries (the caller says what more is)."""
    *firsts, last = mappings
    return [(m, 1) for m in firsts] + [(last, repeat - len(firsts))]


def repetition_params(
    sub: Graph, passed: Any, repeat: int, budget: ValueBudget | None = None
) -> tuple[list[dict[str, Any]], str, str | None]:
    """The parameter values of each repetition of ``sub``: its defaults, overridden by what the use passed.

    ``passed`` is ``None``, a mapping (for every repetition) or a list of mappings: each but the last for one
    repetition in turn, the last for every repetition after those (none, one or many). So
    ``[{stride: 2, downsample: true}, {}]`` makes the first repetition differ and the rest alike for any
    ``repeat`` from 1 up (a ResNet stage of configurable depth), and a list of ``repeat`` mappings is one per
    repetition. Each repetition gets its own copy of the values, counted against ``budget`` (a new one when
    none is given) before any is made. The graph's parameters that are computed from others
    (:func:`compute_params`) are computed for each repetition from its values, so one that is passed a new
    ``width`` has the ``head_dim`` of that width (a value passed for a computed parameter replaces it).

    Returns:
        ``(values per repetition, "", None)``, or ``([], reason, hint)``.
    """
    if passed is None:
        given: list[Mapping[str, Any]] = [{}] * repeat
    elif isinstance(passed, Mapping):
        given = [passed] * repeat
    else:
        given = list(passed)
        if not given or len(given) > repeat + 1:
            times = f"{repeat} repetition{'s' if repeat != 1 else ''}"
            return (
                [],
                f"'params' lists {len(given)} mappings for {times}",
                "give one mapping for every repetition, or a list: one mapping per repetition in turn, the last "
                f"for every repetition after them (at most {repeat + 1} mappings here)",
            )
        given = [m for m, count in repetition_uses(given, repeat) for _ in range(count)]
    out: list[dict[str, Any]] = []
    distinct = {id(values): values for values in given}  # as passed: one mapping often serves many repetitions
    for values in distinct.values():
        for name in values:
            if name not in sub.params:
                declared = ", ".join(sub.params) or "none"
                hint = suggestion(name, sub.params) or f"graph {sub.name!r} declares: {declared}"
                return [], f"graph {sub.name!r} has no parameter {excerpt(name)}", hint
    budget = budget if budget is not None else ValueBudget()
    uses = Counter(map(id, given))
    for key, values in distinct.items():
        reason = budget.spend(sub.params, uses[key]) or budget.spend(values, uses[key])
        if reason:
            return [], reason, "each repetition gets its own copy of its parameters' values"
    for index, values in enumerate(given):
        implicit = {} if REPETITION in sub.params else {REPETITION: index}
        merged = {**implicit, **copy.deepcopy(sub.params), **copy.deepcopy(dict(values))}
        computed, problems = compute_params(merged, budget)
        if problems:
            name, reason, fix = problems[0]
            return [], f"parameter {name!r} of graph {sub.name!r}: {reason}", fix
        out.append(computed)
    return out, "", None


def bind_contract(contract: Contract, bindings: Mapping[str, Any]) -> tuple[Contract, str]:
    """``contract`` with each dim that names an integer parameter replaced by its value (``[B, 3, size, size]``
    with ``size: 64`` is ``[B, 3, 64, 64]``; ``[B, width*4]`` is computed), so the top level's inputs follow the
    graph's configuration as a subgraph's do.

    Returns:
        ``(bound contract, "")`` (``contract`` itself when no dim names a parameter), or ``(contract, reason)``
        when a dim comes out negative or names a parameter that is a fraction.
    """
    env = seed_env(bindings)
    pattern = contract.shape
    for entry, d in zip(pattern.entries, pattern.dims):
        names = sorted(free_symbols(d)) if d is not None else []
        fraction = next((n for n in names if n in bindings and _fraction(bindings[n])), None)
        if fraction is not None:
            return (
                contract,
                f"dim {excerpt(entry)} names {fraction!r}, which is {bindings[fraction]!r}: not a whole number",
            )
    if not env or not any(d is not None and free_symbols(d) & env.keys() for d in pattern.dims):
        return contract, ""
    entries: list[Any] = []
    for entry, d in zip(pattern.entries, pattern.dims):
        if d is None or not free_symbols(d) & env.keys():
            entries.append(entry)
            continue
        try:
            entries.append(format_dim(substitute(d, env)))
        except DimError as exc:
            return contract, f"dim {excerpt(entry)}: {exc}"
    try:
        bound = ShapePattern.parse(entries)
    except ValueError as exc:
        return contract, f"with the graph's parameters, {exc}"
    return replace(contract, shape=bound), ""


def seed_env(bindings: Mapping[str, Any]) -> dict[str, Any]:
    """The integer parameters, as a shape-matching environment: a dim that names one must equal its value. A
    float that is a whole number (``head_dim: "$d / heads"``, 64.0) counts as its integer."""
    env = {}
    for name, value in bindings.items():
        if is_int(value):
            env[name] = value
        elif isinstance(value, float) and value.is_integer() and abs(value) <= MAX_DIM:
            env[name] = int(value)
    return env


def _fraction(value: Any) -> bool:
    return isinstance(value, float) and not value.is_integer()


def size_parameters(graph: Graph) -> dict[str, int]:
    """The integer parameters of ``graph`` that its input shapes name as dims, with their values: sizes the
    configuration fixes (``H`` and ``W`` of ``[B, 3, H, W]`` with ``params: {H: 224, W: 224}``), which a summary
    or a drawing is given as it is given a symbol's (SPEC 8.5.4)."""
    named: set[str] = set()
    for spec in graph.inputs.values():
        for d in spec.contract.shape.dims:
            if d is not None:
                named |= free_symbols(d)
    values, _ = compute_params(graph.params)  # one that cannot be computed is the checker's to report
    return {name: value for name, value in seed_env(values).items() if name in named}


def with_sizes(graph: Graph, dims: Mapping[str, Any]) -> Graph:
    """``graph`` configured by the ``dims`` that name its size parameters (:func:`size_parameters`). The graph
    itself is left as it is: when a size is given, the result is a copy whose ``params`` has it (the nodes are
    shared; checking and building never change them)."""
    sizes = {k: v for k, v in dims.items() if k in size_parameters(graph) and is_int(v) and v >= 1}
    if not sizes:
        return graph
    configured = copy.copy(graph)
    configured.params = {**graph.params, **sizes}
    return configured
