"""In-place fills of a region of a tensor made in the traced graph, written out of place as ``fill_region``.

Swin's shifted-window mask is a ``new_zeros`` of the padded map's size, filled region by region through slices
(``mask[h0:h1, w0:w1] = count``), then read. At a fixed size that folds into a constant (``_fold``); at sizes a
dynamic dim sets it cannot, and each ``fill_`` is one ``fill_region`` node instead: the tensor as the writes before
left it, with the value written into the region the chain of slices names. The slice bounds are torch's own (``0``,
``-2``, to the end), so the region follows the size on every call.

What reads the tensor after a write reads the last ``fill_region`` before it (:meth:`RegionWrites.current`). A view
of the tensor made before a write and read after it would see the write in torch and not here; those reads stay
refused (``_aliases``), as does any write that is not a scalar fill through slices of the tensor itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ._site import _INT64_MAX, Alias, Emit

__all__ = ["RegionWrites"]

_FILLS = {"aten.fill_.Scalar", "aten.fill_.Tensor"}
_SLICE = "aten.slice.Tensor"


class RegionWrites:
    """The scalar fills through slices of a tensor made in the graph that do not fold, and what each reader of
    such a tensor reads instead of it.

    Args:
        nodes: the traced nodes, in order.
        refused: the in-place writes folding refused (``Folding.refused``): only those are written out of place.
        made_inside: whether a traced value is made in the graph (not an input, parameter, buffer or constant).
        constants: the values folding computed at import (``Folding.values``): a fill's value may be one, a 0-d
            tensor (``mask[a:b] = count`` traces as ``fill_.Tensor`` of a constant).
    """

    def __init__(
        self, nodes: Iterable[Any], refused: Mapping[Any, str], made_inside: Any, constants: Mapping[Any, Any]
    ) -> None:
        self.position: dict[Any, int] = {}
        #: write node -> (the tensor written, fill_region's parameters)
        self.writes: dict[Any, tuple[Any, dict[str, Any]]] = {}
        #: the slices that only lead to a write, and the constants only written: no node of their own
        self.absorbed: set[Any] = set()
        #: a fill of this kind left refused -> why (said instead of folding's reason)
        self.why: dict[Any, str] = {}
        by_root: dict[Any, list[Any]] = {}
        for i, n in enumerate(nodes):
            self.position[n] = i
            if n not in refused or str(n.target) not in _FILLS:
                continue
            found = _region(n, constants)
            if found is None or not made_inside(found[0]):
                continue
            if n.users:  # left refused: fill_region gives the whole tensor, not the view fill_ returns
                self.why[n] = (
                    "a fill into slices whose own result (the region it wrote) is read: only a fill whose result "
                    "nothing reads is written out of place (fill_region gives the whole tensor)"
                )
                continue
            root, params, chain = found
            self.writes[n] = (root, params)
            by_root.setdefault(root, []).append(n)
            self.absorbed.update(v for v in chain if all(u in self.writes or u in chain for u in v.users))
            value = n.args[1]
            if hasattr(value, "op") and all(u in self.writes for u in value.users):
                self.absorbed.add(value)  # a constant read as fill_region's value, not as a tensor
        #: tensor written -> its writes, in order
        self.by_root = by_root

    def __contains__(self, n: Any) -> bool:
        return n in self.writes

    def handles_read(self, arg: Any, root: Any, write: int) -> bool:
        """Whether reading ``arg`` (of memory ``root``) after the write at position ``write`` is written out of
        place here: ``arg`` is the tensor itself and the write is one of these fills."""
        return arg is root and any(self.position[w] == write for w in self.by_root.get(root, ()))

    def current(self, value: Any, at: int) -> Any:
        """What a node at position ``at`` reads for ``value``: the last fill of it before ``at``, else itself."""
        last = value
        for w in self.by_root.get(value, ()):
            if self.position[w] < at:
                last = w
        return last

    def emit(self, n: Any) -> Emit:
        """The ``fill_region`` of write ``n``, on the tensor as the writes before it left it."""
        root, params = self.writes[n]
        return Emit("fill_region", [self.current(root, self.position[n])], dict(params))

    def redirect(self, result: Any, at: int) -> Any:
        """``result`` (a row's :class:`Emit` or :class:`Alias`) with each read of a written tensor made a read of
        its last fill."""
        if not self.by_root:
            return result
        if isinstance(result, Alias):
            return Alias(self.current(result.value, at))
        if not isinstance(result, Emit):
            return result
        result.inputs = [self.redirect(v, at) if isinstance(v, Emit) else self.current(v, at) for v in result.inputs]
        return result


def _region(n: Any, constants: Mapping[Any, Any]) -> tuple[Any, dict[str, Any], list[Any]] | None:
    """For ``fill_(view, value)``: the tensor the view slices, ``fill_region``'s parameters, and the slices; ``None``
    unless the view is a chain of constant slices (each dim once) and the value a number or a constant 0-d
    tensor."""
    target, value = n.args[0], n.args[1]
    if hasattr(value, "op"):
        held = constants.get(value)
        if held is None or getattr(held, "shape", None) != () or held.dtype.is_complex:
            return None
        value = held.item()
    if not isinstance(value, (int, float)):
        return None
    chain: list[Any] = []
    slices: dict[int, tuple[int, int | None, int]] = {}
    while getattr(target, "op", "") == "call_function" and str(target.target) == _SLICE:
        args = list(target.args) + [None] * (5 - len(target.args))
        _, dim, start, end, step = args
        dim = 0 if dim is None else dim
        start = 0 if start is None else start
        step = 1 if step is None else step
        if not all(isinstance(v, int) for v in (dim, start, step)) or not (end is None or isinstance(end, int)):
            return None
        rank = len(target.args[0].meta["val"].shape)
        dim %= rank
        if dim in slices:
            return None
        slices[dim] = (start, None if end is not None and end >= _INT64_MAX else end, step)
        chain.append(target)
        target = target.args[0]
    if not chain:
        return None
    dims = sorted(slices)
    params: dict[str, Any] = {
        "dims": dims,
        "start": [slices[d][0] for d in dims],
        "end": [slices[d][1] for d in dims],
        "value": float(value),
    }
    if any(slices[d][2] != 1 for d in dims):
        params["step"] = [slices[d][2] for d in dims]
    return target, params, chain
