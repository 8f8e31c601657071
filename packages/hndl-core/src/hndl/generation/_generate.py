"""``hndl.generate``: the decoding loop over a model with a key/value cache (static, written in place, or
growing, returned by each call), after checking the arguments once (each refusal an ``E_INPUT`` that says what
was expected)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._errors import HndlError, Problem
from ._interface import cache_kind, cache_layout, model_limits, with_kv_cache
from ._sampling import next_tokens

if TYPE_CHECKING:
    from ..torch import GraphModule

__all__ = ["generate"]


def _refuse(message: str, expected: str, actual: Any, hint: str | None = None) -> HndlError:
    return HndlError(Problem("E_INPUT", message, expected=expected, actual=str(actual), hint=hint))


def _check_ids(input_ids: Any, vocab: int | None) -> None:
    if not isinstance(input_ids, Tensor):
        raise _refuse("input_ids is not a tensor", "a LongTensor [B, T]", type(input_ids).__name__)
    if input_ids.dtype != torch.int64:
        raise _refuse(
            f"input_ids has dtype {input_ids.dtype}",
            "torch.int64 token ids",
            input_ids.dtype,
            hint="pass input_ids.long()" if not input_ids.is_floating_point() else "token ids are integers",
        )
    if input_ids.dim() != 2 or input_ids.shape[1] == 0:
        raise _refuse(
            f"input_ids has shape {list(input_ids.shape)}",
            "[B, T] with T >= 1",
            list(input_ids.shape),
            hint="one prompt is input_ids[None]" if input_ids.dim() == 1 else None,
        )
    if vocab is not None and input_ids.numel():
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= vocab:
            raise _refuse(
                f"input_ids holds the id {high if high >= vocab else low}, outside the vocabulary",
                f"ids in 0 .. {vocab - 1} (vocab_size {vocab})",
                high if high >= vocab else low,
            )


def _check_mask(attention_mask: Any, input_ids: Tensor) -> Tensor:
    if attention_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    if not isinstance(attention_mask, Tensor) or attention_mask.shape != input_ids.shape:
        shape = list(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        raise _refuse("attention_mask does not match input_ids", f"a tensor {list(input_ids.shape)}", shape)
    mask = attention_mask.to(device=input_ids.device) != 0
    if not bool(mask.any(dim=1).all()):
        raise _refuse("a row of attention_mask has no real token", "at least one true per row", "a row of zeros")
    if not bool(mask[:, -1].all()):
        # A right-padded row would continue from a pad token: every new token would follow the padding.
        row = int((~mask[:, -1]).nonzero()[0, 0])
        raise _refuse(
            f"row {row} of attention_mask ends in padding",
            "prompts padded on the left (the last column all real tokens)",
            f"row {row}: {mask[row].long().tolist()}" if mask.shape[1] <= 16 else f"row {row}",
            hint="pad on the left (transformers' tokenizer: padding_side='left')",
        )
    return mask


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not temperature > 0:
        raise _refuse(f"temperature is {temperature}", "a number > 0", temperature, hint="greedy: do_sample=False")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise _refuse(f"top_k is {top_k!r}", "an int >= 1, or None", top_k)
    if top_p is not None and not 0 < top_p <= 1:
        raise _refuse(f"top_p is {top_p!r}", "a number in (0, 1], or None", top_p)


def _new_token_count(max_new_tokens: Any, max_length: int | None, prompt: int, positions: int | None) -> int:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise _refuse(f"max_new_tokens is {max_new_tokens!r}", "an int >= 0", max_new_tokens)
    new = max_new_tokens
    if max_length is not None:
        if max_length < prompt:
            raise _refuse(
                f"max_length {max_length} is shorter than the prompt ({prompt} tokens)",
                f"max_length >= {prompt}",
                max_length,
            )
        new = min(new, max_length - prompt)
    if positions is not None and prompt > positions:
        raise _refuse(
            f"the prompt has {prompt} tokens and the model has {positions} positions",
            f"at most {positions} tokens",
            prompt,
            hint="shorten the prompt (input_ids[:, -n:])",
        )
    if positions is not None and prompt + new > positions:
        raise _refuse(
            f"{prompt} prompt tokens and {new} new ones need {prompt + new} positions, and the model has {positions}",
            f"prompt + new tokens <= {positions}",
            prompt + new,
            hint=f"max_new_tokens={positions - prompt} at most, or pass max_length={positions}",
        )
    return new


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
    call after the first takes the model's fast path (one full validation per dtype and device). The model runs
    in eval mode (no dropout) and is put back in its mode afterwards; no gradient is recorded.

    Args:
        model: a built decoder with a cache interface, static (``hndl.build(hndl.zoo.get("gpt2",
            kv_cache=True))``: a cache of prompt plus new tokens, written in place) or growing
            (``kv_cache="grow"``: each call returns the past and new keys and values, the next call's past), or a
            built plain zoo decoder (gpt2, llama, mistral), whose cached variant is made with its weights
            (:func:`hndl.generation.with_kv_cache`).
        input_ids: ``[B, T]`` int64 prompts; prompts of different lengths are left-padded (pad on the left,
            ``attention_mask`` false there).
        max_new_tokens: how many tokens to add at most.
        do_sample: sample from the distribution (after ``temperature``, ``top_k``, ``top_p``, in that order);
            false: the most likely token (greedy).
        temperature: divides the logits before sampling.
        top_k: sample among the ``top_k`` most likely tokens.
        top_p: sample among the most likely tokens whose probability reaches ``top_p`` (nucleus sampling).
        eos_token_id: a row that produces it is finished; later positions of that row get ``pad_token_id``.
            Generation stops when every row has finished.
        pad_token_id: the filler after a row's end; ``None``: ``eos_token_id``.
        attention_mask: ``[B, T]``, true (or 1) at real tokens, false (0) at the left padding.
        generator: the random source of sampling (reproducible with a seeded generator).
        seed: a seed for a fresh generator on the model's device, when no ``generator`` is given.
        max_length: a bound on prompt plus new tokens.
        kv_cache: for a plain zoo decoder, the variant to make: ``"static"`` or ``"grow"`` (a model with a cache
            interface is run as it is).

    Returns:
        ``[B, T + n]`` int64: the prompts and the ``n <= max_new_tokens`` new tokens.

    Raises:
        HndlError: E_INPUT for ids that are not int64 ``[B, T]`` or lie outside the vocabulary, a prompt (or
            prompt and new tokens) longer than the model's positions, an attention mask that does not match,
            bad sampling settings, or a model with neither the cache interface nor a zoo decoder's variant.
    """
    cached = with_kv_cache(model, kv_cache)
    grows = cache_kind(cached) == "grow"
    vocab, positions = model_limits(cached)
    _check_ids(input_ids, vocab)
    padding = _check_mask(attention_mask, input_ids)
    _check_sampling(temperature, top_k, top_p)
    batch, prompt = input_ids.shape
    new = _new_token_count(max_new_tokens, max_length, prompt, positions)
    if new == 0:
        return input_ids.clone()
    device = input_ids.device
    if generator is None and seed is not None:
        generator = torch.Generator(device=device).manual_seed(seed)

    layout = cache_layout(cached)
    total = prompt + new
    if grows:
        # A growing cache starts empty (S = 0) and comes back from each call one step longer.
        cache_k = torch.zeros(layout.shape(batch, 0), dtype=layout.dtype, device=device)
    else:
        cache_k = torch.zeros(layout.shape(batch, total), dtype=layout.dtype, device=device)
    cache_v = torch.zeros_like(cache_k)
    slots = torch.ones(batch, total, dtype=torch.bool, device=device)
    slots[:, :prompt] = padding
    # transformers' positions for left padding: counted over real tokens, 1 at the padding.
    position_ids = (padding.long().cumsum(-1) - 1).masked_fill(~padding, 1)
    unfinished = torch.ones(batch, dtype=torch.bool, device=device)
    out = [input_ids]
    step_ids, step_positions, offset = input_ids, position_ids, 0
    # The interface's inputs go by name: a graph may declare them in any order after the token ids.
    order = [name for name in cached.graph.inputs][1:]
    training = cached.training
    cached.eval()
    try:
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
                if eos_token_id is not None:
                    pad = eos_token_id if pad_token_id is None else pad_token_id
                    token = torch.where(unfinished, token, torch.full_like(token, pad))
                    unfinished = unfinished & (token != eos_token_id)
                out.append(token[:, None])
                offset += step_ids.shape[1]
                step_ids, step_positions = token[:, None], step_positions[:, -1:] + 1
                if eos_token_id is not None and not bool(unfinished.any()):
                    break
    finally:
        cached.train(training)
    return torch.cat(out, dim=1)
