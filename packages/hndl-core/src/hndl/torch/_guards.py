"""What makes a GraphModule's next call validate again: the signature, the state version and the stores record.

The generated call (:mod:`._codegen`) takes the fast path only while the stores record still matches the live
tree and the call's signature is known; otherwise it validates. This module owns every condition, as Python
source that the generated code inlines and that tests and benchmarks evaluate as it is, so there is no second
copy to drift:

``sig in sigs``: the call's *signature* (:func:`signature_source`: each input's shape, dtype and device, and
    the model's state version) is one that validated before. The state version changes (:func:`bump`) when
    PyTorch's registration hooks report a parameter, buffer or submodule registered on a module of the model
    (:mod:`._hooks` installs them and knows which models own which modules), and when the model is converted
    (``GraphModule._apply``: ``.to()``, ``.half()``, ...).

The stores record (:func:`take_record`) catches what no hook reports: ``del module.weight``, direct writes to
``module._parameters``, ``_buffers`` or ``_modules``, a whole store dict replaced, hooks added or removed, a
``__class__`` swap, an attribute added to a layer, a registered tensor whose shape or dtype changed in place.
It remembers the tree as it was when the registered state last matched the build, in two forms of one
comparison:

``StoresRecord.fast`` (what the generated call inlines)
    One comparison per object, unrolled into the source: ``type(r_m3) is r_t3``, ``len(r_d3) == 31``,
    ``r_d3['_parameters'] is r_s7`` (the store dict itself, so a replaced dict is seen), ``tuple(r_s7) ==
    r_k7`` (names and order), ``r_s2['n_act'] is r_v2`` (a submodule by identity: a lying ``__eq__`` cannot
    hide a replacement), ``not (r_s1 or r_s4 or ...)`` (every dict that was empty, hook dicts included), and
    one call of PyTorch's C++ tensor guard (``torch._C._dynamo.guards.TensorGuards``, what ``torch.compile``
    guards tensors with) over the registered tensors: dtype, device, shape, strides, ``requires_grad`` and
    dispatch keys, in one C++ pass that allocates nothing and holds no tensor. Measured, bytecode that touches
    each object once costs a fraction of ``tuple(map(...))`` passes inside a real call (IMPLEMENTATION.md,
    "The checked runtime"). Models with more than :data:`UNROLL_LIMIT` modules get the precise form instead
    (the unrolled source grows with the tree, and compiling it would dominate building a large graph).
``StoresRecord.precise`` (:meth:`StoresRecord.matches`)
    The same facts through ``tuple(map(...)) == recorded`` passes, with tensors compared by shape and dtype
    only. The tensor guard is stricter than the facts it stands for (a tensor swapped in without
    ``requires_grad``, ``torch.func.functional_call`` with plain tensors, a frozen parameter, a call under
    ``inference_mode`` or autocast): when ``fast`` fails, the generated call asks the model to *settle*
    (``_runtime.settle``), which evaluates ``precise``; if that holds the call stays on the fast path, and
    when the tensors are the recorded objects the record is retaken so the next call is fast again.

The record holds the live dicts themselves (the tree owns them anyway), the modules, and no tensor: a tensor
swapped in under its registered name (``torch.func.functional_call``) is not kept alive, is never compared with
``Tensor.__eq__``, and is not a change. What none of this detects is listed in SPEC.md section 11.2.
"""

from __future__ import annotations

import itertools
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import chain, repeat
from operator import itemgetter
from types import CodeType
from typing import Any

import torch.nn.modules.module as _torch_module
from torch import nn

from ._state import true_dtype, true_size


def _load_tensor_guards() -> Any:
    """PyTorch's C++ tensor guard class (what torch.compile guards tensors with), or None. It is private API, so
    it is optional: without it the precise shape and dtype comparison stands in."""
    try:
        from torch._C._dynamo import guards
    except ImportError:  # pragma: no cover - every supported torch has it
        return None
    return getattr(guards, "TensorGuards", None)


_TensorGuards: Any = _load_tensor_guards()

__all__ = [
    "GLOBAL_HOOK_DICTS",
    "SIGNATURE",
    "SYMBOLIC_SIGNATURE",
    "UNROLL_LIMIT",
    "VERSION_ATTR",
    "Guard",
    "StoresRecord",
    "bump",
    "global_hooks_active",
    "hook_dicts",
    "signature_guard",
    "signature_source",
    "take_record",
]

#: Models with more modules than this get the precise (``tuple(map(...))``) form of the stores comparison on
#: the fast path instead of the unrolled one: the unrolled source grows by a few terms per module.
UNROLL_LIMIT = 400


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


def signature_guard(symbolic: bool) -> Guard:
    """The signature condition, tested after the stores record (so a shape is only admitted symbolically while
    the registered state still matches)."""
    return SYMBOLIC_SIGNATURE if symbolic else SIGNATURE


# The registered tensors' facts, also inlined on their own where PyTorch's C++ tensor guard cannot stand in.
# Sizes and dtypes are read through torch.Tensor's own descriptors, as the kernels see them: a subclass whose
# Python ``shape`` or ``dtype`` property says otherwise is not believed (SPEC 11.2).
TENSOR_FACTS: tuple[Guard, ...] = (
    Guard(
        "tuple(map(is_, chain_values(map(dict_values, tensors)), endless_none)) == nones",
        "a parameter or buffer set to None or from None",
    ),
    Guard(
        "tuple(map(true_size, filter(present, chain_values(map(dict_values, tensors))))) == shapes",
        "a parameter's or buffer's shape changed in place (t.data = ...)",
    ),
    Guard(
        "tuple(map(true_dtype, filter(present, chain_values(map(dict_values, tensors))))) == dtypes",
        "a parameter or buffer whose dtype changed in place",
    ),
)

# The precise form: one ``tuple(map(...))`` pass per fact, over the record's tuples of live dicts.
_STORES = "_parameters", "_buffers", "_modules"
PRECISE: tuple[Guard, ...] = (
    Guard("tuple(map(type, modules)) == types", "a module's __class__ swapped"),
    # Identity by ``operator.is_`` against the recorded dicts, one single-key pass per store: no ``id`` int is
    # made and no 3-tuple per module (a third of the former ``tuple(map(id, ...)) == ids`` pass's cost at 450
    # modules). The passes cannot run short: each maps the recorded tuple of instance dicts.
    Guard(
        "all(map(is_, map(parameters_of, module_dicts), parameter_stores))"
        " and all(map(is_, map(buffers_of, module_dicts), buffer_stores))"
        " and all(map(is_, map(modules_of, module_dicts), module_stores))",
        "a whole _parameters, _buffers or _modules dict replaced (m._parameters = {...})",
    ),
    Guard("live == copies", "a hook added to or removed from a non-empty hook dict"),
    Guard("not any(empty)", "an entry added to a dict that was empty (a hook, a parameter, a submodule)"),
    # As many values as recorded while the names guard below holds (the conjunction is false otherwise).
    Guard(
        "all(map(is_, chain_values(map(dict_values, submodules)), submodule_values))",
        "a submodule replaced or set to None (by identity: a submodule whose __eq__ lies is still seen)",
    ),
    Guard("tuple(map(tuple, keyed)) == keys", "a name added, removed or renamed, or a reorder, in a store dict"),
    *TENSOR_FACTS,
    Guard(
        "tuple(map(len, instance_dicts)) == attr_counts",
        "an instance attribute added to or removed from a node's layer (forward reassigned, Module.compile())",
    ),
)

# The helpers the precise sources call. ``repeat(...)`` never runs out and holds no position, so one instance
# serves every call.
_HELPERS: dict[str, Any] = {
    "chain_values": chain.from_iterable,
    "dict_values": dict.values,
    "parameters_of": itemgetter("_parameters"),
    "buffers_of": itemgetter("_buffers"),
    "modules_of": itemgetter("_modules"),
    "endless_none": repeat(None),
    "is_": operator.is_,
    "present": partial(operator.is_not, None),
    "true_size": true_size,
    "true_dtype": true_dtype,
}


def _read(fact: Callable[[Any], Any], value: Any) -> Any:
    """``fact(value)`` for the record; a value it cannot read (not a tensor) records a marker that no live value
    equals, so the next comparison fails and the validation names the value."""
    try:
        return fact(value)
    except Exception:
        return object()


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
    """An immutable snapshot of the tree's stores, and the two forms of the comparison with the live ones."""

    terms: tuple[str, ...]  # the comparison the generated call inlines, joined with ``and``
    precise: str  # the same facts, tensors by shape and dtype only (``matches``)
    namespace: dict[str, Any]  # the globals both read
    keyed: tuple[dict[Any, Any], ...]  # the non-empty store dicts
    tensor_slots: tuple[tuple[dict[Any, Any], str], ...]  # (store dict, name) of each registered tensor
    tensor_ids: tuple[int, ...]  # which tensor objects were registered (ids only: no tensor is held)
    counts: tuple[int, int, int, int]  # modules, non-empty store dicts, empty dicts, tensors

    @property
    def modules(self) -> tuple[nn.Module, ...]:
        """Every module of the recorded tree, once each."""
        modules: tuple[nn.Module, ...] = self.namespace["modules"]
        return modules

    def parameters(self) -> Iterator[Any]:
        """The registered parameters of the recorded tree (each store's values that are not None), as
        ``module.parameters()`` lists them but with a tied one once per place."""
        for store in self.namespace["parameter_stores"]:
            for value in store.values():
                if value is not None:
                    yield value

    @property
    def fast(self) -> str:
        """The comparison the generated call inlines, as one expression."""
        return " and ".join(self.terms) or "True"

    def matches(self) -> bool:
        """Whether the live tree still looks as recorded, by the precise comparison (what ``_runtime.settle`` asks)."""
        try:
            return bool(eval(_compiled(self.precise), self.namespace))
        except Exception:  # a store dict or attribute that is gone: a change
            return False

    def fast_matches(self) -> bool:
        """The generated call's own comparison, evaluated here (tests, the benchmark)."""
        try:
            return bool(eval(_compiled(self.fast), self.namespace))
        except Exception:
            return False

    def same_tensors(self) -> bool:
        """Whether the registered tensors are the very objects recorded (no swap in progress)."""
        return tuple(id(d.get(name)) for d, name in self.tensor_slots) == self.tensor_ids


_code_cache: dict[str, CodeType] = {}
_code_lock = threading.Lock()


def _compiled(source: str) -> CodeType:
    """``source`` compiled for ``eval`` once (a bounded cache keyed by the text, as the generated call's)."""
    code = _code_cache.get(source)
    if code is None:
        code = compile(source, "<hndl stores record>", "eval")
        with _code_lock:
            if len(_code_cache) >= 64:
                _code_cache.pop(next(iter(_code_cache)))
            _code_cache[source] = code
    return code


def _tensor_check(tensors: list[Any]) -> Callable[..., bool] | None:
    """PyTorch's C++ guard over ``tensors`` (its ``check(*tensors)``), or None where it cannot stand in for a
    shape and dtype comparison (not available, a value it cannot describe, or it rejects the tensors it was
    built from)."""
    if _TensorGuards is None or not tensors:
        return None
    try:
        guard = _TensorGuards(
            *tensors,
            dynamic_dims_sizes=[list(t.size()) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
        )
        check: Callable[..., bool] = guard.check
        return check if check(*tensors) else None
    except Exception:  # sparse or other layouts without strides, non-tensor values
        return None


class _Names:
    """Allocates the record's global names (``r_<kind><n>``) in one namespace. Disabled (past
    :data:`UNROLL_LIMIT`), it stores nothing: the unrolled terms are not used, and a namespace with a dozen
    entries per module would only cost memory and copying."""

    def __init__(self, enabled: bool) -> None:
        self.namespace: dict[str, Any] = {}
        self.enabled = enabled

    def __call__(self, kind: str, obj: Any) -> str:
        if not self.enabled:
            return ""
        name = f"r_{kind}{len(self.namespace)}"
        self.namespace[name] = obj
        return name


def take_record(root: nn.Module, leaves: Sequence[nn.Module]) -> StoresRecord:
    """Snapshot ``root``'s tree (types, store dicts, their names and values), the hook dicts and instance dicts
    of the node modules ``leaves``, and the global hook dicts."""
    leaf_ids = {id(leaf) for leaf in leaves}
    modules = _distinct_modules(root)
    unroll = len(modules) <= UNROLL_LIMIT  # past the limit the precise form is inlined instead
    keyed: list[dict[Any, Any]] = []
    tensor_dicts: list[dict[Any, Any]] = []
    submodules: list[dict[Any, Any]] = []
    empty: list[dict[Any, Any]] = []
    live: list[dict[Any, Any]] = []
    slots: list[tuple[dict[Any, Any], str, Any]] = []  # (store dict, name, tensor)
    instance_dicts: list[dict[str, Any]] = []
    # Each module's store dicts, per attribute (in _STORES' order, which the lists below follow per module).
    parameter_stores: list[dict[Any, Any]] = []
    buffer_stores: list[dict[Any, Any]] = []
    module_stores: list[dict[Any, Any]] = []
    for module in modules:
        state = module.__dict__
        if id(module) in leaf_ids:
            instance_dicts.append(state)
            for h in hook_dicts(module):
                (live if h else empty).append(h)
        parameters, buffers, children = state["_parameters"], state["_buffers"], state["_modules"]
        parameter_stores.append(parameters)
        buffer_stores.append(buffers)
        module_stores.append(children)
        for store in (parameters, buffers):
            if store:
                keyed.append(store)
                tensor_dicts.append(store)
                slots += [(store, key, value) for key, value in store.items() if value is not None]
            else:
                empty.append(store)
        if children:
            keyed.append(children)
            submodules.append(children)
        else:
            empty.append(children)
    for h in GLOBAL_HOOK_DICTS:
        (live if h else empty).append(h)
    names = _Names(enabled=unroll)
    # The unrolled terms only where they are used: past the limit building their text would cost several
    # microseconds per module of every build, for nothing.
    terms = _unrolled_terms(modules, leaf_ids, names, [value for *_, value in slots]) if unroll else []
    namespace = names.namespace
    namespace.update(
        _HELPERS,
        modules=tuple(modules),
        types=tuple(map(type, modules)),
        module_dicts=tuple(m.__dict__ for m in modules),
        parameter_stores=tuple(parameter_stores),
        buffer_stores=tuple(buffer_stores),
        module_stores=tuple(module_stores),
        live=tuple(live),
        copies=tuple(dict(h) for h in live),
        empty=tuple(empty),
        submodules=tuple(submodules),
        submodule_values=tuple(v for d in submodules for v in d.values()),
        keyed=tuple(keyed),
        keys=tuple(tuple(d) for d in keyed),
        tensors=tuple(tensor_dicts),
        nones=tuple(v is None for d in tensor_dicts for v in d.values()),
        shapes=tuple(_read(true_size, v) for d in tensor_dicts for v in d.values() if v is not None),
        dtypes=tuple(_read(true_dtype, v) for d in tensor_dicts for v in d.values() if v is not None),
        instance_dicts=tuple(instance_dicts),
        attr_counts=tuple(map(len, instance_dicts)),
    )
    namespace["__builtins__"] = __builtins__
    precise = " and ".join(g.source for g in PRECISE)
    return StoresRecord(
        terms=tuple(terms) if unroll else tuple(g.source for g in PRECISE),
        precise=precise,
        namespace=namespace,
        keyed=tuple(keyed),
        tensor_slots=tuple((store, key) for store, key, _value in slots),
        tensor_ids=tuple(id(value) for *_, value in slots),
        counts=(len(modules), len(keyed), len(empty), len(slots)),
    )


def _distinct_modules(root: nn.Module) -> list[nn.Module]:
    """Every module of ``root``'s tree once, in the order :func:`._state.walk_modules` first meets it (depth first,
    children in registration order): a module met on two paths (or serving two nodes) is compared once. Paths are
    not made, since nothing here reads them; below a module met before, everything was met with it."""
    modules: list[nn.Module] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        modules.append(module)
        stack += [child for child in reversed(module._modules.values()) if child is not None]
    return modules


def _unrolled_terms(modules: Sequence[nn.Module], leaf_ids: set[int], names: _Names, tensors: list[Any]) -> list[str]:
    """The unrolled comparison, one term per fact, over the names ``names`` allocates (in the order
    :func:`take_record` gathers the same facts: per module its type, instance dict length and hook dicts for a
    node module, its stores; then the global hook dicts, the empty dicts, the tensors)."""
    terms: list[str] = []
    empties: list[str] = []  # names of the dicts that were empty
    sources: list[str] = []  # the source of each registered tensor, as ``tensors`` lists them

    def watch_hooks(hooks: dict[Any, Any]) -> None:
        if hooks:
            terms.append(f"{names('h', hooks)} == {names('c', dict(hooks))}")
        else:
            empties.append(names("e", hooks))

    for module in modules:
        m, d = names("m", module), names("d", module.__dict__)
        terms.append(f"type({m}) is {names('t', type(module))}")
        if id(module) in leaf_ids:
            terms.append(f"len({d}) == {len(module.__dict__)}")
            for hooks in hook_dicts(module):
                watch_hooks(hooks)
        for attr in _STORES:
            store = getattr(module, attr)
            s = names("s", store)
            terms.append(f"{d}[{attr!r}] is {s}")
            if not store:
                empties.append(s)
                continue
            terms.append(f"tuple({s}) == {names('k', tuple(store))}")
            for key, value in store.items():
                if value is None or attr == "_modules":
                    terms.append(f"{s}[{key!r}] is {names('v', value)}")
                else:
                    sources.append(f"{s}[{key!r}]")
    for hooks in GLOBAL_HOOK_DICTS:
        watch_hooks(hooks)
    if empties:
        terms.append("not (" + " or ".join(empties) + ")")
    check = _tensor_check(tensors)
    if check is not None:
        terms.append(f"{names('check', check)}(" + ", ".join(sources) + ")")
    elif sources:
        terms += [g.source for g in TENSOR_FACTS]
    return terms
