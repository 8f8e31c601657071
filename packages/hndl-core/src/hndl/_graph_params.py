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
a bool parameter. An input shape names an integer parameter as a dim (``[B, width, H, W]``), at the top level
as in a subgraph.

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
from ._hints import EXPRESSION_HINT, EXPRESSIONS_DOC
from .naming import excerpt, suggestion

__all__ = [
    "FUNCTIONS",
    "MAX_BOUND_VALUES",
    "PREFIX",
    "REPETITION",
    "UNKNOWN_SIZE_HINT",
    "WHOLE_PARAM_TYPES",
    "ValueBudget",
    "as_whole",
    "bind_contract",
    "bind_node",
    "compute_params",
    "is_reference",
    "repetition_params",
    "repetition_uses",
    "seed_env",
    "size_parameters",
    "whole_keys",
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
    expression over number parameters (:class:`_Expression`). ``unknown`` names symbols that are known but are
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
        expr = _Expression(text)
    except _ExpressionError as exc:
        reason = f"{excerpt(value)} is neither a graph parameter nor an expression over them"
        return None, reason + (f" ({exc})" if str(exc) else ""), EXPRESSION_HINT
    missing = [n for n in expr.names if n not in bindings]
    if missing and unknown and missing[0] in unknown:
        return None, f"{excerpt(value)} names {missing[0]!r}, which {unknown[missing[0]]}", UNKNOWN_SIZE_HINT
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
    r"\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>\$?[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|//|[-+*/%(),]))"
)


def _sqrt(x: Any) -> float:
    if x < 0:
        raise _ExpressionError(f"sqrt() of a negative number ({excerpt(x)}) is not a real number")
    return math.sqrt(x)


def _pow(x: Any, y: Any) -> float:
    if x == 0 and y < 0:
        raise _ExpressionError(f"0 to a negative power ({excerpt(y)}) divides by zero")
    if x < 0 and not float(y).is_integer():
        raise _ExpressionError(f"a negative number ({excerpt(x)}) to a fractional power is not a real number")
    try:
        return math.pow(x, y)
    except OverflowError:
        raise _ExpressionError("a value is too large for a float") from None


#: Functions an expression may call, each with Python's meaning: ``floor``, ``ceil``, ``round(x)`` and ``int``
#: (which truncates toward zero) give integers; ``sqrt`` is ``math.sqrt`` and ``pow(x, y)`` is ``math.pow``,
#: floats both (``pow(d, -0.5)`` is Python's ``d ** -0.5``, bit for bit).
FUNCTIONS: dict[str, Any] = {
    "min": min,
    "max": max,
    "floor": math.floor,
    "ceil": math.ceil,
    "round": round,
    "int": int,
    "sqrt": _sqrt,
    "pow": _pow,
}

#: How many arguments each function takes: ``(fewest, most)``.
_ARITY: dict[str, tuple[int, int]] = {
    "min": (2, 64),
    "max": (2, 64),
    "floor": (1, 1),
    "ceil": (1, 1),
    "round": (1, 2),
    "int": (1, 1),
    "sqrt": (1, 1),
    "pow": (2, 2),
}

#: ``x ** y`` with integers is computed only when the result can stay within :data:`~hndl._dims.MAX_DIM`
#: (2**63-1): ``|x| ** y`` is at least ``2 ** ((bits(|x|) - 1) * y)``, so a larger product of the two is refused
#: before Python is asked for a number of billions of digits (``10 ** 10 ** 10``).
_POWER_BITS = 64


class _Expression:
    """A parsed expression over graph parameters: numbers (``4``, ``0.25``, ``1e-6``), parameter names
    (optionally ``$``-prefixed: ``$rate * $k / ($n - 1)`` and ``rate*k/(n-1)`` are one expression),
    ``+ - * / // % **``, unary ``-``/``+``, parentheses and the :data:`FUNCTIONS`. Precedence is Python's:
    ``**`` binds tightest and groups from the right, and binds tighter than a unary sign on its left
    (``-2 ** 2`` is -4, ``2 ** -1`` is 0.5); then ``* / // %``, then ``+ -``, each grouping from the left.

    It computes as Python does: integers stay integers (``//`` and ``%`` floor; ``**`` with an exponent from 0
    up), ``/`` divides to a float, a float operand makes a float. Nothing is ``eval``-ed; the text is at most
    :data:`~hndl._dims.MAX_EXPR_CHARS` characters and nests at most :data:`~hndl._dims.MAX_NESTING` levels,
    every integer stays within :data:`~hndl._dims.MAX_DIM` (checked before a power is computed) and every
    float is finite; what Python would make complex (``(-8) ** 0.5``) is refused.
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
            return self._power()
        finally:
            self.depth -= 1

    def _power(self) -> Any:
        # Python's grammar: power ::= primary ["**" u_expr], so the exponent may carry its own sign and a
        # chain groups from the right (2 ** 3 ** 2 is 2 ** 9).
        base = self._atom()
        if self._peek() == "**":
            self._take()
            return ("**", base, self._unary())
        return base

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
                fewest, most = _ARITY[name]
                if not fewest <= len(args) <= most:
                    wanted = str(fewest) if fewest == most else f"{fewest} to {most}"
                    raise _ExpressionError(
                        f"{name}() takes {wanted} argument{'s' if most > 1 else ''}, got {len(args)}"
                    )
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
            return _checked(node[1])
        if kind == "name":
            return bindings[node[1]]
        if kind == "neg":
            return _checked(-self._value(node[1], bindings))
        if kind == "call":
            args = [self._value(a, bindings) for a in node[2]]
            try:
                return _checked(FUNCTIONS[node[1]](*args))
            except (TypeError, ValueError, OverflowError) as exc:
                if isinstance(exc, _ExpressionError):
                    raise
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
            if kind == "**":
                return _checked(_power(left, right))
            return _checked(left % right)
        except ZeroDivisionError:
            raise _ExpressionError("division by zero") from None
        except OverflowError:
            raise _ExpressionError("a value is too large for a float") from None


def _power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` as Python computes it, refused where Python's answer would be no finite real number
    within the limits, and before computing an integer power that would be."""
    if _is_int(base) and _is_int(exponent) and exponent >= 0:
        if abs(base) > 1 and (abs(base).bit_length() - 1) * exponent >= _POWER_BITS:
            raise _ExpressionError("a value grows beyond the limit of 2**63-1")
        return base**exponent
    if base == 0 and exponent < 0:
        raise _ExpressionError(f"0 to a negative power ({excerpt(exponent)}) divides by zero")
    if base < 0 and not float(exponent).is_integer():
        raise _ExpressionError(f"a negative number ({excerpt(base)}) to a fractional power is not a real number")
    return base**exponent


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
                names.update(n for n in _Expression(text).names if n in params)
            except _ExpressionError:
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
        if _is_int(value):
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
    sizes = {k: v for k, v in dims.items() if k in size_parameters(graph) and _is_int(v) and v >= 1}
    if not sizes:
        return graph
    configured = copy.copy(graph)
    configured.params = {**graph.params, **sizes}
    return configured


# --- hints for a number written where an expression was meant (the grammar's own names) ---------------------

#: The parameter types (:attr:`hndl.ParamType.name`) that hold numbers: a string refused by one of them may be an
#: expression written without its ``$``, or one computed from a parameter's value that is itself an expression.
NUMERIC_PARAM_TYPES = frozenset({"int", "float", "ints", "numbers", "int_or_pair", "shape"})

_ARITHMETIC = re.compile(r"^[\s\w.$+\-*/%(),]+$")
_OPERATOR = re.compile(r"[+\-*/%(]")


def looks_like_expression(text: str) -> bool:
    """Whether ``text`` reads as arithmetic (``d//2``, ``1/sqrt(64)``, ``$d * 4``): a value someone meant to
    be computed, not a name."""
    text = text.strip()
    if text.startswith("$"):
        return True
    return bool(_ARITHMETIC.match(text) and _OPERATOR.search(text) and re.search(r"\w", text))


def expression_hint(value: Any) -> str | None:
    """The hint for a number parameter given the text ``value`` (or a list holding text): ``None`` unless the
    text reads as an expression (:func:`looks_like_expression`), else how to write it so it is computed."""
    if isinstance(value, str):
        texts = [value]
    elif isinstance(value, (list, tuple)):
        texts = [v for v in value if isinstance(v, str)]
    else:
        return None
    text = next((t.strip() for t in texts if looks_like_expression(t)), None)
    if text is None:
        return None
    if text.startswith("$"):
        return (
            f"{excerpt(text)} was not computed: an expression is computed where it is the whole value of a node's "
            f"parameter, an item of it, or a graph parameter (see {EXPRESSIONS_DOC})"
        )
    unknown = [f for f in re.findall(r"([A-Za-z_]\w*)\s*\(", text) if f not in FUNCTIONS]
    if unknown:
        return (
            f"to compute it, write it as an expression ('$...'); expressions have no {unknown[0]}(): they call "
            f"{', '.join(FUNCTIONS)}; see {EXPRESSIONS_DOC}"
        )
    return f"to compute it, write it as an expression: {excerpt('$' + text)} (see {EXPRESSIONS_DOC})"
