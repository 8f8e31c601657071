"""Tracing an ``nn.Module`` with torch.export, and its failures as hndl problems.

The module is traced by ``torch.export.export`` (non-strict), in eval mode. Each traced node says which layer
calls it ran inside (``nn_module_stack``), and for the layers that may become one node each (those with a row,
and those the importer rebuilds as ``module`` nodes) the trace preserves the call signature: which graph values
each call took and gave (``module_call_graph``). That is all the structure the importer needs; no tracer of
hndl's own runs.

Two kinds of layer are traced in training mode instead (their ``training`` flag is set for the trace and put
back after): layers with no children whose ``forward`` reads ``self.training``, such as torchvision's
``StochasticDepth``. In eval mode such a layer is often the identity and leaves no node behind, so the importer
could not tell where it sits; traced in training mode it does, and the importer keeps it whole, as its table row's
node (``StochasticDepth`` -> ``drop_path``) or a ``module`` node, whatever its trace says, so the mode of the
trace does not decide what the graph computes.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import linecache
import os
import re
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from types import TracebackType
from typing import Any

from .._errors import HndlError, Problem

__all__ = [
    "Traced",
    "cut",
    "node_location",
    "reads_training",
    "retrace_autocast",
    "retrace_float64",
    "same_in_training",
    "source_line",
    "trace",
    "tracing_error",
]

_TRAINING = re.compile(r"\btraining\b")


@dataclass
class Traced:
    """What the trace gave: the exported program, the traced module, and which layers were traced in training
    mode; and what it was traced with (for :func:`retrace_float64`)."""

    program: Any
    module: Any
    in_training: frozenset[str]
    args: tuple[Any, ...] = ()
    dynamic_shapes: Any = None
    preserve: frozenset[str] = frozenset()


def trace(
    module: Any, args: tuple[Any, ...], dynamic_shapes: Any, in_training: frozenset[str], preserve: frozenset[str]
) -> Traced:
    """Export ``module`` on ``args``; a failure is an ``E_IMPORT`` naming the module and the source line.

    Args:
        in_training: paths of the layers to trace in training mode (the rest is traced in eval mode).
        preserve: paths of the layers whose call signatures the trace keeps (what each call took and gave).
            Only the layers that may become one node need one: keeping every layer's made DenseNet-121's trace
            three times slower (a ``_DenseLayer`` takes a growing list of tensors).
    """
    import torch

    paths = tuple(sorted(preserve))
    # torch.export prints the partial graph of a failed trace to stderr; the E_IMPORT problem says what went wrong,
    # so that dump is dropped and everything else written meanwhile (warnings) is passed on.
    captured = io.StringIO()
    failure: BaseException | None = None
    # torch.export leaves what a forward assigns (self.cache = y) on the module, as a fake tensor: undone after.
    saved = _attributes(module)
    with _modes(module, in_training), contextlib.redirect_stderr(captured):
        try:
            program = torch.export.export(
                module,
                args,
                dynamic_shapes=dynamic_shapes,
                strict=False,
                preserve_module_call_signature=paths,
            )
        except Exception as exc:
            failure = exc
        finally:
            _restore(saved)
    text = captured.getvalue()
    partial = getattr(failure, "partial_fx_graph", None)
    if isinstance(partial, str) and partial:
        text = text.replace(partial + "\n", "")
    if text.strip():
        sys.stderr.write(text)
    if failure is not None:
        if isinstance(failure, HndlError):
            raise failure
        raise tracing_error(failure, module, args) from failure
    return Traced(program, module, in_training, args, dynamic_shapes, preserve)


def retrace_float64(traced: Traced) -> Traced:
    """The same trace of a copy of the module whose floating parameters are float64, on the example inputs with
    the floating ones float64: what a constant whose dtype follows the activations' is then (``_fold.followers``).

    Buffers keep their dtype and are shared with the original, not copied: a graph's ``buffer`` nodes follow
    ``.to()`` by themselves, so only a dtype taken from the inputs and parameters needs telling apart. Only the
    parameters are copied, straight to float64.

    Raises:
        HndlError: ``E_IMPORT`` when the module cannot be copied or traced so.
    """
    import copy

    import torch

    made = traced.__dict__.get("_float64")  # the folded constants and the conversions ask for the same twin
    if made is not None:
        return made
    module = traced.module
    memo: dict[int, Any] = {id(b): b for b in module.buffers()}
    for p in module.parameters():
        if p.is_floating_point() and id(p) not in memo:
            memo[id(p)] = torch.nn.Parameter(p.detach().to(torch.float64), requires_grad=p.requires_grad)
    try:
        twin = copy.deepcopy(module, memo)
    except Exception as exc:
        raise HndlError(
            Problem(
                "E_IMPORT",
                "the module holds a constant whose dtype may follow the activations', and telling needs a copy of "
                f"it with float64 parameters, which deepcopy could not make ({type(exc).__name__}: {cut(str(exc), 200)})",
                node="<root>",
                op=type(module).__name__,
                hint="give the module's constants an explicit dtype, or make the module deep-copyable",
            )
        ) from exc

    def wide(a: Any) -> Any:
        return a.to(torch.float64) if isinstance(a, torch.Tensor) and a.is_floating_point() else a

    args = torch.utils._pytree.tree_map(wide, traced.args)
    made = trace(twin, args, traced.dynamic_shapes, traced.in_training, traced.preserve)
    traced.__dict__["_float64"] = made
    return made


def retrace_autocast(traced: Traced) -> Traced | None:
    """The same trace under ``torch.autocast(bfloat16)`` on the inputs' device type, where activations differ in
    dtype (a linear's output is bfloat16, its input float32): which activation a constant takes its dtype from
    shows there (``_translate``). ``None`` when it cannot be traced so."""
    import torch

    tensors = [a for a in torch.utils._pytree.tree_leaves(traced.args) if isinstance(a, torch.Tensor)]
    device = tensors[0].device.type if tensors else "cpu"
    try:
        with torch.autocast(device, dtype=torch.bfloat16):
            return trace(traced.module, traced.args, traced.dynamic_shapes, traced.in_training, traced.preserve)
    except (HndlError, RuntimeError):
        return None


def same_in_training(module: Any, args: tuple[Any, ...], in_training: frozenset[str], readers: frozenset[str]) -> bool:
    """Whether ``module`` runs the same operations with the layers at ``readers`` in training mode as in eval mode
    (those at ``in_training`` in training mode both times): a dry run on fake tensors (no numbers computed) of the
    example inputs, each mode's operations logged with what they were given (sizes, dtypes and every other
    argument: a dropout probability, an attention's ``dropout_p``) and compared.

    It stands in for a second ``torch.export`` trace, which costs as much as the first, where nothing differs: a
    forward that reads ``self.training`` to pass ``dropout=0.0 if not self.training else self.attention_dropout``
    with ``attention_dropout`` 0 (transformers' attention layers) runs the same operations either way. ``False``
    when the operations differ or the dry run fails (a forward that reads a tensor's values): the trace decides.

    The module is left as it was: its parameters and buffers are swapped for fake ones for the run (an in-place
    update of a running statistic writes into a fake), and a run that assigns an attribute (a cache, a counter) is
    undone and answers ``False``. A tensor the forward reads that is neither (a plain tensor attribute) fails the
    run rather than being read, and written, as it is.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    def logged(flags: frozenset[str]) -> list[tuple[Any, ...]]:
        calls: list[tuple[Any, ...]] = []
        with _modes(module, flags), FakeTensorMode() as fake:
            fakes = torch.utils._pytree.tree_map(
                lambda a: fake.from_tensor(a) if isinstance(a, torch.Tensor) else a, (args, state)
            )
            with _op_log(calls):
                torch.func.functional_call(module, fakes[1], fakes[0], strict=False)
        return calls

    state = {
        **dict(module.named_parameters(remove_duplicate=False)),
        **dict(module.named_buffers(remove_duplicate=False)),
    }
    saved = _attributes(module)
    try:
        return logged(in_training) == logged(in_training | readers) and _unchanged(module, saved)
    except Exception:
        return False
    finally:
        _restore(saved)


#: Per layer: the layer, then its attribute dicts (its own, its parameters', buffers' and submodules'), copied.
_Saved = list[tuple[Any, list[dict[str, Any]]]]


def _attributes(module: Any) -> _Saved:
    """What a forward may assign: each layer's attributes, parameters, buffers and submodules."""
    return [(m, [dict(d) for d in (vars(m), m._parameters, m._buffers, m._modules)]) for m in module.modules()]


def _unchanged(module: Any, saved: _Saved) -> bool:
    """Whether every attribute :func:`_attributes` saved is the same object still, and no layer has others."""
    now = _attributes(module)
    if [m for m, _ in now] != [m for m, _ in saved]:
        return False
    for (_, before), (_, after) in zip(saved, now):
        for old, new in zip(before, after):
            if old.keys() != new.keys() or any(new[k] is not v for k, v in old.items()):
                return False
    return True


def _restore(saved: _Saved) -> None:
    for m, (own, parameters, buffers, modules) in saved:
        for live, old in zip((vars(m), m._parameters, m._buffers, m._modules), (own, parameters, buffers, modules)):
            if live.keys() != old.keys() or any(live[k] is not v for k, v in old.items()):
                live.clear()
                live.update(old)


def _log_leaf(value: Any) -> Any:
    """An argument as the dry run logs it: a tensor by its sizes and dtype, a number or name as it is."""
    import torch

    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.layout)):
        return value
    return (type(value).__name__, repr(value))


def _op_log(calls: list[tuple[Any, ...]]) -> Any:
    """A dispatch mode that appends each operation run under it to ``calls`` (:func:`same_in_training`)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpLog(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            leaves, _ = torch.utils._pytree.tree_flatten((args, kwargs))
            calls.append((str(func), tuple(kwargs), tuple(map(_log_leaf, leaves))))
            return func(*args, **kwargs)

    return OpLog()


@contextmanager
def _modes(module: Any, in_training: frozenset[str]) -> Iterator[None]:
    """Eval mode for the trace (training mode for ``in_training``); every module's flag restored after."""
    saved = [(m, m.training) for m in module.modules()]
    try:
        module.eval()
        for path in in_training:
            module.get_submodule(path).training = True
        yield
    finally:
        for m, flag in saved:
            m.training = flag


@cache
def _forward_reads_training(cls: Any) -> bool:
    """Whether ``cls.forward``'s source mentions ``training`` (unknown source counts as yes)."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError):
        return True
    return bool(_TRAINING.search(source))


def reads_training(module: Any) -> bool:
    """Whether ``module``'s class has a forward that reads ``self.training`` (by its source text)."""
    cls: Any = type(module)
    return _forward_reads_training(cls)


# --- failures -------------------------------------------------------------------------------------------------


def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are not the user's: torch, hndl and the standard library."""
    import torch

    dirs = [os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__))]
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(path)
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _user_frames(tb: TracebackType | None) -> list[tuple[Any, int]]:
    """The traceback's frames (outermost first) whose code is not torch's, hndl's or Python's own."""
    library = _library_dirs()
    frames = []
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not filename.startswith("<") and not os.path.realpath(filename).startswith(library):
            frames.append((tb.tb_frame, tb.tb_lineno))
        tb = tb.tb_next
    return frames


def source_line(filename: str, lineno: int) -> str:
    """``file:line`` (the path as Python knows it)."""
    return f"{filename}:{lineno}"


def _module_of(frames: Sequence[tuple[Any, int]], paths: dict[int, str]) -> tuple[str, str] | None:
    """The innermost (path, class name) whose ``forward`` is among ``frames``."""
    for frame, _ in reversed(frames):
        owner = frame.f_locals.get("self")
        if owner is not None and id(owner) in paths:
            return paths[id(owner)] or "<root>", type(owner).__name__
    return None


_HINTS = (
    (
        "GuardOnDataDependentSymNode",
        "the forward branches on (or sizes a tensor by) a tensor's values; a graph's structure may depend on "
        "shapes only: compute both branches and select with a mask, or move the branch out of forward",
    ),
    (
        "data-dependent",
        "the forward branches on (or sizes a tensor by) a tensor's values; a graph's structure may depend on "
        "shapes only: compute both branches and select with a mask, or move the branch out of forward",
    ),
)


def tracing_error(exc: BaseException, module: Any, args: tuple[Any, ...] = ()) -> HndlError:
    """``exc`` from torch.export as one ``E_IMPORT`` problem: the module whose forward was running, the user's
    source line, the first lines of torch's message, and a hint for the usual causes (for a dynamic dim the
    model does not take at every size, the range its guards need, read from the guards and the example
    ``args``)."""
    frames = _user_frames(exc.__traceback__)
    paths = {id(m): name for name, m in module.named_modules()}
    owner = _module_of(frames, paths)
    location = None
    code = ""
    if frames:
        frame, lineno = frames[-1]
        location = source_line(frame.f_code.co_filename, lineno)
        code = linecache.getline(frame.f_code.co_filename, lineno).strip()
    text = str(exc).strip()
    first = " ".join(text.splitlines()[:2]) if text else type(exc).__name__
    message = f"torch.export could not trace the module: {type(exc).__name__}: {cut(first, 300)}"
    if code:
        message += f" (at `{cut(code, 120)}`)"
    hint = next((h for key, h in _HINTS if key in type(exc).__name__ or key in text), None)
    suggested = _suggested_fixes(text)
    violated = _VIOLATED.search(text)
    if violated:
        hint = _range_hint(text, [n.strip() for n in violated[1].split(",") if n.strip()], module, args, suggested)
    elif suggested:
        hint = f"{hint}; torch suggests: {suggested}" if hint else f"torch suggests: {suggested}"
    return HndlError(
        Problem(
            "E_IMPORT",
            message,
            node=owner[0] if owner else None,
            op=owner[1] if owner else None,
            location=location,
            hint=hint,
        )
    )


_VIOLATED = re.compile(r"Constraints violated \(([^)]*)\)")
_SPECIALIZED = re.compile(r"You marked (\w+) as dynamic but your code specialized it to be a constant \((\d+)\)")


def _range_hint(text: str, dims: list[str], module: Any, args: tuple[Any, ...], suggested: str) -> str:
    """The hint for dims marked dynamic that the model does not take at every size, in the user's dim names:
    the range each needs, read from the guards torch.export found violated (``H = Dim("H", min=33)``); a dim
    the model fixes, to be left static; for the rest, a range in general and torch's own suggestion."""
    from ._dim_ranges import examples_of, suggested_ranges, violations

    try:
        names = [p for p in inspect.signature(module.forward).parameters]
    except (TypeError, ValueError):
        names = []
    ranges = suggested_ranges(text, examples_of(violations(text), names, args))
    fixed = dict(_SPECIALIZED.findall(text))
    in_order = [d for d in dict.fromkeys([*dims, *ranges]) if d in ranges]  # as torch's headline names them
    rest = [d for d in dims if d not in ranges and d not in fixed]
    parts = []
    if ranges:
        fixes = []
        for name in in_order:
            low, high = ranges[name]
            bounds = (f", min={low}" if low is not None else "") + (f", max={high}" if high is not None else "")
            fixes.append(f'{name} = Dim("{name}"{bounds})')
        parts.append(f"the model does not take every size of {_and(in_order)}; the sizes it takes: " + "; ".join(fixes))
    if fixed:
        sizes = ", ".join(f"{name} to {size}" for name, size in fixed.items())
        parts.append(f"the model fixes {sizes}, the example's size: leave {_and(list(fixed))} static")
    if rest:
        them = "it" if len(rest) == 1 else "each"
        parts.append(
            f"the model does not work for every size of {_and(rest)}: give {them} the range it takes "
            f'(Dim("{rest[0]}", min=..., max=...)) or leave {"it" if len(rest) == 1 else "them"} static'
        )
    if suggested and (fixed or rest):
        parts.append(f"torch suggests: {suggested}")
    if not parts:
        parts.append(
            "the model does not work for every size of a dim marked dynamic: give it a range or leave it static"
        )
    return "; ".join(parts)


def _and(names: list[str]) -> str:
    """``H``, ``H and W``, ``B, H and W``."""
    return " and ".join([", ".join(names[:-1]), names[-1]]) if len(names) > 1 else "".join(names)


def _suggested_fixes(text: str) -> str:
    """torch.export's "Suggested fixes:" lines, joined."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith("Suggested fixes"):
            fixes = []
            for follow in lines[i + 1 :]:
                if not follow.strip():
                    break
                fixes.append(follow.strip())
            return cut("; ".join(fixes), 200) if fixes else ""
    return ""


def node_location(node: Any) -> tuple[str | None, str]:
    """A traced node's source: ``file:line`` of the innermost frame outside torch (else the innermost), and the
    code on that line."""
    trace_text = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)', trace_text)
    if not frames:
        return None, ""
    library = _library_dirs()
    chosen = frames[-1]
    for frame in reversed(frames):
        if not os.path.realpath(frame[0]).startswith(library):
            chosen = frame
            break
    return source_line(chosen[0], int(chosen[1])), chosen[2].strip()


def cut(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters (messages quote code and torch's text this way)."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
