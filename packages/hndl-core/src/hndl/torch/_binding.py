"""Input binding: a call's positional and keyword arguments as the graph's inputs, in declaration order.

The generated call binds by itself when it gets exactly one positional argument per input (the common case);
anything else comes here, which either orders the values or raises ``E_INPUT`` naming what is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import HndlError, Problem

__all__ = ["bind_inputs"]


def bind_inputs(names: Sequence[str], graph: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The inputs named ``names`` (of graph ``graph``) from ``args`` and ``kwargs``.

    Raises:
        HndlError: E_INPUT for too many positional values, an unknown name, a value given both ways, or a
            missing input.
    """
    if len(args) > len(names):
        raise HndlError(
            Problem(
                "E_INPUT",
                f"graph '{graph}' takes {len(names)} input{'' if len(names) == 1 else 's'}, got {len(args)}",
                expected=", ".join(names),
                actual=f"{len(args)} positional",
            )
        )
    values = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names:
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"unknown input {key!r} for graph '{graph}'",
                    node=key,
                    op="input",
                    expected=", ".join(names),
                    actual=key,
                )
            )
        if key in values:
            raise HndlError(Problem("E_INPUT", "given both by position and by name", node=key, op="input"))
        values[key] = value
    missing = [n for n in names if n not in values]
    if missing:
        raise HndlError(
            Problem(
                "E_INPUT",
                "missing",
                node=missing[0],
                op="input",
                expected=", ".join(names),
                actual=", ".join(values) or "no inputs",
            )
        )
    return tuple(values[n] for n in names)
