"""What :func:`hndl.generate` needs to know about a model: whether it has the cache interface, the cache's
layout (layers, key/value heads, head dim, dtype, device), the vocabulary and the positions it has; and the
cached variant of a plain decoder (:func:`with_kv_cache`), built with the plain model's weights."""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .._errors import HndlError, Problem
from ..naming import excerpt, suggestion
from ._transform import KINDS as KINDS

if TYPE_CHECKING:
    from ..torch import GraphModule

__all__ = [
    "CACHE_INPUTS",
    "GROW_INPUTS",
    "CacheLayout",
    "cache_kind",
    "cache_layout",
    "model_limits",
    "token_input",
    "with_kv_cache",
]

#: The inputs of the (static) cache interface besides the token ids (the graph's first input), by name.
CACHE_INPUTS = ("position_ids", "attention_mask", "offset", "cache_k", "cache_v")
#: The inputs of the growing cache interface besides the token ids; its outputs are the logits, ``present_k`` and
#: ``present_v``.
GROW_INPUTS = ("position_ids", "attention_mask", "past_k", "past_v")

# The cached variant of each plain model, kept while the plain model lives and derived again when its layers or
# tensors change (_derive.tree_key). Keyed weakly: it never keeps a model alive. Derivation holds the lock, so two
# threads asking at once get one variant.
_TWINS: weakref.WeakKeyDictionary[Any, dict[str, tuple[tuple[Any, ...], GraphModule]]] = weakref.WeakKeyDictionary()
_DERIVING = threading.Lock()


@dataclass(frozen=True)
class CacheLayout:
    """The key/value cache of a model with the cache interface: ``cache_k`` and ``cache_v`` (static) or
    ``past_k`` and ``past_v`` (growing) are each ``[layers, B, kv_heads, length, head_dim]`` of ``dtype``."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype: torch.dtype

    def shape(self, batch: int, max_length: int) -> tuple[int, int, int, int, int]:
        return (self.layers, batch, self.kv_heads, max_length, self.head_dim)

    def nbytes(self, batch: int, max_length: int) -> int:
        """Bytes of keys and values together for ``batch`` rows of ``max_length`` slots."""
        layers, b, heads, m, d = self.shape(batch, max_length)
        return 2 * layers * b * heads * m * d * torch.empty((), dtype=self.dtype).element_size()


def cache_kind(model: GraphModule) -> str | None:
    """``"static"`` for a model with the static cache interface, ``"grow"`` for the growing one (its three
    outputs: logits, ``present_k``, ``present_v``), ``None`` for neither."""
    return _graph_kind(model.graph)


def _graph_kind(graph: Any) -> str | None:
    names = list(graph.inputs)
    for kind, wanted in (("static", CACHE_INPUTS), ("grow", GROW_INPUTS)):
        if len(names) == 1 + len(wanted) and set(names[1:]) == set(wanted):
            if kind == "grow" and len(graph.outputs) != 3:
                return None
            return kind
    return None


def has_cache_interface(model: GraphModule) -> bool:
    return cache_kind(model) is not None


def token_input(model: GraphModule) -> str:
    """The name of the token ids input: the graph's first."""
    return next(iter(model.graph.inputs))


def cache_layout(model: GraphModule) -> CacheLayout:
    """The cache of ``model`` (built with the cache interface): one layer per attention node with ``cache``.

    Raises:
        HndlError: E_INPUT for a model without the cache interface.
    """
    from ..torch.layers import Attention

    require_cache_interface(model)
    grows = cache_kind(model) == "grow"
    layers = [m for m in model.modules() if isinstance(m, Attention) and (m.past if grows else m.cache)]
    floating = next((t.dtype for t in model.parameters() if t.is_floating_point()), torch.get_default_dtype())
    declared = model.graph.inputs["past_k" if grows else "cache_k"].contract.shape.entries
    if not layers and len(declared) == 5 and all(isinstance(declared[i], int) for i in (0, 2, 4)):
        # sdpa nodes with a cache (an imported decoder's variant): the layers, heads and width are the cache
        # input's, as with_kv_cache declared them.
        return CacheLayout(int(declared[0]), int(declared[2]), int(declared[4]), floating)
    if not layers:
        flag, inputs = ("past", "past_k and past_v") if grows else ("cache", "cache_k and cache_v")
        raise HndlError(
            Problem(
                "E_INPUT",
                f"model '{model.graph.name}' has the cache inputs and no attention node with {flag}: true",
                expected=f"attention nodes with {flag}: true reading {inputs}",
                actual="none",
            )
        )
    return CacheLayout(len(layers), layers[0].kv_heads, layers[0].head_dim, floating)


def require_cache_interface(model: GraphModule) -> None:
    if not has_cache_interface(model):
        raise HndlError(
            Problem(
                "E_INPUT",
                f"model '{model.graph.name}' has no key/value cache interface",
                expected="inputs: token ids, then "
                + ", ".join(CACHE_INPUTS)
                + " (static), or "
                + ", ".join(GROW_INPUTS)
                + " (growing)",
                actual="inputs: " + ", ".join(model.graph.inputs),
                hint="pass the plain decoder to hndl.generate, which derives its cached variant "
                "(hndl.generation.with_kv_cache)",
            )
        )


def _embedding_fed_by(model: GraphModule, name: str) -> int | None:
    """``num_embeddings`` of the embedding node reading graph input ``name`` (the vocabulary, the positions)."""
    for node in model.graph.nodes.values():
        if node.op == "embedding" and node.inputs == [name]:
            layer: Any = model.layer(node.name)
            return int(layer.num_embeddings)
    return None


def model_limits(model: GraphModule) -> tuple[int | None, int | None]:
    """The vocabulary size and the number of positions (``None`` where the model sets none: rotary)."""
    return _embedding_fed_by(model, token_input(model)), _embedding_fed_by(model, "position_ids")


def require_graph_module(model: Any) -> Any:
    """``model`` if it is a built hndl model (a :class:`~hndl.torch.GraphModule`, or one compiled by
    ``torch.compile``); the GraphModule below a compiled one is its ``_orig_mod``.

    Raises:
        HndlError: E_INPUT for anything else.
    """
    from ..torch import GraphModule

    if isinstance(model, GraphModule) or isinstance(getattr(model, "_orig_mod", None), GraphModule):
        return model
    hint = "hndl.build(hndl.zoo.get('gpt2')), or hndl.zoo.from_pretrained(folder)"
    base = getattr(model, "get_base_model", None)
    if callable(base) and isinstance(getattr(model, "base_model", None), torch.nn.Module):
        # A PeftModel wraps the model its LoRA layers were put into (in place): that model generates with them.
        # Not unwrapped here: a prompt-learning adapter lives in the wrapper, and its model alone would ignore it.
        hint = (
            "pass the model PEFT put the adapters into: hndl.generate(peft_model.get_base_model(), ...) "
            "(LoRA and the other tuner layers run there)"
        )
    raise HndlError(
        Problem(
            "E_INPUT",
            f"model is {excerpt(model) if model is None else type(model).__name__}, not a built hndl model",
            expected="a GraphModule (hndl.build(...)), or one compiled with torch.compile",
            actual=type(model).__name__,
            hint=hint,
        )
    )


def with_kv_cache(model: Any, kind: str = "static") -> Any:
    """The decoder ``model`` with a key/value cache interface of ``kind`` (``"static"``: written in place, or
    ``"grow"``: returned by each call; SPEC 17.5), for any decoder whose attention nodes are causal
    self-attention.

    On a :class:`~hndl.Graph`, the graph with that interface: every node name, parameter and state_dict key kept,
    so the plain model's weights load into it unchanged (``hndl.zoo.get(name, kv_cache=kind)`` is this on the
    zoo's plain entry). On a built model (a GraphModule, or one compiled), ``model`` itself if it has a cache
    interface; otherwise the built variant holding the same weight tensors (no copy: a weight changed in place
    is seen by both), in eval mode. A layer that is not what the build made (``model.replace_layer``, a hook,
    another class) is carried into the variant, as a copy in eval mode holding the layer's own tensors and hooks.
    The variant is remembered (one per kind) while ``model`` lives and derived again when its layers or tensors
    change.

    Raises:
        HndlError: E_INPUT naming the node for a graph the variant cannot map soundly (an attention that is not
            causal self-attention, a mask that is not the padding mask, a node that reads the sequence other than
            through attention, an input the interface has no place for), for something that is neither a Graph
            nor a built model, or a replaced layer that cannot be carried (an attention layer, a node the variant
            lacks); E_PARAM for an unknown ``kind``.
    """
    from .._graph import Graph
    from ._derive import derive, tree_key
    from ._transform import transform

    if not isinstance(kind, str) or kind not in KINDS:
        raise HndlError(
            Problem(
                "E_PARAM",
                f"kv_cache={excerpt(kind)} is no kind of key/value cache",
                expected="'static' (preallocated, written in place) or 'grow' (concatenated each step)",
                actual=excerpt(kind),
                hint=suggestion(kind, KINDS) if isinstance(kind, str) else None,
            )
        )
    if isinstance(model, Graph):
        if _graph_kind(model) is not None:
            return model
        return transform(model, kind)
    require_graph_module(model)
    if has_cache_interface(model):
        return model
    plain: Any = getattr(model, "_orig_mod", model)  # a compiled plain model: derived from what it compiled
    key = tree_key(plain)
    known = _TWINS.get(plain, {}).get(kind)
    if known is not None and known[0] == key:
        return known[1]
    with _DERIVING:
        known = _TWINS.get(plain, {}).get(kind)
        if known is not None and known[0] == key:
            return known[1]
        twin = derive(plain, kind)
        _TWINS.setdefault(plain, {})[kind] = (key, twin)
    return twin
