"""The layer calls of an exported program: which calls each traced operation ran inside, and what a call took
and gave.

torch.export records, for every node, the stack of layer calls it ran in (``nn_module_stack``, with ``@n`` for a
layer's n-th further call), and for each call whose signature it was asked to preserve, the values and constants
it took and gave (``module_call_graph``). :class:`Calls` reads both once; the translator marks on each
:class:`CallInfo` whether the call becomes one node (``kind``) and asks which calls an operation ran in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ._fallback import NotRebuildable, Rebuilt
from ._site import is_tensor_node
from ._table import Call, Emit
from ._trace import reads_training

__all__ = ["CallInfo", "Calls", "class_name"]


@dataclass
class CallInfo:
    """One call of a layer.

    Attributes:
        fqn: the layer's path, with ``@n`` for the n-th further call of the same layer.
        path: the layer's path.
        module: the layer.
        signature: what the call took and gave, when the trace preserved it (else ``None``).
        kind: ``"row"`` (its ``MODULES`` row's node), ``"fallback"`` (a ``module`` node) or ``""`` (traced
            through).
        emit: the row's node, for ``"row"``.
        rebuilt: how to rebuild the layer, for ``"fallback"``.
        reason: why the layer is not traced through, or why its row refused it.
    """

    fqn: str
    path: str
    module: Any
    signature: Any
    kind: str = ""
    emit: Emit | None = None
    rebuilt: Rebuilt | None = None
    reason: str = ""


class Calls(Mapping[str, CallInfo]):
    """The layer calls of a traced program, by ``fqn``: those the traced operations ran inside, and those whose
    signature the trace preserved (a call that left no operation, an identity in eval mode, is one of them).

    Args:
        program: the exported program.
        root: the module traced.
        operations: the program's operations (``call_function`` nodes), in order.
    """

    def __init__(self, program: Any, root: Any, operations: Sequence[Any]) -> None:
        self.root = root
        self.by_name = {n.name: n for n in program.graph.nodes}
        self.signatures = {e.fqn: e.signature for e in program.module_call_graph if e.fqn and e.signature}
        self.info: dict[str, CallInfo] = {}
        self.stacks = {n: self._stack(n) for n in operations}
        for fqn in self.signatures:
            if fqn not in self.info:
                self._call_info(fqn, fqn.split("@")[0])
        self.within: dict[str, set[Any]] = {fqn: set() for fqn in self.info}  # the nodes each call ran
        for n, stack in self.stacks.items():
            for fqn in stack:
                self.within[fqn].add(n)

    def __getitem__(self, fqn: str) -> CallInfo:
        return self.info[fqn]

    def __iter__(self) -> Iterator[str]:
        return iter(self.info)

    def __len__(self) -> int:
        return len(self.info)

    def _call_info(self, fqn: str, path: str) -> CallInfo | None:
        info = self.info.get(fqn)
        if info is None:
            try:
                module = self.root.get_submodule(path)
            except AttributeError:
                return None
            info = self.info[fqn] = CallInfo(fqn, path, module, self.signatures.get(fqn))
        return info

    def _stack(self, node: Any) -> list[str]:
        out = []
        for key, value in (node.meta.get("nn_module_stack") or {}).items():
            path = value[0] if isinstance(value, tuple) else ""
            if not path:
                continue
            _, sep, count = key.rpartition("@")
            fqn = f"{path}@{count}" if sep and count.isdigit() else path
            if self._call_info(fqn, path) is not None:
                out.append(fqn)
        return out

    def stack(self, node: Any) -> list[str]:
        """The calls ``node`` ran inside, outermost first (the root left out)."""
        return self.stacks[node]

    def innermost(self, node: Any) -> CallInfo | None:
        """The innermost call ``node`` ran inside, ``None`` for one of the root's own operations."""
        stack = self.stacks[node]
        return self.info[stack[-1]] if stack else None

    def unit(self, node: Any) -> str | None:
        """The outermost call around ``node`` that is emitted as one node, if any."""
        for fqn in self.stacks[node]:
            if self.info[fqn].kind:
                return fqn
        return None

    def describe(self, node: Any) -> tuple[str, str]:
        """The path and class name of the layer call ``node`` ran in (``<root>`` for the module itself)."""
        info = self.innermost(node)
        return (info.path, class_name(info.module)) if info else ("<root>", class_name(self.root))

    def call(self, info: CallInfo) -> Call:
        """The call's arguments and results as traced values and constants."""
        from torch.export.graph_signature import ConstantArgument
        from torch.utils._pytree import tree_unflatten

        def value(arg: Any) -> Any:
            if isinstance(arg, ConstantArgument):
                return arg.value
            name = getattr(arg, "name", None)
            return self.by_name.get(name, arg) if name is not None else arg

        sig = info.signature
        inputs = tree_unflatten([value(a) for a in sig.inputs], sig.in_spec)
        args, kwargs = inputs if isinstance(inputs, tuple) and len(inputs) == 2 else ((), {})
        outputs = [value(a) for a in sig.outputs]
        inside = self.within[info.fqn]
        used = [any(r not in inside for r in getattr(out, "users", {})) for out in outputs]
        return Call(info.path, info.module, list(args), dict(kwargs), outputs, used)

    def module_call(self, info: CallInfo) -> tuple[list[Any], Any, int | None]:
        """The call as a module node: its inputs, its one traced output, and the index it selects (``None``: the
        whole result).

        Raises:
            NotRebuildable: when a module node cannot make the call (a constant argument other than its default, a
                tensor after a constant, no tensor in, or several used tensors out).
        """
        import inspect

        call = self.call(info)
        params = [
            p
            for p in list(inspect.signature(info.module.forward).parameters.values())
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        bound: dict[str, Any] = dict(zip([p.name for p in params], call.args))
        bound.update(call.kwargs)
        inputs: list[Any] = []
        for p in params:
            if p.name not in bound:
                continue
            value = bound[p.name]
            if is_tensor_node(value):
                if len(inputs) != params.index(p):
                    raise NotRebuildable(f"its tensor argument {p.name!r} follows a non-tensor argument")
                inputs.append(value)
            elif p.default is p.empty or value != p.default:
                raise NotRebuildable(f"it is called with {p.name}={value!r}, which a module node cannot pass")
        tensors = [(i, out) for i, out in enumerate(call.outputs) if is_tensor_node(out)]
        used = [(i, out) for i, out in tensors if call.used[i]]
        if not inputs:
            raise NotRebuildable("it takes no tensor")
        if len(used) > 1 or not tensors:
            raise NotRebuildable("it returns several tensors that are used, or none")
        index, output = used[0] if used else tensors[0]
        single = len(call.outputs) == 1 and info.signature.out_spec.num_leaves == 1
        return inputs, output, None if single else index

    def training_readers(self) -> dict[str, str]:
        """The calls traced through (not one node) whose forward reads ``self.training``, outside torch.nn:
        path -> class name (the root as ``""``)."""
        readers = {}
        for info in self.info.values():
            if info.kind or class_name(info.module, full=True).startswith("torch.nn."):
                continue
            if reads_training(info.module):
                readers[info.path] = class_name(info.module)
        if reads_training(self.root) and not type(self.root).__module__.startswith("torch.nn."):
            readers[""] = class_name(self.root)
        return readers


def class_name(module: Any, full: bool = False) -> str:
    """The class name of ``module`` (``full``: with its module, ``torch.nn.modules.linear.Linear``)."""
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}" if full else cls.__name__
