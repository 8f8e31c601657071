"""Training memory from a plan alone: the activations a step keeps for backward, and which segments to recompute.

Each leaf step's outputs are sized from their checked types (``_costs``) under the caller's dims. Backward keeps
an activation while some later step needs it; this model counts every floating output of a step whose layer
returns new memory (``OpDef.returns`` ``"new"`` or ``"unknown"``: a view, an input passed on or a registered
tensor is counted where it was made) as *kept*. A *segment* is one use of a subgraph (a :class:`~hndl.Group`,
one repetition of a repeated one); recomputing it (activation checkpointing) keeps only its outputs, and backward
makes its inner activations again, one segment at a time. The estimated peak of a training step is then

    max(kept at the end of forward, max over recomputed segments g of (kept before g) + (made inside g))
        + the largest single output

the larger of what forward leaves for backward and what backward holds while it recomputes a segment (what
comes after that segment is freed by then), plus the gradient backward holds while it runs (at least the size
of the value it runs through: the largest output bounds it). Adding a segment never raises the estimate, so recomputing every
candidate gives the smallest one. No torch here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from ._costs import DTYPE_BYTES, macs, numel
from ._dims import DimError, evaluate
from ._errors import HndlError, Problem
from ._plan import Plan, Step

__all__ = [
    "Segment",
    "SegmentPlan",
    "choose",
    "kept_bytes",
    "largest_output",
    "outermost",
    "peak_bytes",
    "segments",
    "step_bytes",
]

#: Ops whose outputs are counted where they were made, not again: they share memory with something else.
_SHARED = ("view", "input", "state")


@dataclass(frozen=True)
class Segment:
    """A subgraph use that can be recomputed: ``plan.groups[index]``, what recomputing it frees and costs."""

    index: int
    qualname: str
    made_bytes: int  # the activations its steps make and backward would keep (its outputs included)
    output_bytes: int  # of those, its outputs: kept either way
    macs: int  # the multiply-adds of one more forward of it (the cost of recomputing it)


@dataclass(frozen=True)
class SegmentPlan:
    """What :func:`choose` picked: group indices, the estimated peak and the multiply-adds recomputed."""

    chosen: frozenset[int]
    peak_bytes: int
    recompute_macs: int


def _step_bytes(step: Step, env: Mapping[str, int], float_bytes: int) -> list[int]:
    """The bytes of each output of ``step`` that backward may keep (0 for those it does not count)."""
    node = step.node
    if node.opdef.returns in _SHARED:
        return [0] * len(step.outputs)
    sizes = []
    for t in node.out_types:
        if t.dtype not in ("float", "any") and not t.dtype.startswith(("float", "bfloat", "complex")):
            sizes.append(0)  # an integer or boolean value (indices, a mask) carries no gradient
            continue
        count = numel(t.shape)
        try:
            elements = evaluate(count, env) if count is not None else None
        except (DimError, ZeroDivisionError):
            elements = None
        if elements is None:
            raise HndlError(
                node.problem(
                    "E_PARAM",
                    "the size of this node's output is unknown under the dims given, so its activation memory is too",
                    expected="every symbol of the inputs bound",
                    actual=", ".join(f"{k}={v}" for k, v in env.items()) or "no dims",
                    hint="give each dim of the graph's inputs: model.checkpointing(budget=..., B=8, T=512)",
                )
            )
        sizes.append(elements * (float_bytes if t.dtype in ("float", "any") else DTYPE_BYTES.get(t.dtype, 4)))
    return sizes


def step_bytes(plan: Plan, env: Mapping[str, int], float_bytes: int) -> list[int]:
    """Per step, the bytes of its outputs that backward keeps without checkpointing."""
    return [sum(_step_bytes(step, env, float_bytes)) for step in plan.steps]


def largest_output(plan: Plan, env: Mapping[str, int], float_bytes: int) -> int:
    """The bytes of the largest single floating output: backward holds a gradient that size while it runs
    through it (the logits' gradient, first of all), on top of what forward kept."""
    return max((b for step in plan.steps for b in _step_bytes(step, env, float_bytes)), default=0)


def outermost(plan: Plan, indices: Collection[int]) -> list[int]:
    """The groups of ``indices`` that no other group of ``indices`` holds, in step order (``plan.groups`` lists
    a group before the groups inside it)."""
    kept: list[int] = []
    stop = -1
    for index in sorted(indices):
        group = plan.groups[index]
        if group.start >= stop or group.start == group.stop:
            kept.append(index)
            stop = max(stop, group.stop)
    return sorted(kept, key=lambda i: plan.groups[i].start)


def segments(
    plan: Plan, env: Mapping[str, int], float_bytes: int, indices: Collection[int] | None = None
) -> list[Segment]:
    """The outermost of the groups ``indices`` (all groups when None), each with its sizes and recompute cost:
    the segments a budget may choose from."""
    found = []
    for index in outermost(plan, range(len(plan.groups)) if indices is None else indices):
        group = plan.groups[index]
        outputs = set(group.outputs)
        made = out = work = 0
        for position in range(group.start, group.stop):
            step = plan.steps[position]
            per_output = _step_bytes(step, env, float_bytes)
            made += sum(per_output)
            out += sum(b for v, b in zip(step.outputs, per_output) if v in outputs)
            cost = macs(step.node)
            work += evaluate(cost, env) if cost is not None else 0
        found.append(Segment(index, group.qualname, made, out, work))
    return found


def kept_bytes(plan: Plan, sizes: Sequence[int], found: Sequence[Segment], chosen: Collection[int]) -> int:
    """What forward leaves for backward with the ``chosen`` segments (group indices) recomputed."""
    total = sum(sizes)
    for segment in found:
        if segment.index in chosen:
            total -= segment.made_bytes - segment.output_bytes
    return total


def peak_bytes(
    plan: Plan, sizes: Sequence[int], found: Sequence[Segment], chosen: Collection[int], in_flight: int = 0
) -> int:
    """The estimated activation peak of a training step with the ``chosen`` segments recomputed (module doc);
    ``in_flight`` is the gradient backward holds besides (:func:`largest_output`)."""
    peak = kept_bytes(plan, sizes, found, chosen)
    before = 0  # kept by the steps before the current position
    position = 0
    for segment in found:
        group = plan.groups[segment.index]
        before += sum(sizes[position : group.start])
        position = group.start
        if segment.index in chosen:
            peak = max(peak, before + segment.made_bytes)
            before += segment.output_bytes
        else:
            before += segment.made_bytes
        position = group.stop
    return peak + in_flight


def choose(plan: Plan, env: Mapping[str, int], budget: int, float_bytes: int) -> SegmentPlan:
    """The segments to recompute so the estimated peak fits ``budget`` bytes, at little extra compute.

    Greedy: add the segment that lowers the estimate most per multiply-add recomputed (the kept bytes it frees
    break ties, then step order) until it fits; then drop, costliest first, any chosen segment the budget does
    not need. For a stack of alike blocks this is the cheapest choice; in general it is a heuristic.

    Raises:
        HndlError: E_PARAM when even recomputing every segment does not fit, naming the smallest budget that does.
    """
    sizes = step_bytes(plan, env, float_bytes)
    found = segments(plan, env, float_bytes)
    extra = largest_output(plan, env, float_bytes)
    smallest = peak_bytes(plan, sizes, found, {s.index for s in found}, extra)
    if budget < smallest:
        raise HndlError(
            Problem(
                "E_PARAM",
                f"graph '{plan.checked.graph.name}': an activation budget of {budget:,} bytes cannot be met: the smallest feasible budget is "
                f"{smallest:,} bytes (every subgraph use recomputed)",
                expected=f">= {smallest:,} bytes",
                actual=f"{budget:,} bytes",
                hint="raise the budget, use smaller dims, or put more of the graph into subgraphs (repeat) so "
                "there is more to recompute",
            )
        )
    chosen: set[int] = set()
    peak = peak_bytes(plan, sizes, found, chosen, extra)
    while peak > budget:
        best_score: tuple[float, float, int] | None = None
        best = -1
        for order, segment in enumerate(found):
            if segment.index in chosen:
                continue
            lower = peak - peak_bytes(plan, sizes, found, chosen | {segment.index}, extra)
            freed = segment.made_bytes - segment.output_bytes
            cost = max(segment.macs, 1)
            score = (lower / cost, freed / cost, -order)
            if best_score is None or score > best_score:
                best_score, best = score, segment.index
        chosen.add(best)  # the smallest budget fits, so while this one does not some segment is left
        peak = peak_bytes(plan, sizes, found, chosen, extra)
    for segment in sorted(found, key=lambda s: -s.macs):
        if segment.index in chosen and peak_bytes(plan, sizes, found, chosen - {segment.index}, extra) <= budget:
            chosen.discard(segment.index)
    by_index = {s.index: s for s in found}
    return SegmentPlan(
        frozenset(chosen), peak_bytes(plan, sizes, found, chosen, extra), sum(by_index[i].macs for i in chosen)
    )
