"""Two facts of an op that name something outside the registry, declared on its :class:`~hndl.OpDef`: the traced
ATen operations ``hndl.from_module`` imports as a node of the op (:attr:`~hndl.OpDef.imports`), and the class its
builder makes, resolved from the declared dotted path (:func:`layer_class`).

An op names its ATen operations as data (``imports=("aten.hardswish.default", "aten.hardswish_.default")``) and,
where a call's arguments become the op's parameters, the importer's row that reads them, by name
(:class:`ImportRow`): ops never import the importer, which reads the declarations from the registry
(``hndl.importer._table.FUNCTIONS``).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ATEN_NAME", "ImportRow", "imports_of", "layer_class"]

#: How torch.export writes a traced operation (``str(node.target)``): ``aten.<name>.<overload>``.
ATEN_NAME = re.compile(r"^aten\.[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
_KIND = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class ImportRow:
    """How the importer reads one traced ATen operation as a node of the declaring op: its row ``kind`` (a name
    in ``hndl.importer.ROW_KINDS``) made for the op with ``options``.

    The default, ``"unary"``, is the op on the operation's ``self`` argument with no parameters (``relu``,
    ``exp``): what an op declared by its ATen names alone gets. Others read parameters from the call
    (``ImportRow("activation", {"negative_slope": "negative_slope"})``: the op's parameter from the call's
    argument of that name; ``ImportRow("conv", {"dims": 2})``).
    """

    kind: str = "unary"
    options: Mapping[str, Any] = field(default_factory=dict)


def imports_of(declared: Any, op: str) -> dict[str, ImportRow]:
    """:attr:`hndl.OpDef.imports` from what a declaration gives: a sequence of ATen names (each the default row),
    or a mapping of ATen name to an :class:`ImportRow` or a row kind's name.

    Raises:
        ValueError: for a name that is not ``aten.<name>.<overload>`` or a row that is not one of those forms.
    """
    if declared is None:
        return {}
    if isinstance(declared, str):
        raise ValueError(f"op {op!r}: imports is a list of ATen names or a mapping, not the string {declared!r}")
    items = declared.items() if isinstance(declared, Mapping) else ((name, ImportRow()) for name in declared)
    rows: dict[str, ImportRow] = {}
    for name, row in items:
        if not isinstance(name, str) or not ATEN_NAME.match(name):
            raise ValueError(
                f"op {op!r}: imports names a traced ATen operation as torch.export writes it, such as "
                f"'aten.relu.default', not {name!r}"
            )
        if isinstance(row, str):
            row = ImportRow(row)
        if not isinstance(row, ImportRow) or not isinstance(row.kind, str) or not _KIND.match(row.kind):
            raise ValueError(f"op {op!r}: the row for {name!r} must be an ImportRow or a row kind's name, not {row!r}")
        rows[name] = row
    return rows


@functools.cache
def layer_class(path: str) -> Any:
    """The class at the dotted ``path`` an op declares as its ``layer`` (``"hndl.torch.layers.LSTM"``), imported
    on first use and then remembered: a builder makes the class its declaration names instead of importing it
    a second time by hand.

    Raises:
        ImportError, AttributeError: for a path that names no class.
    """
    module, _, name = path.rpartition(".")
    found = getattr(importlib.import_module(module), name)
    if not isinstance(found, type):
        raise AttributeError(f"{path!r} is not a class")
    return found
