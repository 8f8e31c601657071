"""Generating text with a decoder: :func:`generate` and the key/value caches it drives.

A decoder with the static *cache interface* (SPEC §17: inputs ``position_ids``, ``attention_mask`` over the
cache's slots, ``offset``, ``cache_k``, ``cache_v`` beside its token ids) runs one decoding step per call, its
attention nodes writing the new keys and values into the caller's cache in place. ``hndl.zoo.get(name,
kv_cache=True)`` gives that variant of zoo:gpt2, zoo:llama and zoo:mistral; ``kv_cache="grow"`` the variant with
the growing interface (inputs ``position_ids``, ``attention_mask``, ``past_k``, ``past_v``; outputs the logits,
``present_k``, ``present_v``), whose attention nodes (``past: true``) return the past and new keys and values
concatenated. :func:`with_kv_cache` makes either from a built plain model, sharing its weights;
:func:`cache_kind` says which interface a model has.
"""

from ._generate import generate as generate
from ._interface import CacheLayout as CacheLayout
from ._interface import cache_kind as cache_kind
from ._interface import cache_layout as cache_layout
from ._interface import with_kv_cache as with_kv_cache

__all__ = ["CacheLayout", "cache_kind", "cache_layout", "generate", "with_kv_cache"]
