"""``hndl import`` and the ``--input`` option of ``hndl summary`` and ``hndl draw``.

A model is named by a Python reference, ``package.module:name`` or ``path/to/file.py:name``, where ``name`` is an
``nn.Module``, or a callable (a class, a factory such as ``torchvision.models:resnet18``) that returns one when
called with ``--kwargs``. Each ``--input`` gives one positional input's sizes, ints or symbols, and optionally its
dtype: ``B,3,224,224`` or ``B,T:int64``. A symbol makes that dim dynamic under its name; ``--dims B=2`` sets the
example size it is traced at (2, 3, 5, ... by default).

Naming a Python reference runs that code, as ``python -c`` would: it is what the user asked for on the command
line, unlike a spec file, which never runs code.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import HndlError, Problem

__all__ = ["add_import_command", "add_input_option", "import_reference", "run_import"]

_REFERENCE_HELP = "a Python reference: package.module:name or path/to/file.py:name (a module, or a factory of one)"
_VERBOSE_HELP = (
    "when the import fails, print every problem in full (by default problems of one reason are grouped: how "
    "often, in which layers, the first source lines)"
)
_INPUT_HELP = (
    "one positional input's sizes, ints or symbols, optionally with its dtype: B,3,224,224 or B,T:int64 "
    "(repeat for several inputs)"
)


def _input(text: str) -> tuple[tuple[int | str, ...], str | None]:
    """``B,3,224,224`` or ``B,T:int64`` -> ``(("B", 3, 224, 224), None)`` / ``(("B", "T"), "int64")``."""
    shape_text, _, dtype = text.partition(":")
    sizes: list[int | str] = []
    for item in (part.strip() for part in shape_text.split(",")):
        if item.isdigit():
            sizes.append(int(item))
        elif item.isidentifier():
            sizes.append(item)
        else:
            raise argparse.ArgumentTypeError(f"{text!r} is not SIZES[:DTYPE] (e.g. B,3,224,224 or B,T:int64)")
    if dtype and not dtype.isidentifier():
        raise argparse.ArgumentTypeError(f"{dtype!r} is not a dtype name such as int64")
    return tuple(sizes), dtype or None


def _kwargs(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"--kwargs is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("--kwargs must be a JSON object, e.g. '{\"num_classes\": 10}'")
    return value


def add_input_option(command: argparse.ArgumentParser) -> None:
    """``--input`` (and ``--kwargs``) for a command whose FILE may be a Python reference."""
    command.add_argument(
        "--input",
        type=_input,
        action="append",
        metavar="SIZES[:DTYPE]",
        help=_INPUT_HELP + "; with it, FILE is " + _REFERENCE_HELP + ", imported with hndl.from_module",
    )
    command.add_argument(
        "--kwargs", type=_kwargs, default={}, metavar="JSON", help="keyword arguments for the factory FILE names"
    )
    command.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)


def add_import_command(commands: Any, dims_type: Any) -> None:
    """The ``import`` subcommand."""
    cmd = commands.add_parser(
        "import",
        help="import an nn.Module as a spec file",
        description="Trace a torch.nn.Module with torch.export (hndl.from_module) and write its graph as a spec "
        "file: built-in ops where a layer or function has one, module nodes for the rest, nodes named after the "
        "module's layers. Runs the Python code REFERENCE names. Prints what it wrote, the module nodes and the "
        "parameter count.",
    )
    cmd.add_argument("reference", metavar="REFERENCE", help=_REFERENCE_HELP)
    cmd.add_argument("--input", type=_input, action="append", required=True, metavar="SIZES[:DTYPE]", help=_INPUT_HELP)
    cmd.add_argument(
        "--dims", type=dims_type, default={}, metavar="B=2,...", help="example sizes the symbols are traced at"
    )
    cmd.add_argument(
        "--kwargs", type=_kwargs, default={}, metavar="JSON", help="keyword arguments for the factory, as JSON"
    )
    cmd.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)
    cmd.add_argument("-o", "--output", metavar="OUT", help="the spec file to write (default: standard output)")
    cmd.add_argument(
        "--renames",
        metavar="FILE.json",
        help="also write the map from the module's state_dict keys to the built model's (null: unused)",
    )
    cmd.add_argument(
        "--weights",
        metavar="FILE.safetensors",
        help="also write the built model with the module's weights, as hndl.save does",
    )


def _resolve(reference: str) -> Any:
    """The object ``package.module:name`` or ``file.py:name`` names."""
    import importlib
    import importlib.util
    import sys

    location, sep, attr = reference.rpartition(":")
    if not sep or not location or not all(part.isidentifier() for part in attr.split(".")):
        raise HndlError(
            Problem(
                "E_IMPORT",
                f"{reference!r} is not a Python reference",
                expected="package.module:name or path/to/file.py:name",
                actual=reference,
            )
        )
    try:
        if location.endswith(".py"):
            path = Path(location)
            if not path.is_file():
                raise HndlError(Problem("E_IMPORT", f"no such file: {location!r}"))
            spec = importlib.util.spec_from_file_location(path.stem, path)
            if spec is None or spec.loader is None:
                raise HndlError(Problem("E_IMPORT", f"{location!r} cannot be loaded as a Python module"))
            found: Any = importlib.util.module_from_spec(spec)
            sys.modules.setdefault(path.stem, found)
            spec.loader.exec_module(found)
        else:
            found = importlib.import_module(location)
        for part in attr.split("."):
            found = getattr(found, part)
    except HndlError:
        raise
    except Exception as exc:
        raise HndlError(Problem("E_IMPORT", f"cannot import {reference!r}: {type(exc).__name__}: {exc}")) from exc
    return found


def import_reference(
    reference: str,
    inputs: Sequence[tuple[tuple[int | str, ...], str | None]],
    dims: dict[str, int],
    kwargs: dict[str, Any],
    *,
    verbose: bool = False,
) -> tuple[Any, Any, tuple[Any, ...]]:
    """The module ``reference`` names (made with ``kwargs`` if it is a factory), its imported graph, and the
    example inputs it was traced on.

    Raises:
        HndlError: E_IMPORT for a reference that names no module, or an import that fails; unless ``verbose``,
            the problems of a failed import that would not fit on a screen come grouped by reason (what
            ``--verbose`` turns off). E_INPUT for example inputs too large to make.
    """
    import torch

    from . import example_inputs, from_module
    from ._messages import shown

    found = _resolve(reference)
    if isinstance(found, torch.nn.Module):
        module = found
    elif callable(found):
        try:
            module = found(**kwargs)
        except Exception as exc:
            raise HndlError(
                Problem("E_IMPORT", f"{reference}(**{kwargs}) failed: {type(exc).__name__}: {exc}")
            ) from exc
        if not isinstance(module, torch.nn.Module):
            raise HndlError(Problem("E_IMPORT", f"{reference}() returned a {type(module).__name__}, not an nn.Module"))
    else:
        raise HndlError(Problem("E_IMPORT", f"{reference} is a {type(found).__name__}, not an nn.Module or a factory"))
    args, dynamic = example_inputs(list(inputs), dims)
    try:
        graph = from_module(module, *args, dynamic_shapes=dynamic)
    except HndlError as exc:
        if verbose:
            raise
        problems = shown(exc.problems, exc.title)
        if len(problems) < len(exc.problems):
            # The command counts what it prints; the last hint says what the groups stand for.
            last = problems[-1]
            note = f"these {len(problems)} group {len(exc.problems)} problems by reason; --verbose lists each"
            problems[-1] = dataclasses.replace(last, hint=f"{last.hint}; {note}" if last.hint else note)
        raise HndlError(problems, title=exc.title) from None
    return module, graph, args


def run_import(args: argparse.Namespace) -> list[str]:
    """``hndl import``: write what ``args`` asks for; returns the lines to print."""
    from .. import summary
    from .._spec_dumper import dumps

    module, graph, _ = import_reference(args.reference, args.input, args.dims, args.kwargs, verbose=args.verbose)
    text = dumps(graph)
    written = []
    if args.output:
        _write(args.output, text)
        written.append(args.output)
    if args.renames:
        _write(args.renames, json.dumps(graph.renames, indent=1) + "\n")
        written.append(args.renames)
    if args.weights:
        import hndl

        model = hndl.build(graph)
        model.load_state_dict(graph.convert(module.state_dict()))
        try:
            hndl.save(model, args.weights)
        except OSError as exc:
            raise HndlError(Problem("E_INPUT", f"cannot write {args.weights!r}: {exc.strerror or exc}")) from None
        written.append(args.weights)
    table = summary(graph)
    total = table.trainable_params + table.non_trainable_params
    status = [f"wrote {path}" for path in written]
    count = len(graph.fallbacks)
    status.append(
        f"{graph.name}: {len(graph.nodes)} nodes ({count} module node{'' if count == 1 else 's'}), {total:,} parameters"
    )
    status.extend(f"module node {f.node} ({f.cls}): {f.reason}" for f in graph.fallbacks)
    status.extend(f"note: {note}" for note in graph.notes)
    if args.output:
        return status
    # The spec goes to standard output, so what would be said about it goes there as YAML comments.
    return [*text.splitlines(), *(f"# {line}" for line in status)]


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise HndlError(Problem("E_INPUT", f"cannot write {path!r}: {exc.strerror or exc}")) from None
