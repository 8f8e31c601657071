"""``einsum``: a small parser for the equation, and a shape rule over its letters that keeps dims symbolic.

The equation is read by hand, character by character (never evaluated), into one term per operand and the
output term; a term is a list of letters with at most one ``...``. Mistakes in the text are E_PARAM with the
position of the offending character; operands whose shapes the letters cannot describe are E_SHAPE naming the
letter and the two sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._contracts import DTYPES, TensorType, format_shape
from .._dims import Dim, dim_mul, format_dim
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import broadcast_dim, broadcast_shapes, open_at, promote, provably_different

#: A term's entries: a letter, or ``...`` for the dims the letters do not name.
ELLIPSIS = "..."


class EquationError(ValueError):
    """A malformed equation: ``position`` is the index of the offending character in the text."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.message = message
        self.position = position


@dataclass(frozen=True)
class Equation:
    """A parsed equation: ``inputs`` has one term per operand; ``output`` is the written one, or the implicit
    one (``...`` first, then the letters used once, in alphabetical order) when there is no ``->``."""

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]
    explicit: bool


def _term(text: str, start: int, end: int) -> tuple[str, ...]:
    entries: list[str] = []
    i = start
    while i < end:
        c = text[i]
        if c.isspace():
            i += 1
        elif c == ".":
            if text[i : i + 3] != ELLIPSIS or i + 3 > end:
                raise EquationError("'.' outside an ellipsis '...'", i)
            if ELLIPSIS in entries:
                raise EquationError("a second '...' in one term", i)
            entries.append(ELLIPSIS)
            i += 3
        elif c.isascii() and c.isalpha():
            entries.append(c)
            i += 1
        else:
            raise EquationError(f"{c!r} is not a letter, ',', '->' or '...'", i)
    return tuple(entries)


def parse_equation(text: str) -> Equation:
    """The terms of ``text`` (``"bhqd,bhkd->bhqk"``).

    Raises:
        EquationError: with the position of the first character that is not valid there.
    """
    arrow = text.find("->")
    if arrow != -1 and text.find("->", arrow + 1) != -1:
        raise EquationError("a second '->'", text.find("->", arrow + 1))
    lhs_end = arrow if arrow != -1 else len(text)
    for i, c in enumerate(text):
        if c in "->" and not (arrow != -1 and arrow <= i <= arrow + 1):
            raise EquationError(f"{c!r} outside '->'", i)
    inputs: list[tuple[str, ...]] = []
    start = 0
    for i in range(lhs_end + 1):
        if i == lhs_end or text[i] == ",":
            inputs.append(_term(text, start, i))
            start = i + 1
    if arrow != -1 and "," in text[arrow:]:
        raise EquationError("',' after '->' (the output is one term)", text.index(",", arrow))
    used = [e for term in inputs for e in term]
    if arrow == -1:
        letters = sorted(e for e in set(used) if e != ELLIPSIS and used.count(e) == 1)
        output = ((ELLIPSIS,) if ELLIPSIS in used else ()) + tuple(letters)
        return Equation(tuple(inputs), output, explicit=False)
    output = _term(text, arrow + 2, len(text))
    seen: set[str] = set()
    for position, entry in _positions(text, arrow + 2):
        if entry in seen:
            raise EquationError(f"{entry!r} appears twice in the output", position)
        seen.add(entry)
        if entry == ELLIPSIS and ELLIPSIS not in used:
            raise EquationError("'...' in the output but in no operand", position)
        if entry != ELLIPSIS and entry not in used:
            raise EquationError(f"{entry!r} in the output is in no operand", position)
    return Equation(tuple(inputs), output, explicit=True)


def _positions(text: str, start: int) -> list[tuple[int, str]]:
    """Each entry of the term from ``start`` to the end, with its position."""
    found = []
    i = start
    while i < len(text):
        if text[i] == ".":
            found.append((i, ELLIPSIS))
            i += 3
            continue
        if not text[i].isspace():
            found.append((i, text[i]))
        i += 1
    return found


def einsum_shape(equation: Equation, shapes: Sequence[Sequence[Dim]], ports: Sequence[str]) -> tuple[Dim, ...]:
    """The output shape of ``equation`` on operands of ``shapes`` (known ranks), kept symbolic.

    Raises:
        InferError: E_SHAPE for an operand whose rank its term does not fit, a letter whose sizes disagree (within
            an operand: they must be equal; between operands: equal, or 1 to broadcast), or ellipsis dims that do
            not broadcast.
    """
    sizes: dict[str, Dim] = {}
    owner: dict[str, str] = {}
    ellipsis: Any = ()
    for term, shape, port in zip(equation.inputs, shapes, ports):
        letters = [e for e in term if e != ELLIPSIS]
        if ELLIPSIS in term:
            if len(shape) < len(letters):
                raise InferError(
                    f"'{port}' {format_shape(shape)} has rank {len(shape)}, fewer than the {len(letters)} letters of "
                    f"its term {''.join(term)!r}",
                    port=port,
                    expected=f"rank >= {len(letters)}",
                    actual=format_shape(shape),
                )
            k = term.index(ELLIPSIS)
            n = len(shape) - len(letters)
            spread = shape[k : k + n]
            dims = list(shape[:k]) + list(shape[k + n :])
            ellipsis = broadcast_shapes(ellipsis, tuple(spread), ("...", port))
        else:
            if len(shape) != len(letters):
                raise InferError(
                    f"'{port}' {format_shape(shape)} has rank {len(shape)}, its term {''.join(term)!r} names "
                    f"{len(letters)} dims",
                    port=port,
                    expected=f"rank {len(letters)}",
                    actual=format_shape(shape),
                    hint="write one letter per dim, or '...' for the dims the letters do not name",
                )
            dims = list(shape)
        mine: dict[str, Dim] = {}
        for letter, size in zip(letters, dims):
            if letter in mine and (provably_different(mine[letter], size)):
                raise InferError(
                    f"letter {letter!r} names dims of sizes {format_dim(mine[letter])} and {format_dim(size)} "
                    f"in '{port}' {format_shape(shape)}",
                    port=port,
                    expected=f"equal sizes for the repeated letter {letter!r}",
                    actual=format_shape(shape),
                )
            mine.setdefault(letter, size)
        for letter, size in mine.items():
            if letter not in sizes:
                sizes[letter], owner[letter] = size, port
                continue
            joined = broadcast_dim(sizes[letter], size)
            if joined is None:
                raise InferError(
                    f"letter {letter!r} is {format_dim(sizes[letter])} in '{owner[letter]}' and {format_dim(size)} "
                    f"in '{port}'",
                    port=port,
                    expected=f"{letter!r} = {format_dim(sizes[letter])} (or 1, to broadcast)",
                    actual=format_shape(shape),
                )
            sizes[letter] = joined
    out: list[Dim] = []
    for entry in equation.output:
        if entry == ELLIPSIS:
            out.extend(ellipsis)
        else:
            out.append(sizes[entry])
    return tuple(out)


def _parsed(p: Params) -> Equation:
    try:
        return parse_equation(p.equation)
    except EquationError as exc:
        marker = " " * exc.position + "^"
        raise InferError(
            f"equation {p.equation!r}: {exc.message} at position {exc.position}",
            code="E_PARAM",
            param="equation",
            expected="letters per operand, ',' between operands, an optional '->' and output letters, '...' for "
            "the remaining dims",
            actual=f"{p.equation}\n{marker}",
        ) from None


def einsum_macs(node: Any) -> Dim | None:
    """Two operands: torch contracts them with one ``bmm`` (what FlopCounterMode counts) when a letter is summed
    that both share, each output element a dot product over those letters; with none, it multiplies (no MACs).
    One operand sums or permutes (no MACs); three or more follow a contraction order torch picks at run time
    (``None``: not known statically)."""
    count = len(node.in_types)
    if count == 1:
        return 0
    if count > 2:
        return None
    equation = parse_equation(node.params.equation)
    shapes = [t.shape for t in node.in_types]
    out = node.out_types[0].shape
    if out is None or any(s is None or open_at(s) is not None for s in shapes):
        return None
    a, b = equation.inputs
    summed = [e for e in a if e in b and e not in equation.output and e != ELLIPSIS]
    if not summed:
        return 0
    sizes: dict[str, Dim] = {}
    for term, shape in zip(equation.inputs, shapes):
        letters = [e for e in term if e != ELLIPSIS]
        k = term.index(ELLIPSIS) if ELLIPSIS in term else len(term)
        n = len(shape) - len(letters)
        dims = list(shape[:k]) + list(shape[k + n :])
        for letter, size in zip(letters, dims):
            if size != 1:
                sizes[letter] = size
    total: Dim = 1
    for d in out:
        total = dim_mul(total, d)
    for letter in summed:
        total = dim_mul(total, sizes.get(letter, 1))
    return total


def _einsum_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    equation = _parsed(p)
    if len(equation.inputs) != len(inputs):
        raise InferError(
            f"equation {p.equation!r} has {len(equation.inputs)} operand term(s), the node {len(inputs)} input(s)",
            code="E_PARAM",
            param="equation",
            expected=f"{len(inputs)} comma-separated term(s) before '->'",
            actual=p.equation,
        )
    ports = [f"operands.{i}" for i in range(len(inputs))]
    dtype = inputs[0].dtype
    for t, port in zip(inputs[1:], ports[1:]):
        if dtype in DTYPES and t.dtype in DTYPES and dtype != t.dtype:
            raise InferError(
                f"'{port}' is {t.dtype}, '{ports[0]}' {dtype}; torch.einsum takes operands of one dtype",
                code="E_DTYPE",
                port=port,
                expected=dtype,
                actual=t.dtype,
                hint="cast the operands to one dtype first",
            )
        dtype = promote(dtype, t.dtype)
    shapes = [t.shape for t in inputs]
    if any(s is None or open_at(s) is not None for s in shapes):
        return [TensorType(None, dtype)]
    return [TensorType(einsum_shape(equation, shapes, ports), dtype)]  # type: ignore[arg-type]


@op(
    "einsum",
    saves="inputs",
    macs=einsum_macs,
    params=[Param("equation", "str", doc="the subscripts, as torch.einsum's: 'bhqd,bhkd->bhqk'")],
    inputs=[Port("operands", None, dtype="any", variadic=True, doc="one tensor per term of the equation")],
    outputs=[Port("y", None, dtype="any")],
    infer=_einsum_infer,
    layer="hndl.torch.layers.Einsum",
    inference=(
        "each letter is one size across the operands (equal, or 1 to broadcast; a letter repeated in one operand "
        "needs equal sizes); the output has the sizes of the output term's letters, '...' the broadcast of the "
        "dims the letters leave; without '->' the output is '...' then the letters used once, alphabetically"
    ),
    example={"op": "einsum", "equation": "bhtd,bhsd->bhts"},
    input_shape_example=["B", 4, "T", 16],
    returns="view",
    error_example={
        "params": {"equation": "bhqd,bhkd->bhqk"},
        "inputs": [["B", 4, "T", 16], ["B", 4, "T", 32]],
    },
    imports={"aten.einsum.default": "einsum"},
)
def einsum(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Sums of products over named dims (``torch.einsum(equation, *operands)``).

    Attention scores are ``{op: einsum, in: [q, k], equation: 'bhqd,bhkd->bhqk'}``: ``q`` ``[B, H, T, D]`` and
    ``k`` ``[B, H, S, D]`` give ``[B, H, T, S]``. The equation is checked when the graph is: its letters against
    the operands' ranks, each letter's sizes across the operands (``d`` must be one size in ``q`` and ``k``),
    and the text itself (a misplaced character is reported with its position).
    """
    _parsed(p)
    return layer_of("einsum")(p.equation)


__all__ = ["ELLIPSIS", "Equation", "EquationError", "einsum_shape", "parse_equation"]
