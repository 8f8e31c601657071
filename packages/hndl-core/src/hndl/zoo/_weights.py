"""Key maps between a reference implementation's ``state_dict`` and a zoo model's, and the one checked load.

A :class:`Rule` pairs a key template of the reference (``layer{stage}.{block}.{layer}.{tensor}``) with one or
more templates of hndl's (``nodes.n_layer{stage}.{block}.n_{layer}.{tensor}``), each with a layout. A field
(``{stage}``) stands for one dot-free name part and carries over from one side to the other; a field named twice
in a template must match the same text twice. Templates match in both directions, which is what lets a message
name the reference key hndl expected for a missing tensor, and suggest the closest expected key for one it
did not.

Layouts are the ways a reference stores a tensor differently: ``same``; ``transpose`` (transformers' GPT-2
``Conv1D`` holds ``[in, out]`` where ``torch.nn.Linear`` holds ``[out, in]``); ``rows i/n..j/n`` (one fused
reference tensor feeds several hndl tensors: ``torch.nn.MultiheadAttention``'s ``in_proj_weight`` holds the
queries' rows and then the keys' and values', which cross-attention keeps as ``q`` and ``kv``). A rule with no
hndl template drops a reference tensor that hndl computes instead (a causal-mask buffer).

Nothing here raises except :func:`load_reference_state_dict`, which raises once with every problem.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._errors import HndlError, Problem
from ..naming import suggestion

if TYPE_CHECKING:
    import torch

    from ..torch import GraphModule

__all__ = ["Rule", "Slot", "Target", "convert_state_dict", "load_reference_state_dict", "model_slots", "rule"]

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ROWS = re.compile(r"rows (\d+)/(\d+)\.\.(\d+)/(\d+)")


def _compile(template: str) -> re.Pattern[str]:
    """A template as a regular expression: literals escaped, each field one dot-free name part."""
    out: list[str] = []
    seen: set[str] = set()
    pos = 0
    for m in _FIELD.finditer(template):
        out.append(re.escape(template[pos : m.start()]))
        name = m.group(1)
        out.append(f"(?P={name})" if name in seen else f"(?P<{name}>[^.]+)")
        seen.add(name)
        pos = m.end()
    out.append(re.escape(template[pos:]))
    return re.compile("".join(out))


@dataclass(frozen=True)
class Target:
    """One hndl tensor a reference tensor (or a part of it) becomes, and how its layout differs."""

    template: str
    layout: str = "same"

    def __post_init__(self) -> None:
        if self.layout not in ("same", "transpose") and not _ROWS.fullmatch(self.layout):
            raise ValueError(f"unknown layout {self.layout!r}: same, transpose or 'rows i/n..j/n'")

    def rows(self, total: int) -> tuple[int, int] | None:
        """The row range this target takes of a reference tensor with ``total`` rows (None: all of it)."""
        m = _ROWS.fullmatch(self.layout)
        if m is None:
            return None
        a, n, b, d = map(int, m.groups())
        return total * a // n, total * b // d

    def expected_shape(self, reference: Sequence[int]) -> tuple[int, ...]:
        """The shape this target has when the reference tensor has shape ``reference``."""
        shape = tuple(reference)
        if self.layout == "transpose":
            return shape[::-1]
        span = self.rows(shape[0]) if shape else None
        if span is not None:
            return (span[1] - span[0], *shape[1:])
        return shape

    def convert(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.layout == "transpose":
            return tensor.t()
        span = self.rows(tensor.shape[0]) if tensor.dim() else None
        if span is not None:
            return tensor[span[0] : span[1]]
        return tensor


@dataclass(frozen=True)
class Rule:
    """A reference key template and the hndl tensors it becomes (none: a reference tensor hndl computes)."""

    reference: str
    targets: tuple[Target, ...] = ()
    _ref_re: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _hndl_re: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_ref_re", _compile(self.reference))
        object.__setattr__(self, "_hndl_re", tuple(_compile(t.template) for t in self.targets))

    def forward(self, key: str) -> list[tuple[str, Target]] | None:
        """The hndl keys ``key`` becomes, or None when the rule does not match it."""
        m = self._ref_re.fullmatch(key)
        if m is None:
            return None
        return [(t.template.format(**m.groupdict()), t) for t in self.targets]

    def backward(self, key: str) -> tuple[str, Target] | None:
        """The reference key (and the target) that gives the hndl key ``key``, or None."""
        for target, pattern in zip(self.targets, self._hndl_re, strict=True):
            m = pattern.fullmatch(key)
            if m is not None:
                return self.reference.format(**m.groupdict()), target
        return None


def rule(reference: str, *targets: str | tuple[str, str]) -> Rule:
    """Shorthand: ``rule("fc.{t}", "nodes.n_fc.{t}")``; a target ``(template, layout)`` changes the layout."""
    return Rule(reference, tuple(Target(t) if isinstance(t, str) else Target(*t) for t in targets))


def _reference_key(rules: Sequence[Rule], key: str) -> tuple[str, Target] | None:
    for r in rules:
        found = r.backward(key)
        if found is not None:
            return found
    return None


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def convert_state_dict(
    rules: Sequence[Rule], reference: Mapping[str, Any], own: Mapping[str, Slot], entry: str
) -> tuple[dict[str, Any], list[Problem]]:
    """The reference's tensors under hndl's names, and every problem found.

    Args:
        rules: the entry's key map.
        reference: the reference model's ``state_dict()``.
        own: hndl's state_dict keys, each with the shape it must have and the node and op that own it.
        entry: the zoo entry's name, for messages.

    Returns:
        ``(converted, problems)``: a tensor (a view of the reference's) for every hndl key when there is no
        problem; otherwise the problems, one per missing, unexpected or mis-shaped key.
    """
    problems: list[Problem] = []
    converted: dict[str, Any] = {}
    wanted: dict[str, str] = {}  # reference key -> the hndl key it must give
    for name in own:
        found = _reference_key(rules, name)
        if found is not None:
            wanted.setdefault(found[0], name)
    for key, tensor in reference.items():
        targets = next((t for r in rules if (t := r.forward(key)) is not None), None)
        if targets is None or any(name not in own for name, _ in targets):
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"reference key {key!r} has no place in zoo:{entry}",
                    expected=f"one of the {len(wanted)} keys of the reference",
                    actual=key,
                    hint=suggestion(key, [k for k in wanted if k not in reference])
                    or "is the state_dict from the reference implementation this entry names?",
                )
            )
            continue
        if not _is_tensor(tensor):
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"reference key {key!r} holds {type(tensor).__name__}, not a tensor",
                    expected="torch.Tensor",
                    actual=type(tensor).__name__,
                )
            )
            continue
        shape = tuple(tensor.shape)
        for name, target in targets:
            slot = own[name]
            got = target.expected_shape(shape)
            if got != slot.shape:
                layout = "" if target.layout == "same" else f", read as {target.layout}"
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"reference key {key!r} has shape {list(shape)}{layout}; {name!r} needs {list(slot.shape)}",
                        node=slot.node,
                        op=slot.op,
                        expected=list(slot.shape),
                        actual=list(got),
                        hint="was the reference made with the same configuration (classes, width, depth, vocabulary)?",
                    )
                )
            else:
                converted[name] = target.convert(tensor)
    for name, slot in own.items():
        found = _reference_key(rules, name)
        ref_key = found[0] if found else None
        if name in converted or (ref_key is not None and ref_key in reference):
            continue  # loaded, or present and reported as mis-shaped above
        problems.append(
            Problem(
                "E_PARAMS",
                f"{name!r} has no tensor in the reference state_dict"
                + (f": expected reference key {ref_key!r}" if ref_key else ""),
                node=slot.node,
                op=slot.op,
                expected=ref_key or name,
                actual="missing",
                hint=suggestion(ref_key, [k for k in reference if k not in wanted]) if ref_key else None,
            )
        )
    return converted, problems


@dataclass(frozen=True)
class Slot:
    """What one hndl state_dict key must be: its shape, and the node and op that own it (for messages)."""

    shape: tuple[int, ...]
    node: str | None = None
    op: str | None = None


def model_slots(model: GraphModule) -> dict[str, Slot]:
    """Every state_dict key of ``model`` (tied names included) with its shape and owner."""
    built = model.build_state.tensors
    slots = {}
    for name, tensor in model.state_dict().items():
        owner = built.get(name)
        slots[name] = Slot(tuple(tensor.shape), owner.node if owner else None, owner.op if owner else None)
    return slots


def load_reference_state_dict(
    model: GraphModule, rules: Sequence[Rule], reference: Mapping[str, Any], entry: str
) -> None:
    """Load ``reference`` into ``model`` through ``rules``: all of it, or nothing (one E_PARAMS listing all)."""
    converted, problems = convert_state_dict(rules, reference, model_slots(model), entry)
    if problems:
        raise HndlError(problems, title=f"reference weights for zoo:{entry}")
    import torch

    with torch.no_grad():
        model.load_state_dict(converted, strict=True)
