"""The ``hndl`` command's usage, captured from its argparse parser (``hndl.cli``)."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
from collections.abc import Iterator
from typing import Any

from ._text import HEADER

#: Width argparse formats help to, fixed so the page does not depend on the terminal.
COLUMNS = 100
_FACTORIES = ("build_parser", "make_parser", "get_parser", "parser", "_parser", "_build_parser")


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


def find_parser() -> argparse.ArgumentParser | None:
    """The command's parser, from the first parser factory ``hndl.cli`` defines; ``None`` without one."""
    try:
        cli = importlib.import_module("hndl.cli")
    except ImportError:
        return None
    for name in _FACTORIES:
        obj: Any = getattr(cli, name, None)
        if isinstance(obj, argparse.ArgumentParser):
            return obj
        if callable(obj):
            try:
                made = obj()
            except TypeError:
                continue
            if isinstance(made, argparse.ArgumentParser):
                return made
    return None


def _help(parser: argparse.ArgumentParser) -> str:
    if hasattr(parser, "color"):  # Python 3.14+ colours help unless told not to
        parser.color = False
    with _fixed_terminal():
        return parser.format_help().rstrip() + "\n"


def cli_page() -> str:
    out = [HEADER, "# The `hndl` command\n\n"]
    parser = find_parser()
    if parser is None:
        out.append("*The installed hndl has no command-line parser (`hndl.cli`), so there is no usage to show.*\n")
        return "".join(out)
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
