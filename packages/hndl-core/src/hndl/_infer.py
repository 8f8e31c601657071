"""Inference for one node: its inputs matched against its ports, inferred parameters bound, output types made.

The second half of checking a graph; the first, resolving ops, parameters and references, is
:mod:`hndl._resolve`. An op states its output in one of two ways: its output ports' shape patterns, filled in
from the symbols the inputs bound, or an ``infer`` function for rules a pattern cannot express. An op with
``infer`` may still declare output patterns, for the reference docs; :func:`declared_output_types`
evaluates them, which is how the tests hold every op's declared patterns to what its ``infer`` computes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ._contracts import (
    DTYPES,
    TensorType,
    Variadic,
    _bare_symbol,
    dtype_satisfies,
    format_shape,
    is_unknown,
    unknown_dim,
)
from ._dims import Dim, format_dim, free_symbols, substitute
from ._hints import dtype_fix, node_hint, shape_fix
from ._registry import InferError, OpDef, Params, Port

__all__ = [
    "BoundPorts",
    "FixedDim",
    "Report",
    "active_ports",
    "bind_ports",
    "declared_output_types",
    "fixed_dims",
    "infer_node",
]

#: Each input value with the port that receives it (a variadic port receives several).
BoundPorts = list[tuple[Port, TensorType]]


class Report(Protocol):
    """Records one problem about the node being inferred, located at spec key ``key`` (``None``: the node)."""

    def __call__(self, code: str, message: str, *, key: str | None = "in", **fields: Any) -> None: ...


def active_ports(opdef: OpDef, params: Mapping[str, Any]) -> list[Port]:
    """``opdef``'s input ports that take a value under these parameters (:meth:`OpDef.active_inputs`)."""
    return opdef.active_inputs(params)


def bind_ports(opdef: OpDef, in_types: Sequence[TensorType], params: Mapping[str, Any]) -> BoundPorts | None:
    """Pair each input with its port; ``None`` when the op takes another number of inputs.

    Required ports are always filled; the inputs beyond them fill the optional ports in declaration order.
    """
    declared = opdef.inputs
    if len(declared) == 1 and len(in_types) == 1:
        # One port, always active, and one input (an activation, a norm, most nodes of a graph): the port takes
        # it whether it is required, optional or variadic, as the general rule below would decide.
        port = declared[0]
        if port.when is None and not port.scalar:
            return [(port, in_types[0])]
    ports = active_ports(opdef, params)
    if ports and ports[-1].variadic:
        last = len(ports) - 1
        if len(in_types) < len(ports):
            return None
        return [(ports[min(i, last)], t) for i, t in enumerate(in_types)]
    required = sum(not p.optional for p in ports)
    spare = len(in_types) - required
    if not 0 <= spare <= len(ports) - required:
        return None
    chosen = []
    for p in ports:
        if p.optional:
            if spare == 0:
                continue
            spare -= 1
        chosen.append(p)
    return list(zip(chosen, in_types))


def input_count_words(opdef: OpDef, params: Mapping[str, Any]) -> str:
    """``1 input``, ``2 inputs``, ``1 or more inputs``, ``1 to 2 inputs``: how many inputs ``opdef`` takes
    with these parameters."""
    ports = active_ports(opdef, params)
    n = len(ports)
    if ports and ports[-1].variadic:
        return f"{n} or more inputs"
    required = sum(not p.optional for p in ports)
    if required != n:
        return f"{required} to {n} inputs"
    return f"{n} input" + ("" if n == 1 else "s")


def infer_node(
    opdef: OpDef, params: Params, given: Collection[str], ports: BoundPorts, report: Report
) -> tuple[Params, list[TensorType]] | None:
    """Infer one node: ``(params with the inferred ones filled in, output types)``, or ``None`` once reported.

    ``given`` are the parameter names the node wrote (an inferred parameter given by hand gets a hint to drop
    it when it disagrees).
    """
    env = _pattern_env(opdef, params, report)
    if env is None:
        return None
    for port, t in ports:
        reason = _dtype_reason(port, t, ports)
        if reason:
            hint = _dtype_hint(port, t)
            report("E_DTYPE", reason, port=port.name, expected=port.dtype, actual=t.dtype, hint=hint)
            return None
        pattern = port.pattern
        if pattern is None or t.shape is None:
            continue
        if pattern.variadic == 0 and len(pattern.dims) == 1 and pattern.variadic_name not in env:
            # ``[*shape]`` alone, its name not bound yet (the one input of every element-wise op): it matches any
            # shape, open or not, and binds the name to the whole of it, which is all ShapePattern.match would do.
            env[pattern.variadic_name] = tuple(t.shape)  # type: ignore[index]
            continue
        before = dict(env)  # matching binds as it goes; a fix is searched under the bindings it started from
        reason = pattern.match(t.shape, env)
        if reason:
            hint = None
            inferred_given = [p.name for p in opdef.params if p.inferred and p.name in given and p.name in reason]
            if inferred_given:
                hint = f"drop {inferred_given[0]}: hndl infers it from the input"
            fix = shape_fix(pattern, t.shape, before)
            hint = (node_hint(fix) if fix is not None else None) or hint
            report(
                "E_SHAPE",
                reason,
                port=port.name,
                expected=str(pattern),
                actual=format_shape(t.shape),
                hint=hint,
            )
            return None
    filled = _fill_inferred(opdef, params, env, report)
    if filled is None:
        return None
    if opdef.infer is None:
        out_types = _instantiate_outputs(opdef, filled, ports, env)
    else:
        try:
            out_types = list(opdef.infer(filled, [t for _, t in ports]))
        except InferError as exc:
            report(
                exc.code,
                exc.message,
                key=exc.param or "in",
                port=exc.port,
                expected=exc.expected,
                actual=exc.actual,
                hint=exc.hint,
            )
            return None
    return filled, out_types


def declared_output_types(opdef: OpDef, params: Params, in_types: Sequence[TensorType]) -> list[TensorType]:
    """What ``opdef``'s output ports declare for these inputs, whether or not the op has an ``infer``.

    ``params`` are a checked node's (inferred ones included). A port without a shape pattern declares no
    shape (``None``); a name the patterns use that nothing binds is an unknown dim; a ``same:`` or ``any``
    dtype rule resolves as inference resolves it.

    Raises:
        ValueError: the inputs do not match the input patterns (a node that checked always does).
    """
    ports = bind_ports(opdef, in_types, params)
    if ports is None:
        raise ValueError(f"{opdef.name} takes {input_count_words(opdef, params)}, got {len(in_types)}")

    def refuse(code: str, message: str, *, key: str | None = "in", **fields: Any) -> None:
        raise ValueError(message)

    env = _pattern_env(opdef, params, refuse)
    assert env is not None
    for port, t in ports:
        if port.pattern is not None and t.shape is not None:
            reason = port.pattern.match(t.shape, env)
            if reason:
                raise ValueError(f"port {port.name!r}: {reason}")
    return _instantiate_outputs(opdef, params, ports, env)


class FixedDim(NamedTuple):
    """A symbolic dim of an input that a port's pattern meets with a number: ``linear``'s ``[*batch,
    in_features]`` with ``in_features: 16`` given ``[B, T, D]`` fixes ``D`` to 16 (``port`` ``x``, ``axis`` 2,
    ``entry`` the pattern's ``in_features``)."""

    symbol: str
    size: int
    port: str
    axis: int
    entry: Dim


def fixed_dims(opdef: OpDef, params: Params, in_types: Sequence[TensorType]) -> list[FixedDim]:
    """The symbols of a checked node's input shapes that its ports meet with a number.

    Static matching accepts a symbol where a number is expected (a symbol may be that number at run time), so
    ``D`` against ``in_features`` 16 passed, and nothing held the call to ``D = 16``: the caller turns these into
    input checks (:mod:`hndl._fixed_dims`). Inputs whose rank is open (``*name`` of a graph input) are skipped.
    """
    if not _names_dims(opdef):
        # Only a pattern's own entries fix a dim (``*name`` covers dims it never names): an element-wise op, most
        # of a graph, has none, and this spares it the binding and matching below on every check.
        return []
    ports = bind_ports(opdef, in_types, params)

    def ignore(code: str, message: str, *, key: str | None = "in", **fields: Any) -> None:
        return None

    env = _pattern_env(opdef, params, ignore) if ports is not None else None
    if ports is None or env is None:
        return []
    matched = []
    for port, t in ports:
        shape = t.shape
        if port.pattern is None or shape is None or any(isinstance(d, Variadic) for d in shape):
            continue
        if port.pattern.match(shape, env):
            return []  # a node that checked always matches; nothing to derive otherwise
        matched.append((port, shape))
    scalars = {k: v for k, v in env.items() if not isinstance(v, tuple)}
    # A pattern entry that names a list parameter of one size (layernorm's normalized_shape: [16]) means it.
    for p in opdef.params:
        value = params.get(p.name)
        if isinstance(value, (list, tuple)) and len(value) == 1 and type(value[0]) is int:
            scalars[p.name] = value[0]
    found = []
    for port, shape in matched:
        pattern = port.pattern
        assert pattern is not None
        entries: list[Dim | None] = list(pattern.dims)
        if pattern.variadic is not None:  # the dims the *name covers meet no entry of their own
            k = pattern.variadic
            entries[k : k + 1] = [None] * (len(shape) - len(entries) + 1)
        for axis, (entry, actual) in enumerate(zip(entries, shape)):
            symbol = _bare_symbol(actual)
            if entry is None or symbol is None:
                continue
            size = substitute(entry, scalars)
            if isinstance(size, int) and not isinstance(size, bool):
                found.append(FixedDim(symbol, size, port.name, axis, entry))
    return found


#: Per op (by id, with the op itself so that a reused id is not mistaken for it): whether any input pattern has
#: an entry of its own (:func:`fixed_dims`). Asked of every node of every check; the answer never changes.
_NAMES_DIMS: dict[int, tuple[OpDef, bool]] = {}


def _names_dims(opdef: OpDef) -> bool:
    known = _NAMES_DIMS.get(id(opdef))
    if known is not None and known[0] is opdef:
        return known[1]
    answer = any(p.pattern is not None and any(d is not None for d in p.pattern.dims) for p in opdef.inputs)
    if len(_NAMES_DIMS) >= 4096:  # ops made on the fly (tests) must not grow it without bound
        _NAMES_DIMS.clear()
    _NAMES_DIMS[id(opdef)] = (opdef, answer)
    return answer


def _pattern_env(opdef: OpDef, params: Params, report: Report) -> dict[str, Any] | None:
    """The names the op's patterns may use before any input is matched: int parameters and ``derive``'s."""
    env: dict[str, Any] = {}
    for p in opdef.params:
        value = params.get(p.name)
        if isinstance(value, int) and not isinstance(value, bool):
            env[p.name] = value
    if opdef.derive is not None:
        try:
            env.update(opdef.derive(params))
        except InferError as exc:
            report(exc.code, exc.message, port=exc.port, expected=exc.expected, actual=exc.actual, hint=exc.hint)
            return None
    return env


def _fill_inferred(opdef: OpDef, params: Params, env: Mapping[str, Any], report: Report) -> Params | None:
    """``params`` with each inferred parameter the node did not give read from the bound symbols."""
    if isinstance(params, Params):
        for p in opdef.params:
            if p.inferred:
                break
        else:
            return params  # nothing to fill (Params is immutable: no copy needed)
    values = dict(params)
    for p in opdef.params:
        if not p.inferred or values.get(p.name) is not None:
            continue
        bound = env.get(p.name)
        if isinstance(bound, int):
            # A list-typed parameter (layernorm's normalized_shape) inferred from one dim is that dim.
            value, reason = p.validate(p.type.from_dim(bound))
            if not reason:
                values[p.name] = value
                continue
            # The dim breaks the parameter's own bounds (conv2d on 0 channels): torch would fail at the call.
            report("E_SHAPE", f"parameter {p.name!r} follows from an input dim that {reason}")
        elif bound is None:
            report(
                "E_PARAM",
                f"parameter {p.name!r} could not be inferred from the inputs",
                key=None,
                hint=f"set {p.name} explicitly",
            )
        else:
            report(
                "E_SHAPE",
                f"parameter {p.name!r} follows from an input dim that is not a fixed number",
                key=None,
                expected="an int",
                actual="?" if is_unknown(bound) else format_dim(bound),
                hint=f"give that input dim as an int in the input's shape, or set {p.name}",
            )
        return None
    return Params(values)


def _instantiate_outputs(opdef: OpDef, params: Params, ports: BoundPorts, env: dict[str, Any]) -> list[TensorType]:
    """The output ports' patterns under ``env``; a name nothing bound becomes an unknown dim.

    An op whose output count follows from its parameters (``count_outputs``) gives each output beyond the
    declared ports the last port's declaration (``split``'s one ``parts`` port stands for every part).
    """
    out_types = []
    declared = opdef.outputs or (Port("y", None, dtype="any"),)
    for i in range(opdef.output_count(params)):
        port = declared[min(i, len(declared) - 1)]
        dtype = _out_dtype(port.dtype, ports)
        pattern = port.pattern
        if pattern is None:
            out_types.append(TensorType(None, dtype))
            continue
        if pattern.variadic == 0 and len(pattern.dims) == 1:
            # ``[*shape]`` alone (every element-wise op): the shape is what ``*shape`` bound, as instantiate gives.
            bound = env.get(pattern.variadic_name)  # type: ignore[arg-type]
            out_types.append(TensorType(None if bound is None else tuple(bound), dtype))
            continue
        for d in pattern.dims:
            for s in free_symbols(d) if d is not None else ():
                env.setdefault(s, unknown_dim())
        if pattern.variadic_name is not None and pattern.variadic_name not in env:
            out_types.append(TensorType(None, dtype))
            continue
        out_types.append(TensorType(pattern.instantiate(env), dtype))
    return out_types


def _dtype_reason(port: Port, t: TensorType, ports: BoundPorts) -> str:
    rule = port.dtype
    if rule.startswith("same:"):
        other = next((ot for p, ot in ports if p.name == rule[5:]), None)
        if other is None or other is t:
            return ""
        if dtype_satisfies(t.dtype, other.dtype) is False and dtype_satisfies(other.dtype, t.dtype) is False:
            # Quoted port names: the checker replaces them with the references wired in.
            return f"dtype must match {rule[5:]!r} ({other.dtype}), got {t.dtype} in {port.name!r}"
        return ""
    if dtype_satisfies(t.dtype, rule) is False:
        return f"needs dtype {rule}, got {t.dtype}"
    return ""


def _out_dtype(rule: str, ports: BoundPorts) -> str:
    if rule.startswith("same:"):
        name = rule[5:]
        for p, t in ports:
            if p.name == name:
                return t.dtype
        return "any"
    return rule


#: A bool port given another dtype: a graph input declared bool (and a bool tensor passed), or a value made bool.
_BOOL_HINT = (
    "declare the input's dtype: bool and pass a bool tensor (mask.bool() in torch), or make it bool in the graph: "
    "{op: ne, in: x, b: 0} or {op: cast, dtype: bool}"
)


def _dtype_hint(port: Port, t: TensorType) -> str | None:
    """The likely fix for a dtype mismatch: declare the graph input's dtype (a tensor's dtype starts there)."""
    if port.dtype in ("int", "int64"):
        return "declare the input's dtype, e.g. dtype: int64"
    if port.dtype == "bool":
        return _BOOL_HINT
    if port.dtype.startswith("same:"):
        return "give both the same dtype: declare it on the graph inputs they come from, e.g. dtype: float32"
    if port.dtype.startswith("float") and not t.dtype.startswith("float"):
        example = "float32" if port.dtype == "float" else port.dtype
        # The conversion the run-time check would suggest for a tensor of this dtype (x.float() / 255 for uint8).
        conversion = dtype_fix(t.dtype, port.dtype) if t.dtype in DTYPES else None
        code = f"x{conversion[0]}" if conversion is not None else "x.float()"
        return f"declare the input's dtype: {example}, and pass a floating tensor ({code} in torch)"
    return None
