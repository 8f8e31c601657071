"""The checks :func:`hndl.generate` makes before its first model call: each argument's type and range, each
refusal an ``E_INPUT`` that says what was expected, so nothing fails half-way through a generation."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
from torch import Tensor

from .._errors import HndlError, Problem
from ..naming import excerpt

__all__ = [
    "check_flags",
    "check_ids",
    "check_mask",
    "check_sampling",
    "check_special_ids",
    "new_token_count",
    "refuse",
]

#: torch.Generator.manual_seed's range.
_SEEDS = (-(2**63), 2**64 - 1)


def refuse(message: str, expected: str, actual: Any, hint: str | None = None) -> HndlError:
    """An E_INPUT; ``actual`` is echoed cut to a bounded length (a text as it is, anything else as its repr)."""
    text = excerpt(actual) if not isinstance(actual, str) else actual if len(actual) <= 200 else actual[:197] + "..."
    return HndlError(Problem("E_INPUT", message, expected=expected, actual=text, hint=hint))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_flags(do_sample: Any, generator: Any, seed: Any) -> None:
    if not isinstance(do_sample, bool):
        raise refuse(f"do_sample is {excerpt(do_sample)}", "True or False", do_sample)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise refuse(
            f"generator is a {type(generator).__name__}", "a torch.Generator, or None", type(generator).__name__
        )
    if seed is not None and (not _is_int(seed) or not _SEEDS[0] <= seed <= _SEEDS[1]):
        raise refuse(f"seed is {excerpt(seed)}", f"an int in {_SEEDS[0]} .. {_SEEDS[1]}, or None", seed)


def check_ids(input_ids: Any, vocab: int | None, device: torch.device | None) -> None:
    if not isinstance(input_ids, Tensor):
        raise refuse("input_ids is not a tensor", "a LongTensor [B, T]", type(input_ids).__name__)
    if input_ids.dtype != torch.int64:
        raise refuse(
            f"input_ids has dtype {input_ids.dtype}",
            "torch.int64 token ids",
            input_ids.dtype,
            hint="pass input_ids.long()" if not input_ids.is_floating_point() else "token ids are integers",
        )
    if input_ids.dim() != 2 or input_ids.shape[1] == 0 or input_ids.shape[0] == 0:
        raise refuse(
            f"input_ids has shape {list(input_ids.shape)}",
            "[B, T] with B >= 1 and T >= 1",
            list(input_ids.shape),
            hint="one prompt is input_ids[None]" if input_ids.dim() == 1 else None,
        )
    if input_ids.layout != torch.strided or input_ids.is_meta or (device is not None and input_ids.device != device):
        raise refuse(
            f"input_ids is a {input_ids.layout} tensor on {input_ids.device}",
            f"a dense tensor on the model's device ({device})",
            f"{input_ids.layout} on {input_ids.device}",
            hint=f"input_ids.to({str(device)!r})" if device is not None and not input_ids.is_meta else None,
        )
    if vocab is not None:
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= vocab:
            raise refuse(
                f"input_ids holds the id {high if high >= vocab else low}, outside the vocabulary",
                f"ids in 0 .. {vocab - 1} (vocab_size {vocab})",
                high if high >= vocab else low,
            )


def check_mask(attention_mask: Any, input_ids: Tensor) -> Tensor:
    if attention_mask is None:
        return torch.ones_like(input_ids, dtype=torch.bool)
    if (
        not isinstance(attention_mask, Tensor)
        or attention_mask.shape != input_ids.shape
        or attention_mask.layout != torch.strided
        or attention_mask.is_meta
    ):
        shape = list(attention_mask.shape) if isinstance(attention_mask, Tensor) else type(attention_mask).__name__
        raise refuse("attention_mask does not match input_ids", f"a tensor {list(input_ids.shape)}", shape)
    mask = attention_mask.to(device=input_ids.device) != 0
    if not bool(mask.any(dim=1).all()):
        raise refuse("a row of attention_mask has no real token", "at least one true per row", "a row of zeros")
    if not bool(mask[:, -1].all()):
        # A right-padded row would continue from a pad token: every new token would follow the padding.
        row = int((~mask[:, -1]).nonzero()[0, 0])
        raise refuse(
            f"row {row} of attention_mask ends in padding",
            "prompts padded on the left (the last column all real tokens)",
            f"row {row}: {mask[row].long().tolist()}" if mask.shape[1] <= 16 else f"row {row}",
            hint="pad on the left (transformers' tokenizer: padding_side='left')",
        )
    return mask


def check_sampling(temperature: Any, top_k: Any, top_p: Any) -> None:
    if not _is_real(temperature) or not 0 < temperature < math.inf:
        raise refuse(
            f"temperature is {excerpt(temperature)}", "a finite number > 0", temperature, hint="greedy: do_sample=False"
        )
    if top_k is not None and (not _is_int(top_k) or top_k < 1):
        raise refuse(f"top_k is {excerpt(top_k)}", "an int >= 1, or None", top_k)
    if top_p is not None and (not _is_real(top_p) or not 0 < top_p <= 1):
        raise refuse(f"top_p is {excerpt(top_p)}", "a number in (0, 1], or None", top_p)


def _token_id(value: Any, vocab: int | None) -> bool:
    return _is_int(value) and 0 <= value < (2**63 if vocab is None else vocab)


def check_special_ids(eos_token_id: Any, pad_token_id: Any, vocab: int | None) -> tuple[tuple[int, ...], int]:
    """The end-of-sequence ids (none, one, or several as transformers takes them: a row ends at any) and the pad
    id (``None``: the first end id; unused without one), each an id of the vocabulary."""
    within = f"0 .. {vocab - 1} (vocab_size {vocab})" if vocab is not None else "0 .. 2**63-1"
    if eos_token_id is None:
        eos: tuple[int, ...] = ()
    elif isinstance(eos_token_id, (list, tuple)):
        eos = tuple(eos_token_id)
        if not eos:
            raise refuse("eos_token_id is an empty list", f"an int in {within}, a list of them, or None", [])
    else:
        eos = (eos_token_id,)
    bad = [e for e in eos if not _token_id(e, vocab)]
    if bad:
        raise refuse(
            f"eos_token_id holds {excerpt(bad[0])}, not a token id of the model",
            f"an int in {within}, a list of them, or None",
            bad[0],
        )
    if pad_token_id is not None and not _token_id(pad_token_id, vocab):
        raise refuse(
            f"pad_token_id is {excerpt(pad_token_id)}, not a token id of the model",
            f"an int in {within}, or None (the first eos_token_id)",
            pad_token_id,
        )
    return eos, (pad_token_id if pad_token_id is not None else eos[0] if eos else 0)


def new_token_count(max_new_tokens: Any, max_length: Any, prompt: int, positions: int | None) -> int:
    if not _is_int(max_new_tokens) or max_new_tokens < 0:
        raise refuse(f"max_new_tokens is {excerpt(max_new_tokens)}", "an int >= 0", max_new_tokens)
    new = max_new_tokens
    if max_length is not None:
        if not _is_int(max_length):
            raise refuse(f"max_length is {excerpt(max_length)}", f"an int >= {prompt}, or None", max_length)
        if max_length < prompt:
            raise refuse(
                f"max_length {max_length} is shorter than the prompt ({prompt} tokens)",
                f"max_length >= {prompt}",
                max_length,
            )
        new = min(new, max_length - prompt)
    if positions is not None and prompt > positions:
        raise refuse(
            f"the prompt has {prompt} tokens and the model has {positions} positions",
            f"at most {positions} tokens",
            prompt,
            hint="shorten the prompt (input_ids[:, -n:])",
        )
    if positions is not None and prompt + new > positions:
        raise refuse(
            f"{prompt} prompt tokens and {new} new ones need {prompt + new} positions, and the model has {positions}",
            f"prompt + new tokens <= {positions}",
            prompt + new,
            hint=f"max_new_tokens={positions - prompt} at most, or pass max_length={positions}",
        )
    return new
