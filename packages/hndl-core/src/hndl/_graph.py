"""The graph: a name, inputs with contracts, nodes in insertion order, outputs. Pure data; no torch.

Nodes refer to values by *reference strings*: ``"x"`` (a graph input or a node's only output) or
``"node.port"`` (one output of a multi-output node; the port is its name or index). :class:`Handle` objects,
which :meth:`Graph.input` and :meth:`Graph.add` return, are a typed way of writing those strings.

Only problems that would make the graph itself ambiguous (an invalid or duplicate name) are raised here;
everything else (unknown ops, bad parameters, dangling references, shapes) is found by the checker at
build time, all at once.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ._contracts import Contract, ShapePattern, parse_dtype_rule
from ._errors import HndlError, Problem
from ._registry import registry
from .naming import EXCERPT_LIMIT, NAME_RE, excerpt

__all__ = ["Graph", "Handle", "InputSpec", "Node", "OutputSpec"]

#: Input names a GraphModule could not take by keyword: ``model(self=x)`` collides with ``Module.__call__``'s
#: own first parameter before hndl sees the call.
RESERVED_INPUT_NAMES = frozenset({"self"})


class Handle:
    """A value in a graph: a graph input, a node's output, or one port of a multi-output node.

    Pass handles to :meth:`Graph.add` to wire nodes together. Index a multi-output node's handle to pick a
    port: ``q, k, v = g.add("split", x, sections=3)`` or ``h[0]``.
    """

    __slots__ = ("graph", "node", "port")

    def __init__(self, graph: Graph, node: str, port: str | None = None) -> None:
        self.graph = graph
        self.node = node
        self.port = port

    @property
    def ref(self) -> str:
        """The reference string a spec file would use: ``node`` or ``node.port``."""
        return self.node if self.port is None else f"{self.node}.{self.port}"

    def __getitem__(self, port: int | str) -> Handle:
        if self.port is not None:
            raise HndlError(Problem("E_REF", f"{self.ref!r} is already a single port", node=self.node))
        return Handle(self.graph, self.node, str(port))

    def __iter__(self) -> Iterator[Handle]:
        count = self.graph.output_count(self.node)
        if count is None:
            raise HndlError(
                Problem(
                    "E_REF",
                    f"cannot unpack {self.node!r}: its number of outputs is not known before the graph is checked",
                    node=self.node,
                    hint="index the handle instead: h[0], h[1]",
                )
            )
        return (self[i] for i in range(count))

    def __repr__(self) -> str:
        return f"Handle({self.ref!r} of graph {self.graph.name!r})"


Ref = Handle | str


@dataclass
class InputSpec:
    """A graph input: its name, contract and, for spec files, where it was written."""

    name: str
    contract: Contract
    location: str | None = None


@dataclass
class OutputSpec:
    """A graph output's name and contract, as declared (each part optional).

    ``shape`` is a pattern over the graph's symbols (``[B, 10]``; a symbol the inputs do not bind binds here),
    ``dtype`` a dtype or category; ``None`` declares nothing. The checker holds the inferred output to them, and
    a built model checks them on each validating call (``E_CONTRACT``).
    """

    name: str | None = None
    shape: ShapePattern | None = None
    dtype: str | None = None
    #: Where the output was declared in a spec file (its name's key), for messages.
    location: str | None = None

    @property
    def declares(self) -> bool:
        """Whether a contract (shape or dtype) is declared."""
        return self.shape is not None or self.dtype is not None


@dataclass
class Node:
    """A node as written: op name, input references, parameters (as given, not yet validated).

    ``location`` is where the node was written in a spec file; ``key_locations`` maps a parameter name (and
    ``"in"``/``"op"``) to where that key was written, so errors point at the exact line.
    """

    name: str
    op: str
    inputs: list[str]
    params: dict[str, Any]
    location: str | None = None
    key_locations: dict[str, str] = field(default_factory=dict)
    #: Tied parameters: ``{own parameter: "node.parameter"}``, the other node's parameter shared by this node's
    #: layer (``{"weight": "wte.weight"}``); the target is a node of the same graph. An optional ``"when"`` key
    #: (``True``, ``False`` or ``"$name"`` of a bool parameter) says whether the tie applies (SPEC 1.7).
    tie: dict[str, Any] = field(default_factory=dict)
    #: Whether the node exists: ``True``, ``False`` or ``"$name"`` (a bool parameter of the subgraph). A node that
    #: does not exist passes its one input through: references to it read that input.
    when: Any = True
    #: Which input a node left out by ``when`` passes through, as written in ``inputs`` (needed when it has several:
    #: a residual ``add`` of ``[x, block]`` left out is ``block``); ``None``: its only input.
    otherwise: str | None = None
    #: Where the node's layer is registered: a dotted path relative to the module of the graph the node lives
    #: in (``"mlp.gate_proj"``; SPEC 6.7); ``None``: ``n_<name>`` (under ``nodes`` in the root graph).
    module_path: str | None = None

    def where(self, key: str | None = None) -> str | None:
        """The location of ``key`` if known, else of the node."""
        if key is not None and key in self.key_locations:
            return self.key_locations[key]
        return self.location


class Graph:
    """A model as data: inputs with contracts, named nodes, outputs, and named subgraphs.

    Example:
        >>> g = Graph("mlp")
        >>> x = g.input("x", ("B", 784))
        >>> h = g.add("linear", x, name="hidden", out_features=512)
        >>> g.output(g.add("relu", h))
        >>> list(g.nodes)
        ['hidden', 'relu']
    """

    def __init__(self, name: str = "graph", params: Mapping[str, Any] | None = None) -> None:
        _check_name(name, "graph")
        self.name = name
        self.inputs: dict[str, InputSpec] = {}
        self.nodes: dict[str, Node] = {}
        self.outputs: list[str] = []
        self.output_locations: list[str | None] = []
        #: Each output's name and contract (:class:`OutputSpec`), parallel to :attr:`outputs`.
        self.output_specs: list[OutputSpec] = []
        self.graphs: dict[str, Graph] = {}
        #: Where the graph was loaded from (a file path or ``"<string>"``), or ``None`` for Python-built graphs.
        self.source: str | None = None
        #: Whether this graph's own nodes may use ops that import Python code by name (``module``). Python-built
        #: graphs are trusted; :func:`hndl.load` sets this from its ``allow_imports`` argument, on the graph
        #: and on each graph of its ``graphs:`` section. The checker reads the flag of the graph each node
        #: belongs to, so a graph loaded without it refuses to import even as a subgraph of a trusted one.
        self.allow_imports: bool = True
        self.location: str | None = None
        #: What the model declares it is (a spec's top-level ``kind``: ``"decoder"``, ``"encoder"``), or ``None``;
        #: the checker warns where the attention disagrees (:mod:`hndl._meaning`).
        self.kind: str | None = None
        #: The graph's parameters with their defaults (``{"width": 64, "stride": 1}``). A node parameter written
        #: ``"$width"`` (or an integer expression such as ``"$width*4"``) takes the value a use of the graph passes
        #: (``{op: graph, graph: block, params: {width: 128}}``), and an input shape may name an integer
        #: parameter as a dim (``[B, width, H, W]``).
        self.params: dict[str, Any] = {}
        #: Where each parameter was declared in a spec file (``file:line:col``), for messages about overrides.
        self.param_locations: dict[str, str] = {}
        for key, default in (params or {}).items():
            _check_name(key, "graph parameter")
            self.params[key] = default
        self._name_counters: dict[str, int] = {}

    # -- building ---------------------------------------------------------------------------------------

    def input(
        self,
        name: str,
        shape: Any,
        dtype: str | None = None,
        device: str | None = None,
        ranges: Mapping[str, Mapping[str, int]] | None = None,
    ) -> Handle:
        """Declare an input with a contract and return its handle.

        Args:
            name: the input's name; positional call arguments bind in declaration order.
            shape: a shape pattern such as ``("B", 784)``, ``("*batch", "D")`` or ``"B T D"``.
            dtype: a dtype (``"int64"``) or category (``"float"``, ``"int"``, ``"any"``); any float by default.
            device: ``"cpu"``, ``"cuda"``, ... to pin the input's device; any device by default.
            ranges: the sizes some of the shape's symbols may take, ``{"B": {"min": 5}, "T": {"max": 512}}``;
                a call outside is ``E_INPUT``. Unbounded by default.

        Raises:
            HndlError: E_NAME for an invalid or taken name (or ``self``, or a Python keyword), E_SPEC for a
                malformed contract.
        """
        self._claim(name, "input")
        if name in RESERVED_INPUT_NAMES:
            raise HndlError(
                Problem(
                    "E_NAME",
                    f"input name {name!r} cannot be passed by keyword: torch's Module.__call__ takes it itself",
                    node=name,
                    hint="pick another name, such as 'x' or 'inputs'",
                )
            )
        if keyword.iskeyword(name):
            raise HndlError(
                Problem(
                    "E_NAME",
                    f"input name {name!r} is a Python keyword: the built model's forward could not name it",
                    node=name,
                    hint=f"pick another name, such as '{name}_'",
                )
            )
        try:
            contract = Contract.make(shape, dtype, device, ranges)
        except ValueError as exc:
            raise HndlError(Problem("E_SPEC", str(exc), node=name)) from None
        self.inputs[name] = InputSpec(name, contract)
        return Handle(self, name)

    def add(
        self,
        op: str,
        /,
        *inputs: Ref | Sequence[Ref],
        name: str | None = None,
        tie: Mapping[str, Any] | None = None,
        when: bool | str = True,
        otherwise: Ref | None = None,
        module_path: str | None = None,
        **params: Any,
    ) -> Handle:
        """Add a node running ``op`` on ``inputs`` and return its handle.

        Args:
            op: a registered op name (``"linear"``, ``"relu"``, ``"graph"``, ...).
            *inputs: handles (or reference strings) of the values it consumes; a list counts as several.
            name: the node's name; generated from the op (``linear``, ``linear_1``, ...) when omitted.
            tie: parameters this node's layer shares with another node's, ``{"weight": "wte.weight"}``: the
                built model holds one ``Parameter`` under both names, as PyTorch does for tied weights. A
                ``"when"`` key (``True``, ``False`` or ``"$name"`` of a bool parameter) makes it conditional:
                ``{"weight": "wte.weight", "when": "$tie_word_embeddings"}``; false leaves the layer its own.
            when: whether the node exists; in a parameterised subgraph, ``"$name"`` of a bool parameter. A node
                that does not exist passes its one input through; one with nothing to pass (a ``parameter``) is
                simply not there, and its readers take their other branch.
            otherwise: the input that passes through when the node does not exist (one of ``inputs``), for a node
                with several inputs and a ``when`` (``g.add("add", x, h, when="$residual", otherwise=h)``), or
                for one that reads a node that is not there.
            module_path: where the built layer is registered: a dotted path relative to the module of this graph
                (``"mlp.gate_proj"``), so a root graph's layer is ``model.get_submodule("mlp.gate_proj")`` and a
                repeated ``layers`` node's is ``layers.0.mlp.gate_proj`` when ``layers`` says ``module_path=
                "layers"``; ``None`` keeps ``n_<name>`` (under ``nodes`` in a root graph). Checked by
                :func:`hndl.check` (E_NAME).
            **params: the op's parameters. Parameters that follow from shapes (``in_features``) are inferred.
                ``op`` is positional-only, so a parameter may be called ``self`` or ``op`` (the checker then says
                whether the op takes it) without a TypeError.
                For ``op="graph"``, ``graph=`` may be a :class:`Graph`, which is added to :attr:`graphs`.

        Raises:
            HndlError: E_NAME for an invalid or taken name, E_REF for a handle of another graph.
        """
        if not isinstance(op, str):
            raise HndlError(Problem("E_OP", f"op must be a string such as 'linear', not {op!r}"))
        if name is None:
            name = self._fresh_name(op)
        self._claim(name, "node")
        refs: list[str] = []
        for item in inputs:
            # A str is a Sequence too, so mypy cannot narrow the else branch to Ref; _ref checks it at runtime.
            items = item if isinstance(item, (list, tuple)) else [cast(Ref, item)]
            refs.extend(self._ref(r, name) for r in items)
        if "graph" in params and isinstance(params["graph"], Graph):
            params["graph"] = self.add_subgraph(params["graph"])
        passes = None if otherwise is None else self._ref(otherwise, name)
        self.nodes[name] = Node(
            name, op, refs, dict(params), tie=dict(tie or {}), when=when, otherwise=passes, module_path=module_path
        )
        return Handle(self, name)

    def output(
        self,
        handle: Ref | Sequence[Ref],
        name: str | None = None,
        shape: Any = None,
        dtype: str | None = None,
    ) -> None:
        """Declare an output (or, given a list, several), with an optional name and contract. Outputs accumulate
        in call order; a built model returns them in that order.

        Args:
            handle: the value returned: a handle or reference string, or a list of them for several outputs
                (then without name or contract).
            name: the output's name, for messages, summaries and pictures (they show the reference when omitted).
            shape: a shape pattern over the graph's symbols, ``("B", 10)``: the checker requires the inferred
                shape to match it (a forgotten ``flatten`` is an ``E_SHAPE`` at the node that made the shape),
                and a built model checks it on each validating call (``E_CONTRACT``).
            dtype: a dtype or category the output must have (``"float32"``, ``"float"``).

        Raises:
            HndlError: E_NAME for an invalid or repeated output name, E_SPEC for a malformed shape or dtype,
                E_REF for a handle of another graph, or a second handle passed where the name goes.
        """
        if isinstance(name, (Handle, list, tuple)):
            raise HndlError(
                Problem(
                    "E_REF",
                    "g.output takes one value, then its name: several outputs go in one list",
                    hint="g.output([a, b]), or call g.output once per output",
                )
            )
        if isinstance(handle, (list, tuple)):
            if name is not None or shape is not None or dtype is not None:
                raise HndlError(
                    Problem(
                        "E_REF",
                        "a name or contract belongs to one output, not to a list of them",
                        hint="call g.output(value, name=..., shape=...) once per output",
                    )
                )
            for item in handle:
                self.output(item)
            return
        ref = self._ref(cast(Ref, handle), None)
        spec = OutputSpec(name=name)
        if name is not None:
            _check_name(name, "output")
            taken = [i for i, other in enumerate(self.output_specs) if other.name == name]
            if taken:
                raise HndlError(
                    Problem(
                        "E_NAME",
                        f"output name {name!r} is already taken by output {taken[0]}",
                        hint="each output needs its own name",
                    )
                )
        try:
            spec.shape = None if shape is None else ShapePattern.parse(shape)
            spec.dtype = None if dtype is None else parse_dtype_rule(dtype)
        except ValueError as exc:
            raise HndlError(Problem("E_SPEC", f"output {name or ref!r}: {exc}", node=name)) from None
        self.outputs.append(ref)
        self.output_locations.append(None)
        self.output_specs.append(spec)

    def output_name(self, index: int) -> str:
        """What messages call output ``index``: its declared name, else the reference it returns."""
        spec = self.output_specs[index] if index < len(self.output_specs) else None
        return spec.name if spec is not None and spec.name is not None else self.outputs[index]

    def add_subgraph(self, graph: Graph) -> str:
        """Make ``graph`` usable as ``{op: graph, graph: <name>}`` in this graph; returns its name."""
        existing = self.graphs.get(graph.name)
        if existing is not None and existing is not graph:
            raise HndlError(Problem("E_NAME", f"a different subgraph named {graph.name!r} is already defined"))
        self.graphs[graph.name] = graph
        for sub in graph.graphs.values():
            if sub.name not in self.graphs:
                self.graphs[sub.name] = sub
        return graph.name

    # -- queries ----------------------------------------------------------------------------------------

    def output_count(self, node: str) -> int | None:
        """How many outputs ``node`` has, if its op can say so from its parameters (or, for a node that runs a
        subgraph, from that subgraph's outputs); ``None`` when that is only known once the graph is checked."""
        n = self.nodes.get(node)
        if n is None:
            return 1 if node in self.inputs else None
        opdef = registry.find(n.op)
        if opdef is None:
            return None
        if opdef.runs_subgraph:
            name = n.params.get("graph")
            sub = self.graphs.get(name) if isinstance(name, str) else None
            return len(sub.outputs) if sub is not None and sub.outputs else None
        try:
            return opdef.output_count(n.params)
        except Exception:  # unvalidated params: the checker will report them
            return None

    def where(self, name: str) -> str | None:
        if name in self.nodes:
            return self.nodes[name].location
        if name in self.inputs:
            return self.inputs[name].location
        return None

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, inputs={list(self.inputs)}, nodes={len(self.nodes)}, outputs={self.outputs})"

    # -- helpers ----------------------------------------------------------------------------------------

    def _claim(self, name: Any, kind: str, location: str | None = None) -> None:
        _check_name(name, kind, location)
        if name in self.inputs or name in self.nodes:
            taken = "an input" if name in self.inputs else "a node"
            raise HndlError(
                Problem(
                    "E_NAME",
                    f"{kind} name {name!r} is already taken by {taken}",
                    node=name,
                    location=location,
                    hint="names of inputs and nodes share one namespace; pick another",
                )
            )

    def _fresh_name(self, op: str) -> str:
        base = re.sub(r"\W", "_", op) or "node"
        if not base[0].isalpha() and base[0] != "_":
            base = f"n_{base}"
        if base not in self.nodes and base not in self.inputs:
            return base
        # Remember where the count got to, so adding many unnamed nodes stays linear.
        i = self._name_counters.get(base, 1)
        while f"{base}_{i}" in self.nodes or f"{base}_{i}" in self.inputs:
            i += 1
        self._name_counters[base] = i + 1
        return f"{base}_{i}"

    def _ref(self, value: Ref, node: str | None) -> str:
        if isinstance(value, Handle):
            if value.graph is not self:
                raise HndlError(
                    Problem(
                        "E_REF",
                        f"handle {value.ref!r} belongs to graph {value.graph.name!r}, not {self.name!r}",
                        node=node,
                        hint="use a graph node (op 'graph') to compose graphs",
                    )
                )
            return value.ref
        if isinstance(value, str):
            return value
        raise HndlError(
            Problem("E_REF", f"an input must be a handle or a reference string, not {type(value).__name__}", node=node)
        )


def _check_name(name: Any, kind: str, location: str | None = None) -> None:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise HndlError(
            Problem(
                "E_NAME",
                f"{kind} name {excerpt(name)} is not valid",
                node=name if isinstance(name, str) and len(name) <= EXCERPT_LIMIT else None,
                location=location,
                hint="use letters, digits and underscores, not starting with a digit",
            )
        )


def split_ref(ref: str) -> tuple[str, str | None]:
    """``"node.port"`` -> ``("node", "port")``; ``"node"`` -> ``("node", None)``."""
    node, dot, port = ref.partition(".")
    return node, (port if dot else None)
