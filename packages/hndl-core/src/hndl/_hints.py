"""Fixes computed from a mismatch: what turns the shape (or dtype) a value has into what its contract wants.

One search serves the run-time check (an input's concrete shape against its contract: ``E_INPUT``) and static
checking (an inferred shape against a port's pattern or a graph's output contract: ``E_SHAPE``). The candidates
are the edits people forget, in the order they are likely: a permutation (channels-last images, sequence-first
batches), a missing or extra dim of size 1 (``unsqueeze(0)`` for a missing batch), a flatten, a missing batch
before a permutation, and a reshape when the element counts agree and the leading dim stays. A candidate is
offered only when the contract accepts its result (matched strictly: equal ints, or identical expressions
statically), so a hint never proposes an edit that would fail again. The same :class:`ShapeFix` is written as
tensor code for a call (``x.permute(0, 3, 1, 2)``) and as a spec node for a graph
(``{op: permute, dims: [0, 3, 1, 2]}``).

It also says where expressions over graph parameters are documented (:data:`EXPRESSIONS_DOC`), for the problems
that come from a value computed by hand or an expression written wrong (:func:`hndl._param_expressions.expression_hint`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._contracts import ShapePattern, Variadic, format_shape, is_unknown
from ._dims import Dim, DimError, dim_mul, format_dim, free_symbols, substitute
from ._spec_dumper import flow_yaml

__all__ = [
    "EXPRESSIONS_DOC",
    "EXPRESSION_HINT",
    "ShapeFix",
    "call_hint",
    "dtype_fix",
    "fix_candidates",
    "node_hint",
    "shape_fix",
]

#: Ranks above this get no permutation candidates (the count of permutations grows as the factorial).
_MAX_PERMUTED_RANK = 6
#: Ranks above this get no hint at all: a mismatch there is rarely one forgotten edit.
_MAX_RANK = 12

Step = tuple[str, tuple[int, ...]]


@dataclass(frozen=True)
class ShapeFix:
    """Edits (``("permute", (0, 3, 1, 2))``, ``("unsqueeze", (0,))``, ``("flatten", (1, 3))``,
    ``("squeeze", (1,))``, or ``("reshape", ())`` to ``result`` keeping the leading dim) that make ``before`` into
    ``result``, and why they are likely (``"channels-last to channels-first"``; may be empty)."""

    steps: tuple[Step, ...]
    before: tuple[Dim, ...]
    result: tuple[Dim, ...]
    why: str = ""

    def code(self, name: str) -> str:
        """The edits as tensor code on ``name``: ``x.unsqueeze(0).permute(0, 3, 1, 2)``."""
        out = name
        shape = self.before
        for kind, args in self.steps:
            swap = _is_swap(args) if kind == "permute" else None
            if swap is not None:
                out += f".transpose({swap[0]}, {swap[1]})"
            elif kind == "flatten" and args[1] == len(shape) - 1:
                out += f".flatten({args[0]})"
            elif kind == "reshape":  # the leading dim kept as -1, so the code works for any batch size
                out += ".reshape(" + ", ".join(["-1", *(str(format_dim(d)) for d in self.result[1:])]) + ")"
            else:
                out += f".{kind}({', '.join(str(a) for a in args)})"
            shape = _apply(kind, args, shape) or self.result
        return out

    def nodes(self) -> list[dict[str, Any]] | None:
        """The edits as spec nodes (``{op: flatten, start_dim: 1}``); ``None`` when one has no node form (a
        reshape of several symbolic dims)."""
        out: list[dict[str, Any]] = []
        shape = list(self.before)
        for kind, args in self.steps:
            if kind == "permute":
                out.append({"op": "permute", "dims": list(args)})
            elif kind == "flatten":
                node: dict[str, Any] = {"op": "flatten", "start_dim": args[0]}
                if args[1] != len(shape) - 1:
                    node["end_dim"] = args[1]
                out.append(node)
            elif kind in ("unsqueeze", "squeeze"):
                i = args[0]
                rest = shape[i:] if kind == "unsqueeze" else shape[i + 1 :]
                sizes = _reshape_sizes([1, *rest] if kind == "unsqueeze" else rest)
                if sizes is None:
                    return None
                out.append({"op": "reshape", "start_dim": i, "shape": sizes})
            else:  # reshape, keeping the leading dim (see _reshape_fix)
                sizes = _reshape_sizes(list(self.result[1:]))
                if sizes is None:
                    return None
                out.append({"op": "reshape", "start_dim": 1, "shape": sizes})
            shape = list(_apply(kind, args, tuple(shape)) or ())
        return out


def shape_fix(pattern: ShapePattern, actual: Sequence[Any], env: Mapping[str, Any]) -> ShapeFix | None:
    """The likeliest edit that makes a value shaped ``actual`` meet ``pattern`` under the bindings ``env`` (which
    is not changed), or ``None`` when no single forgotten edit does.

    ``actual`` holds ints at run time and dims over the graph's symbols statically; a shape with an open run of
    dims (``*batch``) or a dim inference could not determine gets no hint.
    """
    shape = tuple(actual)
    if not _plain(shape):
        return None

    def fits(candidate: tuple[Dim, ...]) -> bool:
        return pattern.match(candidate, dict(env), strict=True) == ""

    for fix in fix_candidates(shape, target_rank=None if pattern.variadic is not None else len(pattern.dims)):
        if fits(fix.result):
            return fix
    reshape = _reshape_fix(pattern, shape, env)
    return reshape if reshape is not None and fits(reshape.result) else None


def fix_candidates(shape: tuple[Dim, ...], *, target_rank: int | None = None) -> Iterator[ShapeFix]:
    """Every single edit of ``shape`` worth trying, likeliest first (see the module docstring); only those of
    ``target_rank`` when it is given. Permutations and flattens never move the leading (batch) dim before the
    edits that keep it are tried."""
    rank = len(shape)
    if not _plain(shape) or rank > _MAX_RANK:
        return

    def make(steps: tuple[Step, ...], why: str = "") -> ShapeFix | None:
        result: tuple[Dim, ...] | None = shape
        for step in steps:
            result = _apply(*step, result) if result is not None else None
        if result is None or (target_rank is not None and len(result) != target_rank):
            return None
        return ShapeFix(steps, shape, result, why)

    found: list[ShapeFix | None] = []
    if rank <= _MAX_PERMUTED_RANK and (target_rank is None or target_rank == rank):
        found += [make((("permute", p),), _permute_why(p)) for p in _permutations(rank)]
    found += [make((("unsqueeze", (i,)),), "a missing batch dim" if i == 0 else "") for i in range(rank + 1)]
    found += [make((("squeeze", (i,)),)) for i in range(rank) if shape[i] == 1]
    found += [make((("flatten", run),)) for run in _flatten_runs(rank)]
    if rank + 1 <= _MAX_PERMUTED_RANK and (target_rank is None or target_rank == rank + 1):
        found += [
            make((("unsqueeze", (0,)), ("permute", p)), "a missing batch dim, and " + _permute_why(p))
            for p in _permutations(rank + 1)
            if p[0] == 0
        ]
    yield from (fix for fix in found if fix is not None)


def dtype_fix(actual: str, rule: str) -> tuple[str, str] | None:
    """``(code, why)`` converting a tensor of dtype ``actual`` to one that ``rule`` accepts: ``(".float() / 255",
    "a uint8 image holds 0..255; the model computes in floats")`` for an image, ``(".float()", "")`` for other
    integers, ``(".long()", "")`` for floats where indices are wanted; ``None`` when no conversion is the likely
    fix."""
    floats = {"float": "float", "float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16"}
    if rule in floats and not actual.startswith(("float", "bfloat", "complex")):
        method = f".{floats[rule]}()"
        if actual == "uint8":
            return f"{method} / 255", "uint8 image values run 0..255; the model computes in floats, usually 0..1"
        return method, ""
    if rule in ("int", "int64") and (actual.startswith(("float", "bfloat")) or actual == "bool"):
        return ".long()", "indices are integers"
    if rule == "bool" and actual.startswith(("int", "uint")):
        return ".bool()", "a 0/1 mask, such as a tokenizer's attention_mask: nonzero is true"
    return None


# --- candidates ---------------------------------------------------------------------------------------------


def _plain(shape: Sequence[Any]) -> bool:
    return not any(isinstance(d, (Variadic, tuple)) or is_unknown(d) for d in shape)


def _permutations(rank: int) -> Iterator[tuple[int, ...]]:
    """Permutations other than the identity: the batch dim kept first (those that move it after), and among
    those the ones that move a single dim (channels last to first, and back) before the rest."""
    others = [p for p in itertools.permutations(range(rank)) if list(p) != list(range(rank))]
    # The layouts people convert between come first: a square channels-last image fits (0, 3, 1, 2) and the swap
    # (0, 3, 2, 1) alike, and only the first keeps height before width. Then the fewest dims
    # displaced (a swap before a rotation), then the fewest neighbours parted.
    return iter(
        sorted(
            others,
            key=lambda p: (p[0] != 0, not _permute_why(p), sum(a != i for i, a in enumerate(p)), _breaks(p), p),
        )
    )


def _breaks(p: tuple[int, ...]) -> int:
    return sum(1 for a, b in itertools.pairwise(p) if b != a + 1)


def _permute_why(p: tuple[int, ...]) -> str:
    rank = len(p)
    if rank >= 3 and p == (0, rank - 1, *range(1, rank - 1)):
        return "channels-last to channels-first"
    if rank >= 3 and p == (0, *range(2, rank), 1):
        return "channels-first to channels-last"
    if rank >= 2 and p[:2] == (1, 0) and list(p[2:]) == list(range(2, rank)):
        return "sequence-first to batch-first (or back)"
    return ""


def _is_swap(args: tuple[int, ...]) -> tuple[int, int] | None:
    moved = [i for i, a in enumerate(args) if a != i]
    if len(moved) == 2 and args[moved[0]] == moved[1]:
        return moved[0], moved[1]
    return None


def _flatten_runs(rank: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of flattens worth trying: through the last dim first, fewest merged dims first, the
    leading dim kept before it is merged."""
    runs = [(s, e) for s in range(rank) for e in range(s + 1, rank)]
    return iter(sorted(runs, key=lambda r: (r[0] == 0, r[1] != rank - 1, r[1] - r[0], r[0])))


def _apply(kind: str, args: tuple[int, ...], shape: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """``shape`` after one edit; ``None`` when the edit does not apply."""
    try:
        if kind == "permute":
            return tuple(shape[i] for i in args) if sorted(args) == list(range(len(shape))) else None
        if kind == "unsqueeze":
            return (*shape[: args[0]], 1, *shape[args[0] :])
        if kind == "squeeze":
            return (*shape[: args[0]], *shape[args[0] + 1 :]) if shape[args[0]] == 1 else None
        if kind == "flatten":
            start, end = args
            merged: Dim = 1
            for d in shape[start : end + 1]:
                merged = dim_mul(merged, d)
            return (*shape[:start], merged, *shape[end + 1 :])
    except DimError:  # a product past the bounds of _dims
        return None
    return None


def _numel(shape: Sequence[Dim]) -> Dim | None:
    total: Dim = 1
    try:
        for d in shape:
            total = dim_mul(total, d)
    except DimError:
        return None
    return total


def _reshape_fix(pattern: ShapePattern, shape: tuple[Dim, ...], env: Mapping[str, Any]) -> ShapeFix | None:
    """A reshape to ``pattern``'s shape when the element counts agree and the leading dim stays what it is: the
    pattern's dims under ``env``, one unbound symbol solved from the element count (at run time, with ints)."""
    if pattern.variadic is not None or not shape or not pattern.dims:
        return None
    scalars = {k: v for k, v in env.items() if not isinstance(v, tuple)}
    target: list[Dim | None] = []
    for d in pattern.dims:
        assert d is not None
        value = substitute(d, scalars)
        target.append(None if free_symbols(value) - set(_symbols_of(shape)) else value)
    free = [i for i, t in enumerate(target) if t is None]
    total = _numel(shape)
    if total is None or len(free) > 1:
        return None
    if free:
        known = _numel([t for t in target if t is not None])
        if not isinstance(total, int) or not isinstance(known, int) or known == 0 or total % known:
            return None
        target[free[0]] = total // known
    elif _numel([t for t in target if t is not None]) != total:
        return None
    result = tuple(t for t in target if t is not None)
    if len(result) != len(target) or result[0] != shape[0] or result == shape:
        return None
    return ShapeFix((("reshape", ()),), shape, result)


def _symbols_of(shape: Sequence[Dim]) -> Iterator[str]:
    for d in shape:
        yield from free_symbols(d)


def _reshape_sizes(dims: Sequence[Dim]) -> list[Any] | None:
    """Sizes for a reshape node: ints as they are, one symbolic dim as ``-1``; ``None`` for more than one."""
    symbolic = [i for i, d in enumerate(dims) if not isinstance(d, int)]
    if len(symbolic) > 1:
        return None
    return [-1 if i in symbolic else d for i, d in enumerate(dims)]


# --- how a fix is said ----------------------------------------------------------------------------------------


def call_hint(fix: ShapeFix, name: str) -> str:
    """The fix for a tensor passed to a call: ``x.permute(0, 3, 1, 2) makes it [8, 3, 32, 32] (channels-last to
    channels-first)``."""
    why = f" ({fix.why})" if fix.why else ""
    return f"{fix.code(name)} makes it {format_shape(fix.result)}{why}"


def node_hint(fix: ShapeFix, *, where: str = "before it") -> str | None:
    """The fix as nodes to add to a graph: ``add a node {op: permute, dims: [0, 3, 1, 2]} before it: it makes [B, 32, 32,
    3] into [B, 3, 32, 32] (channels-last to channels-first)``; ``None`` when the fix has no node form."""
    nodes = fix.nodes()
    if not nodes:
        return None
    why = f" ({fix.why})" if fix.why else ""
    written = ", then ".join(f"a node {flow_yaml(n)}" for n in nodes)
    return f"add {written} {where}: it makes {format_shape(fix.before)} into {format_shape(fix.result)}{why}"


# --- expressions over graph parameters --------------------------------------------------------------------------

#: Where the grammar of ``$`` expressions is documented, as hints name it.
EXPRESSIONS_DOC = "docs/spec-files.md#expressions"

#: The hint of an expression that does not parse: what the grammar has, and where it is written down.
EXPRESSION_HINT = (
    "an expression has numbers, parameter names, + - * / // % **, parentheses and min max floor ceil round int "
    f"sqrt pow, comparisons == != < <= > >= and not, and, or; see {EXPRESSIONS_DOC}"
)
