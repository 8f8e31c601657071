"""The full check of one call: inputs against their contracts, registered state against the build, and every
node's outputs against the types static inference gave them.

Checkers return a reason (``""`` when the check passes) or a list of problems; :func:`run_checked` and the
GraphModule raise them as one :class:`~hndl.HndlError` at the boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from .._checked import CheckedGraph, CheckedNode, DeclaredOutput
from .._contracts import ShapePattern, TensorType, Variadic, dtype_satisfies, format_shape, is_unknown
from .._dims import DimError, evaluate, format_dim, free_symbols
from .._errors import HndlError, Problem, describe_node
from .._hints import call_hint, dtype_fix, node_hint, shape_fix
from .._infer import bind_ports
from .._plan import Step
from ..naming import dtype_name
from ._fsdp import cast_dtypes
from ._local_shards import SDPA_ON_DTENSOR_HINT, keeps_shape, local_factor
from ._select import OutputIndexError
from ._state import BuildState

__all__ = [
    "check_declared_outputs",
    "check_inputs",
    "check_state",
    "CONTROL_FLOW",
    "layer_failure",
    "parameter_dtype",
    "run_checked",
    "shape_text",
]


def shape_text(value: Any) -> str:
    """``[8, 784]`` for a tensor, the type name for anything else."""
    if isinstance(value, torch.Tensor):
        return format_shape(tuple(value.shape))
    return type(value).__name__


# --- inputs ---------------------------------------------------------------------------------------------


def check_inputs(
    checked: CheckedGraph, inputs: Sequence[Any], model_dtype: tuple[torch.dtype, ...] | None = None
) -> dict[str, Any]:
    """Match each input against its contract; return the symbol bindings.

    ``model_dtype`` is the one floating dtype of the model's parameters, then any dtype FSDP2's mixed precision
    computes them in (see :func:`parameter_dtype`): an input declared as any floating dtype must have one of
    them, or the first layer would fail on the mix.

    Raises:
        HndlError: E_INPUT naming the input, the dim, expected vs actual and the bindings so far.
    """
    env: dict[str, Any] = {}
    bound_by: dict[str, str] = {}
    graph = checked.graph
    for name, contract, value in zip(checked.input_names, checked.contracts, inputs):
        where = graph.inputs[name].location if name in graph.inputs else None

        fail = partial(_input_error, name, where, env)
        if not isinstance(value, torch.Tensor):
            raise fail(
                f"must be a tensor, got {type(value).__name__}", expected="a torch.Tensor", actual=type(value).__name__
            )
        before = dict(env)
        reason = contract.shape.match(tuple(value.shape), env, strict=True)
        if reason:
            fail = partial(_input_error, name, where, before)  # the bindings in force before this input
            hint = None
            if "bound" in reason:
                mine = {contract.shape.variadic_name} | {
                    s for d in contract.shape.dims if d is not None for s in free_symbols(d)
                }
                clash = [s for s in before if s in mine]
                if clash:
                    hint = "; ".join(f"{s} was bound by input {bound_by[s]!r}" for s in clash)
            fix = shape_fix(contract.shape, tuple(value.shape), before)
            if fix is not None:
                hint = call_hint(fix, name)
                conversion = dtype_fix(dtype_name(value.dtype), contract.dtype)
                if conversion is not None:  # a uint8 channels-last image: say both edits at once
                    hint = f"{fix.code(name)}{conversion[0]} makes it {format_shape(fix.result)} {contract.dtype}"
            hint = hint or f"pass {name} shaped {contract.shape}, or write the shape it has in the graph's inputs"
            raise fail(reason, expected=str(contract.shape), actual=format_shape(tuple(value.shape)), hint=hint)
        for symbol in env:
            bound_by.setdefault(symbol, name)
        broken = contract.range_reason(env)
        if broken is not None:
            limit, size = broken
            axes = [k for k, d in enumerate(contract.shape.dims) if d is not None and str(d) == limit.symbol]
            dim = f"dim {axes[0]} ({limit.symbol}={size})" if axes else f"{limit.symbol}={size}"
            fixed = limit.minimum == limit.maximum and limit.why is not None  # a node's size (_fixed_dims)
            raise fail(
                f"{dim} must be {limit.minimum}: {limit.why}"
                if fixed
                else f"{dim} is outside the range its contract gives: {limit}",
                expected=str(limit),
                actual=f"{limit.symbol} = {size}",
                hint=limit.hint
                or f"pass a size with {limit}; the graph was made for those sizes only (an imported module's "
                "trace assumed them), so another size could compute something else",
            )
        actual_dtype = dtype_name(value.dtype)
        if dtype_satisfies(actual_dtype, contract.dtype) is not True:
            conversion = dtype_fix(actual_dtype, contract.dtype)
            raise fail(
                f"dtype must be {contract.dtype}, got {actual_dtype}",
                expected=contract.dtype,
                actual=actual_dtype,
                hint=None
                if conversion is None
                else f"convert it: {name}{conversion[0]}" + (f" ({conversion[1]})" if conversion[1] else ""),
            )
        if _mixes_with(value, contract.dtype, model_dtype):
            model = dtype_name(model_dtype[0])  # type: ignore[index]
            raise fail(
                f"dtype {actual_dtype} does not match the model's {model} parameters",
                expected=model,
                actual=actual_dtype,
                hint=f"convert the input with x.{_CONVERT.get(model, 'to')}(), or declare dtype: {actual_dtype} "
                f"and convert the model with .{_CONVERT.get(actual_dtype, 'to')}()",
            )
        if contract.device is not None and not _device_matches(value.device, contract.device):
            raise fail(
                f"must be on device {contract.device}, got {value.device}",
                expected=contract.device,
                actual=str(value.device),
                hint=f"move it with x.to({contract.device!r})",
            )
    _check_requirements(checked, env, bound_by)
    return env


def _check_requirements(checked: CheckedGraph, env: dict[str, Any], bound_by: dict[str, str]) -> None:
    """E_INPUT for an input whose dims break a bound a node's shape arithmetic imposes (``H >= 7``)."""
    for node in _all_nodes(checked):
        for required in node.requires:
            try:
                value = evaluate(required.dim, env)
            except DimError:  # a symbol the inputs do not bind (an unknown dim): the layer itself decides
                continue
            if value >= required.minimum:
                continue
            symbols = sorted(free_symbols(required.dim))
            name = next((bound_by[s] for s in symbols if s in bound_by), checked.input_names[0])
            where = checked.graph.inputs[name].location if name in checked.graph.inputs else None
            given = ", ".join(f"{s}={env[s]}" for s in symbols if s in env)
            raise _input_error(
                name,
                where,
                env,
                f"{given} is too small for {node.op} '{node.qualname}': its {required.what} needs {required}",
                expected=str(required),
                actual=f"{format_dim(required.dim)} = {value}",
                hint=f"pass a larger input, or give {node.op} '{node.qualname}' more padding or a smaller window",
            )


def _all_nodes(checked: CheckedGraph) -> list[CheckedNode]:
    found: list[CheckedNode] = []
    for node in checked.nodes:
        found.append(node)
        for body in node.body:
            found.extend(_all_nodes(body))
    return found


#: The tensor and module method that converts to each floating dtype.
_CONVERT = {"float32": "float", "float64": "double", "float16": "half", "bfloat16": "bfloat16"}


def parameter_dtype(
    module: nn.Module, parameters: Iterable[torch.Tensor] | None = None
) -> tuple[torch.dtype, ...] | None:
    """The floating dtypes an input declared ``float`` may have: first the one floating dtype all of
    ``module``'s floating parameters share, then any dtype FSDP2's mixed precision computes them in (its units
    cast their floating inputs to it). None when the parameters have no floating dtype, or several.
    ``parameters``: ``module``'s, where the caller has them at hand (the stores record's)."""
    found = {p.dtype for p in (module.parameters() if parameters is None else parameters) if p.is_floating_point()}
    if len(found) != 1:
        return None
    (own,) = found
    return (own, *sorted(set(cast_dtypes(module).values()) - found, key=str))


def _mixes_with(value: torch.Tensor, declared: str, model_dtype: tuple[torch.dtype, ...] | None) -> bool:
    """Whether ``value``, declared as any floating dtype, is a float of another dtype than the model's parameters.
    An input declared with one exact dtype is taken at its word, and autocast casts the mix itself."""
    if model_dtype is None or declared != "float" or not value.is_floating_point() or value.dtype in model_dtype:
        return False
    return not (value.device.type in ("cpu", "cuda") and torch.is_autocast_enabled(value.device.type))


def _input_error(
    name: str,
    where: str | None,
    env: dict[str, Any],
    message: str,
    expected: Any = None,
    actual: Any = None,
    hint: str | None = None,
) -> HndlError:
    return HndlError(
        Problem(
            "E_INPUT",
            message,
            node=name,
            op="input",
            expected=expected,
            actual=actual,
            location=where,
            bindings=dict(env) or None,
            hint=hint,
        )
    )


def _device_matches(device: torch.device, wanted: str) -> bool:
    if ":" in wanted:
        return str(device) == wanted
    return device.type == wanted


# --- registered state -----------------------------------------------------------------------------------


def check_state(state: BuildState, root: nn.Module, locations: Mapping[str, str | None]) -> None:
    """Compare the live module tree with the build.

    Raises:
        HndlError: E_RUNTIME, one problem per change, each ``registered state of <op> '<node>' no longer
            matches the build: <change>``.
    """
    changes = state.diff(root, cast_dtypes(root))
    if not changes:
        return
    problems = []
    for node, op, change in changes:
        who = describe_node(op, node) if node is not None else f"graph '{state.graph_name}'"
        problems.append(
            Problem(
                "E_RUNTIME",
                f"registered state of {who} no longer matches the build: {change}",
                node=node,
                op=op,
                location=locations.get(node) if node is not None else None,
                hint="put the original back (the next call checks again), or build the graph anew",
            )
        )
    raise HndlError(problems, title=f"graph '{state.graph_name}'" if len(problems) > 1 else None)


# --- running the nodes ----------------------------------------------------------------------------------


def _scalars(env: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in env.items() if isinstance(v, int)}


def _eval_dim(d: Any, scalars: dict[str, int]) -> int | None:
    """The value of a static dim under the bindings, or ``None`` when it cannot be known (skip it)."""
    if isinstance(d, int):
        return d
    try:  # an unbound symbol, or one inference could not determine ("?..."; never bound), raises DimError
        return evaluate(d, scalars)
    except (DimError, ZeroDivisionError):
        return None


#: Stands for an unbound variadic run (any number of dims) among :func:`_expected`'s dims.
OPEN = (object(), None)


def _expected(shape: tuple[Any, ...], env: dict[str, Any], scalars: dict[str, int]) -> list[tuple[Any, Any]]:
    """``shape``'s dims under the bindings, each (value, as written), value None when it cannot be known; a
    bound variadic run spelled out (each dim its own value), an unbound one :data:`OPEN`."""
    dims: list[tuple[Any, Any]] = []
    for d in shape:
        if isinstance(d, Variadic):
            bound = env.get(d.name)
            if bound is None or not all(isinstance(b, int) for b in bound):
                dims.append(OPEN)
            else:
                dims.extend((b, b) for b in bound)
        else:
            dims.append((_eval_dim(d, scalars), d))
    return dims


def _expected_text(dims: list[tuple[Any, Any]]) -> str:
    """The expected shape as a message shows it: known dims as numbers, the rest as written (``...``, ``?``)."""
    shown = []
    for dim in dims:
        if dim is OPEN:
            shown.append("...")
        elif dim[0] is not None:
            shown.append(str(dim[0]))
        else:
            shown.append("?" if is_unknown(dim[1]) else str(format_dim(dim[1])))
    return "[" + ", ".join(shown) + "]"


def shape_reason(
    static: TensorType, actual: tuple[int, ...], env: dict[str, Any], scalars: dict[str, int] | None = None
) -> tuple[str, str]:
    """Why ``actual`` breaks ``static`` under ``env`` (``""`` if it does not), and the expected shape shown
    (only with a reason: validation checks every output of a call, and builds the text for the one that fails).
    ``scalars`` is ``env``'s integer bindings, when the caller already has them."""
    if static.shape is None:
        return "", ""
    dims = _expected(static.shape, env, _scalars(env) if scalars is None else scalars)
    # The dims written out, checkable from the front (before an open run) and from the back (after one).
    open_at = next((i for i, dim in enumerate(dims) if dim is OPEN), None)
    head = dims if open_at is None else dims[:open_at]
    tail = [] if open_at is None else [dim for dim in dims[open_at:] if dim is not OPEN]
    rank = len(actual)
    listed = len(head) + len(tail)
    if (open_at is None and rank != listed) or (open_at is not None and rank < listed):
        wanted = str(listed) if open_at is None else f">= {listed}"
        return f"expected rank {wanted}, got rank {rank}", _expected_text(dims)
    pairs = list(enumerate(head)) + [(rank - len(tail) + i, t) for i, t in enumerate(tail)]
    for index, (value, written) in pairs:
        if value is not None and actual[index] != value:
            if isinstance(written, int):
                return f"dim {index} expected {value}, got {actual[index]}", _expected_text(dims)
            return f"dim {index} expected {format_dim(written)} = {value}, got {actual[index]}", _expected_text(dims)
    return "", ""


def _port_names(node: CheckedNode, count: int, outputs: bool) -> list[str]:
    if outputs:
        names = node.opdef.output_names(node.params)
        return names if len(names) == count else [str(i) for i in range(count)]
    # The ports the node's parameters open, as the checker paired them (attention's mask after x, not kv).
    bound = bind_ports(node.opdef, node.in_types[:count], node.params)
    ports = [port for port, _ in bound] if bound is not None and len(bound) == count else list(node.opdef.inputs)
    out: list[str] = []
    for i in range(count):
        if i < len(ports) and not ports[i].variadic:
            out.append(ports[i].name)
        elif ports:
            first = next(k for k, p in enumerate(ports) if p.variadic or k == len(ports) - 1)
            out.append(f"{ports[-1].name}[{i - first}]")
        else:
            out.append(str(i))
    return out


_SATISFIED: dict[tuple[torch.dtype, str], bool] = {}


def _dtype_reason(
    node: CheckedNode, index: int, static: TensorType, value: torch.Tensor, ins: Sequence[Any], autocast: bool
) -> tuple[str, str]:
    key = (value.dtype, static.dtype)
    satisfied = _SATISFIED.get(key)
    if satisfied is None:  # a handful of (dtype, rule) pairs in a process: remembered, not recomputed per output
        satisfied = _SATISFIED[key] = dtype_satisfies(dtype_name(value.dtype), static.dtype) is True
    if not satisfied and not autocast:
        return f"dtype expected {static.dtype}, got {dtype_name(value.dtype)}", static.dtype
    ports = node.opdef.outputs
    rule = ports[min(index, len(ports) - 1)].dtype if ports else "any"
    if rule.startswith("same:") and not autocast:
        source = rule[5:]
        # The input port's position is its value's index (a variadic port, module's x: its first value).
        position = next((i for i, port in enumerate(node.opdef.inputs) if port.name == source), len(ins))
        if position < len(ins):
            other = ins[position]
            if isinstance(other, torch.Tensor) and other.dtype != value.dtype:
                wanted = dtype_name(other.dtype)
                return f"dtype must match input {source!r} ({wanted}), got {dtype_name(value.dtype)}", wanted
    return "", ""


def _control_flow() -> tuple[type[BaseException], ...]:
    try:  # raised by torch.utils.checkpoint's pack hook to stop a recomputation early (``early_stop``)
        from torch.utils.checkpoint import _StopRecomputationError
    except ImportError:
        return (HndlError,)
    return (HndlError, _StopRecomputationError)


#: What a layer may raise that is not its failure, so it passes on as it is: an ``HndlError`` (from a nested
#: block or model, which names its own node) and torch's control-flow exceptions, which torch raises inside a
#: forward to be caught by its own caller further out (``checkpoint``'s early stop ends the recomputation of
#: a segment once the tensors it needs are saved; wrapped, it would reach backward as a layer failure).
CONTROL_FLOW: tuple[type[BaseException], ...] = _control_flow()


def layer_failure(node: CheckedNode, ins: Sequence[Any], exc: BaseException) -> HndlError:
    """E_RUNTIME for a layer that raised: names the node, op and input shapes; the caller chains ``exc``."""
    ports = _port_names(node, len(ins), outputs=False)
    shapes = ", ".join(f"{p} {shape_text(v)}" for p, v in zip(ports, ins))
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    text = str(exc)
    on_dtensors = "scaled_dot_product" in text and ("sharding" in text.lower() or "DTensor" in text)
    return HndlError(
        node.problem(
            "E_RUNTIME",
            f"the layer failed on input {shapes}: {cause}",
            hint=SDPA_ON_DTENSOR_HINT if on_dtensors else None,
        )
    )


def run_checked(
    steps: Sequence[Step],
    modules: Sequence[Callable[..., Any]],
    values: dict[str, Any],
    env: dict[str, Any],
    last_use: Mapping[str, int],
) -> None:
    """Run every step through ``__call__`` and check each output; fills ``values`` (value id -> tensor).

    A value is dropped from ``values`` right after the step that last reads it (``last_use``, from the plan), as
    the generated fast path does, so a validating call holds no more activations than a fast one; a failing
    step's inputs are still held when it raises. ``values`` ends holding the graph's outputs.

    Raises:
        HndlError: E_CONTRACT for an output that breaks its static type (shape, dtype, device, count) or
            inputs on different devices; E_RUNTIME for a layer that raised, with the exception chained.
    """
    autocast = any(torch.is_autocast_enabled(d) for d in ("cpu", "cuda"))
    scalars = _scalars(env)  # the bindings do not change while the steps run
    local: dict[str, int] = {}  # value -> ranks sharing its last dim (tensor parallelism's local outputs)
    for index, (step, module) in enumerate(zip(steps, modules)):
        node = step.node
        ins = [values[v] for v in step.inputs]
        devices = {v.device for v in ins if isinstance(v, torch.Tensor)}
        if len(devices) > 1:
            ports = _port_names(node, len(ins), outputs=False)
            first = next(v.device for v in ins if isinstance(v, torch.Tensor))
            where = next(p for p, v in zip(ports, ins) if isinstance(v, torch.Tensor) and v.device != first)
            raise HndlError(
                node.problem(
                    "E_CONTRACT",
                    "the inputs are on different devices: "
                    + ", ".join(f"{p} on {v.device}" for p, v in zip(ports, ins) if isinstance(v, torch.Tensor)),
                    port=where,
                    expected=str(first),
                    actual=", ".join(sorted(str(d) for d in devices)),
                )
            )
        try:
            result = module(*ins)
        except OutputIndexError as exc:  # op module's 'output' selects a value the module does not return
            raise HndlError(node.problem("E_CONTRACT", str(exc), expected="'output' within the result")) from exc
        except CONTROL_FLOW:  # an HndlError from inside a called block names its own layer
            raise
        except Exception as exc:
            raise layer_failure(node, ins, exc) from exc
        count = len(step.outputs)
        outs = _split(node, result, count, env)
        factor = _local_factor(step, module, outs, local)
        for i, (value_id, value, static) in enumerate(zip(step.outputs, outs, node.out_types)):
            if factor > 1:
                local[value_id] = factor
            problem = _check_output(node, count, i, static, value, ins, env, scalars, autocast, factor)
            if problem is not None:
                raise HndlError(problem)
            values[value_id] = value
        for value_id in (*step.inputs, *step.outputs):
            if last_use.get(value_id) == index:
                values.pop(value_id, None)
        value = None  # nothing of this step stays alive while the next one runs
        del ins, result, outs


def _local_factor(step: Step, module: Any, outs: Sequence[Any], local: Mapping[str, int]) -> int:
    """How many tensor-parallel ranks share the last dim of this step's output (1 without tensor parallelism):
    a column-parallel layer's local output, or an element-wise step over such values (``_local_shards``)."""
    if len(outs) != 1:
        return 1
    made = local_factor(module, outs[0])
    if made > 1:
        return made
    carried = {local[v] for v in step.inputs if v in local}
    return carried.pop() if len(carried) == 1 and keeps_shape(step) else 1


def _split(node: CheckedNode, result: Any, count: int, env: dict[str, Any]) -> Sequence[Any]:
    if count == 1:
        return (result,)
    if not isinstance(result, (tuple, list)) or len(result) != count:
        got = f"{len(result)} values" if isinstance(result, (tuple, list)) else f"one {type(result).__name__}"
        raise HndlError(
            node.problem(
                "E_CONTRACT",
                f"the layer returned {got}, the op declares {count} outputs",
                expected=f"{count} tensors",
                actual=got,
            )
        )
    return result


_MODULE_HINT = "op module promises its input's shape unless told: give the layer's output shape with shape: [...]"


def _check_output(
    node: CheckedNode,
    count: int,
    index: int,
    static: TensorType,
    value: Any,
    ins: Sequence[Any],
    env: dict[str, Any],
    scalars: dict[str, int],
    autocast: bool,
    local: int = 1,
) -> Problem | None:
    """The problem with output ``index`` of ``count`` (None when it meets ``static``); texts are built only for a
    problem found. ``local`` ranks share the value's last dim (a tensor-parallel local shard): its logical
    shape is checked."""

    def problem(message: str, expected: Any, actual: Any) -> Problem:
        return node.problem(
            "E_CONTRACT",
            message,
            port=_port_names(node, count, outputs=True)[index],
            expected=expected,
            actual=actual,
            bindings=dict(env) or None,
            hint=_MODULE_HINT if node.opdef.name == "module" else None,
        )

    if not isinstance(value, torch.Tensor):
        found = problem(f"output is {type(value).__name__}, not a tensor", "a torch.Tensor", type(value).__name__)
        if node.op == "module" and isinstance(value, (tuple, list)):
            found.hint = "choose the value(s) the node gives with 'output' (nested tuples count flattened)"
        return found
    actual_shape = tuple(value.shape)
    if local > 1 and actual_shape:
        actual_shape = (*actual_shape[:-1], actual_shape[-1] * local)
    reason, expected_text = shape_reason(static, actual_shape, env, scalars)
    if reason:
        return problem(f"output {reason}", expected_text, format_shape(actual_shape))
    reason, wanted = _dtype_reason(node, index, static, value, ins, autocast)
    if reason:
        return problem(f"output {reason}", wanted, dtype_name(value.dtype))
    return None


# --- declared outputs -----------------------------------------------------------------------------------------


def check_declared_outputs(checked: CheckedGraph, outputs: Sequence[Any], env: dict[str, Any]) -> None:
    """Hold each output of a validating call to the contract its graph declares for it (``g.output(...,
    shape=..., dtype=...)``, ``outputs:`` in a spec). Only what static inference could not prove is left to check:
    a dim it could not relate to the inputs' symbols, or an op whose output shape is only declared (``module``).
    Runs once per signature, with the rest of validation; the fast path never calls it.

    Raises:
        HndlError: E_CONTRACT naming the output, the node that made it, expected against actual and the bindings.
    """
    scalars: dict[str, int] | None = None
    for declared, value in zip(checked.declared_outputs, outputs):
        if declared is None or declared.proven or not isinstance(value, torch.Tensor):
            continue
        if scalars is None:
            scalars = _scalars(env)
        expected = declared.expected
        actual = tuple(value.shape)
        reason, shown = shape_reason(expected, actual, env, scalars)
        if reason:
            written = format_shape(expected.shape)
            raise _declared_error(
                declared, f"is declared {written}: {reason}", shown, format_shape(actual), env, actual
            )
        got = dtype_name(value.dtype)
        if dtype_satisfies(got, expected.dtype) is not True:
            raise _declared_error(declared, f"is declared {expected.dtype}, got {got}", expected.dtype, got, env, None)


def _declared_error(
    declared: DeclaredOutput,
    message: str,
    expected: str,
    actual: str,
    env: dict[str, Any],
    shape: tuple[int, ...] | None,
) -> HndlError:
    node = declared.node
    hint = None
    if shape is not None and declared.expected.shape is not None:
        try:  # the declared dims, written over the inputs' symbols, as a pattern the call's bindings fill in
            pattern = ShapePattern.parse(
                [str(d) if isinstance(d, Variadic) else format_dim(d) for d in declared.expected.shape]
            )
        except ValueError:  # a dim inference could not determine ("?"): no pattern to search against
            pattern = None
        fix = shape_fix(pattern, shape, env) if pattern is not None else None
        if fix is not None:
            named = f"{node.op} '{node.qualname}'" if node is not None else "it"
            hint = node_hint(fix, where=f"after {named}")
    hint = hint or "change the graph so that it makes what the output declares, or declare what it makes"
    return HndlError(
        Problem(
            "E_CONTRACT",
            f"output '{declared.label}' {message}",
            node=node.qualname if node is not None else declared.label,
            op=node.op if node is not None else "output",
            port=declared.label,
            expected=expected,
            actual=actual,
            location=declared.location,
            bindings=dict(env) or None,
            hint=hint,
        )
    )
