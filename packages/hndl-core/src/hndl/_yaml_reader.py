"""Reading YAML (or JSON) text into plain values that remember where they were written.

Reading never constructs arbitrary objects and never imports or runs anything. The text is *composed* with
PyYAML's safe loader into a tree of nodes that carry their start marks; this module turns that tree into
:class:`Located` values itself, accepting only the core tags (mapping, list, string, integer, float, boolean,
null). Plain scalars resolve by the YAML 1.2 core schema, which is also JSON's: ``1e-5`` is a number, and
``yes``, ``on`` and ``1:30`` stay strings (YAML 1.1 would turn them into ``True`` and ``90``).

This module knows YAML, not spec files: it reports what is wrong with the text (syntax, tags, aliases that
contain themselves, size and depth bounds) and records keys written twice as :class:`Duplicate` entries,
which the spec loader reports in the words of the section they are in.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import yaml

from ._errors import ProblemList
from .naming import excerpt

__all__ = ["CORE_RESOLVERS", "MAX_INT_DIGITS", "MAX_TEXT", "Duplicate", "Located", "describe", "read_yaml"]

# Bounds on the work a text can cause. Reading YAML costs time in proportion to the text, so the text itself is
# capped; aliases can make a small text describe an enormous tree ("billion laughs"), so values are counted as
# they are composed (and again as aliases are expanded); deep nesting would otherwise end in a RecursionError.
#: The longest spec text read, in characters (bytes, for a file or ``bytes``).
MAX_TEXT = 2_000_000
MAX_VALUES = 50_000
MAX_DEPTH = 64
#: The most decimal digits an integer may have: Python refuses to convert longer ones to and from text.
MAX_INT_DIGITS = 4300
_INT_LIMIT = 10**MAX_INT_DIGITS

_TAG = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL = (_TAG + t for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ = _TAG + "map", _TAG + "seq"

#: YAML 1.2 core schema: the implicit types of plain (unquoted) scalars, as PyYAML resolvers.
CORE_RESOLVERS: list[tuple[str, re.Pattern[str], list[str | None]]] = [
    (NULL, re.compile(r"^(?:~|null|Null|NULL|)$"), ["~", "n", "N", ""]),
    (BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")),
    (INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")),
    (
        FLOAT,
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
            r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+.0123456789"),
    ),
]


class _TooBig(Exception):
    """Composition stopped early: too many values, or nesting too deep (``problem`` says which)."""

    def __init__(self, problem: str, mark: Any, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.mark = mark
        self.hint = hint


class _Bounded(yaml.composer.Composer):
    """PyYAML's composer, counting values and nesting as it composes them, so that a text of a million list
    items, or of thousands of opening brackets, stops at the bound instead of being parsed in full first (minutes
    and gigabytes for the first; the pure-Python scanner's cost grows with the square of the nesting for the
    second). Both loaders below compose through it: they differ only in the parser that feeds it events."""

    def __init__(self) -> None:
        super().__init__()
        self.values = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        # A mapping key is composed with index None; keys are not values (the reader counts the same way).
        if not (isinstance(parent, yaml.MappingNode) and index is None):
            self.values += 1
            if self.values > MAX_VALUES:
                mark = self.peek_event().start_mark
                raise _TooBig(f"the spec has more than {MAX_VALUES:,} values", mark, _TOO_BIG_HINT)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH + 1:  # the document itself is depth 1
                raise _TooBig(f"values are nested more than {MAX_DEPTH} levels deep", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


class _Loader(yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _Bounded, yaml.resolver.BaseResolver):
    """The pure-Python loader: PyYAML's reader, scanner and parser, with YAML 1.2 core resolution (used for
    composition only, never construction). It is the reference: every text the fast loader cannot read is read
    again here, so that what a syntax error says (and where) comes from one parser."""

    yaml_implicit_resolvers: ClassVar[dict[Any, Any]] = {}

    def __init__(self, stream: str) -> None:
        yaml.reader.Reader.__init__(self, stream)
        yaml.scanner.Scanner.__init__(self)
        yaml.parser.Parser.__init__(self)
        _Bounded.__init__(self)
        yaml.resolver.BaseResolver.__init__(self)


for _tag, _regexp, _first in CORE_RESOLVERS:
    _Loader.add_implicit_resolver(_tag, _regexp, _first)

#: libyaml's parser, where PyYAML was built with it (its wheels are): it scans and parses about five times
#: faster than the pure-Python one, which a long spec (a 500 KB list, a reshape to rank 40,000) otherwise spends a
#: second in. Only the events come from C: composition stays in :class:`_Bounded`, so the bounds hold as they are
#: met and the nodes are PyYAML's own, with the same marks (line and column) and the same resolution.
_CParser: Any = getattr(getattr(yaml, "_yaml", None), "CParser", None) if yaml.__with_libyaml__ else None

if _CParser is not None:

    class _FastLoader(_Bounded, _CParser, yaml.resolver.BaseResolver):
        """libyaml's events composed by :class:`_Bounded`, resolved as :class:`_Loader` resolves them."""

        yaml_implicit_resolvers = _Loader.yaml_implicit_resolvers

        def __init__(self, stream: str) -> None:
            _CParser.__init__(self, stream)
            _Bounded.__init__(self)
            yaml.resolver.BaseResolver.__init__(self)

        def compose_scalar_node(self, anchor: Any) -> Any:
            event = self.peek_event()
            if not event.style and event.value == "":  # plain: libyaml says "", PyYAML None
                # An empty value (``in: ,``): libyaml marks it where the next token starts, PyYAML just after
                # the colon. The located value would differ by a column or a line, so the text is read again.
                raise _ReadAgain
            return super().compose_scalar_node(anchor)


class _ReadAgain(Exception):
    """The fast loader leaves this text to the pure-Python one (raised while composing)."""


#: Where libyaml and PyYAML are known to differ, the fast loader is not tried: outside printable ASCII (libyaml
#: counts a byte-order mark in a column, and lets a tab through where PyYAML refuses it) and at a ``?`` (libyaml
#: reads ``a?: 1`` in a flow mapping as a key, PyYAML refuses it). Specs are almost always plain ASCII.
_NOT_FOR_LIBYAML = re.compile(r"[^\n\x20-\x3e\x40-\x7e]")


@dataclass
class Duplicate:
    """A mapping key written a second time (YAML would silently keep the last one)."""

    key: Any
    loc: str
    first_line: str
    #: Set once the spec loader has reported it, so that a final sweep reports each duplicate exactly once.
    reported: bool = False


@dataclass
class Located:
    """A value read from the text with where it was written. Lists and mappings hold located values;
    ``keys`` maps each mapping key to the location of the key itself."""

    value: Any
    loc: str
    keys: dict[Any, str] = field(default_factory=dict)
    #: False when this value (or one inside it) could not be read; the problem is already reported, and the
    #: loader skips the value rather than report a second, confusing problem about it.
    ok: bool = True
    #: Keys of this mapping written twice; the first occurrence is the one kept.
    duplicates: list[Duplicate] = field(default_factory=list)

    def plain(self) -> Any:
        """The value with all locations stripped: what an op parameter receives."""
        if isinstance(self.value, list):
            return [item.plain() for item in self.value]
        if isinstance(self.value, dict):
            return {k: v.plain() for k, v in self.value.items()}
        return self.value

    @property
    def failed(self) -> bool:
        """Whether this value itself could not be read (already reported): nothing more is said about it."""
        return self.value is None and not self.ok

    def children(self) -> list[Located]:
        if isinstance(self.value, list):
            return list(self.value)
        if isinstance(self.value, dict):
            return list(self.value.values())
        return []


def describe(value: Any) -> str:
    """How a message names a value read from YAML: ``string 'B'``, ``integer 3``, ``boolean true``, ``a list``."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, int):
        return f"integer {excerpt(value)}"
    if isinstance(value, float):
        return f"number {value}"
    if isinstance(value, str):
        return f"string {excerpt(value)}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _show_tag(tag: str) -> str:
    return "!!" + tag[len(_TAG) :] if tag.startswith(_TAG) else excerpt(tag)


_LEADING_TABS = re.compile(r"^[ \t]+", re.MULTILINE)


def read_yaml(text: str, file: str, problems: ProblemList) -> Located | None:
    """Parse ``text`` into located values, adding every problem to ``problems``; None when nothing is readable.

    ``file`` is the label locations start with (a path, or ``<string>``).
    """
    if len(text) > MAX_TEXT:
        problems.add("E_SPEC", f"the spec is longer than {MAX_TEXT:,} characters", hint=_TOO_BIG_HINT)
        return None
    if text.lstrip().startswith(("{", "[")):
        # JSON is YAML's flow style, except that JSON may indent with tabs, which YAML forbids. Tabs in
        # indentation carry no meaning in JSON, so they become spaces (one for one: columns stay right).
        text = _LEADING_TABS.sub(lambda m: m.group(0).replace("\t", " "), text)
    loader = None
    try:
        node = _compose_fast(text)
        if node is _UNREAD:
            loader = _Loader(text)  # reads the text's first characters: may raise ReaderError already
            node = loader.get_single_node()
    except _TooBig as exc:
        problems.add(
            "E_SPEC",
            exc.problem,
            location=f"{file}:{exc.mark.line + 1}:{exc.mark.column + 1}",
            hint=exc.hint,
        )
        return None
    except yaml.MarkedYAMLError as exc:
        message, mark, hint = _syntax_error(exc, _open_bracket(loader, text))
        location = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark is not None else None
        problems.add("E_SPEC", f"YAML syntax error: {message}", location=location, hint=hint)
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
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        problems.add(
            "E_SPEC",
            "the spec is empty",
            location=f"{file}:1:1",
            hint="start with 'hndl: 1', then inputs, nodes, outputs",
        )
        return None
    return _Reader(file, problems).convert(node, 0)


#: What :func:`_compose_fast` returns for a text it leaves to the pure-Python loader.
_UNREAD = object()


def _compose_fast(text: str) -> Any:
    """The text's node tree through libyaml, or ``_UNREAD`` where libyaml is missing or refused the text.

    A bound met while composing (:class:`_TooBig`) is the answer whichever parser met it, so it propagates. Any
    other failure is left to the pure-Python loader, which reads the text again: a syntax error is then reported
    in its words and at its marks (the open-bracket stack, the reader's position of a bad character), and a text
    the two parsers disagree on reads as it always has. libyaml also stops nesting at its own depth, and a
    string holding a lone surrogate does not encode for it; both are read again the same way. Where the two
    parsers are known to read a text differently, libyaml is not asked (``_NOT_FOR_LIBYAML``, ``_ReadAgain``):
    the values and their locations are the same whichever parser read them, which
    ``tests/core/test_yaml_reader_parsers.py`` holds them to."""
    if _CParser is None or _NOT_FOR_LIBYAML.search(text):
        return _UNREAD
    loader = None
    try:
        loader = _FastLoader(text)
        return loader.get_single_node()
    except _TooBig:
        raise
    except Exception:  # any refusal is read again by the reference parser, which reports it
        return _UNREAD
    finally:
        if loader is not None:
            loader.dispose()


#: The constructs PyYAML names in its context ("while parsing a flow mapping") that a text opens and must close:
#: what opens each one, and what closes it.
_OPENED = {
    "flow mapping": ("'{'", "'}'"),
    "flow sequence": ("'['", "']'"),
    "quoted scalar": ("quoted string", "the same quote"),
}


def _open_bracket(loader: _Loader | None, text: str) -> Any:
    """The mark of the innermost '{' or '[' still open where parsing stopped (the parser keeps a stack of the
    marks where each open collection started), or None."""
    for mark in reversed(getattr(loader, "marks", None) or []):
        if text[mark.index : mark.index + 1] in ("{", "["):
            return mark
    return None


def _syntax_error(exc: yaml.MarkedYAMLError, bracket: Any) -> tuple[str, Any, str | None]:
    """``(message, mark to report at, hint)`` for a YAML syntax error.

    PyYAML notices a bracket or quote left open only where the text stops making sense, often lines later, and
    its ``problem_mark`` points there. The construct left open is the mistake to fix, so when it was opened on an
    earlier line the error is reported where it was opened, and the message says both places. ``bracket`` is the
    innermost bracket still open, for errors whose context names something else (the text ending inside it).
    """
    problem = exc.problem or "invalid YAML"
    start, end = exc.context_mark, exc.problem_mark
    context = exc.context or ""
    opened = next((v for k, v in _OPENED.items() if context.endswith(k)), None)
    if opened is None and bracket is not None and end is not None and end.line > bracket.line:
        start = bracket
        opened = _OPENED["flow mapping" if bracket.buffer[bracket.pointer] == "{" else "flow sequence"]
    if opened is None or start is None:
        if context:
            at = f" (started at {start.line + 1}:{start.column + 1})" if start is not None else ""
            problem = f"{context}{at}, {problem}"
        return problem, end or start, None
    opener, closer = opened
    found = f" at {end.line + 1}:{end.column + 1}" if end is not None else ""
    message = f"the {opener} opened at {start.line + 1}:{start.column + 1} is not closed: {problem}{found}"
    hint = f"close it with {closer}" + (", or separate its entries with ','" if opener != "quoted string" else "")
    later = end is not None and end.line > start.line
    return message, start if later or end is None else end, hint


_TOO_BIG_HINT = "a spec this large is probably a mistake; hndl reads specs of a few thousand nodes quickly"


class _Reader:
    """Turns composed YAML nodes into :class:`Located` values, collecting problems instead of raising."""

    def __init__(self, file: str, problems: ProblemList) -> None:
        self.file = file
        self.problems = problems
        self.count = 0
        self.active: set[int] = set()  # ids of collection nodes being converted, to catch recursive aliases
        self.too_big = False

    def where(self, mark: Any) -> str:
        return f"{self.file}:{mark.line + 1}:{mark.column + 1}"

    def convert(self, node: yaml.Node, depth: int) -> Located:
        loc = self.where(node.start_mark)
        self.count += 1
        if self.count > MAX_VALUES:
            if not self.too_big:
                self.too_big = True
                self.problems.add(
                    "E_SPEC",
                    f"the spec expands to more than {MAX_VALUES:,} values",
                    location=loc,
                    hint="aliases (*name) repeat what they refer to; a spec this large is probably a mistake",
                )
            return Located(None, loc, ok=False)
        if depth > MAX_DEPTH:
            self.problems.add("E_SPEC", f"values are nested more than {MAX_DEPTH} levels deep", location=loc)
            return Located(None, loc, ok=False)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node, loc)
        if id(node) in self.active:
            self.problems.add("E_SPEC", "an alias refers to a value that contains it", location=loc)
            return Located(None, loc, ok=False)
        self.active.add(id(node))
        try:
            if isinstance(node, yaml.SequenceNode):
                if node.tag != _SEQ:
                    return self._bad_tag(node, loc)
                items = [self.convert(item, depth + 1) for item in node.value]
                return Located(items, loc, ok=all(item.ok for item in items))
            if isinstance(node, yaml.MappingNode):
                if node.tag != _MAP:
                    return self._bad_tag(node, loc)
                return self._mapping(node, loc, depth)
        finally:
            self.active.discard(id(node))
        self.problems.add("E_SPEC", "unexpected YAML content", location=loc)
        return Located(None, loc, ok=False)

    def _mapping(self, node: yaml.MappingNode, loc: str, depth: int) -> Located:
        # A bad key drops its entry (reported); a bad value stays, marked not ok, so that the key still counts
        # as present and no "missing key" follows from a value that was merely malformed.
        values: dict[Any, Located] = {}
        keys: dict[Any, str] = {}
        duplicates: list[Duplicate] = []
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
            value = self.convert(value_node, depth + 1)
            if not key.ok:
                continue
            if key.value in values:
                duplicates.append(Duplicate(key.value, key_loc, keys[key.value].rsplit(":", 2)[-2]))
                continue
            values[key.value] = value
            keys[key.value] = key_loc
        return Located(values, loc, keys, ok=all(v.ok for v in values.values()), duplicates=duplicates)

    def _scalar(self, node: yaml.ScalarNode, loc: str) -> Located:
        text = node.value
        tag = node.tag
        try:
            if tag == STR:
                return Located(text, loc)
            if tag == NULL:
                if text not in ("", "~", "null", "Null", "NULL"):
                    raise ValueError
                return Located(None, loc)
            if tag == BOOL:
                if text.lower() not in ("true", "false"):
                    raise ValueError
                return Located(text.lower() == "true", loc)
            if tag == INT:
                return Located(_parse_int(text), loc)
            if tag == FLOAT:
                return Located(_parse_float(text), loc)
        except _IntegerTooLong:
            self.problems.add(
                "E_SPEC",
                f"integer {excerpt(text, limit=20)} has more than {MAX_INT_DIGITS:,} digits",
                location=loc,
            )
            return Located(None, loc, ok=False)
        except ValueError:
            self.problems.add("E_SPEC", f"{excerpt(text)} is not a valid {_show_tag(tag)} value", location=loc)
            return Located(None, loc, ok=False)
        return self._bad_tag(node, loc)

    def _bad_tag(self, node: yaml.Node, loc: str) -> Located:
        self.problems.add(
            "E_SPEC",
            f"tag {_show_tag(node.tag)} is not allowed",
            location=loc,
            hint="a spec holds plain data only: mappings, lists, strings, numbers, true/false and null",
        )
        return Located(None, loc, ok=False)


class _IntegerTooLong(ValueError):
    pass


def _parse_int(text: str) -> int:
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body.startswith("0x"):
        value = int(body[2:], 16)
    elif body.startswith("0o"):
        value = int(body[2:], 8)
    elif not body.isdigit():
        raise ValueError(text)
    elif len(body.lstrip("0")) > MAX_INT_DIGITS:
        raise _IntegerTooLong(text)  # before int(), which would refuse it with a ValueError of its own
    else:
        value = int(body, 10)
    # 0x and 0o integers have no such limit in Python, but one that large could not be printed in a message.
    if value >= _INT_LIMIT:
        raise _IntegerTooLong(text)
    return sign * value


def _parse_float(text: str) -> float:
    lowered = text.lower()
    if lowered in (".inf", "+.inf"):
        return math.inf
    if lowered == "-.inf":
        return -math.inf
    if lowered == ".nan":
        return math.nan
    return float(text)
