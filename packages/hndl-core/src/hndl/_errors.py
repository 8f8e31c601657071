"""The one exception type hndl raises, and the problems it carries.

Checks inside hndl return :class:`Problem` objects (cheap, no formatting); the public boundary collects them
and raises a single :class:`HndlError`. Every problem renders in the same layout, so users learn to read one
shape of message, and tests can pin every line. A static check reports every problem of a graph, under a
title line:

    >>> import hndl
    >>> g = hndl.Graph("mlp")
    >>> x = g.input("x", ("B", 784))
    >>> hidden = g.add("linear", x, name="hidden", out_features=512, in_features=512)
    >>> g.output(g.add("linear", hidden, name="out", out_features=10))
    >>> try:
    ...     hndl.check(g)
    ... except hndl.HndlError as e:
    ...     print(e)
    1 problem in graph 'mlp':
    E_SHAPE linear 'hidden' port 'x': dim 1 is in_features, bound to 512, but got 784
        expected: [*batch, in_features]
        actual:   [B, 784]
        hint:     drop in_features: hndl infers it from the input

A graph loaded from a spec file starts each headline with the ``file:line:col`` of the entry at fault. A
call-time problem adds the symbols bound so far, so a mismatch can be traced to the input that bound them:

    >>> import torch
    >>> g = hndl.Graph("pair")
    >>> x, y = g.input("x", ("B", 784)), g.input("y", ("B", 10))
    >>> g.output(g.add("add", g.add("linear", x, name="hidden", out_features=10), y, name="sum"))
    >>> model = hndl.build(g)
    >>> try:
    ...     model(torch.randn(32, 784), torch.randn(16, 10))
    ... except hndl.HndlError as e:
    ...     print(e)
    E_INPUT input 'y': dim 0 is B, bound to 32, but got 16
        expected: [B, 10]
        actual:   [16, 10]
        bound:    B=32
        hint:     B was bound by input 'x'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .naming import excerpt, printable

__all__ = ["CODES", "HndlError", "Problem", "clip", "describe_node", "echo", "echo_list"]

# Messages echo untrusted text (a checkpoint's keys, a config's values, a spec's names), so every echo is bounded:
# one value at most VALUE_LIMIT characters, one list at most LIST_LIMIT items, and, whatever a message was built
# from, each rendered line at most LINE_LIMIT characters and one error at most PROBLEM_LIMIT problems shown (all
# of them stay in HndlError.problems). A 1 MB key or 32,000 unexpected keys make a message of a few KB.
VALUE_LIMIT = 200
LIST_LIMIT = 10
LINE_LIMIT = 2000
PROBLEM_LIMIT = 50

#: Every error code hndl uses, with its meaning. The docs generator documents each one from this table.
CODES: dict[str, str] = {
    "E_SPEC": "malformed spec text: YAML syntax, wrong types, unknown or missing keys, bad version",
    "E_NAME": "an invalid or duplicate name",
    "E_REF": "a reference to an unknown input, node or port",
    "E_CYCLE": "the graph has a cycle (the message lists it)",
    "E_OP": "an unknown op (with a did-you-mean)",
    "E_PARAM": "an op's parameters are missing or invalid",
    "E_SHAPE": "static inference found a shape incompatibility",
    "E_DTYPE": "static inference found a dtype incompatibility",
    "E_INPUT": "call-time inputs break the graph's input contracts",
    "E_CONTRACT": "call-time, a node's output breaks its inferred contract",
    "E_RUNTIME": "call-time, a layer failed, or registered state no longer matches the build",
    "E_PARAMS": "a parameter/buffer dict does not match the build (hndl-func calls, load_model, zoo weights)",
    "E_IMPORT": "an nn.Module cannot be imported as a graph (hndl.from_module): its trace fails, or it does "
    "something no op, and no layer rebuildable as a module node, expresses",
}


def describe_node(op: str | None, node: str | None) -> str:
    """``linear 'hidden'``, the way every message names a node."""
    if node is None:
        return ""
    return f"{op} '{node}'" if op else f"node '{node}'"


def clip(text: str, limit: int = VALUE_LIMIT) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out: how a message shows text it does
    not quote (a key as a problem's ``actual``)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"


def echo(value: Any, limit: int = VALUE_LIMIT) -> str:
    """``repr(value)`` as a message may echo it: a string's first ``limit`` characters, another value's repr cut
    to ``limit`` characters, then how many more there were.

    >>> echo("k" * 1_000_000, limit=12)
    "'kkkkkkkkkkkk'... (999,988 more characters)"
    """
    if isinstance(value, str):
        # The cut is taken before repr, so a megabyte is never copied or escaped whole.
        return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value) - limit:,} more characters)"
    return clip(excerpt(value, 2**62), limit)


def echo_list(values: Iterable[Any], limit: int = LIST_LIMIT, *, each: int = VALUE_LIMIT, quote: bool = True) -> str:
    """The first ``limit`` of ``values``, each as :func:`echo` writes it (or as ``str`` with ``quote=False``,
    cut the same way), comma-separated, then how many more there were: ``'a', 'b' ... and 31,990 more``.

    >>> echo_list([f"k{i}" for i in range(32_000)], limit=2)
    "'k0', 'k1' ... and 31,998 more"
    """
    items = values if isinstance(values, Sequence) else list(values)
    shown = ", ".join(echo(v, each) if quote else clip(str(v), each) for v in items[:limit])
    more = len(items) - limit
    return f"{shown} ... and {more:,} more" if more > 0 else shown


def _format_value(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_format_value(v) for v in value) + "]"
    try:
        return str(value)
    except Exception:  # an integer too long to print (more than 4,300 digits), a value whose __str__ fails
        return excerpt(value)


def _line(text: str) -> str:
    """One line of a message: printable (see :func:`~hndl.naming.printable`) and at most :data:`LINE_LIMIT`
    characters, whatever it was built from."""
    if len(text) > LINE_LIMIT:
        return printable(text[:LINE_LIMIT]) + f"... ({len(text) - LINE_LIMIT:,} more characters)"
    return printable(text)


@dataclass
class Problem:
    """One thing that is wrong, with everything needed to explain it.

    Attributes:
        code: one of :data:`CODES`.
        message: a short factual sentence, without the node or location prefix.
        node: the node (or graph input) the problem belongs to, qualified (``blocks.2.attn``) inside subgraphs.
        op: the node's op, used to name it (``linear 'hidden'``).
        port: the input or output port concerned, if any.
        expected, actual: what the contract wanted and what was found.
        location: ``file:line:col`` of the offending spec entry, when the graph came from a file.
        bindings: symbol bindings in force (``{"B": 32}``), shown to explain a mismatch.
        hint: how to fix it, when there is a clear fix.
    """

    code: str
    message: str
    node: str | None = None
    op: str | None = None
    port: str | None = None
    expected: Any = None
    actual: Any = None
    location: str | None = None
    bindings: Mapping[str, Any] | None = None
    hint: str | None = None

    def headline(self) -> str:
        """The first line: ``location: CODE op 'node' port 'p': message``.

        Every field may hold text from a spec (names, values, the file name), so each is passed through
        :func:`~hndl.naming.printable`: a control character cannot start a line of its own or reach a terminal.
        """
        who = describe_node(self.op, self.node)
        if self.port is not None:
            who = f"{who} port '{self.port}'" if who else f"port '{self.port}'"
        head = f"{self.code} {who}: {self.message}" if who else f"{self.code}: {self.message}"
        return _line(f"{self.location}: {head}" if self.location else head)

    def __str__(self) -> str:
        lines = [self.headline()]
        if self.expected is not None or self.actual is not None:
            lines.append(f"    expected: {_format_value(self.expected)}")
            lines.append(f"    actual:   {_format_value(self.actual)}")
        if self.bindings:
            bound = " ".join(f"{k}={_format_value(v)}" for k, v in sorted(self.bindings.items()))
            lines.append(f"    bound:    {bound}")
        if self.hint:
            lines.append(f"    hint:     {self.hint}")
        return "\n".join([lines[0], *(_line(line) for line in lines[1:])])


class HndlError(Exception):
    """The only exception hndl raises for bad input.

    Attributes:
        code: the error code of the first problem (``"E_SHAPE"``, ...); see :data:`CODES`.
        node: the node (or input) the first problem belongs to, or ``None``.
        location: ``file:line:col`` of the first problem in its spec file, or ``None``.
        port: the port of the first problem, or ``None``.
        problems: every problem found, in the order found. A static check reports all of them at once.
    """

    # Tracebacks and reprs name the class where users import it from: hndl.HndlError, as the docs write it.
    __module__ = "hndl"

    def __init__(self, problems: Problem | Sequence[Problem], *, title: str | None = None) -> None:
        if isinstance(problems, Problem):
            problems = [problems]
        if not problems:
            raise ValueError("HndlError needs at least one problem")
        self.problems: list[Problem] = list(problems)
        first = self.problems[0]
        self.code: str = first.code
        self.node: str | None = first.node
        self.location: str | None = first.location
        self.port: str | None = first.port
        self.title = title
        super().__init__(self._render())

    def _render(self) -> str:
        body = "\n".join(str(p) for p in self.problems[:PROBLEM_LIMIT])
        count = len(self.problems)
        if count > PROBLEM_LIMIT:
            body += f"\n... and {count - PROBLEM_LIMIT:,} more problems (every one is in HndlError.problems)"
        if count == 1 and self.title is None:
            return body
        title = _line(self.title or "graph")
        noun = "problem" if count == 1 else "problems"
        return f"{count} {noun} in {title}:\n{body}"

    def __reduce__(self) -> tuple[Any, ...]:
        # Exceptions pickle by their args; ours are problems, so multiprocessing and pytest-xdist keep them.
        return (HndlError, (self.problems,), {"title": self.title})

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        # BaseException's signature allows None; pickle never passes it (our __reduce__ always gives a dict).
        self.title = state.get("title") if state is not None else None


@dataclass
class ProblemList:
    """An accumulator that checks append to; raises once at the boundary."""

    problems: list[Problem] = field(default_factory=list)

    def add(self, code: str, message: str, **fields: Any) -> Problem:
        p = Problem(code, message, **fields)
        self.problems.append(p)
        return p

    def append_problem(self, problem: Problem) -> None:
        self.problems.append(problem)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def raise_if_any(self, title: str | None = None) -> None:
        if self.problems:
            raise HndlError(self.problems, title=title)
