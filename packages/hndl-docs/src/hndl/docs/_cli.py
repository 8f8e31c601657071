"""The ``hndl`` command's usage, captured from its argparse parser (:func:`hndl.cli.parser`)."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator

from hndl.cli import parser as command_parser

from ._text import HEADER

#: Width argparse formats help to, fixed so the page does not depend on the terminal.
COLUMNS = 100


@contextlib.contextmanager
def _fixed_terminal() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "PYTHON_COLORS")}
    os.environ.update({"COLUMNS": str(COLUMNS), "LINES": "50", "NO_COLOR": "1", "PYTHON_COLORS": "0"})
    os.environ.pop("FORCE_COLOR", None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _help(parser: argparse.ArgumentParser) -> str:
    if hasattr(parser, "color"):  # Python 3.14+ colours help unless told not to
        parser.color = False
    with _fixed_terminal():
        return parser.format_help().rstrip() + "\n"


def cli_page() -> str:
    out = [HEADER, "# The `hndl` command\n\n"]
    parser = command_parser()
    parser.prog = "hndl"
    out.append(
        "Installed with hndl-core. The usage below is captured from the command's own argument parser.\n\n"
        "```text\n$ hndl --help\n" + _help(parser) + "```\n"
    )
    for action in parser._actions:  # argparse has no public way to list subcommands
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias of a subcommand already shown
                    continue
                seen.add(id(sub))
                sub.prog = f"hndl {name}"
                out.append(f"\n## `hndl {name}`\n\n```text\n$ hndl {name} --help\n" + _help(sub) + "```\n")
    return "".join(out)
