"""The language of graph-parameter expressions (``"$width*4"``, ``"$hidden_size ** 0.5"``, ``"$max(8, c // 2)"``):
its tokens, its grammar (:class:`Expression`, which parses the text into a small tree and computes it as Python
would), the functions it may call, and the hint for a number written where an expression was meant.

Nothing is ``eval``-ed: a grammar reads the text within fixed bounds (:data:`~hndl._dims.MAX_EXPR_CHARS`
characters, :data:`~hndl._dims.MAX_NESTING` levels) and every value stays within
:data:`~hndl._dims.MAX_DIM` and finite. Binding references to values is :mod:`hndl._param_binding`'s job.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ._dims import MAX_DIM, MAX_EXPR_CHARS, MAX_NESTING
from ._hints import EXPRESSIONS_DOC
from .naming import excerpt

__all__ = [
    "FUNCTIONS",
    "NUMERIC_PARAM_TYPES",
    "PREFIX",
    "Expression",
    "ExpressionError",
    "expression_hint",
    "is_int",
    "is_number",
    "is_reference",
    "looks_like_expression",
]

#: What starts a reference to a graph parameter in a node's parameters.
PREFIX = "$"


def is_reference(value: Any) -> bool:
    """Whether ``value`` is a reference to a graph parameter (a string starting with ``$``)."""
    return isinstance(value, str) and value.startswith(PREFIX)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, float)


class ExpressionError(ValueError):
    pass


_TOKEN = re.compile(
    r"\s*(?:(?P<number>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>\$?[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|//|==|!=|<=|>=|[-+*/%(),<>]))"
)

#: The words of the logical operators, as Python spells them: bare, they are operators; ``$not`` is a name.
_LOGIC = frozenset({"not", "and", "or"})

#: The comparisons, each with Python's meaning; a chain compares each neighbouring pair (``0 < a <= b``).
_COMPARE: dict[str, Any] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def _sqrt(x: Any) -> float:
    if x < 0:
        raise ExpressionError(f"sqrt() of a negative number ({excerpt(x)}) is not a real number")
    return math.sqrt(x)


def _pow(x: Any, y: Any) -> float:
    if x == 0 and y < 0:
        raise ExpressionError(f"0 to a negative power ({excerpt(y)}) divides by zero")
    if x < 0 and not float(y).is_integer():
        raise ExpressionError(f"a negative number ({excerpt(x)}) to a fractional power is not a real number")
    try:
        return math.pow(x, y)
    except OverflowError:
        raise ExpressionError("a value is too large for a float") from None


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


class Expression:
    """A parsed expression over graph parameters: numbers (``4``, ``0.25``, ``1e-6``), parameter names
    (optionally ``$``-prefixed: ``$rate * $k / ($n - 1)`` and ``rate*k/(n-1)`` are one expression),
    ``+ - * / // % **``, unary ``-``/``+``, parentheses and the :data:`FUNCTIONS`; the comparisons
    ``== != < <= > >=`` and the logical ``not``, ``and``, ``or`` (``not use_parallel_residual``,
    ``depth > 12 and not shared``). Precedence is Python's: ``**`` binds tightest and groups from the right, and
    binds tighter than a unary sign on its left (``-2 ** 2`` is -4, ``2 ** -1`` is 0.5); then ``* / // %``,
    then ``+ -``, each grouping from the left; then the comparisons, which chain (``0 < a <= b`` is
    ``0 < a and a <= b``); then ``not``, ``and``, ``or``, loosest last.

    It computes as Python does: integers stay integers (``//`` and ``%`` floor; ``**`` with an exponent from 0
    up), ``/`` divides to a float, a float operand makes a float; a comparison gives a bool, and ``and``/``or``
    skip their right side when the left decides (``False and x`` does not compute ``x``). Types are held apart
    where Python would mix them: arithmetic and ``< <= > >=`` take numbers, ``not``/``and``/``or`` take bools,
    ``==``/``!=`` compare two numbers or two bools (a bool is no number here, so ``flag + 1`` is refused, not
    2). :attr:`uses` says how each name is used, so a caller can name the parameter of the wrong type before
    computing. Nothing is ``eval``-ed; the text is at most
    :data:`~hndl._dims.MAX_EXPR_CHARS` characters and nests at most :data:`~hndl._dims.MAX_NESTING` levels,
    every integer stays within :data:`~hndl._dims.MAX_DIM` (checked before a power is computed) and every
    float is finite; what Python would make complex (``(-8) ** 0.5``) is refused.
    """

    def __init__(self, text: str) -> None:
        if len(text) > MAX_EXPR_CHARS:
            raise ExpressionError(f"it is longer than {MAX_EXPR_CHARS:,} characters")
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        stripped = text.rstrip()
        while pos < len(stripped):
            m = _TOKEN.match(stripped, pos)
            if m is None or m.end() == pos:
                raise ExpressionError(f"unexpected {excerpt(stripped[pos:].strip()[:10])}")
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind)))
            pos = m.end()
        if not self.tokens:
            raise ExpressionError("")
        self.i = 0
        self.depth = 0
        self.names: list[str] = []
        #: How each name is used where it stands as an operand: "number" (arithmetic, a function's argument,
        #: an order comparison) or "bool" (``not``, ``and``, ``or``); a name only compared with ``==``/``!=``
        #: or standing alone has no entry.
        self.uses: dict[str, set[str]] = {}
        self.tree = self._disjunction()
        if self.i != len(self.tokens):
            raise ExpressionError(f"unexpected {self.tokens[self.i][1]!r}")

    # Parsing builds a small tree of tuples: ("num", v), ("name", n), (op, left, right), ("neg", x),
    # ("call", f, [args]), ("not", x), ("and" | "or", [operands]), ("compare", [ops], [operands]).
    def _use(self, node: Any, how: str) -> Any:
        if node[0] == "name":
            self.uses.setdefault(node[1], set()).add(how)
        return node

    def _peek_operator(self) -> str | None:
        """The next token's text when it is an operator (a bare logical word included), else ``None``: a
        ``$``-prefixed ``$and`` is a name."""
        if self.i >= len(self.tokens):
            return None
        kind, text = self.tokens[self.i]
        return text if kind == "op" or text in _LOGIC else None

    def _disjunction(self) -> Any:
        operands = [self._conjunction()]
        while self._peek_operator() == "or":
            self._take()
            operands.append(self._conjunction())
        return ("or", [self._use(o, "bool") for o in operands]) if len(operands) > 1 else operands[0]

    def _conjunction(self) -> Any:
        operands = [self._inversion()]
        while self._peek_operator() == "and":
            self._take()
            operands.append(self._inversion())
        return ("and", [self._use(o, "bool") for o in operands]) if len(operands) > 1 else operands[0]

    def _inversion(self) -> Any:
        if self._peek_operator() != "not":
            return self._comparison()
        self.depth += 1  # `not not ... x` recurses as parentheses do
        if self.depth > MAX_NESTING:
            raise ExpressionError(f"it nests more than {MAX_NESTING} levels deep")
        try:
            self._take()
            return ("not", self._use(self._inversion(), "bool"))
        finally:
            self.depth -= 1

    def _comparison(self) -> Any:
        operands = [self._sum()]
        ops: list[str] = []
        while self._peek_operator() in _COMPARE:
            ops.append(self._take()[1])
            operands.append(self._sum())
        if not ops:
            return operands[0]
        for i, op in enumerate(ops):
            if op not in ("==", "!="):
                self._use(operands[i], "number")
                self._use(operands[i + 1], "number")
        return ("compare", ops, operands)

    def _take(self) -> tuple[str, str]:
        if self.i >= len(self.tokens):
            raise ExpressionError("it ends too early")
        token = self.tokens[self.i]
        self.i += 1
        return token

    def _sum(self) -> Any:
        node = self._product()
        while self._peek_operator() in ("+", "-"):
            op = self._take()[1]
            node = (op, self._use(node, "number"), self._use(self._product(), "number"))
        return node

    def _product(self) -> Any:
        node = self._unary()
        while self._peek_operator() in ("*", "/", "//", "%"):
            op = self._take()[1]
            node = (op, self._use(node, "number"), self._use(self._unary(), "number"))
        return node

    def _unary(self) -> Any:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise ExpressionError(f"it nests more than {MAX_NESTING} levels deep")
        try:
            if self._peek_operator() in ("-", "+"):
                sign = self._take()[1]
                inner = self._use(self._unary(), "number")
                # A unary plus keeps its operand's value, but it is still arithmetic: +flag is refused.
                return ("neg", inner) if sign == "-" else ("pos", inner)
            return self._power()
        finally:
            self.depth -= 1

    def _power(self) -> Any:
        # Python's grammar: power ::= primary ["**" u_expr], so the exponent may carry its own sign and a
        # chain groups from the right (2 ** 3 ** 2 is 2 ** 9).
        base = self._atom()
        if self._peek_operator() == "**":
            self._take()
            return ("**", self._use(base, "number"), self._use(self._unary(), "number"))
        return base

    def _atom(self) -> Any:
        kind, text = self._take()
        if kind == "number":
            if "." in text or "e" in text or "E" in text:
                return ("num", float(text))
            if len(text) > 19:
                raise ExpressionError(f"a number of {len(text):,} digits is beyond the limit of 2**63-1")
            return ("num", int(text))
        if kind == "name" and text in _LOGIC:
            raise ExpressionError(f"unexpected {text!r}")
        if kind == "name":
            name = text.lstrip(PREFIX)
            if self._peek_operator() == "(" and text == name and name in FUNCTIONS:
                self._take()
                args = [self._use(self._disjunction(), "number")]
                while self._peek_operator() == ",":
                    self._take()
                    args.append(self._use(self._disjunction(), "number"))
                if self._take()[1] != ")":
                    raise ExpressionError("missing ')'")
                fewest, most = _ARITY[name]
                if not fewest <= len(args) <= most:
                    wanted = str(fewest) if fewest == most else f"{fewest} to {most}"
                    raise ExpressionError(f"{name}() takes {wanted} argument{'s' if most > 1 else ''}, got {len(args)}")
                return ("call", name, args)
            self.names.append(name)
            return ("name", name)
        if text == "(":
            node = self._disjunction()
            if self._take()[1] != ")":
                raise ExpressionError("missing ')'")
            return node
        raise ExpressionError(f"unexpected {text!r}")

    def evaluate(self, bindings: Mapping[str, Any]) -> int | float | bool:
        return self._value(self.tree, bindings)

    def _value(self, node: Any, bindings: Mapping[str, Any]) -> Any:
        kind = node[0]
        if kind == "num":
            return _checked(node[1])
        if kind == "name":
            return bindings[node[1]]
        if kind in ("not", "and", "or", "compare"):
            return self._logic(node, bindings)
        if kind in ("neg", "pos"):
            inner = _number(self._value(node[1], bindings), "-" if kind == "neg" else "+")
            return _checked(-inner) if kind == "neg" else inner
        if kind == "call":
            args = [_number(self._value(a, bindings), f"{node[1]}()") for a in node[2]]
            try:
                return _checked(FUNCTIONS[node[1]](*args))
            except (TypeError, ValueError, OverflowError) as exc:
                if isinstance(exc, ExpressionError):
                    raise
                raise ExpressionError(f"{node[1]}(): {exc}") from None
        left = _number(self._value(node[1], bindings), kind)
        right = _number(self._value(node[2], bindings), kind)
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
            raise ExpressionError("division by zero") from None
        except OverflowError:
            raise ExpressionError("a value is too large for a float") from None

    def _logic(self, node: Any, bindings: Mapping[str, Any]) -> bool:
        """The value of a ``not``, ``and``, ``or`` or comparison node: a bool, computed left to right and no
        further than Python would (``and``/``or`` and a chain of comparisons stop once the answer is known)."""
        kind = node[0]
        if kind == "not":
            return not _bool(self._value(node[1], bindings), "not")
        if kind in ("and", "or"):
            for operand in node[1]:
                value = _bool(self._value(operand, bindings), kind)
                if value is (kind == "or"):  # True decides an `or`, False an `and`
                    return value
            return kind == "and"
        ops, operands = node[1], node[2]
        left = self._value(operands[0], bindings)
        for op, operand in zip(ops, operands[1:]):
            right = self._value(operand, bindings)
            if not _COMPARE[op](*_comparable(op, left, right)):
                return False
            left = right
        return True


def _number(value: Any, op: str) -> Any:
    """``value``, an operand of the arithmetic ``op``, if it is a number: a bool (what a comparison or a logical
    operator gives) is refused, where Python would count it as 0 or 1."""
    if isinstance(value, bool):
        raise ExpressionError(f"{op!r} takes numbers, got {value} (a comparison's or logical operator's result)")
    return value


def _bool(value: Any, op: str) -> bool:
    """``value``, an operand of ``not``/``and``/``or``, if it is a bool: a number is refused, where Python would
    take any number but 0 as true."""
    if not isinstance(value, bool):
        raise ExpressionError(f"{op!r} takes true or false, got {excerpt(value)}")
    return value


def _comparable(op: str, left: Any, right: Any) -> tuple[Any, Any]:
    """``(left, right)`` if ``op`` may compare them: two numbers, or for ``==``/``!=`` also two bools."""
    if isinstance(left, bool) and isinstance(right, bool):
        if op in ("==", "!="):
            return left, right
        raise ExpressionError(f"{op!r} compares numbers, got {left} and {right}")
    if isinstance(left, bool) or isinstance(right, bool):
        flag, number = (left, right) if isinstance(left, bool) else (right, left)
        raise ExpressionError(f"{op!r} compares {left} with {right}: the bool {flag} with the number {number}")
    return left, right


def _power(base: Any, exponent: Any) -> Any:
    """``base ** exponent`` as Python computes it, refused where Python's answer would be no finite real number
    within the limits, and before computing an integer power that would be."""
    if is_int(base) and is_int(exponent) and exponent >= 0:
        if abs(base) > 1 and (abs(base).bit_length() - 1) * exponent >= _POWER_BITS:
            raise ExpressionError("a value grows beyond the limit of 2**63-1")
        return base**exponent
    if base == 0 and exponent < 0:
        raise ExpressionError(f"0 to a negative power ({excerpt(exponent)}) divides by zero")
    if base < 0 and not float(exponent).is_integer():
        raise ExpressionError(f"a negative number ({excerpt(base)}) to a fractional power is not a real number")
    return base**exponent


def _checked(value: Any) -> Any:
    """``value`` if it is a number within bounds: an integer within :data:`~hndl._dims.MAX_DIM`, a finite float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExpressionError(f"a value is {excerpt(value)}, not a number")
    if isinstance(value, int) and abs(value) > MAX_DIM:
        raise ExpressionError("a value grows beyond the limit of 2**63-1")
    if isinstance(value, float) and not math.isfinite(value):
        raise ExpressionError(f"a value is {value}, not a finite number")
    return value


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
