"""The ``hndl`` command: check spec files, summarise and draw the models they describe.

::

    hndl check FILE|DIR...            every problem in every file, as file:line:col: CODE op 'node': message
    hndl summary FILE [--dims B=8]    one row per node: op and layer, inputs, shapes, parameters, MACs; totals
                 [--input-size 8,3,224,224]  (the symbols bound from the inputs' sizes instead)
                 [--train [--optimizer adamw]]  (also one training step's memory)
    hndl draw FILE -o OUT [--dpi N]   a picture: .svg or .png (Graphviz's dot; PNG at 300 dpi), .dot or .mmd
    hndl ops [NAME]                   the ops (name and summary), or one op: parameters, ports, shape rule
    hndl import REF --input SIZES     an nn.Module (package.module:name) as a spec file (hndl.from_module)

``check``, ``summary`` and ``draw`` take ``--param NAME=VALUE`` (repeatable): a value for one of the spec's top-level
``params``, as ``hndl.load(path, params={...})`` takes it; VALUE is read as YAML (``96``, ``0.1``, ``true``, ``null``,
``gelu``, ``[2, 2, 6, 2]``).

FILE may be ``-`` (the spec on stdin) or ``zoo:NAME`` (a model of ``hndl.zoo``, when installed). ``check`` never
imports torch unless asked to build the layers (``--build``), so it answers at once. Also runnable as
``python -m hndl``. Exit status: 0 when everything checked out, 1 when a file has problems (or cannot be read),
2 for a usage error. Output is plain text, the same on a terminal and in a pipe (no colour).

This module is the command line itself: :func:`main` and its argument parser. The subcommands run in
:mod:`hndl._cli_commands` and :mod:`hndl._cli_ops`, read their files through :mod:`hndl._cli_loading`, and print
through :mod:`hndl._cli_output`, which escapes every line (spec files may be hostile: an escape code or a line
break in a name must neither reach the terminal nor forge a line of output).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from . import __version__
from ._cli_commands import run_check, run_draw, run_import_command, run_summary
from ._cli_loading import given_params
from ._cli_ops import run_ops
from .naming import excerpt

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
            return run_check(
                args.files, allow_imports=args.allow_imports, build=args.build, out=out, params=given_params(args)
            )
        if args.command == "summary":
            return run_summary(args, out=out)
        if args.command == "ops":
            return run_ops(args.name, out=out)
        if args.command == "import":
            return run_import_command(args, out=out)
        return run_draw(args, out=out)
    except BrokenPipeError:
        # `hndl summary big.yaml | head`: the reader left; say nothing more, and keep Python from
        # complaining about the closed pipe while it shuts down.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 1


def _dims(text: str) -> dict[str, int]:
    """``B=8,H=224`` -> ``{"B": 8, "H": 224}`` (argparse reports the ValueError as a usage error)."""
    dims: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip().isdigit():
            raise argparse.ArgumentTypeError(f"{item!r} is not NAME=SIZE (e.g. B=8)")
        dims[name.strip()] = int(value)
    return dims


def _param(text: str) -> tuple[str, Any]:
    """``image_size=96`` -> ``("image_size", 96)``: the value read as YAML, as the spec file would read it (argparse
    reports the error as a usage error)."""
    from ._errors import ProblemList
    from ._yaml_reader import read_yaml

    name, sep, value = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{excerpt(text)} is not NAME=VALUE (e.g. image_size=96)")
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{excerpt(text)} has no value (write {name}=null for null, {name}='' for '')")
    problems = ProblemList()
    read = read_yaml(value, "--param", problems)
    if read is None or problems.problems:
        why = problems.problems[0].message if problems.problems else "it is not a YAML value"
        raise argparse.ArgumentTypeError(f"{excerpt(text)}: the value is not YAML: {why}")
    return name, read.plain()


def _size(text: str) -> tuple[int, ...]:
    """``8,3,224,224`` -> ``(8, 3, 224, 224)``: one input's size (argparse reports the error as a usage error)."""
    parts = [part.strip() for part in text.replace("x", ",").split(",") if part.strip()]
    if not parts or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 8,3,224,224")
    return tuple(int(part) for part in parts)


def _dpi(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 2400:
        raise argparse.ArgumentTypeError(f"{text!r} is not a resolution from 1 to 2400 (e.g. 300)")
    return int(text)


def _depth(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a depth (1, 2, ...)")
    return int(text)


def parser() -> argparse.ArgumentParser:
    """A new argument parser of the ``hndl`` command: what :func:`main` parses with, and what the reference
    docs show as the command's usage (``python -m hndl.docs``)."""
    top = argparse.ArgumentParser(
        prog="hndl",
        description="Check hndl spec files, and summarise and draw the models they describe.",
        epilog="FILE may be '-' (stdin) or zoo:NAME. Exit status: 0 all good, 1 problems found, 2 usage error.",
    )
    top.add_argument("--version", action="version", version=f"hndl {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")
    imports_help = "let op 'module' import the Python classes it names (only for files you trust)"
    file_help = "a spec file, '-' for stdin, or zoo:NAME"
    dims_help = "sizes of the inputs' symbols, e.g. B=8,H=224,W=224 (without them counts stay symbolic)"
    depth_help = "show subgraph nodes below this depth as one row with subtotals (1: only the top graph's nodes)"
    param_help = (
        "a value for the spec's parameter NAME (its top-level params), read as YAML: image_size=96, "
        "dropout=0.1, act=gelu, depths=[2,2,6,2]; repeat for several"
    )

    check_cmd = commands.add_parser(
        "check",
        help="check spec files and list every problem",
        description="Load and check each spec file (a folder: every .yaml, .yml and .json file in it): structure, "
        "ops, parameters, references, shapes and dtypes. Prints 'FILE: OK (N nodes)' per good file, and every "
        "problem as file:line:col: CODE op 'node': message. Does not import torch unless --build is given.",
    )
    check_cmd.add_argument("files", nargs="+", metavar="FILE", help="spec files or folders, '-' or zoo:NAME")
    check_cmd.add_argument("--allow-imports", action="store_true", help=imports_help)
    check_cmd.add_argument("--param", type=_param, action="append", metavar="NAME=VALUE", help=param_help)
    check_cmd.add_argument(
        "--build",
        action="store_true",
        help="also build the layers on PyTorch's meta device (allocates nothing), to find what only a layer's "
        "constructor rejects; imports torch",
    )

    summary_cmd = commands.add_parser(
        "summary",
        help="a table of the model's nodes, shapes, parameters and multiply-adds",
        description="Check a spec file, build its model on PyTorch's meta device, and print one row per node "
        "(qualified name, op and layer class, the nodes feeding it, output shape, parameters, multiply-adds) and "
        "totals (trainable and non-trainable parameters, buffers, size in MB, multiply-adds, activation memory).",
    )
    summary_cmd.add_argument("file", metavar="FILE", help=file_help)
    summary_cmd.add_argument("--dims", type=_dims, default={}, metavar="B=8,...", help=dims_help)
    summary_cmd.add_argument(
        "--input-size",
        type=_size,
        action="append",
        metavar="8,3,224,224",
        help="an input's size, binding the symbols of its shape (torchinfo's input_size); once per input, in order",
    )
    summary_cmd.add_argument("--depth", type=_depth, default=None, metavar="N", help=depth_help)
    summary_cmd.add_argument(
        "--train",
        action="store_true",
        help="also count one training step's memory: parameters, gradients, optimizer state, and the activations "
        "kept for backward with and without the spec's checkpointing",
    )
    summary_cmd.add_argument(
        "--optimizer",
        default=None,
        metavar="NAME",
        help="the optimizer whose state --train counts: sgd, sgd-momentum, adam, adamw (default; implies --train)",
    )
    summary_cmd.add_argument("--param", type=_param, action="append", metavar="NAME=VALUE", help=param_help)
    summary_cmd.add_argument("--allow-imports", action="store_true", help=imports_help)

    draw_cmd = commands.add_parser(
        "draw",
        help="draw the graph as SVG, PNG, DOT or Mermaid",
        description="Check a spec file and draw its graph: one box per node (op and key settings, output shape, "
        "parameters), the wires, subgraph nodes as clusters. The output's suffix picks the format: .svg and .png "
        "need Graphviz's dot program; .dot/.gv and .mmd are text and need nothing.",
    )
    draw_cmd.add_argument("file", metavar="FILE", help=file_help)
    draw_cmd.add_argument("-o", "--output", required=True, metavar="OUT", help="model.svg, .png, .dot, .gv or .mmd")
    draw_cmd.add_argument("--dims", type=_dims, default={}, metavar="B=8,...", help=dims_help)
    draw_cmd.add_argument("--depth", type=_depth, default=None, metavar="N", help=depth_help)
    draw_cmd.add_argument(
        "--dpi", type=_dpi, default=None, metavar="N", help="a PNG's resolution (default 300, print quality)"
    )
    draw_cmd.add_argument("--param", type=_param, action="append", metavar="NAME=VALUE", help=param_help)
    draw_cmd.add_argument("--allow-imports", action="store_true", help=imports_help)

    ops_cmd = commands.add_parser(
        "ops",
        help="the ops: a list, or one op's parameters, ports and shape rule",
        description="Without NAME, list every registered op (plugins included) with its summary. With NAME, "
        "describe that op: what it builds, its parameters (type, default, bounds, choices), its input and "
        "output ports (shape pattern, dtype rule) and its shape rule, from the registry the checker uses. A "
        "parameter may be computed from the graph's parameters: '$pow(d, -0.5)' (docs/spec-files.md#expressions).",
    )
    ops_cmd.add_argument("name", nargs="?", metavar="NAME", help="an op name, e.g. linear")

    # An nn.Module named by a Python reference instead of FILE (hndl.importer): summary/draw take --input.
    from .importer._cli import add_import_command, add_input_option

    add_input_option(summary_cmd)
    add_input_option(draw_cmd)
    add_import_command(commands, _dims)
    return top


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
