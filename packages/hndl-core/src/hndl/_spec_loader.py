"""Loading spec files: :func:`load` (a path) and :func:`loads` (text) turn a spec into a :class:`~hndl.Graph`.

This module is where a spec comes from: the file read (refusing text passed as a path, FIFOs, sockets and
files past the size limit), the bytes decoded, and every problem raised once in one :class:`~hndl.HndlError`.
The text is read by :mod:`hndl._yaml_reader` into located values, and :mod:`hndl._spec_builder` checks the
*structure* of the spec (keys, types, names, version) and builds the graphs through the ``Graph`` API. What
needs the op registry or the whole graph (unknown ops, parameter values, references, cycles, shapes) is left
to :func:`hndl.check`, which reports it at the locations the loader attached to nodes, node keys, inputs and
outputs.
"""

from __future__ import annotations

import os
from typing import Any

from ._errors import HndlError, Problem, ProblemList
from ._graph import Graph
from ._spec_builder import TEXT_LABEL, SpecBuilder
from ._yaml_reader import MAX_TEXT, read_yaml
from .naming import excerpt, printable

__all__ = ["load", "loads", "looks_like_text"]

_LOADS_HINT = "hndl.load takes a path; pass spec text to hndl.loads"


def load(path: str | os.PathLike[str], *, allow_imports: bool = False) -> Graph:
    """Read the spec file at ``path`` into a :class:`~hndl.Graph`.

    ``load`` only ever reads the file it is given; spec *text* goes to :func:`loads`. A string that is
    plainly text (it has a line break, or starts with ``{`` or ``hndl:``) is refused with that hint, so a
    service that receives text can never be made to read a local file because the text named one.

    Args:
        path: the file, as ``str`` or ``os.PathLike``. (``hndl.load`` also takes ``"zoo:NAME"``, which it sends to
            :func:`hndl.zoo.get` before it gets here: the zoo is built on this loader, so the loader does not
            import it.)
        allow_imports: whether the graph may use op ``module``, which imports a Python class by name when the
            model is built. Leave it off for files you did not write.

    Returns:
        The graph, with ``graph.source`` set to the path and its subgraphs under ``graph.graphs``. Every
        input, node, node key and output carries its ``file:line:col``. Ops, parameter values and references
        are checked later, by :func:`hndl.check` and :func:`hndl.build`.

    Raises:
        HndlError: E_SPEC for a path that names no file or cannot be read, text passed instead of a path, and
            every problem with the spec's structure (see :func:`loads`).
    """
    file = _path_of(path)
    try:
        # At most one byte past the limit: enough to know the file is too long, and /dev/zero ends too.
        with _open_file(file) as stream:
            data = stream.read(MAX_TEXT + 1)
    except _NotAFile as exc:
        raise HndlError(
            Problem("E_SPEC", f"spec file {_shown_path(file)} is {exc}, not a file", hint=_STDIN_HINT)
        ) from None
    except FileNotFoundError:
        raise HndlError(
            Problem("E_SPEC", f"no such file: {_shown_path(file)}", hint=_missing_file_hint(file))
        ) from None
    except IsADirectoryError:
        raise HndlError(Problem("E_SPEC", f"spec file {_shown_path(file)} is a directory")) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        reason = getattr(exc, "strerror", None) or str(exc)
        raise HndlError(Problem("E_SPEC", f"cannot read spec file {_shown_path(file)}: {reason}")) from None
    if len(data) > MAX_TEXT:
        raise HndlError(
            Problem("E_SPEC", f"spec file {_shown_path(file)} is longer than {MAX_TEXT:,} bytes"),
        )
    return _load_text(_decode(data, file), file, allow_imports)


def loads(text: str | bytes, *, allow_imports: bool = False) -> Graph:
    """Read spec text (YAML, or JSON with the same structure) into a :class:`~hndl.Graph`.

    Reading never imports or executes anything and never touches the file system. Locations read
    ``<string>:line:col``.

    Args:
        text: the spec, as ``str`` or UTF-8 ``bytes``.
        allow_imports: as for :func:`load`.

    Raises:
        HndlError: listing every problem with the spec's structure: E_SPEC for bytes that are not UTF-8, YAML
            syntax, wrong types, unknown or missing keys and a bad format version; E_NAME for invalid or
            duplicate names.
    """
    if isinstance(text, (bytes, bytearray)):
        if len(text) > MAX_TEXT:
            raise HndlError(Problem("E_SPEC", f"the spec is longer than {MAX_TEXT:,} bytes"))
        text = _decode(bytes(text), TEXT_LABEL)
    elif not isinstance(text, str):
        raise HndlError(
            Problem(
                "E_SPEC",
                f"hndl.loads takes the spec text (str or bytes), got {type(text).__name__}",
                hint="pass a path to hndl.load" if isinstance(text, os.PathLike) else None,
            )
        )
    return _load_text(text, TEXT_LABEL, allow_imports)


_STDIN_HINT = "hndl reads a spec from a file, or from standard input as '-' (`hndl check -`, hndl.loads(text))"


class _NotAFile(OSError):
    """The path names a FIFO or a socket (the message says which)."""


def _open_file(file: str) -> Any:
    """``file`` opened for reading in binary, refusing a FIFO or a socket.

    Opened without blocking, then looked at: opening a FIFO that no process writes waits forever, and one that
    a process writes to could feed hndl for as long as it likes. A regular file or a device (``/dev/zero``,
    whose reads the caller bounds) reads as usual.
    """
    import stat

    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            raise _NotAFile("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def looks_like_text(path: str) -> bool:
    """Whether a string given as a path is plainly spec text: a line break, or a leading ``{`` or ``hndl:``."""
    return "\n" in path or "\r" in path or path.lstrip().startswith(("{", "hndl:"))


def _path_of(path: Any) -> str:
    """The file name :func:`load` reads, or an E_SPEC for something that is not a path."""
    if isinstance(path, os.PathLike):
        return os.fsdecode(os.fspath(path))
    if isinstance(path, str):
        if looks_like_text(path):
            raise HndlError(Problem("E_SPEC", "hndl.load was given spec text, not a path", hint=_LOADS_HINT))
        return path
    hint = _LOADS_HINT if isinstance(path, (bytes, bytearray)) else None
    raise HndlError(
        Problem("E_SPEC", f"hndl.load takes a path (str or os.PathLike), got {type(path).__name__}", hint=hint)
    )


def _shown_path(file: str) -> str:
    # A path is the caller's own argument, so it is shown in full unless absurdly long; escaped either way.
    return excerpt(file, limit=240)


def _missing_file_hint(file: str) -> str | None:
    for suffix in (".yaml", ".yml", ".json"):
        try:
            if os.path.isfile(file + suffix):
                return f"did you mean {_shown_path(file + suffix)}?"
        except (ValueError, OSError):  # a name too long for the file system
            return None
    return None


def _decode(data: bytes, file: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise HndlError(
            Problem(
                "E_SPEC",
                f"the spec is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}",
                location=printable(file) if file != TEXT_LABEL else None,
            ),
            title=f"spec {_shown_path(file)}",
        ) from None


def _load_text(text: str, file: str, allow_imports: bool) -> Graph:
    problems = ProblemList()
    # Locations name the file escaped: a file name with a line break or an escape code stays one harmless line.
    root = read_yaml(text, printable(file), problems)
    graph = None
    if root is not None:
        graph = SpecBuilder(file, problems, allow_imports=bool(allow_imports)).root(root)
    problems.raise_if_any(title=f"spec {_shown_path(file)}")
    assert graph is not None
    return graph
