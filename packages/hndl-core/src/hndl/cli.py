"""The ``hndl`` command: check spec files, and summarise the model one describes.

::

    hndl check FILE...     every problem in every file, as file:line:col: CODE op 'node': message
    hndl summary FILE      one row per leaf node: op, inferred shapes, parameter count; then totals

Also runnable as ``python -m hndl``. Exit status: 0 when everything checked out, 1 when a file has problems
(or cannot be read), 2 for a usage error. Output is plain text, the same on a terminal and in a pipe.

Everything printed passes through :func:`_say` (and problems through :func:`_render`), which escape control
characters: names, values and file names come from spec files that may be hostile, and an escape code or a line
break in one must neither reach the terminal nor forge a line of output (``other.yaml: OK``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from . import __version__
from ._check import CheckedGraph, check
from ._contracts import format_shape
from ._errors import HndlError, Problem
from ._graph import Graph
from ._param_types import excerpt, printable
from ._plan import lower
from ._spec_loader import load

__all__ = ["main", "parser"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``hndl`` command with ``argv`` (``sys.argv[1:]`` by default) and return its exit status."""
    command = parser()
    try:
        args = command.parse_args(None if argv is None else list(argv))
    except SystemExit as exc:  # --help, --version and usage errors: argparse has printed what it had to say
        return exc.code if isinstance(exc.code, int) else 2
    if args.command is None:
        command.print_help(sys.stderr)
        return 2
    out = sys.stdout
    try:
        if args.command == "check":
            return _check_files(args.files, allow_imports=args.allow_imports, out=out)
        return _summary(args.file, allow_imports=args.allow_imports, out=out)
    except BrokenPipeError:
        # `hndl summary big.yaml | head`: the reader left; say nothing more, and keep Python from
        # complaining about the closed pipe while it shuts down.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1


def parser() -> argparse.ArgumentParser:
    """A new argument parser of the ``hndl`` command: what :func:`main` parses with, and what the reference
    docs show as the command's usage (``python -m hndl.docs``)."""
    top = argparse.ArgumentParser(
        prog="hndl",
        description="Check hndl spec files and summarise the models they describe.",
        epilog="Exit status: 0 all good, 1 problems found, 2 usage error.",
    )
    top.add_argument("--version", action="version", version=f"hndl {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")
    imports_help = "let op 'module' import the Python classes it names (only for files you trust)"

    check_cmd = commands.add_parser(
        "check",
        help="check spec files and list every problem",
        description="Load and check each spec file: structure, ops, parameters, references, shapes and dtypes. "
        "Prints 'FILE: OK (N nodes)' per good file, and every problem as file:line:col: CODE op 'node': message.",
    )
    check_cmd.add_argument("files", nargs="+", metavar="FILE", help="spec files (.yaml, .yml or .json)")
    check_cmd.add_argument("--allow-imports", action="store_true", help=imports_help)

    summary_cmd = commands.add_parser(
        "summary",
        help="a table of the model's nodes, shapes and parameter counts",
        description="Check a spec file, build its model, and print one row per leaf node (qualified name, op, "
        "inferred input and output shapes, parameter count) with totals.",
    )
    summary_cmd.add_argument("file", metavar="FILE", help="a spec file")
    summary_cmd.add_argument("--allow-imports", action="store_true", help=imports_help)
    return top


# --- loading, checking, building ---------------------------------------------------------------------------


class _Failed(Exception):
    """A file could not be loaded, checked or built; ``problems`` say why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


def _prepare(file: str, *, allow_imports: bool) -> tuple[Graph, CheckedGraph, Any]:
    """Load, check and build ``file``; raises :class:`_Failed` with every problem found."""
    try:
        # A Path, so that a name without a .yaml suffix is never mistaken for spec text.
        graph = load(Path(file), allow_imports=allow_imports)
        checked = check(graph)
        model = _build(graph)
    except HndlError as exc:
        raise _Failed(exc.problems) from None
    return graph, checked, model


_META_HINT = "hndl builds the model on PyTorch's meta device, which allocates no memory; the layer failed there"


def _build(graph: Graph) -> Any:
    """Build the model to find what only the layers' constructors reject, and to count parameters.

    The build runs on PyTorch's ``meta`` device, which allocates no memory, so checking a model with billions
    of parameters is as quick as checking a small one, and a hostile spec cannot make ``hndl check`` allocate
    gigabytes. There is no retry with a real build: a layer that fails on ``meta`` is reported as failing there.
    """
    import torch

    from . import build

    try:
        with torch.device("meta"):
            return build(graph)
    except HndlError as exc:
        # The graph checked, so these are the layers' own constructors failing; say where they ran.
        problems = [p if p.hint else dataclasses.replace(p, hint=_META_HINT) for p in exc.problems]
        raise HndlError(problems, title=exc.title) from exc
    except Exception as exc:
        raise HndlError(
            Problem(
                "E_PARAM",
                f"the model could not be built on PyTorch's meta device: {type(exc).__name__}: {excerpt(str(exc))}",
                hint="hndl check and hndl summary build on the meta device only, so that they allocate no memory",
            )
        ) from exc


def _say(text: str, out: IO[str]) -> None:
    """Print one line of output, control characters escaped (see the module docstring)."""
    print(printable(text), file=out)


def _render(problem: Problem, file: str) -> str:
    """A problem as printed: its usual layout (headline, then indented lines), every field escaped first, so the
    layout's own line breaks are the only ones."""
    safe = dataclasses.replace(
        problem,
        message=printable(problem.message),
        node=_safe(problem.node),
        op=_safe(problem.op),
        port=_safe(problem.port),
        location=_safe(problem.location),
        hint=_safe(problem.hint),
        expected=_safe(problem.expected),
        actual=_safe(problem.actual),
        bindings=None if problem.bindings is None else {_safe(k): _safe(v) for k, v in problem.bindings.items()},
    )
    text = str(safe)
    # Every line starts with where the problem is, so editors and grep can jump to it.
    return text if problem.location else f"{printable(file)}: {text}"


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


def _leaf_count(checked: CheckedGraph) -> int:
    return len(lower(checked).steps)


# --- check -------------------------------------------------------------------------------------------------


def _check_files(files: Sequence[str], *, allow_imports: bool, out: IO[str]) -> int:
    problems = 0
    failed_files = 0
    for file in files:
        try:
            _, checked, _ = _prepare(file, allow_imports=allow_imports)
        except _Failed as exc:
            failed_files += 1
            problems += len(exc.problems)
            for problem in exc.problems:
                print(_render(problem, file), file=out)
            continue
        count = _leaf_count(checked)
        _say(f"{file}: OK ({count} node{'' if count == 1 else 's'})", out)
    if problems:
        noun = "problem" if problems == 1 else "problems"
        where = "file" if failed_files == 1 else "files"
        _say(f"Found {problems} {noun} in {failed_files} {where}.", out)
        return 1
    return 0


# --- summary -----------------------------------------------------------------------------------------------


def _summary(file: str, *, allow_imports: bool, out: IO[str]) -> int:
    try:
        graph, checked, model = _prepare(file, allow_imports=allow_imports)
    except _Failed as exc:
        for problem in exc.problems:
            print(_render(problem, file), file=out)
        noun = "problem" if len(exc.problems) == 1 else "problems"
        _say(f"Found {len(exc.problems)} {noun} in 1 file.", out)
        return 1
    for line in summary_lines(graph, checked, model, file):
        _say(line, out)
    return 0


def summary_lines(graph: Graph, checked: CheckedGraph, model: Any, file: str) -> list[str]:
    """The text of ``hndl summary``: a header, one row per leaf node, and totals."""
    rows: list[tuple[str, ...]] = []
    for step in model.plan.steps:
        node = step.node
        module = model.node_module(node.path)
        count = 0 if module is None else sum(p.numel() for p in module.parameters())
        # Cells escaped before the columns are sized, so that the escapes count in the widths.
        cells = (
            node.qualname,
            node.op,
            ", ".join(_shape_text(t.shape) for t in node.in_types),
            ", ".join(_shape_text(t.shape) for t in node.out_types),
            f"{count:,}",
        )
        rows.append(tuple(printable(cell) for cell in cells))
    total = sum(p.numel() for p in model.parameters())
    inputs = ", ".join(f"{name} {_shape_text(t.shape)}" for name, t in zip(checked.input_names, _input_types(checked)))
    outputs = ", ".join(f"{ref} {_shape_text(t.shape)}" for ref, t in zip(graph.outputs, checked.output_types))
    lines = [f"{graph.name} ({file})", f"inputs:  {inputs or 'none'}", f"outputs: {outputs or 'none'}", ""]
    lines = [printable(line) for line in lines]
    lines += _table(("node", "op", "input shape", "output shape", "params"), rows, right=(4,))
    noun = "node" if len(rows) == 1 else "nodes"
    lines.append(f"{len(rows)} {noun}, {total:,} parameters")
    return lines


def _shape_text(shape: Any) -> str:
    """A shape as messages print it; one whose dims are too long to print as decimals (a literal product in a
    shape expression can exceed Python's 4,300 digits) is printed entry by entry, the long ones described."""
    try:
        return format_shape(shape)
    except ValueError:
        return "[" + ", ".join(_dim_text(d) for d in shape) + "]"


def _dim_text(dim: Any) -> str:
    try:
        return format_shape([dim])[1:-1]
    except ValueError:
        return "<a dim too long to print>"


def _input_types(checked: CheckedGraph) -> list[Any]:
    return [checked.types[v] for v in checked.input_ids]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()) -> list[str]:
    """Plain-text columns sized to their widest cell: nothing is truncated, whatever the terminal width."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows)]

    def line(cells: Sequence[str]) -> str:
        parts = [cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(cells, widths))]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return [line(header), rule, *(line(r) for r in rows), rule]


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
