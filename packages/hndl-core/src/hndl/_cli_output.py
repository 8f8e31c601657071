"""How the ``hndl`` command prints: every line escaped, a problem rendered with its file, a failure counted.

Everything the command prints passes through :func:`say` (and problems through :func:`render`), which escape
control characters: names, values and file names come from spec files that may be hostile, and an escape code or a
line break in one must neither reach the terminal nor forge a line of output (``other.yaml: OK``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import IO, Any

from ._errors import Problem
from ._resolve import IMPORTS_HINT
from .naming import excerpt, printable

#: How much of a file name given on the command line (or a zoo: name) is echoed: a name is the user's own
#: argument, but it may come from a script, and 100,000 characters of it help no one.
SHOWN_NAME = 240


class Failed(Exception):
    """A file could not be loaded, checked or built; ``problems`` say why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


def fail(exc: Failed, file: str, out: IO[str]) -> int:
    for problem in exc.problems:
        print(render(problem, file), file=out)
    noun = "problem" if len(exc.problems) == 1 else "problems"
    say(f"Found {len(exc.problems)} {noun} in 1 file.", out)
    return 1


def say(text: str, out: IO[str]) -> None:
    """Print one line of output, control characters escaped (see the module docstring)."""
    print(printable(text), file=out)


def render(problem: Problem, file: str) -> str:
    """A problem as printed: its usual layout (headline, then indented lines), every field escaped first, so the
    layout's own line breaks are the only ones; a location's file name is cut as :func:`shown_name` cuts names."""
    problem = _from_the_command(problem)
    safe = dataclasses.replace(
        problem,
        message=printable(problem.message),
        node=_safe(problem.node),
        op=_safe(problem.op),
        port=_safe(problem.port),
        location=None if problem.location is None else _shown_location(problem.location),
        hint=_safe(problem.hint),
        expected=_safe(problem.expected),
        actual=_safe(problem.actual),
        bindings=None if problem.bindings is None else {_safe(k): _safe(v) for k, v in problem.bindings.items()},
    )
    text = str(safe)
    # Every line starts with where the problem is, so editors and grep can jump to it.
    return text if problem.location else f"{shown_name(file)}: {text}"


def _from_the_command(problem: Problem) -> Problem:
    """``problem`` as the command's user reads it: a hint that names an argument of the Python API names the
    command's option instead."""
    if problem.hint == IMPORTS_HINT:
        return dataclasses.replace(problem, hint="pass --allow-imports if you trust this file")
    return problem


def shown_name(name: str) -> str:
    """A file name (or ``zoo:`` name) from the command line as echoed: escaped, and cut to :data:`SHOWN_NAME`
    characters with a visible mark."""
    text = printable(name)
    return text if len(text) <= SHOWN_NAME else text[: SHOWN_NAME - 3] + "..."


def _shown_location(location: str) -> str:
    """``file:line:col`` with the file part cut as :func:`shown_name` cuts names (the numbers kept)."""
    parts = location.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return f"{shown_name(parts[0])}:{parts[1]}:{parts[2]}"
    return shown_name(location)


def _safe(value: Any) -> Any:
    """``value`` with its text escaped, for a problem's fields: strings inside lists too; an integer too long to
    print (more than 4,300 digits) as a short description."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    if isinstance(value, Mapping):
        return {_safe(k): _safe(v) for k, v in value.items()}
    if isinstance(value, int):
        return excerpt(value, limit=10_000)
    try:
        return printable(str(value))
    except ValueError:
        return "<unprintable value>"
