"""What each traced torch operation becomes in hndl: two tables of rows.

``FUNCTIONS`` maps a traced ATen operation (``aten.relu.default``, as torch.export writes ``F.relu``,
``nn.ReLU`` and ``x.relu()`` alike) to a row: a function of the call :class:`Site` that returns the hndl node
(:class:`Emit`), says the value is its input (:class:`Alias`), or raises :class:`Unsupported` with the reason.
``MODULES`` maps a layer class (by its qualified name) to a row that turns the whole call into one node, for the
layers whose traced operations do not say all they do: a ``BatchNorm2d`` traced in eval mode shows only its
eval-mode arithmetic, not that it updates running statistics in training mode.

A traced operation that is one hndl op is declared on that op (:attr:`hndl.OpDef.imports`:
``imports=("aten.hardswish.default", "aten.hardswish_.default")``, or with the row kind that reads the call's
arguments, a name in :data:`ROW_KINDS`), so ``FUNCTIONS`` is a view of the registry (a plugin op's declarations
included) over :data:`_IMPORTER_ROWS`, the rows that are the importer's own logic and stay here:

- ``mul``/``mul_``: ``scale`` for a floating tensor times a number that keeps its dtype, else ``mul``;
- ``hardtanh``/``hardtanh_``: ``relu6`` at 0 and 6 (how torch.export writes ``nn.ReLU6``), ``clamp`` where the
  bounds are not ordered, else ``hardtanh``;
- ``scaled_dot_product_attention``: ``sdpa``, with a ``reshape`` of a rank-2 mask to rank 4;
- ``diff``: a ``concat`` of the prepended and appended tensors, then ``diff``;
- ``masked_fill``/``masked_fill_`` by a number: ``where(mask, value, x)``, where that keeps x's dtype;
- ``zeros``/``ones``/``full``: ``new_zeros``, ``new_ones`` or ``new_full`` on the tensor a size comes from;
- aliasing, where the result may be the input itself (no node): ``view``, ``reshape``, ``_unsafe_view``,
  ``unsqueeze``, ``squeeze``, ``unflatten`` (``reshape``), ``t`` (``transpose``), ``cat``/``concat`` (of one
  tensor), ``slice`` (of everything; to a traced size, an ``arange`` and ``index``), ``dropout`` (``p=0``),
  ``to``/``_to_copy`` (``cast``), and ``contiguous``, ``clone``, ``alias``, ``detach``, ``lift_fresh_copy``
  (always the value itself).

An importer row stands over an op's declaration of the same operation. ``PENDING`` lists the operations common
models use that no row takes yet, with what would take them, so an import that meets one says what it waits on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from .._errors import HndlError, Problem
from .._registry import ImportRow, registry
from ._layer_rows import MODULES as MODULES
from ._layer_rows import Call as Call
from ._layer_rows import module_row as module_row
from ._rows import (
    _adaptive,
    _addmm,
    _binary,
    _clamp,
    _conv,
    _dropout,
    _elu,
    _embedding,
    _gelu,
    _glu,
    _group_norm,
    _hardtanh,
    _layer_norm,
    _linear,
    _logical,
    _masked_fill,
    _pool,
    _power,
    _roll,
    _rsub,
    _sdpa,
    _times_constant,
    _triangle,
    _where,
    activation,
    unary,
)
from ._rows_shape import (
    _alias,
    _cat,
    _chunk,
    _expand,
    _flatten,
    _flip,
    _mean,
    _pad,
    _permute,
    _repeat,
    _reshape,
    _select,
    _slice,
    _softmax,
    _split,
    _stack,
    _swapaxes,
    _t,
    _to,
    _transpose,
    _type_as,
    _upsample,
)
from ._rows_tensors import (
    _accumulating,
    _arange,
    _arg,
    _diff,
    _einsum,
    _full,
    _gather,
    _index,
    _like,
    _new,
    _norm,
    _unbind,
)
from ._site import Alias as Alias
from ._site import Emit as Emit
from ._site import Port as Port
from ._site import Row
from ._site import Site as Site
from ._site import Unsupported as Unsupported

__all__ = [
    "FUNCTIONS",
    "MODULES",
    "PENDING",
    "ROW_KINDS",
    "Alias",
    "Call",
    "Emit",
    "Port",
    "Site",
    "Unsupported",
    "module_row",
    "unary",
]

RowKind = Callable[..., Row]


def _only(op: str, make: Callable[..., Row]) -> RowKind:
    """A row kind that reads arguments only ``op`` has (``layer_norm``'s ``normalized_shape``): made for that op
    alone, with the declaration's options."""

    def kind(declaring: str, **options: Any) -> Row:
        if declaring != op:
            raise ValueError(f"the row makes {op} nodes, not {declaring} nodes")
        return make(**options)

    return kind


def _fixed(op: str, row: Row) -> RowKind:
    """The row kind of ``row``, which makes ``op`` nodes and takes no options."""
    return _only(op, lambda: row)


#: Row kind (:attr:`hndl.ImportRow.kind`) -> ``make(op, **options) -> row``: how the importer reads a call of an
#: operation an op declares. The first group makes a node of any declaring op; the second reads arguments only
#: one op has.
ROW_KINDS: dict[str, RowKind] = {
    "unary": unary,
    "activation": activation,
    "softmax": _softmax,
    "binary": _binary,
    "logical": _logical,
    "triangle": _triangle,
    "conv": _conv,
    "pool": _pool,
    "adaptive": _adaptive,
    "accumulating": _accumulating,
    "arg": _arg,
    "like": _like,
    "new": _new,
    "gelu": _fixed("gelu", _gelu),
    "elu": _fixed("elu", _elu),
    "glu": _fixed("glu", _glu),
    "clamp": _only("clamp", lambda bounds: _clamp(*bounds)),
    "rsub": _fixed("sub", _rsub),
    "power": _fixed("pow", _power),
    "where": _fixed("where", _where),
    "roll": _fixed("roll", _roll),
    "flip": _fixed("flip", _flip),
    "repeat": _fixed("repeat", _repeat),
    "stack": _fixed("stack", _stack),
    "linear": _fixed("linear", _linear),
    "addmm": _fixed("linear_in_out", _addmm),
    "layer_norm": _fixed("layernorm", _layer_norm),
    "group_norm": _fixed("groupnorm", _group_norm),
    "embedding": _fixed("embedding", _embedding),
    "upsample": _only("upsample", _upsample),
    "pad": _fixed("pad", _pad),
    "flatten": _fixed("flatten", _flatten),
    "permute": _fixed("permute", _permute),
    "transpose": _fixed("transpose", _transpose),
    "swapaxes": _fixed("transpose", _swapaxes),
    "expand": _fixed("expand", _expand),
    "chunk": _fixed("chunk", _chunk),
    "split": _fixed("split", _split),
    "select": _fixed("select", _select),
    "mean": _fixed("mean", _mean),
    "type_as": _fixed("type_as", _type_as),
    "norm": _fixed("norm", _norm),
    "gather": _fixed("gather", _gather),
    "index": _fixed("index", _index),
    "unbind": _fixed("unbind", _unbind),
    "einsum": _fixed("einsum", _einsum),
    "arange": _fixed("arange", _arange),
}

#: The rows that are the importer's own logic, not one op's (the module docstring says why each stays here).
_IMPORTER_ROWS: dict[str, Row] = {
    "aten.mul.Tensor": _binary("mul", _times_constant),
    "aten.mul_.Tensor": _binary("mul", _times_constant),
    "aten.hardtanh.default": _hardtanh,
    "aten.hardtanh_.default": _hardtanh,
    "aten.scaled_dot_product_attention.default": _sdpa,
    "aten.masked_fill.Scalar": _masked_fill,
    "aten.masked_fill_.Scalar": _masked_fill,
    "aten.diff.default": _diff,
    "aten.zeros.default": _full(0.0),
    "aten.ones.default": _full(1.0),
    "aten.full.default": _full(None),
    # the result may be the input itself
    "aten.view.default": _reshape,
    "aten.reshape.default": _reshape,
    "aten._unsafe_view.default": _reshape,
    "aten.unsqueeze.default": _reshape,
    "aten.squeeze.dim": _reshape,
    "aten.squeeze.dims": _reshape,
    "aten.squeeze.default": _reshape,
    "aten.unflatten.int": _reshape,
    "aten.t.default": _t,
    "aten.cat.default": _cat,
    "aten.concat.default": _cat,
    "aten.slice.Tensor": _slice,
    "aten.dropout.default": _dropout,
    "aten.dropout_.default": _dropout,
    "aten.to.dtype": _to,
    "aten.to.dtype_layout": _to,
    "aten.to.device": _to,
    "aten._to_copy.default": _to,
    # always the value itself: copies, layout changes
    "aten.contiguous.default": _alias,
    "aten.clone.default": _alias,
    "aten.alias.default": _alias,
    "aten.detach.default": _alias,
    "aten.lift_fresh_copy.default": _alias,
}


class _Functions(MutableMapping[str, Row]):
    """Traced ATen operation -> row: :data:`_IMPORTER_ROWS` over the rows the registered ops declare. The
    declarations are read again whenever the registry changes (so a plugin op's are in it once loaded); each
    declared row is made the first time it is looked up, so a bad declaration fails the import that meets it.

    An entry set here stands over the declared row (a test's stand-in); setting the declared row back, or
    deleting the entry, removes it.
    """

    def __init__(self, own: dict[str, Row]) -> None:
        self._own = own
        self._declared: dict[str, tuple[str, ImportRow]] = {}
        self._made: dict[str, Row] = {}
        self._seen = -1

    def _declarations(self) -> dict[str, tuple[str, ImportRow]]:
        # Iterating the registry loads the plugins first; each load registers, which moves the version on.
        if self._seen != registry.version or not registry._plugins_loaded:
            ops = list(registry)
            self._seen = registry.version
            self._declared = {target: (o.name, row) for o in ops for target, row in o.imports.items()}
            self._made = {}
        return self._declared

    def _declared_row(self, target: str) -> Row:
        op, declared = self._declarations()[target]
        if target not in self._made:
            self._made[target] = _make_row(op, target, declared)
        return self._made[target]

    def __getitem__(self, target: str) -> Row:
        if target in self._own:
            return self._own[target]
        return self._declared_row(target)

    def __iter__(self) -> Iterator[str]:
        return iter({**self._declarations(), **self._own})

    def __len__(self) -> int:
        return len(self._declarations().keys() | self._own.keys())

    def __setitem__(self, target: str, row: Row) -> None:
        if target in self._declarations() and self._declared_row(target) is row:
            self._own.pop(target, None)
        else:
            self._own[target] = row

    def __delitem__(self, target: str) -> None:
        del self._own[target]

    def __repr__(self) -> str:
        return f"FUNCTIONS({len(self)} rows)"


def _make_row(op: str, target: str, declared: ImportRow) -> Row:
    """The row op ``op`` declares for ``target`` (:attr:`hndl.OpDef.imports`), made by its kind.

    Raises:
        HndlError: ``E_OP`` for a kind the importer does not have, or options the kind does not take.
    """
    make = ROW_KINDS.get(declared.kind)
    try:
        if make is None:
            raise ValueError(f"the importer has no row kind {declared.kind!r} (it has {', '.join(ROW_KINDS)})")
        return make(op, **declared.options)
    except (TypeError, ValueError) as exc:
        raise HndlError(
            Problem(
                "E_OP",
                f"op {op!r} declares the import of {target} with the row {declared.kind!r}: {exc}",
                hint="declare a kind of hndl.importer.ROW_KINDS with the options it takes",
            )
        ) from None


#: Traced ATen operation -> row: the importer's own rows and those the registered ops declare.
FUNCTIONS: MutableMapping[str, Row] = _Functions(_IMPORTER_ROWS)

#: Traced operations common models use that no row takes yet -> what would take them. Each hndl op of issues 21
#: and 22 that these models need has its row above; what is left has no hndl op, or an op whose meaning differs.
PENDING: dict[str, str] = {
    "aten.cumprod.default": "a cumprod op",
}
