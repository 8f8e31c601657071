"""What backward keeps of each op's forward: what the training-memory estimate (:mod:`hndl._memory`) reads.

Autograd keeps a tensor for backward when the derivative of the op that read or made it needs it: a linear
layer keeps its input (the weight's gradient is ``grad^T @ x``), ReLU its output (the gradient passes where
it is positive), an addition nothing. So an activation costs memory in a training step when its producer keeps
its output, or when any op that reads it keeps its inputs, and not otherwise: the logits of a language model
head, read by nothing but the loss, are freed as soon as the loss is made. Each op declares which of the two it
keeps (:attr:`hndl.OpDef.saves`), whether its backward passes its gradient through (``passes_gradient``), and,
for a layer that makes tensors inside it (attention's projected queries, keys and values), how many elements it
keeps besides (``inner_memory``). An op that declares nothing keeps its output (the cautious guess: a layer
hndl does not know, a ``module`` node).

:data:`SAVES`, :data:`INNER` and :data:`PASSES_GRADIENT` are those declarations as tables, views of the
registry. No torch here.
"""

from __future__ import annotations

from ._checked import CheckedNode
from ._dims import Dim
from ._op_facts import apply_rule
from ._registry import FactTable

__all__ = ["INNER", "PASSES_GRADIENT", "SAVES", "inner", "saves"]

#: Op name -> what its backward keeps (:attr:`hndl.OpDef.saves`): ``inputs``, ``output``, ``both`` or ``none``,
#: for the registered ops that declare it.
SAVES = FactTable(lambda o: o.saves, lambda kept: kept != "unknown")

#: The ops whose backward hands their output's gradient to their inputs as it is, or as views of it: no new
#: memory (:attr:`hndl.OpDef.passes_gradient`). ``op in PASSES_GRADIENT`` asks.
PASSES_GRADIENT = FactTable(lambda o: o.passes_gradient, bool)

#: Op name -> what the layer keeps inside it besides its inputs and output (:attr:`hndl.OpDef.inner_memory`):
#: ``rule(node) -> [(elements, dtype), ...]``, ``float`` standing for the model's floating dtype.
INNER = FactTable(lambda o: o.inner_memory, lambda rule: rule is not None)


def saves(node: CheckedNode) -> str:
    """What ``node``'s backward keeps (a value of :data:`SAVES`); its output for an op that does not say, or
    whose layer is code hndl cannot see."""
    kept = node.opdef.saves
    if node.opdef.imports_code or kept == "unknown":
        return "output"
    return kept


def inner(node: CheckedNode) -> list[tuple[Dim, str]] | None:
    """What ``node`` keeps inside it for backward, as (elements, dtype) pairs (none for most ops; None when
    its input's shape is unknown)."""
    rule = node.opdef.inner_memory
    return [] if rule is None else apply_rule(node, "inner_memory", rule)
