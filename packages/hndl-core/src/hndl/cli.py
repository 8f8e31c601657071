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

Everything printed passes through :func:`_say` (and problems through :func:`_render`), which escape control
characters: names, values and file names come from spec files that may be hostile, and an escape code or a line
break in one must neither reach the terminal nor forge a line of output (``other.yaml: OK``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from . import __version__
from ._check import check
from ._dims import DimError
from ._errors import HndlError, Problem
from ._graph import Graph
from ._hints import EXPRESSIONS_DOC
from ._meaning import HndlWarning
from ._param_overrides import override_params
from ._plan import lower
from ._resolve import IMPORTS_HINT
from ._spec_loader import load, loads
from .naming import excerpt, printable, suggestion

__all__ = ["main", "parser"]

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
#: How much of a file name given on the command line (or a zoo: name) is echoed: a name is the user's own
#: argument, but it may come from a script, and 100,000 characters of it help no one.
SHOWN_NAME = 240


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
            return _check_files(
                args.files, allow_imports=args.allow_imports, build=args.build, out=out, params=_params(args)
            )
        if args.command == "summary":
            return _summary(args, out=out)
        if args.command == "ops":
            return _ops(args.name, out=out)
        if args.command == "import":
            return _import(args, out=out)
        return _draw(args, out=out)
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


def _params(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--param`` values of ``args`` as a mapping (a name given twice: the last value), ``None`` without."""
    given = getattr(args, "param", None)
    return None if not given else dict(given)


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


# --- loading ------------------------------------------------------------------------------------------------


class _Failed(Exception):
    """A file could not be loaded, checked or built; ``problems`` say why."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(problems)
        self.problems = problems


def _load(
    file: str,
    *,
    allow_imports: bool,
    args: argparse.Namespace | None = None,
    params: Mapping[str, Any] | None = None,
) -> Graph:
    """The graph ``file`` names: a path, ``-`` (stdin) or ``zoo:NAME``; with ``--input`` in ``args``, a Python
    reference to an nn.Module, imported. ``params`` (``--param``; read from ``args`` when it is given) override
    the spec's parameters, as ``hndl.load``'s do. Raises :class:`_Failed`."""
    if args is not None:
        params = _params(args)
    try:
        return _configured(_read(file, allow_imports=allow_imports, args=args), file, params)
    except HndlError as exc:
        raise _Failed(exc.problems) from None


def _configured(graph: Graph, file: str, params: Mapping[str, Any] | None) -> Graph:
    """``graph`` with the ``--param`` values set (``hndl.load``'s ``params``): checked, all or none."""
    return override_params(graph, params, what=file.partition("@")[0] if file.startswith("zoo:") else None)


def _read(file: str, *, allow_imports: bool, args: argparse.Namespace | None) -> Graph:
    """The graph ``file`` names, as it is written; raises HndlError."""
    if args is not None and getattr(args, "input", None):
        from .importer._cli import import_reference

        return import_reference(file, args.input, args.dims, args.kwargs, verbose=args.verbose)[1]
    if file == "-":
        return loads(sys.stdin.read(), allow_imports=allow_imports)
    if file.startswith("zoo:"):
        return _zoo(file[len("zoo:") :])
    # A Path, so that a name without a .yaml suffix is never mistaken for spec text.
    return load(Path(file), allow_imports=allow_imports)


def _from_the_command(problem: Problem) -> Problem:
    """``problem`` as the command's user reads it: a hint that names an argument of the Python API names the
    command's option instead."""
    if problem.hint == IMPORTS_HINT:
        return dataclasses.replace(problem, hint="pass --allow-imports if you trust this file")
    return problem


def _zoo(name: str) -> Graph:
    """``hndl.zoo.get(name)``; the zoo is looked up at run time, since an install may not have it."""
    import importlib

    try:
        zoo = importlib.import_module(f"{__package__}.zoo")
    except ModuleNotFoundError:
        raise HndlError(Problem("E_SPEC", f"no model zoo in this install, so 'zoo:{name}' names nothing")) from None
    graph: Graph = zoo.get(name)
    return graph


def _files(args: Sequence[str]) -> Iterator[str]:
    """The files to check: each argument, a folder replaced by the spec files under it (sorted)."""
    for arg in args:
        path = Path(arg)
        if arg != "-" and not arg.startswith("zoo:") and _is_dir(path):
            yield from sorted(str(p) for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file())
        else:
            yield arg


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):  # a name too long for the file system, a NUL: loading it says so
        return False


def _shown(name: str) -> str:
    """A file name (or ``zoo:`` name) from the command line as echoed: escaped, and cut to :data:`SHOWN_NAME`
    characters with a visible mark."""
    text = printable(name)
    return text if len(text) <= SHOWN_NAME else text[: SHOWN_NAME - 3] + "..."


def _prepare(
    file: str,
    *,
    allow_imports: bool,
    args: argparse.Namespace | None = None,
    dims: Mapping[str, int] | None = None,
    params: Mapping[str, Any] | None = None,
) -> tuple[Graph, Any]:
    """Load ``file`` and build its model on the meta device, at the sizes ``dims`` give its size parameters
    (SPEC 8.5.4); raises :class:`_Failed` with every problem."""
    graph = _load(file, allow_imports=allow_imports, args=args, params=params)
    from ._graph_params import with_sizes
    from .torch._meta import build_on_meta

    sized = with_sizes(graph, dims or {})
    if sized is not graph and args is not None:
        _refuse_clash(args)
    try:
        with _at_the_sizes(dims):
            return graph, build_on_meta(sized)
    except HndlError as exc:
        if sized is not graph and _builds(graph):  # it builds at the spec's own sizes: the sizes given broke it
            raise _Failed([_too_large_to_build(dims or {}, exc.problems[0])]) from None
        raise _Failed(exc.problems) from None


def _builds(graph: Graph) -> bool:
    """Whether ``graph`` builds on the meta device as it is written (to tell a failure the sizes given cause)."""
    from .torch._meta import build_on_meta

    try:
        build_on_meta(graph)
    except (HndlError, MemoryError, OverflowError, RuntimeError):
        return False
    return True


class _at_the_sizes:  # a context manager, named as the `with` line reads
    """Turns a failure to allocate or compute at the sizes of ``--dims`` (a ``MemoryError``, an allocator's
    ``RuntimeError``, an ``OverflowError``) into E_INPUT naming them, the cause chained; without sizes given, the
    exception passes as it is."""

    def __init__(self, dims: Mapping[str, int] | None) -> None:
        self.dims = dims or {}

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if self.dims and isinstance(exc, (MemoryError, OverflowError, RuntimeError)):
            cause = Problem("E_INPUT", f"{type(exc).__name__}: {excerpt(str(exc))}")
            raise _Failed([_too_large_to_build(self.dims, cause)]) from exc


def _refuse_clash(args: argparse.Namespace) -> None:
    """E_INPUT for a size parameter given two values, one by ``--param`` and another by ``--dims``."""
    params, dims = _params(args) or {}, getattr(args, "dims", None) or {}
    clashes = [name for name in params.keys() & dims.keys() if params[name] != dims[name]]
    if clashes:
        name = sorted(clashes)[0]
        raise _Failed(
            [
                Problem(
                    "E_INPUT",
                    f"{name!r} is given two sizes: --param {name}={excerpt(params[name])} and --dims "
                    f"{name}={dims[name]}",
                    hint="give it once",
                )
            ]
        )


def _fail(exc: _Failed, file: str, out: IO[str]) -> int:
    for problem in exc.problems:
        print(_render(problem, file), file=out)
    noun = "problem" if len(exc.problems) == 1 else "problems"
    _say(f"Found {len(exc.problems)} {noun} in 1 file.", out)
    return 1


def _say(text: str, out: IO[str]) -> None:
    """Print one line of output, control characters escaped (see the module docstring)."""
    print(printable(text), file=out)


def _render(problem: Problem, file: str) -> str:
    """A problem as printed: its usual layout (headline, then indented lines), every field escaped first, so the
    layout's own line breaks are the only ones; a location's file name is cut as :func:`_shown` cuts names."""
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
    return text if problem.location else f"{_shown(file)}: {text}"


def _shown_location(location: str) -> str:
    """``file:line:col`` with the file part cut as :func:`_shown` cuts names (the numbers kept)."""
    parts = location.rsplit(":", 2)
    if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
        return f"{_shown(parts[0])}:{parts[1]}:{parts[2]}"
    return _shown(location)


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


# --- check -------------------------------------------------------------------------------------------------


def _check_files(
    files: Sequence[str],
    *,
    allow_imports: bool,
    build: bool,
    out: IO[str],
    params: Mapping[str, Any] | None = None,
) -> int:
    problems = 0
    failed_files = 0
    for file in _files(files):
        try:
            # The checker's warnings are printed below, with the file's other lines, not by Python's warnings.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", HndlWarning)
                if build:
                    graph, model = _prepare(file, allow_imports=allow_imports, params=params)
                    count, said = len(model.plan.steps), model.plan.checked.warnings
                else:
                    graph = _load(file, allow_imports=allow_imports, params=params)
                    try:
                        checked = check(graph)
                        count, said = len(lower(checked).steps), checked.warnings
                    except HndlError as exc:
                        raise _Failed(exc.problems) from None
        except _Failed as exc:
            failed_files += 1
            problems += len(exc.problems)
            for problem in exc.problems:
                print(_render(problem, file), file=out)
            continue
        for problem in said:
            print(_render(problem, file), file=out)
        noted = f", {len(said)} warning{'' if len(said) == 1 else 's'}" if said else ""
        _say(f"{_shown(file)}: OK ({count} node{'' if count == 1 else 's'}{noted})", out)
    if problems:
        noun = "problem" if problems == 1 else "problems"
        where = "file" if failed_files == 1 else "files"
        _say(f"Found {problems} {noun} in {failed_files} {where}.", out)
        return 1
    return 0


# --- summary and draw ---------------------------------------------------------------------------------------


def _summary(args: argparse.Namespace, *, out: IO[str]) -> int:
    from ._summary import summary

    try:
        _, model = _prepare(args.file, allow_imports=args.allow_imports, args=args, dims=args.dims)
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
            raise _Failed([_dims_too_large(args.dims, exc)]) from None
        except HndlError as exc:
            raise _Failed(exc.problems) from None
        except (MemoryError, OverflowError, RuntimeError) as exc:
            if not (args.dims or args.input_size):
                raise
            given = {**args.dims, **({"input_size": args.input_size} if args.input_size else {})}
            cause = Problem("E_INPUT", f"{type(exc).__name__}: {excerpt(str(exc))}")
            raise _Failed([_too_large_to_build(given, cause)]) from exc
    except _Failed as exc:
        return _fail(exc, args.file, out)
    _say(f"{table.name} ({_shown(args.file)})", out)
    for line in table.lines()[1:]:
        _say(line, out)
    return 0


def _draw(args: argparse.Namespace, *, out: IO[str]) -> int:
    from ._draw import draw

    try:
        graph = _load(args.file, allow_imports=args.allow_imports, args=args)
        _refuse_clash(args)
        try:
            dpi = {} if args.dpi is None else {"dpi": args.dpi}
            with _at_the_sizes(args.dims):
                draw(graph, args.output, depth=args.depth, **dpi, **args.dims)
        except DimError as exc:
            raise _Failed([_dims_too_large(args.dims, exc)]) from None
        except HndlError as exc:
            raise _Failed(exc.problems) from None
        except OSError as exc:
            raise _Failed(
                [Problem("E_INPUT", f"cannot write '{_shown(args.output)}': {exc.strerror or exc}")]
            ) from None
    except _Failed as exc:
        return _fail(exc, args.file, out)
    _say(f"wrote {_shown(args.output)}", out)
    return 0


def _dims_too_large(dims: Mapping[str, int], exc: DimError) -> Problem:
    """E_INPUT: the sizes of ``--dims`` make a dim of the graph larger than any tensor's (2**63-1)."""
    given = ",".join(f"{name}={size}" for name, size in dims.items())
    return Problem("E_INPUT", f"the sizes given (--dims {_shown(given)}) make a dim too large: {exc}")


def _too_large_to_build(dims: Mapping[str, Any], cause: Problem) -> Problem:
    """E_INPUT: the model (which builds at the spec's own sizes) cannot be built or counted at the sizes of
    ``--dims``; ``cause`` says what failed, and where."""
    given = ",".join(f"{name}={size}" for name, size in dims.items() if name != "input_size")
    shown = f"--dims {_shown(given)}" if given else ""
    if "input_size" in dims:
        sizes = " ".join(",".join(map(str, s)) for s in dims["input_size"])
        shown = f"{shown} --input-size {_shown(sizes)}".strip()
    where = f"{cause.op} {cause.node!r}: " if cause.node and cause.op else f"{cause.node!r}: " if cause.node else ""
    return Problem(
        "E_INPUT",
        f"the model cannot be built at the sizes given ({shown}): {where}{cause.message}",
        location=cause.location,
        hint="give smaller sizes; hndl summary and draw build on PyTorch's meta device, but a tensor still has "
        "at most 2**63-1 bytes",
    )


# --- ops ----------------------------------------------------------------------------------------------------


def _ops(name: str | None, *, out: IO[str]) -> int:
    """``hndl ops``: every op with its summary, or one op described from its declaration (the facts its
    reference page shows, read from the same :class:`~hndl.OpDef`)."""
    from ._registry import registry

    if name is None:
        ops = sorted(registry, key=lambda o: o.name)
        width = max((len(o.name) for o in ops), default=0)
        for o in ops:
            _say(f"{o.name.ljust(width)}  {o.summary}".rstrip(), out)
        _say(f"{len(ops)} ops; `hndl ops NAME` describes one", out)
        _say(
            f"a parameter may be computed from the graph's parameters, '$d // 2', '$pow(d, -0.5)': {EXPRESSIONS_DOC}",
            out,
        )
        return 0
    opdef = registry.find(name)
    if opdef is None:
        hint = suggestion(name, registry.names()) or "`hndl ops` lists them"
        return _fail(_Failed([Problem("E_OP", f"unknown op {excerpt(name)}", hint=hint)]), "hndl ops", out)
    for line in _describe_op(opdef):
        _say(line, out)
    return 0


def _describe_op(o: Any) -> list[str]:
    """One op's description as lines: summary and documentation, what it builds, a table of parameters, the
    ports and the shape rule (:meth:`~hndl.OpDef.describe_inference`)."""
    lines = [f"{o.name}: {o.summary}" if o.summary else o.name]
    body = o.doc.strip().splitlines()[1:]
    if body:
        lines += [line.rstrip() for line in _dedent(body)]
    lines += ["", f"builds: {o.module or 'not declared'}"]
    if o.params:
        rows = [[p.name, p.type.name, p.describe_default(), p.describe_constraints(), p.doc] for p in o.params]
        lines += ["", "parameters:", *_columns(["name", "type", "default", "constraints", "description"], rows)]
    else:
        lines += ["", "parameters: none"]
    ports = []
    for direction, port in [("input", p) for p in o.inputs] + [("output", p) for p in o.outputs]:
        notes = " (one or more)" * port.variadic + " (optional)" * port.optional
        notes += f" (when {port.when})" if port.when is not None else ""
        shape = str(port.pattern) if port.pattern is not None else "any"
        ports.append([port.name + notes, direction, shape, port.dtype, port.doc])
    lines += ["", "ports:", *_columns(["port", "direction", "shape", "dtype", "description"], ports)]
    if o.count_outputs is not None:
        lines.append("  the number of outputs depends on the parameters; refer to them by index (node.0)")
    lines += ["", f"shape rule: {o.describe_inference().strip()}"]
    return lines


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:] for line in lines]


def _columns(header: list[str], rows: list[list[str]]) -> list[str]:
    """``rows`` under ``header`` as aligned, indented text columns (the last column is not padded)."""
    table = [header, *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    return ["  " + "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]).rstrip() for row in table]


def _import(args: argparse.Namespace, *, out: IO[str]) -> int:
    from .importer._cli import run_import

    try:
        lines = run_import(args)
    except HndlError as exc:
        return _fail(_Failed(exc.problems), args.reference, out)
    for line in lines:
        _say(line, out)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
