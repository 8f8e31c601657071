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
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from typing import Any

import torch.nn.modules.module as _torch_module
from torch import nn

from ._state import walk_modules

__all__ = [
    "GLOBAL_HOOK_DICTS",
    "SIGNATURE",
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
SUBMODULES_AND_HOOKS = Guard(
    "live == copies", "a submodule replaced, set to None, added or removed; a hook added or removed"
)
STILL_EMPTY = Guard("not any(empty)", "an entry added to a dict that was empty")
# What the last two guards measure; the record stores the same expressions' values at record time.
_COUNTS = "tuple(map(len, tensors))"
_NONES = "tuple(map(is_, chain_values(map(dict_values, tensors)), endless_none))"
TENSOR_COUNTS = Guard(f"{_COUNTS} == lens", "a parameter or buffer added or removed")
NONE_PATTERN = Guard(f"{_NONES} == nones", "a parameter or buffer set to None, or a None one set")

# The helpers the guards' sources call, as globals of the generated code. ``repeat(None)`` never runs out and
# holds no position, so one instance serves every call.
_HELPERS: dict[str, Any] = {
    "is_": operator.is_,
    "chain_values": chain.from_iterable,
    "dict_values": dict.values,
    "endless_none": repeat(None),
}
_MEASURE = compile(f"({_COUNTS}, {_NONES})", "<hndl guards>", "eval")


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

    live: tuple[dict[Any, Any], ...]
    copies: tuple[dict[Any, Any], ...]
    empty: tuple[dict[Any, Any], ...]
    tensors: tuple[dict[Any, Any], ...]
    lens: tuple[int, ...]
    nones: tuple[bool, ...]

    @property
    def guards(self) -> tuple[Guard, ...]:
        """The comparisons that have something to compare, in the order the generated call evaluates them."""
        guards: list[Guard] = []
        if self.live:
            guards.append(SUBMODULES_AND_HOOKS)
        if self.empty:
            guards.append(STILL_EMPTY)
        if self.tensors:
            guards += (TENSOR_COUNTS, NONE_PATTERN)
        return tuple(guards)

    @property
    def namespace(self) -> dict[str, Any]:
        """The globals the guards read: the record's tuples and the helpers their sources call."""
        return {
            "live": self.live,
            "copies": self.copies,
            "empty": self.empty,
            "tensors": self.tensors,
            "lens": self.lens,
            "nones": self.nones,
            **_HELPERS,
        }

    @property
    def source(self) -> str:
        """The guards joined as the generated call inlines them (``"True"`` when there is nothing to compare)."""
        return " and ".join(g.source for g in self.guards) or "True"

    def matches(self) -> bool:
        """Whether the live dicts still look as recorded: the generated call's own comparison, evaluated here."""
        return bool(eval(self.source, self.namespace))

    @property
    def counts(self) -> tuple[int, int, int]:
        """(dicts compared with copies, empty dicts, parameter/buffer dicts compared by length and None pattern)."""
        return len(self.live), len(self.empty), len(self.tensors)


def call_guards(record: StoresRecord) -> tuple[Guard, ...]:
    """Every condition of the fast path for ``record``: the signature first, then the record's comparisons."""
    return (SIGNATURE, *record.guards)


def take_record(root: nn.Module, leaves: Sequence[nn.Module]) -> StoresRecord:
    """Snapshot the store dicts of ``root``'s tree, the hook dicts of the node modules ``leaves`` and the global
    hook dicts."""
    live: list[dict[Any, Any]] = []
    empty: list[dict[Any, Any]] = []
    tensors: list[dict[Any, Any]] = []

    def by_value(d: dict[Any, Any]) -> None:
        (live if d else empty).append(d)

    for _path, module in walk_modules(root):
        by_value(module._modules)
        for store in (module._parameters, module._buffers):
            (tensors if store else empty).append(store)
    seen: set[int] = set()
    for leaf in leaves:
        if id(leaf) not in seen:  # one module may serve as two nodes' layer
            seen.add(id(leaf))
            for d in hook_dicts(leaf):
                by_value(d)
    for d in GLOBAL_HOOK_DICTS:
        by_value(d)
    lens, nones = eval(_MEASURE, {**_HELPERS, "tensors": tensors})
    return StoresRecord(
        live=tuple(live),
        copies=tuple(dict(d) for d in live),
        empty=tuple(empty),
        tensors=tuple(tensors),
        lens=lens,
        nones=nones,
    )
