"""Pipeline stages cut from the plan, for ``torch.distributed.pipelining``.

A model splits between steps of its plan: at named nodes (``split_at=["blocks.2", "ln_f"]``: a stage starts at
each), or into ``num_stages`` of about equal multiply-adds at the given dims. A split may fall between two
repetitions of a repeated subgraph (``blocks.2`` is the third repetition), never inside one. Each stage is a
:class:`Stage`: a module holding exactly the layers it runs, under the same names as in the model (stage 1 of a
GPT-2 has ``transformer.h.6...``, so its ``state_dict`` keys are the model's), and a ``forward`` that takes the values
crossing into it and returns those crossing out, in the order :attr:`Stage.inputs` and :attr:`Stage.outputs` name
them. Its layers are the model's own modules (not copies): the stage on a rank is what that rank trains.

``Stage.example_args(**dims)`` gives meta tensors of the shapes and dtypes hndl infers for those values at the
given dims (``B`` is the microbatch), which is what ``PipelineStage(input_args=..., output_args=...)`` takes::

    stages = hndl.torch.pipeline_stages(model, num_stages=2, B=4, T=128)
    stage = stages[rank]
    pipe = PipelineStage(stage, rank, 2, device, input_args=stage.example_args(B=mb),
                         output_args=stage.example_outputs(B=mb))
    schedule = ScheduleGPipe(pipe, n_microbatches=4, loss_fn=loss_fn)

A stage runs its layers through ``__call__`` with no contract check of its own: the model's checks run when the
model is called whole, and inside a pipeline the values are torch's to pass. A parameter tied across two stages
(GPT-2's ``wte`` and ``lm_head``) would be trained as two copies: it is ``E_PARAM``, naming both.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .._contracts import DTYPES, TensorType
from .._costs import macs
from .._dims import DimError, evaluate
from .._errors import HndlError, Problem
from .._plan import Plan, Step
from ..naming import suggestion
from ._blocks import Program, program_for, run_program
from ._built import BuiltModel

__all__ = ["Stage", "pipeline_stages"]


class Stage(nn.Module):
    """One pipeline stage of a GraphModule: its layers under the model's names and a ``forward`` over
    the values crossing into it (:attr:`inputs`), returning those crossing out (:attr:`outputs`; one as a tensor).

    Attributes:
        index: the stage's position, from 0.
        inputs, outputs: the value ids (node names, ``node.port``) it takes and gives, in order.
        first, last: the qualified names of its first and last nodes.
    """

    # Set in __init__ straight into the instance dict; annotations only, for the type checker.
    index: int
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    first: str
    last: str

    def __init__(
        self,
        model: BuiltModel,
        index: int,
        steps: Sequence[Step],
        inputs: Sequence[str],
        outputs: Sequence[str],
        types: dict[str, TensorType],
    ) -> None:
        super().__init__()
        for step in steps:
            holder: nn.Module = self
            for key in step.node.path[:-1]:
                if key not in holder._modules:
                    holder.add_module(key, nn.ModuleDict())
                holder = holder._modules[key]  # type: ignore[assignment]
            leaf = model.node_module(step.node.path)
            if leaf is not None:
                holder.add_module(step.node.path[-1], leaf)
        # In the instance dict, past nn.Module.__setattr__: a layer may be registered under any of these names.
        self.__dict__["index"] = index
        self.__dict__["inputs"] = tuple(inputs)
        self.__dict__["outputs"] = tuple(outputs)
        self.__dict__["first"] = steps[0].node.qualname
        self.__dict__["last"] = steps[-1].node.qualname
        self.__dict__["_types"] = {v: types[v] for v in (*inputs, *outputs)}
        self.__dict__["_model_inputs"] = frozenset(model.plan.input_ids)
        self.__dict__["_dtype"] = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        self.__dict__["_hndl_program"] = program_for(steps, inputs, outputs, f"stage {index}", lambda path: path)

    def forward(self, *inputs: Any) -> Any:
        program: Program = self.__dict__["_hndl_program"]
        if len(inputs) != len(program.inputs):
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"stage {self.index} takes {len(program.inputs)} inputs ({', '.join(program.inputs)}), "
                    f"got {len(inputs)}",
                    expected=", ".join(program.inputs),
                    actual=str(len(inputs)),
                )
            )
        return run_program(self, program, inputs)

    def example_args(self, **dims: int) -> tuple[torch.Tensor, ...]:
        """Meta tensors shaped as this stage's inputs are at ``dims`` (``PipelineStage``'s ``input_args``)."""
        return tuple(self._meta(v, dims) for v in self.inputs)

    def example_outputs(self, **dims: int) -> tuple[torch.Tensor, ...]:
        """Meta tensors shaped as this stage's outputs are at ``dims`` (``PipelineStage``'s ``output_args``)."""
        return tuple(self._meta(v, dims) for v in self.outputs)

    def _meta(self, value: str, dims: dict[str, int]) -> torch.Tensor:
        t: TensorType = self.__dict__["_types"][value]
        try:
            shape = [evaluate(d, dims) for d in (t.shape or ())]
        except DimError as exc:
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"stage {self.index}'s value {value!r} has shape {list(t.shape or ())}: give every symbol's size",
                    expected="sizes for " + ", ".join(sorted({str(d) for d in (t.shape or ())})),
                    actual=", ".join(f"{k}={v}" for k, v in dims.items()) or "none",
                )
            ) from exc
        if t.dtype in DTYPES:
            dtype = getattr(torch, t.dtype)
        elif t.dtype == "int":
            dtype = torch.int64
        elif t.dtype == "bool":
            dtype = torch.bool
        else:
            dtype = self.__dict__["_dtype"] or torch.get_default_dtype()
        # A floating value made by a layer carries gradients between stages (the pipeline sends them back);
        # the model's own inputs do not.
        grad = dtype.is_floating_point and value not in self.__dict__["_model_inputs"]
        return torch.empty(shape, dtype=dtype, device="meta", requires_grad=grad)

    def extra_repr(self) -> str:
        return f"index={self.index}, first={self.first!r}, last={self.last!r}"


def _cut_points(plan: Plan) -> dict[str, int]:
    """Where a stage may start: each top-level node and each repetition of a top-level repeated node, by name ->
    the index of its first step."""
    points: dict[str, int] = {}
    for index, step in enumerate(plan.steps):
        if "." not in step.node.qualname:
            points.setdefault(step.node.qualname, index)
    for group in plan.groups:
        if "." not in group.node.qualname:  # a use of a top-level graph node: itself, or one of its repetitions
            points.setdefault(group.node.qualname, group.start)
            points.setdefault(group.qualname, group.start)
    return points


def _balanced(model: BuiltModel, points: dict[str, int], num_stages: int, dims: dict[str, int]) -> list[int]:
    """``num_stages - 1`` cut points splitting the multiply-adds at ``dims`` as evenly as the cut points allow."""
    plan = model.plan
    costs: list[int] = []
    for step in plan.steps:
        count = macs(step.node)
        try:
            costs.append(max(1, evaluate(count, dims)) if count is not None else 1)
        except DimError as exc:
            raise HndlError(
                Problem(
                    "E_PARAM",
                    f"splitting by cost needs every symbol's size: node '{step.node.qualname}' costs {count}",
                    expected="dims for every input symbol, e.g. B=4, T=128",
                    actual=", ".join(f"{k}={v}" for k, v in dims.items()) or "none",
                )
            ) from exc
    total = sum(costs)
    prefix = [0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    allowed = sorted(set(points.values()) - {0})
    cuts: list[int] = []
    for k in range(1, num_stages):
        target = total * k / num_stages
        candidates = [p for p in allowed if not cuts or p > cuts[-1]]
        if not candidates:
            break
        cuts.append(min(candidates, key=lambda p: abs(prefix[p] - target)))
    return cuts


def pipeline_stages(
    model: BuiltModel,
    split_at: Sequence[str] | None = None,
    *,
    num_stages: int | None = None,
    **dims: int,
) -> list[Stage]:
    """Cut ``model`` into pipeline stages: see the module docstring.

    Args:
        split_at: node names (top-level nodes, or repetitions such as ``blocks.2``) where a new stage starts.
        num_stages: instead of ``split_at``, this many stages of about equal multiply-adds at ``dims``.
        dims: each input symbol's size, for ``num_stages``.

    Raises:
        HndlError: ``E_PARAM`` for a name that is no place to split (with the closest), for both or neither of
            ``split_at`` and ``num_stages``, for a stage that would be empty, and for a parameter tied across
            stages.
    """
    plan = model.plan
    points = _cut_points(plan)
    if (split_at is None) == (num_stages is None):
        raise HndlError(
            Problem(
                "E_PARAM",
                "give split_at (node names) or num_stages, one of them",
                expected="one",
                actual="both" if split_at else "neither",
            )
        )
    if num_stages is not None:
        if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
            raise HndlError(
                Problem("E_PARAM", "num_stages must be an int >= 1", expected=">= 1", actual=repr(num_stages))
            )
        cuts = _balanced(model, points, num_stages, dims)
    else:
        cuts = []
        for name in split_at or ():
            if name not in points:
                raise HndlError(
                    Problem(
                        "E_PARAM",
                        f"graph '{model.graph.name}' cannot be split at {name!r}: it is no top-level node or repetition",
                        expected="a top-level node or a repetition such as blocks.2",
                        actual=name,
                        hint=suggestion(name, list(points)),
                    )
                )
            cuts.append(points[name])
        cuts = sorted(set(cuts) - {0})
    bounds = [0, *cuts, len(plan.steps)]
    if num_stages is not None and len(bounds) - 1 != num_stages:
        raise HndlError(
            Problem(
                "E_PARAM",
                f"graph '{model.graph.name}' has only {len(bounds) - 1} places to start a stage, not {num_stages}",
                expected=f"num_stages <= {len(set(points.values()))}",
                actual=str(num_stages),
            )
        )
    types: dict[str, TensorType] = dict(zip(plan.input_ids, (plan.checked.types[v] for v in plan.input_ids)))
    for step in plan.steps:
        types.update(zip(step.outputs, step.node.out_types))
    last_read: dict[str, int] = {}  # value -> the last step reading it (graph outputs: past the end)
    for index, step in enumerate(plan.steps):
        for v in step.inputs:
            last_read[v] = index
    for v in plan.output_ids:
        last_read[v] = len(plan.steps)
    made: dict[str, int] = dict.fromkeys(plan.input_ids, -1)
    order = list(plan.input_ids)
    for index, step in enumerate(plan.steps):
        for v in step.outputs:
            made[v] = index
            order.append(v)

    def crossing(cut: int) -> list[str]:
        """The values a stage boundary passes on: made before it and read at or after it (stage 0 takes every
        graph input, the last stage gives the graph's outputs)."""
        if cut == 0:
            return list(plan.input_ids)
        if cut == len(plan.steps):
            return list(plan.output_ids)
        return [v for v in order if made[v] < cut <= last_read.get(v, -1)]

    stages: list[Stage] = []
    for number, (start, stop) in enumerate(itertools.pairwise(bounds)):
        stages.append(Stage(model, number, plan.steps[start:stop], crossing(start), crossing(stop), types))
    _refuse_ties_across(stages)
    return stages


def _refuse_ties_across(stages: Sequence[Stage]) -> None:
    owner: dict[int, tuple[int, str]] = {}
    for stage in stages:
        for name, p in stage.named_parameters(remove_duplicate=False):
            found = owner.setdefault(id(p), (stage.index, name))
            if found[0] != stage.index:
                raise HndlError(
                    Problem(
                        "E_PARAM",
                        f"parameter '{found[1]}' (stage {found[0]}) is tied to '{name}' (stage {stage.index}): "
                        "pipelining would train two copies",
                        expected="tied parameters in one stage",
                        actual=f"stages {found[0]} and {stage.index}",
                        hint="split elsewhere so both nodes are in one stage, or untie them",
                    )
                )
