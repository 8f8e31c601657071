"""The vocabulary of the importer's rows: a traced call as a row sees it (:class:`Site`), what a row gives back
(:class:`Emit`, :class:`Alias`, :class:`Port`), and its refusal (:class:`Unsupported`). The rows themselves are
``_rows_*.py``; the tables that name them are ``_table.py``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._symbols import NotExpressible, Symbols

__all__ = ["Alias", "Emit", "Port", "Row", "Site", "Unsupported", "giver", "is_tensor_node"]
#: torch's "until the end" for slices (``x[a:]`` traces as ``end=2**63-1``).
_INT64_MAX = 2**63 - 1


class Unsupported(Exception):
    """A traced operation (or a layer) that hndl's ops cannot express; ``waits`` names the op that would."""

    def __init__(self, reason: str, waits: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.waits = waits


@dataclass
class Emit:
    """One hndl node: its op, its inputs (traced values, in the op's port order) and parameters, and the
    original state-dict key of each of its layer's tensors (``{"weight": "layer1.0.conv1.weight"}``)."""

    op: str
    inputs: list[Any]
    params: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)


@dataclass
class Alias:
    """The operation's result is its input's value (``contiguous``, a slice of everything, dropout with p=0)."""

    value: Any


@dataclass
class Port:
    """One output of a multi-output node (``getitem`` of a ``chunk``)."""

    value: Any
    index: int


class Site:
    """A traced operation as a row sees it: its arguments by name (defaults filled in from the operation's
    schema), their traced values, and the model's parameters.

    Args:
        node: the ``torch.fx`` node.
        symbols: the traced symbols' names.
        parameters: placeholder name -> state-dict key of a parameter.
    """

    def __init__(self, node: Any, symbols: Symbols, parameters: Mapping[str, str]) -> None:
        self.node = node
        self.symbols = symbols
        self.parameters = parameters
        self.args = _bind(node)

    @property
    def out(self) -> Any:
        return self.node.meta.get("val")

    def tensor(self, name: str) -> Any:
        """The traced tensor passed as ``name``."""
        value = self.args.get(name)
        if not is_tensor_node(value):
            raise Unsupported(f"argument {name!r} is {_show(value)}, not a tensor")
        return value

    def tensors(self, name: str) -> list[Any]:
        values = self.args.get(name)
        if not isinstance(values, (list, tuple)) or not all(is_tensor_node(v) for v in values):
            raise Unsupported(f"argument {name!r} is not a list of tensors")
        return list(values)

    def weight(self, name: str) -> str:
        """The state-dict key of the parameter passed as ``name``."""
        key = self.optional_weight(name)
        if key is None:
            raise Unsupported(f"argument {name!r} is missing")
        return key

    def optional_weight(self, name: str) -> str | None:
        """The state-dict key of the parameter passed as ``name``, or ``None`` when the argument is ``None``."""
        value = self.args.get(name)
        if value is None:
            return None
        key = self.parameters.get(value.name) if getattr(value, "op", "") == "placeholder" else None
        if key is None:
            raise Unsupported(f"argument {name!r} is a computed tensor, not a parameter of the model")
        return key

    def shape(self, value: Any) -> Sequence[Any]:
        """A traced value's shape (sizes may be ``SymInt``)."""
        return value.meta["val"].shape

    def ints(self, name: str) -> list[int]:
        """An argument that must be a list of plain ints (kernel sizes, strides, dims)."""
        value = self.args.get(name)
        items: list[Any] = list(value) if isinstance(value, (list, tuple)) else [value]
        ints = [v for v in items if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) != len(items):
            raise Unsupported(f"argument {name!r} is {_show(value)}, not a list of constant ints")
        return ints

    def number(self, name: str) -> Any:
        """An argument that must be a constant number (not a traced size or tensor)."""
        value = self.args.get(name)
        if not isinstance(value, (int, float)):
            raise Unsupported(f"argument {name!r} is {_show(value)}, not a constant number")
        return value


def is_tensor_node(value: Any) -> bool:
    """Whether ``value`` is a traced value holding a tensor."""
    import torch

    return hasattr(value, "meta") and isinstance(value.meta.get("val"), torch.Tensor)


def _show(value: Any) -> str:
    if hasattr(value, "meta"):
        return f"the traced value {value.name!r}"
    return repr(value)


def _bind(node: Any) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {str(i): a for i, a in enumerate(node.args)}
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


def giver(site: Site, x: Any, entries: list[str]) -> Any:
    """``x``, or a traced tensor, where each symbol of ``entries`` (``8*h``) can be read back from a dim of ``x``
    or of that tensor (``h`` from ``16*h``: ``reshape`` computes the size per call); ``None`` if none."""
    from .._dims import free_symbols, parse_dim

    wanted = set().union(*(free_symbols(parse_dim(e)) for e in entries)) if entries else set()
    missing = wanted - _readable(site, x)
    if not missing:
        return x
    candidates = [n for n in site.node.graph.nodes if n.op == "placeholder" and n.name not in site.parameters]
    return next((c for c in candidates if is_tensor_node(c) and missing <= _readable(site, c)), None)


def _readable(site: Site, tensor: Any) -> set[str]:
    """The symbols a dim of ``tensor`` gives back (a dim ``c*s + k``)."""
    from .._dims import parse_dim
    from .._size_reads import linear_in_one_symbol

    found: set[str] = set()
    for size in site.shape(tensor):
        try:
            linear = linear_in_one_symbol(parse_dim(site.symbols.entry(size)))
        except (NotExpressible, ValueError):
            continue
        if linear is not None:
            found.add(linear[0])
    return found


Row = Callable[[Site], "Emit | Alias | Port"]
