"""What the build made: every module, parameter and buffer of a GraphModule, and which node owns it.

:class:`BuildState` is taken once, right after the modules are built. The runtime compares the live module
tree against it when a call is validated ("registered state no longer matches the build"), and hndl-func
checks parameter dicts against it. It stores names, shapes and dtypes, never tensors.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._plan import Plan
from ..naming import dtype_name
from ._activation_wrappers import unwrap
from ._swaps import Built, class_name, judge

# A registered tensor's size and dtype are read as torch's kernels see them, through torch.Tensor's own
# descriptors: a subclass that overrides the Python ``shape`` or ``dtype`` property cannot make a tensor of
# another size pass for the built one (SPEC 11.2). A ``__torch_function__`` subclass answers ``size()`` itself,
# as it does for every torch function; that is trusted.
true_size: Any = torch.Tensor.size
true_dtype: Any = torch.Tensor.dtype.__get__  # type: ignore[attr-defined]


def tensor_shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(true_size(t))


def tensor_dtype(t: torch.Tensor) -> torch.dtype:
    dtype: torch.dtype = true_dtype(t)
    return dtype


__all__ = ["BuildState", "ModuleSlot", "TensorSlot", "walk_built", "walk_modules"]


@dataclass(frozen=True)
class TensorSlot:
    """A parameter or buffer as built. ``shape`` is ``None`` where the build registered ``None``."""

    name: str  # dotted, as in state_dict: "nodes.n_hidden.weight", "model.layers.0.mlp.gate_proj.weight"
    kind: str  # "parameter" or "buffer"
    shape: tuple[int, ...] | None
    dtype: torch.dtype | None
    node: str | None  # qualified node name that owns it
    op: str | None


@dataclass(frozen=True)
class ModuleSlot:
    """A module as built: its class and the names it registered."""

    path: str  # dotted; "" for the GraphModule itself
    type: type[nn.Module]
    parameters: tuple[str, ...]
    buffers: tuple[str, ...]
    children: tuple[str, ...]
    node: str | None
    op: str | None


class BuildState:
    """The registered state of a freshly built GraphModule (``GraphModule.build_state``), keyed by dotted name.

    Attributes:
        modules: every module of the tree as built, ``{path: ModuleSlot}``; ``""`` is the GraphModule itself.
        tensors: every parameter and buffer as built, ``{state_dict name: TensorSlot}``. The dtypes follow a
            conversion of the whole model (``.half()``, ``.to(dtype)``); the shapes never change.
        graph_name: the name of the graph the model was built from.
    """

    def __init__(self, modules: dict[str, ModuleSlot], tensors: dict[str, TensorSlot], graph_name: str) -> None:
        self.modules = modules
        self.tensors = tensors
        self.graph_name = graph_name
        # The paths where a well-known tool's swap was adopted (``._swaps``), each with the path, inside the
        # layer put there, of the built layer it holds (``"base_layer"``) or None.
        self.swaps: dict[str, str | None] = {}

    @classmethod
    def take(cls, root: nn.Module, plan: Plan) -> BuildState:
        """Record ``root``'s tree as it is now, each name owned by the node of ``plan`` whose module holds it."""
        owners: dict[str, tuple[str, str]] = {}
        for step in plan.steps:
            owners[".".join(step.node.path)] = (step.node.qualname, step.node.op)
        modules: dict[str, ModuleSlot] = {}
        tensors: dict[str, TensorSlot] = {}
        _record_tree(root, "", owners, modules, tensors)
        return cls(modules, tensors, plan.checked.graph.name)

    def adopt(self, path: str, module: nn.Module, node: str, op: str) -> None:
        """Make ``module``, now at dotted ``path``, the build of ``node``: its slots replace those under ``path``."""
        prefix = path + "."
        with _ADOPTING:  # two threads validating one model may both adopt the same swap
            swaps = self.__dict__.setdefault("swaps", {})
            for store in (self.modules, self.tensors, swaps):
                for name in [n for n in store if n == path or n.startswith(prefix)]:
                    del store[name]
            _record_tree(module, path, {path: (node, op)}, self.modules, self.tensors)

    def refresh_dtypes(self, root: nn.Module) -> None:
        """Adopt the live dtypes (after ``.half()``, ``.to(dtype)``): a conversion is not a mismatch."""
        live = dict(_named_tensors(root))
        for name, slot in list(self.tensors.items()):
            value = live.get(name)
            if value is not None and slot.shape is not None:
                self.tensors[name] = TensorSlot(slot.name, slot.kind, slot.shape, value.dtype, slot.node, slot.op)

    def owner_of(self, name: str) -> tuple[str | None, str | None]:
        """The (node, op) owning a dotted module/tensor name, or ``(None, None)`` for the graph itself."""
        slot = self.tensors.get(name) or self.modules.get(name)
        if slot is not None:
            return slot.node, slot.op
        parent = name.rpartition(".")[0]
        while parent:
            if parent in self.modules:
                return self.modules[parent].node, self.modules[parent].op
            parent = parent.rpartition(".")[0]
        return None, None

    def diff(
        self, root: nn.Module, cast: Mapping[int, torch.dtype] | None = None
    ) -> list[tuple[str | None, str | None, str]]:
        """How the live tree differs from the build: ``(node, op, change)`` per difference, in tree order.

        ``cast`` maps ``id(module)`` to a dtype its parameters may also have, on purpose: FSDP2's mixed precision
        registers a unit's unsharded parameters in its ``param_dtype`` while it runs (``._fsdp.cast_dtypes``).

        Detected: a module added, removed, set to ``None``, replaced by a class that is not a subclass of the
        built one (``__class__`` swaps included), or given its own ``forward``; a parameter or buffer added,
        removed, set to ``None``, or given another shape or dtype. A reorder is no mismatch (re-registering a
        deleted parameter, the way to put it back, appends it). A same-class replacement
        with the same names and shapes, and a dtype/device conversion of the whole model, match the build. An
        activation wrapper (``checkpoint_wrapper``) in a built module's place is seen through: the module it wraps
        is compared.

        A *transformed* layer (an instance of a subclass of the built class, as parametrizations, FSDP2 or a
        user's subclass make; or one whose built tensors moved out of its stores, as pruning does) is checked
        through what it exposes: each built parameter and buffer, read as an attribute (a parametrized
        ``weight`` is computed), must have the built shape; what the transformation added is its own business.

        A module of an unrelated class that a well-known tool put there (a PEFT tuner layer, a quantized Linear,
        the held layer back after ``merge_and_unload``) is *adopted*, as ``replace_layer`` adopts, when the family
        of ``._swaps`` that recognises it finds it keeps the layer's contract: this call's slots for the path
        become the module's and no change is reported, so the validation running this diff checks it once.
        """
        changes: list[tuple[str | None, str | None, str]] = []
        stack: list[tuple[str, Any]] = [("", root)]
        while stack:
            path, module = stack.pop()
            expected = self.modules.get(path)
            module = unwrap(module)  # checkpoint_wrapper: the layer below it is the build (._activation_wrappers)
            what = f"submodule '{path}'" if path else f"graph '{self.graph_name}'"
            if expected is None:
                node, op = self.owner_of(path)
                changes.append((node, op, f"{what} was added ({type(module).__name__})"))
                continue
            if not isinstance(module, expected.type):
                refused = self._swap(path, module, expected, what)  # None: a known tool's swap, adopted (._swaps)
                if refused is not None:
                    changes.append((expected.node, expected.op, refused))
                continue
            if path in self.__dict__.get("swaps", ()) and self._regrown(path, module, expected):
                continue  # an adopted wrapper that gained or dropped whole adapters, adopted again
            if path and "forward" in module.__dict__:
                changes.append((expected.node, expected.op, f"{what} had its forward reassigned on the instance"))
            stores = (
                ("parameter", module._parameters, expected.parameters),
                ("buffer", module._buffers, expected.buffers),
            )
            transformed = type(module) is not expected.type or any(
                name not in store for _kind, store, names in stores for name in names
            )
            also = (cast or {}).get(id(module))
            for kind, store, names in stores:
                changes.extend(self._tensor_changes(path, module, kind, store, names, transformed, also))
            for name in expected.children:
                child_path = f"{path}.{name}" if path else name
                if name not in module._modules:
                    changes.append((*self.owner_of(child_path), f"submodule '{child_path}' was removed"))
                elif module._modules[name] is None:
                    changes.append((*self.owner_of(child_path), f"submodule '{child_path}' was set to None"))
            for name, child in reversed(list(module._modules.items())):
                child_path = f"{path}.{name}" if path else name
                if child is None or (transformed and name not in expected.children):
                    continue  # what a transformation adds (a parametrizations dict) is not the build's
                if name in expected.children or child_path not in self.modules:
                    stack.append((child_path, child))
        return changes

    def _built(self, path: str) -> Built:
        slot = self.modules[path]
        tensors = {}
        for name in (*slot.parameters, *slot.buffers):
            tensor = self.tensors[f"{path}.{name}" if path else name]
            tensors[name] = (tensor.shape, tensor.dtype)
        return Built(slot.type, tensors)

    def _swap(self, path: str, module: nn.Module, expected: ModuleSlot, what: str) -> str | None:
        """A module of an unrelated class at ``path``: adopt it when a family of ``._swaps`` accepts it (None);
        otherwise the change, naming both classes by module and the family's reason where one recognised it."""
        held = self.__dict__.get("swaps", {}).get(path)
        base = self._built(f"{path}.{held}") if held is not None and f"{path}.{held}" in self.modules else None
        # Only inside a node's layer: a container of the graph's own (``nodes``, a block) is no tool's to swap.
        verdict = judge(self._built(path), module, base) if expected.node is not None else None
        if verdict is not None and verdict.refusal is None:
            self.adopt(path, module, expected.node or "", expected.op or "")
            with _ADOPTING:
                self.__dict__.setdefault("swaps", {})[path] = verdict.held
            return None
        change = (
            f"{what} was replaced: the build made {class_name(expected.type)}, now it is {class_name(type(module))}"
        )
        if verdict is not None:
            change += f", {verdict.family} that does not keep the layer's contract: {verdict.refusal}"
        return change + " (swap a layer on purpose with model.replace_layer)"

    def _regrown(self, path: str, module: nn.Module, expected: ModuleSlot) -> bool:
        """Whether the adopted wrapper at ``path`` differs from its record only by whole entries added to or
        removed from its dict containers (``ModuleDict``, ``ParameterDict``) outside the layer it holds, as
        PEFT's ``load_adapter`` and ``delete_adapter`` change it, and still keeps the contract: then it is
        adopted again. Anything else is left to the comparison, which reports it."""
        held = self.swaps.get(path)
        if held is None or f"{path}.{held}" not in self.modules:
            return False
        kept, prefix = f"{path}.{held}", path + "."
        modules: dict[str, ModuleSlot] = {}
        tensors: dict[str, TensorSlot] = {}
        _record_tree(module, path, {path: (expected.node or "", expected.op or "")}, modules, tensors)
        if modules.keys() == {n for n in self.modules if n == path or n.startswith(prefix)} and tensors.keys() == {
            n for n in self.tensors if n.startswith(prefix)
        }:
            return False  # the same names: any difference is the comparison's to report
        for recorded, live in ((self.modules.keys(), modules.keys()), (self.tensors.keys(), tensors.keys())):
            if any(_within(name, kept) for name in live - recorded):
                return False  # the held layer gained something: the comparison reports it
            for name in [n for n in recorded if n.startswith(prefix) and n not in live]:
                if _within(name, kept) or not _dropped_entry(name, path, modules):
                    return False
        if any(self.modules[n].type is not modules[n].type for n in modules.keys() & self.modules.keys()) or any(
            (self.tensors[n].shape, self.tensors[n].dtype) != (tensors[n].shape, tensors[n].dtype)
            for n in tensors.keys() & self.tensors.keys()
        ):
            return False  # what stayed must be as recorded
        verdict = judge(self._built(kept), module)
        if verdict is None or verdict.refusal is not None:
            return False
        self.adopt(path, module, expected.node or "", expected.op or "")
        with _ADOPTING:
            self.swaps[path] = verdict.held
        return True

    def _tensor_changes(
        self,
        path: str,
        module: nn.Module,
        kind: str,
        store: dict[str, Any],
        names: tuple[str, ...],
        transformed: bool,
        also: torch.dtype | None = None,
    ) -> list[tuple[str | None, str | None, str]]:
        changes: list[tuple[str | None, str | None, str]] = []
        for name in names:
            full = f"{path}.{name}" if path else name
            slot = self.tensors[full]
            if name in store:
                value = store[name]
            elif transformed:
                value = getattr(module, name, _ABSENT)  # a parametrized or pruned tensor, computed by the layer
            else:
                value = _ABSENT
            if value is _ABSENT:
                changes.append((slot.node, slot.op, f"{kind} '{full}' was removed"))
            elif value is None and slot.shape is not None:
                changes.append((slot.node, slot.op, f"{kind} '{full}' was set to None"))
            elif value is not None and slot.shape is None:
                changes.append((slot.node, slot.op, f"{kind} '{full}' was None in the build and is now set"))
            elif not isinstance(value, torch.Tensor):
                if value is not None:
                    changes.append((slot.node, slot.op, f"{kind} '{full}' is a {type(value).__name__}, not a tensor"))
            elif tensor_shape(value) != slot.shape:
                changes.append(
                    (
                        slot.node,
                        slot.op,
                        f"{kind} '{full}' has shape {list(tensor_shape(value))}, the build made {list(slot.shape or ())}",
                    )
                )
            elif slot.dtype is not None and tensor_dtype(value) not in (
                slot.dtype,
                also if kind == "parameter" else None,
            ):
                changes.append(
                    (
                        slot.node,
                        slot.op,
                        f"{kind} '{full}' has dtype {dtype_name(tensor_dtype(value))}, the build made "
                        f"{dtype_name(slot.dtype)} (convert the whole model, not one tensor or layer)",
                    )
                )
        if transformed:
            return changes
        for name in store:
            if name not in names:
                full = f"{path}.{name}" if path else name
                node, op = self.owner_of(full)
                changes.append((node, op, f"{kind} '{full}' was added"))
        return changes


_ABSENT: Any = object()
_ADOPTING = threading.Lock()  # process-wide: adoptions are rare, and a lock per state would not pickle


def _within(name: str, path: str) -> bool:
    return name == path or name.startswith(path + ".")


def _dropped_entry(name: str, root: str, live: Mapping[str, ModuleSlot]) -> bool:
    """Whether ``name``, gone from the live tree under ``root``, went with a whole entry of a dict container
    that is still there (its first live ancestor is a ``ModuleDict`` or ``ParameterDict``)."""
    probe = name
    while probe != root:
        probe = probe.rpartition(".")[0]
        if probe in live:
            return probe != root and issubclass(live[probe].type, (nn.ModuleDict, nn.ParameterDict))
    return False


def _record_tree(
    root: nn.Module,
    base: str,
    owners: Mapping[str, tuple[str, str]],
    modules: dict[str, ModuleSlot],
    tensors: dict[str, TensorSlot],
) -> None:
    """Add a slot for every module, parameter and buffer of ``root``'s tree, ``root`` being at dotted ``base``."""
    for sub, module in walk_built(root):
        path = f"{base}.{sub}" if base and sub else (base or sub)
        node, op = owners[path] if path in owners else _owner(path, owners)
        parameters, buffers = module._parameters, module._buffers
        # Positional, in field order: taken for every module of every build.
        modules[path] = ModuleSlot(
            path, type(module), tuple(parameters), tuple(buffers), tuple(module._modules), node, op
        )
        if not parameters and not buffers:
            continue  # no tensors (an activation, a container)
        for kind, store in (("parameter", parameters), ("buffer", buffers)):
            for name, value in store.items():
                full = f"{path}.{name}" if path else name
                tensors[full] = TensorSlot(
                    name=full,
                    kind=kind,
                    shape=None if value is None else tuple(value.shape),
                    dtype=None if value is None else value.dtype,
                    node=node,
                    op=op,
                )


def walk_modules(root: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """Every module of ``root``'s tree with its dotted path (``""`` for ``root``), depth first.

    Reads ``_modules`` directly, without ``named_modules``' deduplication: a shared module is met on every path.
    """
    stack: list[tuple[str, nn.Module]] = [("", root)]
    while stack:
        path, module = stack.pop()
        yield path, module
        for name, child in reversed(list(module._modules.items())):
            if child is not None:
                stack.append((f"{path}.{name}" if path else name, child))


def walk_built(root: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """As :func:`walk_modules`, with each activation wrapper seen through: the module it wraps stands at its
    path, so paths are ``state_dict``'s (which the wrappers' own hooks strip of ``_checkpoint_wrapped_module``)."""
    stack: list[tuple[str, nn.Module]] = [("", unwrap(root))]
    while stack:
        path, module = stack.pop()
        yield path, module
        for name, child in reversed(list(module._modules.items())):
            if child is not None:
                stack.append((f"{path}.{name}" if path else name, unwrap(child)))


def _named_tensors(root: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    for path, module in walk_built(root):
        for store in (module._parameters, module._buffers):
            for name, value in store.items():
                if value is not None:
                    yield (f"{path}.{name}" if path else name), value


def _owner(path: str, owners: Mapping[str, tuple[str, str]]) -> tuple[str | None, str | None]:
    probe = path
    while probe:
        if probe in owners:
            return owners[probe]
        probe = probe.rpartition(".")[0]
    return None, None
