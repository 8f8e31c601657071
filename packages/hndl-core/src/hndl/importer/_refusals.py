"""The traced operations nothing can express, as ``E_IMPORT`` problems.

An operation no row takes, inside no layer that can become a ``module`` node, is refused. A model repeats its
layers, so the same reason in the same layer is one problem with a count; each names the layer, its class, the
source line, and why each layer around the operation could not be a module node.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .._errors import Problem
from ._calls import CallInfo, class_name
from ._table import Unsupported
from ._trace import cut, node_location

__all__ = ["Refusals", "reason"]

_HINT_TABLE = (
    "an op that does this, declaring the operation in its imports= (or the layer's class in MODULES), would import it"
)


def reason(n: Any, result: Unsupported) -> str:
    """Why the traced operation ``n`` was refused: the row's reason, naming the operation unless the reason does,
    and the op it waits on."""
    text = f"{n.target}: {result.reason}" if not result.reason.startswith("hndl has no op") else result.reason
    return f"{text} (waits on {result.waits})" if result.waits else text


class Refusals:
    """The refused operations of one translation, one entry per layer and reason."""

    def __init__(self) -> None:
        #: (layer path, reason) -> [problem without its message, count, source line, why no layer around it is a
        #: module node]
        self.refused: dict[tuple[str, str], list[Any]] = {}

    def add(self, n: Any, result: Unsupported, where: CallInfo | None, root: Any, tried: list[str]) -> None:
        """Record the operation ``n`` that nothing can express.

        Args:
            where: the innermost layer call it ran in, ``None`` for one of the root's own operations.
            root: the module imported.
            tried: for each layer around it, why that layer cannot be a module node.
        """
        key = (where.path if where else "<root>", reason(n, result))
        if key in self.refused:
            self.refused[key][1] += 1
            return
        location, code = node_location(n)
        self.refused[key] = [
            Problem(
                "E_IMPORT",
                "",
                node=key[0],
                op=class_name(where.module if where else root),
                location=location,
                hint=_HINT_TABLE if result.reason.startswith("hndl has no op") and not result.waits else None,
            ),
            1,
            code,
            tried,
        ]

    def problems(self) -> list[Problem]:
        """One problem per layer and reason: ``REASON[, N times][ (at `CODE`)][; and no layer around it can be a
        module node: ...]``."""
        problems = []
        for (_, why), (problem, count, code, tried) in self.refused.items():
            message = why + (f", {count} times" if count > 1 else "")
            if code:
                message += f" (at `{cut(code, 100)}`)"
            if tried:
                message += "; and no layer around it can be a module node: " + "; ".join(tried)
            problems.append(dataclasses.replace(problem, message=message))
        return problems
