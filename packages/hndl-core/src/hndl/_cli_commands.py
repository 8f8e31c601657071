"""The ``hndl`` command's ``check``, ``summary``, ``draw`` and ``import`` subcommands: each runs on the parsed
arguments, prints through :mod:`hndl._cli_output` and returns the exit status."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Mapping, Sequence
from typing import IO, Any

from ._check import check
from ._cli_loading import (
    at_the_sizes,
    dims_too_large,
    load_graph,
    prepare,
    refuse_clash,
    spec_files,
    too_large_to_build,
)
from ._cli_output import Failed, fail, render, say, shown_name
from ._dims import DimError
from ._errors import HndlError, Problem
from ._meaning import HndlWarning
from ._plan import lower
from .naming import excerpt


def run_check(
    files: Sequence[str],
    *,
    allow_imports: bool,
    build: bool,
    out: IO[str],
    params: Mapping[str, Any] | None = None,
) -> int:
    problems = 0
    failed_files = 0
    for file in spec_files(files):
        try:
            # The checker's warnings are printed below, with the file's other lines, not by Python's warnings.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", HndlWarning)
                if build:
                    graph, model = prepare(file, allow_imports=allow_imports, params=params)
                    count, said = len(model.plan.steps), model.plan.checked.warnings
                else:
                    graph = load_graph(file, allow_imports=allow_imports, params=params)
                    try:
                        checked = check(graph)
                        count, said = len(lower(checked).steps), checked.warnings
                    except HndlError as exc:
                        raise Failed(exc.problems) from None
        except Failed as exc:
            failed_files += 1
            problems += len(exc.problems)
            for problem in exc.problems:
                print(render(problem, file), file=out)
            continue
        for problem in said:
            print(render(problem, file), file=out)
        noted = f", {len(said)} warning{'' if len(said) == 1 else 's'}" if said else ""
        say(f"{shown_name(file)}: OK ({count} node{'' if count == 1 else 's'}{noted})", out)
    if problems:
        noun = "problem" if problems == 1 else "problems"
        where = "file" if failed_files == 1 else "files"
        say(f"Found {problems} {noun} in {failed_files} {where}.", out)
        return 1
    return 0


def run_summary(args: argparse.Namespace, *, out: IO[str]) -> int:
    from ._summary import summary

    try:
        _, model = prepare(args.file, allow_imports=args.allow_imports, args=args, dims=args.dims)
        try:
            sizes = args.input_size
            table = summary(
                model,
                depth=args.depth,
                input_size=None if sizes is None else sizes[0] if len(sizes) == 1 else sizes,
                train=args.train,
                optimizer=args.optimizer,
                **args.dims,
            )
        except DimError as exc:  # the model checked without them: the sizes given make a dim past int64
            raise Failed([dims_too_large(args.dims, exc)]) from None
        except HndlError as exc:
            raise Failed(exc.problems) from None
        except (MemoryError, OverflowError, RuntimeError) as exc:
            if not (args.dims or args.input_size):
                raise
            given = {**args.dims, **({"input_size": args.input_size} if args.input_size else {})}
            cause = Problem("E_INPUT", f"{type(exc).__name__}: {excerpt(str(exc))}")
            raise Failed([too_large_to_build(given, cause)]) from exc
    except Failed as exc:
        return fail(exc, args.file, out)
    say(f"{table.name} ({shown_name(args.file)})", out)
    for line in table.lines()[1:]:
        say(line, out)
    return 0


def run_draw(args: argparse.Namespace, *, out: IO[str]) -> int:
    from ._draw import draw

    try:
        graph = load_graph(args.file, allow_imports=args.allow_imports, args=args)
        refuse_clash(args)
        try:
            dpi = {} if args.dpi is None else {"dpi": args.dpi}
            with at_the_sizes(args.dims):
                draw(graph, args.output, depth=args.depth, **dpi, **args.dims)
        except DimError as exc:
            raise Failed([dims_too_large(args.dims, exc)]) from None
        except HndlError as exc:
            raise Failed(exc.problems) from None
        except OSError as exc:
            raise Failed(
                [Problem("E_INPUT", f"cannot write '{shown_name(args.output)}': {exc.strerror or exc}")]
            ) from None
    except Failed as exc:
        return fail(exc, args.file, out)
    say(f"wrote {shown_name(args.output)}", out)
    return 0


def run_import_command(args: argparse.Namespace, *, out: IO[str]) -> int:
    from .importer._cli import run_import

    try:
        lines = run_import(args)
    except HndlError as exc:
        return fail(Failed(exc.problems), args.reference, out)
    for line in lines:
        say(line, out)
    return 0
