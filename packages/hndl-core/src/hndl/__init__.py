"""hndl: contract-checked neural-network graphs for PyTorch.

Describe a model as a :class:`Graph` (in Python or a YAML spec file), let hndl check it before any tensor
exists, and :func:`build` a real ``torch.nn.Module`` that checks its contracts once per input signature.

The public surface is what this module exports; everything in underscore modules is private.
"""

from __future__ import annotations

# hndl-func and hndl-docs install their subpackages (hndl.func, hndl.docs) as portions of this package,
# possibly from other directories (editable installs); extend_path lets `import hndl.func` find them there.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from . import ops as _builtin_ops  # noqa: F401  (registers the built-in ops)
from ._check import check as check
from ._contracts import DTYPES as DTYPES
from ._contracts import Contract as Contract
from ._contracts import ShapePattern as ShapePattern
from ._contracts import TensorType as TensorType
from ._errors import CODES as CODES
from ._errors import HndlError as HndlError
from ._errors import Problem as Problem
from ._graph import Graph as Graph
from ._graph import Handle as Handle
from ._graph import split_ref as split_ref
from ._meaning import HndlWarning as HndlWarning
from ._param_overrides import override_params as _override_params
from ._param_types import ParamType as ParamType
from ._plan import Plan as Plan
from ._plan import Step as Step
from ._registry import REQUIRED as REQUIRED
from ._registry import ImportRow as ImportRow
from ._registry import InferError as InferError
from ._registry import OpDef as OpDef
from ._registry import Param as Param
from ._registry import Params as Params
from ._registry import Port as Port
from ._registry import op as op
from ._registry import registry as registry
from ._spec_dumper import dumps as dumps
from ._spec_dumper import flow_yaml as flow_yaml
from ._spec_loader import load as _load_file
from ._spec_loader import loads as _load_text
from ._spec_loader import looks_like_text as _spec_text
from ._spec_schema import spec_schema as spec_schema
from ._summary import Summary as Summary
from ._summary import SummaryRow as SummaryRow
from ._training_memory import TrainingMemory as TrainingMemory

if TYPE_CHECKING:
    import torch

    from .importer import ImportedGraph
    from .torch import GraphModule
    from .weights import LoadReport

__version__ = "0.1.0"

__all__ = [
    "CODES",
    "DTYPES",
    "REQUIRED",
    "Contract",
    "Graph",
    "GraphModule",
    "Handle",
    "ImportRow",
    "HndlError",
    "HndlWarning",
    "InferError",
    "OpDef",
    "Param",
    "ParamType",
    "Params",
    "Plan",
    "Port",
    "Problem",
    "ShapePattern",
    "Step",
    "Summary",
    "SummaryRow",
    "TrainingMemory",
    "TensorType",
    "build",
    "check",
    "draw",
    "dumps",
    "flow_yaml",
    "from_module",
    "generate",
    "load",
    "load_model",
    "load_state_dict",
    "loads",
    "op",
    "registry",
    "save",
    "spec_schema",
    "split_ref",
    "summary",
]


def build(graph: Graph) -> GraphModule:
    """Check ``graph`` and build its :class:`hndl.torch.GraphModule`.

    Raises:
        HndlError: listing every problem the static check found (nothing is built then).
    """
    from .torch import build_module

    return build_module(graph)


def load(path: str | os.PathLike[str], params: Mapping[str, Any] | None = None, allow_imports: bool = False) -> Graph:
    """Read the spec file at ``path`` (or the model zoo's entry ``"zoo:NAME"``) into a :class:`~hndl.Graph`.

    ``load`` only ever reads the file it is given; spec *text* goes to :func:`loads`. A string that is
    plainly text (it has a line break, or starts with ``{`` or ``hndl:``) is refused with that hint, so a
    service that receives text can never be made to read a local file because the text named one.

    Args:
        path: the file, as ``str`` or ``os.PathLike``; ``"zoo:NAME"`` is the zoo entry (:func:`hndl.zoo.get`).
        params: values for the spec's top-level ``params`` (``{"image_size": 96}``): the graph is as if the
            file had been written with them, so every ``$`` reference and expression that uses one, and every
            input shape that names one, follows. Each name must be one the spec declares and each value of the
            declared value's kind (a number where it declares ``0.1`` also takes an integer; ``None`` replaces
            any). ``hndl check --param NAME=VALUE`` is the same from the shell.
        allow_imports: whether the graph may use op ``module``, which imports a Python class by name when the
            model is built. Leave it off for files you did not write.

    Returns:
        The graph, with ``graph.source`` set to the path and its subgraphs under ``graph.graphs``. Every
        input, node, node key and output carries its ``file:line:col``. Ops, parameter values and references
        are checked later, by :func:`hndl.check` and :func:`hndl.build`.

    Raises:
        HndlError: E_SPEC for a path that names no file or cannot be read, text passed instead of a path, an
            unknown zoo entry, and every problem with the spec's structure (see :func:`loads`); E_PARAM for an
            override the spec does not declare (with the close names) or of another kind than its value, at
            the line that declares it.
    """
    if isinstance(path, str) and path.startswith("zoo:") and not _spec_text(path):  # a model zoo entry, not a file
        from .zoo import get

        graph = get(path)
        return _override_params(graph, params, what=path.partition("@")[0])
    # text (even one starting "zoo:") is refused there
    return _override_params(_load_file(path, allow_imports=allow_imports), params)


def loads(text: str | bytes, params: Mapping[str, Any] | None = None, allow_imports: bool = False) -> Graph:
    """Read spec text (YAML, or JSON with the same structure) into a :class:`~hndl.Graph`.

    Reading never imports or executes anything and never touches the file system. Locations read
    ``<string>:line:col``.

    Args:
        text: the spec, as ``str`` or UTF-8 ``bytes``.
        params: overrides of the spec's top-level ``params``, as for :func:`load`.
        allow_imports: as for :func:`load`.

    Raises:
        HndlError: listing every problem with the spec's structure: E_SPEC for bytes that are not UTF-8, YAML
            syntax, wrong types, unknown or missing keys and a bad format version; E_NAME for invalid or
            duplicate names; E_PARAM for an override as for :func:`load`.
    """
    return _override_params(_load_text(text, allow_imports=allow_imports), params)


def save(model: GraphModule, path: str | os.PathLike[str]) -> None:
    """Write ``model`` as one ``.safetensors`` file: its weights (tied ones once) and its spec in the metadata.

    See :func:`load_model` and docs/interop.md.
    """
    from .torch._safetensors import save as save_file

    save_file(model, path)


def load_model(path: str | os.PathLike[str], *, allow_imports: bool = False) -> GraphModule:
    """Rebuild a model :func:`save` wrote: a checked :class:`GraphModule` with the saved weights. Runs no code
    from the file; ``allow_imports`` lets its spec use op ``module``, as for :func:`load`.

    Raises:
        HndlError: E_SPEC for a file that is not an hndl model file (not safetensors, truncated, no spec) or
            whose ties are not the spec's; E_PARAMS for weights that do not match the spec.
    """
    from .torch._safetensors import load_model as load_file

    return load_file(path, allow_imports=allow_imports)


def load_state_dict(model: GraphModule, source: Any, rules: Any = (), strict: bool = True) -> LoadReport:
    """Load weights from ``source`` (a mapping, a ``.safetensors``/``.bin``/``.pt`` file, a sharded checkpoint
    folder) into a built ``model``, keys renamed and layouts converted by ``rules``; all of it or nothing. Returns
    a :class:`hndl.weights.LoadReport` of what went where. See :func:`hndl.weights.load_state_dict`.

    Raises:
        HndlError: E_PARAMS naming every key, shape and dtype that does not fit, before anything is copied.
    """
    from .weights import load_state_dict as load

    return load(model, source, rules, strict)


def summary(
    source: Graph | GraphModule | Any,
    *,
    depth: int | None = None,
    input_size: Any = None,
    input_data: Any = None,
    train: bool = False,
    optimizer: str | None = None,
    **dims: Any,
) -> Summary:
    """The :class:`Summary` of a graph or a built model: one row per node (qualified name, op and layer class,
    the nodes feeding it, output shape, parameters, multiply-adds) and totals (trainable and non-trainable
    parameters, buffers, size in MB, multiply-adds, activation memory). Prints as the table.

    A graph is checked and built on PyTorch's meta device (nothing allocated); a built model is summarised as
    it is (a frozen parameter counts as non-trainable). A parameter shared by several nodes (tied weights) is
    counted in the first row that has it and marked in the others, so the rows add up to the total. ``dims``
    bind the inputs' symbols (``B=8``) and the top graph's size parameters (an integer parameter an input shape
    names, ``H=224`` for ``[B, 3, H, W]``: a graph is built at that size, a built model must have it), or ``input_size`` binds them from the inputs' sizes as torchinfo takes
    them (``input_size=(8, 3, 224, 224)``; a list of sizes for several inputs); without them, multiply-adds and
    activation memory are expressions, and the table names the symbols left. ``depth=1`` shows each subgraph
    node as one row with its subtotals. ``train=True`` adds the memory of one training step
    (:attr:`Summary.training`): parameters, gradients, the state of ``optimizer`` (``"sgd"``,
    ``"sgd-momentum"``, ``"adam"``, ``"adamw"``, the default), and the activations kept for backward with and
    without the model's current checkpointing (SPEC 16).
    Any other ``torch.nn.Module`` is imported first (:func:`from_module`), given its inputs' sizes as torchinfo
    takes them, ``input_size=(1, 3, 224, 224)`` (a name such as ``"B"`` makes a dim symbolic), or example
    inputs, ``input_data=x``.

    Raises:
        HndlError: E_INPUT for a dim the inputs do not have, or an ``input_size`` that does not fit them;
            whatever checking or building the graph raises.
    """
    from ._summary import summary as make_summary

    source, input_size, dims = _imported(source, input_size, input_data, dims)
    if isinstance(source, Graph):
        from ._graph_params import with_sizes
        from .torch._meta import build_on_meta

        source = build_on_meta(with_sizes(source, dims))
    return make_summary(source, depth=depth, input_size=input_size, train=train, optimizer=optimizer, **dims)


def _imported(source: Any, input_size: Any, input_data: Any, dims: dict[str, Any]) -> tuple[Any, Any, dict[str, Any]]:
    """An ``nn.Module`` that is not an hndl model, imported (:func:`from_module`) from ``input_size`` or
    ``input_data``, which the import then uses up; anything else as it is."""
    from .importer import imported_source, is_module

    if not is_module(source):
        if input_data is not None:
            raise HndlError(Problem("E_INPUT", "input_data is for an nn.Module that hndl imports first"))
        return source, input_size, dims

    graph, rest = imported_source(source, {"input_size": input_size, "input_data": input_data, **dims})
    return graph, None, rest


def draw(
    source: Graph | GraphModule | Any,
    path: str | os.PathLike[str] | None = None,
    *,
    format: str | None = None,
    depth: int | None = None,
    dpi: int = 300,
    input_size: Any = None,
    input_data: Any = None,
    **dims: Any,
) -> str | bytes:
    """A picture of a graph or a built model: one box per node (op and key settings such as ``conv2d 3x3/2, 64``,
    output shape, parameter count), the wires, subgraph nodes as clusters (one box below ``depth``). ``path``'s
    suffix picks the format: ``.svg``/``.png`` (Graphviz's ``dot`` program; a PNG at ``dpi``, 300 for print),
    ``.dot``/``.gv`` or ``.mmd`` (text, no Graphviz); without a path, ``format`` does (``"dot"`` by default).
    Writes ``path`` when given; returns the text or the image's bytes. ``dims`` fill in the shapes. Any other
    ``torch.nn.Module`` is imported first, given ``input_size=`` or ``input_data=`` as :func:`summary` takes them.

    Raises:
        HndlError: E_INPUT for an unknown format or dpi; E_RUNTIME for SVG/PNG without Graphviz's ``dot`` (says
            how to install it), or when it fails.
    """
    from ._draw import draw as make_drawing

    source, input_size, dims = _imported(source, input_size, input_data, dims)
    if input_size is not None:
        raise HndlError(Problem("E_INPUT", "draw() binds symbols by name (B=8), not from input_size"))
    return make_drawing(source, path, format=format, depth=depth, dpi=dpi, **dims)


def from_module(module: Any, *example_args: Any, dynamic_shapes: Any = None) -> ImportedGraph:
    """The hndl graph of an existing ``torch.nn.Module``, traced by ``torch.export`` on ``example_args``: the hndl
    op for each layer and function that has one (``nn.Linear`` -> ``linear``, ``x + y`` -> ``add``), each node
    named after the layer it ran in, and a ``module`` node rebuilding each layer no op expresses.
    ``dynamic_shapes`` (``torch.export``'s format, ``({0: Dim("B")},)``) makes input dims symbolic.

    The result is an :class:`hndl.importer.ImportedGraph`: build it, then
    ``model.load_state_dict(graph.convert(module.state_dict()))`` gives the built model the module's weights.
    See docs/import.md.

    Raises:
        HndlError: E_IMPORT naming the layer and the source line of each thing that cannot be imported.
    """
    from .importer import from_module as import_module

    return import_module(module, *example_args, dynamic_shapes=dynamic_shapes)


def generate(
    model: GraphModule,
    input_ids: torch.Tensor,
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    attention_mask: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    max_length: int | None = None,
    kv_cache: str = "static",
) -> torch.Tensor:
    """Continue each prompt of ``input_ids`` ``[B, T]`` (int64, left-padded where ``attention_mask`` is false) by
    up to ``max_new_tokens`` tokens with a key/value cache: greedy, or sampled with ``temperature``,
    ``top_k``, ``top_p`` from ``generator`` (or a fresh one seeded with ``seed``); a row ends at ``eos_token_id``
    and is filled with ``pad_token_id`` after it (a list of ids: any of them); ``max_length`` bounds prompt plus
    new tokens. ``model``: any built decoder whose attention is causal self-attention (zoo, hand-written or
    imported; its cached variant is derived with :func:`hndl.generation.with_kv_cache`, ``kv_cache``:
    ``"static"`` or ``"grow"``), or a model with a cache interface. Returns ``[B, T + n]`` int64. See
    :func:`hndl.generation.generate` and docs/generation.md.

    Raises:
        HndlError: E_INPUT before the first model call for ids of another dtype or outside the vocabulary, a
            prompt longer than the model's positions, a mask that does not match, bad sampling settings or special
            ids, a model whose cached variant cannot be derived (naming the node and why).
    """
    from .generation import generate as run

    return run(
        model,
        input_ids,
        max_new_tokens,
        do_sample=do_sample,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
        attention_mask=attention_mask,
        generator=generator,
        seed=seed,
        max_length=max_length,
        kv_cache=kv_cache,
    )


def __getattr__(name: str) -> Any:
    # torch is imported only when a model is built: describing and checking graphs must not need it.
    if name in ("torch", "func", "docs", "zoo", "weights", "importer", "generation"):
        import importlib

        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the subpackage exists but one of its own imports is missing
            # An absent optional distribution is an absent attribute: hasattr() and getattr(..., default) work.
            raise AttributeError(
                f"module 'hndl' has no attribute {name!r}: install the hndl-{name} distribution for it"
            ) from exc
    if name == "GraphModule":
        from .torch import GraphModule

        return GraphModule
    raise AttributeError(f"module 'hndl' has no attribute {name!r}")
