"""Composition ops: a named subgraph used as a node (``graph``), and a trusted escape hatch (``module``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType, format_shape
from .._dims import SYMBOL_RE, Dim, free_symbols, symbol
from .._param_types import ParamType, excerpt
from .._registry import InferError, Param, Params, Port, op
from ._common import open_at


class _GraphArguments(ParamType):
    """The values a use of a subgraph passes to its parameters: one mapping for every repetition, or a list of
    mappings, each but the last for one repetition in turn and the last for every repetition after them (ResNet's
    first block of a stage strides, the others do not, whatever the stage's depth)."""

    name, description = (
        "graph_params",
        "mapping of graph parameter values, or a list of them (one per repetition in turn, the last for the rest)",
    )

    def normalize(self, value: Any) -> tuple[Any, str]:
        items = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(m, Mapping) and all(isinstance(k, str) for k in m) for m in items):
            return None, f"must be a mapping with string keys, or a list of them, got {excerpt(value)}"
        return (dict(value) if isinstance(value, Mapping) else [dict(m) for m in items]), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        mapping = {"type": "object", "propertyNames": {"type": "string"}}
        return {"anyOf": [mapping, {"type": "array", "items": mapping}]}


class _InputNames(ParamType):
    """Names of a subgraph's inputs: distinct strings (whether the graph has them is the checker's question)."""

    name, description = "input_names", "list of the graph's input names"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            return None, f"must be a list of input names, got {excerpt(value)}"
        if len(set(value)) != len(value):
            return None, f"names an input twice, got {excerpt(value)}"
        return tuple(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "array", "items": {"type": "string"}, "uniqueItems": True}


def _build_graph(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Run a named subgraph as one node, ``repeat`` times in sequence, each repetition with its own weights.

    The subgraph's input contracts are checked against the node's inputs, and every repetition is inferred on
    its own, so parameters such as ``in_features`` may differ between the first repetition and the rest.
    Inside, nodes are named ``<node>.<repetition>.<inner node>`` (``blocks.2.attn``) in messages, and their
    modules live under ``nodes.n_<node>.<repetition>.n_<inner node>``; a graph used without ``repeat`` has no
    repetition level (``stem.conv``, ``nodes.n_stem.n_conv``). ``params`` sets the graph's parameters.

    With ``repeat``, each repetition's outputs feed the next repetition's inputs, in order. Inputs named in
    ``shared`` are not carried that way: every repetition reads the node's own value for them (a mask, rotary
    tables, a position bias made once), and the graph's outputs feed only the other inputs, so it has one output
    per input not shared.
    """
    # The op declares runs_subgraph: the GraphModule builder (torch/_build.py) expands its nodes from the
    # checked subgraphs and never calls this function.
    raise AssertionError("graph nodes are built by the GraphModule builder, not by an op builder")


op(
    "graph",
    params=[
        Param("graph", "graph", doc="name of the graph (under 'graphs:') to run"),
        Param(
            "repeat",
            "int",
            default=1,
            min=1,
            max=1000,
            doc="run the graph this many times, each with its own weights (at most 1000); without it, the graph "
            "runs once and its nodes are named without a repetition level",
        ),
        Param(
            "params",
            _GraphArguments(),
            default=None,
            nullable=True,
            doc="values for the graph's parameters (the rest keep their defaults): one mapping for every "
            "repetition, or a list: one mapping per repetition in turn, the last for every repetition after them",
        ),
        Param(
            "shared",
            _InputNames(),
            default=(),
            doc="the graph's inputs that every repetition reads from this node's inputs (a mask, a position "
            "bias), instead of from the previous repetition's outputs",
        ),
        Param(
            "checkpoint",
            "bool",
            default=False,
            doc="recompute each use (each repetition) in backward instead of keeping its activations: "
            "torch.utils.checkpoint around it while gradients are recorded, as model.checkpointing() switches "
            "at run time (SPEC 16)",
        ),
    ],
    inputs=[Port("inputs", None, dtype="any", doc="one value per input of the graph", variadic=True)],
    outputs=[Port("outputs", None, dtype="any", doc="the graph's outputs, in declared order")],
    module="torch.nn.ModuleList of torch.nn.ModuleDict (one per repetition, keys n_<node>); without repeat, the "
    "torch.nn.ModuleDict itself",
    inference=(
        "checks each input against the subgraph's input contract, then infers through the subgraph; with "
        "repeat, each repetition's outputs feed the next repetition's inputs not named in shared (one output per "
        "such input), the shared ones read this node's inputs every time, and each repetition infers its own "
        "parameters"
    ),
    example={"op": "graph", "graph": "block", "repeat": 4},
    input_shape_example=["B", "T", 64],
    runs_subgraph=True,
)(_build_graph)


class _ModuleShape(ParamType):
    """A declared output shape of ``module``: sizes (ints) or symbol names of the inputs' shapes (``[B, 64]``)."""

    name, description = "module_shape", "list of sizes: integers or symbol names such as B"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, (list, tuple)):
            return None, f"must be a list of sizes, got {excerpt(value)}"
        for item in value:
            if isinstance(item, bool) or not (
                (isinstance(item, int) and item >= 0) or (isinstance(item, str) and SYMBOL_RE.match(item))
            ):
                return None, f"entries must be sizes (0 or more) or symbol names, got {excerpt(value)}"
        return tuple(value), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "array", "items": _SIZE_SCHEMA}


# JSON Schema patterns search (unanchored) and are ECMA regexes: anchor with ^...$, not Python's \Z, or "0A"
# would pass the schema while the loader refuses it.
_SIZE_SCHEMA = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}]}


class _ModuleShapes(_ModuleShape):
    """``module``'s declared outputs: one shape per output."""

    name, description = "module_shapes", "list of shapes, one per output"

    def normalize(self, value: Any) -> tuple[Any, str]:
        if not isinstance(value, (list, tuple)) or not value:
            return None, f"must be a non-empty list of shapes, got {excerpt(value)}"
        shapes = []
        for item in value:
            shape, reason = super().normalize(item)
            if reason:
                return None, f"each output {reason}"
            shapes.append(shape)
        return tuple(shapes), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        return {"type": "array", "minItems": 1, "items": {"type": "array", "items": _SIZE_SCHEMA}}


class _OutputSelector(ParamType):
    """Which values of a module's result the node gives: one index, or a list of them."""

    name, description = "output_index", "index, or list of indexes, into the module's result (nested tuples flattened)"

    def normalize(self, value: Any) -> tuple[Any, str]:
        items = [value] if not isinstance(value, (list, tuple)) else list(value)
        if not items or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in items):
            return None, f"must be an index (0 or more) or a non-empty list of them, got {excerpt(value)}"
        return (value if isinstance(value, int) else tuple(items)), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        index = {"type": "integer", "minimum": 0}
        return {"anyOf": [index, {"type": "array", "items": index, "minItems": 1}]}


def _module_count(p: Mapping[str, Any]) -> int:
    outputs = p.get("outputs")
    return len(outputs) if outputs else 1


def _declared_shape(declared: Sequence[Any], inputs: Sequence[TensorType], param: str) -> tuple[Dim, ...]:
    """A declared shape with each symbol name bound to the same symbol in the inputs' shapes.

    Raises:
        InferError: E_PARAM for a symbol no input's shape carries (the output's size would be a guess).
    """
    known: set[str] = set()
    for t in inputs:
        if t.shape is None or open_at(t.shape) is not None:
            known = set()  # an input of unknown shape may carry any symbol
            break
        for d in t.shape:
            known |= free_symbols(d)
    else:
        for item in declared:
            if isinstance(item, str) and item not in known:
                raise InferError(
                    f"symbol {item!r} is not in the inputs' shapes "
                    f"({', '.join(format_shape(t.shape) for t in inputs if t.shape is not None)})",
                    code="E_PARAM",
                    param=param,
                    expected="sizes, or symbols of the inputs' shapes",
                    actual=list(declared),
                    hint="use an int, or a symbol that an input's contract binds",
                )
    return tuple(symbol(item) if isinstance(item, str) else item for item in declared)


def _module_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    dtype = inputs[0].dtype
    if p.outputs is not None and p.shape is not None:
        raise InferError(
            "'shape' and 'outputs' both declare the output",
            code="E_PARAM",
            param="outputs",
            expected="'shape' for one output, or 'outputs' for several",
            actual={"shape": list(p.shape), "outputs": [list(s) for s in p.outputs]},
        )
    count = _module_count(p)
    if isinstance(p.output, tuple) and len(p.output) != count:
        raise InferError(
            f"'output' selects {len(p.output)} values, the node declares {count} output(s)",
            code="E_PARAM",
            param="output",
            expected=f"{count} index(es), one per declared output",
            actual=list(p.output),
            hint="declare one shape per selected value in 'outputs'",
        )
    if isinstance(p.output, int) and count != 1:
        raise InferError(
            f"'output' selects one value, the node declares {count} outputs",
            code="E_PARAM",
            param="output",
            expected=f"a list of {count} indexes",
            actual=p.output,
        )
    if p.outputs is not None:
        return [TensorType(_declared_shape(s, inputs, "outputs"), dtype) for s in p.outputs]
    if p.shape is not None:
        return [TensorType(_declared_shape(p.shape, inputs, "shape"), dtype)]
    return [TensorType(inputs[0].shape, dtype)]


def _build_module(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Any ``torch.nn.Module`` class, imported by name (``package.module:Class``) and built with ``kwargs``.

    Loading a spec never imports anything: a spec that uses this op only builds when it was loaded with
    ``hndl.load(..., allow_imports=True)`` (Python-built graphs are trusted). The output shape is not inferred:
    it is the first input's shape unless ``shape`` (one output) or ``outputs`` (one shape per output) declares
    it, with ints and the inputs' symbols (``[B, 64]``). For a class that returns a tuple (``torch.nn:LSTM``
    returns ``(output, (h_n, c_n))``), ``output`` picks values of the result with its nested tuples flattened
    (``0`` for the sequence; ``[0, 1]`` with two declared outputs for the sequence and ``h_n``); the module is
    then wrapped in a ``SelectOutputs`` layer and its parameters sit under ``module.``. The
    first validating call checks what the module returns against the declaration (``E_CONTRACT``).
    """
    import importlib

    module_name, _, attr = p.target.partition(":")
    try:
        cls: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as exc:
        raise InferError(f"cannot import {p.target!r}: {exc}", code="E_PARAM", param="target") from None
    module = cls(**p.kwargs)
    if p.output is None:
        return module
    from ..torch._select import SelectOutputs

    return SelectOutputs(module, p.output)


op(
    "module",
    saves="output",
    params=[
        Param("target", "str", doc="the class to build, as 'package.module:Class'"),
        Param("kwargs", "mapping", default={}, doc="keyword arguments for the class"),
        Param(
            "shape",
            _ModuleShape(),
            default=None,
            nullable=True,
            doc="the output shape, when it is not the first input's: ints and the inputs' symbols ([B, 64])",
        ),
        Param(
            "outputs",
            _ModuleShapes(),
            default=None,
            nullable=True,
            doc="one shape per output, for a node with several outputs (node.0, node.1); instead of 'shape'",
        ),
        Param(
            "output",
            _OutputSelector(),
            default=None,
            nullable=True,
            doc="for a module that returns a tuple: the index of the value the node gives (nested tuples "
            "flattened: torch.nn.LSTM gives output, h_n, c_n), or one index per declared output",
        ),
    ],
    inputs=[Port("x", None, dtype="any", doc="one or more tensors, passed positionally", variadic=True)],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_module_infer,
    count_outputs=_module_count,
    module="whatever 'target' names; with 'output', inside a SelectOutputs layer (parameters under module.)",
    inference="output shapes are the declared 'shape' or 'outputs' (symbols bound to the inputs' symbols), else "
    "the first input's; dtype is the first input's. The first validating call checks the module's result "
    "against them",
    example={
        "op": "module",
        "target": "torch.nn:LSTM",
        "kwargs": {"input_size": 32, "hidden_size": 64, "batch_first": True},
        "shape": ["B", "T", 64],
        "output": 0,
    },
    input_shape_example=["B", "T", 32],
    imports_code=True,
)(_build_module)
