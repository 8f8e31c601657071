"""GraphModule: the ``torch.nn.Module`` a graph builds into, with contracts checked once per input signature.

The call has two paths. The first call with a new *signature* (each input's shape, dtype and device, plus the
model's state version) runs :meth:`GraphModule._validate`: every contract is checked and every node runs
through ``nn.Module.__call__``. Later calls take the generated fast path (see :mod:`._codegen`) while the
guards of :mod:`._guards` hold (a known signature, registered state that still looks as recorded), and run the
layers. SPEC.md section 11 is the behaviour; IMPLEMENTATION.md "The checked runtime" is the
design.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.nn import functional as _functional

from .._errors import HndlError, Problem
from .._plan import Plan, Step
from ..naming import suggestion
from . import _checkpointing, _export, _hooks, _pipeline, _shard, _tensor_parallel
from ._activation_wrappers import is_activation_wrapper, unwrap
from ._blocks import collapse, collapsed_plan, install_programs, validating
from ._codegen import CALL, FORWARD, Compiled, compile_graph, make_function
from ._fsdp import reshard_after_failure
from ._guards import (
    VERSION_ATTR,
    StoresRecord,
    bump,
    global_hooks_active,
    hook_dicts,
    signature_guard,
    take_record,
)
from ._inline import Inline, in_place_steps, inline_for, sole_owner, sole_owner_with_grad
from ._state import BuildState, walk_modules
from ._symbolic import SymbolicCheck, proven_for_all_bindings
from ._validate import (
    CONTROL_FLOW,
    check_declared_outputs,
    check_inputs,
    check_state,
    layer_failure,
    parameter_dtype,
    run_checked,
)

__all__ = ["GraphModule", "SIGNATURE_CACHE_SIZE"]

#: How many input signatures one GraphModule remembers. When full, the oldest is forgotten (FIFO), so a
#: model called with ever-changing shapes costs one validation per new shape and bounded memory.
SIGNATURE_CACHE_SIZE = 64

_is_compiling = torch.compiler.is_compiling
_tracing_state = torch._C._get_tracing_state

# Attributes rebuilt for every instance (after deepcopy, copy or unpickling) rather than copied.
_RUNTIME_KEYS = ("_signatures", "_lock", "_runtime", "_owned", VERSION_ATTR, "_signatures_version", "_symbolic")


@dataclass(frozen=True, eq=False)
class _Runtime:
    """One immutable object, replaced atomically: the stores record and the functions generated for it."""

    stores: StoresRecord
    execute: Callable[..., Any]  # execute(self, args, kwargs): the checked call
    unchecked: Callable[..., Any]  # unchecked(self, *inputs): the call traced under torch.compile
    compiled: Compiled
    # Whether the record was taken when the registered state was known to match the build (after a build, a
    # passed state check, or from such a record): while it then still matches, so does the state.
    verified: bool
    model_dtype: tuple[torch.dtype, ...] | None  # parameter_dtype() of the recorded state
    forms: tuple[str | Inline, ...]  # per step: how the fast path calls it (``_codegen.compile_graph``)
    # The steps the generated call runs: the plan's, with each observed block one step (``_blocks.collapse``).
    plan: Plan

    @property
    def hooked(self) -> tuple[bool, ...]:
        """Per step: called through ``nn.Module.__call__`` (a hook, a compiled layer, a global hook)."""
        return tuple(form == CALL for form in self.forms)


class GraphModule(nn.Module):
    """A built graph: ``nodes`` holds one torch module per node (key ``n_<name>``).

    Call it with the graph's inputs, positionally in declaration order or by name. One output is returned as
    a tensor, several as a tuple.

    **Checked once per signature.** The first call with a new signature (each input's shape, dtype and device,
    and the model's state version) validates: inputs against their contracts (``E_INPUT``), the registered
    parameters, buffers and submodules against the build (``E_RUNTIME``), then every node runs and its
    outputs are checked against the types static inference gave them (``E_CONTRACT``). Later calls with a known
    signature run the layers directly, calling ``forward`` of each layer that has no hook. :attr:`validations`
    counts full validations. The signature cache holds at most :data:`SIGNATURE_CACHE_SIZE` signatures per
    model (the oldest is forgotten first) and is safe to use from many threads.

    **What makes the next call validate again** (all of it is decided in ``hndl/torch/_guards.py``): a
    parameter, buffer or submodule registered on a module of the model (PyTorch's registration hooks:
    ``m.weight = nn.Parameter(...)``, ``register_buffer``, assigning a submodule); ``.to()``, ``.half()``,
    ``.double()``, ``.cuda()``; and, found by comparing the stores record on every call, edits no hook reports:
    ``m.bias = None`` (PyTorch runs its registration hooks for real values only), ``del m.weight``, direct
    writes to ``_parameters``, ``_buffers`` or ``_modules`` (an entry removed, set to ``None``, added, renamed or
    reordered, a submodule replaced, even by one whose ``__eq__`` lies), a whole store dict replaced, a hook
    added to a node's module or globally, a module's ``__class__`` swapped, an attribute added to a node's
    layer (``forward`` assigned, ``Module.compile()``), and a registered tensor whose shape or dtype changed in
    place (read through ``torch.Tensor``'s own ``size`` and ``dtype``, so a subclass's lying ``shape`` property
    is not believed). A change that breaks the build raises ``E_RUNTIME`` naming the node and the change; putting the
    original back makes the next call validate and pass. ``train()``/``eval()`` do not revalidate.

    Converting one layer on its own (``model.nodes.n_hidden.half()``) changes its tensors' dtypes in place:
    ``E_RUNTIME`` on the next call; convert the whole model.

    With no gradient recorded, a residual ``add`` may write into an input that nobody else can observe (made new
    by an unhooked layer, read once, held by the call alone on that call: SPEC 11.1); a kept hook output, the
    caller's tensors and registered tensors are never written.

    **Not detected** (the fast path keeps running): a same-shape, same-dtype tensor swapped in under its
    registered name (what ``torch.func.functional_call`` does; it stays on the fast path and is not kept
    alive).

    Under ``torch.compile`` no check runs: the layers are called through ``__call__`` and Dynamo sees plain
    module calls.

    Attributes:
        nodes: the node modules, ``nodes["n_<name>"]``; a ``graph`` node holds a ``ModuleList`` of
            ``ModuleDict``, one per repetition.
        graph: the :class:`~hndl.Graph` this was built from.
        validations: how many full validations this model has run (each attempt counts, failed ones too).
    """

    # Runtime state (_RUNTIME_KEYS) is written straight into __dict__, past nn.Module.__setattr__, so mypy would
    # otherwise type these through nn.Module.__getattr__ (Tensor | Module). Annotations only: no class attribute.
    _signatures: dict[tuple[Any, ...], None]
    _signatures_version: int | None
    _lock: threading.RLock
    _owned: frozenset[int]
    _runtime: _Runtime
    _state_version: int
    _symbolic: SymbolicCheck | None
    _checkpointed: frozenset[int]

    def __init__(self, plan: Plan, nodes: nn.ModuleDict) -> None:
        super().__init__()
        self.nodes = nodes
        self.graph = plan.checked.graph
        self._plan = plan
        self._build_state = BuildState.take(self, plan)
        self.validations = 0
        self._init_runtime(verified=True)  # the build state was just taken from these modules

    # -- what the model is made of (public, read-only) ------------------------------------------------------

    @property
    def plan(self) -> Plan:
        """The :class:`~hndl.Plan` this model runs: its leaf steps in order, input and output value ids, each
        value's last use and each node's spec location. Shared by the CLI and hndl-func; never changes."""
        return self._plan

    @property
    def build_state(self) -> BuildState:
        """What the build registered: every module, parameter and buffer with its shape, dtype and owning node.

        A validation compares the live tree with it (``E_RUNTIME`` on a mismatch); :func:`hndl.func.functional_call`
        checks parameter dicts against it. Dtypes follow a conversion of the whole model.
        """
        return self._build_state

    @property
    def state_version(self) -> int:
        """A number that changes whenever the registered state may have changed (a registration PyTorch's hooks
        report, a conversion such as ``.half()``): a call validates again after it changes. Versions come from
        one process-wide counter and are never reused. Cheap to read: one dict lookup."""
        version: int = self.__dict__[VERSION_ATTR]
        return version

    @property
    def code(self) -> str:
        """The Python source generated for this model's call, as tracebacks and debuggers show it.

        ``execute`` is the checked call (the guards, then one line per leaf step, each commented with its node);
        ``unchecked`` is the call traced under ``torch.compile``. Regenerated when the stores record is retaken.
        """
        return self._runtime.compiled.source

    def node_module(self, path: Sequence[str]) -> nn.Module | None:
        """The live module at a node's path under ``nodes`` (``step.node.path`` of a :attr:`plan` step), or
        ``None`` when something on the way was removed or set to ``None``. An activation wrapper on the way
        (``checkpoint_wrapper`` around a block) is seen through; one at the end is what is returned: it is what
        runs that node."""
        module: Any = self._modules.get("nodes")
        for key in path:
            if module is None:
                return None
            module = unwrap(module)._modules.get(key)
        return module

    def replace_layer(self, node: str, module: nn.Module) -> None:
        """Swap node ``node``'s layer for any module (a quantized or fused layer, another class): the one way to
        put a layer of an unrelated class in place, which otherwise is ``E_RUNTIME`` on the next call.

        ``module`` becomes the build of that node: its parameters and buffers are what :attr:`build_state`
        records for it from now on. The next call validates, running the new layer with its outputs checked
        against the node's contract (``E_CONTRACT`` naming the node when they break it).

        Args:
            node: the node's qualified name, as errors name it (``"hidden"``, ``"blocks.0.attn"``).
            module: the new layer.

        Raises:
            HndlError: E_RUNTIME when no node has that name (with the closest name).
        """
        step = next((s for s in self._plan.steps if s.node.qualname == node), None)
        if step is None:
            names = [s.node.qualname for s in self._plan.steps]
            raise HndlError(
                Problem(
                    "E_RUNTIME",
                    f"graph '{self.graph.name}' has no node {node!r} to replace",
                    node=node,
                    expected="a node name: " + ", ".join(names[:8]) + (", ..." if len(names) > 8 else ""),
                    actual=node,
                    hint=suggestion(node, names),
                )
            )
        path = step.node.path
        parent = unwrap(self.node_module(path[:-1])) if len(path) > 1 else self._modules["nodes"]
        if parent is None:
            raise HndlError(step.node.problem("E_RUNTIME", "the module holding this node's layer was removed"))
        with self._lock:
            self._build_state.adopt("nodes." + ".".join(path), module, step.node.qualname, step.node.op)
            parent.add_module(path[-1], module)  # PyTorch's registration hook gives a new state version
            bump(self)

    # -- activation checkpointing (hndl/torch/_checkpointing.py; SPEC.md section 16) ------------------------

    @property
    def checkpointed(self) -> tuple[str, ...]:
        """The subgraph uses recomputed in backward (``("h.0", "h.1")``), in step order."""
        return _checkpointing.names_of(self._plan, self._checkpointed)

    def checkpointing(
        self, nodes: Sequence[str] | str | None = None, budget: int | None = None, **dims: int
    ) -> tuple[str, ...]:
        """Choose which subgraph uses recompute their activations in backward instead of keeping them.

        ``nodes`` names them: a ``graph`` node stands for all its uses (``"h"``), a use for itself (``"h.3"``);
        ``budget`` (bytes) lets hndl choose them instead, so the estimated activation peak of a training step
        at ``dims`` fits it at little extra compute (:mod:`hndl._memory`); neither turns checkpointing off
        (``model.checkpointing(None)``). It replaces what the spec's ``checkpoint: true`` chose. No rebuild and
        no new validation: the next call takes the fast path with every check in place. A use recomputes only
        while gradients are recorded; under ``torch.no_grad`` the model runs as without checkpointing.

        Args:
            nodes: the uses to recompute, or None.
            budget: activation bytes to fit, or None; needs every symbol of the inputs in ``dims``.
            **dims: sizes of the inputs' symbols for ``budget`` (``B=8, T=512``).

        Returns:
            The uses now recomputed, as :attr:`checkpointed` gives them.

        Raises:
            HndlError: E_PARAM for a name that is not a subgraph use, both ``nodes`` and ``budget`` given, or a
                budget that cannot be met (the message names the smallest feasible one); E_INPUT for a bad dim.
                The setting is unchanged after an error.
        """
        if nodes is not None and budget is not None:
            raise HndlError(
                Problem(
                    "E_PARAM",
                    "checkpointing takes the uses to recompute or a budget, not both",
                    expected="nodes=... or budget=...",
                    actual="both",
                )
            )
        if dims and budget is None:
            raise HndlError(
                Problem(
                    "E_PARAM",
                    "dims size a budget; without budget= they mean nothing",
                    expected="budget=... with the dims",
                    actual=", ".join(dims),
                )
            )
        if budget is not None:
            chosen = _checkpointing.planned(self, budget, dims)
        else:
            chosen = frozenset() if nodes is None else _checkpointing.resolve(self._plan, nodes)
        with self._lock:
            self.__dict__["_checkpointed"] = chosen
            # The same stores record: what it proved about the registered state still holds, and a change
            # made since is still found by the next call's comparison.
            self._install(self._leaves(), self._runtime.stores)
        return self.checkpointed

    # -- runtime state --------------------------------------------------------------------------------------

    def _init_runtime(self, verified: bool) -> None:
        """Runtime state for this instance: ``verified`` when its registered state is the build's (a new build),
        not for a copy or an unpickled model, whose tensors may have been edited before they were copied."""
        d = self.__dict__
        d["_signatures"] = {}
        d["_signatures_version"] = None
        d["_lock"] = threading.RLock()
        d["_owned"] = frozenset()
        # The checkpointed uses are a setting of the model, not runtime state: copies and pickles keep it.
        d.setdefault("_checkpointed", _checkpointing.flagged(self._plan))
        d["_symbolic"] = SymbolicCheck(self._plan, check_inputs) if proven_for_all_bindings(self._plan) else None
        bump(self)
        install_programs(self._plan, ((i, unwrap(block)) for i, block in enumerate(self._blocks())))
        self._install(self._leaves(), verified=verified)

    def _leaves(self) -> list[nn.Module | None]:
        return [self.node_module(step.node.path) for step in self._plan.steps]

    def _blocks(self) -> list[nn.Module | None]:
        """The live module of each subgraph use (``plan.groups``), ``None`` where it is gone."""
        return [self.node_module(group.path) for group in self._plan.groups]

    def _effective(self) -> tuple[Plan, list[nn.Module | None], set[int]]:
        """The steps as they run now (each block that a hook or ``compile()`` observes, that an activation
        wrapper holds, or that is checkpointed, is one step that calls it), their modules, and which groups are
        called."""
        checkpointed = self._checkpointed
        called = {
            i
            for i, block in enumerate(self._blocks())
            if block is not None
            and (
                i in checkpointed
                or any(hook_dicts(block))
                or block.__dict__.get("_compiled_call_impl") is not None
                or is_activation_wrapper(block)
            )
        }
        if not called:
            return self._plan, self._leaves(), called
        plan = collapsed_plan(self._plan, called)
        return plan, [self.node_module(step.node.path) for step in plan.steps], called

    def _watched(self, leaves: list[nn.Module | None]) -> list[nn.Module]:
        """The modules whose hooks and instance attributes the stores record compares: the leaf layers, and the
        blocks (a hook added to a block makes it a step of its own)."""
        return [m for m in (*leaves, *self._blocks()) if m is not None]

    def _install(
        self, leaves: list[nn.Module | None], stores: StoresRecord | None = None, verified: bool | None = None
    ) -> None:
        """Take the stores record (unless given), generate the call for it and publish both atomically.
        ``verified`` says the state recorded matches the build (None: as the current record's did)."""
        if stores is None:
            stores = take_record(self, self._watched(leaves))
        plan, leaves, _called = self._effective()
        global_hooks = global_hooks_active()
        hooked = tuple(
            m is None or global_hooks or any(hook_dicts(m)) or m.__dict__.get("_compiled_call_impl") is not None
            for m in leaves
        )
        current = self.__dict__.get("_runtime")
        if verified is None:
            verified = current is not None and current.verified
        signature = signature_guard(self._symbolic is not None).source
        forms = self._call_forms(plan.steps, leaves, hooked)
        if current is not None and current.stores is stores and current.forms == forms and current.plan is plan:
            # Validation found the recorded state unchanged (a new input signature): the generated call is
            # still the right one, and regenerating it would cost the first call of a shape most of its time.
            if current.verified != verified:
                self.__dict__["_runtime"] = dataclasses.replace(current, verified=verified)
            return
        in_place = in_place_steps(plan, leaves, forms, hooked)
        compiled = compile_graph(plan, forms, in_place, stores.terms, signature, self.graph.name)
        namespace = dict(stores.namespace)
        namespace.update(
            sigs=self._signatures,
            bind=GraphModule._bind,
            validate=GraphModule._validate,
            admit=GraphModule._admit,
            settle=GraphModule._settle,
            fail=partial(_fast_failure, compiled, plan),
        )
        run = _checkpointing.runners(self._plan, plan, leaves, self._checkpointed)
        for i, (module, form) in enumerate(zip(leaves, forms)):
            # A missing module can only be met after validation, which reports it; never called before.
            namespace[f"m{i}"] = _MISSING if module is None else run[i]
            if module is not None and isinstance(form, Inline):
                # Bound with the record: it compares these dicts by identity on every call (see ._inline).
                namespace.update({f"p{i}": module._parameters, f"d{i}": module.__dict__, f"k{i}": type(module)})
                namespace[f"f{i}"] = form.original
        for i, step in in_place.items():
            namespace[f"q{i}"], namespace[f"g{i}"] = step.producer, step.producer_forward
        namespace["F"] = _functional
        namespace["grad_enabled"] = torch.is_grad_enabled
        namespace["alone"] = sole_owner
        namespace["alone_grad"] = sole_owner_with_grad
        execute = make_function(compiled.execute, namespace)
        unchecked = current.unchecked if current is not None and current.compiled is compiled else None
        if unchecked is None:
            unchecked = make_function(compiled.unchecked, {})
        self.__dict__["_runtime"] = _Runtime(
            stores=stores,
            execute=execute,
            unchecked=unchecked,
            compiled=compiled,
            verified=verified,
            model_dtype=parameter_dtype(self),
            forms=forms,
            plan=plan,
        )
        self.__dict__["_owned"] = _hooks.own(self, (m for _p, m in walk_modules(self)), self._owned)

    @staticmethod
    def _call_forms(
        steps: Sequence[Step], leaves: list[nn.Module | None], hooked: tuple[bool, ...]
    ) -> tuple[str | Inline, ...]:
        """Per step, how the fast path calls its layer (see ``_codegen.compile_graph``): through ``__call__`` when
        hooked, written out for a layer of ``_inline``'s table given as many inputs as its forward takes, else
        ``forward``."""
        forms: list[str | Inline] = []
        for step, module, through_call in zip(steps, leaves, hooked):
            inline = None if through_call else inline_for(module)
            if inline is not None and inline.arity != len(step.inputs):
                inline = None
            forms.append(CALL if through_call else FORWARD if inline is None else inline)
        return tuple(forms)

    # -- calling --------------------------------------------------------------------------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if _is_compiling():
            # Before any comparison: Dynamo traces plain module calls, and no Python state is consulted.
            inputs = args if not kwargs and len(args) == len(self._plan.input_names) else self._bind(args, kwargs)
            return self._runtime.unchecked(self, *inputs)
        try:
            return self._runtime.execute(self, args, kwargs)
        except HndlError:
            reshard_after_failure(self)  # FSDP2 gathered parameters in its pre-forward hook: put them back
            raise

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        names = self._plan.input_names
        if len(args) > len(names):
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"graph '{self.graph.name}' takes {len(names)} input{'' if len(names) == 1 else 's'}, got {len(args)}",
                    expected=", ".join(names),
                    actual=f"{len(args)} positional",
                )
            )
        values = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise HndlError(
                    Problem(
                        "E_INPUT",
                        f"unknown input {key!r} for graph '{self.graph.name}'",
                        node=key,
                        op="input",
                        expected=", ".join(names),
                        actual=key,
                    )
                )
            if key in values:
                raise HndlError(Problem("E_INPUT", "given both by position and by name", node=key, op="input"))
            values[key] = value
        missing = [n for n in names if n not in values]
        if missing:
            raise HndlError(
                Problem(
                    "E_INPUT",
                    "missing",
                    node=missing[0],
                    op="input",
                    expected=", ".join(names),
                    actual=", ".join(values) or "no inputs",
                )
            )
        return tuple(values[n] for n in names)

    def _validate(self, inputs: tuple[Any, ...], sig: tuple[Any, ...] | None) -> Any:
        """The full check of one call; returns this run's outputs (no node runs twice for one call).

        ``sig`` is the signature the generated call built (``None`` when an input has no shape: then the input
        check fails); it is remembered once the call passes.

        Raises:
            HndlError: E_INPUT, E_RUNTIME (registered state, or a layer failed) or E_CONTRACT.
        """
        plan = self._plan
        if _tracing_state() is not None:
            # torch.jit.trace records whatever runs and then checks that a second run records the same graph: the
            # inputs are checked, the plain layer calls run, and nothing is remembered, so every traced run of a
            # new signature takes this same path. (Costs nothing on the fast path, which never gets here.)
            check_inputs(plan.checked, inputs, parameter_dtype(self))
            return self._runtime.unchecked(self, *inputs)
        with self._lock:
            self.validations += 1
        runtime = self._runtime
        stores = runtime.stores
        # A record taken when the state matched the build, and still matching it (a new input signature, a
        # version bumped by an edit that put back what was there), proves the state matches: the state check and
        # the parameter dtypes would only find again what they found then.
        recorded = stores.fast_matches()
        unchanged = runtime.verified and recorded
        env = check_inputs(plan.checked, inputs, runtime.model_dtype if unchanged else parameter_dtype(self))
        if not unchanged:
            check_state(self._build_state, self, plan.locations)
        leaves = self._leaves()
        # The registered state matches the build: this is the state to record. A record that still matches it
        # describes the same state and is kept.
        if not recorded:
            stores = take_record(self, self._watched(leaves))
        running, modules, called = self._effective()
        values: dict[str, Any] = dict(zip(plan.input_ids, inputs))
        # A block called through its hooks (FSDP2 gathers its parameters there) runs its steps with these checks.
        token = validating.set(partial(self._validate_block, env, called)) if called else None
        try:
            run = _checkpointing.runners(plan, running, modules, self._checkpointed)
            run_checked(running.steps, run, values, env, running.last_use)
        finally:
            if token is not None:
                validating.reset(token)
        outs = tuple(values[v] for v in plan.output_ids)
        check_declared_outputs(plan.checked, outs, env)
        with self._lock:
            self._install(leaves, stores, verified=True)
            if sig is not None:
                self._remember(sig)
                if self._symbolic is not None:
                    self._symbolic.validated(sig)
        return outs[0] if len(outs) == 1 else outs

    def _validate_block(
        self, env: dict[str, Any], called: set[int], block: nn.Module, program: Any, inputs: Any
    ) -> Any:
        """Run a called block's steps with the validation's checks (``_blocks.validating``), or NotImplemented
        for a block that is not one of this model's."""
        groups = self._plan.groups
        index = next((i for i, g in enumerate(groups) if g.qualname == program.qualname), None)
        if index is None or unwrap(self.node_module(groups[index].path)) is not block:
            return NotImplemented
        group = groups[index]
        steps = collapse(self._plan, group.start, group.stop, called, inside=index)
        last_use = {v: position for position, step in enumerate(steps) for v in (*step.inputs, *step.outputs)}
        last_use.update(dict.fromkeys(group.outputs, len(steps)))
        values: dict[str, Any] = dict(zip(group.inputs, inputs))
        modules = [self.node_module(step.node.path) for step in steps]
        run_checked(steps, modules, values, env, last_use)  # type: ignore[arg-type]
        outs = tuple(values[v] for v in group.outputs)
        return outs[0] if len(outs) == 1 else outs

    def _admit(self, sig: tuple[Any, ...], inputs: tuple[Any, ...]) -> bool:
        """A signature not yet remembered: take the fast path without a full validation when it is a new binding
        of the symbols of a dtype/device pattern that validated fully (see ``_symbolic``) and the inputs meet
        their contracts; then remember it. Called by the generated code only while the stores record matches."""
        symbolic = self._symbolic
        if symbolic is None or not symbolic.admits(sig, inputs):
            return False
        with self._lock:
            self._remember(sig)
        return True

    def _settle(self) -> bool:
        """The inlined comparison of the stores record failed: decide by the precise one (tensors by shape and
        dtype only). True keeps the call on the fast path: nothing the build depends on changed, only what the
        inlined tensor guard also compares (a tensor swapped in by ``torch.func.functional_call``, ``requires_grad``
        turned off, strides, ``inference_mode`` or autocast). When the registered tensors are the recorded objects
        the record is retaken, so the next call passes the inlined comparison again; during a swap it is not (the
        record would describe tensors about to leave). Called by the generated code only.

        Under ``torch.jit.trace`` (whose dispatch key the tensor guard sees) it answers False: the call validates,
        which under tracing checks the inputs and runs the plain layer calls, so every traced run records one
        graph and nothing the comparison reads is recorded."""
        stores = self._runtime.stores
        if _tracing_state() is not None or not stores.matches():
            return False
        if stores.same_tensors():
            with self._lock:
                if self._runtime.stores is stores:
                    self._install(self._leaves())
        return True

    def _remember(self, sig: tuple[Any, ...]) -> None:
        """Add a signature that passed (under the lock); the last item of a signature is its state version."""
        version = sig[-1]
        sigs = self._signatures
        if self._signatures_version != version:
            sigs.clear()  # signatures of an older state version can never match again
            self.__dict__["_signatures_version"] = version
        if sig not in sigs:
            while len(sigs) >= SIGNATURE_CACHE_SIZE:
                del sigs[next(iter(sigs))]
            sigs[sig] = None

    # -- state changes PyTorch's hooks do not report ------------------------------------------------------------

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> GraphModule:
        # .to(), .half(), .double(), .cuda() ... all come through here; a conversion is a new state version.
        result = super()._apply(fn, recurse)
        state = self.__dict__.get("_build_state")
        if state is not None:
            state.refresh_dtypes(self)
        bump(self)
        return result

    # -- copying and pickling -------------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        for key in _RUNTIME_KEYS:
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._init_runtime(verified=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> GraphModule:
        # The record, generated code and signature cache are rebuilt for the clone's own modules, so the clone's
        # first call validates and nothing of the original's runtime state (nor any tensor) is copied.
        cls = type(self)
        clone = cls.__new__(cls)
        memo[id(self)] = clone
        for key, value in self.__getstate__().items():
            clone.__dict__[key] = copy.deepcopy(value, memo)
        clone._init_runtime(verified=False)
        return clone

    def extra_repr(self) -> str:
        return f"graph={self.graph.name!r}"

    # -- interop (hndl/torch/_export.py; SPEC.md section 13) ------------------------------------------------

    def example_inputs(self, **dims: Any) -> tuple[torch.Tensor, ...]:
        """Inputs satisfying every contract (``B=4``; others default): see :func:`hndl.torch.example_inputs`."""
        return _export.example_inputs(self, **dims)

    def pipeline_stages(
        self, split_at: Sequence[str] | None = None, *, num_stages: int | None = None, **dims: int
    ) -> list[nn.Module]:
        """The model cut into stages for ``torch.distributed.pipelining``: see
        :func:`hndl.torch._pipeline.pipeline_stages`."""
        return list(_pipeline.pipeline_stages(self, split_at, num_stages=num_stages, **dims))

    def tensor_parallel_plan(self, world_size: int | None = None) -> dict[str, Any]:
        """The plan for ``torch.distributed.tensor.parallel.parallelize_module``: column-parallel into and
        row-parallel out of each MLP and attention; see :func:`hndl.torch._tensor_parallel.tensor_parallel_plan`."""
        return _tensor_parallel.tensor_parallel_plan(self, world_size)

    def shard_units(self) -> list[nn.Module]:
        """The modules to pass to FSDP2's ``fully_shard``, the blocks first and this model last, tied parameters
        kept in one unit: see :func:`hndl.torch._shard.shard_units`."""
        return _shard.shard_units(self)

    def dynamic_shapes(self, **dims: Any) -> tuple[tuple[dict[int, Any], ...]]:
        """``torch.export`` dynamic dims, one per symbol: see :func:`hndl.torch.dynamic_shapes`."""
        return _export.dynamic_shapes(self, **dims)

    def __prepare_scriptable__(self) -> GraphModule:
        raise _export.not_scriptable(self)  # torch.jit.script calls this first: say what to use instead

    # -- summary (hndl/_summary.py) ---------------------------------------------------------------------------

    def summary(
        self, *, depth: int | None = None, train: bool = False, optimizer: str | None = None, **dims: int
    ) -> Any:
        """This model's :class:`hndl.Summary` (prints as the table): see :func:`hndl.summary`."""
        from .._summary import summary

        return summary(self, depth=depth, train=train, optimizer=optimizer, **dims)


class _Missing:
    """Stands in for a node's module that was removed: validation reports it first, so this never runs."""

    def __call__(self, *args: Any) -> Any:
        raise HndlError(Problem("E_RUNTIME", "a node's module is missing"))

    forward = __call__


_MISSING = _Missing()


def _fast_failure(compiled: Compiled, plan: Plan, self: GraphModule, exc: BaseException) -> None:
    """A layer raised on the fast path: find its step from the traceback line and raise E_RUNTIME from it. An
    ``HndlError`` (from inside a called block, which names its own layer) and torch's control flow
    (``_validate.CONTROL_FLOW``: checkpoint's early stop) go on as they are."""
    if isinstance(exc, CONTROL_FLOW):
        return
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != compiled.filename:
        tb = tb.tb_next
    index = compiled.lines.get(tb.tb_lineno) if tb is not None else None
    if tb is None or index is None:
        raise HndlError(Problem("E_RUNTIME", f"the call failed: {type(exc).__name__}: {exc}")) from exc
    frame_locals = tb.tb_frame.f_locals
    ins = [frame_locals.get(name) for name in compiled.step_locals[index]]
    raise layer_failure(plan.steps[index].node, ins, exc) from exc
