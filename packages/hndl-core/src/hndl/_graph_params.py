"""Graph parameters: a subgraph's declared parameters, the values one use of it passes, and the references
(``"$width"``, ``"$width*4"``) in its nodes that take those values.

A graph declares parameters with defaults (``Graph.params``, a spec graph's ``params:``). A node parameter
written ``"$name"`` takes the parameter's value as it is (any plain value); ``"$expr"`` is an expression over
number parameters (``"$width*4"``, ``"$width//2"``, ``"$rate * $k / ($n - 1)"``) that computes as Python does,
parsed by a small grammar, nothing ``eval``-ed. Each repetition of a subgraph also binds ``repetition``, its
index (0-based), unless the graph declares a parameter of that name. A reference may stand anywhere in a parameter's value: the whole value, an item of a list
(``shape: [1, "$tokens+1", $dim]``, ``kernel_size: [$k, $k]``) or a value inside a mapping (so a ``graph`` node
can pass ``params: {width: $width}`` on to a subgraph of its own), at any depth. A node's ``when`` may be
``"$name"`` of a bool parameter. An input shape names an integer parameter as a dim (``[B, width, H, W]``),
at the top level as in a subgraph.

Everything here returns reasons rather than raising; the checker (:mod:`hndl._check`) reports them.
"""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ._contracts import Contract, ShapePattern
from ._dims import MAX_DIM, MAX_EXPR_CHARS, MAX_NESTING, DimError, format_dim, free_symbols, substitute
from ._graph import Graph, Node
from .naming import excerpt, suggestion

__all__ = [
    "FUNCTIONS",
    "MAX_BOUND_VALUES",
    "PREFIX",
    "REPETITION",
    "ValueBudget",
    "bind_contract",
    "bind_node",
    "is_reference",
    "repetition_params",
    "repetition_uses",
    "seed_env",
    "size_parameters",
    "with_sizes",
]

#: What starts a reference to a graph parameter in a node's parameters.
PREFIX = "$"

#: The parameter each repetition of a subgraph binds to its index (0-based), unless the graph declares one of
#: that name: a drop-path rate that grows with depth is ``p: "$rate * ($first + $repetition) / ($blocks - 1)"``.
REPETITION = "repetition"


def is_reference(value: Any) -> bool:
    """Whether ``value`` is a reference to a graph parameter (a string starting with ``$``)."""
    return isinstance(value, str) and value.startswith(PREFIX)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


def resolve(value: str, bindings: Mapping[str, Any], budget: ValueBudget | None = None) -> tuple[Any, str, str | None]:
    """The value of the reference ``value`` under ``bindings``: ``(value, "", None)`` or ``(None, reason, hint)``.

    ``"$name"`` is the parameter's value: a copy, counted against ``budget`` first when one is given; without a
    budget it is returned as it is (for callers that only read it). Anything else after the ``$`` is an
    expression over number parameters (:class:`_Expression`).
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
        expr = _Expression(text)
    except _ExpressionError as exc:
        reason = f"{excerpt(value)} is neither a graph parameter nor an expression over them"
        return None, reason + (f" ({exc})" if str(exc) else ""), None
    missing = [n for n in expr.names if n not in bindings]
    if missing:
        declared = ", ".join(bindings) or "none"
        hint = suggestion(missing[0], bindings) or f"declared parameters: {declared}"
        return None, f"{excerpt(value)} names {missing[0]!r}, which is not a parameter of this graph", hint
    not_number = [n for n in expr.names if not _is_number(bindings[n])]
    if not_number:
        name = not_number[0]
        return None, f"{excerpt(value)} computes with {name!r}, which is {excerpt(bindings[name])}, not a number", None
    try:
        return expr.evaluate(bindings), "", None
    except _ExpressionError as exc:
        return None, f"{excerpt(value)}: {exc}", None


def _is_number(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, float)


class _ExpressionError(ValueError):
    pass


_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>\$?[A-Za-z_][A-Za-z0-9_]*)|(?P<op>//|[-+*/%(),]))"
)
#: Functions an expression may call, each with Python's meaning (``floor``, ``ceil``, ``round`` give integers;
#: ``pow(x, y)`` is ``math.pow``, a float: ``pow(d, -0.5)`` is Python's ``d ** -0.5``, bit for bit).
FUNCTIONS: dict[str, Any] = {
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": round,
    "pow": math.pow,
}


class _Expression:
    """A parsed expression over graph parameters: numbers, parameter names (optionally ``$``-prefixed:
    ``$rate * $k / ($n - 1)`` and ``rate*k/(n-1)`` are one expression), ``+ - * / // %``, unary minus,
    parentheses and the :data:`FUNCTIONS`. It computes as Python does: integers stay integers (``//`` and
    ``%`` floor), ``/`` divides to a float, a float operand makes a float. Nothing is ``eval``-ed; the text
    is at most :data:`~hndl._dims.MAX_EXPR_CHARS` characters and nests at most
    :data:`~hndl._dims.MAX_NESTING` levels, and every integer stays within :data:`~hndl._dims.MAX_DIM`.
    """

    def __init__(self, text: str) -> None:
        if len(text) > MAX_EXPR_CHARS:
            raise _ExpressionError(f"it is longer than {MAX_EXPR_CHARS:,} characters")
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        stripped = text.rstrip()
        while pos < len(stripped):
            m = _TOKEN.match(stripped, pos)
            if m is None or m.end() == pos:
                raise _ExpressionError(f"unexpected {excerpt(stripped[pos:].strip()[:10])}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        if not self.tokens:
            raise _ExpressionError("")
        self.i = 0
        self.depth = 0
        self.names: list[str] = []
        self.tree = self._sum()
        if self.i != len(self.tokens):
            raise _ExpressionError(f"unexpected {self.tokens[self.i][1]!r}")

    # Parsing builds a small tree of tuples: ("num", v), ("name", n), (op, left, right), ("neg", x),
    # ("call", f, [args]).
    def _peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            raise _ExpressionError("it ends too early")
        token = self.tokens[self.i]
        self.i += 1
        return token

    def _sum(self) -> Any:
        node = self._product()
        while self._peek() in ("+", "-"):
            node = (self._take()[1], node, self._product())
        return node

    def _product(self) -> Any:
        node = self._unary()
        while self._peek() in ("*", "/", "//", "%"):
            node = (self._take()[1], node, self._unary())
        return node

    def _unary(self) -> Any:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _ExpressionError(f"it nests more than {MAX_NESTING} levels deep")
        try:
            if self._peek() in ("-", "+"):
                sign = self._take()[1]
                inner = self._unary()
                return ("neg", inner) if sign == "-" else inner
            return self._atom()
        finally:
            self.depth -= 1

    def _atom(self) -> Any:
        kind, text = self._take()
        if kind == "number":
            if "." in text or "e" in text or "E" in text:
                return ("num", float(text))
            if len(text) > 19:
                raise _ExpressionError(f"a number of {len(text):,} digits is beyond the limit of 2**63-1")
            return ("num", int(text))
        if kind == "name":
            name = text.lstrip(PREFIX)
            if self._peek() == "(" and text == name and name in FUNCTIONS:
                self._take()
                args = [self._sum()]
                while self._peek() == ",":
                    self._take()
                    args.append(self._sum())
                if self._take()[1] != ")":
                    raise _ExpressionError("missing ')'")
                return ("call", name, args)
            self.names.append(name)
            return ("name", name)
        if text == "(":
            node = self._sum()
            if self._take()[1] != ")":
                raise _ExpressionError("missing ')'")
            return node
        raise _ExpressionError(f"unexpected {text!r}")

    def evaluate(self, bindings: Mapping[str, Any]) -> int | float:
        return self._value(self.tree, bindings)

    def _value(self, node: Any, bindings: Mapping[str, Any]) -> Any:
        kind = node[0]
        if kind == "num":
            return node[1]
        if kind == "name":
            return bindings[node[1]]
        if kind == "neg":
            return _checked(-self._value(node[1], bindings))
        if kind == "call":
            args = [self._value(a, bindings) for a in node[2]]
            try:
                return _checked(FUNCTIONS[node[1]](*args))
            except (TypeError, ValueError, OverflowError) as exc:
                raise _ExpressionError(f"{node[1]}(): {exc}") from None
        left, right = self._value(node[1], bindings), self._value(node[2], bindings)
        try:
            if kind == "+":
                return _checked(left + right)
            if kind == "-":
                return _checked(left - right)
            if kind == "*":
                return _checked(left * right)
            if kind == "/":
                return _checked(left / right)
            if kind == "//":
                return _checked(left // right)
            return _checked(left % right)
        except ZeroDivisionError:
            raise _ExpressionError("division by zero") from None
        except OverflowError:
            raise _ExpressionError("a value is too large for a float") from None


def _checked(value: Any) -> Any:
    """``value`` if it is a number within bounds: an integer within :data:`~hndl._dims.MAX_DIM`, a finite float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _ExpressionError(f"a value is {excerpt(value)}, not a number")
    if isinstance(value, int) and abs(value) > MAX_DIM:
        raise _ExpressionError("a value grows beyond the limit of 2**63-1")
    if isinstance(value, float) and not math.isfinite(value):
        raise _ExpressionError(f"a value is {value}, not a finite number")
    return value


#: How deep :func:`bind_node` looks for references inside a parameter's value: a spec's values nest at most
#: this deep (its reader's bound); a value built in Python that nests deeper is left as it is below this level.
MAX_DEPTH = 64


def bind_node(
    node: Node, bindings: Mapping[str, Any], budget: ValueBudget | None = None
) -> tuple[Node, list[tuple[str, str, str | None]]]:
    """``node`` with every reference in its parameters and ``when`` replaced by its value.

    A reference may be a whole parameter value or sit at any depth inside lists and mappings
    (``shape: [1, "$tokens+1", $dim]``); containers that hold no reference are kept as they are. Each value a
    reference brings in is a copy, counted against ``budget`` (a new one per call when none is given) before
    it is made.

    Returns:
        The bound node (``node`` itself when it holds no reference) and the problems as
        ``(key, reason, hint)``, ``key`` being the node key whose value holds the bad reference (a reason
        about one inside a list or mapping starts with its place: ``shape[1]: ...``); on a problem the
        reference stays as written.
    """
    problems: list[tuple[str, str, str | None]] = []
    budget = budget if budget is not None else ValueBudget()
    holds = _ReferenceFinder()
    bound: dict[int, Any] = {}  # id of a container -> its bound copy: a value shared or nested in itself is walked once

    def value_of(key: str, place: str, value: Any, depth: int) -> Any:
        if budget.exhausted:  # reported once, where it ran out; the rest stays as written
            return value
        if is_reference(value):
            resolved, reason, hint = resolve(value, bindings, budget)
            if reason:
                problems.append((key, f"{place}: {reason}" if place != key else reason, hint))
                return value
            return resolved
        if depth >= MAX_DEPTH or not holds(value, depth) or id(value) in bound:
            return bound.get(id(value), value)
        bound[id(value)] = value  # while walking it: a container inside itself stays as written
        if isinstance(value, Mapping):
            out: Any = {k: value_of(key, _item_place(place, k), v, depth + 1) for k, v in value.items()}
        else:
            items = [value_of(key, f"{place}[{i}]", v, depth + 1) for i, v in enumerate(value)]
            out = items if isinstance(value, list) else tuple(items)
        bound[id(value)] = out
        return out

    if not holds(node.when, 0) and not any(holds(v, 0) for v in node.params.values()):
        return node, problems
    params = {key: value_of(key, key, value, 0) for key, value in node.params.items()}
    when = value_of("when", "when", node.when, 0)
    return replace(node, params=params, when=when), problems


class _ReferenceFinder:
    """Whether a value is a reference or holds one within :data:`MAX_DEPTH` levels of lists and mappings; each
    container is looked into once (a value built in Python may share or contain itself)."""

    def __init__(self) -> None:
        self.known: dict[int, bool] = {}

    def __call__(self, value: Any, depth: int) -> bool:
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
    none is given) before any is made.

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
        out.append({**implicit, **copy.deepcopy(sub.params), **copy.deepcopy(dict(values))})
    return out, "", None


def bind_contract(contract: Contract, bindings: Mapping[str, Any]) -> tuple[Contract, str]:
    """``contract`` with each dim that names an integer parameter replaced by its value (``[B, 3, size, size]``
    with ``size: 64`` is ``[B, 3, 64, 64]``; ``[B, width*4]`` is computed), so the top level's inputs follow the
    graph's configuration as a subgraph's do.

    Returns:
        ``(bound contract, "")`` (``contract`` itself when no dim names a parameter), or ``(contract, reason)``
        when a dim comes out negative.
    """
    env = seed_env(bindings)
    pattern = contract.shape
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
    """The integer parameters, as a shape-matching environment: a dim that names one must equal its value."""
    return {name: value for name, value in bindings.items() if _is_int(value)}


def size_parameters(graph: Graph) -> dict[str, int]:
    """The integer parameters of ``graph`` that its input shapes name as dims, with their values: sizes the
    configuration fixes (``H`` and ``W`` of ``[B, 3, H, W]`` with ``params: {H: 224, W: 224}``), which a summary
    or a drawing is given as it is given a symbol's (SPEC 8.5.4)."""
    named: set[str] = set()
    for spec in graph.inputs.values():
        for d in spec.contract.shape.dims:
            if d is not None:
                named |= free_symbols(d)
    return {name: value for name, value in graph.params.items() if name in named and _is_int(value)}


def with_sizes(graph: Graph, dims: Mapping[str, Any]) -> Graph:
    """``graph`` configured by the ``dims`` that name its size parameters (:func:`size_parameters`). The graph
    itself is left as it is: when a size is given, the result is a copy whose ``params`` has it (the nodes are
    shared; checking and building never change them)."""
    sizes = {k: v for k, v in dims.items() if k in size_parameters(graph) and _is_int(v) and v >= 1}
    if not sizes:
        return graph
    configured = copy.copy(graph)
    configured.params = {**graph.params, **sizes}
    return configured
