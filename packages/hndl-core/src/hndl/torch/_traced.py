"""A built model's call under a trace: ``torch.compile`` and strict export (Dynamo), or ``torch.export``'s
non-strict default (which ``torch.distributed.pipelining.pipeline`` runs).

``GraphModule.forward`` asks first whether a trace runs; then no check runs and no Python state is consulted: it
binds the inputs (:func:`traced_inputs`) and calls the generated ``unchecked`` function, whose plain module calls
the tracer sees. Dynamo traces them as they are; a non-strict trace runs the Python as written, so the generated
call must already call each block that has been given its own ``forward`` (:func:`call_instance_forwards`).
"""

from __future__ import annotations

from typing import Any

import torch

from ._binding import bind_inputs
from ._built import BuiltModel
from ._runtime import blocks, install, leaves, runtime_of

__all__ = ["call_instance_forwards", "is_dynamo_compiling", "traced_inputs"]

#: Dynamo alone (torch.compile, strict export); a non-strict torch.export runs the model's Python as written.
is_dynamo_compiling = getattr(torch.compiler, "is_dynamo_compiling", torch.compiler.is_compiling)


def call_instance_forwards(model: BuiltModel) -> None:
    """Before a non-Dynamo trace: a block given its own ``forward`` since the call was generated (a ``split_spec``
    wraps it to mark a split point; a plain attribute write, which no registration hook reports) is made a step
    that calls it, so the trace runs that forward. Costs a walk over the blocks per traced call, never on the
    fast path."""
    runtime = runtime_of(model)
    running = {step.node.path for step in runtime.plan.steps}
    for group, block in zip(model.plan.groups, blocks(model)):
        if block is not None and "forward" in block.__dict__ and group.path not in running:
            with runtime.lock:
                install(model, leaves(model), runtime.stores)
            return


def traced_inputs(model: BuiltModel, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The graph's inputs of a traced call, in declaration order (``E_INPUT`` as :func:`._binding.bind_inputs`
    gives it), after :func:`call_instance_forwards` when the trace is not Dynamo's."""
    if not is_dynamo_compiling():
        call_instance_forwards(model)
    names = model._plan.input_names
    return args if not kwargs and len(args) == len(names) else bind_inputs(names, model.graph.name, args, kwargs)
