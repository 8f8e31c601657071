"""The op registry: what each node kind accepts, how its output is inferred, and how it is built.

An op is declared once, with its parameter schema, its ports and their contracts, an inference rule and a
builder; the checker, the builder, the spec loader and the docs generator all read the same declaration.
Built-in ops and user ops are registered the same way, with :func:`op`::

    @hndl.op(
        "scale",
        params=[hndl.Param("factor", "float", default=1.0, doc="the multiplier")],
        inputs=[hndl.Port("x", ["*shape"])],
        outputs=[hndl.Port("y", ["*shape"], dtype="same:x")],
        layer="mylib.Scale",
        returns="new",
        saves="none",
    )
    def scale(p, inputs):
        '''Multiply by a constant.'''
        from mylib import Scale
        return Scale(p.factor)

An op that one traced ATen operation computes names it (``imports=("aten.erfinv.default",)``, or with the
importer's row kind that reads the call's arguments: :class:`ImportRow`), and ``hndl.from_module`` imports that
operation as the op.

Plugins register ops from an entry point in the ``hndl.ops`` group; the registry loads them the first time it is
asked for an op it does not know, or for the list of all ops.
"""

from __future__ import annotations

import ast
import inspect
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._contracts import ShapePattern, TensorType, parse_dtype_rule
from ._errors import HndlError, Problem
from ._op_facts import SAVES, InnerRule, MacsRule
from ._op_imports import ImportRow, imports_of, layer_class
from ._op_schema import REQUIRED as REQUIRED
from ._op_schema import InferError as InferError
from ._op_schema import Param as Param
from ._op_schema import Params as Params
from ._op_schema import Port as Port
from .naming import NAME_RE, closest, excerpt, normal_name

__all__ = [
    "REQUIRED",
    "RETURNS",
    "SAVES",
    "FactTable",
    "ImportRow",
    "InferError",
    "OpDef",
    "Param",
    "Params",
    "Port",
    "op",
    "layer_of",
    "registry",
]


InferFn = Callable[[Params, Sequence[TensorType]], Sequence[TensorType]]
BuildFn = Callable[[Params, Sequence[TensorType]], Any]


@dataclass(frozen=True)
class OpDef:
    """The full declaration of an op. Usually made with the :func:`op` decorator.

    Attributes:
        name: the op's name in specs and :meth:`Graph.add`.
        build: ``build(params, input_types) -> torch.nn.Module``. Imports torch itself, so that describing
            and checking graphs never needs torch.
        doc: the op's documentation (the builder's docstring); its first line is the summary.
        params, inputs, outputs: the schema and the ports with their contracts.
        infer: ``infer(params, input_types) -> output_types``, raising :class:`InferError`. When omitted,
            the outputs' shape patterns are filled in from the symbols the inputs bound. An op with ``infer``
            may still declare output patterns, for the docs; they must agree with it (a test holds every
            registered op to that), and a name in them that nothing binds is a dim only ``infer`` computes,
            which ``inference`` must explain.
        derive: ``derive(params) -> dict`` of extra names the patterns may use (``kernel_h`` from
            ``kernel_size``), computed after validation and before the inputs are matched.
        layer: the class the builder makes, as one dotted path (``"torch.nn.Linear"``), or a tuple of them for
            an op whose builder picks one by its parameters (``add``: ``Add``, ``TensorScalar`` or
            ``ScalarTensor``). The fast path resolves it (``hndl.torch._inline``: which layers return a new
            tensor) and a test holds every built-in op's builder to it; it is never imported while checking.
        module: what the builder makes, in words, for the docs. Defaults to :attr:`layer` (later paths in the
            first one's module by their class name: ``hndl.torch.layers.Add or TensorScalar``); give it for an
            op whose class is not fixed (``module``: "whatever 'target' names").
        inference: for the docs, what the output patterns do not say (constraints, a rounding rule, the names a
            pattern leaves to ``infer``); the docs show it after the declared output shapes.
        example: an example node for the docs, as a spec mapping without ``in``.
        count_outputs: ``count_outputs(params) -> int`` for ops whose output count depends on parameters.
        input_shape_example: an input shape for the docs example (spec form).
        imports_code: nodes of this op import Python code by name (the ``target`` parameter, by convention):
            the checker refuses them in a graph loaded without ``allow_imports``.
        runs_subgraph: a node of this op runs the graph named by its ``graph`` parameter, ``repeat`` times
            (both parameters must be declared): the checker checks that graph in place, once per repetition,
            and the builder makes one ``ModuleDict`` per repetition instead of calling ``build``.
        returns: what the built layer's outputs may share memory with, one of :data:`RETURNS`: ``"new"`` (a
            tensor nothing else holds), ``"input"`` (possibly an input itself: dropout in eval mode), ``"view"``
            (possibly a view of an input: reshape, permute), ``"state"`` (a registered tensor of the layer:
            ``parameter``, ``buffer``), or ``"unknown"`` (not declared; treated as anything). The fast path and
            a called block write into a value in place only when its producer returns ``"new"`` (with no
            gradient recorded, also ``"input"`` of a private value: ``hndl.torch._in_place``).
        aliases: names people bring from other libraries for this op, each with the parameters it implies
            (``{"Hardsigmoid": {}, "gelu_new": {"approximate": "tanh"}}``): an unknown op of that name gets
            this op, with those parameters, as its hint. Spelling variants need no entry (case and separators
            are ignored: ``LayerNorm2d`` finds ``layernorm2d``).
        error_example: a node this op refuses, for the docs: ``{"params": {...}, "inputs": [shape or
            {"shape": ..., "dtype": ...}, ...]}``; the reference page shows the message it gets.
        saves: what the layer's backward keeps of its forward, one of :data:`SAVES`: its floating ``"inputs"``
            (a linear layer: the weight's gradient is ``grad^T @ x``), its ``"output"`` (ReLU, softmax),
            ``"both"`` (``sdpa``, the recurrent layers), ``"none"`` (an addition, a reshape, a lookup by integer
            indices), or ``"unknown"`` (not declared: counted as its output, the cautious guess). torch's
            derivative formulas (``tools/autograd/derivatives.yaml``) say which. The training-memory estimate
            (``hndl.summary(train=True)``, ``checkpointing(budget=...)``) reads it; a built-in op must declare it.
        passes_gradient: its backward hands its output's gradient to its inputs as it is, or as views of it
            (``add``, ``reshape``, ``concat``): no new memory. Such an op keeps nothing (``saves="none"``).
        inner_memory: ``inner_memory(node) -> [(elements, dtype), ...] | None``: what the layer keeps inside it
            for backward besides its inputs and output (attention's projected queries, keys and values,
            dropout's mask; ``"float"`` for the model's floating dtype), ``None`` when a shape it needs is
            unknown. ``node`` is a checked node: its ``params``, ``in_types`` and ``out_types``.
        macs: ``macs(node) -> Dim | None``: the node's multiply-adds, for the products torch's
            ``FlopCounterMode`` counts (FLOPs = 2 x MACs), ``None`` when a shape it needs is unknown. Without
            it an op counts 0 (element-wise ops, norms, pooling); :mod:`hndl._op_facts` holds the built-in
            ops' shared rules.
        imports: the traced ATen operations ``hndl.from_module`` imports as a node of this op, each with the
            importer's row that reads the call (:class:`ImportRow`; ``op`` takes a plain list of names for the
            default row, the op on the call's ``self``): ``("aten.hardswish.default", "aten.hardswish_.default")``.
            The importer's table (``hndl.importer.FUNCTIONS``) is read from these; an operation two ops declare
            is refused at registration.
    """

    name: str
    build: BuildFn
    doc: str = ""
    params: tuple[Param, ...] = ()
    inputs: tuple[Port, ...] = ()
    outputs: tuple[Port, ...] = (Port("y", None),)
    infer: InferFn | None = None
    derive: Callable[[Params], Mapping[str, Any]] | None = None
    module: str = ""
    inference: str = ""
    example: Mapping[str, Any] = field(default_factory=dict)
    count_outputs: Callable[[Mapping[str, Any]], int] | None = None
    input_shape_example: Sequence[Any] | None = None
    imports_code: bool = False
    runs_subgraph: bool = False
    returns: str = "unknown"
    aliases: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    error_example: Mapping[str, Any] | None = None
    layer: str | tuple[str, ...] = ""
    saves: str = "unknown"
    passes_gradient: bool = False
    inner_memory: InnerRule | None = None
    macs: MacsRule | None = None
    imports: Mapping[str, ImportRow] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # The docs' "Builds" line is the layer's path unless the op words it itself: one place names the class.
        if not self.module and self.layer_paths:
            object.__setattr__(self, "module", _layer_text(self.layer_paths))
        # One form, a mapping, also for an OpDef made directly with a plain list of ATen names (each the default row).
        object.__setattr__(self, "imports", imports_of(self.imports, self.name))

    @property
    def layer_paths(self) -> tuple[str, ...]:
        """:attr:`layer` as a tuple of dotted paths (empty when not declared)."""
        if isinstance(self.layer, str):
            return (self.layer,) if self.layer else ()
        return tuple(self.layer)

    @property
    def summary(self) -> str:
        return self.doc.strip().splitlines()[0] if self.doc.strip() else ""

    def __reduce_ex__(self, protocol: Any) -> Any:
        # A registered op is pickled (and deep-copied) as its name, like a class: an op made from a row has a
        # builder and an inference closure, which pickle cannot write by value, and the process that loads a
        # pickled model must have the same ops registered anyway.
        if registry._ops.get(self.name) is self:
            return (_registered_op, (self.name,))
        return object.__reduce_ex__(self, protocol)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)

    def active_inputs(self, params: Mapping[str, Any]) -> list[Port]:
        """The input ports that take a value under ``params``: a port with ``when`` needs its flag set, and a
        ``scalar`` port whose parameter holds a number takes none."""
        return [
            p
            for p in self.inputs
            if (p.when is None or params.get(p.when) is True) and not (p.scalar and params.get(p.name) is not None)
        ]

    def output_count(self, params: Mapping[str, Any]) -> int:
        if self.count_outputs is not None:
            return int(self.count_outputs(params))
        return len(self.outputs)

    def output_names(self, params: Mapping[str, Any]) -> list[str]:
        count = self.output_count(params)
        # A single output keeps its first port's name even when the count is computed (module with one output:
        # 'y'; attention without a growing cache, whose other ports are outputs only with past: true).
        if count == 1 and self.outputs:
            return [self.outputs[0].name]
        if len(self.outputs) == count and self.count_outputs is None:
            return [p.name for p in self.outputs]
        return [str(i) for i in range(count)]

    def describe_inference(self) -> str:
        """The inference rule in words, for docs: the declared output shapes, then :attr:`inference`.

        An op states each fact once: what its ports' patterns say is not repeated in ``inference``, which
        says what the patterns cannot (a constraint, a rounding rule, the names a pattern leaves to it).
        """
        outs = [
            f"{p.name} {p.pattern if p.pattern is not None else 'any'} ({p.dtype})"
            for p in self.outputs
            if p.pattern is not None
        ]
        if not outs:
            return self.inference or "produces " + ", ".join(f"{p.name} any ({p.dtype})" for p in self.outputs)
        declared = f"produces {', '.join(outs)}"
        if self.inference:
            return f"{declared}; {self.inference}"
        ins = ", ".join(f"{p.name} {p.pattern}" for p in self.inputs if p.pattern is not None)
        return f"binds symbols from {ins or 'its inputs'}; {declared}"


class Registry:
    """Op name -> :class:`OpDef`. One instance, :data:`registry`, serves the whole process.

    Thread safe: registration and plugin loading hold one lock, and a lookup that triggers plugin loading
    waits until every plugin has been loaded, so no thread sees a half-loaded registry.
    """

    def __init__(self) -> None:
        self._ops: dict[str, OpDef] = {}
        self._lock = threading.RLock()
        self._plugins_loaded = False
        self._loading_plugins = False  # set while this registry's lock holder runs plugin code
        self.plugin_errors: list[str] = []
        #: Counts registrations and removals, so a table derived from the ops (the importer's) knows when to
        #: read them again.
        self.version = 0

    def register(self, opdef: OpDef, *, replace: bool = False) -> OpDef:
        """Add ``opdef``. Registering a name twice is an error unless ``replace`` is true."""
        _validate_opdef(opdef)
        with self._lock:
            if opdef.name in self._ops and not replace and self._ops[opdef.name] is not opdef:
                raise ValueError(f"op {opdef.name!r} is already registered; pass replace=True to override it")
            self._check_imports(opdef)
            self._ops[opdef.name] = opdef
            self.version += 1
        return opdef

    def unregister(self, name: str) -> None:
        with self._lock:
            self._ops.pop(name, None)
            self.version += 1

    def _check_imports(self, opdef: OpDef) -> None:
        """Refuse an ATen operation another op already imports: the importer would have to pick one."""
        for other in self._ops.values():
            if other.name != opdef.name and (taken := set(other.imports) & set(opdef.imports)):
                raise ValueError(
                    f"op {opdef.name!r} imports {', '.join(sorted(taken))}, which op {other.name!r} already imports"
                )

    def find(self, name: str) -> OpDef | None:
        opdef = self._ops.get(name)
        if opdef is None and not self._plugins_loaded:
            self._ensure_plugins()
            opdef = self._ops.get(name)
        return opdef

    def names(self) -> list[str]:
        self._ensure_plugins()
        return sorted(self._ops)

    def registered(self) -> list[OpDef]:
        """The ops registered so far, without loading plugins (the built-in ones once :mod:`hndl.ops` is
        imported)."""
        with self._lock:
            return list(self._ops.values())

    def unknown_op_hint(self, name: str) -> str | None:
        """What an unknown op ``name`` most likely means: an op it is another library's name for (with the
        parameters that name implies), or an op it misspells (:func:`hndl.naming.closest`); ``None`` if neither.

        ``name`` may be written as a torch class or call (``nn.Hardsigmoid``, ``GELU(approximate='tanh')``):
        the module path is dropped and keyword arguments with literal values are read (never evaluated) and
        kept where the op has a parameter of that name.
        """
        written, keywords = _split_call(name)
        ops = list(self)
        wanted = normal_name(written)
        for opdef in ops:
            for alias, implied in ((opdef.name, {}), *opdef.aliases.items()):
                if normal_name(alias) == wanted:
                    params = {**implied, **{k: v for k, v in keywords.items() if opdef.param(k) is not None}}
                    return _as_written(name, opdef.name, params)
        close = closest(written, [o.name for o in ops])
        return f"did you mean '{close}'?" if close is not None else None

    def __iter__(self) -> Iterator[OpDef]:
        return (self._ops[n] for n in self.names())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find(name) is not None

    def _ensure_plugins(self) -> None:
        if self._plugins_loaded:
            return
        with self._lock:
            # Another thread may have finished loading while this one waited; plugin code that looks up an
            # op while its own plugin loads (same thread, the lock is reentrant) sees the ops so far.
            if not self._plugins_loaded and not self._loading_plugins:
                self.load_plugins()

    def load_plugins(self) -> None:
        """Import every ``hndl.ops`` entry point. Lookups call this once, the first time they need it.

        A plugin that raises warns, is recorded in :attr:`plugin_errors`, and registers none of its ops; the
        others load. The registry counts as loaded only once every entry point has been tried, so an
        exception that escapes (``KeyboardInterrupt``) leaves it unloaded and the next lookup tries again.
        """
        with self._lock:
            self._loading_plugins = True
            try:
                for ep in _entry_points():
                    self._load_plugin(ep)
                self._plugins_loaded = True
            finally:
                self._loading_plugins = False

    def _load_plugin(self, ep: Any) -> None:
        try:
            loaded = ep.load()
            if callable(loaded) and not isinstance(loaded, OpDef):
                loaded = loaded()
            opdefs = _opdefs(loaded)
            for item in opdefs:  # all of a plugin's ops are valid before any is registered
                _validate_opdef(item)
                self._check_imports(item)
        except Exception as exc:  # a plugin's bug must not break every other model
            message = f"hndl: plugin {ep.name!r} ({ep.value}) failed to load: {exc!r}"
            self.plugin_errors.append(message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)
            return
        for item in opdefs:
            self.register(item, replace=True)


#: The longest op text read as a call (``GELU(approximate='tanh')``); a longer one is matched as a name only.
_MAX_CALL_TEXT = 200


def _split_call(text: str) -> tuple[str, dict[str, Any]]:
    """``("GELU", {"approximate": "tanh"})`` for ``"nn.GELU(approximate='tanh')"``: the name after any module
    path, and the keyword arguments whose values are literals. Read with :mod:`ast`; nothing is evaluated."""
    keywords: dict[str, Any] = {}
    head = text
    if "(" in text and len(text) <= _MAX_CALL_TEXT:
        try:
            call = ast.parse(text.strip(), mode="eval").body
        except (SyntaxError, ValueError, RecursionError):
            call = None
        if isinstance(call, ast.Call):
            head = ast.unparse(call.func)
            for kw in call.keywords:
                try:
                    if kw.arg is not None:
                        keywords[kw.arg] = ast.literal_eval(kw.value)
                except (ValueError, TypeError, SyntaxError, RecursionError):
                    continue
        else:
            head = text.split("(", 1)[0]
    return head.rsplit(".", 1)[-1], keywords


def _as_written(name: str, op_name: str, params: Mapping[str, Any]) -> str:
    """The hint for an op known by another name: how the node is written in hndl."""
    from ._flow_yaml import flow_yaml

    try:
        node = flow_yaml({"op": op_name, **params})
    except Exception:  # a keyword value flow YAML cannot write (a set, bytes): the op alone
        node = flow_yaml({"op": op_name})
    return f"{excerpt(name)} is {node} in hndl"


def _registered_op(name: str) -> OpDef:
    """The op registered as ``name``: how a pickled :class:`OpDef` is read back."""
    found = registry.find(name)
    if found is None:
        raise HndlError(
            Problem(
                "E_OP",
                f"unknown op {excerpt(name)}: the pickled model uses it, and it is not registered in this process",
                hint="import or install the package that registers it before loading the model",
            )
        )
    return found


def _entry_points() -> Iterable[Any]:
    """The installed ``hndl.ops`` entry points (a function, so tests can stand in for the installation)."""
    from importlib.metadata import entry_points

    return entry_points(group="hndl.ops")


def _opdefs(loaded: Any) -> list[OpDef]:
    if isinstance(loaded, OpDef):
        return [loaded]
    if isinstance(loaded, (list, tuple)):
        return [x for x in loaded if isinstance(x, OpDef)]
    return []


#: Keys a node already uses in a spec file or in ``Graph.add``; a parameter cannot be named so.
RESERVED_PARAM_NAMES = ("op", "in", "name", "tie", "when", "otherwise", "module_path")

#: What an op's layer may return (:attr:`OpDef.returns`).
RETURNS = ("new", "input", "view", "state", "unknown")

#: A class's dotted path (:attr:`OpDef.layer`).
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")


def _layer_text(paths: Sequence[str]) -> str:
    """``hndl.torch.layers.Add or TensorScalar``: the paths joined, a later one in the first one's module by its
    class name (the docs' "Builds" line)."""
    home = paths[0].rpartition(".")[0] if paths and isinstance(paths[0], str) else ""
    return " or ".join(
        p.rpartition(".")[2] if i and isinstance(p, str) and p.rpartition(".")[0] == home else str(p)
        for i, p in enumerate(paths)
    )


def _built_in(opdef: OpDef) -> bool:
    """Whether ``opdef`` is one of hndl's own ops (its builder lives in :mod:`hndl.ops`)."""
    return str(getattr(opdef.build, "__module__", "")).startswith("hndl.ops.")


def _validate_facts(opdef: OpDef) -> None:
    """The facts the estimates and the fast path read (:attr:`OpDef.saves`, ``layer``, ``macs``, ...)."""
    if opdef.saves not in SAVES:
        raise ValueError(f"op {opdef.name!r}: saves must be one of {', '.join(SAVES)}, not {opdef.saves!r}")
    if opdef.saves == "unknown" and _built_in(opdef) and not opdef.runs_subgraph:
        # A built-in op that says nothing was counted as keeping its output, silently: gru, lstm and
        # relative_position_bias went missing from a side table that way.
        raise ValueError(
            f"op {opdef.name!r}: a built-in op must declare what its backward keeps (saves=inputs, output, both "
            "or none)"
        )
    if not isinstance(opdef.passes_gradient, bool):
        raise ValueError(f"op {opdef.name!r}: passes_gradient must be True or False, not {opdef.passes_gradient!r}")
    if opdef.passes_gradient and opdef.saves != "none":
        raise ValueError(
            f"op {opdef.name!r}: an op that passes its gradient through keeps nothing for backward, so it declares "
            f"saves='none', not {opdef.saves!r}"
        )
    for what in ("inner_memory", "macs"):
        rule = getattr(opdef, what)
        if rule is not None and not callable(rule):
            raise ValueError(f"op {opdef.name!r}: {what} must be a function of the checked node, not {rule!r}")
    paths = opdef.layer_paths
    if not all(isinstance(p, str) and _DOTTED.match(p) for p in paths):
        raise ValueError(
            f"op {opdef.name!r}: layer must be a class's dotted path (or a tuple of them), such as "
            f"'torch.nn.Linear', not {opdef.layer!r}"
        )


def _validate_opdef(opdef: OpDef) -> None:
    if not isinstance(opdef.name, str) or not NAME_RE.match(opdef.name):
        # An op's name reaches generated code (a comment per step) and every message: like a node's name, it
        # is an identifier, so no name can carry a line break or a quote into either.
        raise HndlError(
            Problem(
                "E_NAME",
                f"op name {excerpt(opdef.name)} is not valid",
                hint="use letters, digits and underscores, not starting with a digit",
            )
        )
    for param in opdef.params:
        if param.name in RESERVED_PARAM_NAMES:
            raise ValueError(f"op {opdef.name!r}: a parameter cannot be named {param.name!r} (a node key)")
    if opdef.runs_subgraph and not {"graph", "repeat"} <= {p.name for p in opdef.params}:
        raise ValueError(f"op {opdef.name!r} runs a subgraph, so it must declare parameters 'graph' and 'repeat'")
    if opdef.returns not in RETURNS:
        raise ValueError(f"op {opdef.name!r}: returns must be one of {', '.join(RETURNS)}, not {opdef.returns!r}")
    for port in opdef.inputs:
        number = opdef.param(port.name)
        if port.scalar and (
            number is None or number.type.name != "float" or not number.nullable or number.default is not None
        ):
            raise ValueError(
                f"op {opdef.name!r}: port {port.name!r} takes a number, so it needs a parameter {port.name!r} of type "
                "'float', nullable, defaulting to None"
            )
    names = [p.name for p in opdef.inputs]
    for port in opdef.inputs[:-1]:
        if port.variadic:
            raise ValueError(f"op {opdef.name!r}: only the last input port may be variadic")
    for port in opdef.inputs:
        if port.optional and any(p.variadic for p in opdef.inputs):
            raise ValueError(f"op {opdef.name!r}: an op with a variadic port cannot have optional ones")
        if port.when is not None and not any(p.name == port.when and p.type.name == "bool" for p in opdef.params):
            raise ValueError(f"op {opdef.name!r}: port {port.name!r} depends on {port.when!r}, not a bool parameter")
    for port in (*opdef.inputs, *opdef.outputs):
        if port.shape is not None:
            ShapePattern.parse(port.shape)
        parse_dtype_rule(port.dtype, ports=names)
    _validate_facts(opdef)


#: The process-wide op registry.
registry = Registry()


def layer_of(name: str) -> Any:
    """The class op ``name`` declares as its :attr:`~OpDef.layer` (one dotted path), imported on first use: what
    a builder that only instantiates its layer calls, so the class is named once, in the declaration
    (``return layer_of("lstm")(p.input_size, ...)``)."""
    opdef = registry.find(name)
    paths = opdef.layer_paths if opdef is not None else ()
    if len(paths) != 1:
        raise ValueError(f"op {name!r} declares {len(paths)} layer classes; layer_of needs exactly one")
    return layer_class(paths[0])


class FactTable(Mapping[str, Any]):
    """Op name -> one fact of the registered ops that declare it, read from their :class:`OpDef` on every lookup
    (so a plugin's ops are in it once loaded): what ``hndl._autograd_facts.SAVES`` and ``hndl._costs.MACS`` are. A view,
    never a second place to write a fact."""

    def __init__(self, read: Callable[[OpDef], Any], declared: Callable[[Any], bool]) -> None:
        self._read = read
        self._declared = declared

    def __getitem__(self, name: str) -> Any:
        opdef = registry.find(name) if isinstance(name, str) else None
        if opdef is None or not self._declared(self._read(opdef)):
            raise KeyError(name)
        return self._read(opdef)

    def __iter__(self) -> Iterator[str]:
        return (o.name for o in registry if self._declared(self._read(o)))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"FactTable({dict(self)!r})"


def op(
    name: str,
    *,
    params: Sequence[Param] = (),
    inputs: Sequence[Port] = (Port("x"),),
    outputs: Sequence[Port] = (Port("y", None, dtype="same:x"),),
    infer: InferFn | None = None,
    derive: Callable[[Params], Mapping[str, Any]] | None = None,
    module: str = "",
    inference: str = "",
    example: Mapping[str, Any] | None = None,
    count_outputs: Callable[[Mapping[str, Any]], int] | None = None,
    input_shape_example: Sequence[Any] | None = None,
    replace: bool = False,
    imports_code: bool = False,
    runs_subgraph: bool = False,
    returns: str = "unknown",
    aliases: Mapping[str, Mapping[str, Any]] | None = None,
    error_example: Mapping[str, Any] | None = None,
    layer: str | Sequence[str] = "",
    saves: str = "unknown",
    passes_gradient: bool = False,
    inner_memory: InnerRule | None = None,
    macs: MacsRule | None = None,
    imports: Sequence[str] | Mapping[str, ImportRow | str] | None = None,
) -> Callable[[BuildFn], BuildFn]:
    """Register the decorated builder as op ``name``. See :class:`OpDef` for the arguments.

    The builder's docstring becomes the op's documentation. Returns the builder unchanged.
    """

    def decorate(build: BuildFn) -> BuildFn:
        registry.register(
            OpDef(
                name=name,
                build=build,
                doc=inspect.cleandoc(build.__doc__ or ""),
                params=tuple(params),
                inputs=tuple(inputs),
                outputs=tuple(outputs),
                infer=infer,
                derive=derive,
                module=module,
                inference=inference,
                example=dict(example or {}),
                count_outputs=count_outputs,
                input_shape_example=input_shape_example,
                imports_code=imports_code,
                runs_subgraph=runs_subgraph,
                returns=returns,
                aliases=dict(aliases or {}),
                error_example=error_example,
                layer=layer if isinstance(layer, str) else tuple(layer),
                saves=saves,
                passes_gradient=passes_gradient,
                inner_memory=inner_memory,
                macs=macs,
                imports=imports_of(imports, name),
            ),
            replace=replace,
        )
        return build

    return decorate
