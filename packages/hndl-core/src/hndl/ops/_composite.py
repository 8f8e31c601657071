"""Composition ops: a named subgraph used as a node (``graph``), and a trusted escape hatch (``module``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType
from .._param_types import ParamType, excerpt
from .._registry import InferError, Param, Params, Port, op


class _GraphArguments(ParamType):
    """The values a use of a subgraph passes to its parameters: one mapping for every repetition, or a list of
    mappings, one per repetition (ResNet's first block of a stage strides, the others do not)."""

    name, description = "graph_params", "mapping of graph parameter values, or a list of them (one per repetition)"

    def normalize(self, value: Any) -> tuple[Any, str]:
        items = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(m, Mapping) and all(isinstance(k, str) for k in m) for m in items):
            return None, f"must be a mapping with string keys, or a list of them, got {excerpt(value)}"
        return (dict(value) if isinstance(value, Mapping) else [dict(m) for m in items]), ""

    def schema(self, bounds: Mapping[str, float]) -> dict[str, Any]:
        mapping = {"type": "object", "propertyNames": {"type": "string"}}
        return {"anyOf": [mapping, {"type": "array", "items": mapping}]}


def _build_graph(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Run a named subgraph as one node, ``repeat`` times in sequence, each repetition with its own weights.

    The subgraph's input contracts are checked against the node's inputs, and every repetition is inferred on
    its own, so parameters such as ``in_features`` may differ between the first repetition and the rest.
    Inside, nodes are named ``<node>.<repetition>.<inner node>`` (``blocks.2.attn``) in messages, and their
    modules live under ``nodes.n_<node>.<repetition>.n_<inner node>``; a graph used without ``repeat`` has no
    repetition level (``stem.conv``, ``nodes.n_stem.n_conv``). ``params`` sets the graph's parameters.
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
            "repetition, or a list with one mapping per repetition",
        ),
    ],
    inputs=[Port("inputs", None, dtype="any", doc="one value per input of the graph", variadic=True)],
    outputs=[Port("outputs", None, dtype="any", doc="the graph's outputs, in declared order")],
    module="torch.nn.ModuleList of torch.nn.ModuleDict (one per repetition, keys n_<node>); without repeat, the "
    "torch.nn.ModuleDict itself",
    inference=(
        "checks each input against the subgraph's input contract, then infers through the subgraph; with "
        "repeat, each repetition's outputs feed the next, and each repetition infers its own parameters"
    ),
    example={"op": "graph", "graph": "block", "repeat": 4},
    input_shape_example=["B", "T", 64],
    runs_subgraph=True,
)(_build_graph)


def _module_infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.shape is None:
        return [TensorType(inputs[0].shape, inputs[0].dtype)]
    return [TensorType(tuple(p.shape), inputs[0].dtype)]


def _build_module(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Any ``torch.nn.Module`` class, imported by name (``package.module:Class``) and built with ``kwargs``.

    Loading a spec never imports anything: a spec that uses this op only builds when it was loaded with
    ``hndl.load(..., allow_imports=True)`` (Python-built graphs are trusted). The output shape is not inferred:
    it is the input's shape unless ``shape`` declares it.
    """
    import importlib

    module_name, _, attr = p.target.partition(":")
    try:
        cls: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as exc:
        raise InferError(f"cannot import {p.target!r}: {exc}", code="E_PARAM", param="target") from None
    return cls(**p.kwargs)


op(
    "module",
    params=[
        Param("target", "str", doc="the class to build, as 'package.module:Class'"),
        Param("kwargs", "mapping", default={}, doc="keyword arguments for the class"),
        Param("shape", "ints", default=None, nullable=True, min=0, doc="the output shape, when it is not the input's"),
    ],
    inputs=[Port("x", None, dtype="any")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_module_infer,
    module="whatever 'target' names",
    inference="output shape is the input's, or the declared 'shape'; dtype is the input's",
    example={"op": "module", "target": "torch.nn:Tanhshrink"},
    imports_code=True,
)(_build_module)
