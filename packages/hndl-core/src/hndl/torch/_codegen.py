"""Generated Python for a GraphModule's call: one line per leaf step, mapped back to nodes for errors.

Like ``torch.fx``'s ``recompile``, the source is registered in :mod:`linecache` under a fake file name, so
tracebacks and debuggers show it (``GraphModule.code`` returns it), and a line-number -> step map lets a failure
inside it be reported by node. Two functions are generated per graph, from its :class:`~hndl._plan.Plan`:

``execute(self, args, kwargs)``
    The checked call. It binds the inputs (``bind``, :func:`._binding.bind_inputs`, unless it got one positional
    value per input), builds the call's signature, then tests the stores record's comparison (``_guards``'
    ``StoresRecord.fast``, inlined; anything it raises counts as a change) and the signature lookup (``sig in
    sigs``). When the comparison fails it asks ``settle(self)``, the precise comparison, which may still keep
    the call on the fast path (a tensor swapped in by ``torch.func.functional_call``). When all hold it runs
    every leaf step: a step calls ``module.forward`` directly (looked up on every call, so a patched class or a
    swapped-in subclass runs its current code), skipping ``nn.Module.__call__``, unless the module has a
    forward/backward hook or was compiled with ``Module.compile()``, or the process has a global hook: then it
    calls the module. A few standard layers (:mod:`._inline`: Linear, ReLU, GELU, LayerNorm, hndl's Add, the
    weightless shape layers) have their forward written out while their class's ``forward`` is the one it was
    written from (and the template's ``when`` condition, if any, holds on the call); an add may write
    into a private input, and a ReLU too while gradients are recorded (:mod:`._in_place`'s rule, tested on the
    call by ``nograd``, ``alone`` and ``alone_grad``). Each value's local is deleted right after the
    last step that reads it. Anything else goes to ``validate``. The modules, the record's objects and the
    signature dict are the function's globals, bound by :func:`bind_execute` when the record is taken (every
    name the source reads is written here and bound here); the record catches any replacement of a module, so
    binding them is safe. A layer that raises is reported by node from its line (:func:`raise_failure`).

``unchecked(self, *inputs)``
    The call used under ``torch.compile``: each step calls ``self.nodes.n_...`` through ``__call__``, the
    plainest code for Dynamo to trace, with no check.

Compiled code objects are shared by every GraphModule whose generated source is identical (a deep copy, a
rebuild of the same graph) through a small bounded cache keyed by the source text; it holds code, never a
module. A second index keys the same entries by what the source is made from (``_source_key``: per step the
node, its value ids, its form and in-place modes), so a rebuild finds its code without writing the source out.
"""

from __future__ import annotations

import hashlib
import linecache
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn
from torch.nn import functional as _functional

from .._errors import HndlError, Problem
from .._plan import Plan
from ._guards import signature_source
from ._in_place import InPlace, sole_owner, sole_owner_with_grad
from ._inline import Inline
from ._validate import CONTROL_FLOW, layer_failure

__all__ = [
    "CALL",
    "FORWARD",
    "Compiled",
    "bind_execute",
    "compile_graph",
    "make_function",
    "module_expr",
    "raise_failure",
]

_CACHE_SIZE = 64
_cache: dict[str, Compiled] = {}
# The same entries by what their source was made from (``_source_key``), each with the forms its key names.
_by_key: dict[tuple[Any, ...], tuple[Compiled, tuple[Inline, ...]]] = {}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Compiled:
    """The code objects of one generated source, and how to map a line of ``execute`` back to its step."""

    filename: str
    source: str
    execute: types.CodeType
    unchecked: types.CodeType
    lines: dict[int, int]  # line number in ``execute`` -> step index
    step_locals: tuple[tuple[str, ...], ...]  # per step, the local names of its inputs


def module_expr(path: Sequence[str]) -> str:
    """``self.nodes.n_blocks[0].n_attn`` (``self.model.layers[0].mlp.gate_proj``) for a node's path from the
    model: attribute access, which the check keeps unambiguous (a ``module_path`` part names no attribute of the
    module it is registered on; ``n_<name>`` is none either)."""
    return "self" + "".join([f"[{int(k)}]" if k.isdecimal() and k.isascii() else "." + k for k in path])


#: Per step index, the global names the generated source gives its objects (``m3``, ``p3``, ``d3``, ``k3``,
#: ``f3``): made once per index and process, as both the source and its binding name every one of them per step.
_STEP_NAMES: list[tuple[str, str, str, str, str]] = []
_names_lock = threading.Lock()


def _step_names(count: int) -> list[tuple[str, str, str, str, str]]:
    """``(m{i}, p{i}, d{i}, k{i}, f{i})`` for every ``i < count``."""
    if len(_STEP_NAMES) < count:
        with _names_lock:
            _STEP_NAMES.extend((f"m{i}", f"p{i}", f"d{i}", f"k{i}", f"f{i}") for i in range(len(_STEP_NAMES), count))
    return _STEP_NAMES


#: A step's call form: through ``nn.Module.__call__`` (a hook, a compiled layer), or ``forward`` directly.
CALL, FORWARD = "call", "forward"


def _may_write(i: int, step: InPlace, value: str) -> str:
    """The condition under which step ``i`` writes into the local ``value``: its producer's class still has the
    ``forward`` the rule judged (``q{i}.forward is g{i}``), and the frame alone holds the tensor, by the check of
    the mode the call runs in (``nograd`` is read once per call)."""
    judged = f"q{i}.forward is g{i}"
    if step.without_grad and step.with_grad:
        return f"{judged} and (alone({value}) if nograd else alone_grad({value}))"
    if step.without_grad:
        return f"nograd and {judged} and alone({value})"
    return f"not nograd and {judged} and alone_grad({value})"


def compile_graph(
    plan: Plan,
    forms: Sequence[str | Inline],
    in_place: Mapping[int, InPlace],
    stores: Sequence[str],
    signature: str,
    label: str,
) -> Compiled:
    """Generate and compile the two functions (or fetch them from the cache).

    Args:
        plan: the lowered graph: its steps, input and output value ids.
        forms: per step, how the fast path calls its layer: :data:`CALL` (``m3(...)``, through
            ``nn.Module.__call__``: a hook, a compiled layer), :data:`FORWARD` (``m3.forward(...)``), or the
            layer's forward written out (an :class:`._inline.Inline`), guarded by ``k3.forward is f3`` so a
            patched class runs its own code, and by the template's ``when`` condition where it has one.
        in_place: the steps that may write into an input (:func:`._in_place.in_place_steps`); their line tests
            ``nograd`` (computed once per call) against the step's modes, that the input's producer ``q3`` still
            has the ``forward`` ``g3`` it was judged by, and that nothing but this frame holds the input
            (``alone``, :func:`._in_place.sole_owner`; ``alone_grad``, :func:`._in_place.sole_owner_with_grad`).
        stores: the terms of the stores record's comparison, as source (``StoresRecord.terms``).
        signature: the signature condition, as source (:func:`._guards.signature_guard`).
        label: a readable name for the fake file (the graph name).
    """
    key = _source_key(plan, forms, in_place, stores, signature, label)
    with _cache_lock:
        entry = _by_key.get(key)
    if entry is not None:
        # Its source may have left the source cache (and linecache with it) while this key stayed.
        _show_source(entry[0])
        return entry[0]
    names: dict[str, str] = {v: f"a{i}" for i, v in enumerate(plan.input_ids)}
    args = ", ".join(names[v] for v in plan.input_ids)
    k = len(plan.input_ids)
    # The steps' lines, indented as they stand in ``execute``, and the step index of each. Built once per install
    # (a rebuild of a graph built before only fetches its code below), so kept to a few string operations a step.
    indent = "            "
    body: list[str] = []
    body_steps: list[int] = []
    unchecked_body: list[str] = []
    step_locals: list[tuple[str, ...]] = []
    counter = 0
    dead = _dead_after(plan)
    step_names = _step_names(len(plan.steps))
    for i, step in enumerate(plan.steps):
        ins = tuple([names[v] for v in step.inputs])
        step_locals.append(ins)
        if len(step.outputs) == 1:
            target = names[step.outputs[0]] = f"v{counter}"
            counter += 1
        else:
            outs = [f"v{counter + j}" for j in range(len(step.outputs))]
            names.update(zip(step.outputs, outs))
            counter += len(outs)
            target = ", ".join(outs)
        call_args = ", ".join(ins)
        # The trailing comment names the node, for anyone reading the generated code in a traceback.
        # ``m{i}.forward`` is looked up on every call, so the layer's current code runs: a class whose
        # ``forward`` was patched, a subclass swapped in. A hooked or compiled layer goes through ``__call__``.
        form = forms[i]
        m, p, d, k_, f = step_names[i]
        if isinstance(form, Inline):
            fields = {"x": call_args, "p": p, "d": d}
            if len(ins) == 1:
                fields["x0"] = call_args
            else:
                for j, a in enumerate(ins):
                    fields[f"x{j}"] = a
            template = form.template
            if i in in_place and form.in_place is not None:
                written_into = in_place[i].operand
                other = ins[1 - written_into] if len(ins) == 2 else ""
                fields.update(t=ins[written_into], o=other, may=_may_write(i, in_place[i], ins[written_into]))
                template = form.in_place
            guard = f"{k_}.forward is {f}"
            if form.when is not None:  # a branch of forward the template does not write out calls forward
                guard = f"{guard} and ({form.when.format_map(fields)})"
            call = f"{template.format_map(fields)} if {guard} else {m}.forward({call_args})"
        elif form == CALL:
            call = f"{m}({call_args})"
        else:
            call = f"{m}.forward({call_args})"
        node = step.node
        body.append(f"{indent}{target} = {call}  # {_comment(node.op, node.qualname)}")
        body_steps.append(i)
        unchecked_body.append(f"    {target} = {module_expr(node.path)}({call_args})")
        released = dead[i]
        if released:
            # Drop each value right after the last step that reads it, as torch.fx does: a local would otherwise
            # keep every activation alive until ``return``. Deleted after the step, never before it, so a step
            # that raises still has its inputs in the frame for the failure report.
            release = "del " + (names[released[0]] if len(released) == 1 else ", ".join([names[v] for v in released]))
            body.append(indent + release)
            body_steps.append(i)
            unchecked_body.append("    " + release)
    results = [names[v] for v in plan.output_ids]
    ret = results[0] if len(results) == 1 else "(" + ", ".join(results) + ("," if len(results) == 1 else "") + ")"
    sig = signature_source([names[v] for v in plan.input_ids])

    lines = [
        "def execute(self, args, kwargs):",
        f"    if kwargs or len(args) != {k}:",
        "        args = bind(args, kwargs)",
    ]
    if k:
        lines.append(f"    {args}{',' if k == 1 else ''} = args")
    lines += [
        "    try:",
        f"        sig = {sig}",
        "    except AttributeError:",
        "        return validate(self, args, None)",
        "    try:",
        "        same = (",
        *(f"            {'and ' if i else ''}{term}" for i, term in enumerate(stores or ["True"])),
        "        )",
        "    except Exception:  # a store dict or attribute that is gone: a change",
        "        same = False",
        f"    if (same or settle(self)) and {signature}:",
        "        try:",
    ]
    if in_place:
        lines.append("            nograd = not grad_enabled()")
    first = len(lines) + 1  # the line number of the first step's line
    lines += body or [indent + "pass"]
    lines += [
        "        except Exception as exc:",
        "            fail(self, exc)",
        "            raise",
        f"        return {ret}",
        "    return validate(self, args, sig)",
        "",
        f"def unchecked(self{', ' + args if k else ''}):",
        *unchecked_body,
        f"    return {ret}",
        "",
    ]
    source = "\n".join(lines)
    with _cache_lock:
        hit = _cache.get(source)
    if hit is not None:
        _remember(key, hit, forms)
        return hit
    line_map = {first + n: index for n, index in enumerate(body_steps)}
    digest = hashlib.sha1(source.encode()).hexdigest()[:12]
    filename = f"<hndl generated: {label} {digest}>"
    module_code = compile(source, filename, "exec")
    codes = {c.co_name: c for c in module_code.co_consts if isinstance(c, types.CodeType)}
    compiled = Compiled(filename, source, codes["execute"], codes["unchecked"], line_map, tuple(step_locals))
    _show_source(compiled)
    with _cache_lock:
        if len(_cache) >= _CACHE_SIZE:
            old = _cache.pop(next(iter(_cache)))
            linecache.cache.pop(old.filename, None)
        _cache[source] = compiled
    _remember(key, compiled, forms)
    return compiled


def _show_source(compiled: Compiled) -> None:
    """Register the generated source with :mod:`linecache` (tracebacks and debuggers show its lines), unless it is.
    mtime None: ``linecache.checkcache`` keeps entries that have no file behind them."""
    if compiled.filename not in linecache.cache:
        source = compiled.source
        linecache.cache[compiled.filename] = (len(source), None, source.splitlines(keepends=True), compiled.filename)


def _source_key(
    plan: Plan,
    forms: Sequence[str | Inline],
    in_place: Mapping[int, InPlace],
    stores: Sequence[str],
    signature: str,
    label: str,
) -> tuple[Any, ...]:
    """Everything the generated source is made from, as a hashable key: equal keys make equal sources. A rebuild
    of a graph built before finds its code by this key without writing the source out again (writing ~1,000
    steps' lines is most of what a cached build spent here). Per step: the node's op, name and path (the comment
    and ``unchecked``'s module expression), its value ids, its form and its in-place modes, and which values die
    after which step (``plan.last_use``). A written-out form is keyed by identity (an ``Inline`` hashes by value
    through Python code, ~1 us a step): the entry keeps the forms alive, so no other object takes their ids while
    the key exists."""
    steps = tuple(
        [
            (
                step.node.op,
                step.node.qualname,
                step.node.path,
                step.inputs,
                step.outputs,
                form if isinstance(form, str) else id(form),
                None if (ip := in_place.get(i)) is None else (ip.operand, ip.without_grad, ip.with_grad),
            )
            for i, (step, form) in enumerate(zip(plan.steps, forms))
        ]
    )
    lives = tuple(plan.last_use.items())
    return (label, signature, tuple(stores), tuple(plan.input_ids), tuple(plan.output_ids), lives, steps)


def _remember(key: tuple[Any, ...], compiled: Compiled, forms: Sequence[str | Inline]) -> None:
    """Index ``compiled`` (already in the source cache) under ``key`` too, in a cache as bounded as that one,
    holding the written-out forms whose ids the key names."""
    held = tuple({id(f): f for f in forms if not isinstance(f, str)}.values())
    with _cache_lock:
        if len(_by_key) >= _CACHE_SIZE:
            _by_key.pop(next(iter(_by_key)))
        _by_key[key] = (compiled, held)


def _comment(op: str, qualname: str) -> str:
    """``linear 'hidden'``: the op as an identifier (or its ``repr``), the node's name as a ``repr``. Names are
    validated identifiers, but nothing a user chose reaches the generated source unescaped, comments included:
    a line break in a comment would start a line of code."""
    return f"{op if op.isidentifier() else repr(op)} {qualname!r}"


def _dead_after(plan: Plan) -> list[list[str]]:
    """Per step, the value ids whose last use it is (outputs excluded: they live to ``return``), in first-seen order."""
    dead: list[list[str]] = [[] for _ in plan.steps]
    outputs = set(plan.output_ids)
    for value, last in plan.last_use.items():
        if value not in outputs and 0 <= last < len(plan.steps):
            dead[last].append(value)
    return dead


def make_function(code: types.CodeType, namespace: dict[str, Any]) -> types.FunctionType:
    """A function running ``code`` with ``namespace`` as its globals (one namespace per record)."""
    namespace.setdefault("__builtins__", __builtins__)
    return types.FunctionType(code, namespace, code.co_name)


# --- binding: the names the generated source reads ---------------------------------------------------------


class _Missing:
    """Stands in for a node's module that was removed: validation reports it first, so this never runs."""

    def __call__(self, *args: Any) -> Any:
        raise HndlError(Problem("E_RUNTIME", "a node's module is missing"))

    forward = __call__


_MISSING = _Missing()


def bind_execute(
    compiled: Compiled,
    plan: Plan,
    record: Mapping[str, Any],
    leaves: Sequence[nn.Module | None],
    calls: Sequence[Any],
    forms: Sequence[str | Inline],
    in_place: Mapping[int, InPlace],
    handlers: Mapping[str, Callable[..., Any]],
) -> types.FunctionType:
    """``execute`` with its globals bound: the stores record's objects (``record``), per step ``m{i}`` (what the
    step calls: ``calls[i]``, the layer or the checkpointing step around it) and, for a written-out layer, its
    ``_parameters`` ``p{i}``, ``__dict__`` ``d{i}``, class ``k{i}`` and judged ``forward`` ``f{i}``; per in-place
    step its input's producer ``q{i}`` and that one's judged ``forward`` ``g{i}``; the model's handlers
    (``sigs``, ``bind``, ``validate``, ``admit``, ``settle``), ``fail``, which reports a failing line by node,
    and the modules the written-out layers call into (``F``, ``torch``).
    ``plan`` is the plan the source was generated from (``leaves`` and ``calls`` are per step of it)."""
    namespace = dict(record)
    namespace.update(handlers)
    namespace["fail"] = partial(raise_failure, compiled, plan)
    step_names = _step_names(len(leaves))
    for i, (module, form) in enumerate(zip(leaves, forms)):
        m, p, d, k, f = step_names[i]
        # A missing module can only be met after validation, which reports it; never called before.
        namespace[m] = _MISSING if module is None else calls[i]
        if module is not None and isinstance(form, Inline):
            # Bound with the record: it compares these dicts by identity on every call (see ._inline).
            namespace[p] = module._parameters
            namespace[d] = module.__dict__
            namespace[k] = type(module)
            namespace[f] = form.original
    for i, step in in_place.items():
        namespace[f"q{i}"], namespace[f"g{i}"] = step.producer, step.producer_forward
    namespace["F"] = _functional
    namespace["torch"] = torch  # torch.cat, torch.matmul: looked up per call, as the layers' forward does
    namespace["grad_enabled"] = torch.is_grad_enabled
    namespace["alone"] = sole_owner
    namespace["alone_grad"] = sole_owner_with_grad
    return make_function(compiled.execute, namespace)


def raise_failure(compiled: Compiled, plan: Plan, model: nn.Module, exc: BaseException) -> None:
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
