"""What :func:`hndl.generate` needs to know about a model: whether it has the cache interface, the cache's
layout (layers, key/value heads, head dim, dtype, device), the vocabulary and the positions it has; and the
cached variant of a plain zoo decoder, built with the plain model's weights."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .._errors import HndlError, Problem

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

# The cached variant of each plain model generate() was given, kept while the plain model lives and rebuilt
# when its weights are other tensors (`.to()`, a new load with assign). Keyed weakly: it never keeps a model alive.
_TWINS: weakref.WeakKeyDictionary[Any, dict[str, tuple[tuple[Any, ...], GraphModule]]] = weakref.WeakKeyDictionary()


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
    names = list(model.graph.inputs)
    for kind, wanted in (("static", CACHE_INPUTS), ("grow", GROW_INPUTS)):
        if len(names) == 1 + len(wanted) and set(names[1:]) == set(wanted):
            if kind == "grow" and len(model.graph.outputs) != 3:
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
    floating = next((t.dtype for t in model.parameters() if t.is_floating_point()), torch.get_default_dtype())
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
                hint="build the zoo's variant: hndl.build(hndl.zoo.get(name, kv_cache=True)); or pass a built zoo "
                "decoder (gpt2, llama, mistral) to hndl.generate, which makes that variant with its weights",
            )
        )


def _embedding_fed_by(model: GraphModule, name: str) -> int | None:
    """``num_embeddings`` of the embedding node reading graph input ``name`` (the vocabulary, the positions)."""
    for node in model.graph.nodes.values():
        if node.op == "embedding" and node.inputs == [name]:
            layer: Any = model.nodes[f"n_{node.name}"]
            return int(layer.num_embeddings)
    return None


def model_limits(model: GraphModule) -> tuple[int | None, int | None]:
    """The vocabulary size and the number of positions (``None`` where the model sets none: rotary)."""
    return _embedding_fed_by(model, token_input(model)), _embedding_fed_by(model, "position_ids")


def _fingerprint(model: GraphModule) -> tuple[Any, ...]:
    return tuple((name, t.data_ptr(), t.dtype, t.device) for name, t in model.state_dict(keep_vars=True).items())


def with_kv_cache(model: GraphModule, kind: str = "static") -> GraphModule:
    """``model`` itself if it has a cache interface; for a built plain zoo decoder (gpt2, llama, mistral), its
    variant with a key/value cache (``hndl.zoo.get(name, kv_cache=kind)`` with the model's configuration:
    ``"static"`` or ``"grow"``), holding the same weight tensors (no copy: a weight changed in place is seen by
    both).

    The variant is remembered (one per kind) while ``model`` lives and rebuilt when its weights become other
    tensors.

    Raises:
        HndlError: E_INPUT for a model that has neither the interface nor a zoo decoder's variant.
    """
    from .. import zoo
    from ..torch._meta import build_on_meta

    if has_cache_interface(model):
        return model
    name = model.graph.name
    if name not in zoo.KV_CACHE_ENTRIES or list(model.graph.inputs) != list(zoo.get(name).inputs):
        require_cache_interface(model)
    if kind not in zoo.KV_CACHE_KINDS:
        zoo.kv_cache_spec_text(name, kind)  # E_PARAM naming the kinds
    fingerprint = (_fingerprint(model), kind)
    known = _TWINS.get(model, {}).get(kind)
    if known is not None and known[0] == fingerprint:
        return known[1]
    graph = zoo.get(name, kv_cache=kind, **model.graph.params)
    twin = build_on_meta(graph)
    floating = next((t.dtype for t in model.parameters() if t.is_floating_point()), None)
    if floating is not None:
        # A converted model (.double(), .half()): converted the same way on the meta device, so the variant's
        # build records the dtype the assigned weights have.
        twin.to(dtype=floating)
    # The weights are the plain model's tensors, assigned (not copied); a non-persistent buffer (rotary's
    # inv_freq) has no state_dict key and is taken from the plain model under the same name.
    twin.load_state_dict(model.state_dict(), assign=True, strict=True)
    for full_name, buffer in list(twin.named_buffers()):
        if buffer.is_meta:
            owner, _, leaf = full_name.rpartition(".")
            twin.get_submodule(owner).register_buffer(leaf, model.get_buffer(full_name), persistent=False)
    twin.train(model.training)
    _TWINS.setdefault(model, {})[kind] = (fingerprint, twin)
    return twin
