"""Symbolic dimensions: ints, symbols (``B``) and expressions over them (``C*H*W``, ``D+E``, ``(H-3)//2+1``).

A dimension (:data:`Dim`) is either a plain ``int`` or a :class:`Poly`: a polynomial with integer
coefficients over *atoms*, where an atom is a symbol name or an opaque floor division that could not be
simplified. Polynomials are kept in a canonical form, so two expressions that are equal by the rules of
integer arithmetic on ``+ - *`` compare equal with ``==`` (``D+E == E+D``, ``2*(H+1) == 2*H+2``); anything
that folds to a constant becomes an ``int``.

Expressions are parsed by a small recursive-descent parser; nothing is ever ``eval``-ed.

Shapes may come from untrusted spec files, so the work and the size of a dim are bounded, each bound a
:class:`DimError` (``E_SPEC`` in a contract, ``E_SHAPE`` in inference): an expression is at most
:data:`MAX_EXPR_CHARS` characters and nests at most :data:`MAX_NESTING` levels (parentheses, unary minus, floor
divisions inside floor divisions); a polynomial has at most :data:`MAX_TERMS` terms (a product of sums expands
term by term: ``(A+...+J)**12`` would have millions); and every number in a dim, a constant or a coefficient, is
at most :data:`MAX_DIM` in magnitude (torch sizes are 64-bit), so no dim is too long to print.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from ._errors import HndlError, Problem
from .naming import excerpt

__all__ = [
    "Dim",
    "DimError",
    "FloorDiv",
    "Poly",
    "dim_add",
    "dim_floordiv",
    "dim_mul",
    "dim_sub",
    "evaluate",
    "free_symbols",
    "parse_dim",
    "symbol",
]

SYMBOL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

#: The longest dimension expression accepted, in characters.
MAX_EXPR_CHARS = 1000
#: How deep an expression may nest: parentheses, unary minus, and floor divisions inside floor divisions.
MAX_NESTING = 32
#: The most terms a dimension polynomial may have (checked before a product is expanded).
MAX_TERMS = 256
#: The largest magnitude of a number in a dim (a constant or a coefficient): torch sizes are 64-bit integers.
MAX_DIM = 2**63 - 1


class DimError(HndlError, ValueError):
    """A dimension expression is malformed or cannot be evaluated (unbound symbol, division by zero), or a dim
    grows past a bound of this module.

    The contract parser and the checker catch it and report it in their own words (``E_SPEC``, ``E_SHAPE`` at the
    node), reading ``str(exc)``, which is the bare reason. It is an :class:`~hndl.HndlError` (``E_SHAPE``) so that
    one raised where nothing expects it (sizes given to ``summary`` whose products pass 2**63-1) still reaches
    the user as hndl's one error type, and a ``ValueError`` for the callers that catch that.
    """

    def __init__(self, reason: str, code: str = "E_SHAPE") -> None:
        # Not HndlError.__init__: that renders the message at once, and a DimError is often caught and reworded
        # (evaluating a dim with an unbound symbol during validation raises it routinely).
        Exception.__init__(self, reason)
        self.problems = [Problem(code, reason)]
        self.code, self.node, self.location, self.port, self.title = code, None, None, None, None

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[object, ...]:
        return (DimError, (str(self.args[0]), self.code))


@dataclass(frozen=True, order=True)
class FloorDiv:
    """An atom for ``num // den`` that does not simplify (e.g. ``(H-1)//2``)."""

    num: Dim
    den: Dim
    #: How many floor divisions this one nests, itself included (bounded by :data:`MAX_NESTING`); not compared.
    depth: int = field(default=1, compare=False, repr=False)

    def __str__(self) -> str:
        return f"{_wrap(self.num)}//{_wrap(self.den)}"


Atom = str | FloorDiv
Monomial = tuple[Atom, ...]  # sorted atoms, with repetition for powers


def _atom_key(a: Atom) -> tuple[int, str]:
    return (0, a) if isinstance(a, str) else (1, str(a))


@dataclass(frozen=True)
class Poly:
    """A canonical integer polynomial over atoms. Construct through the ``dim_*`` functions."""

    terms: tuple[tuple[Monomial, int], ...]  # sorted, no zero coefficients, at least one non-constant term

    def __str__(self) -> str:
        return _str(self)

    def __repr__(self) -> str:
        return f"Dim({_str(self)!r})"


Dim = int | Poly


def _bounded(value: int) -> int:
    """``value``, or :class:`DimError` when it is beyond :data:`MAX_DIM` (a dim no tensor can have)."""
    if -MAX_DIM <= value <= MAX_DIM:
        return value
    size = f"{value:.3e}" if value.bit_length() < 1000 else f"a number of {value.bit_length():,} bits"
    raise DimError(f"a dimension grows to {size}, beyond the limit of 2**63-1")


def _make(coeffs: dict[Monomial, int]) -> Dim:
    for c in coeffs.values():
        _bounded(c)
    if len(coeffs) > MAX_TERMS:
        raise DimError(f"a dimension expression expands to more than {MAX_TERMS} terms")
    items = tuple(
        sorted(((m, c) for m, c in coeffs.items() if c != 0), key=lambda mc: (not mc[0], [_atom_key(a) for a in mc[0]]))
    )
    if not items:
        return 0
    if len(items) == 1 and items[0][0] == ():
        return items[0][1]
    return Poly(items)


def _coeffs(d: Dim) -> dict[Monomial, int]:
    if isinstance(d, bool):
        raise DimError(f"a dimension must be an int or a symbol, not {d!r}")
    if isinstance(d, int):
        return {(): d} if d else {}
    return dict(d.terms)


def symbol(name: str) -> Poly:
    """The dimension named ``name``."""
    if not SYMBOL_RE.match(name):
        raise DimError(f"{name!r} is not a valid symbol name")
    return Poly(((((name,)), 1),))


def dim_add(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return _bounded(a + b)
    out = _coeffs(a)
    for m, c in _coeffs(b).items():
        out[m] = out.get(m, 0) + c
    return _make(out)


def dim_sub(a: Dim, b: Dim) -> Dim:
    return dim_add(a, dim_mul(-1, b))


def dim_mul(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return _bounded(a * b)
    out: dict[Monomial, int] = {}
    left, right = _coeffs(a), _coeffs(b)
    if len(left) * len(right) > MAX_TERMS:  # refused before the work: a product of sums grows exponentially
        raise DimError(f"a dimension expression expands to more than {MAX_TERMS} terms")
    for ma, ca in left.items():
        for mb, cb in right.items():
            m = tuple(sorted(ma + mb, key=_atom_key))
            out[m] = out.get(m, 0) + ca * cb
    return _make(out)


def dim_floordiv(a: Dim, b: Dim) -> Dim:
    """``a // b``, simplified where integer arithmetic allows: terms whose coefficients ``b`` divides come out of
    the division (``(2*H+1)//2 = H``, ``(H+4)//2 = H//2+2``), and a floor division of a floor division by positive
    integers is one division (``((H-1)//2)//2 = (H-1)//4``), so a stack of strided layers stays short."""
    if isinstance(b, int):
        if b == 0:
            raise DimError("division by zero in a dimension expression")
        if isinstance(a, int):
            return a // b
        if b == 1:
            return a
        # n*Q + R  //  n  =  Q + R // n, for integer Q.
        whole = {m: c // b for m, c in a.terms if c % b == 0}
        rest = _make({m: c for m, c in a.terms if c % b != 0})
        if whole:
            return dim_add(_make(whole), dim_floordiv(rest, b))
        inner = _lone_floordiv(rest)
        if inner is not None and b > 0 and isinstance(inner.den, int) and inner.den > 0:
            return dim_floordiv(inner.num, _bounded(inner.den * b))
    elif a == b:
        return 1
    depth = 1 + max(_nesting(a), _nesting(b))
    if depth > MAX_NESTING:
        raise DimError(f"a dimension nests floor divisions more than {MAX_NESTING} levels deep")
    return Poly(((((FloorDiv(a, b, depth),)), 1),))


def _nesting(d: Dim) -> int:
    """How many floor divisions ``d`` nests."""
    if isinstance(d, int):
        return 0
    return max((a.depth for m, _ in d.terms for a in m if isinstance(a, FloorDiv)), default=0)


def _lone_floordiv(d: Dim) -> FloorDiv | None:
    """The floor division ``d`` is, when it is exactly one (coefficient 1, no other term)."""
    if isinstance(d, Poly) and len(d.terms) == 1:
        mono, coeff = d.terms[0]
        if coeff == 1 and len(mono) == 1 and isinstance(mono[0], FloorDiv):
            return mono[0]
    return None


def free_symbols(d: Dim) -> set[str]:
    """The symbol names ``d`` depends on."""
    out: set[str] = set()
    if isinstance(d, int):
        return out
    for m, _ in d.terms:
        for a in m:
            if isinstance(a, str):
                out.add(a)
            else:
                out |= free_symbols(a.num) | free_symbols(a.den)
    return out


def evaluate(d: Dim, env: Mapping[str, int]) -> int:
    """The value of ``d`` with symbols taken from ``env``. Raises :class:`DimError` on an unbound symbol."""
    if isinstance(d, int):
        return d
    total = 0
    for m, c in d.terms:
        value = c
        for a in m:
            if isinstance(a, str):
                try:
                    value *= env[a]
                except KeyError:
                    raise DimError(f"symbol {a!r} is not bound") from None
            else:
                den = evaluate(a.den, env)
                if den == 0:
                    raise DimError("division by zero in a dimension expression")
                value *= evaluate(a.num, env) // den
        total += value
    return total


def substitute(d: Dim, env: Mapping[str, Dim]) -> Dim:
    """``d`` with each bound symbol replaced by its (possibly symbolic) value; unbound symbols stay."""
    if isinstance(d, int):
        return d
    total: Dim = 0
    for m, c in d.terms:
        value: Dim = c
        for a in m:
            if isinstance(a, str):
                # An unbound atom stays as it is, unchecked: it may be an unknown dim (``?3``), not a symbol name.
                value = dim_mul(value, env[a] if a in env else Poly((((a,), 1),)))
            else:
                value = dim_mul(value, dim_floordiv(substitute(a.num, env), substitute(a.den, env)))
        total = dim_add(total, value)
    return total


# --- printing -------------------------------------------------------------------------------------------


def _str(d: Dim) -> str:
    if isinstance(d, int):
        return str(d)
    parts: list[str] = []
    for m, c in d.terms:
        # A floor division next to another factor or a sign needs parentheses: 2*(H//2) is not (2*H)//2.
        lone = len(m) == 1 and c == 1
        atoms = [a if isinstance(a, str) else (str(a) if lone else f"({a})") for a in m]
        if not atoms:
            body = str(abs(c))
        elif abs(c) == 1:
            body = "*".join(atoms)
        else:
            body = "*".join([str(abs(c)), *atoms])
        if not parts:
            parts.append(body if c > 0 else f"-{body}")
        else:
            parts.append(f"+{body}" if c > 0 else f"-{body}")
    return "".join(parts)


def _wrap(d: Dim) -> str:
    s = _str(d)
    return s if isinstance(d, int) or SYMBOL_RE.match(s) else f"({s})"


# --- parsing --------------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(//|[-+*()]))")


def parse_dim(text: str | int) -> Dim:
    """Parse ``"C*H*W"``, ``"D+E"``, ``"(H-3)//2+1"``, ``"B"`` or an int into a :data:`Dim`.

    Raises:
        DimError: on anything that is not such an expression.
    """
    if isinstance(text, bool):
        raise DimError(f"a dimension must be an int or a symbol, not {text!r}")
    if isinstance(text, int):
        return _bounded(text)
    if not isinstance(text, str):
        raise DimError(f"a dimension must be an int or a symbol, not {type(text).__name__} {text!r}")
    if len(text) > MAX_EXPR_CHARS:
        raise DimError(f"a dimension expression is longer than {MAX_EXPR_CHARS:,} characters")
    tokens: list[str] = []
    pos = 0
    stripped = text.rstrip()
    while pos < len(stripped):
        m = _TOKEN_RE.match(stripped, pos)
        if not m:
            raise DimError(f"cannot parse dimension {excerpt(text)} at {excerpt(stripped[pos:])}")
        tokens.append(m.group(m.lastindex or 0))
        pos = m.end()
    if not tokens:
        raise DimError("empty dimension expression")
    parser = _Parser(tokens, text)
    value = parser.expr()
    if parser.i != len(tokens):
        raise DimError(f"cannot parse dimension {excerpt(text)}: unexpected {tokens[parser.i]!r}")
    return value


class _Parser:
    def __init__(self, tokens: list[str], text: str) -> None:
        self.tokens, self.text, self.i = tokens, text, 0
        self.depth = 0  # open parentheses and unary minuses: each is a level of recursion

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise DimError(f"cannot parse dimension {excerpt(self.text)}: it ends too early")
        self.i += 1
        return tok

    def expr(self) -> Dim:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            rhs = self.term()
            value = dim_add(value, rhs) if op == "+" else dim_sub(value, rhs)
        return value

    def term(self) -> Dim:
        value = self.factor()
        while self.peek() in ("*", "//"):
            op = self.take()
            rhs = self.factor()
            value = dim_mul(value, rhs) if op == "*" else dim_floordiv(value, rhs)
        return value

    def factor(self) -> Dim:
        tok = self.take()
        if tok in ("-", "("):
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise DimError(f"a dimension expression nests more than {MAX_NESTING} levels deep")
            if tok == "-":
                value = dim_mul(-1, self.factor())
            else:
                value = self.expr()
                if self.take() != ")":
                    raise DimError(f"cannot parse dimension {excerpt(self.text)}: missing ')'")
            self.depth -= 1
            return value
        if tok.isdigit():
            if len(tok) > 19:  # more digits than MAX_DIM has: refused before Python converts (and later prints) it
                raise DimError(f"a dimension has a number of {len(tok):,} digits, beyond the limit of 2**63-1")
            return _bounded(int(tok))
        if SYMBOL_RE.match(tok):
            return symbol(tok)
        raise DimError(f"cannot parse dimension {excerpt(self.text)}: unexpected {tok!r}")


def format_dim(d: Dim) -> str | int:
    """The spec-file form of a dim: an int stays an int, anything else its canonical text."""
    return d if isinstance(d, int) else _str(d)
