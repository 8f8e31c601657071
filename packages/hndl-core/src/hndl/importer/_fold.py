"""Import-time constant folding: traced operations whose values the model's inputs cannot change.

An operation *folds* when everything it reads folds too: a buffer or constant tensor of the module, numbers,
or another folding operation, and never a model input, a parameter, or a size of an input. ``new_ones``,
``zeros_like`` and their kin read only the dtype and device of their tensor argument (and the ``*_like`` ones
its shape, which must then be fixed), so that argument does not count. Random operations never fold.

An in-place write (``fill_``, ``copy_``, ``index_put_``, a slice assignment) folds when it writes values that fold
into a tensor made inside the folded region (never a buffer: that changes the module's state), as Swin's
shifted-window mask is: ``new_zeros`` filled region by region through slices. The values are computed in trace
order with real views, so each read sees the writes before it; a write after an operation that does not fold
read the memory does not fold (that read would see the final value). At sizes a dynamic dim sets, the tensor does
not fold, and since no op writes in place the import refuses, saying why (:attr:`Folding.refused`).

Such a value is the same on every call the graph admits: it depends on no input's values, and on no input
size either, since a size that ``dynamic_shapes`` leaves free is a traced symbol (a ``sym_size`` node, which
reads the input) and a fixed size is the same on every call. So it is computed once, at import, from the
module's buffers, and the last folding value before an operation that does not fold (the *frontier*) becomes a
``buffer`` node that reproduces it: a formula where one fits (``zeros``, ``ones``, ``full``, ``arange``), else
the integers themselves (``init: values``), non-persistent, so the spec alone rebuilds it. A floating value no
formula fills, or a large one, is not folded: the operations that made it are translated as usual.

The attention masks transformers builds at a fixed sequence length are such values (``arange``, ``cumsum``,
indexing by a tensor, ``new_ones``), as are BERT's position and token type ids (buffers, sliced and gathered).
A non-persistent buffer read as data is folded with the value it holds at import (no checkpoint holds another);
the translator keeps a persistent one a ``buffer`` node its key loads into, and a constant computed from one
records the value it used, which ``ImportedGraph.convert`` holds a checkpoint to.

A floating constant may take its dtype from the activations: ``h.new_full(...)``, ``zeros_like(h)``,
``arange(n, dtype=h.dtype)``, ``torch.tensor(2.0, dtype=x.dtype)``, ``cos.to(x.dtype)``. The trace writes that
dtype as a plain float32, which autocast, a float16 input or ``.double()`` change at run time. Nothing in one trace
tells such a constant from one made float32 on purpose, so the import traces the module a second time with its
floating inputs and parameters in float64 (``_trace.retrace_float64``; buffers keep their dtype, as a graph's
``buffer`` nodes follow ``.to()`` by themselves) and :func:`followers` compares each frontier value's dtype in the
two traces: one whose dtype changed follows the activations, and the translator casts its ``buffer`` node to the
dtype of the activation it meets (``type_as``). The value written out is the float32 one when the float64 trace
computed the same number, the float64 one when that rounds to the float32 one (``torch.tensor(0.1,
dtype=x.dtype)``), and otherwise (``torch.finfo(x.dtype).min``) the value itself depends on the dtype: refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._table import Emit, Unsupported

__all__ = ["MAX_VALUES", "META_ONLY", "Folding", "fold", "followers", "same_program"]

#: The most elements a folded value written out as ``init: values`` may have.
MAX_VALUES = 65536

#: Operations that read only the dtype, device (and for ``*_like`` the shape) of their first argument.
META_ONLY = {
    "aten.new_ones.default",
    "aten.new_zeros.default",
    "aten.new_full.default",
    "aten.ones_like.default",
    "aten.zeros_like.default",
    "aten.full_like.default",
}


#: Operations whose schema says they write their argument, but which change only autograd's view of it, not a
#: value: ``torch.tensor(2.0)`` traces as ``detach_(lift_fresh_copy(constant))``.
_NO_WRITE = {"aten.detach_.default"}


class Folding:
    """The folding operations of a traced graph, their values, and the ``buffer`` node of each frontier value.

    Attributes:
        folded: the traced nodes that fold (no node of their own, unless in ``frontier``).
        frontier: traced node -> the ``buffer`` :class:`Emit` that reproduces its value.
        values: folded traced node -> its value at import.
        refused: an in-place write into a tensor made in the traced graph that did not fold -> why (no op writes
            in place, so the translator gives this reason instead of a missing op).
    """

    def __init__(
        self,
        folded: set[Any],
        frontier: dict[Any, Emit],
        values: dict[Any, Any],
        refused: dict[Any, str] | None = None,
    ) -> None:
        self.folded = folded
        self.frontier = frontier
        self.values = values
        self.refused = refused if refused is not None else {}


def fold(nodes: Iterable[Any], sources: Mapping[str, Any]) -> Folding:
    """The folding of ``nodes`` (a traced graph's nodes, in order).

    Args:
        sources: placeholder name -> the tensor a buffer or constant placeholder holds (what folds from).
    """
    import torch

    nodes = list(nodes)
    roots = _roots(nodes)
    folds: set[Any] = set()
    for n in nodes:
        if n.op == "placeholder":
            if n.name in sources:
                folds.add(n)
        elif n.op == "call_function" and _folds(n, folds, roots, torch):
            folds.add(n)
    # A tensor something writes into in place (an operation that does not fold) has another value after the
    # write than before: nothing that shares its memory folds, and nothing computed from those.
    for n in nodes:
        if n not in folds:
            for written in _written(n):
                if written in folds:
                    _drop_related(written, folds)
    # A folded write is evaluated where the trace has it, so what reads the tensor before it and after it sees
    # what it saw in the module; an operation that does not fold reads the folded value only once, though, so
    # one that reads the memory before a folded write into it refuses that write's folding, and evaluation
    # starts again without it (each round folds fewer operations).
    after_read: set[Any] = set()
    while True:
        values, late = _evaluate(nodes, folds, sources, torch)
        if not late:
            break
        after_read.update(late)
        for n in late:
            for written in _written(n):
                _drop_related(written, folds)
    # A frontier value no buffer can reproduce keeps its operation: it and what it reads are translated, and
    # what that reads becomes the frontier instead, until every frontier value has its buffer.
    written_roots = {roots[w] for n in nodes if n in folds for w in _written(n)}
    while True:
        frontier: dict[Any, Emit] = {}
        refused = []
        for n in nodes:
            if n not in folds or not isinstance(n.meta.get("val"), torch.Tensor):
                continue
            if not any(u not in folds for u in n.users):
                continue
            try:
                frontier[n] = _buffer(values[n], torch)
            except Unsupported:
                refused.append(n)
        if not refused:
            kept = {n: v for n, v in values.items() if n in folds}
            return Folding(folds, frontier, kept, _why_not(nodes, folds, roots, after_read))
        for n in refused:
            if roots[n] in written_roots:
                _drop_related(n, folds)  # memory a folded write changes: the writes are translated, or refused
            else:
                folds.discard(n)


def _evaluate(
    nodes: Sequence[Any], folds: set[Any], sources: Mapping[str, Any], torch: Any
) -> tuple[dict[Any, Any], list[Any]]:
    """The value of each folding node, in trace order, and the folded writes into memory that an operation that
    does not fold had read before (or that failed half way), for :func:`fold` to unfold."""
    values: dict[Any, Any] = {}
    read_outside: set[int] = set()  # storages an operation that does not fold has read so far
    late: list[Any] = []
    with torch.no_grad():
        for n in nodes:
            if n not in folds:
                read_outside.update(_storage(values.get(a)) for a in n.all_input_nodes if a in folds)
                continue
            if n.op == "placeholder":
                values[n] = sources[n.name].clone()  # never the module's own tensor
                continue
            written = [w for w in _written(n) if w in values]
            if any(_storage(values[w]) in read_outside for w in written):
                late.append(n)
                continue
            args, kwargs = torch.fx.node.map_arg(
                (n.args, n.kwargs), lambda a: values[a] if a in values else _stand_in(a, torch)
            )
            try:
                values[n] = n.target(*args, **kwargs)
            except Exception:
                folds.discard(n)
                _drop_users(n, folds)
                if written:
                    late.append(n)  # memory it may have half written: what shares it does not fold
    read_outside.discard(0)
    return values, late


def _storage(value: Any) -> int:
    """Which memory a tensor value lives in (0 for none)."""
    storage = getattr(value, "untyped_storage", None)
    return int(storage().data_ptr()) if storage is not None and storage().nbytes() else 0


def _roots(nodes: Sequence[Any]) -> dict[Any, Any]:
    """Traced node -> the node that made the memory it views (itself when it makes new memory), as each
    operation's schema says (a return marked ``Tensor(a)`` views the argument marked so)."""
    roots: dict[Any, Any] = {}
    for n in nodes:
        roots[n] = n
        schema = getattr(n.target, "_schema", None) if n.op == "call_function" else None
        if schema is None:
            if n.op == "call_function" and str(n.target) == "<built-in function getitem>" and n.args:
                roots[n] = roots.get(n.args[0], n)
            continue
        if not schema.returns or schema.returns[0].alias_info is None:
            continue
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and i < len(n.args) and hasattr(n.args[i], "op"):
                roots[n] = roots.get(n.args[i], n)
                break
    return roots


def _written(n: Any) -> list[Any]:
    """The traced tensors ``n`` writes into in place (its schema's ``Tensor(a!)`` arguments)."""
    schema = getattr(n.target, "_schema", None) if n.op == "call_function" else None
    if schema is None or not schema.is_mutable or str(n.target) in _NO_WRITE:
        return []
    found = []
    for i, arg in enumerate(schema.arguments):
        value = n.args[i] if i < len(n.args) else n.kwargs.get(arg.name)
        if arg.alias_info is not None and arg.alias_info.is_write and hasattr(value, "op"):
            found.append(value)
    return found


#: What the importer writes out of place of the writes that do not fold (``_region_writes``).
_ONLY_FILLS = "only a number filled into slices of it (x[a:b, c:d] = v) is written out of place (fill_region)"


def _why_not(nodes: Sequence[Any], folds: set[Any], roots: Mapping[Any, Any], after_read: set[Any]) -> dict[Any, str]:
    """Why each in-place write into a tensor made in the traced graph did not fold (only a number filled into a
    region of slices is written out of place, as ``fill_region``: ``_region_writes``): traced node -> the reason. ``after_read``: the writes that came after an
    operation that does not fold read the memory they write."""
    found: dict[Any, str] = {}
    for n in nodes:
        written = _written(n)
        if n in folds or not written or any(roots[w].op == "placeholder" for w in written):
            continue
        root = roots[written[0]]
        if n in after_read:
            found[n] = (
                f"writes in place into {root.name!r} ({root.target}) after an operation that does not fold read "
                "it: a folded constant has one value, which that read would not see, and "
                f"{_ONLY_FILLS}"
            )
        elif not all(isinstance(s, int) for s in getattr(root.meta.get("val"), "shape", ())):
            found[n] = (
                f"writes in place into {root.name!r} ({root.target}), whose sizes follow a dynamic dim: "
                "a tensor made and written in place folds into a constant at import only at fixed sizes, and "
                f"{_ONLY_FILLS}"
            )
        else:
            found[n] = (
                f"writes in place into {root.name!r} ({root.target}), and the tensor or the value written depends "
                "on the inputs: a tensor made and written in place imports only as a constant folded at import, "
                f"and {_ONLY_FILLS}"
            )
    return found


def _folds(n: Any, folds: set[Any], roots: Mapping[Any, Any], torch: Any) -> bool:
    target = str(n.target)
    tags = getattr(n.target, "tags", ())
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if any(roots[w].op == "placeholder" for w in _written(n)):
        return False  # a write into a buffer or constant changes the module's state: never folded
    value = n.meta.get("val")
    if isinstance(value, torch.Tensor) and not all(isinstance(s, int) for s in value.shape):
        return False
    if isinstance(value, torch.SymInt):
        return False
    args: list[Any] = list(n.args)
    if target in META_ONLY and args:
        args = args[1:]  # its dtype may follow that activation's: followers() tells, from a second trace
    read: list[Any] = []
    torch.fx.node.map_arg((args, n.kwargs), read.append)
    leaves, _ = torch.utils._pytree.tree_flatten((args, n.kwargs))
    if any(isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) for a in leaves):
        return False
    if not read and not isinstance(value, torch.Tensor):
        return False  # reads nothing and makes no tensor (an assertion): left alone
    return all(a in folds for a in read)


def _stand_in(n: Any, torch: Any) -> Any:
    """A tensor of the traced value's dtype (and shape, where fixed): what ``new_ones`` and kin read of it."""
    value = n.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    return torch.zeros([s if isinstance(s, int) else 0 for s in value.shape], dtype=value.dtype)


def _drop_related(n: Any, folds: set[Any]) -> None:
    """Unfold ``n``, what it was computed from, and everything computed from any of those."""
    stack, seen = [n], set()
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        stack.extend(a for a in m.all_input_nodes if a in folds)
    for m in seen:
        folds.discard(m)
        _drop_users(m, folds)


def _drop_users(n: Any, folds: set[Any]) -> None:
    for u in n.users:
        if u in folds:
            folds.discard(u)
            _drop_users(u, folds)


def _buffer(value: Any, torch: Any) -> Emit:
    """A ``buffer`` node that gives ``value``: a formula where one fits, else its integers."""
    shape = [int(s) for s in value.shape]
    dtype = str(value.dtype).removeprefix("torch.")
    params: dict[str, Any] = {"shape": shape, "persistent": False}
    flat = value.detach().reshape(-1)
    if value.dtype == torch.bool or not value.is_floating_point():
        ints = flat.to(torch.int64)
        params["dtype"] = dtype
        if flat.numel() and bool((ints == 0).all()):
            return Emit("buffer", [], {**params, "init": "zeros"})
        if flat.numel() and bool((ints == 1).all()):
            return Emit("buffer", [], {**params, "init": "ones"})
        if value.dtype != torch.bool and flat.numel() > 1:
            start, step = int(ints[0]), int(ints[1] - ints[0])
            if step and torch.equal(ints, start + step * torch.arange(flat.numel())):
                return Emit("buffer", [], {**params, "init": "arange", "start": start, "step": step})
        if flat.numel() > MAX_VALUES:
            raise Unsupported(f"a constant of {flat.numel()} elements (more than {MAX_VALUES} to write out)")
        return Emit("buffer", [], {**params, "init": "values", "values": [int(v) for v in ints.tolist()]})
    if flat.numel() and bool(torch.isfinite(flat[0])) and bool((flat == flat[0]).all()):
        return Emit("buffer", [], {**params, "init": "full", "value": float(flat[0]), "dtype": dtype})
    if not bool(torch.isfinite(flat).all()):
        raise Unsupported("a floating constant with infinities or NaNs, which no buffer formula reproduces")
    if flat.numel() > MAX_VALUES:
        raise Unsupported(f"a constant of {flat.numel()} elements (more than {MAX_VALUES} to write out)")
    # float64 holds every float32, float16 and bfloat16 value exactly, and YAML writes a float64 exactly.
    return Emit("buffer", [], {**params, "init": "values", "values": flat.to(torch.float64).tolist(), "dtype": dtype})


def same_program(nodes: Sequence[Any], twin: Sequence[Any]) -> str:
    """Empty when two traces of the same module (``nodes`` and ``twin``) are the same program, operation by operation,
    so that a value of one is the value at the same position in the other; else how they differ."""
    if len(nodes) != len(twin):
        return f"{len(nodes)} traced operations against {len(twin)}"
    for n, m in zip(nodes, twin):
        if n.op != m.op or str(n.target) != str(m.target) or len(n.args) != len(m.args):
            return f"{n.target} against {m.target} at {n.name!r}"
    return ""


def followers(folding: Folding, nodes: Sequence[Any], twin: Folding, twin_nodes: Sequence[Any]) -> dict[Any, str]:
    """The frontier values of ``folding`` whose dtype follows the activations': traced node -> ``""`` when its
    ``buffer`` node, cast to the activation it meets, gives what the module computes (``folding.frontier`` then
    holds that buffer), or the reason it cannot.

    Args:
        nodes: the traced nodes ``folding`` was computed from.
        twin: the folding of the same program traced with float64 inputs and parameters (:func:`same_program`).
        twin_nodes: that program's nodes, in the same order as ``nodes``.
    """
    import torch

    at = {n: i for i, n in enumerate(nodes)}
    found: dict[Any, str] = {}
    for n in list(folding.frontier):
        value = folding.values.get(n)
        other = twin_nodes[at[n]]
        if not isinstance(value, torch.Tensor):
            continue
        wide = twin.values.get(other)
        if not isinstance(wide, torch.Tensor):
            found[n] = "the float64 trace does not compute it at import"
            continue
        if wide.dtype == value.dtype:
            continue  # the same dtype whatever the activations' dtype: provably constant
        found[n] = ""
        if not (value.is_floating_point() and wide.is_floating_point()) or wide.shape != value.shape:
            found[n] = f"it is {_typed(value)} in the trace and {_typed(wide)} with float64 activations"
        elif torch.equal(wide, value.to(wide.dtype)):
            pass  # the same numbers: the buffer holds them at the trace's dtype
        elif torch.equal(wide.to(value.dtype), value):
            try:  # a number rounded to the dtype (torch.tensor(0.1, dtype=x.dtype)): kept at float64, rounded after
                folding.frontier[n] = _buffer(wide, torch)
            except Unsupported as exc:
                found[n] = exc.reason
        else:
            where = int((wide.to(value.dtype) != value).reshape(-1).nonzero()[0])
            found[n] = (
                f"its value depends on the activations' dtype beyond rounding: {float(value.reshape(-1)[where]):.8g} "
                f"in the trace, {float(wide.reshape(-1)[where]):.17g} with float64 activations (as "
                "torch.finfo(x.dtype).min does)"
            )
    return found


def _typed(value: Any) -> str:
    return f"{str(value.dtype).removeprefix('torch.')} {list(value.shape)}"
