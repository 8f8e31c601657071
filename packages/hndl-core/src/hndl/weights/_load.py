"""The checked load: plan every key of a checkpoint against a built model, report every problem, then copy.

Loading runs in two phases. The plan reads only the checkpoint's keys, shapes and dtypes: each key goes through
the first rule that matches it (a key no rule matches keeps its name), and each model tensor must be filled
exactly once, with the shape it was built with, from a dtype it can hold. Every layout is also run once on meta
tensors, so a layout whose values would not match its declared shape is caught here. Tied names (one tensor
registered under several keys) are one tensor: filled from any of their keys, and when the checkpoint holds
several of them, those must be equal (the only values read before copying). Only when the plan has no problem
does the copy phase read each value, convert it and ``copy_`` it into the live tensor under ``no_grad``: the
model keeps its tensors, devices and dtypes, as ``torch.nn.Module.load_state_dict`` does, and the runtime sees
no change of registered state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .._errors import LIST_LIMIT, HndlError, Problem, clip, echo, echo_list
from ..naming import dtype_name, excerpt, suggestion
from ..torch import GraphModule
from ._layouts import Layout, Same, shapes_text
from ._node_keys import NodePathRule, node_path_rules
from ._report import Loaded, LoadReport
from ._rules import Rule, RuleMatch, Target, as_rules
from ._sources import Checkpoint, open_checkpoint

__all__ = ["check_state_dict", "convert_state_dict", "load_state_dict"]

# A key no rule matches keeps its name: the last rule of every load.
_KEEP_NAME = Rule(("{key*}",), (Target("{key*}"),))

_SHAPE_HINT = "was the checkpoint made with the same configuration (classes, width, depth, vocabulary)?"


@dataclass
class _Slot:
    """A model key: its live tensor, its owner, and the first key of its tie group (itself when untied)."""

    name: str
    tensor: torch.Tensor
    node: str | None
    op: str | None
    group: str


@dataclass
class _Fill:
    """One rule application the plan keeps: checkpoint keys read, model keys filled."""

    match: RuleMatch
    duplicate_of: dict[str, str] = field(default_factory=dict)  # target -> the tied key filled by another fill


@dataclass
class _Plan:
    checkpoint: Checkpoint
    slots: dict[str, _Slot]
    fills: list[_Fill]
    dropped: list[str]
    missing: list[str]
    unexpected: list[str]


def _slots(model: GraphModule) -> dict[str, _Slot]:
    built = model.build_state.tensors
    first: dict[int, str] = {}
    slots = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        owner = built.get(name)
        group = first.setdefault(id(tensor), name)
        slots[name] = _Slot(name, tensor, owner.node if owner else None, owner.op if owner else None, group)
    return slots


def _match(rules: Sequence[Rule], key: str) -> RuleMatch:
    for r in rules:
        found = r.forward(key)
        if found is not None:
            return found
    return RuleMatch(_KEEP_NAME, (key,), ((key, Same()),))


def _candidates(rules: Sequence[Rule], name: str) -> list[str]:
    """The checkpoint keys that would fill model key ``name`` (each rule's, first rule first; the name itself when
    no rule names one). A joined rule is named by its first source. A key is offered only when the rules, run
    forward, would really take it to ``name`` (a broad rule earlier in the list may catch it first)."""
    out: list[str] = []
    for r in rules:
        if isinstance(r, NodePathRule):
            continue  # the old spelling loads, but is never the key asked for
        sources = r.backward(name)
        if sources is None or sources[0] in out:
            continue
        if any(target == name for target, _ in _match(rules, sources[0]).targets):
            out.append(sources[0])
    return out or [name]


def _quoted(keys: Sequence[str]) -> str:
    if len(keys) > LIST_LIMIT:
        return echo_list(keys)
    shown = [echo(k) for k in keys]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " or " + shown[-1]


def _keys_text(keys: Sequence[str]) -> str:
    return f"checkpoint key {echo(keys[0])}" if len(keys) == 1 else "checkpoint keys " + echo_list(keys)


def _copyable(source: torch.dtype, target: torch.dtype) -> bool:
    """Whether copying ``source`` values into a ``target`` tensor keeps them (no truncation to int or bool)."""
    if target == torch.bool:
        return source == torch.bool
    if not (target.is_floating_point or target.is_complex):
        return not (source.is_floating_point or source.is_complex)
    return target.is_complex or not source.is_complex


def _plan(
    model: Any, source: Any, rules: Any, strict: bool, into: str | None, skeleton: bool = False
) -> tuple[_Plan, list[Problem], str]:
    if not isinstance(model, GraphModule):
        raise HndlError(
            Problem(
                "E_PARAMS",
                f"load_state_dict loads into a built hndl model, not {type(model).__name__}",
                expected="hndl.GraphModule (what hndl.build returns)",
                actual=type(model).__name__,
                hint="a plain torch module has its own module.load_state_dict"
                if isinstance(model, torch.nn.Module)
                else None,
            )
        )
    # A file saved before its nodes had a module_path (nodes.n_...) still loads: those rules come last.
    parsed = (*as_rules(rules), *node_path_rules(model))
    if not isinstance(strict, bool):
        raise HndlError(Problem("E_PARAMS", "strict must be True or False", actual=excerpt(strict)))
    into = into or f"graph '{model.graph.name}'"
    slots = _slots(model)
    checkpoint = source if isinstance(source, Checkpoint) else open_checkpoint(source)
    try:
        plan, problems = _plan_keys(checkpoint, slots, parsed, strict, into, skeleton)
    except BaseException:
        checkpoint.__exit__(None, None, None)
        raise
    return plan, problems, into


def _plan_keys(
    checkpoint: Checkpoint,
    slots: dict[str, _Slot],
    rules: tuple[Rule, ...],
    strict: bool,
    into: str,
    skeleton: bool = False,
) -> tuple[_Plan, list[Problem]]:
    entries = checkpoint.entries
    problems: list[Problem] = []
    fills: list[_Fill] = []
    reader: dict[str, RuleMatch] = {}  # checkpoint key -> the rule application that reads it
    filled_by: dict[str, _Fill] = {}  # model key -> the fill that fills it
    dropped: list[str] = []
    unplaced: list[tuple[str, str | None]] = []  # checkpoint key, the model key a rule would have made it
    for key in entries:
        m = _match(rules, key)
        if key in reader:
            first = reader[key]
            if first.rule is not m.rule or first.sources != m.sources:
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"checkpoint key {echo(key)} is read by two rules: '{first.rule}' and '{m.rule}'",
                        actual=clip(key),
                        hint="each checkpoint key may fill one place: narrow one rule's template",
                    )
                )
            continue
        clash = [s for s in m.sources if s in reader]
        if clash:
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"checkpoint key {echo(clash[0])} is read by two rules: '{reader[clash[0]].rule}' and '{m.rule}'",
                    actual=clip(clash[0]),
                    hint="each checkpoint key may fill one place: narrow one rule's template",
                )
            )
            continue
        for s in m.sources:
            reader[s] = m
        if m.rule.drops:
            dropped.extend(s for s in m.sources if s in entries)
            continue
        absent = [s for s in m.sources if s not in entries]
        if absent:
            if strict:
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"rule '{m.rule}' joins {_keys_text(m.sources)}, but the checkpoint lacks {_quoted(absent)}",
                        expected=list(m.sources),
                        actual=[s for s in m.sources if s in entries],
                    )
                )
            else:
                unplaced.extend((s, None) for s in m.sources if s in entries)
            continue
        outside = [t for t, _ in m.targets if t not in slots]
        if outside:
            by_rule = m.rule is not _KEEP_NAME
            unplaced.extend((s, outside[0] if by_rule else None) for s in m.sources)
            continue
        fill = _Fill(m)
        for target, _ in m.targets:
            other = filled_by.get(target)
            if other is not None:
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"{target!r} would be filled twice: from {_keys_text(other.match.sources)} "
                        f"and from {_keys_text(m.sources)}",
                        node=slots[target].node,
                        op=slots[target].op,
                        actual=[*other.match.sources, *m.sources],
                        hint="the checkpoint holds the same tensor under two names: drop one with a rule",
                    )
                )
            filled_by.setdefault(target, fill)
        fills.append(fill)
        problems += _check_fill(fill, entries, slots, skeleton)

    # Tied names are one tensor: a group is filled when any of its names is; a second fill must be equal.
    groups: dict[str, list[str]] = {}
    for name, slot in slots.items():
        groups.setdefault(slot.group, []).append(name)
    group_fills: dict[str, list[tuple[str, _Fill]]] = {}
    for name, fill in filled_by.items():
        group_fills.setdefault(slots[name].group, []).append((name, fill))
    missing: list[str] = []
    candidates_of_missing: list[str] = []
    for group, names in groups.items():
        if group in group_fills:
            continue
        missing.extend(names)
        candidates = [c for n in names for c in _candidates(rules, n)]
        candidates_of_missing += [c for c in candidates if c not in entries]
        if strict:
            slot = slots[group]
            tied = f" (tied: {', '.join(names[1:])})" if len(names) > 1 else ""
            spare = [k for k, _ in unplaced]
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"{group!r}{tied} has no tensor in the checkpoint: expected {_keys_text(candidates[:1])}"
                    + (f" or {_quoted(candidates[1:])}" if len(candidates) > 1 else ""),
                    node=slot.node,
                    op=slot.op,
                    expected=candidates[0],
                    actual="missing",
                    hint=suggestion(candidates[0], spare, keys=True) if spare else None,
                )
            )
    unexpected: list[str] = []
    wanted = len(groups)
    for key, renamed in unplaced:
        unexpected.append(key)
        if not strict:
            continue
        entry = entries[key]
        hint = suggestion(key, candidates_of_missing, keys=True) or (
            f"a rule makes it {echo(renamed)}, which the model does not have" if renamed else None
        )
        problems.append(
            Problem(
                "E_PARAMS",
                f"checkpoint key {echo(key)} has no place in {into}",
                expected=f"a key of one of the model's {wanted} tensors",
                actual=clip(key) if entry.dtype is not None else f"{clip(key)} ({entry.kind})",
                hint=hint or "map it with a rule, drop it with a rule, or load with strict=False",
            )
        )
    if not problems and not skeleton:  # (values: read for the real load only)
        problems += _check_ties(group_fills, entries, slots)
    plan = _Plan(checkpoint, slots, fills, dropped, [] if strict else missing, [] if strict else unexpected)
    return plan, problems


def _check_fill(fill: _Fill, entries: dict[str, Any], slots: dict[str, _Slot], skeleton: bool) -> list[Problem]:
    """Shape, dtype and layout problems of one rule application, from the checkpoint's metadata alone (a
    ``skeleton`` model is on the meta device on purpose: checked before the real one is built)."""
    m = fill.match
    problems: list[Problem] = []
    sources = [entries[s] for s in m.sources]
    for key, entry in zip(m.sources, sources, strict=True):
        if entry.refusal is not None:
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"checkpoint key {echo(key)} {entry.refusal}",
                    node=slots[m.targets[0][0]].node,
                    op=slots[m.targets[0][0]].op,
                    expected="a dense torch.Tensor",
                    actual=entry.kind,
                )
            )
    if problems:
        return problems
    shapes = [e.shape for e in sources]
    for target, layout in m.targets:
        slot = slots[target]
        read_as = "" if isinstance(layout, Same) else f", read as {layout}"
        have = f"has shape {shapes_text(shapes)}" if len(shapes) == 1 else f"have shapes {shapes_text(shapes)}"
        try:
            got = tuple(layout.expected_shape(*shapes))
        except ValueError as exc:
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"{_keys_text(m.sources)} (shape {shapes_text(shapes)}) cannot be read as {layout}: {exc}",
                    node=slot.node,
                    op=slot.op,
                    expected=f"{list(slot.tensor.shape)} for {target!r}",
                    actual=shapes_text(shapes),
                )
            )
            continue
        want = tuple(slot.tensor.shape)
        if got != want:
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"{_keys_text(m.sources)} {have}{read_as}; {target!r} needs {list(want)}",
                    node=slot.node,
                    op=slot.op,
                    expected=list(want),
                    actual=list(got),
                    hint=_SHAPE_HINT,
                )
            )
            continue
        for key, entry in zip(m.sources, sources, strict=True):
            if not _copyable(entry.dtype, slot.tensor.dtype):
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"checkpoint key {echo(key)} holds {dtype_name(entry.dtype)} values; {target!r} is "
                        f"{dtype_name(slot.tensor.dtype)}, which cannot hold them unchanged",
                        node=slot.node,
                        op=slot.op,
                        expected=f"a dtype {dtype_name(slot.tensor.dtype)} holds",
                        actual=dtype_name(entry.dtype),
                    )
                )
        if slot.tensor.device.type == "meta" and not skeleton:
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"{target!r} is on the meta device: copying into it would store nothing",
                    node=slot.node,
                    op=slot.op,
                    hint="build the model on a real device (not under torch.device('meta'))",
                )
            )
        problems += _dry_run(m.sources, sources, target, layout, got, slot)
    return problems


def _dry_run(
    keys: Sequence[str], sources: Sequence[Any], target: str, layout: Layout, shape: tuple[int, ...], slot: _Slot
) -> list[Problem]:
    """Run the layout on meta tensors: its values must come out in the shape it declared."""
    fakes = [torch.empty(e.shape, dtype=e.dtype, device="meta") for e in sources]
    try:
        out = layout.convert(*fakes)
        made = tuple(out.shape) if isinstance(out, torch.Tensor) else None
    except Exception as exc:  # a user's layout may fail any way; its error is shown, not raised
        made, reason = None, f"{type(exc).__name__}: {exc}"
    else:
        reason = f"returned {type(out).__name__}" if made is None else f"returned shape {list(made)}"
    if made == shape:
        return []
    return [
        Problem(
            "E_PARAMS",
            f"layout {layout} ({type(layout).__name__}) of {_keys_text(keys)} -> {target!r} declares shape "
            f"{list(shape)}, but its convert {reason}",
            node=slot.node,
            op=slot.op,
            expected=list(shape),
            actual=excerpt(reason, 120),
            hint="a layout's convert must return a tensor of the shape its expected_shape says",
        )
    ]


def _check_ties(
    group_fills: dict[str, list[tuple[str, _Fill]]], entries: dict[str, Any], slots: dict[str, _Slot]
) -> list[Problem]:
    """A tied tensor filled from several checkpoint keys: the values must be equal; the later fills are skipped."""
    problems: list[Problem] = []
    for fills in group_fills.values():
        if len(fills) < 2:
            continue
        first_name, first = fills[0]
        reference = _value(first, first_name, entries)
        for name, fill in fills[1:]:
            value = _value(fill, name, entries)
            if value.shape != reference.shape or not torch.equal(value.to(reference.dtype), reference):
                slot = slots[name]
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"{first_name!r} and {name!r} are one tied tensor, but {_keys_text(first.match.sources)} "
                        f"and {_keys_text(fill.match.sources)} hold different values",
                        node=slot.node,
                        op=slot.op,
                        hint="the model's spec ties them; drop one of the keys with a rule to keep the other",
                    )
                )
            fill.duplicate_of[name] = first_name
    return problems


def _value(fill: _Fill, target: str, entries: dict[str, Any]) -> torch.Tensor:
    layout = dict(fill.match.targets)[target]
    out: torch.Tensor = layout.convert(*(entries[s].read() for s in fill.match.sources))
    return out


def _order(plan: _Plan) -> list[_Fill]:
    """Fills in file order, so a sharded checkpoint is read one shard after the other."""
    files = {f: i for i, f in enumerate(plan.checkpoint.files)}
    entries = plan.checkpoint.entries
    return sorted(plan.fills, key=lambda f: files.get(entries[f.match.sources[0]].file or "", 0))


def _storage(tensor: torch.Tensor) -> tuple[str, int] | None:
    """Which memory ``tensor`` lives in (device and storage address), or None when it holds none."""
    if tensor.numel() == 0 or tensor.device.type == "meta":
        return None
    return str(tensor.device), tensor.untyped_storage().data_ptr()


def _aliased_sources(plan: _Plan, fills: list[_Fill]) -> dict[str, torch.Tensor]:
    """Copies of the source tensors that share memory with a tensor the copy writes, taken before anything is
    written: loading a model's own ``state_dict`` with rules that swap two of its tensors must read both before it
    writes either. A source read only by the fill that writes its own memory, as the very same view, unchanged (``same``,
    one source, one target), needs no copy: ``copy_`` of a tensor into itself is the plain reload."""
    writers: dict[tuple[str, int], list[tuple[int, str]]] = {}
    for i, fill in enumerate(fills):
        for target, _ in fill.match.targets:
            if target not in fill.duplicate_of:
                where = _storage(plan.slots[target].tensor)
                if where is not None:
                    writers.setdefault(where, []).append((i, target))
    kept: dict[str, torch.Tensor] = {}
    if not writers:
        return kept
    for i, fill in enumerate(fills):
        m = fill.match
        plain = len(m.sources) == 1 and len(m.targets) == 1 and isinstance(m.targets[0][1], Same)
        for source in m.sources:
            entry = plan.checkpoint.entries[source]
            if entry.file is not None:  # read from a file: fresh memory
                continue
            value = entry.read()
            where = _storage(value) if isinstance(value, torch.Tensor) else None
            if where is None or where not in writers:
                continue
            written = plan.slots[m.targets[0][0]].tensor
            same_view = value.data_ptr() == written.data_ptr() and value.stride() == written.stride()
            if plain and same_view and writers[where] == [(i, m.targets[0][0])]:
                continue
            kept[source] = value.detach().clone()
    return kept


def _report(plan: _Plan, fills: list[_Fill], into: str) -> LoadReport:
    groups: dict[str, list[str]] = {}
    for name, slot in plan.slots.items():
        groups.setdefault(slot.group, []).append(name)
    named = {t for f in fills for t, _ in f.match.targets}
    loaded = []
    entries = plan.checkpoint.entries
    for fill in fills:
        m = fill.match
        tied = tuple(
            n
            for t, _ in m.targets
            if t not in fill.duplicate_of
            for n in groups[plan.slots[t].group]
            if n != t and n not in named
        )
        have = {dtype_name(entries[s].dtype) for s in m.sources}
        want = {dtype_name(plan.slots[t].tensor.dtype) for t, _ in m.targets}
        dtype = None if have == want else f"{', '.join(sorted(have))} -> {', '.join(sorted(want))}"
        loaded.append(
            Loaded(
                m.sources,
                tuple((t, str(layout)) for t, layout in m.targets),
                tied,
                dtype,
                duplicate=bool(fill.duplicate_of),
            )
        )
    return LoadReport(
        into,
        plan.checkpoint.name,
        tuple(loaded),
        tuple(plan.dropped),
        tuple(plan.missing),
        tuple(plan.unexpected),
    )


def load_state_dict(
    model: GraphModule,
    source: Any,
    rules: Any = (),
    strict: bool = True,
    *,
    into: str | None = None,
    title: str | None = None,
) -> LoadReport:
    """See :func:`hndl.load_state_dict`; ``into`` and ``title`` name the model in messages (the zoo's)."""
    plan, problems, into = _plan(model, source, rules, strict, into)
    with plan.checkpoint:
        if problems:
            raise HndlError(problems, title=title or f"weights from {plan.checkpoint.name} for {into}")
        fills = _order(plan)
        kept = _aliased_sources(plan, fills)
        with torch.no_grad():
            for fill in fills:
                values = [kept[s] if s in kept else plan.checkpoint.entries[s].read() for s in fill.match.sources]
                for target, layout in fill.match.targets:
                    if target not in fill.duplicate_of:
                        plan.slots[target].tensor.copy_(layout.convert(*values))
                del values  # one rule application's tensors at a time
        return _report(plan, fills, into)


def check_state_dict(
    model: GraphModule, source: Any, rules: Any = (), strict: bool = True, *, into: str, title: str
) -> None:
    """Plan a load into ``model``, a build on the meta device, and raise what :func:`load_state_dict` would refuse
    (but for tied keys' values, which only the real load reads): the checkpoint is checked against a model that
    takes no memory, before the real one is built."""
    plan, problems, into = _plan(model, source, rules, strict, into, skeleton=True)
    with plan.checkpoint:
        if problems:
            raise HndlError(problems, title=title)


def convert_state_dict(
    model: GraphModule, source: Any, rules: Any = (), strict: bool = True
) -> dict[str, torch.Tensor]:
    """See :func:`hndl.weights.convert_state_dict`."""
    plan, problems, into = _plan(model, source, rules, strict, None)
    with plan.checkpoint:
        if problems:
            raise HndlError(problems, title=f"weights from {plan.checkpoint.name} for {into}")
        out: dict[str, torch.Tensor] = {}
        groups: dict[str, list[str]] = {}
        for name, slot in plan.slots.items():
            groups.setdefault(slot.group, []).append(name)
        for fill in _order(plan):
            values = [plan.checkpoint.entries[s].read() for s in fill.match.sources]
            for target, layout in fill.match.targets:
                if target in fill.duplicate_of:
                    continue
                value = layout.convert(*values)
                for name in groups[plan.slots[target].group]:
                    out.setdefault(name, value)
        return out
