"""The cached variant of a built plain decoder, derived from the model's own graph and layers (SPEC 17.4).

The variant's graph is the model's graph through :func:`._transform.transform` (every node name, parameter and
state_dict key kept), built with the plain model's tensors. Layers are then compared one by one with what the
build makes (a reference built on the meta device): a layer that is not (``replace_layer``, another class,
another configuration, a hook) is carried into the variant at the same module path, the plain and cached graphs
sharing their module paths. An attention layer cannot be carried whole (the variant's attention reads and writes
the cache), but what a tool swaps *inside* it can: a projection PEFT wrapped in a LoRA layer, a quantized
projection, a hooked one. Such a submodule is carried into the variant's attention layer at the same name, when
the variant builds that submodule as the plain build does (the same class and configuration: the cache changes
how attention combines its projections, not the projections). The variant's next call adopts it as the user's
model adopted it (``hndl/torch/_swaps.py``), with its outputs checked. An attention layer that differs otherwise
(another class, its own hook, another configuration), a submodule the variant builds differently, and a layer at
a path the variant lacks (the folded mask) are an ``E_INPUT``.

What is carried is a copy of the user's layer whose tensors and hooks are the user's own (:func:`eval_copy`),
kept in eval mode: the variant never shares a mode with the user's model, so no call ever switches a mode that
another thread's call could be reading.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .._errors import HndlError, Problem
from .._graph import Graph
from ..naming import excerpt

if TYPE_CHECKING:
    from ..torch import GraphModule

__all__ = ["derive", "eval_copy", "reference_graphs", "tree_key"]

_HINT = "model.replace_layer(node, module) puts a layer of another class in place, outside attention"


# -- the graph -----------------------------------------------------------------------------------------------


def _same_value(a: Any, b: Any) -> bool:
    """Exact equality of spec values (a list and a tuple of equal items are equal, 1 and 1.0 and True are not)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if type(a) is not type(b):
        return False
    try:
        return bool(a == b)
    except Exception:  # a value whose == is not a bool (an array): not provably the same
        return False


def reference_graphs(model: GraphModule, kind: str) -> tuple[Graph, Graph]:
    """The model's own graph and its cached variant of ``kind`` (:func:`._transform.transform`).

    Raises:
        HndlError: E_INPUT naming the node the variant cannot map (the transform's refusal).
    """
    from ._transform import transform

    return model.graph, transform(model.graph, kind)


def _refused(difference: str, name: str | None = None, hint: str = _HINT) -> HndlError:
    return HndlError(
        Problem(
            "E_INPUT",
            "hndl.generate cannot derive a key/value cache variant from this model: " + difference,
            node=name,
            expected="the model's layers as built, or replaced outside attention",
            hint=hint,
        )
    )


# -- the layers ----------------------------------------------------------------------------------------------


def same_layer(live: Any, built: Any, *, children: bool = True) -> bool:
    """Whether ``live`` is what the build made (``built``, on the meta device): the same class, the same
    attributes (by ``==``; tensors by shape, the dtype and device following the model), the same registered
    names, no hook, and the same for every submodule (``children=False``: the submodules' names only). Unsure is
    "not the same": such a layer is carried."""
    if live is None or built is None:
        return live is built
    if type(live) is not type(built):
        return False
    mine, theirs = vars(live), vars(built)
    if mine.keys() != theirs.keys():
        return False
    for key, a in mine.items():
        b = theirs[key]
        if key == "training":
            continue
        if key in ("_parameters", "_buffers"):
            if a.keys() != b.keys() or any(not _same_tensor(a[k], b[k]) for k in a):
                return False
        elif key == "_modules":
            if a.keys() != b.keys() or (children and any(not same_layer(a[k], b[k]) for k in a)):
                return False
        elif "hook" in key and isinstance(a, dict):
            if len(a) != len(b):
                return False
        elif isinstance(a, torch.Tensor):
            if not _same_tensor(a, b):
                return False
        elif not _same_value(a, b):
            return False
    return True


def _same_tensor(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is b
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape


#: The attributes every module has (torch's stores and flags): copied, never shared, by :func:`eval_copy`.
_TORCH_KEYS = frozenset(vars(nn.Module()))


def eval_copy(module: nn.Module, *, share_state: bool = False) -> nn.Module:
    """A copy of ``module`` in eval mode whose parameters, buffers and hooks are ``module``'s own objects: it
    computes what ``module`` computes in eval mode, sees every in-place change of its tensors, and switching its
    mode never touches ``module``.

    ``share_state``: the lists, dicts and sets a layer keeps of its own (outside torch's stores) are shared too,
    so the copy also sees what a tool changes in them in place. A layer carried into a cached variant needs it:
    PEFT's ``merge_adapter()`` adds the adapter into the base weight (a tensor, shared) and appends to the
    layer's ``merged_adapters`` list, which tells the layer not to add the adapter again; a copy with a list of
    its own would add it twice.

    Raises:
        HndlError: E_INPUT when the module cannot be copied (it holds something ``copy.deepcopy`` refuses).
    """
    memo: dict[int, Any] = {}
    for sub in module.modules():
        for tensor in itertools.chain(sub._parameters.values(), sub._buffers.values()):
            if tensor is not None:
                memo[id(tensor)] = tensor
        for key, value in vars(sub).items():
            if "hook" in key and isinstance(value, dict):
                for hook in value.values():
                    memo[id(hook)] = hook  # a hook is the user's object: a recorder keeps recording
            elif share_state and key not in _TORCH_KEYS and isinstance(value, (list, dict, set)):
                memo[id(value)] = value
    try:
        clone = copy.deepcopy(module, memo)
    except Exception as exc:
        raise HndlError(
            Problem(
                "E_INPUT",
                f"{type(module).__name__} could not be copied to run in eval mode: {type(exc).__name__}: "
                f"{excerpt(str(exc))}",
                expected="a module copy.deepcopy can copy",
                actual=type(module).__name__,
                hint="put the model in eval mode (model.eval()): hndl.generate then runs it as it is",
            )
        ) from exc
    return clone.eval()


# The dicts whose contents a derived model depends on: the registered state, and the hooks a call runs.
_STORES = (
    "_parameters",
    "_buffers",
    "_modules",
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)


#: A GraphModule's attributes that change with its calls, not with its layers or tensors (and its mode).
_BOOKKEEPING = frozenset(("training", "_runtime", "validations"))


def tree_key(model: nn.Module) -> tuple[Any, ...]:
    """What a copy or variant of ``model`` depends on: every module, its attributes and the contents of its
    stores (parameters, buffers, submodules, forward and backward hooks) by identity, and the state version of a
    GraphModule (which a conversion such as ``.double()`` changes). Modes are left out: a derived model never
    follows them, and a training loop that calls ``generate`` between steps switches them each time. So is a
    GraphModule's own bookkeeping (its runtime, replaced when a call re-settles it, and its validation count):
    the variant holds none of it, and a training step's first call (grad on) would otherwise derive it again.

    Computed on every ``generate`` call, so it touches each module with a few C-level passes (a few microseconds a
    module; about a millisecond for GPT-2 small's 166 modules)."""
    parts: list[Any] = [model.__dict__.get("_state_version")]
    append = parts.append
    for module in model.modules():
        d = module.__dict__
        append(tuple(d))
        if "_runtime" in d:  # a GraphModule (the model, or one inside it): its bookkeeping left out
            append(tuple(id(v) for k, v in d.items() if k not in _BOOKKEEPING))
        elif next(iter(d), None) == "training":  # nn.Module.__init__ sets it first: leave it out by position
            append(tuple(map(id, d.values()))[1:])
        else:
            append(tuple(id(v) for k, v in d.items() if k != "training"))
        for name in _STORES:
            store = d.get(name, {})
            append(tuple(store))
            append(tuple(map(id, store.values())))
    return tuple(parts)


def _layers(model: GraphModule) -> Iterator[tuple[Any, Any]]:
    for step in model.plan.steps:
        yield step, model.node_module(step.node.path)


def derive(model: GraphModule, kind: str) -> GraphModule:
    """``model``'s cached variant of ``kind``, built with its tensors and its replaced layers, in eval mode.

    Raises:
        HndlError: E_INPUT when the model's graph is not the zoo's, its registered state no longer matches its
            build, or a replaced layer cannot be carried (an attention layer, a path the variant lacks).
    """
    from ..torch._meta import build_on_meta

    plain, cached = reference_graphs(model, kind)
    changes = model.build_state.diff(model)
    if changes:
        node, _, change = changes[0]
        raise _refused(
            f"its registered state no longer matches its build: {change}",
            node,
            hint="model.replace_layer(node, module) puts a layer of another class in place",
        )
    built = build_on_meta(plain)
    twin = build_on_meta(cached)
    where = {step.node.path: step for step in twin.plan.steps}
    carried: list[tuple[Any, nn.Module]] = []
    inner: list[tuple[str, nn.Module]] = []  # swaps inside attention layers, by dotted name
    for step, layer in _replaced(model, built):
        if step.node.path not in where:
            raise _refused(
                f"node '{step.node.qualname}' has a replaced layer and the cached variant has no node at its path",
                step.node.qualname,
            )
        if step.node.op == "attention":
            plain_layer, variant_layer = built.node_module(step.node.path), twin.node_module(step.node.path)
            assert plain_layer is not None  # (both builds have the node: the graphs share their module paths)
            assert variant_layer is not None
            inner += _inside_attention(step, layer, plain_layer, variant_layer)
        else:
            carried.append((step, layer))
    floating = next((t.dtype for t in model.parameters() if t.is_floating_point()), None)
    if floating is not None:
        # A converted model (.double(), .half()): the variant is converted the same way on the meta device, so its
        # build records the dtype the assigned tensors have. Done before anything is carried: a conversion of
        # the variant must never reach the user's tensors.
        twin.to(dtype=floating)
    prefixes = tuple(".".join(step.node.path) + "." for step, _ in carried) + tuple(f"{n}." for n, _ in inner)
    state = {k: v for k, v in model.state_dict(keep_vars=True).items() if not k.startswith(prefixes)}
    # load_state_dict(assign=True) gives each assigned Parameter the requires_grad of the one it replaces: the
    # variant's, fresh from the build (True), would unfreeze the user's frozen weights (a LoRA model's base, whose
    # next training step then moved them). The variant's take the model's flags first.
    variant_params = dict(twin.named_parameters(remove_duplicate=False))
    for key, value in state.items():
        if key in variant_params:
            variant_params[key].requires_grad_(value.requires_grad)
    missing, unexpected = twin.load_state_dict(state, assign=True, strict=False)
    stray = [k for k in (*missing, *unexpected) if not k.startswith(prefixes)]
    if stray:  # the graphs are equal, so the keys are: a failure here is a bug, said as one
        raise _refused(f"the variant's state_dict keys differ from the model's at {excerpt(stray)}")
    for name, sub in inner:
        # Set in the attention layer as the tool set it in the model's: the variant's next call adopts it through
        # the same acceptors (hndl/torch/_swaps.py) and validates it, outputs checked.
        owner, _, leaf = name.rpartition(".")
        setattr(twin.get_submodule(owner), leaf, eval_copy(sub, share_state=True))
    # A non-persistent buffer (rotary's inv_freq) has no state_dict key: taken from the model under its name.
    for full_name, buffer in list(twin.named_buffers()):
        if buffer.is_meta:
            owner, _, leaf = full_name.rpartition(".")
            twin.get_submodule(owner).register_buffer(leaf, model.get_buffer(full_name), persistent=False)
    twin.eval()
    for step, layer in carried:
        twin.replace_layer(where[step.node.path].node.qualname, eval_copy(layer, share_state=True))
    return twin


_MERGE_HINT = (
    "merge the tool's layer into the weights first (PEFT: model = peft_model.merge_and_unload()), or leave that "
    "submodule as the build made it"
)


def _inside_attention(step: Any, live: nn.Module, built: nn.Module, variant: nn.Module) -> list[tuple[str, nn.Module]]:
    """The submodules of attention layer ``live`` that are not what the build made (``built``), as (dotted name in
    the model, module), to be carried into the variant's attention layer (``variant``, built on the meta device).

    Raises:
        HndlError: E_INPUT when the layer itself differs from the build (another class, configuration or hook:
            the variant's attention reads and writes the cache, so it cannot run another layer in its place), or
            a differing submodule is one the variant builds otherwise (it would compute something else).
    """
    qualname = step.node.qualname
    if not same_layer(live, built, children=False):
        raise _refused(
            f"the attention layer of node '{qualname}' was replaced (or reconfigured, or given a hook of its own); "
            "the variant's attention reads and writes the cache, so it cannot run another layer in its place",
            qualname,
            hint=_HINT + "; inside attention, a swapped or hooked projection (a PEFT LoRA layer on q_proj) is carried",
        )
    prefix = ".".join(step.node.path)
    found: list[tuple[str, nn.Module]] = []
    for name, sub in live._modules.items():
        if sub is None or same_layer(sub, built._modules[name]):
            continue
        if not same_layer(built._modules[name], variant._modules.get(name)):
            raise _refused(
                f"submodule '{name}' of the attention layer of node '{qualname}' was swapped "
                f"({type(sub).__name__}), and the variant's attention builds its '{name}' otherwise",
                qualname,
                hint=_MERGE_HINT,
            )
        found.append((f"{prefix}.{name}", sub))
    return found


def _replaced(model: GraphModule, built: GraphModule) -> Sequence[tuple[Any, nn.Module]]:
    """The model's layers that are not what the build makes, with their plan steps."""
    found = []
    for step, layer in _layers(model):
        if not same_layer(layer, built.node_module(step.node.path)):
            found.append((step, layer))
    return found
