"""What makes a GraphModule's next call validate again: the signature, the state version and the stores record.

The generated call (:mod:`._codegen`) takes the fast path only while every guard of :func:`call_guards` holds;
otherwise it validates. This module owns all of them, as source text that the generated code inlines and that
tests and benchmarks evaluate as they are (:meth:`StoresRecord.matches`), so there is no second copy to drift:

``sig in sigs``: the call's *signature* (:func:`signature_source`: each input's shape, dtype and device, and
    the model's state version) is one that validated before. The state version changes (:func:`bump`) when
    PyTorch's registration hooks report a parameter, buffer or submodule registered on a module of the model
    (:mod:`._hooks` installs them and knows which models own which modules), and when the model is converted
    (``GraphModule._apply``: ``.to()``, ``.half()``, ...).

The stores record (:func:`take_record`) catches what no hook reports: ``del module.weight``, direct writes to
``module._parameters``, ``_buffers`` or ``_modules``, hooks added or removed. It remembers the tree's store
dicts as they were when the registered state last matched the build, and compares them with the live dicts
using C-level builtins only:

``live == copies``
    dicts whose *values* matter, against copies taken at record time: the non-empty submodule dicts (a
    submodule replaced, set to ``None``, added or removed) and non-empty hook dicts. ``tuple.__eq__`` and
    ``dict.__eq__`` compare identity first, so equal dicts cost a length check and one pointer compare per
    entry. The copies hold only modules and hook functions, never a tensor.
``not any(empty)``
    every dict that was empty. An empty dict equals its empty copy exactly when it is still empty, so the
    empty ``_parameters``/``_buffers``/``_modules`` and the (normally empty) hook dicts need only a truth test,
    the cheapest C-level check there is.
``tuple(map(len, tensors)) == lens``
    the non-empty ``_parameters``/``_buffers`` by length (an entry removed or added), then
``tuple(map(is_, chain_values(map(dict_values, tensors)), endless_none)) == nones``
    which of their values are ``None`` (a bias set to ``None`` by a direct write).

A guard with nothing to compare (no empty dict, say) is left out of the generated code. The record holds the
live dicts themselves (the tree owns them anyway) and no tensor: a tensor swapped in under its registered name
(``torch.func.functional_call``) is not kept alive, is never compared with ``Tensor.__eq__``, and is not a
change. What none of this detects is listed in SPEC.md section 11.2.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, fields
from itertools import chain, repeat
from typing import Any

import torch.nn.modules.module as _torch_module
from torch import nn

from ._state import walk_modules

__all__ = [
    "GLOBAL_HOOK_DICTS",
    "SIGNATURE",
    "SYMBOLIC_SIGNATURE",
    "VERSION_ATTR",
    "Guard",
    "StoresRecord",
    "bump",
    "call_guards",
    "global_hooks_active",
    "hook_dicts",
    "signature_source",
    "take_record",
]


@dataclass(frozen=True)
class Guard:
    """One condition of the fast path: a Python expression that is true while nothing it watches changed."""

    source: str
    catches: str  # what a false result means, in words


SIGNATURE = Guard("sig in sigs", "a new input shape, dtype or device, or a new state version")
# Where static inference proved the graph for every binding of its symbols (see ._symbolic), a shape not yet
# remembered is admitted after a check of the inputs alone, once its dtype/device pattern validated fully.
SYMBOLIC_SIGNATURE = Guard(
    "(sig in sigs or admit(self, sig, args))",
    "a new dtype/device pattern or state version, or inputs that break their contracts",
)
HOOKS = Guard("live == copies", "a hook added or removed (non-empty hook dicts, against copies)")
STILL_EMPTY = Guard("not any(empty)", "an entry added to a dict that was empty")
SUBMODULES = Guard(
    "tuple(map(id, chain_values(map(dict_values, submodules)))) == submodule_ids",
    "a submodule replaced or set to None (by identity: a submodule whose __eq__ lies is still seen)",
)
_KEYS = "tuple(map(tuple, keyed))"
KEYS = Guard(f"{_KEYS} == keys", "a name added, removed or renamed, or a reorder, in a non-empty store dict")
_SHAPES = "tuple(map(getattr, chain_values(map(dict_values, tensors)), endless_shape, endless_none))"
_DTYPES = "tuple(map(getattr, chain_values(map(dict_values, tensors)), endless_dtype, endless_none))"
SHAPES = Guard(
    f"{_SHAPES} == shapes", "a parameter or buffer set to None or set from None, or its shape changed in place"
)
DTYPES = Guard(f"{_DTYPES} == dtypes", "a parameter or buffer whose dtype changed in place (t.data = ...)")
_TYPES = "tuple(map(type, modules))"
TYPES = Guard(f"{_TYPES} == types", "a module's __class__ swapped")
_ATTRS = "tuple(map(len, instance_dicts))"
ATTRS = Guard(
    f"{_ATTRS} == attr_counts",
    "an instance attribute added to or removed from a node's layer (forward reassigned, Module.compile())",
)

# The helpers the guards' sources call, as globals of the generated code. ``repeat(...)`` never runs out and
# holds no position, so one instance serves every call.
_HELPERS: dict[str, Any] = {
    "chain_values": chain.from_iterable,
    "dict_values": dict.values,
    "endless_none": repeat(None),
    "endless_shape": repeat("shape"),
    "endless_dtype": repeat("dtype"),
}
_MEASURE = compile(f"({_KEYS}, {_SHAPES}, {_DTYPES}, {_TYPES}, {_ATTRS})", "<hndl guards>", "eval")


# --- the signature and the state version -------------------------------------------------------------------

#: Where a GraphModule keeps its state version (in ``__dict__``, read by the generated signature).
VERSION_ATTR = "_state_version"

# State versions come from one process-wide counter, so a version is never reused by any GraphModule.
_versions = itertools.count(1)


def bump(gm: nn.Module) -> None:
    """Give ``gm`` a new state version: its next call validates. Writes ``__dict__`` directly (no Module hooks)."""
    gm.__dict__[VERSION_ATTR] = next(_versions)


def signature_source(input_locals: Sequence[str]) -> str:
    """The expression the generated call builds its signature with, over the locals holding the inputs.

    Reading ``.shape`` of something that is not a tensor raises ``AttributeError``: the call then validates,
    which reports it.
    """
    parts = [f"{a}.shape, {a}.dtype, {a}.device" for a in input_locals]
    return "(" + ", ".join([*parts, f"self.{VERSION_ATTR}"]) + ("," if not parts else "") + ")"


# --- hooks the fast path must honour -------------------------------------------------------------------------

#: The global hook dicts ``nn.Module._call_impl`` consults. Registering a global hook mutates one of these in
#: place, so the stores record can watch them.
GLOBAL_HOOK_DICTS: tuple[dict[Any, Any], ...] = (
    _torch_module._global_forward_hooks,
    _torch_module._global_forward_pre_hooks,
    _torch_module._global_backward_hooks,
    _torch_module._global_backward_pre_hooks,
)


def hook_dicts(module: nn.Module) -> tuple[dict[Any, Any], ...]:
    """The four per-module hook dicts ``nn.Module._call_impl`` checks before calling ``forward``."""
    return (module._forward_hooks, module._forward_pre_hooks, module._backward_hooks, module._backward_pre_hooks)


def global_hooks_active() -> bool:
    """Whether any global forward/backward hook is registered (then every module runs through ``__call__``)."""
    return any(GLOBAL_HOOK_DICTS)


# --- the stores record ------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class StoresRecord:
    """An immutable snapshot of the tree's store dicts, and the guards that compare it with the live ones."""

    live: tuple[dict[Any, Any], ...]  # non-empty hook dicts
    copies: tuple[dict[Any, Any], ...]
    empty: tuple[dict[Any, Any], ...]
    submodules: tuple[dict[Any, Any], ...]  # non-empty _modules dicts
    submodule_ids: tuple[int, ...]
    keyed: tuple[dict[Any, Any], ...]  # non-empty _modules, _parameters, _buffers dicts
    keys: tuple[tuple[str, ...], ...]
    tensors: tuple[dict[Any, Any], ...]  # non-empty _parameters and _buffers dicts
    shapes: tuple[Any, ...]
    dtypes: tuple[Any, ...]
    modules: tuple[nn.Module, ...]
    types: tuple[type, ...]
    instance_dicts: tuple[dict[str, Any], ...]  # the node layers' __dict__
    attr_counts: tuple[int, ...]

    @property
    def guards(self) -> tuple[Guard, ...]:
        """The comparisons that have something to compare, in the order the generated call evaluates them."""
        guards: list[Guard] = [TYPES] if self.modules else []
        if self.live:
            guards.append(HOOKS)
        if self.empty:
            guards.append(STILL_EMPTY)
        if self.submodules:
            guards.append(SUBMODULES)
        if self.keyed:
            guards.append(KEYS)
        if self.tensors:
            guards += (SHAPES, DTYPES)
        if self.instance_dicts:
            guards.append(ATTRS)
        return tuple(guards)

    @property
    def namespace(self) -> dict[str, Any]:
        """The globals the guards read: the record's tuples and the helpers their sources call."""
        names = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**names, **_HELPERS}

    @property
    def source(self) -> str:
        """The guards joined as the generated call inlines them (``"True"`` when there is nothing to compare)."""
        return " and ".join(g.source for g in self.guards) or "True"

    def matches(self) -> bool:
        """Whether the live dicts still look as recorded: the generated call's own comparison, evaluated here."""
        return bool(eval(self.source, self.namespace))

    @property
    def counts(self) -> tuple[int, int, int]:
        """(hook dicts compared with copies, empty dicts, parameter/buffer dicts compared by names and shapes)."""
        return len(self.live), len(self.empty), len(self.tensors)


def call_guards(record: StoresRecord, symbolic: bool = False) -> tuple[Guard, ...]:
    """Every condition of the fast path for ``record``: the record's comparisons, then the signature (admitted
    symbolically when ``symbolic``; last, so a shape is only admitted while the registered state still matches)."""
    return (*record.guards, SYMBOLIC_SIGNATURE if symbolic else SIGNATURE)


def take_record(root: nn.Module, leaves: Sequence[nn.Module]) -> StoresRecord:
    """Snapshot the store dicts of ``root``'s tree, the hook dicts and instance dicts of the node modules
    ``leaves``, and the global hook dicts."""
    live: list[dict[Any, Any]] = []
    empty: list[dict[Any, Any]] = []
    submodules: list[dict[Any, Any]] = []
    keyed: list[dict[Any, Any]] = []
    tensors: list[dict[Any, Any]] = []
    modules: list[nn.Module] = []
    for _path, module in walk_modules(root):
        modules.append(module)
        if module._modules:
            submodules.append(module._modules)
            keyed.append(module._modules)
        else:
            empty.append(module._modules)
        for store in (module._parameters, module._buffers):
            if store:
                keyed.append(store)
                tensors.append(store)
            else:
                empty.append(store)
    seen: set[int] = set()
    instance_dicts: list[dict[str, Any]] = []
    for leaf in leaves:
        if id(leaf) not in seen:  # one module may serve as two nodes' layer
            seen.add(id(leaf))
            instance_dicts.append(leaf.__dict__)
            for d in hook_dicts(leaf):
                (live if d else empty).append(d)
    for d in GLOBAL_HOOK_DICTS:
        (live if d else empty).append(d)
    namespace = {**_HELPERS, "keyed": keyed, "tensors": tensors, "modules": modules, "instance_dicts": instance_dicts}
    keys, shapes, dtypes, types, attr_counts = eval(_MEASURE, namespace)
    return StoresRecord(
        live=tuple(live),
        copies=tuple(dict(d) for d in live),
        empty=tuple(empty),
        submodules=tuple(submodules),
        submodule_ids=tuple(map(id, chain.from_iterable(d.values() for d in submodules))),
        keyed=tuple(keyed),
        keys=keys,
        tensors=tuple(tensors),
        shapes=shapes,
        dtypes=dtypes,
        modules=tuple(modules),
        types=types,
        instance_dicts=tuple(instance_dicts),
        attr_counts=attr_counts,
    )
