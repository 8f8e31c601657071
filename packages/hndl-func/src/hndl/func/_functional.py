"""``functional_call`` with the parameter dict checked against the build, once per parameter signature.

The check is the slow part and runs once per *parameter signature*: the dict's keys and each value's shape and
dtype, plus ``strict`` and ``tie_weights`` (devices are not checked, so they are not part of it). A signature
that passed is remembered per module instance, so a known signature costs one tuple build and one dict lookup
before ``torch.func.functional_call`` runs. The record holds no module and no tensor: it is keyed weakly by the
module, and a signature is made of strings, ``torch.Size`` and dtypes only.

Under ``vmap`` the values are ``BatchedTensor`` wrappers whose ``.shape`` is the per-sample shape, and under
``grad`` they are ``GradTrackingTensor`` wrappers with the ordinary shape; both compare directly against the
build, so the same check (and the same cached signature) serves plain calls and calls inside transforms.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call as _torch_functional_call

from hndl import HndlError, Problem
from hndl.naming import dtype_name, suggestion
from hndl.torch import BuildState, GraphModule

from ._passed import PassedSignatures

__all__ = ["functional_call"]

# Parameter signatures that passed, per module and state version (a conversion such as .double() or a
# registration gives the module a new version, and the dtypes a dict must have may have changed with it).
_PASSED = PassedSignatures(limit=32)

# shape and dtype of a tensor in one C call; raises AttributeError for a non-tensor (-> slow path). The device is
# left out on purpose: the check does not depend on it (a meta-device module takes real tensors), so adding it
# would only make the signature dearer to build, hash and compare.
_META = operator.attrgetter("shape", "dtype")

# dict, as torch.func.functional_call types it and checks at runtime (a Mapping that is not a dict fails there).
ParamDict = dict[str, Any]


def functional_call(
    module: nn.Module,
    params_and_buffers: ParamDict | Sequence[ParamDict],
    args: Any = None,
    kwargs: dict[str, Any] | None = None,
    *,
    strict: bool = False,
    tie_weights: bool = True,
) -> Any:
    """Call ``module`` with ``params_and_buffers`` in place of its own, checked against the build first.

    Same semantics and the same results as :func:`torch.func.functional_call` (it does the call): a dict, or a
    tuple of dicts whose keys do not overlap; a partial dict leaves the other tensors as they are; ``strict``
    requires every parameter and buffer; with ``tie_weights`` a value given for one name of a tied tensor
    applies to all its names. Works inside ``torch.func.vmap``, ``grad``, ``vjp`` and ``jacrev``.

    Before the call, for a :class:`hndl.torch.GraphModule`, the dict is checked against the build: every key
    must name a parameter or buffer the build made (an unknown key comes with the closest known one), every
    value must be a tensor with the build's shape (under ``vmap``: the per-sample shape) and the module's
    current dtype, and with ``strict`` no parameter or buffer may be missing. All problems are reported
    together. The check runs once per parameter signature (keys, shapes, dtypes) and is remembered per module
    instance; a known signature costs a tuple build and a dict lookup. Devices are not checked (so they are
    not part of the signature): a module on the ``meta`` device (see :func:`hndl.func.stack`) takes real
    tensors. Under ``torch.compile`` the check is skipped.

    Any other ``nn.Module`` is passed straight to :func:`torch.func.functional_call`, unchecked.

    Args:
        module: the module to call.
        params_and_buffers: ``{name: tensor}`` with ``state_dict`` names (``"nodes.n_hidden.weight"``), or a
            tuple of such dicts (typically ``(params, buffers)``).
        args: the positional inputs; a single non-tuple value is one input.
        kwargs: keyword inputs.
        strict: require a value for every parameter and buffer.
        tie_weights: let a value given for one name of a tied tensor stand for all its names.

    Returns:
        Whatever ``module`` returns.

    Raises:
        HndlError: ``E_PARAMS`` when the dict does not match the build, naming each key, its node, expected
            against actual.

    Example:
        >>> params = {k: v * 0 for k, v in model.named_parameters()}  # doctest: +SKIP
        >>> hndl.func.functional_call(model, params, (x,))  # doctest: +SKIP
    """
    if isinstance(module, GraphModule) and not torch.compiler.is_compiling():
        _check(module, params_and_buffers, strict, tie_weights)
    return _torch_functional_call(module, params_and_buffers, args, kwargs, strict=strict, tie_weights=tie_weights)


def _check(module: GraphModule, params_and_buffers: Any, strict: bool, tie_weights: bool) -> None:
    version = module.state_version
    try:
        if type(params_and_buffers) is dict:
            signature: Any = (
                strict,
                tie_weights,
                tuple(params_and_buffers),
                tuple(map(_META, params_and_buffers.values())),
            )
        else:
            signature = (
                strict,
                tie_weights,
                tuple((tuple(d), tuple(map(_META, d.values()))) for d in params_and_buffers),
            )
        # Tuples do not cache their hash: on the known path this membership test is the only hashing.
        if _PASSED.known(module, version, signature):
            return
        hash(signature)
    except Exception:
        # A non-tensor value, something that is not a dict of tensors, an unhashable key: the full check says
        # what is wrong (or passes: then there is simply nothing to remember).
        signature = None
    problems = _problems(module, params_and_buffers, strict, tie_weights)
    if problems:
        title = f"parameter dict for graph '{module.graph.name}'" if len(problems) > 1 else None
        raise HndlError(problems, title=title)
    if signature is not None:
        _PASSED.remember(module, version, signature)


def _problems(module: GraphModule, params_and_buffers: Any, strict: bool, tie_weights: bool) -> list[Problem]:
    """Everything wrong with ``params_and_buffers`` for ``module``; empty when it matches the build."""
    state = module.build_state
    dicts = _as_dicts(params_and_buffers)
    if isinstance(dicts, Problem):
        return [dicts]
    live = _live_tensors(module)
    locations = module.plan.locations
    problems: list[Problem] = []
    given: dict[str, int] = {}
    for index, mapping in enumerate(dicts):
        for key, value in mapping.items():
            if not isinstance(key, str):
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"keys must be parameter or buffer names (str), got {type(key).__name__} {key!r}",
                    )
                )
                continue
            if key in given:
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"'{key}' is given in dict {given[key]} and in dict {index}; functional_call needs one value",
                    )
                )
                continue
            given[key] = index
            problem = _check_value(state, live, locations, key, value)
            if problem is not None:
                problems.append(problem)
    if strict:
        covered = set(given)
        if tie_weights:
            for group in _tied_groups(module):
                if covered.intersection(group):
                    covered.update(group)
        for name, slot in state.tensors.items():
            if slot.shape is not None and name not in covered:
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"{slot.kind} '{name}' is missing (strict=True needs every parameter and buffer)",
                        node=slot.node,
                        op=slot.op,
                        location=locations.get(slot.node) if slot.node is not None else None,
                        expected=_describe(slot.shape, _dtype_of(live, name, slot.dtype)),
                        actual="no value",
                        hint="pass it, or call with strict=False to keep the module's own tensor",
                    )
                )
    return problems


def _as_dicts(params_and_buffers: Any) -> list[Mapping[Any, Any]] | Problem:
    # torch.func.functional_call takes real dicts only (a MappingProxyType or other Mapping is a ValueError
    # inside torch), so anything else is refused here, as E_PARAMS, before torch sees it.
    if isinstance(params_and_buffers, dict):
        return [params_and_buffers]
    if isinstance(params_and_buffers, (tuple, list)) and all(isinstance(d, dict) for d in params_and_buffers):
        return list(params_and_buffers)
    kind = type(params_and_buffers).__name__
    if isinstance(params_and_buffers, (tuple, list)):
        kind = f"{kind} of " + ", ".join(type(d).__name__ for d in params_and_buffers)
    return Problem(
        "E_PARAMS",
        "params_and_buffers must be a dict of tensors or a tuple of dicts",
        expected="{name: tensor} or ({name: tensor}, ...)",
        actual=kind,
        hint="wrap other mappings in dict(...)" if isinstance(params_and_buffers, Mapping) else None,
    )


def _check_value(
    state: BuildState, live: dict[str, torch.Tensor], locations: Mapping[str, str | None], key: str, value: Any
) -> Problem | None:
    slot = state.tensors.get(key)
    if slot is None:
        hint = suggestion(key, state.tensors) or "keys are state_dict names, e.g. 'nodes.n_<node>.weight'"
        return Problem("E_PARAMS", f"unknown key '{key}': the build has no parameter or buffer of that name", hint=hint)
    location = locations.get(slot.node) if slot.node is not None else None
    where: dict[str, Any] = {"node": slot.node, "op": slot.op, "location": location}
    if not isinstance(value, torch.Tensor):
        return Problem(
            "E_PARAMS",
            f"{slot.kind} '{key}' must be a tensor",
            expected="torch.Tensor" if slot.shape is not None else "None",
            actual=type(value).__name__,
            **where,
        )
    if slot.shape is None:
        return Problem(
            "E_PARAMS",
            f"{slot.kind} '{key}' was built as None and cannot take a tensor",
            expected="None",
            actual=_describe(tuple(value.shape), value.dtype),
            **where,
        )
    shape = tuple(value.shape)
    if shape != slot.shape:
        shape_hint = f"pass it shaped like model.state_dict()[{key!r}]"
        if shape[1:] == slot.shape:
            shape_hint = (
                f"a leading dim of {shape[0]} looks like stacked ensemble weights: call under torch.func.vmap "
                "(in_dims=0 for the parameters) or use hndl.func.ensemble_call"
            )
        return Problem(
            "E_PARAMS",
            f"{slot.kind} '{key}' has the wrong shape",
            expected=list(slot.shape),
            actual=list(shape),
            hint=shape_hint,
            **where,
        )
    dtype = _dtype_of(live, key, slot.dtype)
    if dtype is not None and value.dtype != dtype:
        return Problem(
            "E_PARAMS",
            f"{slot.kind} '{key}' has the wrong dtype",
            expected=dtype_name(dtype),
            actual=dtype_name(value.dtype),
            hint=f"convert it with .to({dtype}), or convert the module first",
            **where,
        )
    return None


def _dtype_of(live: dict[str, torch.Tensor], name: str, built: torch.dtype | None) -> torch.dtype | None:
    # The contract's dtype is the module's current one: .half() / .to(dtype) convert the build, they do not
    # break it.
    tensor = live.get(name)
    return tensor.dtype if tensor is not None else built


def _live_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    live: dict[str, torch.Tensor] = dict(module.named_parameters(remove_duplicate=False))
    live.update(module.named_buffers(remove_duplicate=False))
    return live


def _tied_groups(module: nn.Module) -> list[set[str]]:
    """Names that share one tensor, as torch.func's ``tie_weights`` sees them."""
    by_id: dict[int, set[str]] = {}
    for name, tensor in _live_tensors(module).items():
        by_id.setdefault(id(tensor), set()).add(name)
    return [names for names in by_id.values() if len(names) > 1]


def _describe(shape: tuple[int, ...] | None, dtype: torch.dtype | None) -> str:
    text = "None" if shape is None else str(list(shape))
    return f"{text} {dtype_name(dtype)}" if dtype is not None else text
