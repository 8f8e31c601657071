"""Loading spec files: :func:`load` (a path) and :func:`loads` (text) turn a spec into a :class:`~hndl.Graph`.

The text is read by :mod:`hndl._yaml_reader` into located values; this module checks the *structure* of the
spec (keys, types, names, version) and builds the graphs through the ``Graph`` API, reporting every problem
it finds in one :class:`~hndl.HndlError`. What needs the op registry or the whole graph (unknown ops,
parameter values, references, cycles, shapes) is left to :func:`hndl.check`, which reports it at the locations
the loader attached to nodes, node keys, inputs and outputs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._contracts import Contract, ShapePattern, parse_dtype_rule
from ._errors import HndlError, Problem, ProblemList
from ._graph import Graph
from ._graph_params import is_reference
from ._spec_dumper import FORMAT_VERSION, NODE_KEYS, flow_yaml
from ._yaml_reader import MAX_TEXT, Located, describe, read_yaml
from .naming import NAME_RE, excerpt, printable, suggestion

__all__ = ["load", "loads"]

ROOT_KEYS = ("hndl", "name", "kind", "params", "inputs", "nodes", "outputs", "graphs")
SUBGRAPH_KEYS = ("params", "inputs", "nodes", "outputs")
REQUIRED_KEYS = ("inputs", "nodes", "outputs")
INPUT_KEYS = ("shape", "dtype", "device", "ranges")
#: The keys of a named output (``outputs: {logits: {from: head, shape: [B, 10]}}``): what it returns, and its contract
#: in the words an input's contract uses.
OUTPUT_KEYS = ("from", "shape", "dtype")

_TEXT_LABEL = "<string>"
_MISSING_HINTS = {
    "hndl": "start the file with 'hndl: 1' (the format version)",
    "inputs": "add inputs: {x: {shape: [B, 784]}}",
    "nodes": "add nodes: {name: {op: ..., in: ...}}",
    "outputs": "add outputs: [name of the node that makes the result]",
}
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
        text = _decode(bytes(text), _TEXT_LABEL)
    elif not isinstance(text, str):
        raise HndlError(
            Problem(
                "E_SPEC",
                f"hndl.loads takes the spec text (str or bytes), got {type(text).__name__}",
                hint="pass a path to hndl.load" if isinstance(text, os.PathLike) else None,
            )
        )
    return _load_text(text, _TEXT_LABEL, allow_imports)


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
                location=printable(file) if file != _TEXT_LABEL else None,
            ),
            title=f"spec {_shown_path(file)}",
        ) from None


def _load_text(text: str, file: str, allow_imports: bool) -> Graph:
    problems = ProblemList()
    # Locations name the file escaped: a file name with a line break or an escape code stays one harmless line.
    root = read_yaml(text, printable(file), problems)
    graph = None
    if root is not None:
        graph = _SpecBuilder(file, problems, allow_imports=bool(allow_imports)).root(root)
    problems.raise_if_any(title=f"spec {_shown_path(file)}")
    assert graph is not None
    return graph


#: The longest message the loader passes on from the contract parser, which quotes the entry it could not read.
_LONGEST_MESSAGE = 300


def _bounded(message: str) -> str:
    """A message cut to a bounded length: one quoting a long shape entry or dtype would otherwise echo all of it."""
    return message if len(message) <= _LONGEST_MESSAGE else message[: _LONGEST_MESSAGE - 3] + "..."


def _is_name(value: Any) -> bool:
    return isinstance(value, str) and NAME_RE.match(value) is not None


class _SpecBuilder:
    """Checks the structure of located values and builds the graphs, adding problems as it goes."""

    def __init__(self, file: str, problems: ProblemList, *, allow_imports: bool) -> None:
        self.file = file
        self.problems = problems
        self.allow_imports = allow_imports

    def add(self, code: str, message: str, location: str | None, **fields: Any) -> None:
        self.problems.add(code, message, location=location, **fields)

    def root(self, doc: Located) -> Graph | None:
        graph = self._root(doc)
        # Keys written twice where the builder did not look (inside a value it skipped, or deep in a
        # parameter): reported here, once each.
        self._duplicates(doc)
        return graph

    def _root(self, doc: Located) -> Graph | None:
        if doc.failed:
            return None
        if not isinstance(doc.value, dict):
            self.add(
                "E_SPEC",
                f"a spec must be a mapping with keys hndl, name, inputs, nodes, outputs; got {describe(doc.value)}",
                doc.loc,
                hint="start with 'hndl: 1', then inputs, nodes, outputs",
            )
            return None
        self._keys(doc, ROOT_KEYS, ("hndl", *REQUIRED_KEYS), "the spec", doc.loc)
        self._version(doc)
        graph = self._graph(doc, self._graph_name(doc), top=True)
        assert graph is not None  # only a subgraph (top=False) can fail to build
        graph.kind = self._kind(doc)
        graphs = doc.value.get("graphs")
        if graphs is None or graphs.failed:
            return graph
        if not isinstance(graphs.value, dict):
            self.add(
                "E_SPEC",
                f"'graphs' must be a mapping of graph name to {{inputs, nodes, outputs}}, got {describe(graphs.value)}",
                graphs.loc,
            )
            return graph
        self._duplicate_names(graphs, "graph")
        for sub_name, sub_doc in graphs.value.items():
            loc = graphs.keys[sub_name]
            if not self._name_ok(sub_name, "graph", loc):
                continue
            sub = self._graph(sub_doc, sub_name, top=False, where=loc)
            if sub is not None:
                graph.add_subgraph(sub)
        return graph

    # -- keys written twice ------------------------------------------------------------------------------------

    def _duplicate_names(self, section: Located, kind: str) -> None:
        """Two inputs, nodes or graphs under one name: a duplicate name, as ``Graph.add`` would report it."""
        for dup in section.duplicates:
            dup.reported = True
            self.add(
                "E_NAME",
                f"{kind} name {excerpt(dup.key)} is used twice (first on line {dup.first_line})",
                dup.loc,
                node=dup.key if kind != "graph" and isinstance(dup.key, str) else None,
                op="input" if kind == "input" else None,
                hint=f"give each {kind} its own name",
            )

    def _duplicates(self, entry: Located, **owner: Any) -> None:
        """Every key written twice in ``entry`` and the values inside it, named after ``owner`` (node, op)."""
        for dup in entry.duplicates:
            if dup.reported:
                continue
            dup.reported = True
            self.add(
                "E_SPEC",
                f"duplicate key {excerpt(dup.key)} (first on line {dup.first_line})",
                dup.loc,
                hint="each key may appear once in a mapping; YAML would silently keep only the last one",
                **owner,
            )
        for child in entry.children():
            self._duplicates(child, **owner)

    # -- pieces --------------------------------------------------------------------------------------------

    def _keys(self, doc: Located, allowed: Sequence[str], required: Sequence[str], what: str, at: str) -> None:
        for key, loc in doc.keys.items():
            if key in allowed:
                continue
            hint = suggestion(key, allowed) or f"{what} takes: {', '.join(allowed)}"
            self.add("E_SPEC", f"unknown key {excerpt(key)} in {what}", loc, hint=hint)
        for key in required:
            if key not in doc.value:
                self.add("E_SPEC", f"missing key {key!r} in {what}", at, hint=_MISSING_HINTS.get(key))

    def _version(self, doc: Located) -> None:
        version = doc.value.get("hndl")
        if version is None or version.failed:
            return  # reported as a missing key, or as unreadable
        value = version.value
        if isinstance(value, int) and not isinstance(value, bool) and value == FORMAT_VERSION:
            return
        if isinstance(value, int) and not isinstance(value, bool):
            message = f"unsupported format version {excerpt(value)}"
        else:
            message = f"the format version must be the integer {FORMAT_VERSION}, got {describe(value)}"
        self.add("E_SPEC", message, version.loc, hint=f"this hndl reads 'hndl: {FORMAT_VERSION}'")

    def _kind(self, doc: Located) -> str | None:
        """The model's declared ``kind`` (one of :data:`hndl._meaning.KINDS`), ``None`` when not declared."""
        from ._meaning import KINDS

        entry = doc.value.get("kind")
        if entry is None or entry.failed:
            return None
        if isinstance(entry.value, str) and entry.value in KINDS:
            return entry.value
        self.add(
            "E_SPEC",
            f"kind must be one of {', '.join(KINDS)}, got {describe(entry.value)}",
            entry.loc,
            hint=suggestion(str(entry.value), list(KINDS)) if isinstance(entry.value, str) else None,
        )
        return None

    def _graph_name(self, doc: Located) -> str:
        entry = doc.value.get("name")
        if entry is None:
            # Unnamed specs take the file's name when it is a valid name, so messages still say something useful.
            stem = Path(self.file).stem if self.file != _TEXT_LABEL else ""
            return stem if NAME_RE.match(stem) else "graph"
        if not entry.failed and self._name_ok(entry.value, "graph", entry.loc):
            return str(entry.value)
        return "graph"

    def _name_ok(self, name: Any, kind: str, loc: str) -> bool:
        if isinstance(name, str) and NAME_RE.match(name):
            return True
        self.add(
            "E_NAME",
            f"{kind} name {excerpt(name)} is not valid",
            loc,
            hint="use letters, digits and underscores, not starting with a digit",
        )
        return False

    def _graph(self, doc: Located, name: str, *, top: bool, where: str | None = None) -> Graph | None:
        what = "the spec" if top else f"graph {name!r}"
        if not top:
            if doc.failed:
                return None
            if not isinstance(doc.value, dict):
                self.add(
                    "E_SPEC",
                    f"graph {name!r} must be a mapping with keys inputs, nodes, outputs; got {describe(doc.value)}",
                    doc.loc,
                )
                return None
            self._keys(doc, SUBGRAPH_KEYS, REQUIRED_KEYS, what, where or doc.loc)
        graph = Graph(name)
        graph.source = self.file
        graph.location = where or doc.loc
        graph.allow_imports = self.allow_imports
        fields = doc.value
        if "params" in fields and not fields["params"].failed:
            self._params(graph, fields["params"], what)
        if "inputs" in fields and not fields["inputs"].failed:
            self._inputs(graph, fields["inputs"], what)
        if "nodes" in fields and not fields["nodes"].failed:
            self._nodes(graph, fields["nodes"], what)
        if "outputs" in fields and not fields["outputs"].failed:
            self._outputs(graph, fields["outputs"], what)
        return graph

    def _params(self, graph: Graph, entry: Located, what: str) -> None:
        """A graph's parameters: a mapping of name to default value (any plain value)."""
        if not isinstance(entry.value, dict):
            self.add(
                "E_SPEC",
                f"'params' of {what} must be a mapping of parameter name to default, got {describe(entry.value)}",
                entry.loc,
                hint="e.g. params: {width: 64, stride: 1}",
            )
            return
        self._duplicate_names(entry, "parameter")
        for name, value in entry.value.items():
            if self._name_ok(name, "parameter", entry.keys[name]) and value.ok and self._text_keys(value, name):
                graph.params[name] = value.plain()
                graph.param_locations[name] = entry.keys[name]

    def _text_keys(self, value: Located, key: str, **fields: Any) -> bool:
        """Whether every mapping inside a parameter's ``value`` has text keys (reported at the first that does
        not): a value is plain data that :func:`hndl.dumps` writes back, and a spec's keys are names."""
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item.value, dict):
                for k in item.value:
                    if not isinstance(k, str):
                        self.add(
                            "E_SPEC",
                            f"{key!r}: a key inside a value must be text, got {describe(k)}",
                            item.keys.get(k, item.loc),
                            **fields,
                            hint="quote it: '1': ...",
                        )
                        return False
            stack.extend(item.children())
        return True

    def _inputs(self, graph: Graph, entry: Located, what: str) -> None:
        if not isinstance(entry.value, dict):
            self.add(
                "E_SPEC",
                f"'inputs' of {what} must be a mapping of input name to {{shape: [...]}}, got {describe(entry.value)}",
                entry.loc,
                hint="e.g. inputs: {x: {shape: [B, 784]}}",
            )
            return
        self._duplicate_names(entry, "input")
        for name, spec in entry.value.items():
            loc = entry.keys[name]
            if not self._name_ok(name, "input", loc) or spec.failed:
                continue
            self._duplicates(spec, node=name, op="input")
            if not isinstance(spec.value, dict):
                shape = flow_yaml(spec.plain()) if isinstance(spec.value, list) else ""
                self.add(
                    "E_SPEC",
                    f"an input must be a mapping such as {{shape: [B, 784]}}, got {describe(spec.value)}",
                    spec.loc,
                    node=name,
                    op="input",
                    # Suggested only when short: the hint echoes the value.
                    hint=f"write {name}: {{shape: {shape}}}" if 0 < len(shape) <= 60 else None,
                )
                continue
            self._input(graph, name, loc, spec)

    def _input(self, graph: Graph, name: str, loc: str, spec: Located) -> None:
        ok = spec.ok
        for key, key_at in spec.keys.items():
            if key not in INPUT_KEYS:
                hint = suggestion(key, INPUT_KEYS) or "an input takes: shape, dtype, device, ranges"
                self.add("E_SPEC", f"unknown key {excerpt(key)}", key_at, node=name, op="input", hint=hint)
                ok = False
        shape = spec.value.get("shape")
        if shape is None:
            self.add("E_SPEC", "missing key 'shape'", loc, node=name, op="input", hint="add shape: [B, ...]")
            return
        if not isinstance(shape.value, list) and not shape.failed:
            self.add(
                "E_SPEC",
                f"'shape' must be a list such as [B, 784], got {describe(shape.value)}",
                shape.loc,
                node=name,
                op="input",
            )
            return
        if not ok:
            return
        # Each key of the contract on its own, so that a problem is reported at the key it is about.
        contract_ok = True
        for key in INPUT_KEYS:
            part = spec.value.get(key)
            if part is None:
                continue
            try:
                if key == "ranges":  # a range names symbols of the shape (judged once the shape is right)
                    if contract_ok:
                        Contract.make(shape.plain(), ranges=part.plain())
                else:
                    Contract.make(**{"shape": (), key: part.plain()})
            except ValueError as exc:
                value = part.plain()
                # A graph parameter is named in an input shape as a plain dim, the way symbols are.
                dollar = key == "shape" and isinstance(value, list) and any(is_reference(d) for d in value)
                self.add(
                    "E_SPEC",
                    _bounded(str(exc)),
                    part.loc,
                    node=name,
                    op="input",
                    hint="an input shape names a graph parameter without '$': [B, width, H, W]" if dollar else None,
                )
                contract_ok = False
        if not contract_ok:
            return
        dtype, device, ranges = spec.value.get("dtype"), spec.value.get("device"), spec.value.get("ranges")
        try:
            graph.input(
                name,
                shape.plain(),
                dtype=None if dtype is None else dtype.value,
                device=None if device is None else device.value,
                ranges=None if ranges is None else ranges.plain(),
            )
        except HndlError as exc:  # the name is taken (by a node of the same name)
            for p in exc.problems:
                self.add(p.code, p.message, loc, node=name, op="input", hint=p.hint)
            return
        graph.inputs[name].location = loc

    def _nodes(self, graph: Graph, entry: Located, what: str) -> None:
        if not isinstance(entry.value, dict):
            self.add(
                "E_SPEC",
                f"'nodes' of {what} must be a mapping of node name to {{op: ..., in: ...}}, got {describe(entry.value)}",
                entry.loc,
                hint="e.g. nodes: {hidden: {op: linear, in: x, out_features: 512}}",
            )
            return
        self._duplicate_names(entry, "node")
        for name, spec in entry.value.items():
            loc = entry.keys[name]
            if not self._name_ok(name, "node", loc) or spec.failed:
                continue
            self._duplicates(spec, node=name)
            if not isinstance(spec.value, dict):
                self.add(
                    "E_SPEC",
                    f"a node must be a mapping such as {{op: linear, in: x}}, got {describe(spec.value)}",
                    spec.loc,
                    node=name,
                    hint=f"write {name}: {{op: {spec.value}, in: ...}}" if _is_name(spec.value) else None,
                )
                continue
            self._node(graph, name, loc, spec)

    def _node(self, graph: Graph, name: str, loc: str, spec: Located) -> None:
        fields = spec.value
        op_entry = fields.get("op")
        op = op_entry.value if op_entry is not None else None
        ok = spec.ok
        if op_entry is None:
            self.add("E_SPEC", "missing key 'op'", loc, node=name, hint="add op: <name>, e.g. op: linear")
            ok = False
        elif not isinstance(op, str) and not op_entry.failed:
            self.add(
                "E_SPEC",
                f"'op' must be an op name, got {describe(op)}",
                op_entry.loc,
                node=name,
                hint="e.g. op: linear",
            )
            ok = False
        named_op = op if isinstance(op, str) else None
        refs = self._refs(fields.get("in"), name, named_op)
        for key in fields:
            if not isinstance(key, str):
                self.add(
                    "E_SPEC", f"a node key must be a name, got {describe(key)}", spec.keys[key], node=name, op=named_op
                )
                ok = False
            elif key not in NODE_KEYS and not self._text_keys(fields[key], key, node=name, op=named_op):
                ok = False
        tie = self._tie(fields.get("tie"), name, named_op)
        if not ok or refs is None or named_op is None or tie is None:
            return
        when = fields.get("when")
        if when is not None and not (
            isinstance(when.value, bool) or (isinstance(when.value, str) and when.value.startswith("$"))
        ):
            self.add(
                "E_SPEC",
                f"'when' must be true, false or '$name' of a bool graph parameter, got {describe(when.value)}",
                when.loc,
                node=name,
                op=named_op,
            )
            return
        otherwise = fields.get("otherwise")
        if otherwise is not None and not isinstance(otherwise.value, str):
            self.add(
                "E_SPEC",
                f"'otherwise' must name one of the node's inputs, got {describe(otherwise.value)}",
                otherwise.loc,
                node=name,
                op=named_op,
            )
            return
        module_path = fields.get("module_path")
        if module_path is not None and not isinstance(module_path.value, str):
            self.add(
                "E_SPEC",
                f"'module_path' must be a dotted module path such as 'mlp.gate_proj', got {describe(module_path.value)}",
                module_path.loc,
                node=name,
                op=named_op,
            )
            return
        try:
            graph.add(
                named_op,
                refs,
                name=name,
                tie=tie,
                when=True if when is None else when.value,
                otherwise=None if otherwise is None else otherwise.value,
                module_path=None if module_path is None else module_path.value,
            )
        except HndlError as exc:
            for p in exc.problems:
                self.add(p.code, p.message, loc, node=name, hint=p.hint)
            return
        node = graph.nodes[name]
        # Set directly rather than as **kwargs: a key 'name' would collide with Graph.add's own keyword (the
        # checker then reports it as a parameter no op takes).
        node.params = {k: v.plain() for k, v in fields.items() if k not in NODE_KEYS}
        node.location = loc
        node.key_locations = dict(spec.keys)

    def _tie(self, entry: Located | None, node: str, op: str | None) -> dict[str, Any] | None:
        """A node's ``tie``: a mapping of its own parameter to ``node.parameter`` (both strings), and an optional
        ``when`` (``true``, ``false`` or ``'$name'`` of a bool graph parameter) that says whether it applies."""
        if entry is None:
            return {}
        if entry.failed:
            return None
        value = entry.value
        when = value.get("when") if isinstance(value, dict) else None
        if when is not None and not (
            isinstance(when.value, bool) or (isinstance(when.value, str) and when.value.startswith("$"))
        ):
            self.add(
                "E_SPEC",
                f"the tie's 'when' must be true, false or '$name' of a bool graph parameter, got {describe(when.value)}",
                when.loc,
                node=node,
                op=op,
                hint="e.g. tie: {weight: embed_tokens.weight, when: $tie_word_embeddings}",
            )
            return None
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and (k == "when" or isinstance(v.value, str)) for k, v in value.items()
        ):
            self.add(
                "E_SPEC",
                f"'tie' must map this node's parameter to 'node.parameter', got {describe(value)}",
                entry.loc,
                node=node,
                op=op,
                hint="e.g. tie: {weight: wte.weight}",
            )
            return None
        return {k: v.value for k, v in value.items()}

    def _refs(self, entry: Located | None, node: str, op: str | None) -> list[str] | None:
        if entry is None:
            return []
        if entry.failed:
            return None
        items = entry.value if isinstance(entry.value, list) else [entry]
        bad = (
            entry
            if not isinstance(entry.value, (list, str))
            else next((i for i in items if not isinstance(i.value, str)), None)
        )
        if bad is not None:
            if not bad.failed:
                self.add(
                    "E_SPEC",
                    "'in' must be a reference (an input or node name, or node.port) or a list of them, "
                    f"got {describe(bad.value)}",
                    bad.loc,
                    node=node,
                    op=op,
                    hint="e.g. in: x, or in: [a, b]",
                )
            return None
        return [i.value for i in items]

    def _outputs(self, graph: Graph, entry: Located, what: str) -> None:
        """A list of references (``[out]``, or one reference), or a mapping of output name to a reference or to
        ``{from: ref, shape: [...], dtype: ...}``: a named output with its contract."""
        if isinstance(entry.value, dict):
            self._named_outputs(graph, entry, what)
            return
        if not isinstance(entry.value, (list, str)):
            self.add(
                "E_SPEC",
                f"'outputs' of {what} must be a list of references, or a mapping of output name to a reference or "
                f"{{from: ..., shape: [...]}}, got {describe(entry.value)}",
                entry.loc,
                hint="e.g. outputs: [out], or outputs: {logits: {from: out, shape: [B, 10]}}",
            )
            return
        # A single reference is accepted as a one-item list.
        items = entry.value if isinstance(entry.value, list) else [entry]
        for i, item in enumerate(items):
            if item.failed:
                continue
            if not isinstance(item.value, str):
                self.add(
                    "E_SPEC",
                    f"output {i} of {what} must be a reference (an input or node name, or node.port), "
                    f"got {describe(item.value)}",
                    item.loc,
                    hint="a named output with a contract goes in a mapping: outputs: {logits: {from: out, shape: [B, 10]}}"
                    if isinstance(item.value, dict)
                    else None,
                )
                continue
            graph.output(item.value)
            graph.output_locations[-1] = item.loc

    def _named_outputs(self, graph: Graph, entry: Located, what: str) -> None:
        self._duplicate_names(entry, "output")
        for name, spec in entry.value.items():
            loc = entry.keys[name]
            if not self._name_ok(name, "output", loc) or spec.failed:
                continue
            self._duplicates(spec, node=name, op="output")
            if isinstance(spec.value, str):  # a name for a reference, no contract
                self._output(graph, name, spec.value, spec.loc, None, None)
                continue
            if not isinstance(spec.value, dict):
                self.add(
                    "E_SPEC",
                    f"an output must be a reference or a mapping such as {{from: out, shape: [B, 10]}}, "
                    f"got {describe(spec.value)}",
                    spec.loc,
                    node=name,
                    op="output",
                )
                continue
            ok = spec.ok
            for key, key_at in spec.keys.items():
                if key not in OUTPUT_KEYS:
                    hint = suggestion(key, OUTPUT_KEYS) or "an output takes: from, shape, dtype"
                    self.add("E_SPEC", f"unknown key {excerpt(key)}", key_at, node=name, op="output", hint=hint)
                    ok = False
            ref = spec.value.get("from")
            if ref is None:
                self.add(
                    "E_SPEC",
                    "missing key 'from'",
                    loc,
                    node=name,
                    op="output",
                    hint="add from: <the node whose value this output returns>",
                )
                continue
            if not ref.failed and not isinstance(ref.value, str):
                self.add(
                    "E_SPEC",
                    f"'from' must be a reference (an input or node name, or node.port), got {describe(ref.value)}",
                    ref.loc,
                    node=name,
                    op="output",
                )
                ok = False
            shape, dtype = spec.value.get("shape"), spec.value.get("dtype")
            # Each key of the contract on its own, so that a problem is reported at the key it is about.
            for key, make in (("shape", ShapePattern.parse), ("dtype", parse_dtype_rule)):
                part = spec.value.get(key)
                if part is None:
                    continue
                if part.failed:  # reported where it was read
                    ok = False
                    continue
                if key == "dtype" and part.value is None:  # dtype: null declares none
                    continue
                if key == "shape" and not isinstance(part.value, list):
                    self.add(
                        "E_SPEC",
                        f"'shape' must be a list such as [B, 10], got {describe(part.value)}",
                        part.loc,
                        node=name,
                        op="output",
                    )
                    ok = False
                    continue
                try:
                    make(part.plain())
                except ValueError as exc:
                    self.add("E_SPEC", _bounded(str(exc)), part.loc, node=name, op="output")
                    ok = False
            if ok:
                self._output(
                    graph,
                    name,
                    ref.value,
                    ref.loc,
                    None if shape is None else shape.plain(),
                    None if dtype is None else dtype.value,
                    declared_at=loc,
                )

    def _output(
        self,
        graph: Graph,
        name: str,
        ref: str,
        loc: str,
        shape: Any,
        dtype: Any,
        *,
        declared_at: str | None = None,
    ) -> None:
        try:
            graph.output(ref, name, shape=shape, dtype=dtype)
        except HndlError as exc:
            for p in exc.problems:
                self.add(p.code, p.message, declared_at or loc, node=name, op="output", hint=p.hint)
            return
        graph.output_locations[-1] = loc
        graph.output_specs[-1].location = declared_at or loc
