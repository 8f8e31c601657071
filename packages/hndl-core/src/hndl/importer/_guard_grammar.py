"""torch.export's guards as functions of sizes, read with a small grammar (the text is never ``eval``-ed).

torch prints a guard as Python over the inputs' sizes (``(L['x'].size()[2] % 64) == 0``,
``1 + (((-1) + L['x'].size()[3]) // 2) != 1``). Once each ``L[...]`` source is replaced by a name, the text is
integer arithmetic, comparisons, ``and``/``or``/``not`` and a few functions (``Max``, ``Min``, ``Mod``,
``FloorDiv``, ``Eq``, ...). :func:`read_guard` parses it, checks every node of the tree against that grammar
and compiles the checked tree (rebuilt node by node: names become lookups of sizes, calls the grammar's own
functions) into a function of a mapping of names to sizes, which the importer evaluates over many sizes: to suggest the range a dim needs (:mod:`._dim_ranges`) and to find the sizes
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

#: The operators a guard may use (Python's own, on Python ints: exact at any size).
_BINARY = frozenset({ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Div})
_COMPARE = frozenset({ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE})
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
    #: for a guard that is one strict comparison (``a < b``, ``a > b``, ``a != b``): its two sides, each as a
    #: function of the sizes and as text
    sides: tuple[Callable[[Env], Any], Callable[[Env], Any], str, str] | None = None

    def holds(self, env: Env) -> bool:
        try:
            return bool(self.evaluate(env))
        except (ArithmeticError, ValueError, TypeError, KeyError):
            return False

    def fails_as_one(self, env: Env) -> bool:
        """Whether the guard fails at ``env`` only as torch's assumption that a size is not 1 fails: a strict
        comparison whose sides are equal there, at 1 (``W // 32 > 1``), or one side the other times a factor
        that is 1 there (``a < a*b``). torch traces as if every dynamic dim were 2 or more and writes such
        guards from that assumption (its 0/1 specialisation), not from a branch of the module."""
        if self.sides is None:
            return False
        left, right, left_text, right_text = self.sides
        try:
            a, b = left(env), right(env)
        except (ArithmeticError, ValueError, TypeError, KeyError):
            return False
        if a != b:
            return False
        if a == 1:
            return True
        return any(
            long.startswith((f"{short}*", f"({short})*")) or long.endswith((f"*{short}", f"*({short})"))
            for short, long in ((left_text, right_text), (right_text, left_text))
            if not short.lstrip("-").isdigit()  # `2*h > 2` is a branch at h = 1, not a size taken to be no 1
        )


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
        body = _Checked(frozenset(names), guard).visit(tree.body)
    except _Outside:
        return None
    # The tree is rebuilt node by node from the grammar's own (each name a size looked up in env, each call one of
    # _CALLS, bound in _function) and compiled as one function: a guard is evaluated at thousands of sizes, and a
    # compiled expression runs some ten times faster than closures over its parts.
    guard.evaluate = _function(body)
    node = tree.body
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Lt, ast.Gt, ast.NotEq)):
        checked = _Checked(frozenset(names), ReadGuard(text, guard.evaluate))
        guard.sides = (
            _function(checked.visit(node.left)),
            _function(checked.visit(node.comparators[0])),
            _plain(ast.unparse(node.left)),
            _plain(ast.unparse(node.comparators[0])),
        )
    return guard


def _function(body: ast.expr) -> Callable[[Env], Any]:
    """A checked tree (``_Checked``) compiled as ``lambda env: body``: nothing in it but what the grammar reads."""
    function = ast.Expression(
        ast.Lambda(
            ast.arguments(posonlyargs=[], args=[ast.arg("env")], kwonlyargs=[], kw_defaults=[], defaults=[]), body
        )
    )
    code = compile(ast.fix_missing_locations(function), "<guard>", "eval")
    made: Callable[[Env], Any] = eval(code, {"__builtins__": {}, **{_bound(name): fn for name, fn in _CALLS.items()}})
    return made


def _plain(text: str) -> str:
    """An expression's text without its outer parentheses and spaces, for comparing sides."""
    text = text.replace(" ", "")
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1]
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


class _Outside(Exception):
    """The guard holds something the grammar does not read."""


def _bound(name: str) -> str:
    """The name a function of the grammar is bound to in a compiled guard."""
    return f"_call_{name}"


class _Checked(ast.NodeTransformer):
    """A guard's tree, each node checked against the grammar (anything else is :class:`_Outside`): names become
    ``env[name]``, calls the grammar's functions; the names and integer constants met are noted on ``guard``."""

    def __init__(self, names: frozenset[str], guard: ReadGuard) -> None:
        self.names = names
        self.guard = guard

    def generic_visit(self, node: ast.AST) -> ast.AST:
        raise _Outside(ast.dump(node)[:80])

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise _Outside(ast.dump(node)[:80])
        if isinstance(value, int):
            self.guard.constants.add(abs(value))
        return ast.Constant(value)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id not in self.names:
            raise _Outside(ast.dump(node)[:80])
        self.guard.names.add(node.id)
        return ast.Subscript(ast.Name("env", ast.Load()), ast.Constant(node.id), ast.Load())

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if not isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            raise _Outside(ast.dump(node)[:80])
        return ast.UnaryOp(type(node.op)(), self.visit(node.operand))

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        if type(node.op) not in _BINARY:
            raise _Outside(ast.dump(node)[:80])
        return ast.BinOp(self.visit(node.left), type(node.op)(), self.visit(node.right))

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        return ast.BoolOp(type(node.op)(), [self.visit(v) for v in node.values])

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        if not all(type(op) in _COMPARE for op in node.ops):
            raise _Outside(ast.dump(node)[:80])
        return ast.Compare(
            self.visit(node.left), [type(op)() for op in node.ops], [self.visit(c) for c in node.comparators]
        )

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        if node.keywords or fname is None:
            raise _Outside(ast.dump(node)[:80])
        if fname in ("IntInfinity", "oo", "int_oo") and not node.args:
            return ast.Constant(math.inf)
        if fname == "NegativeIntInfinity" and not node.args:
            return ast.Constant(-math.inf)
        if fname not in _CALLS:
            raise _Outside(ast.dump(node)[:80])
        return ast.Call(ast.Name(_bound(fname), ast.Load()), [self.visit(a) for a in node.args], [])
