"""GraphModule: the ``torch.nn.Module`` a graph builds into, with contracts checked once per input signature.

The call has two paths. The first call with a new *signature* (each input's shape, dtype and device, plus the
model's state version) runs the full check (:func:`._runtime.validate`): every contract is checked and every
node runs through ``nn.Module.__call__``. Later calls take the generated fast path (see :mod:`._codegen`) while
the guards of :mod:`._guards` hold (a known signature, registered state that still looks as recorded), and run
the layers. The class holds what a user calls; its runtime state is one object (:mod:`._runtime`), and the other
jobs are free functions it delegates to (:mod:`hndl.torch.interop`, :mod:`._checkpointing`, :mod:`._embeddings`,
:mod:`._nodes`, :mod:`._copying`, :mod:`._traced`). SPEC 11 is the behaviour; IMPLEMENTATION.md "The checked
runtime" is the design.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from .._errors import HndlError
from .._plan import Plan
from . import _checkpointing, _copying, _embeddings, _nodes, interop
from ._built import BuiltModel
from ._export import not_scriptable
from ._forward import sign
from ._fsdp import reshard_after_failure
from ._guards import VERSION_ATTR, bump
from ._runtime import Runtime, install, leaves, start
from ._signatures import SIGNATURE_CACHE_SIZE
from ._traced import traced_inputs

__all__ = ["SIGNATURE_CACHE_SIZE", "GraphModule"]

_is_compiling = torch.compiler.is_compiling


class GraphModule(BuiltModel):
    """A built graph: ``nodes`` holds one torch module per node (key ``n_<name>``); a node with a ``module_path``
    has its layer at that path instead (``model.layers.0.mlp.gate_proj``). :meth:`layer` finds either by node.

    Call it with the graph's inputs, positionally in declaration order or by name. One output is returned as
    a tensor, several as a tuple.

    **Checked once per signature.** The first call with a new signature (each input's shape, dtype and device,
    and the model's state version) validates: inputs against their contracts (``E_INPUT``), the registered
    parameters, buffers and submodules against the build (``E_RUNTIME``), then every node runs and its
    outputs are checked against the types static inference gave them (``E_CONTRACT``). Later calls with a known
    signature run the layers directly, calling ``forward`` of each layer that has no hook. :attr:`validations`
    counts full validations. The signature cache holds at most :data:`SIGNATURE_CACHE_SIZE` signatures per
    model (the oldest is forgotten first) and is safe to use from many threads.

    **What makes the next call validate again** (all of it is decided in ``hndl/torch/_guards.py``): a
    parameter, buffer or submodule registered on a module of the model (PyTorch's registration hooks:
    ``m.weight = nn.Parameter(...)``, ``register_buffer``, assigning a submodule); ``.to()``, ``.half()``,
    ``.double()``, ``.cuda()``; and, found by comparing the stores record on every call, edits no hook reports:
    ``m.bias = None`` (PyTorch runs its registration hooks for real values only), ``del m.weight``, direct
    writes to ``_parameters``, ``_buffers`` or ``_modules`` (an entry removed, set to ``None``, added, renamed or
    reordered, a submodule replaced, even by one whose ``__eq__`` lies), a whole store dict replaced, a hook
    added to a node's module or globally, a module's ``__class__`` swapped, an attribute added to a node's
    layer (``forward`` assigned, ``Module.compile()``), and a registered tensor whose shape or dtype changed in
    place (read through ``torch.Tensor``'s own ``size`` and ``dtype``, so a subclass's lying ``shape`` property
    is not believed). A change that breaks the build raises ``E_RUNTIME`` naming the node and the change; putting the
    original back makes the next call validate and pass. ``train()``/``eval()`` do not revalidate.

    Converting one layer on its own (``model.nodes.n_hidden.half()``) changes its tensors' dtypes in place:
    ``E_RUNTIME`` on the next call; convert the whole model.

    **Swaps by well-known tools** are taken as :meth:`replace_layer` takes a swap (``hndl/torch/_swaps.py``):
    PEFT's tuner layers (``get_peft_model``, ``PeftModel.from_pretrained``, ``load_adapter``/``delete_adapter``
    adding or dropping whole adapters), ``merge_and_unload()`` putting the held layer back, and a quantized Linear
    from ``quantize_dynamic`` or eager-mode ``convert``. The validation that finds one checks that it keeps the
    layer's contract (the same ``in_features``/``out_features``, the build's dtypes, a wrapper's ``base_layer``
    holding the built layer unchanged), makes it the build of its node and runs every node with its outputs
    checked; later edits are compared against it. Any other class is ``E_RUNTIME`` naming both classes with
    their modules (``the build made torch.nn.Linear, now it is peft.tuners.lora.layer.Linear``).

    A residual ``add`` may write into an input that nobody else can observe (made new by an unhooked layer, read
    once, held by the call alone on that call: SPEC 11.1), and a ``relu`` too while gradients are recorded (then
    only where the input's producer keeps nothing of it for backward); a kept hook output, the caller's tensors
    and registered tensors are never written.

    **Not detected** (the fast path keeps running): a same-shape, same-dtype tensor swapped in under its
    registered name (what ``torch.func.functional_call`` does; it stays on the fast path and is not kept
    alive).

    Under ``torch.compile`` no check runs: the layers are called through ``__call__`` and Dynamo sees plain
    module calls.

    Attributes:
        nodes: the node modules, ``nodes["n_<name>"]``; a ``graph`` node holds a ``ModuleList`` of
            ``ModuleDict``, one per repetition.
        graph: the :class:`~hndl.Graph` this was built from.
        validations: how many full validations this model has run (each attempt counts, failed ones too).
    """

    # Written straight into __dict__, past nn.Module.__setattr__, so mypy would otherwise type these through
    # nn.Module.__getattr__ (Tensor | Module). Annotations only: no class attribute.
    _runtime: Runtime
    _state_version: int

    def __init__(self, plan: Plan, layers: nn.Module) -> None:
        super().__init__(plan, layers)
        self.validations = 0
        start(self, verified=True)  # the build state was just taken from these modules
        sign(self, plan.input_names, GraphModule.forward)  # forward's signature names the inputs (._forward)

    # -- what the model is made of (public, read-only; ``plan``, ``build_state``, ``node_module``: _built.py) --

    @property
    def state_version(self) -> int:
        """A number that changes whenever the registered state may have changed (a registration PyTorch's hooks
        report, a conversion such as ``.half()``): a call validates again after it changes. Versions come from
        one process-wide counter and are never reused. Cheap to read: one dict lookup."""
        version: int = self.__dict__[VERSION_ATTR]
        return version

    @property
    def code(self) -> str:
        """The Python source generated for this model's call, as tracebacks and debuggers show it.

        ``execute`` is the checked call (the guards, then one line per leaf step, each commented with its node);
        ``unchecked`` is the call traced under ``torch.compile``. Regenerated when the stores record is retaken.
        """
        return self._runtime.compiled.source

    def replace_layer(self, node: str, module: nn.Module) -> None:
        """Swap node ``node``'s layer for any module (a quantized or fused layer, another class): the one way to
        put a layer of an unrelated class in place, which otherwise is ``E_RUNTIME`` on the next call.

        ``module`` becomes the build of that node: its parameters and buffers are what :attr:`build_state`
        records for it from now on. The next call validates, running the new layer with its outputs checked
        against the node's contract (``E_CONTRACT`` naming the node when they break it).

        Not needed for the swaps well-known tools make (PEFT's tuner layers, ``merge_and_unload``, quantized
        Linear layers, anywhere in the tree): the next call adopts those itself when they keep the layer's
        contract (see the class docstring and SPEC 11.2). Anything else left in a layer's place without this
        method is ``E_RUNTIME`` on the next call.

        Args:
            node: the node's qualified name, as errors name it (``"hidden"``, ``"blocks.0.attn"``).
            module: the new layer.

        Raises:
            HndlError: E_RUNTIME when no node has that name (with the closest name).
        """
        _nodes.replace_layer(self, node, module)

    def layer(self, node: str) -> nn.Module:
        """The live layer of node ``node``, wherever it is registered: ``model.layer("layers.0.gate_proj")`` is
        ``model.model.layers[0].mlp.gate_proj`` when the spec gives it ``module_path: mlp.gate_proj``, and
        ``model.nodes["n_hidden"]`` for a node ``hidden`` without one. A subgraph use (``"layers.0"``) gives its
        block, a repeated ``graph`` node (``"layers"``) its ``ModuleList``.

        Raises:
            HndlError: E_REF when no node has that name (with the closest); E_RUNTIME when its layer, or a module
                on the way to it, was removed.
        """
        return _nodes.layer(self, node)

    def layer_name(self, node: str) -> str:
        """The dotted module name of node ``node``'s layer, as ``named_modules()`` and ``state_dict`` spell it
        (``"model.layers.0.mlp.gate_proj"``, ``"nodes.n_hidden"``): what a TP plan, an FSDP wrap policy or a
        pipeline ``split_spec`` names. Raises E_REF for an unknown node, as :meth:`layer` does."""
        return ".".join(_nodes.node_path(self, node)[0])

    # -- activation checkpointing (hndl/torch/_checkpointing.py; SPEC.md section 16) ------------------------

    @property
    def checkpointed(self) -> tuple[str, ...]:
        """The subgraph uses recomputed in backward (``("h.0", "h.1")``), in step order."""
        return _checkpointing.names_of(self._plan, self._checkpointed)

    def checkpointing(
        self, nodes: Sequence[str] | str | None = None, budget: int | None = None, **dims: int
    ) -> tuple[str, ...]:
        """Choose which subgraph uses recompute their activations in backward instead of keeping them.

        ``nodes`` names them: a ``graph`` node stands for all its uses (``"h"``), a use for itself (``"h.3"``);
        ``budget`` (bytes) lets hndl choose them instead, so the estimated activation peak of a training step
        at ``dims`` fits it at little extra compute (:mod:`hndl._memory`); neither turns checkpointing off
        (``model.checkpointing(None)``). It replaces what the spec's ``checkpoint: true`` chose. No rebuild and
        no new validation: the next call takes the fast path with every check in place. A use recomputes only
        while gradients are recorded; under ``torch.no_grad`` the model runs as without checkpointing.

        Args:
            nodes: the uses to recompute, or None.
            budget: activation bytes to fit, or None; needs every symbol of the inputs in ``dims``.
            **dims: sizes of the inputs' symbols for ``budget`` (``B=8, T=512``).

        Returns:
            The uses now recomputed, as :attr:`checkpointed` gives them.

        Raises:
            HndlError: E_PARAM for a name that is not a subgraph use, both ``nodes`` and ``budget`` given, or a
                budget that cannot be met (the message names the smallest feasible one); E_INPUT for a bad dim.
                The setting is unchanged after an error.
        """
        chosen = _checkpointing.choose(self, nodes, budget, dims)
        with self._runtime.lock:
            self.__dict__["_checkpointed"] = chosen
            # The same stores record: what it proved about the registered state still holds, and a change
            # made since is still found by the next call's comparison.
            install(self, leaves(self), self._runtime.stores)
        return self.checkpointed

    # -- calling (the handlers the generated call runs: hndl/torch/_runtime.py) -----------------------------

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the graph on its inputs, by position in declaration order or by name: ``model.forward(input_ids,
        attention_mask)``. A built model's ``inspect.signature(model.forward)`` names them (``hndl/torch/_forward.py``:
        the model's class is a subclass named like its own), as HF ``Trainer`` and ``torch.export`` read it; a
        missing, unknown or doubled input is ``E_INPUT``."""
        if _is_compiling():
            # Before any comparison: Dynamo traces plain module calls, and no Python state is consulted. The
            # inputs first: before a non-Dynamo trace they may give the model a new runtime (._traced).
            inputs = traced_inputs(self, args, kwargs)
            return self._runtime.unchecked(self, *inputs)
        try:
            return self._runtime.execute(self, args, kwargs)
        except HndlError:
            reshard_after_failure(self)  # FSDP2 gathered parameters in its pre-forward hook: put them back
            raise

    def _apply(self, fn: Callable[..., Any], recurse: bool = True) -> GraphModule:
        # .to(), .half(), .double(), .cuda() ... all come through here; a conversion is a new state version.
        result = super()._apply(fn, recurse)
        state = self.__dict__.get("_build_state")
        if state is not None:
            state.refresh_dtypes(self)
        bump(self)
        return result

    # -- copying and pickling: the runtime is rebuilt, never copied (hndl/torch/_copying.py) --------------------

    def __getstate__(self) -> dict[str, Any]:
        return _copying.without_runtime(super().__getstate__())

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        _copying.restart(self, GraphModule.forward)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _copying.reduced(self, super().__reduce_ex__(protocol))

    def __deepcopy__(self, memo: dict[int, Any]) -> GraphModule:
        return _copying.deep_copy(self, memo)

    def extra_repr(self) -> str:
        return f"graph={self.graph.name!r}"

    # -- capabilities, as free functions in hndl.torch.interop (SPEC.md section 13) and hndl.summary -----------

    def example_inputs(self, **dims: Any) -> tuple[torch.Tensor, ...]:
        """Inputs satisfying every contract (``B=4``; others default): see :func:`hndl.torch.example_inputs`."""
        return interop.example_inputs(self, **dims)

    def dynamic_shapes(self, **dims: Any) -> dict[str, dict[int, Any]]:
        """``torch.export`` dynamic dims, one per symbol, keyed by input name: see :func:`hndl.torch.dynamic_shapes`."""
        return interop.dynamic_shapes(self, **dims)

    def pipeline_stages(
        self, split_at: Sequence[str] | None = None, *, num_stages: int | None = None, **dims: int
    ) -> list[nn.Module]:
        """The model cut into stages for ``torch.distributed.pipelining``: see :func:`hndl.torch.pipeline_stages`."""
        return list(interop.pipeline_stages(self, split_at, num_stages=num_stages, **dims))

    def tensor_parallel_plan(self, world_size: int | None = None) -> dict[str, Any]:
        """The plan for ``parallelize_module``: see :func:`hndl.torch.tensor_parallel_plan`."""
        return interop.tensor_parallel_plan(self, world_size)

    def shard_units(self) -> list[nn.Module]:
        """The modules to pass to FSDP2's ``fully_shard``: see :func:`hndl.torch.shard_units`."""
        return interop.shard_units(self)

    def get_output_embeddings(self) -> nn.Module | None:
        """The output head of a language model graph, as transformers' method of this name answers it: the layer
        of the ``linear`` node whose output is a graph output and whose weight is an ``embedding`` node's (tied)
        or has its shape; None when the graph has no such node (``hndl/torch/_embeddings.py``).

        PEFT's ``target_modules="all-linear"`` leaves this layer out only for transformers' ``PreTrainedModel``
        (peft 0.21 checks the class): on a GraphModule pass ``exclude_modules=["lm_head"]`` as well (its module
        name, ``next(n for n, m in model.named_modules() if m is model.get_output_embeddings())``)."""
        return _embeddings.output_embeddings(self)

    def get_input_embeddings(self) -> nn.Module | None:
        """The token embedding, as transformers' method of this name answers it: the ``embedding`` node's layer
        the output head matches, else the first ``embedding`` node reading a graph input; None without one."""
        return _embeddings.input_embeddings(self)

    def __prepare_scriptable__(self) -> GraphModule:
        raise not_scriptable(self)  # torch.jit.script calls this first: say what to use instead

    def summary(
        self, *, depth: int | None = None, train: bool = False, optimizer: str | None = None, **dims: int
    ) -> Any:
        """This model's :class:`hndl.Summary` (prints as the table): see :func:`hndl.summary`."""
        from .._summary import summary

        return summary(self, depth=depth, train=train, optimizer=optimizer, **dims)
