"""The importer's self-check: each node's dtypes and shapes as hndl infers them against what torch traced.

Evaluated at the example's sizes (``hndl.check`` keeps dims symbolic over the inputs' symbols, the trace has them as
sympy expressions over its own), so a wrong translation (a reshape's ``start_dim``, a transposed weight) shows up
as a shape that differs, reported as the importer's mistake instead of a graph that builds something else.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._checked import CheckedGraph
from .._contracts import DTYPE_CATEGORIES, is_unknown
from .._dims import evaluate
from .._errors import Problem
from ..naming import dtype_name
from ._symbols import Symbols

__all__ = ["shape_differences"]


def shape_differences(checked: CheckedGraph, expected: Mapping[str, Sequence[Any]], symbols: Symbols) -> list[Problem]:
    """An ``E_IMPORT`` problem for each output of a top-level node whose inferred dtype or shape is not the traced
    one (a floating input's contract is any floating dtype, so a float result is checked as a category).

    Args:
        checked: the imported graph, checked.
        expected: node name -> the traced values of its outputs, in port order.
        symbols: the traced symbols' names and example values.
    """
    env = {name: symbols.hints[sym] for sym, name in symbols.names.items() if sym in symbols.hints}
    problems = []
    for node in checked.nodes:
        traced = expected.get(node.name)
        if traced is None:
            continue
        for port, (t, value) in enumerate(zip(node.out_types, traced)):
            traced_dtype = dtype_name(value.dtype)
            if not _dtype_agrees(t.dtype, traced_dtype):
                problems.append(
                    Problem(
                        "E_IMPORT",
                        "hndl infers another dtype than torch traced (a mistake of the importer)",
                        node=node.name,
                        op=node.op,
                        port=str(port),
                        expected=traced_dtype,
                        actual=t.dtype,
                    )
                )
            if t.shape is None:
                continue
            want = symbols.values(value)
            got = [None if is_unknown(d) else evaluate(d, env) for d in t.shape]
            if len(got) != len(want) or any(g is not None and g != w for g, w in zip(got, want)):
                problems.append(
                    Problem(
                        "E_IMPORT",
                        "hndl infers another shape than torch traced (a mistake of the importer)",
                        node=node.name,
                        op=node.op,
                        port=str(port),
                        expected=want,
                        actual=got,
                    )
                )
    return problems


def _dtype_agrees(inferred: Any, traced: str) -> bool:
    """Whether the inferred dtype (a name, a category such as ``float``, or unknown) admits the traced one."""
    if not isinstance(inferred, str):
        return True
    return traced in DTYPE_CATEGORIES.get(inferred, (inferred,))
