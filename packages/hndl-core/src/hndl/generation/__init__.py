"""Generating text with a decoder: :func:`generate` and the static key/value cache it drives.

A decoder with the *cache interface* (SPEC §17: inputs ``position_ids``, ``attention_mask`` over the cache's
slots, ``offset``, ``cache_k``, ``cache_v`` beside its token ids) runs one decoding step per call, its attention
nodes writing the new keys and values into the caller's cache in place. ``hndl.zoo.get(name, kv_cache=True)``
gives that variant of zoo:gpt2, zoo:llama and zoo:mistral; :func:`with_kv_cache` makes it from a built plain
model, sharing its weights.
"""

from ._generate import generate as generate
from ._interface import CacheLayout as CacheLayout
from ._interface import cache_layout as cache_layout
from ._interface import with_kv_cache as with_kv_cache

__all__ = ["CacheLayout", "cache_layout", "generate", "with_kv_cache"]
