"""A GraphModule's runtime: its state in one object, the generated call installed for it, and the full check.

:class:`Runtime` is everything a model holds to run checked (the stores record, the generated functions, the
signature cache, the lock, the symbolic check, the modules it owns, the per-step store). It is immutable and
replaced atomically (``model.__dict__["_runtime"]``); the mutable parts it carries (the signature cache, the
symbolic check, the per-step store) are shared from one runtime to the next. It is never copied or pickled:
:func:`start` makes a fresh one for a new model, a copy and an unpickled model.

The functions here take the model (a :class:`._built.BuiltModel`) and are what the generated call's handlers
run: :func:`validate` (the full check of one call), :func:`admit` (a new binding of proven symbols),
:func:`settle` (the precise stores comparison); :func:`install` generates the call for a record and publishes
it. SPEC.md section 11 is the behaviour; IMPLEMENTATION.md "The checked runtime" is the design.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from .._plan import Plan, Step
from . import _checkpointing, _hooks
from ._activation_wrappers import is_activation_wrapper, unwrap
from ._binding import bind_inputs
from ._blocks import collapse, collapsed_plan, install_programs, validating
from ._built import BuiltModel
from ._codegen import CALL, FORWARD, Compiled, bind_execute, compile_graph, make_function
from ._guards import StoresRecord, bump, global_hooks_active, hook_dicts, signature_guard, take_record
from ._in_place import in_place_steps
from ._inline import Inline, inline_for
from ._per_step import PerStep, adopt
from ._signatures import SignatureCache
from ._symbolic import SymbolicCheck, proven_for_all_bindings
from ._validate import check_declared_outputs, check_inputs, check_state, parameter_dtype, run_checked

__all__ = ["Runtime", "admit", "install", "leaves", "settle", "start", "validate"]

_tracing_state = torch._C._get_tracing_state


@dataclass(frozen=True, eq=False)
class Runtime:
    """One model's runtime state, replaced atomically: the stores record, the functions generated for it, and
    the per-model objects every runtime of the model shares."""

    stores: StoresRecord
    execute: Callable[..., Any]  # execute(model, args, kwargs): the checked call
    unchecked: Callable[..., Any]  # unchecked(model, *inputs): the call traced under torch.compile
    compiled: Compiled
    # Whether the record was taken when the registered state was known to match the build (after a build, a
    # passed state check, or from such a record): while it then still matches, so does the state.
    verified: bool
    model_dtype: tuple[torch.dtype, ...] | None  # parameter_dtype() of the recorded state
    forms: tuple[str | Inline, ...]  # per step: how the fast path calls it (``_codegen.compile_graph``)
    # The steps the generated call runs: the plan's, with each observed block one step (``_blocks.collapse``).
    plan: Plan
    signatures: SignatureCache  # bound in ``execute`` as ``sigs``
    lock: threading.RLock  # held by every writer of the model's runtime state
    symbolic: SymbolicCheck | None  # where inference proved every binding of the symbols (``_symbolic``)
    per_step: PerStep  # the values the model's attention layers make once per step (``_per_step``)
    owned: frozenset[int]  # ids of the modules registered as this model's (``_hooks.own``)

    @property
    def hooked(self) -> tuple[bool, ...]:
        """Per step: called through ``nn.Module.__call__`` (a hook, a compiled layer, a global hook)."""
        return tuple(form == CALL for form in self.forms)


def runtime_of(model: BuiltModel) -> Runtime:
    runtime: Runtime = model.__dict__["_runtime"]
    return runtime


def start(model: BuiltModel, verified: bool) -> None:
    """Give ``model`` a fresh runtime: ``verified`` when its registered state is the build's (a new build), not
    for a copy or an unpickled model, whose tensors may have been edited before they were copied."""
    plan = model.plan
    # The checkpointed uses are a setting of the model, not runtime state: copies and pickles keep it.
    model.__dict__.setdefault("_checkpointed", _checkpointing.flagged(plan))
    symbolic = SymbolicCheck(plan, check_inputs) if proven_for_all_bindings(plan) else None
    per_step = PerStep()
    live = leaves(model)
    adopt(live, per_step)  # the steps' layers share one store; before the record, which counts attributes
    model.__dict__.pop("_runtime", None)
    bump(model)
    install_programs(plan, ((i, unwrap(block)) for i, block in enumerate(blocks(model))))
    shared = {
        "signatures": SignatureCache(),
        "lock": threading.RLock(),
        "symbolic": symbolic,
        "per_step": per_step,
        "owned": frozenset(),
    }
    install(model, live, verified=verified, shared=shared)


def leaves(model: BuiltModel) -> list[nn.Module | None]:
    """The live module of each step of the plan, ``None`` where it is gone."""
    return [model.node_module(step.node.path) for step in model.plan.steps]


def blocks(model: BuiltModel) -> list[nn.Module | None]:
    """The live module of each subgraph use (``plan.groups``), ``None`` where it is gone."""
    return [model.node_module(group.path) for group in model.plan.groups]


def effective(
    model: BuiltModel, live: list[nn.Module | None] | None = None
) -> tuple[Plan, list[nn.Module | None], set[int]]:
    """The steps as they run now (each block that a hook or ``compile()`` observes, that an activation wrapper
    holds, that is checkpointed, or whose instance has its own ``forward``, is one step that calls it), their
    modules, and which groups are called. ``live``: :func:`leaves` of the model, where the caller just took it."""
    checkpointed = model._checkpointed
    called = {
        i
        for i, block in enumerate(blocks(model))
        if block is not None
        and (
            i in checkpointed
            or any(hook_dicts(block))
            or block.__dict__.get("_compiled_call_impl") is not None
            or is_activation_wrapper(block)
            # A forward set on the instance (torch.distributed.pipelining's split_spec wraps it to mark a split
            # point) runs only if the block is called.
            or "forward" in block.__dict__
        )
    }
    if not called:
        return model.plan, list(live) if live is not None else leaves(model), called
    plan = collapsed_plan(model.plan, called)
    return plan, [model.node_module(step.node.path) for step in plan.steps], called


def _watched(model: BuiltModel, live: list[nn.Module | None]) -> list[nn.Module]:
    """The modules whose hooks and instance attributes the stores record compares: the leaf layers, and the
    blocks (a hook added to a block makes it a step of its own)."""
    return [m for m in (*live, *blocks(model)) if m is not None]


def _call_forms(
    steps: Sequence[Step], modules: list[nn.Module | None], hooked: tuple[bool, ...]
) -> tuple[str | Inline, ...]:
    """Per step, how the fast path calls its layer (see ``_codegen.compile_graph``): through ``__call__`` when
    hooked, written out for a layer of ``_inline``'s table given as many inputs as its forward takes, else
    ``forward``."""
    forms: list[str | Inline] = []
    for step, module, through_call in zip(steps, modules, hooked):
        inline = None if through_call else inline_for(module)
        if inline is not None and inline.arity != len(step.inputs):
            inline = None
        forms.append(CALL if through_call else FORWARD if inline is None else inline)
    return tuple(forms)


def install(
    model: BuiltModel,
    live: list[nn.Module | None],
    stores: StoresRecord | None = None,
    verified: bool | None = None,
    shared: dict[str, Any] | None = None,
) -> None:
    """Take the stores record (unless given), generate the call for it and publish both atomically.
    ``verified`` says the state recorded matches the build (None: as the current record's did); ``shared`` gives
    a new runtime's per-model objects (otherwise the current runtime's are kept)."""
    if stores is None:
        stores = take_record(model, _watched(model, live))
    plan, running, _called = effective(model, live)
    global_hooks = global_hooks_active()
    hooked = tuple(
        m is None or global_hooks or any(hook_dicts(m)) or m.__dict__.get("_compiled_call_impl") is not None
        for m in running
    )
    current: Runtime | None = model.__dict__.get("_runtime")
    if shared is None:
        assert current is not None
        shared = {f: getattr(current, f) for f in ("signatures", "lock", "symbolic", "per_step", "owned")}
    if verified is None:
        verified = current is not None and current.verified
    forms = _call_forms(plan.steps, running, hooked)
    if current is not None and current.stores is stores and current.forms == forms and current.plan is plan:
        # Validation found the recorded state unchanged (a new input signature): the generated call is
        # still the right one, and regenerating it would cost the first call of a shape most of its time.
        if current.verified != verified:
            model.__dict__["_runtime"] = dataclasses.replace(current, verified=verified)
        return
    in_place = in_place_steps(plan, running, forms, hooked)
    signature = signature_guard(shared["symbolic"] is not None).source
    compiled = compile_graph(plan, forms, in_place, stores.terms, signature, model.graph.name)
    handlers = {
        "sigs": shared["signatures"].entries,
        "bind": partial(bind_inputs, model.plan.input_names, model.graph.name),
        "validate": validate,
        "admit": admit,
        "settle": settle,
    }
    calls = _checkpointing.runners(model.plan, plan, running, model._checkpointed)
    execute = bind_execute(compiled, plan, stores.namespace, running, calls, forms, in_place, handlers)
    unchecked = current.unchecked if current is not None and current.compiled is compiled else None
    if unchecked is None:
        unchecked = make_function(compiled.unchecked, {})
    # The record walked the tree already: its modules are the tree's, each once.
    shared["owned"] = _hooks.own(model, stores.modules, shared["owned"])
    model.__dict__["_runtime"] = Runtime(
        stores=stores,
        execute=execute,
        unchecked=unchecked,
        compiled=compiled,
        verified=verified,
        model_dtype=parameter_dtype(model, stores.parameters()),
        forms=forms,
        plan=plan,
        **shared,
    )


def validate(model: BuiltModel, inputs: tuple[Any, ...], sig: tuple[Any, ...] | None) -> Any:
    """The full check of one call; returns this run's outputs (no node runs twice for one call).

    ``sig`` is the signature the generated call built (``None`` when an input has no shape: then the input
    check fails); it is remembered once the call passes.

    Raises:
        HndlError: E_INPUT, E_RUNTIME (registered state, or a layer failed) or E_CONTRACT.
    """
    plan = model.plan
    runtime = runtime_of(model)
    if _tracing_state() is not None:
        # torch.jit.trace records whatever runs and then checks that a second run records the same graph: the
        # inputs are checked, the plain layer calls run, and nothing is remembered, so every traced run of a
        # new signature takes this same path. (Costs nothing on the fast path, which never gets here.)
        check_inputs(plan.checked, inputs, parameter_dtype(model))
        return runtime.unchecked(model, *inputs)
    with runtime.lock:
        model.validations += 1
    stores = runtime.stores
    # A record taken when the state matched the build, and still matching it (a new input signature, a
    # version bumped by an edit that put back what was there), proves the state matches: the state check and
    # the parameter dtypes would only find again what they found then.
    recorded = stores.fast_matches()
    unchanged = runtime.verified and recorded
    env = check_inputs(plan.checked, inputs, runtime.model_dtype if unchanged else parameter_dtype(model))
    if not unchanged:
        check_state(model.build_state, model, plan.locations)
    live = leaves(model)
    # The registered state matches the build: this is the state to record. A record that still matches it
    # describes the same state and is kept.
    if not recorded:
        stores = take_record(model, _watched(model, live))
    running, modules, called = effective(model, live)
    values: dict[str, Any] = dict(zip(plan.input_ids, inputs))
    # A block called through its hooks (FSDP2 gathers its parameters there) runs its steps with these checks.
    token = validating.set(partial(_validate_block, model, env, called)) if called else None
    try:
        run = _checkpointing.runners(plan, running, modules, model._checkpointed)
        run_checked(running.steps, run, values, env, running.last_use)
    finally:
        if token is not None:
            validating.reset(token)
    outs = tuple(values[v] for v in plan.output_ids)
    check_declared_outputs(plan.checked, outs, env)
    with runtime.lock:
        install(model, live, stores, verified=True)
        if sig is not None:
            now = runtime_of(model)
            now.signatures.remember(sig)
            if now.symbolic is not None:
                now.symbolic.validated(sig)
    return outs[0] if len(outs) == 1 else outs


def _validate_block(
    model: BuiltModel, env: dict[str, Any], called: set[int], block: nn.Module, program: Any, inputs: Any
) -> Any:
    """Run a called block's steps with the validation's checks (``_blocks.validating``), or NotImplemented for a
    block that is not one of this model's."""
    groups = model.plan.groups
    index = next((i for i, g in enumerate(groups) if g.qualname == program.qualname), None)
    if index is None or unwrap(model.node_module(groups[index].path)) is not block:
        return NotImplemented
    group = groups[index]
    steps = collapse(model.plan, group.start, group.stop, called, inside=index)
    last_use = {v: position for position, step in enumerate(steps) for v in (*step.inputs, *step.outputs)}
    last_use.update(dict.fromkeys(group.outputs, len(steps)))
    values: dict[str, Any] = dict(zip(group.inputs, inputs))
    modules = [model.node_module(step.node.path) for step in steps]
    run_checked(steps, modules, values, env, last_use)  # type: ignore[arg-type]
    outs = tuple(values[v] for v in group.outputs)
    return outs[0] if len(outs) == 1 else outs


def admit(model: BuiltModel, sig: tuple[Any, ...], inputs: tuple[Any, ...]) -> bool:
    """A signature not yet remembered: take the fast path without a full validation when it is a new binding of
    the symbols of a dtype/device pattern that validated fully (see ``_symbolic``) and the inputs meet their
    contracts; then remember it. Called by the generated code only while the stores record matches."""
    runtime = runtime_of(model)
    symbolic = runtime.symbolic
    if symbolic is None or not symbolic.admits(sig, inputs):
        return False
    with runtime.lock:
        runtime.signatures.remember(sig)
    return True


def settle(model: BuiltModel) -> bool:
    """The inlined comparison of the stores record failed: decide by the precise one (tensors by shape and dtype
    only). True keeps the call on the fast path: nothing the build depends on changed, only what the inlined
    tensor guard also compares (a tensor swapped in by ``torch.func.functional_call``, ``requires_grad`` turned
    off, strides, ``inference_mode`` or autocast). When the registered tensors are the recorded objects the
    record is retaken, so the next call passes the inlined comparison again; during a swap it is not (the record
    would describe tensors about to leave). Called by the generated code only.

    Under ``torch.jit.trace`` (whose dispatch key the tensor guard sees) it answers False: the call validates,
    which under tracing checks the inputs and runs the plain layer calls, so every traced run records one graph
    and nothing the comparison reads is recorded."""
    runtime = runtime_of(model)
    stores = runtime.stores
    if _tracing_state() is not None or not stores.matches():
        return False
    if stores.same_tensors():
        with runtime.lock:
            if runtime_of(model).stores is stores:
                install(model, leaves(model))
    return True
