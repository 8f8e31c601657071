"""A spec document built into graphs: its top-level keys, format version, ``kind`` and name, each graph under
``graphs``, and each graph's parameters.

:class:`SpecBuilder` reads the located values :mod:`hndl._yaml_reader` made of the text and builds the graphs
through the ``Graph`` API; a graph's ``inputs``, ``nodes`` and ``outputs`` sections are read by
:mod:`hndl._spec_inputs_outputs` and :mod:`hndl._spec_nodes`, and every problem goes to one
:class:`~hndl._spec_checks.SpecChecks`. :mod:`hndl._spec_loader` runs it and raises what it found.
"""

from __future__ import annotations

from pathlib import Path

from ._errors import ProblemList
from ._graph import Graph
from ._spec_checks import SpecChecks
from ._spec_dumper import FORMAT_VERSION
from ._spec_inputs_outputs import read_inputs, read_outputs
from ._spec_nodes import read_nodes
from ._yaml_reader import Located, describe
from .naming import NAME_RE, excerpt, suggestion

__all__ = ["REQUIRED_KEYS", "ROOT_KEYS", "SUBGRAPH_KEYS", "TEXT_LABEL", "SpecBuilder"]

#: The keys of a spec document.
ROOT_KEYS = ("hndl", "name", "kind", "params", "inputs", "nodes", "outputs", "graphs")
#: The keys of a graph under ``graphs``.
SUBGRAPH_KEYS = ("params", "inputs", "nodes", "outputs")
#: The keys every graph must have, the top level's included.
REQUIRED_KEYS = ("inputs", "nodes", "outputs")
#: The file name locations of spec text (:func:`hndl.loads`) carry: it names no file to name a graph after.
TEXT_LABEL = "<string>"


class SpecBuilder:
    """Checks the structure of located values and builds the graphs, adding problems as it goes."""

    def __init__(self, file: str, problems: ProblemList, *, allow_imports: bool) -> None:
        self.file = file
        self.checks = SpecChecks(problems)
        self.allow_imports = allow_imports

    def root(self, doc: Located) -> Graph | None:
        """The graph a whole document describes, its subgraphs added; ``None`` when it has no graph to build
        (not a mapping, or unreadable). Problems are added to the list as they are found."""
        graph = self._root(doc)
        # Keys written twice where the builder did not look (inside a value it skipped, or deep in a
        # parameter): reported here, once each.
        self.checks.duplicates(doc)
        return graph

    def _root(self, doc: Located) -> Graph | None:
        if doc.failed:
            return None
        if not isinstance(doc.value, dict):
            self.checks.add(
                "E_SPEC",
                f"a spec must be a mapping with keys hndl, name, inputs, nodes, outputs; got {describe(doc.value)}",
                doc.loc,
                hint="start with 'hndl: 1', then inputs, nodes, outputs",
            )
            return None
        self.checks.keys(doc, ROOT_KEYS, ("hndl", *REQUIRED_KEYS), "the spec", doc.loc)
        self._version(doc)
        graph = self._graph(doc, self._graph_name(doc), top=True)
        assert graph is not None  # only a subgraph (top=False) can fail to build
        graph.kind = self._kind(doc)
        graphs = doc.value.get("graphs")
        if graphs is None or graphs.failed:
            return graph
        if not isinstance(graphs.value, dict):
            self.checks.add(
                "E_SPEC",
                f"'graphs' must be a mapping of graph name to {{inputs, nodes, outputs}}, got {describe(graphs.value)}",
                graphs.loc,
            )
            return graph
        self.checks.duplicate_names(graphs, "graph")
        for sub_name, sub_doc in graphs.value.items():
            loc = graphs.keys[sub_name]
            if not self.checks.name_ok(sub_name, "graph", loc):
                continue
            sub = self._graph(sub_doc, sub_name, top=False, where=loc)
            if sub is not None:
                graph.add_subgraph(sub)
        return graph

    def _version(self, doc: Located) -> None:
        """The format version (``hndl: 1``): an integer this hndl reads."""
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
        self.checks.add("E_SPEC", message, version.loc, hint=f"this hndl reads 'hndl: {FORMAT_VERSION}'")

    def _kind(self, doc: Located) -> str | None:
        """The model's declared ``kind`` (one of :data:`hndl._meaning.KINDS`), ``None`` when not declared."""
        from ._meaning import KINDS

        entry = doc.value.get("kind")
        if entry is None or entry.failed:
            return None
        if isinstance(entry.value, str) and entry.value in KINDS:
            return entry.value
        self.checks.add(
            "E_SPEC",
            f"kind must be one of {', '.join(KINDS)}, got {describe(entry.value)}",
            entry.loc,
            hint=suggestion(str(entry.value), list(KINDS)) if isinstance(entry.value, str) else None,
        )
        return None

    def _graph_name(self, doc: Located) -> str:
        """The top-level graph's name: ``name``, else the file's stem when it is a valid name, else ``graph``."""
        entry = doc.value.get("name")
        if entry is None:
            # Unnamed specs take the file's name when it is a valid name, so messages still say something useful.
            stem = Path(self.file).stem if self.file != TEXT_LABEL else ""
            return stem if NAME_RE.match(stem) else "graph"
        if not entry.failed and self.checks.name_ok(entry.value, "graph", entry.loc):
            return str(entry.value)
        return "graph"

    def _graph(self, doc: Located, name: str, *, top: bool, where: str | None = None) -> Graph | None:
        """Graph ``name`` built from its mapping (the document itself when ``top``; else one of ``graphs``,
        named at ``where``), each section read in turn; ``None`` for a subgraph that is not a mapping."""
        what = "the spec" if top else f"graph {name!r}"
        if not top:
            if doc.failed:
                return None
            if not isinstance(doc.value, dict):
                self.checks.add(
                    "E_SPEC",
                    f"graph {name!r} must be a mapping with keys inputs, nodes, outputs; got {describe(doc.value)}",
                    doc.loc,
                )
                return None
            self.checks.keys(doc, SUBGRAPH_KEYS, REQUIRED_KEYS, what, where or doc.loc)
        graph = Graph(name)
        graph.source = self.file
        graph.location = where or doc.loc
        graph.allow_imports = self.allow_imports
        fields = doc.value
        if "params" in fields and not fields["params"].failed:
            self._params(graph, fields["params"], what)
        if "inputs" in fields and not fields["inputs"].failed:
            read_inputs(self.checks, graph, fields["inputs"], what)
        if "nodes" in fields and not fields["nodes"].failed:
            read_nodes(self.checks, graph, fields["nodes"], what)
        if "outputs" in fields and not fields["outputs"].failed:
            read_outputs(self.checks, graph, fields["outputs"], what)
        return graph

    def _params(self, graph: Graph, entry: Located, what: str) -> None:
        """A graph's parameters: a mapping of name to default value (any plain value)."""
        if not isinstance(entry.value, dict):
            self.checks.add(
                "E_SPEC",
                f"'params' of {what} must be a mapping of parameter name to default, got {describe(entry.value)}",
                entry.loc,
                hint="e.g. params: {width: 64, stride: 1}",
            )
            return
        self.checks.duplicate_names(entry, "parameter")
        for name, value in entry.value.items():
            if (
                self.checks.name_ok(name, "parameter", entry.keys[name])
                and value.ok
                and self.checks.text_keys(value, name)
            ):
                graph.params[name] = value.plain()
                graph.param_locations[name] = entry.keys[name]
