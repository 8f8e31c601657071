"""torch.export's guards as functions of sizes, read with a small grammar (nothing is ``eval``-ed).

torch prints a guard as Python over the inputs' sizes (``(L['x'].size()[2] % 64) == 0``,
``1 + (((-1) + L['x'].size()[3]) // 2) != 1``). Once each ``L[...]`` source is replaced by a name, the text is
integer arithmetic, comparisons, ``and``/``or``/``not`` and a few functions (``Max``, ``Min``, ``Mod``,
``FloorDiv``, ``Eq``, ...). :func:`read_guard` turns it into closures over a mapping of names to sizes, which the
importer evaluates over many sizes: to suggest the range a dim needs (:mod:`._dim_ranges`) and to find the sizes
an input contract would let through that the trace does not hold for (:mod:`._guards`).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ReadGuard", "read_guard", "replace_sources"]

Env = Mapping[str, int]

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Div: operator.truediv,
}
_COMPARE: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_CALLS: dict[str, Callable[..., Any]] = {
    "Max": max,
    "max": max,
    "sym_max": max,  # torch.sym_max
    "Min": min,
    "min": min,
    "sym_min": min,
    "abs": abs,
    "Abs": abs,
    "Mod": operator.mod,
    "PythonMod": operator.mod,
    "FloorDiv": operator.floordiv,
    "CleanDiv": operator.floordiv,
    "floor": math.floor,
    "ceil": math.ceil,
    "Eq": operator.eq,
    "Ne": operator.ne,
}


@dataclass
class ReadGuard:
    """A guard read: whether it holds for sizes ``env`` (name -> size), the names it reads and the integers it
    holds (where a bound far up would show)."""

    text: str
    evaluate: Callable[[Env], Any]
    names: set[str] = field(default_factory=set)
    constants: set[int] = field(default_factory=set)

    def holds(self, env: Env) -> bool:
        try:
            return bool(self.evaluate(env))
        except (ArithmeticError, ValueError, TypeError, KeyError):
            return False


def replace_sources(text: str, sources: Mapping[str, str]) -> str:
    """``text`` with each source torch names (``L['x'].size()[2]``) replaced by its text in ``sources``, longest
    first (so ``L['x'].size()[1]`` does not eat into ``L['x'].size()[10]``)."""
    for source in sorted(sources, key=len, reverse=True):
        text = text.replace(source, sources[source])
    return text


def read_guard(text: str, names: Collection[str]) -> ReadGuard | None:
    """``text`` (a guard whose sizes are already written as ``names``) as a :class:`ReadGuard`; ``None`` when it
    holds anything outside the grammar (a source not replaced, an unknown function, a string)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError):
        return None
    guard = ReadGuard(text, lambda env: None)
    try:
        guard.evaluate = _compile(tree.body, frozenset(names), guard)
    except _Outside:
        return None
    return guard


class _Outside(Exception):
    """The guard holds something the grammar does not read."""


def _compile(node: ast.AST, names: frozenset[str], guard: ReadGuard) -> Callable[[Env], Any]:
    """``node`` as a function of the sizes: closures over its parts, nothing evaluated as code."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        value = node.value
        if isinstance(value, int):
            guard.constants.add(abs(value))
        return lambda env: value
    if isinstance(node, ast.Name) and node.id in names:
        name = node.id
        guard.names.add(name)
        return lambda env: env[name]
    if isinstance(node, ast.UnaryOp):
        inner = _compile(node.operand, names, guard)
        if isinstance(node.op, ast.USub):
            return lambda env: -inner(env)
        if isinstance(node.op, ast.UAdd):
            return inner
        if isinstance(node.op, ast.Not):
            return lambda env: not inner(env)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        fn = _BINARY[type(node.op)]
        left, right = _compile(node.left, names, guard), _compile(node.right, names, guard)
        return lambda env: fn(left(env), right(env))
    if isinstance(node, ast.BoolOp):
        parts = [_compile(v, names, guard) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda env: all(p(env) for p in parts)
        return lambda env: any(p(env) for p in parts)
    if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
        items = [_compile(node.left, names, guard), *(_compile(c, names, guard) for c in node.comparators)]
        ops = [_COMPARE[type(op)] for op in node.ops]

        def compare(env: Env) -> bool:
            values = [item(env) for item in items]
            return all(op(a, b) for op, a, b in zip(ops, values, values[1:], strict=False))

        return compare
    if isinstance(node, ast.Call) and not node.keywords:
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if fname in ("IntInfinity", "oo", "int_oo") and not node.args:
            return lambda env: math.inf
        if fname == "NegativeIntInfinity" and not node.args:
            return lambda env: -math.inf
        if fname in _CALLS:
            fn = _CALLS[fname]
            args = [_compile(a, names, guard) for a in node.args]
            return lambda env: fn(*(a(env) for a in args))
    raise _Outside(ast.dump(node)[:80])
