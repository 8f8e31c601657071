"""An exported program as an hndl graph.

Three passes over the traced nodes:

0. *Inputs* (``_inputs``): the program's inputs as the graph's, with the sizes the trace assumed.
1. *Units.* Each call of a layer (``_calls``) whose class has a row in ``MODULES`` becomes one node (the row reads
   the layer's attributes and the call's arguments). The calls of the layers traced in training mode become
   ``module`` nodes.
2. *Operations.* An operation whose value no input can change folds (``_fold``): it is computed at import, and
   the last such value before an operation that reads an input becomes a ``buffer`` node (a persistent buffer
   stays state a checkpoint loads into, ``_buffers``; a constant whose dtype follows the activations' is found by
   ``_dtype_follow``). Every other traced operation goes through its row in ``FUNCTIONS``. One that has none, or
   whose row refuses it, makes the innermost layer call around it a ``module`` node, if that layer can be rebuilt
   from its class and constructor arguments (``_fallback``), else the next layer out; an operation outside every
   layer, or inside layers none of which can be rebuilt, is an ``E_IMPORT`` problem naming each (``_refusals``).
3. *Emission.* In the traced order, each unit or operation is added with ``Graph.add``, named after the layer
   it ran in (``layer1.0.conv1`` -> ``layer1_0_conv1``; ``layer1_0_add`` for an operation among others in a
   layer's forward). Each parameter the node's layer holds is recorded as a rename from its original key. A
   constant whose dtype follows the activations' is read through a ``type_as`` to the activation it follows.

Then ``hndl.check`` judges the graph, and every node's inferred output shape is compared with the traced one at
the example's sizes: a difference is the importer's mistake and is reported rather than returned.

In-place operations are written as their out-of-place op. That is the same computation unless something reads
the written tensor, or a view of it, made before the write, after it: each such read is found (``_aliases``) and
refused, as is any write into a graph input.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .._check import check
from .._errors import HndlError, Problem
from .._graph import Handle
from .._registry import registry
from ._aliases import Aliases
from ._buffers import keep_state, program_tensors
from ._calls import CallInfo, Calls, class_name
from ._cast_follow import CastFollow, twin_dtypes
from ._dtype_follow import Followers, Following, find_following
from ._fallback import NotRebuildable, Rebuilt, rebuild
from ._fold import META_ONLY, fold
from ._imported import Fallback, ImportedGraph
from ._inputs import add_inputs, input_specs
from ._messages import import_error
from ._refusals import Refusals, reason
from ._region_writes import RegionWrites
from ._site import is_tensor_node
from ._symbols import NotExpressible, name_symbols
from ._table import FUNCTIONS, PENDING, Alias, Emit, Port, Site, Unsupported, module_row
from ._trace import Traced
from ._verify import shape_differences

__all__ = ["Retrace", "node_name", "translate"]


class Retrace(Exception):
    """The layers at ``paths`` become module nodes, and a trace that preserves their call signatures must say
    what their calls took and gave."""

    def __init__(self, paths: frozenset[str]) -> None:
        super().__init__(sorted(paths))
        self.paths = paths


def translate(
    traced: Traced, example: Sequence[Any], dynamic_shapes: Any, whole: frozenset[str], known: Followers | None = None
) -> tuple[ImportedGraph, dict[str, str], Followers]:
    """The graph of ``traced``, the layers traced through whose forward reads ``self.training`` (path -> class
    name), and what it found of the constants whose dtype follows the activations'; raises ``HndlError``
    (``E_IMPORT``) listing everything it cannot express.

    Args:
        whole: paths of the layers to keep whole (their trace does not show all they do): as their ``MODULES``
            row's node where it takes the call, else as ``module`` nodes.
        known: another translation's findings on the same module, used instead of tracing it twice more.
    """
    translator = _Translator(traced, example, dynamic_shapes, whole, known)
    graph = translator.run()
    return graph, translator.readers, translator.following.findings(translator.widths)


def node_name(path: str) -> str:
    """A layer path as an hndl name: ``layer1.0.conv1`` -> ``layer1_0_conv1``, ``0`` -> ``_0``."""
    name = re.sub(r"\W", "_", path.replace(".", "_"))
    return name if name and not name[0].isdigit() else f"_{name}"


class _Translator:
    """One translation of one trace: :meth:`run` makes the graph, after which ``readers`` and ``following``
    hold what :func:`translate` returns besides it."""

    def __init__(
        self,
        traced: Traced,
        example: Sequence[Any],
        dynamic_shapes: Any,
        whole: frozenset[str],
        known: Followers | None = None,
    ) -> None:
        self.traced = traced
        self.program = traced.program
        self.root = traced.module
        self.whole = whole
        self.nodes = list(self.program.graph.nodes)
        self.by_name = {n.name: n for n in self.nodes}
        signature = self.program.graph_signature
        self.parameters: dict[str, str] = dict(signature.inputs_to_parameters)
        self.buffers: dict[str, str] = dict(signature.inputs_to_buffers)
        self.constants: dict[str, str] = dict(signature.inputs_to_lifted_tensor_constants)
        self.user_inputs = [self.by_name[name] for name in signature.user_inputs]
        self.state = self.root.state_dict(keep_vars=True)
        self.symbols = name_symbols(
            [(n.name, n.meta.get("val")) for n in self.user_inputs],
            input_specs(dynamic_shapes, [n.name for n in self.user_inputs]),
            list(example),
        )
        self.problems: list[Problem] = []
        self.graph = ImportedGraph(node_name(type(self.root).__name__))
        self.taken: set[str] = set()
        self.values: dict[Any, Any] = {}  # traced value -> Handle or reference
        self.claims: dict[int, tuple[str, str]] = {}  # id(tensor) -> (node, tensor name)
        self.expected: dict[str, list[Any]] = {}  # hndl node -> traced outputs
        self.calls = Calls(self.program, self.root, list(self._operations()))
        #: Calls that need their signature preserved by another trace before they can be module nodes.
        self.unpreserved: set[str] = set()
        self.folding: Any = None  # what folds at import (_fold), set by the operations pass
        #: The fills of a region written out of place (_region_writes), set by the operations pass.
        self.region_writes: RegionWrites
        #: The folded values whose dtype follows the activations' (_dtype_follow), set by the operations pass.
        self.following: Following
        self.known = known

    def _operations(self) -> Iterator[Any]:
        return (n for n in self.nodes if n.op == "call_function")

    # -- the passes -----------------------------------------------------------------------------------------

    def run(self) -> ImportedGraph:
        self._inputs()
        self._units()
        results = self._operations_pass()
        self._fallbacks(results)
        if self.unpreserved:
            raise Retrace(frozenset(self.unpreserved))
        if self.problems:
            raise import_error(self.problems, title=f"import of {type(self.root).__name__}")
        self._emit(results)
        self._outputs()
        self._finish_renames()
        self._verify()
        self.readers = self.calls.training_readers()
        return self.graph

    def _inputs(self) -> None:
        handles, problems = add_inputs(self.graph, self.program, self.user_inputs, self.symbols)
        self.values.update(handles)
        self.taken.update(n.name for n in handles)
        self.problems.extend(problems)

    def _units(self) -> None:
        """Pass 1: the layer calls that become one node each."""
        for info in self.calls.values():
            row = None if _hooked(info.module) else module_row(info.module)
            if row is not None and info.signature is not None:
                try:
                    info.emit = row(self.calls.call(info))
                    info.kind = "row"
                    continue
                except Unsupported as exc:
                    info.reason = exc.reason
            if info.path in self.whole:
                info.kind = "fallback"
                info.reason = "its training-mode behaviour is not in an eval-mode trace" + (
                    f" ({info.reason})" if info.reason else ""
                )

    def _operations_pass(self) -> dict[Any, Any]:
        """Pass 2: each traced operation outside the units through its row."""
        aliases = Aliases(self.nodes, self.user_inputs, self.parameters, self.buffers, self.calls.describe)
        folding = self.folding = fold(self.nodes, program_tensors(self.program))
        keep_state(folding, self.nodes, self.buffers, self.state, self.graph)
        writes = self.region_writes = RegionWrites(
            self.nodes, folding.refused, lambda v: v.op == "call_function", folding.values
        )
        following = self.following = find_following(
            self.traced, folding, self.known, self.graph.notes, class_name(self.root), numbers=writes.absorbed
        )
        results: dict[Any, Any] = {}
        widths = self.known.widths if self.known is not None else None
        if widths is None:
            widths = twin_dtypes(self.traced, self.nodes, set(folding.folded) | set(folding.frontier), self.graph.notes)
        self.widths = widths
        casts = CastFollow(
            widths,
            self.nodes,
            lambda v: v in self.user_inputs or isinstance(results.get(v), (Emit, Alias, Port)),
        )
        for n in self._operations():
            if self.calls.unit(n) is not None:
                continue
            if n in writes.absorbed or (n in folding.folded and n not in folding.frontier):
                continue
            if n in folding.frontier:
                results[n] = folding.frontier[n]
                continue
            try:
                made = writes.emit(n) if n in writes else self._operation(n, aliases)
                results[n] = following.check_reads(casts.adjust(n, writes.redirect(made, writes.position[n])))
            except Unsupported as exc:
                results[n] = exc
            result = results[n]
            if isinstance(result, Alias):  # the constant under another name follows as it does
                following.alias(n, result.value)
        return results

    def _operation(self, n: Any, aliases: Aliases) -> Any:
        value = n.meta.get("val")
        target = str(n.target)
        if target == "<built-in function getitem>":
            source, index = n.args
            return Port(source, int(index)) if _is_tensor(value) else None
        if not _is_tensor(value) and not (isinstance(value, (list, tuple)) and value and all(map(_is_tensor, value))):
            return None  # sizes and assertions: rows read sizes from the traced shapes
        aliases.check(n, self.region_writes.handles_read)
        row = FUNCTIONS.get(target)
        if row is None and target in META_ONLY:
            raise Unsupported(
                "makes a tensor of an activation's sizes that the trace does not fix (a dynamic dim), so it cannot be "
                "a constant computed at import",
                waits="an op that fills a tensor of another's sizes; until then make the dim static",
            )
        if row is None and n in self.folding.refused:  # an in-place write that only folding could import
            raise Unsupported(self.region_writes.why.get(n) or self.folding.refused[n])
        if row is None:
            raise Unsupported(f"hndl has no op for {target}", waits=PENDING.get(target))
        try:
            result = row(Site(n, self.symbols, self.parameters))
        except NotExpressible as exc:
            raise Unsupported(str(exc)) from None
        if isinstance(result, Emit):
            for v in result.inputs:
                for inner in v.inputs if isinstance(v, Emit) else [v]:
                    self._check_input(inner)
        return result

    def _check_input(self, value: Any) -> None:
        if getattr(value, "op", "") != "placeholder" or value.name in self.parameters or value in self.values:
            return
        if value in self.folding.frontier:
            return  # a buffer read as data, whose value the import writes out as a buffer node
        what = "buffer" if value.name in self.buffers else "constant tensor"
        key = self.buffers.get(value.name) or self.constants.get(value.name) or value.name
        raise Unsupported(
            f"reads the {what} {key!r} as data",
            waits="a buffer the import can write out: one without infinities or NaNs, and of at most 65,536 numbers "
            "unless a formula fills it",
        )

    def _fallbacks(self, results: Mapping[Any, Any]) -> None:
        """Pass 2, end: each refused operation makes the innermost rebuildable layer around it a module node."""
        refusals = Refusals()
        for n, result in results.items():
            if not isinstance(result, Unsupported) or self.calls.unit(n) is not None:
                continue
            tried: list[str] = []
            for fqn in reversed(self.calls.stack(n)):
                info = self.calls[fqn]
                try:
                    info.rebuilt = self._rebuild(info)
                except NotRebuildable as exc:
                    tried.append(f"{info.path} ({class_name(info.module)}): {exc}")
                    continue
                info.kind = "fallback"
                info.reason = reason(n, result)
                break
            else:
                refusals.add(n, result, self.calls.innermost(n), self.root, tried)
        self.problems.extend(refusals.problems())
        for info in self.calls.values():
            if info.kind == "fallback" and info.rebuilt is None:
                try:
                    info.rebuilt = self._rebuild(info)
                except NotRebuildable as exc:
                    self.problems.append(
                        Problem(
                            "E_IMPORT",
                            f"{info.reason}, and the layer cannot be a module node: {exc}",
                            node=info.path,
                            op=class_name(info.module),
                            hint="add a row for it to hndl.importer's MODULES table, or an op that does what it does",
                        )
                    )

    def _rebuild(self, info: CallInfo) -> Rebuilt:
        rebuilt = rebuild(info.module)
        if info.signature is None:
            # Which values the call took and gave is known only for calls whose signature the trace preserved:
            # the import traces again, preserving this one.
            self.unpreserved.add(info.path)
        else:
            self.calls.module_call(info)  # the call must be expressible as a module node too
        return rebuilt

    # -- emission -------------------------------------------------------------------------------------------

    def _emit(self, results: Mapping[Any, Any]) -> None:
        counts: dict[str | None, int] = {}
        for n, result in results.items():
            if isinstance(result, Emit):
                stack = self.calls.stack(n)
                key = stack[-1] if stack else None
                counts[key] = counts.get(key, 0) + 1
        done: set[str] = set()
        for n in self._operations():
            fqn = self.calls.unit(n)
            if fqn is not None:
                if fqn not in done:
                    done.add(fqn)
                    self._emit_unit(self.calls[fqn])
                continue
            result = results.get(n)
            if isinstance(result, Emit):
                # An operation is named after its layer when it is all that layer does (nn.ReLU's relu), else
                # after the layer and the op (a Bottleneck's add: layer1_0_add).
                info = self.calls.innermost(n)
                leaf = info is not None and next(info.module.children(), None) is None
                alone = leaf and counts.get(info.fqn if info else None) == 1
                path = info.path if info is not None else ""
                name = self._name(path if alone else f"{path}_{result.op}" if path else result.op)
                handle = self._add(result, name)
                self.values[n] = handle
                # a fill_ traces as the view it wrote; its fill_region gives the whole tensor
                value = n.meta["val"] if n not in self.region_writes else self.region_writes.writes[n][0].meta["val"]
                self.expected[name] = list(value) if isinstance(value, (list, tuple)) else [value]
            elif isinstance(result, Alias):
                self.values[n] = self.ref(result.value)
            elif isinstance(result, Port):
                self.values[n] = self.values[result.value][result.index]

    def _emit_unit(self, info: CallInfo) -> None:
        name = self._name(info.path)
        if info.kind == "row":
            assert info.emit is not None
            call = self.calls.call(info)
            outputs = [out for out in call.outputs if is_tensor_node(out)]
            handle = self._add(info.emit, name)
            self.values[outputs[0]] = handle
            self.expected[name] = [outputs[0].meta["val"]]
            return
        assert info.rebuilt is not None
        inputs, output, index = self.calls.module_call(info)
        value = output.meta["val"]
        params: dict[str, Any] = {"target": info.rebuilt.target}
        if info.rebuilt.kwargs:
            params["kwargs"] = info.rebuilt.kwargs
        first = inputs[0].meta["val"]
        same = len(first.shape) == len(value.shape) and all(
            self.symbols.same(a, b) for a, b in zip(first.shape, value.shape)
        )
        if not same:
            shape = [self.symbols.plain(s) for s in value.shape]
            if any(s is None for s in shape):
                raise HndlError(
                    Problem(
                        "E_IMPORT",
                        f"its output shape {self.symbols.shape(value)} cannot be declared on a module node (sizes "
                        "must be ints or input symbols)",
                        node=info.path,
                        op=class_name(info.module),
                    )
                )
            params["shape"] = shape
        if index is not None:
            params["output"] = index
        weights = {k: f"{info.path}.{k}" for k in info.module.state_dict(keep_vars=True)}
        if index is not None:
            weights = {f"module.{k}": v for k, v in weights.items()}
        self.values[output] = self._add(Emit("module", list(inputs), params, weights), name)
        self.expected[name] = [value]
        self.graph.fallbacks.append(Fallback(name, info.path, class_name(info.module, full=True), info.reason))

    def ref(self, value: Any) -> Any:
        """The hndl reference of a traced value (a parameter read as data gets its ``parameter`` node)."""
        if value in self.values:
            return self.values[value]
        if getattr(value, "op", "") == "placeholder" and value.name in self.parameters:
            key = self.parameters[value.name]
            shape = [int(s) for s in value.meta["val"].shape]
            self.values[value] = self._add(Emit("parameter", [], {"shape": shape}, {"weight": key}), self._name(key))
            self.expected[self.values[value].node] = [value.meta["val"]]
            return self.values[value]
        if getattr(value, "op", "") == "placeholder" and value in self.folding.frontier:
            key = self.buffers.get(value.name) or self.constants.get(value.name) or value.name
            self.values[value] = self._add(self.folding.frontier[value], self._name(key))
            self.expected[self.values[value].node] = [value.meta["val"]]
            return self.values[value]
        raise HndlError(Problem("E_IMPORT", f"the traced value {value.name!r} is read before it is made"))

    def _add(self, emit: Emit, name: str) -> Handle:
        # An input that is itself an Emit is a node of its own, made first (the reshape of an sdpa mask).
        inputs = [self._input(v, emit, name) for v in emit.inputs]
        tie: dict[str, str] = {}
        for local, key in emit.weights.items():
            tensor = self.state.get(key)
            if tensor is None:
                continue
            owner = self.claims.get(id(tensor))
            target = f"nodes.n_{name}.{local}"
            if owner is not None:
                # A layer called twice, or a weight two layers share: one Parameter under both nodes' names.
                tie[local] = f"{owner[0]}.{owner[1]}"
                self.graph.tied.setdefault(f"nodes.n_{owner[0]}.{owner[1]}", []).append(target)
            else:
                self.claims[id(tensor)] = (name, local)
            self.graph.renames.setdefault(key, target)
        return self.graph.add(emit.op, *inputs, name=name, tie=tie or None, **_without_defaults(emit))

    def _input(self, value: Any, emit: Emit, name: str) -> Any:
        """The reference node ``name`` (of ``emit``) reads for ``value``. A constant whose dtype follows the
        activations' is read through a ``type_as`` to the activation it takes its dtype from."""
        if isinstance(value, Emit):
            return self._add(value, self._name(f"{name}_{value.op}"))
        if not self.following.follows(value):
            return self.ref(value)
        like = self.following.source(value, emit.inputs, self.values, name)
        return self.graph.add("type_as", self.ref(value), self.ref(like), name=self._name(f"{name}_type_as"))

    def _name(self, base: str) -> str:
        name = node_name(base)
        if name in self.taken:
            i = 1
            while f"{name}_{i}" in self.taken:
                i += 1
            name = f"{name}_{i}"
        self.taken.add(name)
        return name

    def _outputs(self) -> None:
        output = next(n for n in self.nodes if n.op == "output")
        from torch.utils._pytree import tree_flatten

        leaves, _ = tree_flatten(output.args)
        self.following.check_returned(leaves, class_name(self.root))
        refs = [self.ref(v) for v in leaves if is_tensor_node(v)]
        if not refs:
            raise HndlError(Problem("E_IMPORT", "the module returns no tensor"))
        self.graph.output(list(refs))

    def _finish_renames(self) -> None:
        """Every key of the original's state dict: a tied key maps where its tensor went, an unread one to None."""
        renames = self.graph.renames
        ordered: dict[str, str | None] = {}
        for key, tensor in self.state.items():
            if key in renames:
                ordered[key] = renames[key]
                continue
            owner = self.claims.get(id(tensor))
            ordered[key] = f"nodes.n_{owner[0]}.{owner[1]}" if owner else None
        self.graph.renames = ordered

    def _verify(self) -> None:
        """``hndl.check`` the graph, then hold every node's inferred shapes to the traced ones."""
        title = f"import of {type(self.root).__name__}"
        try:
            checked = check(self.graph)
        except HndlError as exc:
            mistake = Problem("E_IMPORT", "the imported graph does not check (a mistake of the importer)")
            raise import_error([*exc.problems, mistake], title=title) from None
        problems = shape_differences(checked, self.expected, self.symbols)
        if problems:
            raise import_error(problems, title=title)


def _without_defaults(emit: Emit) -> dict[str, Any]:
    """The node's parameters less those equal to the op's defaults, so a spec says only what differs."""
    opdef = registry.find(emit.op)
    if opdef is None:
        return dict(emit.params)
    defaults = {p.name: p.default for p in opdef.params}
    return {
        k: v
        for k, v in emit.params.items()
        if k not in defaults or not (type(v) is type(defaults[k]) and v == defaults[k])
    }


def _hooked(module: Any) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)
