"""What every section of a spec is held to as the loader reads it, and where its problems go.

:class:`SpecChecks` collects the problems of one spec (one :class:`~hndl._errors.ProblemList`, raised once by
:mod:`hndl._spec_loader`) and holds the checks the sections share: unknown and missing keys, keys and names
written twice (YAML would silently keep the last), valid names, and text keys inside parameter values. The
sections themselves are read by :mod:`hndl._spec_builder` (the document, graphs, parameters),
:mod:`hndl._spec_nodes` and :mod:`hndl._spec_inputs_outputs`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._errors import ProblemList
from ._yaml_reader import Located, describe
from .naming import NAME_RE, excerpt, suggestion

__all__ = ["MISSING_HINTS", "SpecChecks", "bounded", "is_name"]

#: The hint for each required key a spec or graph lacks.
MISSING_HINTS = {
    "hndl": "start the file with 'hndl: 1' (the format version)",
    "inputs": "add inputs: {x: {shape: [B, 784]}}",
    "nodes": "add nodes: {name: {op: ..., in: ...}}",
    "outputs": "add outputs: [name of the node that makes the result]",
}
#: The longest message the loader passes on from the contract parser, which quotes the entry it could not read.
_LONGEST_MESSAGE = 300


def bounded(message: str) -> str:
    """A message cut to a bounded length: one quoting a long shape entry or dtype would otherwise echo all of it."""
    return message if len(message) <= _LONGEST_MESSAGE else message[: _LONGEST_MESSAGE - 3] + "..."


def is_name(value: Any) -> bool:
    """Whether ``value`` is a valid name (letters, digits and underscores, not starting with a digit)."""
    return isinstance(value, str) and NAME_RE.match(value) is not None


class SpecChecks:
    """The problems found in one spec so far, and the checks every section of it shares."""

    def __init__(self, problems: ProblemList) -> None:
        self.problems = problems

    def add(self, code: str, message: str, location: str | None, **fields: Any) -> None:
        """One problem at ``location`` (``file:line:col``); ``fields`` as ``ProblemList.add`` takes them."""
        self.problems.add(code, message, location=location, **fields)

    def duplicate_names(self, section: Located, kind: str) -> None:
        """Two inputs, nodes or graphs under one name: a duplicate name, as ``Graph.add`` would report it."""
        for dup in section.duplicates:
            dup.reported = True
            self.add(
                "E_NAME",
                f"{kind} name {excerpt(dup.key)} is used twice (first on line {dup.first_line})",
                dup.loc,
                node=dup.key if kind != "graph" and isinstance(dup.key, str) else None,
                op="input" if kind == "input" else None,
                hint=f"give each {kind} its own name",
            )

    def duplicates(self, entry: Located, **owner: Any) -> None:
        """Every key written twice in ``entry`` and the values inside it, named after ``owner`` (node, op)."""
        for dup in entry.duplicates:
            if dup.reported:
                continue
            dup.reported = True
            self.add(
                "E_SPEC",
                f"duplicate key {excerpt(dup.key)} (first on line {dup.first_line})",
                dup.loc,
                hint="each key may appear once in a mapping; YAML would silently keep only the last one",
                **owner,
            )
        for child in entry.children():
            self.duplicates(child, **owner)

    def keys(self, doc: Located, allowed: Sequence[str], required: Sequence[str], what: str, at: str) -> None:
        """Each key of mapping ``doc`` that is not ``allowed``, and each ``required`` one it lacks (reported at
        ``at``); ``what`` names the mapping in messages (``"the spec"``, ``"graph 'block'"``)."""
        for key, loc in doc.keys.items():
            if key in allowed:
                continue
            hint = suggestion(key, allowed) or f"{what} takes: {', '.join(allowed)}"
            self.add("E_SPEC", f"unknown key {excerpt(key)} in {what}", loc, hint=hint)
        for key in required:
            if key not in doc.value:
                self.add("E_SPEC", f"missing key {key!r} in {what}", at, hint=MISSING_HINTS.get(key))

    def name_ok(self, name: Any, kind: str, loc: str) -> bool:
        """Whether ``name`` (of a ``kind``: graph, input, node, ...) is a valid name; E_NAME at ``loc`` if not."""
        if isinstance(name, str) and NAME_RE.match(name):
            return True
        self.add(
            "E_NAME",
            f"{kind} name {excerpt(name)} is not valid",
            loc,
            hint="use letters, digits and underscores, not starting with a digit",
        )
        return False

    def text_keys(self, value: Located, key: str, **fields: Any) -> bool:
        """Whether every mapping inside a parameter's ``value`` has text keys (reported at the first that does
        not): a value is plain data that :func:`hndl.dumps` writes back, and a spec's keys are names."""
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item.value, dict):
                for k in item.value:
                    if not isinstance(k, str):
                        self.add(
                            "E_SPEC",
                            f"{key!r}: a key inside a value must be text, got {describe(k)}",
                            item.keys.get(k, item.loc),
                            **fields,
                            hint="quote it: '1': ...",
                        )
                        return False
            stack.extend(item.children())
        return True
