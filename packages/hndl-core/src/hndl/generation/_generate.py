"""``hndl.generate``: the decoding loop over a model with a key/value cache (static, written in place, or
growing, returned by each call), after checking the arguments once (each refusal an ``E_INPUT`` that says what
was expected: ``_arguments.py``).

Nothing a call uses is switched and put back: the model runs in eval mode because what runs *is* in eval mode
(a plain model's cached variant always is; a model in train mode runs as a private eval copy holding its
tensors), so calls from several threads on one model never see each other's mode (SPEC 17.4)."""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from ..naming import excerpt
from ._arguments import (
    check_flags,
    check_ids,
    check_mask,
    check_sampling,
    check_special_ids,
    new_token_count,
    refuse,
)
from ._derive import eval_copy, tree_key
from ._interface import KINDS, cache_kind, cache_layout, model_limits, require_graph_module, with_kv_cache
from ._sampling import next_tokens

if TYPE_CHECKING:
    from ..torch import GraphModule

__all__ = ["generate"]

# The eval copy of each cache-interface model generate() was given in train mode: kept while the model lives,
# made again when its layers or tensors change. Keyed weakly: it never keeps a model alive.
_EVAL_COPIES: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()
_COPYING = threading.Lock()


def _in_eval(cached: Any) -> Any:
    """What runs the decoding steps: ``cached`` when every module of it is in eval mode, else its eval copy
    (:func:`._derive.eval_copy`: the same tensors and hooks, its own modes). Modes are only read here, never
    set: another thread may be running the same model."""
    # A compiled model's wrapper has a mode of its own, which torch 2.4 leaves True while the model it wraps is in
    # eval mode: what runs is the wrapped model's layers.
    compiled = getattr(cached, "_orig_mod", None)
    if not any(module.training for module in (cached if compiled is None else compiled).modules()):
        return cached
    if compiled is not None:
        raise refuse(
            "the compiled model is in train mode (dropout on)",
            "a model in eval mode",
            "train mode",
            hint="call .eval() on the model (before or after torch.compile)",
        )
    key = tree_key(cached)
    known = _EVAL_COPIES.get(cached)
    if known is not None and known[0] == key:
        return known[1]
    with _COPYING:
        known = _EVAL_COPIES.get(cached)
        if known is None or known[0] != key:
            known = (key, eval_copy(cached))
            _EVAL_COPIES[cached] = known
    return known[1]


def _allocate(shape: tuple[int, ...], dtype: torch.dtype, batch: int, total: int, device: torch.device) -> Any:
    """The keys' and values' caches and the slots' mask, or an E_INPUT before any model call when they do not fit."""
    try:
        cache_k = torch.zeros(shape, dtype=dtype, device=device)
        return cache_k, torch.zeros_like(cache_k), torch.ones(batch, total, dtype=torch.bool, device=device)
    except (RuntimeError, MemoryError, OverflowError, ValueError) as exc:
        raise refuse(
            f"the key/value cache {list(shape)} ({dtype}) and the mask of {total} slots could not be allocated: "
            f"{type(exc).__name__}: {excerpt(str(exc))}",
            "a cache that fits in memory",
            list(shape),
            hint="fewer rows or fewer new tokens (max_new_tokens)",
        ) from exc


def generate(
    model: GraphModule,
    input_ids: Tensor,
    max_new_tokens: int,
    *,
    do_sample: bool = False,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    pad_token_id: int | None = None,
    attention_mask: Tensor | None = None,
    generator: torch.Generator | None = None,
    seed: int | None = None,
    max_length: int | None = None,
    kv_cache: str = "static",
) -> Tensor:
    """Continue each prompt of ``input_ids`` by up to ``max_new_tokens`` tokens, with a key/value cache.

    The prompts run in one call (the prefill), then one call per new token, each attending to the cache; every
    call after the first takes the model's fast path (one full validation per dtype and device). What runs is in
    eval mode (no dropout) and no gradient is recorded; the model's own mode is never switched, so calls from
    several threads on one model are independent: a plain model's cached variant is always in eval mode, and a
    model with the cache interface left in train mode runs as an eval copy holding its tensors.

    Args:
        model: a built decoder with a cache interface, static (``hndl.build(hndl.zoo.get("gpt2",
            kv_cache=True))``: a cache of prompt plus new tokens, written in place) or growing
            (``kv_cache="grow"``: each call returns the past and new keys and values, the next call's past), or a
            built plain decoder (a zoo entry, a hand-written spec, an imported model) whose cached variant is
            derived from its graph, weights and replaced layers (:func:`hndl.generation.with_kv_cache`), or that
            model compiled.
        input_ids: ``[B, T]`` int64 prompts; prompts of different lengths are left-padded (pad on the left,
            ``attention_mask`` false there).
        max_new_tokens: how many tokens to add at most.
        do_sample: sample from the distribution (after ``temperature``, ``top_k``, ``top_p``, in that order);
            false: the most likely token (greedy).
        temperature: divides the logits before sampling.
        top_k: sample among the ``top_k`` most likely tokens.
        top_p: sample among the most likely tokens whose probability reaches ``top_p`` (nucleus sampling).
        eos_token_id: an id, or a list of ids: a row that produces one is finished; later positions of that
            row get ``pad_token_id``. Generation stops when every row has finished.
        pad_token_id: the filler after a row's end; ``None``: the (first) ``eos_token_id``.
        attention_mask: ``[B, T]``, true (or 1) at real tokens, false (0) at the left padding.
        generator: the random source of sampling (reproducible with a seeded generator).
        seed: a seed for a fresh generator on the model's device, when no ``generator`` is given.
        max_length: a bound on prompt plus new tokens.
        kv_cache: for a plain decoder, the variant to make: ``"static"`` or ``"grow"`` (a model with a cache
            interface is run as it is).

    Returns:
        ``[B, T + n]`` int64: the prompts and the ``n <= max_new_tokens`` new tokens.

    Raises:
        HndlError: E_INPUT, before the first model call, for something that is not a built model, ids that are
            not int64 ``[B, T]`` (``B, T >= 1``) on the model's device or lie outside the vocabulary, end or pad
            ids outside it, a prompt (or prompt and new tokens) longer than the model's positions, an attention
            mask that does not match, an argument of the wrong type or range (``max_length``, ``do_sample``,
            sampling settings, ``generator``, ``seed``, ``kv_cache``), a cache that cannot be allocated, a
            compiled model in train mode, or a model whose variant cannot be derived (naming the node the
            transform cannot map and why, or the replaced layer it cannot carry).
    """
    require_graph_module(model)
    check_flags(do_sample, generator, seed)
    if not isinstance(kv_cache, str) or kv_cache not in KINDS:
        raise refuse(f"kv_cache is {excerpt(kv_cache)}", " or ".join(map(repr, KINDS)), kv_cache)
    check_sampling(temperature, top_k, top_p)
    cached = _in_eval(with_kv_cache(model, kv_cache))
    grows = cache_kind(cached) == "grow"
    vocab, positions = model_limits(cached)
    check_ids(input_ids, vocab, next((t.device for t in cached.parameters()), None))
    eos, pad = check_special_ids(eos_token_id, pad_token_id, vocab)
    padding = check_mask(attention_mask, input_ids)
    batch, prompt = input_ids.shape
    new = new_token_count(max_new_tokens, max_length, prompt, positions)
    if new == 0:
        return input_ids.clone()
    device = input_ids.device
    if generator is None and seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)
    if generator is not None and generator.device.type != device.type:
        raise refuse(
            f"the generator is on {generator.device}, the model on {device}",
            f"a torch.Generator on {device}",
            generator.device,
            hint=f"torch.Generator(device={str(device)!r})",
        )

    layout = cache_layout(cached)
    total = prompt + new
    # A growing cache starts empty (S = 0) and comes back from each call one step longer.
    cache_k, cache_v, slots = _allocate(layout.shape(batch, 0 if grows else total), layout.dtype, batch, total, device)
    slots[:, :prompt] = padding
    # transformers' positions for left padding: counted over real tokens, 1 at the padding.
    position_ids = (padding.long().cumsum(-1) - 1).masked_fill(~padding, 1)
    unfinished = torch.ones(batch, dtype=torch.bool, device=device)
    ends = torch.tensor(eos, device=device) if len(eos) > 1 else None
    out = [input_ids]
    step_ids, step_positions, offset = input_ids, position_ids, 0
    # The interface's inputs go by name: a graph may declare them in any order after the token ids.
    order = [name for name in cached.graph.inputs][1:]
    with torch.no_grad():
        for _ in range(new):
            if grows:
                step = {
                    "position_ids": step_positions,
                    "attention_mask": slots[:, : offset + step_ids.shape[1]],
                    "past_k": cache_k,
                    "past_v": cache_v,
                }
                logits, cache_k, cache_v = cached(step_ids, *(step[name] for name in order))
            else:
                step = {
                    "position_ids": step_positions,
                    "attention_mask": slots,
                    "offset": torch.tensor(offset, device=device),
                    "cache_k": cache_k,
                    "cache_v": cache_v,
                }
                logits = cached(step_ids, *(step[name] for name in order))
            token = next_tokens(
                logits if logits.dim() == 2 else logits[:, -1],  # [B, vocab]: the last token's only
                do_sample=do_sample,
                temperature=temperature,
                top_k=top_k,
                top_p=top_p,
                generator=generator,
            )
            if eos:
                token = torch.where(unfinished, token, torch.full_like(token, pad))
                unfinished = unfinished & (token != eos[0] if ends is None else ~torch.isin(token, ends))
            out.append(token[:, None])
            offset += step_ids.shape[1]
            step_ids, step_positions = token[:, None], step_positions[:, -1:] + 1
            if eos and not bool(unfinished.any()):
                break
    return torch.cat(out, dim=1)
