"""Ensembles: stack the weights of models built from one graph, and run them all at once under ``vmap``."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call as _torch_functional_call
from torch.func import stack_module_state, vmap

from hndl import HndlError, Problem
from hndl.naming import dtype_name
from hndl.torch import GraphModule

from ._functional import functional_call
from ._stack_signatures import KNOWN_STACKS, PASSED_STACKS, stack_signature

__all__ = ["ensemble_call", "stack"]


def stack(models: Sequence[GraphModule]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], GraphModule]:
    """Stack the parameters and buffers of models built from the same graph, for :func:`ensemble_call`.

    Like :func:`torch.func.stack_module_state`, plus a base module to call them with: a copy of the first
    model moved to the ``meta`` device, so it holds no memory of its own.

    Args:
        models: two or more (one is allowed) GraphModules with the same structure: the same modules, parameter
            and buffer names, shapes, dtypes and devices.

    Returns:
        ``(params, buffers, base)``: each value in ``params`` and ``buffers`` has a new leading dim, one entry
        per model, in order. The stacked parameters are new leaf tensors (they require grad where the
        originals do), so an optimizer can train the whole ensemble; they share no memory with the models.

    Raises:
        HndlError: ``E_PARAMS`` when ``models`` is empty, holds something other than a GraphModule, or two
            models differ in structure (the message names the first difference and its node).
    """
    models = list(models)
    if not models:
        raise HndlError(Problem("E_PARAMS", "stack needs at least one model", expected="a list of GraphModules"))
    for index, model in enumerate(models):
        if not isinstance(model, GraphModule):
            raise HndlError(
                Problem(
                    "E_PARAMS",
                    f"model {index} is not a GraphModule",
                    expected="hndl.torch.GraphModule",
                    actual=type(model).__name__,
                    hint="for plain torch modules use torch.func.stack_module_state",
                )
            )
    reference = _structure(models[0])
    for index, model in enumerate(models[1:], start=1):
        problem = _difference(models[0], reference, model, _structure(model), index)
        if problem is not None:
            raise HndlError(problem)
    params, buffers = stack_module_state(models)
    return params, buffers, _meta_copy(models[0])


def _meta_copy(model: GraphModule) -> GraphModule:
    # deepcopy with every tensor pre-mapped to a meta twin: the copy keeps the model's modules, ties, modes and
    # hooks, and never allocates a second set of real weights on the way to the meta device.
    memo: dict[int, Any] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        meta = tensor.detach().to("meta")
        memo[id(tensor)] = nn.Parameter(meta, tensor.requires_grad) if isinstance(tensor, nn.Parameter) else meta
    return copy.deepcopy(model, memo).to("meta")


def ensemble_call(
    base: nn.Module,
    params: Mapping[str, torch.Tensor],
    buffers: Mapping[str, torch.Tensor],
    x: Any,
    *,
    in_dims: int | tuple[int | None, ...] | None = None,
    randomness: str = "different",
) -> Any:
    """Run every member of an ensemble on ``x`` at once: ``vmap`` of :func:`hndl.func.functional_call`.

    Member ``i`` computes ``functional_call(base, (params_i, buffers_i), x)``, where ``params_i`` is entry ``i``
    of every stacked tensor. The result has a new leading dim, one entry per member.

    In training mode, BatchNorm layers use each member's batch statistics and update the running statistics
    in ``buffers`` (the stacked tensors, in place), not those of the models that were stacked; that is exactly
    what calling each model alone would have computed.

    For a GraphModule ``base`` the stack is checked once per *stack signature*: the names of ``params`` and
    ``buffers``, each stacked tensor's shape, dtype and device, and the base's state version (a registration
    or a conversion of ``base`` changes it). A signature whose call passed is remembered per base (weakly; no
    tensor is kept), and the last few stacks also as PyTorch's C++ tensor guard: a known one costs two
    key-tuple compares and one C++ pass over the tensors before ``vmap`` of :func:`torch.func.functional_call`
    runs, and any change to the stack is a new signature, checked on the next call. As with :func:`torch.func.functional_call`, the stacked tensors are swapped into ``base`` for
    the call, so one base must not be called from two threads at once.

    Args:
        base: the module to call, usually the ``meta`` copy from :func:`stack`.
        params: stacked parameters, every parameter of ``base`` with a leading ensemble dim.
        buffers: stacked buffers, every buffer of ``base`` with the same leading dim.
        x: the input, or a tuple of inputs for a graph with several.
        in_dims: ``None`` (default) gives every member the same input; ``0`` gives member ``i`` entry ``i``
            of the input's leading dim; a tuple sets this per input.
        randomness: passed to :func:`torch.func.vmap`; ``"different"`` lets dropout draw a different mask per
            member.

    Returns:
        The members' outputs stacked along a new leading dim (a tuple of such for several outputs).

    Raises:
        HndlError: ``E_PARAMS`` when a parameter or buffer of ``base`` is missing (``base`` is on the ``meta``
            device, so every tensor must come from the stack), when stacked tensors disagree on the ensemble
            size, or when a member's tensors do not match the build.
    """
    inputs = x if isinstance(x, tuple) else (x,)
    dims = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(inputs)
    # Only a GraphModule base has a state version that moves with every registration, which a remembered
    # verdict needs; any other base is checked on every call. The tensor guard of a recent stack answers first
    # (one C++ pass); the signature record, which a guard's stricter comparison may miss, second.
    remembered = isinstance(base, GraphModule) and type(params) is dict and type(buffers) is dict
    version = base.state_version if remembered else None
    known = remembered and KNOWN_STACKS.known(base, version, params, buffers)  # type: ignore[arg-type]
    signature = None
    if remembered and not known:
        signature = stack_signature(params, buffers)
        known = signature is not None and PASSED_STACKS.known(base, version, signature)
        if known:
            KNOWN_STACKS.remember(base, version, params, buffers)  # type: ignore[arg-type]
    if not known:
        _check_stack(base, params, buffers)
    # A known stack fixes every member's names, shapes and dtypes, which is all functional_call's check looks
    # at, so torch's own functional_call runs; a new one goes through the checked call (inside vmap, so the
    # per-member shapes are compared with the build) and is remembered once the whole call has passed.
    call = _torch_functional_call if known else functional_call

    def member(member_params: Any, member_buffers: Any, *member_inputs: Any) -> Any:
        return call(base, (member_params, member_buffers), member_inputs)

    out = vmap(member, in_dims=(0, 0, *dims), randomness=randomness)(params, buffers, *inputs)
    if signature is not None and not known:
        PASSED_STACKS.remember(base, version, signature)
        KNOWN_STACKS.remember(base, version, params, buffers)  # type: ignore[arg-type]
    return out


def _check_stack(base: nn.Module, params: Mapping[str, Any], buffers: Mapping[str, Any]) -> None:
    problems: list[Problem] = []
    sizes: dict[int, str] = {}
    for kind, mapping in (("parameter", params), ("buffer", buffers)):
        if not isinstance(mapping, Mapping):
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"stacked {kind}s must be a dict of tensors",
                    expected="{name: tensor}",
                    actual=type(mapping).__name__,
                )
            )
            continue
        for key, value in mapping.items():
            if isinstance(value, torch.Tensor) and value.dim() == 0:
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"'{key}' has no ensemble dim",
                        expected="a leading dim of one entry per member",
                        actual="a 0-d tensor",
                    )
                )
            elif isinstance(value, torch.Tensor):
                sizes.setdefault(value.shape[0], key)
    if len(sizes) > 1:
        (size, key), (other_size, other_key) = list(sizes.items())[:2]
        problems.append(
            Problem(
                "E_PARAMS",
                "the stacked tensors disagree on the ensemble size",
                expected=f"{size} members, as in '{key}'",
                actual=f"{other_size} members in '{other_key}'",
            )
        )
    if isinstance(params, Mapping) and isinstance(buffers, Mapping):
        state = base.build_state if isinstance(base, GraphModule) else None
        given = set(params) | set(buffers)
        for name, tensor in (*base.named_parameters(), *base.named_buffers()):
            if name in given:
                continue
            slot = state.tensors.get(name) if state is not None else None
            where = "base is on the meta device" if tensor.device.type == "meta" else "every member needs its own"
            problems.append(
                Problem(
                    "E_PARAMS",
                    f"ensemble_call has no stacked value for '{name}' ({where})",
                    node=slot.node if slot else None,
                    op=slot.op if slot else None,
                    expected=f"a stacked tensor [E, {', '.join(map(str, tensor.shape))}]",
                    actual="no value",
                    hint="pass the params and buffers that hndl.func.stack returned",
                )
            )
    if problems:
        raise HndlError(problems, title="ensemble")


def _structure(model: GraphModule) -> dict[str, Any]:
    """What must agree between ensemble members: module types and every live tensor's kind, shape, dtype, device."""
    modules = {name: type(module) for name, module in model.named_modules(remove_duplicate=False)}
    tensors: dict[str, tuple[str, tuple[int, ...], torch.dtype, torch.device]] = {}
    for kind, items in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for name, tensor in items:
            tensors[name] = (kind, tuple(tensor.shape), tensor.dtype, tensor.device)
    return {"modules": modules, "tensors": tensors}


# How _difference formats a differing property of a tensor; anything else is formatted with str.
_FORMAT: dict[str, Callable[[Any], Any]] = {"shape": list, "dtype": dtype_name}


def _difference(
    first: GraphModule, reference: dict[str, Any], model: GraphModule, structure: dict[str, Any], index: int
) -> Problem | None:
    state = first.build_state

    def problem(message: str, name: str, expected: Any, actual: Any) -> Problem:
        node, op = state.owner_of(name)
        return Problem(
            "E_PARAMS",
            f"model {index} is not built like model 0: {message}",
            node=node,
            op=op,
            expected=expected,
            actual=actual,
            hint="an ensemble needs models built from the same graph",
        )

    for name, kind in reference["modules"].items():
        other = structure["modules"].get(name)
        if other is None:
            return problem(f"it has no module '{name}'", name, kind.__name__, "no module")
        if other is not kind:
            return problem(f"module '{name}' is another class", name, kind.__name__, other.__name__)
    for name in structure["modules"]:
        if name not in reference["modules"]:
            return problem(f"it has an extra module '{name}'", name, "no module", structure["modules"][name].__name__)
    labels = ("kind", "shape", "dtype", "device")
    for name, spec in reference["tensors"].items():
        other = structure["tensors"].get(name)
        if other is None:
            return problem(f"it has no {spec[0]} '{name}'", name, spec[0], "missing")
        for label, mine, theirs in zip(labels, spec, other):
            if mine != theirs:
                format_value = _FORMAT.get(label, str)
                return problem(f"{spec[0]} '{name}' differs in {label}", name, format_value(mine), format_value(theirs))
    for name, spec in structure["tensors"].items():
        if name not in reference["tensors"]:
            return problem(f"it has an extra {spec[0]} '{name}'", name, "missing", spec[0])
    return None
