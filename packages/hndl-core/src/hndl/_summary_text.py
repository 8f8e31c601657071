"""The summary as text: numbers with unit prefixes, shapes with the caller's dims filled in, and the table that
fits a terminal, whose MACs column wraps long expressions at their operators. Used by :mod:`hndl._summary` and
:mod:`hndl._draw`."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from ._contracts import Variadic, format_shape
from ._dim_factor import factored_text
from ._dims import Dim, substitute

__all__ = ["amount", "dim_text", "shape_text", "table", "value_at", "wrap_expression"]


_TOO_LONG = "<a number too long to print>"


def value_at(d: Dim, env: Mapping[str, int]) -> int | str:
    """``d`` with ``env`` filled in: an int, or while symbols remain its exact expression, with the products
    that strided outputs expand into regrouped (``9408*B*((H-1)//2+1)*((W-1)//2+1)``, see ``_dim_factor``).
    A number too long to print in decimal (a product of literals in a hostile spec can exceed Python's 4,300
    digits) is described instead."""
    value = substitute(d, env)
    if isinstance(value, int):
        return value if value.bit_length() < 14_000 else _TOO_LONG
    return factored_text(value)


def dim_text(d: Any) -> str:
    try:
        return format_shape([d])[1:-1]
    except ValueError:
        return "<a dim too long to print>"


def shape_text(shape: Sequence[Any] | None, env: Mapping[str, int]) -> str:
    if shape is None:
        return "?"
    filled = [str(d) if isinstance(d, Variadic) else dim_text(substitute(d, env)) for d in shape]
    return "[" + ", ".join(filled) + "]"


_PREFIXES = ((10**12, "T"), (10**9, "G"), (10**6, "M"), (10**3, "k"))


def amount(value: int | str | None, *, long: bool = False, unit: str = "") -> str:
    """A count for the table: ``12.3 M`` (and in the totals the exact number too)."""
    if value is None:
        return "?"
    if isinstance(value, str):
        return value + (f" {unit}" if unit and long else "")
    for scale, prefix in _PREFIXES:
        if value >= scale:
            short = f"{value / scale:.2f} {prefix}{unit}"
            return f"{value:,} {unit} ({short})".replace("  ", " ") if long else short
    return f"{value:,}" + (f" {unit}" if unit else "")


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[int],
    expressions: Sequence[int] = (),
    width: int,
) -> list[str]:
    """Columns sized to their content, then the widest wrappable ones narrowed until the table fits ``width``;
    a narrowed cell wraps onto more lines: text at spaces where it can, an ``expressions`` column at its
    operators. ``right`` columns are right-aligned, and the ones that are not expressions never wrap."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]
    narrowable = [i for i in range(len(widths)) if i not in right or i in expressions]
    gap = 2
    while sum(widths) + gap * (len(widths) - 1) > width:
        widest = max(narrowable, key=lambda i: widths[i])
        if widths[widest] <= 10:
            break  # nothing sensible left to narrow: the table is wider than asked, but whole
        widths[widest] -= 1

    def wrap(i: int, cell: str, w: int) -> list[str]:
        if i in expressions:
            return wrap_expression(cell, w)
        if i in right:
            return [cell]
        return textwrap.wrap(cell, w, break_on_hyphens=False) or [""]

    def render(cells: Sequence[str]) -> list[str]:
        wrapped = [wrap(i, cell, w) for i, (cell, w) in enumerate(zip(cells, widths))]
        # A wrapped expression in a right-aligned column: its lines flush left to each other, the block right.
        for i in expressions:
            longest = max(len(line) for line in wrapped[i])
            wrapped[i] = [line.ljust(longest) for line in wrapped[i]]
        out = []
        for k in range(max(len(c) for c in wrapped)):
            parts = []
            for i, (lines, w) in enumerate(zip(wrapped, widths)):
                text = lines[k] if k < len(lines) else ""
                parts.append(text.rjust(w) if i in right else text.ljust(w))
            out.append((" " * gap).join(parts).rstrip())
        return out

    rule = (" " * gap).join("-" * w for w in widths)
    lines = [*render(header), rule]
    for row in rows:
        lines += render(row)
    return [*lines, rule]


def wrap_expression(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken after a ``+``, ``-`` or ``*`` outside parentheses (so a
    factor like ``((H-1)//2+1)`` stays whole), and only where nothing else fits, inside a piece."""
    pieces: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and ch in "+-*" and i > 0:
            pieces.append(text[start : i + 1])
            start = i + 1
    pieces.append(text[start:])
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
        while len(lines[-1]) > width:
            lines[-1:] = [lines[-1][:width], lines[-1][width:]]
    return lines
