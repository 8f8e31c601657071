"""A language model's token embedding and output head, found in the graph: what transformers'
``get_input_embeddings``/``get_output_embeddings`` answer, for tools that ask a model for them (PEFT, resizing
code, weight tying). Defined by the graph, not by names, so it holds for any spec:

- the *output embeddings* are the layer of a ``linear`` node whose output is a graph output and whose weight is
  an ``embedding`` node's weight (tied), or else has its shape (``[vocab, hidden]``); None when no node is;
- the *input embeddings* are the layer of that ``embedding`` node; without a head, of the first ``embedding``
  node that reads a graph input (BERT's ``word_embeddings``, before its ``token_type_embeddings``); None when
  there is none.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from ._built import BuiltModel

__all__ = ["input_embeddings", "output_embeddings"]


def _weight(layer: Any) -> Any:
    # A wrapper such as PEFT's tuner layer answers ``weight`` with the weight of the layer it holds.
    return getattr(layer, "weight", None) if layer is not None else None


def _pair(model: BuiltModel) -> tuple[nn.Module | None, nn.Module | None]:
    """(the head, the embedding it matches), each None where the graph has none."""
    plan = model.plan
    outputs = set(plan.output_ids)
    embeddings = [model.node_module(s.node.path) for s in plan.steps if s.node.op == "embedding"]
    heads = [
        model.node_module(s.node.path) for s in plan.steps if s.node.op == "linear" and outputs.intersection(s.outputs)
    ]
    for same in (lambda a, b: a is b, lambda a, b: tuple(a.shape) == tuple(b.shape)):
        for head in heads:
            weight = _weight(head)
            for embedding in embeddings:
                other = _weight(embedding)
                if weight is not None and other is not None and same(weight, other):
                    return head, embedding
    return None, None


def output_embeddings(model: BuiltModel) -> nn.Module | None:
    """The output head's layer (see the module's docstring), or None."""
    return _pair(model)[0]


def input_embeddings(model: BuiltModel) -> nn.Module | None:
    """The token embedding's layer (see the module's docstring), or None."""
    embedding = _pair(model)[1]
    if embedding is not None:
        return embedding
    inputs = set(model.plan.input_ids)
    for step in model.plan.steps:
        if step.node.op == "embedding" and inputs.intersection(step.inputs):
            return model.node_module(step.node.path)
    return None
