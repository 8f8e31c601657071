"""Spec files: YAML (or JSON) text <-> :class:`~hndl.Graph`, with every entry's ``file:line:col`` kept.

Reading never constructs arbitrary objects and never imports or runs anything. The text is *composed* with
PyYAML's safe loader into a tree of nodes that carry their start marks; this module turns that tree into
plain values itself, accepting only the core tags (mapping, list, string, integer, float, boolean, null).
Plain scalars resolve by the YAML 1.2 core schema, which is also JSON's: ``1e-5`` is a number, and ``yes``,
``on`` and ``1:30`` stay strings (YAML 1.1 would turn them into ``True`` and ``90``).

The loader checks the *structure* of the spec (keys, types, names, version) and reports every problem it
finds in one :class:`~hndl.HndlError`. What needs the op registry or the whole graph (unknown ops, parameter
values, references, cycles, shapes) is left to :func:`hndl.check`, which reports it at the locations the loader
attached to nodes, node keys, inputs and outputs.

:func:`dumps` writes a graph back in the same format, deterministically, so that ``load(dumps(g))`` builds
the same model as ``g``.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import yaml

from ._errors import HndlError, Problem, ProblemList
from ._graph import NAME_RE, Graph

__all__ = ["FORMAT_VERSION", "dumps", "load"]

#: The spec format version this hndl reads and writes (the ``hndl:`` key).
FORMAT_VERSION = 1

_ROOT_KEYS = ("hndl", "name", "inputs", "nodes", "outputs", "graphs")
_SUBGRAPH_KEYS = ("inputs", "nodes", "outputs")
_REQUIRED_KEYS = ("inputs", "nodes", "outputs")
_INPUT_KEYS = ("shape", "dtype", "device")
_NODE_KEYS = ("op", "in")  # every other key of a node is a parameter of its op

# Bounds on what a spec may expand to: aliases can make a small text describe an enormous tree ("billion
# laughs"), and deep nesting would otherwise end in a RecursionError.
_MAX_VALUES = 200_000
_NAMED_SECTIONS = {"inputs": "input", "nodes": "node", "graphs": "graph"}
_MAX_DEPTH = 64

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ = _TAG + "map", _TAG + "seq"

# YAML 1.2 core schema: the implicit types of plain (unquoted) scalars.
_CORE_RESOLVERS: list[tuple[str, re.Pattern[str], list[str | None]]] = [
    (_NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]),
    (_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")),
    (_INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")),
    (
        _FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+.0123456789"),
    ),
]


class _Loader(yaml.SafeLoader):
    """The safe loader with YAML 1.2 core resolution (used for composition only, never construction)."""

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {}


class _Dumper(yaml.SafeDumper):
    """Writes scalars so that both YAML 1.2 (hndl) and YAML 1.1 (``yaml.safe_load``) read them back the same:
    a string that either schema would take for a number, boolean or null is quoted."""


for _tag, _regexp, _first in _CORE_RESOLVERS:
    _Loader.add_implicit_resolver(_tag, _regexp, _first)
    _Dumper.add_implicit_resolver(_tag, _regexp, _first)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Line breaks and control characters are written escaped in double quotes, so every value stays on one line.
    style = '"' if any(not ch.isprintable() for ch in value) else None
    return dumper.represent_scalar(_STR, value, style=style)


_Dumper.add_representer(str, _represent_str)


# --- located values ----------------------------------------------------------------------------------------


@dataclass
class _Located:
    """A value read from the spec with where it was written. Lists and mappings hold located values;
    ``keys`` maps each mapping key to the location of the key itself."""

    value: Any
    loc: str
    keys: dict[Any, str] = field(default_factory=dict)
    #: False when this value (or one inside it) could not be read; the problem is already reported, and the
    #: builder skips the value rather than report a second, confusing problem about it.
    ok: bool = True

    def plain(self) -> Any:
        """The value with all locations stripped: what an op parameter receives."""
        if isinstance(self.value, list):
            return [item.plain() for item in self.value]
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        return self.value


def _kind(value: Any) -> str:
    """How a message names the type of a spec value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {value}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else tag


class _Reader:
    """Turns composed YAML nodes into :class:`_Located` values, collecting problems instead of raising."""

    def __init__(self, file: str, problems: ProblemList) -> None:
        self.file = file
        self.problems = problems
        self.count = 0
        self.active: set[int] = set()  # ids of collection nodes being converted, to catch recursive aliases
        self.too_big = False

    def where(self, mark: Any) -> str:
        return f"{self.file}:{mark.line + 1}:{mark.column + 1}"

    def convert(self, node: yaml.Node, path: tuple[Any, ...] = ()) -> _Located:
        loc = self.where(node.start_mark)
        depth = len(path)
        self.count += 1
        if self.count > _MAX_VALUES:
            if not self.too_big:
                self.too_big = True
                self.problems.add(
                    "E_SPEC",
                    f"the spec expands to more than {_MAX_VALUES} values",
                    location=loc,
                    hint="aliases (*name) repeat what they refer to; a spec this large is probably a mistake",
                )
            return _Located(None, loc, ok=False)
        if depth > _MAX_DEPTH:
            self.problems.add("E_SPEC", f"values are nested more than {_MAX_DEPTH} levels deep", location=loc)
            return _Located(None, loc, ok=False)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, loc)
        if id(node) in self.active:
            self.problems.add("E_SPEC", "an alias refers to a value that contains it", location=loc)
            return _Located(None, loc, ok=False)
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                if node.tag != _SEQ:
                    return self._bad_tag(node, loc)
                items = [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
                return _Located(items, loc, ok=all(item.ok for item in items))
            if isinstance(node, yaml.MappingNode):
                if node.tag != _MAP:
                    return self._bad_tag(node, loc)
                return self._mapping(node, loc, path)
        finally:
            self.active.discard(id(node))
        self.problems.add("E_SPEC", "unexpected YAML content", location=loc)
        return _Located(None, loc, ok=False)

    def _mapping(self, node: yaml.MappingNode, loc: str, path: tuple[Any, ...]) -> _Located:
        # A bad key drops its entry (reported); a bad value stays, marked not ok, so that the key still counts
        # as present and no "missing key" follows from a value that was merely malformed.
        values: dict[Any, _Located] = {}
        keys: dict[Any, str] = {}
        for key_node, value_node in node.value:
            key_loc = self.where(key_node.start_mark)
            if not isinstance(key_node, yaml.ScalarNode):
                self.problems.add(
                    "E_SPEC",
                    "a mapping key must be a plain value such as a name, not a list or mapping",
                    location=key_loc,
                )
                continue
            key = self._scalar(key_node, key_loc)
            value = self.convert(value_node, (*path, key.value))
            if not key.ok:
                continue
            if key.value in values:
                # YAML keeps the last of two equal keys without a word; a spec never means that.
                self._duplicate(key.value, key_loc, keys[key.value], path)
                continue
            values[key.value] = value
            keys[key.value] = key_loc
        return _Located(values, loc, keys, ok=all(v.ok for v in values.values()))

    def _duplicate(self, key: Any, loc: str, first: str, path: tuple[Any, ...]) -> None:
        line = first.rsplit(":", 2)[-2]
        kind = _NAMED_SECTIONS.get(path[-1]) if len(path) in (1, 3) else None
        if kind is not None and (len(path) == 1 or path[0] == "graphs"):
            # Two inputs, nodes or graphs under one name: a duplicate name, as Graph.add would report it.
            self.problems.add(
                "E_NAME",
                f"{kind} name {key!r} is used twice (first on line {line})",
                node=key if kind != "graph" and isinstance(key, str) else None,
                op="input" if kind == "input" else None,
                location=loc,
                hint=f"give each {kind} its own name",
            )
            return
        # A key repeated inside a node or input entry: name that node or input.
        in_entry = len(path) == 2 or (len(path) == 4 and path[0] == "graphs")
        owner = path[-1] if in_entry else None
        section = _NAMED_SECTIONS.get(path[-2]) if in_entry else None
        self.problems.add(
            "E_SPEC",
            f"duplicate key {key!r} (first on line {line})",
            node=owner if section in ("node", "input") and isinstance(owner, str) else None,
            op="input" if section == "input" else None,
            location=loc,
            hint="each key may appear once in a mapping; YAML would silently keep only the last one",
        )

    def _scalar(self, node: yaml.ScalarNode, loc: str) -> _Located:
        text = node.value
        tag = node.tag
        try:
            if tag == _STR:
                return _Located(text, loc)
            if tag == _NULL:
                if text not in ("", "~", "null", "Null", "NULL"):
                    raise ValueError
                return _Located(None, loc)
            if tag == _BOOL:
                if text.lower() not in ("true", "false"):
                    raise ValueError
                return _Located(text.lower() == "true", loc)
            if tag == _INT:
                return _Located(_parse_int(text), loc)
            if tag == _FLOAT:
                return _Located(_parse_float(text), loc)
        except ValueError:
            self.problems.add("E_SPEC", f"{text!r} is not a valid {_show_tag(tag)} value", location=loc)
            return _Located(None, loc, ok=False)
        return self._bad_tag(node, loc)

    def _bad_tag(self, node: yaml.Node, loc: str) -> _Located:
        self.problems.add(
            "E_SPEC",
            f"tag {_show_tag(node.tag)} is not allowed",
            location=loc,
            hint="a spec holds plain data only: mappings, lists, strings, numbers, true/false and null",
        )
        return _Located(None, loc, ok=False)


def _parse_int(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body.startswith("0x"):
        return sign * int(body[2:], 16)
    if body.startswith("0o"):
        return sign * int(body[2:], 8)
    if not body.isdigit():
        raise ValueError(text)
    return sign * int(body, 10)


def _parse_float(text: str) -> float:
    lowered = text.lower()
    if lowered in (".inf", "+.inf"):
        return math.inf
    if lowered == "-.inf":
        return -math.inf
    if lowered == ".nan":
        return math.nan
    return float(text)


# --- reading -----------------------------------------------------------------------------------------------


def load(source: str | os.PathLike[str] | bytes, *, allow_imports: bool = False) -> Graph:
    """Read a spec (a file path, or YAML/JSON text) into a :class:`~hndl.Graph`.

    A ``str`` is a path when it has no line break and names an existing file or ends in ``.yaml``, ``.yml``
    or ``.json``; otherwise it is the spec text itself. Every input, node, node key and output of the result
    carries its ``file:line:col`` (``<string>`` for text), so that :func:`hndl.build` and :func:`hndl.check`
    point at the line to fix.

    Loading only reads data: it never imports or executes anything.

    Args:
        source: a path (``str`` or ``os.PathLike``), or the spec as text (``str`` or UTF-8 ``bytes``).
        allow_imports: whether the graph may use op ``module``, which imports a Python class by name when the
            model is built. Leave it off for files you did not write.

    Returns:
        The graph, with ``graph.source`` set to the path (or ``"<string>"``) and its subgraphs under
        ``graph.graphs``. Ops, parameter values and references are checked later, by :func:`hndl.check`
        and :func:`hndl.build`.

    Raises:
        HndlError: listing every problem with the spec's structure: E_SPEC for unreadable files, YAML syntax,
            wrong types, unknown or missing keys and a bad format version; E_NAME for invalid or duplicate
            names.
    """
    file, text = _read_source(source)
    problems = ProblemList()
    root = _compose(text, file, problems)
    graph = None
    if root is not None:
        graph = _SpecBuilder(file, problems, allow_imports=bool(allow_imports)).root(root)
    problems.raise_if_any(title=f"spec '{file}'")
    assert graph is not None
    return graph


def _read_source(source: Any) -> tuple[str, str]:
    """``(file label, text)`` for whatever :func:`load` was given."""
    if isinstance(source, (bytes, bytearray)):
        return "<string>", _decode(bytes(source), "<string>")
    if isinstance(source, os.PathLike):
        path = os.fsdecode(os.fspath(source))
    elif isinstance(source, str):
        looks_like_path = (
            "\n" not in source
            and "\r" not in source
            and (source.lower().endswith((".yaml", ".yml", ".json")) or _is_file(source))
        )
        if not looks_like_path:
            return "<string>", source
        path = source
    else:
        raise HndlError(
            Problem(
                "E_SPEC",
                f"hndl.load needs a path or the spec text, got {type(source).__name__}",
                hint="pass a file name, a pathlib.Path, or YAML text",
            )
        )
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise HndlError(Problem("E_SPEC", f"spec file {path!r} does not exist")) from None
    except IsADirectoryError:
        raise HndlError(Problem("E_SPEC", f"spec file {path!r} is a directory")) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        reason = getattr(exc, "strerror", None) or str(exc)
        raise HndlError(Problem("E_SPEC", f"cannot read spec file {path!r}: {reason}")) from None
    return path, _decode(data, path)


def _is_file(text: str) -> bool:
    try:
        return os.path.isfile(text)
    except (ValueError, OSError):  # embedded NUL, name too long
        return False


def _decode(data: bytes, file: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise HndlError(
            Problem(
                "E_SPEC",
                f"the spec is not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}",
                location=file if file != "<string>" else None,
            ),
            title=f"spec '{file}'",
        ) from None


_LEADING_TABS = re.compile(r"^[ \t]+", re.MULTILINE)


def _compose(text: str, file: str, problems: ProblemList) -> _Located | None:
    """Parse ``text`` into located values; YAML syntax errors become one located E_SPEC problem."""
    if text.lstrip().startswith(("{", "[")):
        # JSON is YAML's flow style, except that JSON may indent with tabs, which YAML forbids. Tabs in
        # indentation carry no meaning in JSON, so they become spaces (one for one: columns stay right).
        text = _LEADING_TABS.sub(lambda m: m.group(0).replace("\t", " "), text)
    try:
        node = yaml.compose(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        location = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else None
        what = exc.problem or "invalid YAML"
        if exc.context:
            what = f"{exc.context}, {what}"
        problems.add("E_SPEC", f"YAML syntax error: {what}", location=location)
        return None
    except yaml.YAMLError as exc:  # ReaderError: a character YAML does not allow
        position = getattr(exc, "position", None)
        character = getattr(exc, "character", None)
        if isinstance(character, int):  # PyYAML gives the code point
            character = chr(character)
        if isinstance(character, str):
            message = f"character {character!r} is not allowed in YAML"
        else:
            message = getattr(exc, "reason", None) or str(exc).splitlines()[0]
        if isinstance(position, int):
            line = text.count("\n", 0, position) + 1
            col = position - (text.rfind("\n", 0, position) + 1) + 1
            problems.add("E_SPEC", f"unreadable spec text: {message}", location=f"{file}:{line}:{col}")
        else:
            problems.add("E_SPEC", f"unreadable spec text: {message}")
        return None
    except RecursionError:
        problems.add("E_SPEC", "the spec is nested too deeply to read")
        return None
    if node is None:
        problems.add(
            "E_SPEC",
            "the spec is empty",
            location=f"{file}:1:1",
            hint="start with 'hndl: 1', then inputs, nodes, outputs",
        )
        return None
    return _Reader(file, problems).convert(node)


def _failed(entry: _Located | None) -> bool:
    """Whether ``entry`` itself could not be read (already reported): nothing more is said about it."""
    return entry is not None and entry.value is None and not entry.ok


class _SpecBuilder:
    """Checks the structure of located values and builds the graphs, adding problems as it goes."""

    def __init__(self, file: str, problems: ProblemList, *, allow_imports: bool) -> None:
        self.file = file
        self.problems = problems
        self.allow_imports = allow_imports

    def add(self, code: str, message: str, location: str | None, **fields: Any) -> None:
        self.problems.add(code, message, location=location, **fields)

    def root(self, doc: _Located) -> Graph | None:
        if _failed(doc):
            return None
        if not isinstance(doc.value, dict):
            self.add(
                "E_SPEC",
                f"a spec must be a mapping with keys hndl, name, inputs, nodes, outputs; got {_kind(doc.value)}",
                doc.loc,
                hint="start with 'hndl: 1', then inputs, nodes, outputs",
            )
            return None
        self._keys(doc, _ROOT_KEYS, ("hndl", *_REQUIRED_KEYS), "the spec", doc.loc)
        self._version(doc)
        graph = self._graph(doc, self._graph_name(doc), top=True)
        assert graph is not None  # only a subgraph (top=False) can fail to build
        graphs = doc.value.get("graphs")
        if graphs is None or _failed(graphs):
            return graph
        if not isinstance(graphs.value, dict):
            self.add(
                "E_SPEC",
                f"'graphs' must be a mapping of graph name to {{inputs, nodes, outputs}}, got {_kind(graphs.value)}",
                graphs.loc,
            )
            return graph
        for sub_name, sub_doc in graphs.value.items():
            loc = graphs.keys[sub_name]
            if not self._name_ok(sub_name, "graph", loc):
                continue
            sub = self._graph(sub_doc, sub_name, top=False, where=loc)
            if sub is not None:
                graph.add_subgraph(sub)
        return graph

    # -- pieces --------------------------------------------------------------------------------------------

    def _keys(self, doc: _Located, allowed: Sequence[str], required: Sequence[str], what: str, at: str) -> None:
        for key, loc in doc.keys.items():
            if key in allowed:
                continue
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"{what} takes: {', '.join(allowed)}"
            self.add("E_SPEC", f"unknown key {key!r} in {what}", loc, hint=hint)
        for key in required:
            if key not in doc.value:
                self.add("E_SPEC", f"missing key {key!r} in {what}", at, hint=_MISSING_HINTS.get(key))

    def _version(self, doc: _Located) -> None:
        version = doc.value.get("hndl")
        if version is None or _failed(version):
            return  # reported as a missing key, or as unreadable
        value = version.value
        if isinstance(value, int) and not isinstance(value, bool) and value == FORMAT_VERSION:
            return
        if isinstance(value, int) and not isinstance(value, bool):
            message = f"unsupported format version {value}"
        else:
            message = f"the format version must be the integer {FORMAT_VERSION}, got {_kind(value)}"
        self.add("E_SPEC", message, version.loc, hint=f"this hndl reads 'hndl: {FORMAT_VERSION}'")

    def _graph_name(self, doc: _Located) -> str:
        entry = doc.value.get("name")
        if entry is None:
            # Unnamed specs take the file's name when it is a valid name, so messages still say something useful.
            stem = Path(self.file).stem if self.file != "<string>" else ""
            return stem if NAME_RE.match(stem) else "graph"
        if not _failed(entry) and self._name_ok(entry.value, "graph", entry.loc):
            return entry.value
        return "graph"

    def _name_ok(self, name: Any, kind: str, loc: str) -> bool:
        if isinstance(name, str) and NAME_RE.match(name):
            return True
        self.add(
            "E_NAME",
            f"{kind} name {name!r} is not valid",
            loc,
            hint="use letters, digits and underscores, not starting with a digit",
        )
        return False

    def _graph(self, doc: _Located, name: str, *, top: bool, where: str | None = None) -> Graph | None:
        what = "the spec" if top else f"graph {name!r}"
        if not top:
            if _failed(doc):
                return None
            if not isinstance(doc.value, dict):
                self.add(
                    "E_SPEC",
                    f"graph {name!r} must be a mapping with keys inputs, nodes, outputs; got {_kind(doc.value)}",
                    doc.loc,
                )
                return None
            self._keys(doc, _SUBGRAPH_KEYS, _REQUIRED_KEYS, what, where or doc.loc)
        graph = Graph(name)
        graph.source = self.file
        graph.location = where or doc.loc
        graph.allow_imports = self.allow_imports
        fields = doc.value
        if "inputs" in fields and not _failed(fields["inputs"]):
            self._inputs(graph, fields["inputs"], what)
        if "nodes" in fields and not _failed(fields["nodes"]):
            self._nodes(graph, fields["nodes"], what)
        if "outputs" in fields and not _failed(fields["outputs"]):
            self._outputs(graph, fields["outputs"], what)
        return graph

    def _inputs(self, graph: Graph, entry: _Located, what: str) -> None:
        if not isinstance(entry.value, dict):
            self.add(
                "E_SPEC",
                f"'inputs' of {what} must be a mapping of input name to {{shape: [...]}}, got {_kind(entry.value)}",
                entry.loc,
                hint="e.g. inputs: {x: {shape: [B, 784]}}",
            )
            return
        for name, spec in entry.value.items():
            loc = entry.keys[name]
            if not self._name_ok(name, "input", loc) or _failed(spec):
                continue
            if not isinstance(spec.value, dict):
                self.add(
                    "E_SPEC",
                    f"an input must be a mapping such as {{shape: [B, 784]}}, got {_kind(spec.value)}",
                    spec.loc,
                    node=name,
                    op="input",
                    hint=f"write {name}: {{shape: {_flow(spec.plain())}}}" if isinstance(spec.value, list) else None,
                )
                continue
            ok = spec.ok
            for key, key_at in spec.keys.items():
                if key not in _INPUT_KEYS:
                    close = difflib.get_close_matches(str(key), _INPUT_KEYS, n=1, cutoff=0.6)
                    self.add(
                        "E_SPEC",
                        f"unknown key {key!r}",
                        key_at,
                        node=name,
                        op="input",
                        hint=f"did you mean {close[0]!r}?" if close else "an input takes: shape, dtype, device",
                    )
                    ok = False
            shape = spec.value.get("shape")
            if shape is None:
                self.add("E_SPEC", "missing key 'shape'", loc, node=name, op="input", hint="add shape: [B, ...]")
                ok = False
            elif not isinstance(shape.value, list) and not _failed(shape):
                self.add(
                    "E_SPEC",
                    f"'shape' must be a list such as [B, 784], got {_kind(shape.value)}",
                    shape.loc,
                    node=name,
                    op="input",
                )
                ok = False
            if not ok or shape is None:
                continue
            dtype = spec.value.get("dtype")
            device = spec.value.get("device")
            try:
                graph.input(
                    name,
                    shape.plain(),
                    dtype=None if dtype is None else dtype.value,
                    device=None if device is None else device.value,
                )
            except HndlError as exc:
                for p in exc.problems:
                    # Point at the key the problem is about: dtype and device messages name themselves.
                    at = shape.loc
                    if p.code == "E_NAME":
                        at = loc
                    elif dtype is not None and "dtype" in p.message:
                        at = dtype.loc
                    elif device is not None and "device" in p.message:
                        at = device.loc
                    self.add(p.code, p.message, at, node=name, op="input", hint=p.hint)
                continue
            graph.inputs[name].location = loc

    def _nodes(self, graph: Graph, entry: _Located, what: str) -> None:
        if not isinstance(entry.value, dict):
            self.add(
                "E_SPEC",
                f"'nodes' of {what} must be a mapping of node name to {{op: ..., in: ...}}, got {_kind(entry.value)}",
                entry.loc,
                hint="e.g. nodes: {hidden: {op: linear, in: x, out_features: 512}}",
            )
            return
        for name, spec in entry.value.items():
            loc = entry.keys[name]
            if not self._name_ok(name, "node", loc) or _failed(spec):
                continue
            if not isinstance(spec.value, dict):
                self.add(
                    "E_SPEC",
                    f"a node must be a mapping such as {{op: linear, in: x}}, got {_kind(spec.value)}",
                    spec.loc,
                    node=name,
                    hint=f"write {name}: {{op: {spec.value}, in: ...}}" if isinstance(spec.value, str) else None,
                )
                continue
            fields = spec.value
            op_entry = fields.get("op")
            op = op_entry.value if op_entry is not None else None
            ok = spec.ok
            if op_entry is None:
                self.add("E_SPEC", "missing key 'op'", loc, node=name, hint="add op: <name>, e.g. op: linear")
                ok = False
            elif not isinstance(op, str) and not _failed(op_entry):
                self.add(
                    "E_SPEC",
                    f"'op' must be an op name, got {_kind(op)}",
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
                        "E_SPEC", f"a node key must be a name, got {_kind(key)}", spec.keys[key], node=name, op=named_op
                    )
                    ok = False
            if not ok or refs is None or named_op is None:
                continue
            try:
                graph.add(named_op, refs, name=name)
            except HndlError as exc:
                for p in exc.problems:
                    self.add(p.code, p.message, loc, node=name, hint=p.hint)
                continue
            node = graph.nodes[name]
            # Parameters are set directly rather than as **kwargs: a parameter may be called "name".
            node.params = {k: v.plain() for k, v in fields.items() if k not in _NODE_KEYS}
            node.location = loc
            node.key_locations = dict(spec.keys)

    def _refs(self, entry: _Located | None, node: str, op: str | None) -> list[str] | None:
        if entry is None:
            return []
        if _failed(entry):
            return None
        items = entry.value if isinstance(entry.value, list) else [entry]
        bad = (
            entry
            if not isinstance(entry.value, (list, str))
            else next((i for i in items if not isinstance(i.value, str)), None)
        )
        if bad is not None:
            if not _failed(bad):
                self.add(
                    "E_SPEC",
                    f"'in' must be a reference (an input or node name, or node.port) or a list of them, got {_kind(bad.value)}",
                    bad.loc,
                    node=node,
                    op=op,
                    hint="e.g. in: x, or in: [a, b]",
                )
            return None
        return [i.value for i in items]

    def _outputs(self, graph: Graph, entry: _Located, what: str) -> None:
        if not isinstance(entry.value, (list, str)):
            self.add(
                "E_SPEC",
                f"'outputs' of {what} must be a list of references, got {_kind(entry.value)}",
                entry.loc,
                hint="e.g. outputs: [out]",
            )
            return
        # A single reference is accepted as a one-item list.
        items = entry.value if isinstance(entry.value, list) else [entry]
        for i, item in enumerate(items):
            if _failed(item):
                continue
            if not isinstance(item.value, str):
                self.add(
                    "E_SPEC",
                    f"output {i} of {what} must be a reference (an input or node name, or node.port), got {_kind(item.value)}",
                    item.loc,
                )
                continue
            graph.output(item.value)
            graph.output_locations[-1] = item.loc


_MISSING_HINTS = {
    "hndl": "start the file with 'hndl: 1' (the format version)",
    "inputs": "add inputs: {x: {shape: [B, 784]}}",
    "nodes": "add nodes: {name: {op: ..., in: ...}}",
    "outputs": "add outputs: [name of the node that makes the result]",
}


# --- writing -----------------------------------------------------------------------------------------------


def dumps(graph: Graph) -> str:
    """Write ``graph`` as spec text (YAML), deterministically.

    Keys come in a fixed order (``hndl``, ``name``, ``inputs``, ``nodes``, ``outputs``, ``graphs``), nodes
    in the graph's order, one node per line. Parameters are written as they were given: inferred ones
    (``in_features``) stay out unless the graph states them. ``load(dumps(g))`` builds the same model as
    ``g`` (same modules, parameter names and shapes).

    Raises:
        HndlError: E_SPEC when a parameter value cannot be written as plain data (a Python object, a
            function), naming the node and parameter.
    """
    problems = ProblemList()
    lines = [f"hndl: {FORMAT_VERSION}", f"name: {_flow(graph.name)}"]
    lines += _graph_lines(graph, "", problems)
    if graph.graphs:
        lines.append("graphs:")
        for name, sub in graph.graphs.items():
            lines.append(f"  {_flow(name)}:")
            lines += _graph_lines(sub, "    ", problems)
    problems.raise_if_any(title=f"graph '{graph.name}'")
    return "\n".join(lines) + "\n"


def _graph_lines(graph: Graph, indent: str, problems: ProblemList) -> list[str]:
    lines = [f"{indent}inputs:" if graph.inputs else f"{indent}inputs: {{}}"]
    for name, spec in graph.inputs.items():
        lines.append(f"{indent}  {_flow(name)}: {_flow(spec.contract.to_spec())}")
    lines.append(f"{indent}nodes:" if graph.nodes else f"{indent}nodes: {{}}")
    for name, node in graph.nodes.items():
        entry: dict[str, Any] = {"op": node.op}
        if len(node.inputs) == 1:
            entry["in"] = node.inputs[0]
        elif node.inputs:
            entry["in"] = list(node.inputs)
        for key, value in node.params.items():
            if key in _NODE_KEYS or not isinstance(key, str):
                problems.add(
                    "E_SPEC",
                    f"parameter {key!r} cannot be written: the name is not a valid parameter key",
                    node=name,
                    op=node.op,
                )
                continue
            plain, reason = _plain_param(value)
            if reason:
                problems.add(
                    "E_SPEC", f"parameter {key!r} cannot be written to a spec: {reason}", node=name, op=node.op
                )
                continue
            entry[key] = plain
        lines.append(f"{indent}  {_flow(name)}: {_flow(entry)}")
    lines.append(f"{indent}outputs: {_flow(list(graph.outputs))}")
    return lines


def _plain_param(value: Any) -> tuple[Any, str]:
    """``value`` as plain spec data (tuples become lists, a Graph its name), or ``(None, reason)``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value, ""
    if isinstance(value, Graph):
        return value.name, ""
    if isinstance(value, (list, tuple)):
        out = []
        for item in value:
            plain, reason = _plain_param(item)
            if reason:
                return None, reason
            out.append(plain)
        return out, ""
    if isinstance(value, Mapping):
        mapping = {}
        for k, item in value.items():
            if not isinstance(k, str):
                return None, f"mapping key {k!r} is not a string"
            plain, reason = _plain_param(item)
            if reason:
                return None, reason
            mapping[k] = plain
        return mapping, ""
    return None, f"{type(value).__name__} {value!r} is not plain data"


def _flow(value: Any) -> str:
    """``value`` as one line of flow-style YAML."""
    text = yaml.dump(
        value,
        Dumper=_Dumper,
        default_flow_style=True,
        sort_keys=False,
        allow_unicode=True,
        width=2**31 - 1,
        explicit_end=False,
    )
    # A lone scalar is written as a document ("x\n...\n"); keep only the value.
    text = text.removesuffix("\n...\n").rstrip("\n")
    return text
