"""What the ``hndl`` command's subcommands read: the graph a FILE argument names (a path, ``-``, ``zoo:NAME`` or an
imported nn.Module) with its ``--param`` values, the files of a folder, and the model built on the meta device at
the sizes of ``--dims``; every failure is a :class:`~hndl._cli_output.Failed` with the problems to print.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from ._cli_output import Failed, shown_name
from ._dims import DimError
from ._errors import HndlError, Problem
from ._graph import Graph
from ._param_overrides import override_params
from ._spec_loader import load, loads
from .naming import excerpt

SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def given_params(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--param`` values of ``args`` as a mapping (a name given twice: the last value), ``None`` without."""
    given = getattr(args, "param", None)
    return None if not given else dict(given)


def load_graph(
    file: str,
    *,
    allow_imports: bool,
    args: argparse.Namespace | None = None,
    params: Mapping[str, Any] | None = None,
) -> Graph:
    """The graph ``file`` names: a path, ``-`` (stdin) or ``zoo:NAME``; with ``--input`` in ``args``, a Python
    reference to an nn.Module, imported. ``params`` (``--param``; read from ``args`` when it is given) override
    the spec's parameters, as ``hndl.load``'s do. Raises :class:`Failed`."""
    if args is not None:
        params = given_params(args)
    try:
        return _configured(_read(file, allow_imports=allow_imports, args=args), file, params)
    except HndlError as exc:
        raise Failed(exc.problems) from None


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


def _zoo(name: str) -> Graph:
    """``hndl.zoo.get(name)``; the zoo is looked up at run time, since an install may not have it."""
    import importlib

    try:
        zoo = importlib.import_module(f"{__package__}.zoo")
    except ModuleNotFoundError:
        raise HndlError(Problem("E_SPEC", f"no model zoo in this install, so 'zoo:{name}' names nothing")) from None
    graph: Graph = zoo.get(name)
    return graph


def spec_files(args: Sequence[str]) -> Iterator[str]:
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


def prepare(
    file: str,
    *,
    allow_imports: bool,
    args: argparse.Namespace | None = None,
    dims: Mapping[str, int] | None = None,
    params: Mapping[str, Any] | None = None,
) -> tuple[Graph, Any]:
    """Load ``file`` and build its model on the meta device, at the sizes ``dims`` give its size parameters
    (SPEC 8.5.4); raises :class:`Failed` with every problem."""
    graph = load_graph(file, allow_imports=allow_imports, args=args, params=params)
    from ._graph_params import with_sizes
    from .torch._meta import build_on_meta

    sized = with_sizes(graph, dims or {})
    if sized is not graph and args is not None:
        refuse_clash(args)
    try:
        with at_the_sizes(dims):
            return graph, build_on_meta(sized)
    except HndlError as exc:
        if sized is not graph and _builds(graph):  # it builds at the spec's own sizes: the sizes given broke it
            raise Failed([too_large_to_build(dims or {}, exc.problems[0])]) from None
        raise Failed(exc.problems) from None


def _builds(graph: Graph) -> bool:
    """Whether ``graph`` builds on the meta device as it is written (to tell a failure the sizes given cause)."""
    from .torch._meta import build_on_meta

    try:
        build_on_meta(graph)
    except (HndlError, MemoryError, OverflowError, RuntimeError):
        return False
    return True


class at_the_sizes:  # a context manager, named as the `with` line reads
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
            raise Failed([too_large_to_build(self.dims, cause)]) from exc


def refuse_clash(args: argparse.Namespace) -> None:
    """E_INPUT for a size parameter given two values, one by ``--param`` and another by ``--dims``."""
    params, dims = given_params(args) or {}, getattr(args, "dims", None) or {}
    clashes = [name for name in params.keys() & dims.keys() if params[name] != dims[name]]
    if clashes:
        name = sorted(clashes)[0]
        raise Failed(
            [
                Problem(
                    "E_INPUT",
                    f"{name!r} is given two sizes: --param {name}={excerpt(params[name])} and --dims "
                    f"{name}={dims[name]}",
                    hint="give it once",
                )
            ]
        )


def dims_too_large(dims: Mapping[str, int], exc: DimError) -> Problem:
    """E_INPUT: the sizes of ``--dims`` make a dim of the graph larger than any tensor's (2**63-1)."""
    given = ",".join(f"{name}={size}" for name, size in dims.items())
    return Problem("E_INPUT", f"the sizes given (--dims {shown_name(given)}) make a dim too large: {exc}")


def too_large_to_build(dims: Mapping[str, Any], cause: Problem) -> Problem:
    """E_INPUT: the model (which builds at the spec's own sizes) cannot be built or counted at the sizes of
    ``--dims``; ``cause`` says what failed, and where."""
    given = ",".join(f"{name}={size}" for name, size in dims.items() if name != "input_size")
    shown = f"--dims {shown_name(given)}" if given else ""
    if "input_size" in dims:
        sizes = " ".join(",".join(map(str, s)) for s in dims["input_size"])
        shown = f"{shown} --input-size {shown_name(sizes)}".strip()
    where = f"{cause.op} {cause.node!r}: " if cause.node and cause.op else f"{cause.node!r}: " if cause.node else ""
    return Problem(
        "E_INPUT",
        f"the model cannot be built at the sizes given ({shown}): {where}{cause.message}",
        location=cause.location,
        hint="give smaller sizes; hndl summary and draw build on PyTorch's meta device, but a tensor still has "
        "at most 2**63-1 bytes",
    )
