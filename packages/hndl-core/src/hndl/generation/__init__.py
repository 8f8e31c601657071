"""Generating text with a decoder: :func:`generate` and the key/value caches it drives.

A decoder with the static *cache interface* (SPEC §17: inputs ``position_ids``, ``attention_mask`` over the
cache's slots, ``offset``, ``cache_k``, ``cache_v`` beside its token ids) runs one decoding step per call, its
attention nodes writing the new keys and values into the caller's cache in place; with the growing interface
(inputs ``position_ids``, ``attention_mask``, ``past_k``, ``past_v``; outputs the logits, ``present_k``,
``present_v``) its attention nodes (``past: true``) return the past and new keys and values concatenated.
:func:`with_kv_cache` derives either from any decoder whose attention is causal self-attention: from a Graph,
the Graph (``hndl.zoo.get(name, kv_cache=...)`` is this on the zoo's decoders); from a built model, the built
variant sharing its weights. :func:`cache_kind` says which interface a model has.
"""

from ._generate import generate as generate
from ._interface import CacheLayout as CacheLayout
from ._interface import cache_kind as cache_kind
from ._interface import cache_layout as cache_layout
from ._interface import with_kv_cache as with_kv_cache

__all__ = ["CacheLayout", "cache_kind", "cache_layout", "generate", "with_kv_cache"]
