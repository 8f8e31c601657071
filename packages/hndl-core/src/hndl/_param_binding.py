"""Binding graph-parameter references to values: ``"$name"`` and ``"$expr"`` (:mod:`hndl._param_expressions`)
in a node's parameters, its ``when`` and its tie's ``when``, at any depth of lists and mappings
(:func:`bind_node`); a graph's own parameters computed from one another in the order their references need
(:func:`compute_params`); whole floats made integers where an op's parameter holds integers (:func:`as_whole`);
and the budget that bounds how many values one check may copy out of parameters (:class:`ValueBudget`).

Everything here returns reasons rather than raising; the checker (:mod:`hndl._check`) reports them.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ._dims import MAX_DIM
from ._graph import Node
from ._hints import EXPRESSION_HINT, EXPRESSIONS_DOC
from ._param_expressions import PREFIX, Expression, ExpressionError, is_number, is_reference
from .naming import excerpt, suggestion

__all__ = [
    "MAX_BOUND_VALUES",
    "MAX_DEPTH",
    "UNKNOWN_SIZE_HINT",
    "WHOLE_HINT",
    "WHOLE_PARAM_TYPES",
    "ValueBudget",
    "as_whole",
    "bind_node",
    "compute_params",
    "expanded_size",
    "resolve",
    "whole_keys",
]

#: The most values graph parameters may expand to in one check: every value a reference is replaced by and
#: every value copied into a repetition's parameters, counted (lists and mappings as one each, plus what they
#: hold) before it is copied. A reference to a list that refers to a list... doubles the count per level, so a
#: spec of a few lines could otherwise ask for billions of values.
MAX_BOUND_VALUES = 100_000


class ValueBudget:
    """What one check may still copy out of graph parameters (:data:`MAX_BOUND_VALUES` values in all)."""

    def __init__(self, limit: int = MAX_BOUND_VALUES) -> None:
        self.limit = limit
        self.spent = 0

    @property
    def exhausted(self) -> bool:
        return self.spent > self.limit

    def spend(self, value: Any, times: int = 1) -> str:
        """Count ``times`` copies of ``value``; ``""`` while within the budget, else the reason (nothing copied)."""
        self.spent += times * expanded_size(value, self.limit + 1)
        if self.spent > self.limit:
            return f"graph parameters expand to more than {self.limit:,} values"
        return ""


def expanded_size(value: Any, cap: int) -> int:
    """How many values a copy of ``value`` holds, itself included, counting a list or mapping that appears
    twice twice (as a copy made for each use does); counted without expanding, and at most about ``cap``."""
    sizes: dict[int, int] = {}

    def size(v: Any, depth: int) -> int:
        if depth >= MAX_DEPTH or not isinstance(v, (Mapping, list, tuple)):
            return 1
        if id(v) not in sizes:
            sizes[id(v)] = 1  # while counting it: a container inside itself (built in Python) counts once
            total = 1
            for item in v.values() if isinstance(v, Mapping) else v:
                total += size(item, depth + 1)
                if total > cap:
                    break
            sizes[id(v)] = total
        return sizes[id(v)]

    return size(value, 0)


def _wrong_type(name: str, value: Any, uses: Any) -> str:
    """Why the parameter ``name`` cannot be ``value`` where an expression uses it as ``uses`` say
    (:attr:`Expression.uses`), or ``""``: named before anything is computed, where the message can say which."""
    if "number" in uses and not is_number(value):
        return f"computes with {name!r}, which is {excerpt(value)}, not a number"
    if "bool" in uses and not isinstance(value, bool):
        return f"tests {name!r}, which is {excerpt(value)}, not true or false"
    if not is_number(value) and not isinstance(value, bool):
        return f"compares {name!r}, which is {excerpt(value)}, not a number or a bool"
    return ""


#: The hint of a reference to a symbol of an input's shape that is no number where the layers are built.
UNKNOWN_SIZE_HINT = (
    "a layer's sizes are fixed when it is built: give that dim a size in the input's contract (or where the "
    "graph is used), or pass the size as a graph parameter"
)


def resolve(
    value: str,
    bindings: Mapping[str, Any],
    budget: ValueBudget | None = None,
    unknown: Mapping[str, str] | None = None,
) -> tuple[Any, str, str | None]:
    """The value of the reference ``value`` under ``bindings``: ``(value, "", None)`` or ``(None, reason, hint)``.

    ``"$name"`` is the parameter's value: a copy, counted against ``budget`` first when one is given; without a
    budget it is returned as it is (for callers that only read it). Anything else after the ``$`` is an
    expression over number parameters (:class:`Expression`). ``unknown`` names symbols that are known but are
    no number here (a size of an input's shape only known at run time), each with why, for the message.
    """
    text = value[len(PREFIX) :].strip()
    if text in bindings:
        if budget is None:
            return bindings[text], "", None
        reason = budget.spend(bindings[text])
        if reason:
            return None, reason, "a parameter that refers to a list of references to itself grows with every level"
        return copy.deepcopy(bindings[text]), "", None
    try:
        expr = Expression(text)
    except ExpressionError as exc:
        reason = f"{excerpt(value)} is neither a graph parameter nor an expression over them"
        return None, reason + (f" ({exc})" if str(exc) else ""), EXPRESSION_HINT
    missing = [n for n in expr.names if n not in bindings]
    if missing and unknown and missing[0] in unknown:
        return None, f"{excerpt(value)} names {missing[0]!r}, which {unknown[missing[0]]}", UNKNOWN_SIZE_HINT
    if missing:
        declared = ", ".join(bindings) or "none"
        hint = suggestion(missing[0], bindings) or f"declared parameters: {declared}"
        return None, f"{excerpt(value)} names {missing[0]!r}, which is not a parameter of this graph", hint
    for name in expr.names:
        reason = _wrong_type(name, bindings[name], expr.uses.get(name, ()))
        if reason:
            return None, f"{excerpt(value)} {reason}", None
    try:
        return expr.evaluate(bindings), "", None
    except ExpressionError as exc:
        return None, f"{excerpt(value)}: {exc}", None


#: How deep :func:`bind_node` looks for references inside a parameter's value: a spec's values nest at most
#: this deep (its reader's bound); a value built in Python that nests deeper is left as it is below this level.
MAX_DEPTH = 64


#: The parameter types (:attr:`hndl.ParamType.name`) whose values are integers (a list of them, a shape): a
#: reference there that computes to a whole float takes its integer (``"$d * 0.25"`` with ``d: 64`` is 16).
WHOLE_PARAM_TYPES = frozenset({"int", "ints", "int_or_pair", "shape"})


def whole_keys(opdef: Any) -> frozenset[str]:
    """The parameters of ``opdef`` (an :class:`~hndl.OpDef`, or ``None``) that hold integers
    (:data:`WHOLE_PARAM_TYPES`): where :func:`bind_node` makes a whole float computed by a reference an integer."""
    if opdef is None or not opdef.params:
        return _NO_KEYS
    return frozenset(p.name for p in opdef.params if p.type.name in WHOLE_PARAM_TYPES)


_NO_KEYS: frozenset[str] = frozenset()


#: How a fraction in an integer position is made whole, as the hint says it.
WHOLE_HINT = (
    "say how to make it whole: int(x) truncates toward zero, floor(x), ceil(x) and round(x) round "
    f"(see {EXPRESSIONS_DOC})"
)


def as_whole(value: Any) -> tuple[Any, str]:
    """``value`` with each float in it (itself, or an item of a list at any depth) that is a whole number made an
    integer (``4.0`` is 4): ``(value, "")``, or ``(value, reason)`` naming the first that is not (``4.5``)."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) <= MAX_DIM:
            return int(value), ""
        return value, f"{value!r} is not a whole number"
    if isinstance(value, (list, tuple)) and any(isinstance(v, (float, list, tuple)) for v in value):
        items = []
        for item in value:
            item, reason = as_whole(item)
            if reason:
                return value, reason
            items.append(item)
        return (items if isinstance(value, list) else tuple(items)), ""
    return value, ""


class _Binder:
    """Replaces references inside values (at any depth of lists and mappings) by their values under
    ``bindings``, collecting the problems as ``(key, reason, hint)``; see :func:`bind_node`."""

    def __init__(
        self,
        bindings: Mapping[str, Any],
        budget: ValueBudget,
        unknown: Mapping[str, str] | None = None,
        whole: frozenset[str] = frozenset(),
    ) -> None:
        self.bindings = bindings
        self.budget = budget
        self.unknown = unknown
        self.whole = whole
        self.holds = _ReferenceFinder()
        # id of a container -> its bound copy: a value shared or nested in itself is walked once
        self.bound: dict[int, Any] = {}
        self.problems: list[tuple[str, str, str | None]] = []

    def __call__(self, key: str, value: Any) -> Any:
        return self._value(key, key, value, 0)

    def _value(self, key: str, place: str, value: Any, depth: int) -> Any:
        if self.budget.exhausted:  # reported once, where it ran out; the rest stays as written
            return value
        if is_reference(value):
            resolved, reason, hint = resolve(value, self.bindings, self.budget, self.unknown)
            if not reason and key in self.whole:
                resolved, why = as_whole(resolved)
                if why:
                    reason = f"{excerpt(value)} gives {excerpt(resolved)}, and {why} ({key!r} takes integers)"
                    hint = WHOLE_HINT
            if reason:
                self.problems.append((key, f"{place}: {reason}" if place != key else reason, hint))
                return value
            return resolved
        if depth >= MAX_DEPTH or not self.holds(value, depth) or id(value) in self.bound:
            return self.bound.get(id(value), value)
        self.bound[id(value)] = value  # while walking it: a container inside itself stays as written
        if isinstance(value, Mapping):
            out: Any = {k: self._value(key, _item_place(place, k), v, depth + 1) for k, v in value.items()}
        else:
            items = [self._value(key, f"{place}[{i}]", v, depth + 1) for i, v in enumerate(value)]
            out = items if isinstance(value, list) else tuple(items)
        self.bound[id(value)] = out
        return out


def bind_node(
    node: Node,
    bindings: Mapping[str, Any],
    budget: ValueBudget | None = None,
    unknown: Mapping[str, str] | None = None,
    whole: frozenset[str] = frozenset(),
) -> tuple[Node, list[tuple[str, str, str | None]]]:
    """``node`` with every reference in its parameters, ``when`` and its tie's ``when`` replaced by its value.

    A reference may be a whole parameter value or sit at any depth inside lists and mappings
    (``shape: [1, "$tokens+1", $dim]``); containers that hold no reference are kept as they are. Each value a
    reference brings in is a copy, counted against ``budget`` (a new one per call when none is given) before
    it is made. ``unknown`` is as for :func:`resolve`. In the parameters named by ``whole`` (those that hold
    integers, :func:`whole_keys`) a float a reference gives must be a whole number and becomes an integer
    (:func:`as_whole`): ``out_features: "$d * 0.25"`` is 16 for ``d: 64``, and a problem for ``d: 66``.

    Returns:
        The bound node (``node`` itself when it holds no reference) and the problems as
        ``(key, reason, hint)``, ``key`` being the node key whose value holds the bad reference (a reason
        about one inside a list or mapping starts with its place: ``shape[1]: ...``); on a problem the
        reference stays as written.
    """
    if node.when is True and not node.tie and not node.params:
        return node, []  # nothing that could hold a reference (most nodes of a large graph: activations)
    binder = _Binder(bindings, budget if budget is not None else ValueBudget(), unknown, whole)
    # A tie's own `when` (SPEC 1.7) is bound here too; its targets are node names, never references.
    tie_when = node.tie.get("when", True) if isinstance(node.tie, Mapping) else True
    if (
        not binder.holds(node.when, 0)
        and not binder.holds(tie_when, 0)
        and not any(binder.holds(v, 0) for v in node.params.values())
    ):
        return node, binder.problems
    params = {key: binder(key, value) for key, value in node.params.items()}
    when = binder("when", node.when)
    tie = node.tie
    if binder.holds(tie_when, 0):
        tie = {**node.tie, "when": binder("tie", tie_when)}
    return replace(node, params=params, when=when, tie=tie), binder.problems


def compute_params(
    params: Mapping[str, Any], budget: ValueBudget | None = None
) -> tuple[dict[str, Any], list[tuple[str, str, str | None]]]:
    """A graph's parameter values with each that is (or holds) a reference computed from the others:
    ``{d: 64, heads: 8, head_dim: "$d // heads", scale: "$head_dim ** -0.5"}`` gives ``head_dim: 8`` and
    ``scale: 0.3535...``. A value may use any parameter computed or not, in any order of writing: they are
    computed in the order their references need (each once), and references that go round in a cycle are
    refused. Values without a reference are kept as they are (not copied); a copy a ``$name`` brings in is
    counted against ``budget`` (a new one when none is given).

    Returns:
        ``(values, problems)``: ``problems`` as ``(parameter, reason, hint)``; a parameter that could not be
        computed (or that uses one that could not) is left out of ``values`` and is reported once, where it
        went wrong.
    """
    binder = _Binder(params, budget if budget is not None else ValueBudget())
    found = {name: _references(value, params, binder.holds) for name, value in params.items()}
    needs = {name: deps for name, deps in found.items() if deps is not None}
    if not needs:
        return dict(params), []
    values = dict(params)
    binder.bindings = values
    failed: set[str] = set()
    state: dict[str, int] = {}  # 1 while its references are computed, 2 once done
    for start in needs:
        # Depth-first without recursion (a chain of thousands of parameters must not exhaust the stack).
        stack: list[tuple[str, list[str]]] = [(start, sorted(needs[start]))] if start not in state else []
        if stack:
            state[start] = 1
        while stack:
            name, todo = stack[-1]
            if todo:
                dep = todo.pop()
                if state.get(dep) == 1:
                    cycle = [n for n, _ in stack]
                    cycle = [*cycle[cycle.index(dep) :], dep]
                    binder.problems.append(
                        (
                            dep,
                            "graph parameters refer to each other in a cycle: " + " -> ".join(cycle),
                            "each parameter may use only parameters that do not use it in turn: give one of them a "
                            "value",
                        )
                    )
                    failed.update(cycle)
                elif dep not in state and dep in needs:
                    state[dep] = 1
                    stack.append((dep, sorted(needs[dep])))
                continue
            stack.pop()
            state[name] = 2
            if name in failed or needs[name] & failed:
                failed.add(name)
                values.pop(name, None)
                continue
            before = len(binder.problems)
            value = binder(name, params[name])
            if len(binder.problems) > before:
                failed.add(name)
                values.pop(name, None)
            else:
                values[name] = value
    for name in failed:
        values.pop(name, None)
    return values, binder.problems


def _references(value: Any, params: Mapping[str, Any], holds: _ReferenceFinder) -> set[str] | None:
    """The parameters of ``params`` that the references in ``value`` use (``None`` when it holds none); a
    reference that does not parse uses none (computing it says why)."""
    if not holds(value, 0):
        return None
    names: set[str] = set()
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if is_reference(item):
            text = item[len(PREFIX) :].strip()
            if text in params:
                names.add(text)
                continue
            try:
                names.update(n for n in Expression(text).names if n in params)
            except ExpressionError:
                pass
        elif depth < MAX_DEPTH and isinstance(item, (Mapping, list, tuple)) and id(item) not in seen:
            seen.add(id(item))
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, Mapping) else item))
    return names


#: Types that never hold a reference (exactly these types; a subclass goes the long way).
_PLAIN = frozenset({int, float, bool, type(None)})


class _ReferenceFinder:
    """Whether a value is a reference or holds one within :data:`MAX_DEPTH` levels of lists and mappings; each
    container is looked into once (a value built in Python may share or contain itself)."""

    def __init__(self) -> None:
        self.known: dict[int, bool] = {}

    def __call__(self, value: Any, depth: int) -> bool:
        kind = type(value)
        if kind is str:
            return value.startswith(PREFIX)
        if kind in _PLAIN:  # most values: decided without the abstract Mapping's isinstance check
            return False
        if is_reference(value):
            return True
        if depth >= MAX_DEPTH or not isinstance(value, (Mapping, list, tuple)):
            return False
        if id(value) not in self.known:
            self.known[id(value)] = False  # while looking: a container inside itself adds nothing
            children = value.values() if isinstance(value, Mapping) else value
            self.known[id(value)] = any(self(v, depth + 1) for v in children)
        return self.known[id(value)]


def _item_place(place: str, key: Any) -> str:
    """Where a mapping value sits, for messages: ``params.width``, or ``kwargs['a b']`` for an odd key."""
    if isinstance(key, str) and key.isidentifier():
        return f"{place}.{key}"
    return f"{place}[{excerpt(key)}]"
