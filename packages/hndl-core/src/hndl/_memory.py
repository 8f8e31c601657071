"""Training memory from a plan alone: the activations a step keeps for backward, and which segments to recompute.

Each leaf step's outputs are sized from their checked types (``_costs``) under the caller's dims. A value is
*kept* for backward when the op that made it keeps its output, or an op that reads it keeps its inputs
(:mod:`hndl._autograd_facts`: a linear layer keeps its input, ReLU its output, an addition nothing); a view, an input
passed on or a registered tensor is counted where its memory was made. A layer also keeps what it makes inside
(attention's queries, keys and values; dropout's mask). A *segment* is one use of a subgraph (a
:class:`~hndl.Group`, one repetition of a repeated one); recomputing it (activation checkpointing) keeps only
its inputs, and what later steps keep of its outputs; backward makes its inner activations again, one segment
at a time. The estimated activation peak of a training step is the largest of

- the end of forward: what is kept, and the graph's outputs (the loss reads them; nothing may keep them);
- the start of backward: what is kept, and the largest gradient one step's backward holds (its outputs'
  gradients and its weights' gradient before it is added to ``.grad``: a language model head's, first of all);
- each recomputed segment's backward: what steps before it keep, what it keeps inside, and its largest step
  gradient (what comes after it has been freed by then).

Recomputing a segment never raises what forward keeps. No torch here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from . import _autograd_facts
from ._costs import DTYPE_BYTES, macs, numel
from ._dims import Dim, DimError, evaluate
from ._errors import HndlError, Problem
from ._plan import Group, Plan, Step

__all__ = ["Activations", "Segment", "SegmentPlan", "activations", "choose", "peak_bytes", "segments"]

#: Ops whose outputs are counted where they were made, not again: they share memory with something else.
_SHARED = ("view", "input", "state")

#: A value's memory: (step index, output index) of the step that made it.
Root = tuple[int, int]


@dataclass(frozen=True)
class Segment:
    """A subgraph use that can be recomputed: ``plan.groups[index]``, what recomputing it frees and costs."""

    index: int
    qualname: str
    made_bytes: int  # what its steps keep for backward when it is not recomputed
    macs: int  # the multiply-adds of one more forward of it (the cost of recomputing it)


@dataclass(frozen=True)
class SegmentPlan:
    """What :func:`choose` picked: group indices, the estimated peak and the multiply-adds recomputed."""

    chosen: frozenset[int]
    peak_bytes: int
    recompute_macs: int


@dataclass(frozen=True)
class Activations:
    """A plan's activation sizes at one set of dims: what :func:`peak_bytes` adds up.

    Attributes:
        sizes: the bytes of each value's memory, by root (0 for an integer or boolean value: no gradient).
        roots: each value id's root (``None`` for a graph input or a registered tensor: not an activation).
        inner: per step, the bytes its layer keeps inside for backward.
        gradients: per step, the bytes of gradient its backward holds at once (its outputs', its weights').
    """

    sizes: Mapping[Root, int]
    roots: Mapping[str, Root | None]
    inner: Sequence[int]
    gradients: Sequence[int]

    def kept(self, plan: Plan, steps: range | Collection[int], chosen: Sequence[Group]) -> tuple[set[Root], int]:
        """The roots kept for backward by ``steps`` with the ``chosen`` segments recomputed, and the bytes the
        steps' layers keep inside."""
        inside = {i for g in chosen for i in range(g.start, g.stop)}
        kept: set[Root | None] = set()
        inner = 0
        for i in steps:
            if i in inside:
                continue
            step = plan.steps[i]
            mode = _autograd_facts.saves(step.node)
            if mode in ("output", "both"):
                kept.update(self.roots.get(v) for v in step.outputs)
            if mode in ("inputs", "both"):
                kept.update(self.roots.get(v) for v in step.inputs)
            inner += self.inner[i]
        for group in chosen:  # a checkpoint keeps its segment's inputs
            kept.update(self.roots.get(v) for v in group.inputs)
        kept.discard(None)
        return kept, inner  # type: ignore[return-value]

    def bytes_of(self, roots: Collection[Root]) -> int:
        return sum(self.sizes[r] for r in roots)


def _count(count: Dim | None, env: Mapping[str, int]) -> int | None:
    """``count`` evaluated under ``env``; None when a symbol is unbound."""
    try:
        return evaluate(count, env) if count is not None else None
    except (DimError, ZeroDivisionError):
        return None


def _unknown(step: Step, env: Mapping[str, int]) -> HndlError:
    return HndlError(
        step.node.problem(
            "E_PARAM",
            "the size of this node's output is unknown under the dims given, so its activation memory is too",
            expected="every symbol of the inputs bound",
            actual=", ".join(f"{k}={v}" for k, v in env.items()) or "no dims",
            hint="give each dim of the graph's inputs: model.checkpointing(budget=..., B=8, T=512)",
        )
    )


def _step_bytes(step: Step, env: Mapping[str, int], float_bytes: int, shared: bool = False) -> list[int]:
    """The bytes of each output of ``step`` (0 for an integer or boolean one, and for one that shares another
    value's memory unless ``shared``)."""
    node = step.node
    if node.opdef.returns in _SHARED and not shared:
        return [0] * len(step.outputs)
    sizes = []
    for t in node.out_types:
        if t.dtype not in ("float", "any") and not t.dtype.startswith(("float", "bfloat", "complex")):
            sizes.append(0)  # an integer or boolean value (indices, a mask) carries no gradient
            continue
        elements = _count(numel(t.shape), env)
        if elements is None:
            raise _unknown(step, env)
        sizes.append(elements * (float_bytes if t.dtype in ("float", "any") else DTYPE_BYTES.get(t.dtype, 4)))
    return sizes


def _passes_on(step: Step) -> bool:
    """Whether ``step``'s output is (a view of) its first input's memory: a view, or a layer that may return its
    input as it is (dropout in evaluation, at ``p`` 0, identity)."""
    returns = step.node.opdef.returns
    if returns == "view":
        return True
    return returns == "input" and not (step.node.op == "dropout" and step.node.params.get("p"))


def activations(
    plan: Plan, env: Mapping[str, int], float_bytes: int, weights: Sequence[int] | None = None
) -> Activations:
    """The sizes :func:`peak_bytes` needs at ``env``; ``weights``: per step, the bytes of its trainable
    parameters (its weights' gradient), none when not given.

    Raises:
        HndlError: E_PARAM naming the first node whose output size the dims leave unknown.
    """
    sizes: dict[Root, int] = {}
    roots: dict[str, Root | None] = dict.fromkeys(plan.input_ids)
    inner: list[int] = []
    gradients: list[int] = []
    for i, step in enumerate(plan.steps):
        full = _step_bytes(step, env, float_bytes, shared=True)
        returns = step.node.opdef.returns
        for j, value in enumerate(step.outputs):
            if returns == "state":
                roots[value] = None
            elif _passes_on(step) and step.inputs:
                roots[value] = roots.get(step.inputs[0])
            else:
                roots[value] = (i, j)
                sizes[(i, j)] = full[j]
        held = _autograd_facts.inner(step.node)
        if held is None:
            raise _unknown(step, env)
        total = 0
        for count, dtype in held:
            elements = _count(count, env)
            if elements is None:
                raise _unknown(step, env)
            total += elements * (float_bytes if dtype == "float" else DTYPE_BYTES.get(dtype, 4))
        inner.append(total)
        # Its backward holds its outputs' gradients and makes its inputs', its weights' and those of what its
        # layer made inside from them.
        reads = sum(sizes.get(r, 0) for r in {roots.get(v) for v in step.inputs} if r is not None)
        if step.node.op in _autograd_facts.PASSES_GRADIENT:
            reads = 0  # its inputs' gradients are its output's, or views of it
        gradients.append(sum(full) + reads + total + (weights[i] if weights is not None else 0))
    return Activations(sizes, roots, inner, gradients)


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
    plan: Plan, acts: Activations, env: Mapping[str, int], indices: Collection[int] | None = None
) -> list[Segment]:
    """The outermost of the groups ``indices`` (all groups when None), each with what it keeps and its
    recompute cost: the segments a budget may choose from."""
    found = []
    for index in outermost(plan, range(len(plan.groups)) if indices is None else indices):
        group = plan.groups[index]
        made = _made(plan, acts, group)
        work = 0
        for position in range(group.start, group.stop):
            cost = macs(plan.steps[position].node)
            work += evaluate(cost, env) if cost is not None else 0
        found.append(Segment(index, group.qualname, made, work))
    return found


def _made(plan: Plan, acts: Activations, group: Group) -> int:
    """What ``group``'s steps keep of the values made inside it, and inside their layers, when it runs plainly."""
    roots, inner = acts.kept(plan, range(group.start, group.stop), ())
    return acts.bytes_of({r for r in roots if group.start <= r[0] < group.stop}) + inner


def peak_bytes(plan: Plan, acts: Activations, chosen: Collection[int] = ()) -> int:
    """The estimated activation peak of a training step with the groups ``chosen`` recomputed (module doc)."""
    groups = [plan.groups[i] for i in outermost(plan, chosen)]
    roots, inner = acts.kept(plan, range(len(plan.steps)), groups)
    kept = acts.bytes_of(roots) + inner
    outputs = {acts.roots.get(v) for v in plan.output_ids} - set(roots) - {None}
    peak = kept + acts.bytes_of(outputs)  # type: ignore[arg-type]
    # What the steps up to each position keep (values they made, their layers' insides): backward reaches a
    # step when everything after it has been freed.
    inside = {i for g in groups for i in range(g.start, g.stop)}
    by_step = [0 if i in inside else acts.inner[i] for i in range(len(plan.steps))]
    for root in roots:
        by_step[root[0]] += acts.sizes[root]
    before = [0]
    for size in by_step:
        before.append(before[-1] + size)
    for i, gradient in enumerate(acts.gradients):
        if i not in inside:
            peak = max(peak, before[i + 1] + gradient)
    for group in groups:
        held = before[group.start] + _made(plan, acts, group)
        # Besides its steps' gradients, the gradient that came in at the segment's outputs: a residual path
        # holds it until the branch beside it has run.
        incoming = acts.bytes_of({r for r in (acts.roots.get(v) for v in group.outputs) if r is not None})
        peak = max(peak, held + incoming + max(acts.gradients[group.start : group.stop], default=0))
    return peak


def choose(
    plan: Plan, env: Mapping[str, int], budget: int, float_bytes: int, weights: Sequence[int] | None = None
) -> SegmentPlan:
    """The segments to recompute so the estimated peak fits ``budget`` bytes, at little extra compute.

    Greedy: add the segment that lowers the estimate most per multiply-add recomputed (what it keeps breaks
    ties, then step order) until it fits; then drop, costliest first, any chosen segment the budget does not
    need. For a stack of alike blocks this is the cheapest choice; in general it is a heuristic.

    Raises:
        HndlError: E_PARAM when even recomputing every segment does not fit, naming the smallest budget that does.
    """
    acts = activations(plan, env, float_bytes, weights)
    found = segments(plan, acts, env)
    smallest = peak_bytes(plan, acts, {s.index for s in found})
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
    peak = peak_bytes(plan, acts, chosen)
    while peak > budget:
        best_score: tuple[float, float, int] | None = None
        best = -1
        for order, segment in enumerate(found):
            if segment.index in chosen:
                continue
            lower = peak - peak_bytes(plan, acts, chosen | {segment.index})
            cost = max(segment.macs, 1)
            score = (lower / cost, segment.made_bytes / cost, -order)
            if best_score is None or score > best_score:
                best_score, best = score, segment.index
        if best < 0:
            break
        chosen.add(best)
        peak = peak_bytes(plan, acts, chosen)
    for segment in sorted(found, key=lambda s: -s.macs):
        if segment.index in chosen and peak_bytes(plan, acts, chosen - {segment.index}) <= budget:
            chosen.discard(segment.index)
    by_index = {s.index: s for s in found}
    return SegmentPlan(frozenset(chosen), peak_bytes(plan, acts, chosen), sum(by_index[i].macs for i in chosen))
