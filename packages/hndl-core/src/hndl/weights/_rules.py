"""Rules: how checkpoint keys become a model's keys, as templates that run both ways.

A :class:`Rule` pairs one checkpoint key template (``h.{i}.attn.c_attn.weight``), or several that are joined
into one tensor, with the model key templates they become, each with a :class:`~hndl.weights.Layout`. A field
``{name}`` stands for one dot-free part of a key and carries over from one side to the other; ``{name*}`` stands
for one or more parts (``module.{key*}`` strips DDP's prefix); a field named twice in a template must match the
same text twice. A field with an offset, ``{name+1}`` (or ``{name-1}``), stands for a whole number (no sign, no
leading zero) that is the field's value plus the offset: ``denselayer{i+1}`` on one side and ``{i}`` on the other
carry a checkpoint's count from 1 to a model's from 0. Rules run forward (a checkpoint key to the model keys it fills) and backward (a model key to
the checkpoint keys that would fill it), which is how a message names the checkpoint key a missing tensor should
have come from. A rule with no target drops what it matches (a causal-mask buffer the model computes).

Nothing here raises but :class:`ValueError` for a malformed template or rule; :func:`as_rules` turns that into
the ``E_PARAMS`` the public functions raise.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from .._errors import HndlError, Problem
from ..naming import excerpt
from ._layouts import Layout, Same, as_layout

__all__ = ["Rule", "RuleMatch", "Target", "Template", "as_rules", "rule"]

_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(\*?)([+-][0-9]{1,9})?\}")
_NUMBER = re.compile(r"0|[1-9][0-9]*")


@dataclass(frozen=True)
class _Run:
    """Template parts that each match one dot-separated part of a key, in order (between ``{x*}`` fields)."""

    parts: tuple[re.Pattern[str], ...]

    def fits(self, parts: Sequence[str], start: int, values: dict[str, str]) -> bool:
        """Whether the run matches ``parts[start:start + len(self.parts)]``; the fields' values go into ``values``."""
        for pattern, part in zip(self.parts, parts[start : start + len(self.parts)], strict=True):
            m = pattern.fullmatch(part)
            if m is None:
                return False
            values.update(m.groupdict())
        return True


@dataclass(frozen=True)
class Template:
    """A key with fields: ``layer{stage}.{block}.{t}``. Compiled once; matches and fills keys.

    A template whose ``{x*}`` fields each stand for whole parts (between dots or at an end) and that names no field
    twice, as every rule of the zoo does, is matched part by part (:meth:`_match_parts`): in time linear in the
    key, however many ``{x*}`` fields it has. Any other template is one regular expression, and may have one
    ``{x*}`` field at most: two or three of them in one expression take quadratic or cubic time to refuse a long
    key (a checkpoint's key is not trusted).
    """

    text: str
    fields: dict[str, bool] = field(init=False, compare=False, repr=False)  # name -> matches several parts
    offsets: dict[str, int] = field(init=False, compare=False, repr=False)  # name -> its offset ({i+1}: 1)
    _pattern: re.Pattern[str] = field(init=False, compare=False, repr=False)
    # Matched part by part: the runs between the {x*} fields and those fields' names (None: by _pattern).
    _runs: tuple[_Run, ...] | None = field(init=False, compare=False, repr=False)
    _stars: tuple[str, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text:
            raise ValueError(f"a key template must be a non-empty string, not {excerpt(self.text)}")
        pattern, fields, offsets, repeated = self._compile(self.text)
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "_pattern", pattern)
        runs: list[_Run] | None = [] if not repeated else None
        stars: list[str] = []
        current: list[re.Pattern[str]] = []
        for part in self.text.split("."):
            star = _FIELD.fullmatch(part)
            if star is not None and star.group(2):
                stars.append(star.group(1))
                if runs is not None:
                    runs.append(_Run(tuple(current)))
                current = []
            elif "*}" in part and runs is not None:  # a {x*} field inside a part: not whole parts
                runs = None
            else:
                current.append(self._compile(part)[0])
        if runs is not None:
            runs.append(_Run(tuple(current)))
        elif sum(fields.values()) > 1 or (stars and repeated and len(stars) > 1):
            raise ValueError(
                f"template {self.text!r} has several '*' fields, so each must stand for whole parts of a key "
                "(between dots, or at an end: 'a.{x*}.b.{y*}') and no field may be named twice"
            )
        object.__setattr__(self, "_runs", tuple(runs) if runs is not None else None)
        object.__setattr__(self, "_stars", tuple(stars))

    def _compile(self, text: str) -> tuple[re.Pattern[str], dict[str, bool], dict[str, int], bool]:
        """``text`` as a regular expression, its fields, their offsets, and whether a field is named twice."""
        out: list[str] = []
        fields: dict[str, bool] = {}
        offsets: dict[str, int] = {}
        repeated = False
        pos = 0
        for m in _FIELD.finditer(text):
            out.append(self._literal(text[pos : m.start()]))
            name, star, offset = m.group(1), bool(m.group(2)), int(m.group(3) or 0)
            if star and m.group(3):
                raise ValueError(f"template {self.text!r} gives field {name!r} both '*' and an offset")
            if name in fields:
                if fields[name] != star:
                    raise ValueError(f"template {self.text!r} writes field {name!r} both with and without '*'")
                if offsets.get(name, 0) != offset:
                    raise ValueError(f"template {self.text!r} writes field {name!r} with two offsets")
                out.append(f"(?P={name})")
                repeated = True
            else:
                out.append(f"(?P<{name}>.+)" if star else f"(?P<{name}>[^.]+)")
            fields[name] = star
            if offset:
                offsets[name] = offset
            pos = m.end()
        out.append(self._literal(text[pos:]))
        return re.compile("".join(out)), fields, offsets, repeated

    def _literal(self, text: str) -> str:
        if "{" in text or "}" in text:
            raise ValueError(
                f"template {self.text!r} has a brace that opens no field: write fields as {{name}} or {{name*}}"
            )
        return re.escape(text)

    def match(self, key: str) -> dict[str, str] | None:
        """The fields' values when ``key`` fits the template, else None."""
        if self._runs is not None:
            found = self._match_parts(key)
            if found is None:
                return None
            values = found
        else:
            m = self._pattern.fullmatch(key)
            if m is None:
                return None
            values = m.groupdict()
        for name, offset in self.offsets.items():
            if not _NUMBER.fullmatch(values[name]) or int(values[name]) < offset:
                return None
            values[name] = str(int(values[name]) - offset)
        return values

    def _match_parts(self, key: str) -> dict[str, str] | None:
        """What the regular expression would match, found part by part in linear time.

        The template is runs of one-part patterns with a ``{x*}`` field between each two: ``R0 *1 R1 ... *k Rk``.
        The first and last runs sit at the key's ends. The others are placed from the right, each at the rightmost
        part where it matches and leaves the field to its right at least one part (not one empty part): placing a
        run as far right as possible leaves the most room to its left, so a key that fits is never refused, and
        gives each ``{x*}`` field the longest value the ones before it allow, as the expression's greedy ``.+``
        does.
        """
        assert self._runs is not None
        parts = key.split(".")
        runs = self._runs
        values: dict[str, str] = {}
        if len(runs) == 1:
            only = runs[0]
            return values if len(parts) == len(only.parts) and only.fits(parts, 0, values) else None

        def star_ok(begin: int, end: int) -> bool:  # .+ : one part or more, and not one empty part
            return end - begin >= 2 or (end - begin == 1 and parts[begin] != "")

        first, last = runs[0], runs[-1]
        starts = [0] * len(runs)
        starts[-1] = len(parts) - len(last.parts)
        if starts[-1] < len(first.parts) + 1 or not last.fits(parts, starts[-1], values):
            return None
        for i in range(len(runs) - 2, 0, -1):
            run, right = runs[i], starts[i + 1]
            start = right - 1 - len(run.parts)
            while start > len(first.parts) and not (
                star_ok(start + len(run.parts), right) and run.fits(parts, start, values)
            ):
                start -= 1
            if start <= len(first.parts):
                return None
            starts[i] = start
        if not (first.fits(parts, 0, values) and star_ok(len(first.parts), starts[1])):
            return None
        for i, name in enumerate(self._stars):
            values[name] = ".".join(parts[starts[i] + len(runs[i].parts) : starts[i + 1]])
        return values

    def fits(self, values: Mapping[str, str]) -> bool:
        """Whether :meth:`fill` can write ``values``: a field with an offset needs a whole number that stays one."""
        return all(
            _NUMBER.fullmatch(values[name]) is not None and int(values[name]) + offset >= 0
            for name, offset in self.offsets.items()
        )

    def fill(self, values: Mapping[str, str]) -> str:
        """The key with each field replaced by its value (plus the field's offset)."""

        def text(m: re.Match[str]) -> str:
            offset = self.offsets.get(m.group(1))
            return values[m.group(1)] if offset is None else str(int(values[m.group(1)]) + offset)

        return _FIELD.sub(text, self.text)

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Target:
    """One model key template a rule fills, and the layout its tensor is read in (``"same"`` by default)."""

    template: str
    layout: Layout = field(default_factory=Same)

    def __init__(self, template: str, layout: Layout | str = "same") -> None:
        object.__setattr__(self, "template", template)
        object.__setattr__(self, "layout", as_layout(layout))


@dataclass(frozen=True)
class RuleMatch:
    """A rule applied to one group of checkpoint keys.

    Attributes:
        rule: the rule.
        sources: the checkpoint keys it reads, in the rule's order (several for a concatenation).
        targets: the model keys it fills, each with the layout it is read in (none: the keys are dropped).
    """

    rule: Rule
    sources: tuple[str, ...]
    targets: tuple[tuple[str, Layout], ...]


@dataclass(frozen=True)
class Rule:
    """Checkpoint keys (one template, or several joined into one tensor) and the model keys they become.

    Args:
        sources: the checkpoint key template, or a tuple of them whose tensors one target joins
            (with :class:`~hndl.weights.Concat`).
        targets: the model keys, each a :class:`Target`; several split one checkpoint tensor (each takes its
            :class:`~hndl.weights.Rows`); none drops the checkpoint keys.

    Raises:
        ValueError: a malformed template, a target using a field its sources lack, a target named twice, or a
            layout that takes a different number of tensors than the rule gives it.
    """

    sources: tuple[str, ...]
    targets: tuple[Target, ...] = ()
    _sources: tuple[Template, ...] = field(init=False, repr=False, compare=False)
    _targets: tuple[Template, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        sources = (self.sources,) if isinstance(self.sources, str) else tuple(self.sources)
        object.__setattr__(self, "sources", sources)
        object.__setattr__(self, "targets", tuple(self.targets))
        if not sources:
            raise ValueError("a rule needs at least one checkpoint key template")
        compiled = tuple(Template(s) for s in sources)
        fields = compiled[0].fields
        for t in compiled[1:]:
            if t.fields != fields:
                raise ValueError(f"templates {sources[0]!r} and {t.text!r} of one rule must have the same fields")
        if len(sources) > 1 and len(self.targets) != 1:
            raise ValueError(f"a rule joining {len(sources)} checkpoint keys fills exactly one model key")
        targets = []
        for target in self.targets:
            if not isinstance(target, Target):
                raise ValueError(f"a rule's targets are hndl.weights.Target objects, not {excerpt(target)}")
            t = Template(target.template)
            for name, star in t.fields.items():
                if name not in fields:
                    raise ValueError(f"target {t.text!r} uses field {name!r}, which {sources[0]!r} does not have")
                if fields[name] != star:
                    raise ValueError(f"field {name!r} is written with '*' on one side of the rule only")
            wanted = target.layout.inputs
            if wanted is not None and wanted != len(sources):
                raise ValueError(
                    f"layout '{target.layout}' of target {t.text!r} takes {wanted} tensor(s), "
                    f"the rule gives it {len(sources)}" + ("; join them with concat" if len(sources) > 1 else "")
                )
            targets.append(t)
        texts = [t.text for t in targets]
        if len(set(texts)) != len(texts):
            raise ValueError(f"a rule names target {next(x for x in texts if texts.count(x) > 1)!r} twice")
        object.__setattr__(self, "_sources", compiled)
        object.__setattr__(self, "_targets", tuple(targets))

    @property
    def drops(self) -> bool:
        """Whether the rule drops what it matches."""
        return not self.targets

    def forward(self, key: str) -> RuleMatch | None:
        """What the checkpoint key ``key`` belongs to under this rule, or None when the rule does not match it."""
        for template in self._sources:
            values = template.match(key)
            if values is not None and all(t.fits(values) for t in (*self._sources, *self._targets)):
                return RuleMatch(
                    self,
                    tuple(s.fill(values) for s in self._sources),
                    tuple(
                        (t.fill(values), target.layout) for t, target in zip(self._targets, self.targets, strict=True)
                    ),
                )
        return None

    def backward(self, key: str) -> tuple[str, ...] | None:
        """The checkpoint keys that would fill the model key ``key`` under this rule, or None.

        None also when a source field is not in the matching target (then many checkpoint keys would fill it).
        """
        for template in self._targets:
            values = template.match(key)
            if (
                values is not None
                and all(name in values for name in self._sources[0].fields)
                and all(s.fits(values) for s in self._sources)
            ):
                return tuple(s.fill(values) for s in self._sources)
        return None

    def __str__(self) -> str:
        left = " + ".join(self.sources)
        if not self.targets:
            return f"{left} -> (dropped)"
        right = ", ".join(t.template + ("" if isinstance(t.layout, Same) else f" ({t.layout})") for t in self.targets)
        return f"{left} -> {right}"


TargetSpec: TypeAlias = "str | Target | tuple[str, Layout | str]"


def _target(spec: Any) -> Target:
    if isinstance(spec, Target):
        return spec
    if isinstance(spec, str):
        return Target(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return Target(spec[0], spec[1])
    raise ValueError(f"a target is a key template, a (template, layout) pair or a Target, not {excerpt(spec)}")


def rule(sources: str | Sequence[str], *targets: TargetSpec) -> Rule:
    """Shorthand for :class:`Rule`: ``rule("fc.{t}", "nodes.n_fc.{t}")``; a target ``(template, layout)`` gives
    its layout (``("nodes.n_lin.weight", "transpose")``); no target drops the key; a tuple of sources is joined.
    """
    return Rule((sources,) if isinstance(sources, str) else tuple(sources), tuple(_target(t) for t in targets))


def _from_pair(source: Any, target: Any) -> Rule:
    if target is None:
        return rule(source)
    if isinstance(target, list):
        return rule(source, *target)
    return rule(source, target)


def as_rules(rules: Any) -> tuple[Rule, ...]:
    """The rules of the ``rules`` argument: :class:`Rule` objects, ``(source, target)`` pairs, or a mapping
    ``{source: target}``, where a target is a template, a ``(template, layout)`` pair, a list of those (a
    split) or None (dropped), and a source a template or a tuple of them (joined).

    Raises:
        HndlError: E_PARAMS naming each malformed rule (by its position) and why.
    """
    if isinstance(rules, Rule):
        rules = (rules,)
    items: list[tuple[str, Any]]
    if isinstance(rules, Mapping):
        items = [(f"rule for {excerpt(k)}", (k, v)) for k, v in rules.items()]
    elif isinstance(rules, (list, tuple)):
        items = [(f"rule {i}", r) for i, r in enumerate(rules)]
    else:
        raise HndlError(
            Problem(
                "E_PARAMS",
                f"rules must be a sequence of rules or a mapping, not {type(rules).__name__}",
                expected="[hndl.weights.rule(...), ...], [(source, target), ...] or {source: target}",
                actual=excerpt(rules),
            )
        )
    out: list[Rule] = []
    problems: list[Problem] = []
    for where, item in items:
        try:
            if isinstance(item, Rule):
                out.append(item)
            elif isinstance(item, tuple) and len(item) == 2:
                out.append(_from_pair(*item))
            else:
                raise ValueError(f"a rule is a Rule or a (source, target) pair, not {excerpt(item)}")
        except (ValueError, TypeError) as exc:
            problems.append(Problem("E_PARAMS", f"{where}: {exc}", actual=excerpt(item)))
    if problems:
        raise HndlError(problems, title="rules")
    return tuple(out)
