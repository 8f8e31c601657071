"""Import an existing ``torch.nn.Module`` as a checked hndl graph.

:func:`from_module` traces the module with ``torch.export`` and writes each traced operation as the hndl op that
does the same (``nn.Linear`` -> ``linear``, ``x + y`` -> ``add``, ``torch.flatten`` -> ``flatten``), each node
named after the layer it ran in; a layer no op expresses becomes a ``module`` node that rebuilds it from its
class and constructor arguments. The result is an :class:`ImportedGraph`: an ``hndl.Graph`` that also maps the
original's ``state_dict`` keys onto the built model's, so the built model takes the original's weights.

The mapping is two tables in ``_table.py``: ``FUNCTIONS`` (traced ATen operation -> row; a view of the ops'
``imports`` declarations, plus the rows that are importer patterns) and ``MODULES`` (layer class -> row). ``_trace.py`` runs ``torch.export``; ``_translate.py`` is the translator's passes, helped by
a module per job, among them ``_inputs.py`` (graph inputs and the sizes the trace assumed), ``_calls.py`` (the
layer calls each operation ran in), ``_fold.py`` and ``_buffers.py`` (what is computed at import, which buffers
stay state), ``_dtype_follow.py`` (constants whose dtype follows the activations'), ``_aliases.py`` (in-place
writes), ``_fallback.py`` (layers rebuilt as ``module`` nodes), ``_refusals.py`` (what nothing expresses) and
``_verify.py`` (inferred against traced shapes). This package imports downward: it builds through ``Graph.add``
and leaves judging to ``hndl.check``; importing it does not import torch.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from .._errors import HndlError, Problem
from ..naming import excerpt
from ._imported import Fallback, ImportedGraph, ModeWarning
from ._table import FUNCTIONS, MODULES, PENDING, ROW_KINDS

__all__ = [
    "FUNCTIONS",
    "MAX_EXAMPLE_BYTES",
    "MIN_TORCH",
    "MODULES",
    "PENDING",
    "ROW_KINDS",
    "Fallback",
    "ImportedGraph",
    "ModeWarning",
    "example_inputs",
    "from_module",
    "imported_source",
    "is_module",
]


def from_module(module: Any, *example_args: Any, dynamic_shapes: Any = None) -> ImportedGraph:
    """The hndl graph of ``module``, traced on ``example_args``.

    Args:
        module: any ``torch.nn.Module``. It is traced in eval mode (its own mode is put back after); a layer whose
            training-mode behaviour the trace cannot show is kept whole as a ``module`` node.
        *example_args: the positional inputs of ``module``'s forward, as tensors.
        dynamic_shapes: which input dims are symbolic, in ``torch.export``'s format (``({0: Dim("B")},)`` or
            ``{"x": {0: Dim("B")}}``). A ``Dim``'s name becomes the symbol in the graph's input contracts
            (``[B, 3, 224, 224]``); every other dim is fixed at the example's size.

    Returns:
        An :class:`ImportedGraph`. Build it with :func:`hndl.build`, then load the original's weights with
        ``model.load_state_dict(graph.convert(module.state_dict()))``.

    Raises:
        HndlError: ``E_IMPORT`` naming the layer, its class and the source line of everything that cannot be
            imported: a trace that fails (control flow on tensor values, a dim marked dynamic that the model
            fixes), an in-place write into an input, an operation no op expresses inside a layer that cannot be
            rebuilt from its constructor arguments.
    """
    import torch

    from ._table import module_row
    from ._trace import trace
    from ._translate import Retrace, translate

    if not isinstance(module, torch.nn.Module):
        raise HndlError(Problem("E_IMPORT", f"from_module takes a torch.nn.Module, not {type(module).__name__}"))
    _require_tested_torch(torch.__version__)
    args = tuple(example_args)
    _check_example_sizes(module, args, dynamic_shapes)
    in_training = _traced_in_training(module)
    rows = frozenset(path for path, m in module.named_modules() if path and module_row(m) is not None)
    preserve = rows | in_training
    for _ in range(_MAX_TRACES):
        traced = trace(module, args, dynamic_shapes, in_training, preserve)
        try:
            graph, readers, found = translate(traced, args, dynamic_shapes, in_training)
            break
        except Retrace as more:
            preserve |= more.paths
    else:
        raise HndlError(
            Problem("E_IMPORT", f"the layers to keep as module nodes were still changing after {_MAX_TRACES} traces")
        )
    if readers:
        _compare_modes(graph, readers, module, args, dynamic_shapes, in_training, preserve, found)
    return graph


#: The oldest torch the importer is tested with. torch 2.4's export keeps in-place operations (``hardtanh_``) and
#: names module calls differently, which gave other node names, lost ties and, worst, let an in-place write into
#: an input through unrefused (tests_torch24 showed all three); releases between 2.4 and 2.13 are not tested.
MIN_TORCH = (2, 13)


def _require_tested_torch(version: str) -> None:
    """Refuse to import under a torch older than :data:`MIN_TORCH`: a wrong graph is worse than none."""
    release = tuple(int(part) for part in version.split("+")[0].split(".")[:2] if part.isdigit())
    if release < MIN_TORCH:
        wanted = ".".join(map(str, MIN_TORCH))
        raise HndlError(
            Problem(
                "E_IMPORT",
                f"from_module needs torch {wanted} or newer (this is torch {version}): older torch.export traces "
                "in-place operations and layer names in ways the importer does not read correctly",
                hint=f"pip install 'torch>={wanted}'; a spec written by hand or with hndl import elsewhere builds here",
            )
        )


def _compare_modes(
    graph: ImportedGraph,
    readers: dict[str, str],
    module: Any,
    args: tuple[Any, ...],
    dynamic_shapes: Any,
    in_training: frozenset[str],
    preserve: frozenset[str],
    found: Any,
) -> None:
    """Trace again with the layers whose forward reads ``self.training`` in training mode; when that gives
    another graph, say so (``graph.notes`` and a :class:`ModeWarning`): the graph is the eval-mode one. A dry run
    that shows the same operations in both modes (``_trace.same_in_training``) saves that trace."""
    from .._spec_dumper import dumps
    from ._trace import same_in_training, trace
    from ._translate import translate

    if same_in_training(module, args, in_training, frozenset(readers)):
        return
    try:
        traced = trace(module, args, dynamic_shapes, in_training | frozenset(readers), preserve)
        # what the first translation found of constants taking the activations' dtype, not traced twice more
        other, _, _ = translate(traced, args, dynamic_shapes, in_training, found)
        differs = dumps(other) != dumps(graph)
    except HndlError:
        differs = True
    if not differs:
        return
    by_class: dict[str, list[str]] = {}
    for path, cls in readers.items():
        by_class.setdefault(cls, []).append(path or "<root>")
    for cls, paths in by_class.items():
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        graph.notes.append(f"{cls} ({shown}) computes something else in training mode; the graph is its eval mode")
    warnings.warn(
        "hndl.from_module: " + "; ".join(graph.notes) + ". Trained as a graph, these parts will not do what the "
        "module does in training mode.",
        ModeWarning,
        stacklevel=3,
    )


#: Each trace can only widen which layers become module nodes (a layer whose call cannot be one passes the job to
#: the layer around it), so the loop ends; this bounds it at the nesting depth that occurs in practice.
_MAX_TRACES = 6


def _check_example_sizes(module: Any, args: tuple[Any, ...], dynamic_shapes: Any) -> None:
    """A dim marked dynamic whose example size is 0 or 1 is an ``E_IMPORT`` before tracing: torch.export fixes
    such sizes (they decide broadcasting), and its own message says the model fixed the dim."""
    import inspect

    from ._inputs import input_specs
    from ._symbols import _axes, _dim_name

    try:
        names = [p for p in inspect.signature(module.forward).parameters][: len(args)]
    except (TypeError, ValueError):
        names = [str(i) for i in range(len(args))]
    for name, arg, spec in zip(names, args, input_specs(dynamic_shapes, names), strict=False):
        shape = getattr(arg, "shape", None)
        for axis, dim in _axes(spec).items():
            if dim is None or shape is None or axis >= len(shape) or shape[axis] > 1:
                continue
            label = _dim_name(dim) or f"dim {axis}"
            raise HndlError(
                Problem(
                    "E_IMPORT",
                    f"input {name!r} is traced at size {shape[axis]} in dim {axis}, which is marked dynamic ({label})",
                    hint="torch.export fixes dims of size 0 or 1; give an example of size 2 or more in that dim",
                )
            )


def _traced_in_training(module: Any) -> frozenset[str]:
    """Layers to trace in training mode and keep whole: no children, outside torch.nn, and a forward that reads
    ``self.training`` (torchvision's ``StochasticDepth`` is the identity in eval mode and leaves no trace). Each
    becomes its ``MODULES`` row's node where it has one, else a ``module`` node."""
    from ._trace import reads_training

    chosen = set()
    for path, m in module.named_modules():
        if not path or next(m.children(), None) is not None:
            continue
        if type(m).__module__.startswith("torch.nn.") or not reads_training(m):
            continue
        chosen.add(path)
    return frozenset(chosen)


def is_module(value: Any) -> bool:
    """Whether ``value`` is a ``torch.nn.Module`` that is not an hndl ``GraphModule`` (without importing torch
    when it is not loaded: nothing can be a module then)."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not isinstance(value, torch.nn.Module):
        return False
    return not (hasattr(value, "plan") and hasattr(value, "build_state"))


def imported_source(source: Any, dims: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """What ``hndl.summary`` and ``hndl.draw`` do first: an ``nn.Module`` given with ``input_size`` (sizes, as
    :func:`example_inputs` takes them) or ``input_data`` (a tensor or a tuple of them) becomes its imported graph;
    the other keyword arguments are returned to bind the graph's symbols. Anything else passes through.

    Raises:
        HndlError: E_INPUT for a module given with neither; whatever :func:`from_module` raises.
    """
    if not is_module(source):
        return source, dims
    rest = dict(dims)
    size, data = rest.pop("input_size", None), rest.pop("input_data", None)
    if (size is None) == (data is None):
        raise HndlError(
            Problem(
                "E_INPUT",
                f"a {type(source).__name__} is imported to be summarised or drawn, which needs example inputs",
                hint="pass input_size=(1, 3, 224, 224) (symbols such as 'B' make a dim dynamic) or input_data=x",
            )
        )
    if data is not None:
        args, dynamic = (tuple(data) if isinstance(data, (list, tuple)) else (data,)), None
    else:
        args, dynamic = example_inputs(size, {k: v for k, v in rest.items() if isinstance(v, int)})
    return from_module(source, *args, dynamic_shapes=dynamic), rest


def example_inputs(sizes: Any, dims: dict[str, int] | None = None) -> tuple[tuple[Any, ...], Any]:
    """Example tensors and ``dynamic_shapes`` for input sizes such as ``(1, 3, 224, 224)``, ``("B", 3, 224, 224)``
    or a list of them (one per input), as ``hndl.summary(module, input_size=...)`` takes them.

    A symbol (a name instead of a size) makes that dim dynamic under the symbol's name; its example size is
    ``dims[name]`` when given, else 2, 3, 5, ... (distinct, since torch.export may merge dims of equal example
    size). An entry ``(sizes, dtype)`` gives an input's dtype (``(("B", "T"), "int64")``); float32 otherwise.

    Raises:
        HndlError: E_INPUT for sizes that are not sizes, a dtype torch does not have, or example tensors that
            would take more than :data:`MAX_EXAMPLE_BYTES` together (checked before any is made).
    """
    import torch
    from torch.export import Dim

    dims = dict(dims or {})
    for name, size in dims.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise HndlError(
                Problem("E_INPUT", f"the example size of {excerpt(name)} is {excerpt(size)}, not a size (0, 1, 2, ...)")
            )
    specs = _input_list(sizes)
    made: dict[str, Any] = {}
    defaults = iter(n for n in (2, 3, 5, 7, 11, 13, 17, 19, 23) if n not in dims.values())
    planned = []
    dynamic = []
    for shape, dtype in specs:
        concrete = []
        axes = {}
        for axis, entry in enumerate(shape):
            if isinstance(entry, str):
                if entry not in dims:
                    dims[entry] = next(defaults, 29)
                made.setdefault(entry, Dim(entry))
                axes[axis] = made[entry]
                concrete.append(dims[entry])
            else:
                concrete.append(int(entry))
        dt = getattr(torch, dtype, None) if dtype else torch.float32
        if not isinstance(dt, torch.dtype):
            raise HndlError(Problem("E_INPUT", f"{dtype!r} is not a torch dtype", hint="int64, float32, bool, ..."))
        planned.append((shape, concrete, dt))
        dynamic.append(axes or None)
    _check_example_bytes(planned, dims)
    tensors = [
        torch.randn(concrete, dtype=dt) if dt.is_floating_point else torch.zeros(concrete, dtype=dt)
        for _, concrete, dt in planned
    ]
    return tuple(tensors), (tuple(dynamic) if any(dynamic) else None)


#: The most memory the example inputs of one import may take together (bytes). They are real tensors (the trace
#: runs on fake copies of them), so a size typed by mistake (``--dims B=10**12``) would otherwise be allocated,
#: or fail inside torch's allocator. A symbol stays symbolic at any example size, so a small one loses nothing.
MAX_EXAMPLE_BYTES = 2**31


def _check_example_bytes(planned: Sequence[tuple[Sequence[Any], list[int], Any]], dims: dict[str, int]) -> None:
    """E_INPUT naming the sizes, when the example tensors ``planned`` (sizes as given, concrete sizes, dtype)
    would take more than :data:`MAX_EXAMPLE_BYTES`."""
    import math

    total = 0
    for _, concrete, dt in planned:
        total += math.prod(concrete) * dt.itemsize
    if total <= MAX_EXAMPLE_BYTES:
        return
    shown = "; ".join(
        "[" + ", ".join(f"{e}={c}" if isinstance(e, str) else str(c) for e, c in zip(shape, concrete)) + "]"
        for shape, concrete, _ in planned
    )
    if len(shown) > 300:
        shown = shown[:297] + "..."
    used = sorted({e for shape, _, _ in planned for e in shape if isinstance(e, str)})
    if used:
        them = ", ".join(used)
        hint = (
            f"give {them} small example sizes, or none (2, 3, 5, ... then): "
            f"{'it stays' if len(used) == 1 else 'they stay'} symbolic, so the graph takes any size"
        )
    else:
        hint = "trace at small sizes: a dim given as a symbol (B for 1000) is symbolic, so the graph takes any size"
    raise HndlError(
        Problem(
            "E_INPUT",
            f"example inputs {shown} would take {_bytes(total)}, more than the {_bytes(MAX_EXAMPLE_BYTES)} an "
            "import may make to trace the module",
            hint=hint,
        )
    )


def _bytes(count: int) -> str:
    """``2.0 GiB``; a size past exbibytes as a power of two."""
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            if count >= 2**70:
                return f"about 2**{count.bit_length() - 1} bytes"
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def _is_shape(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(
        (isinstance(s, int) and not isinstance(s, bool) and s >= 0) or (isinstance(s, str) and s.isidentifier())
        for s in value
    )


def _input_list(sizes: Any) -> list[tuple[Sequence[Any], str | None]]:
    """``sizes`` as one ``(shape, dtype)`` per input.

    Raises:
        HndlError: E_INPUT for anything else.
    """
    if _is_shape(sizes) and sizes:
        return [(tuple(sizes), None)]
    if isinstance(sizes, (list, tuple)) and len(sizes) == 2 and _is_shape(sizes[0]) and isinstance(sizes[1], str):
        return [(tuple(sizes[0]), sizes[1])]  # one input with its dtype: ((B, T), "int64")
    out: list[tuple[Sequence[Any], str | None]] = []
    for item in sizes if isinstance(sizes, (list, tuple)) and sizes else [sizes]:
        if _is_shape(item):
            out.append((tuple(item), None))
        elif (
            isinstance(item, (list, tuple))
            and len(item) == 2
            and _is_shape(item[0])
            and (item[1] is None or isinstance(item[1], str))
        ):
            out.append((tuple(item[0]), item[1]))
        else:
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"input_size {excerpt(sizes)} is not one input's sizes or a list of them",
                    expected="(1, 3, 224, 224), ('B', 3, 224, 224), [(B, T), ...] or ((B, T), 'int64')",
                    actual=excerpt(item),
                )
            )
    return out
