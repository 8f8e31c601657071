"""Stack signatures that passed ``ensemble_call``'s check, remembered per base module without holding a tensor.

A *stack signature* is what the check's verdict depends on: the stacked parameters' and buffers' names, and each
tensor's shape (ensemble size included), dtype and device. Together with the base module's state version (a
registration or a conversion of the base gives it a new one, and may change the names and dtypes a stack needs)
it decides whether a stack is known. A known stack skips the whole check, so a repeated ``ensemble_call`` costs
one tuple build and one dict lookup on top of ``vmap(torch.func.functional_call)``.

The record is a :class:`PassedSignatures`, as functional_call's is: keyed weakly by the base, holding strings,
``torch.Size``, dtypes and devices only, never a tensor.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable
from typing import Any

from ._passed import PassedSignatures

__all__ = ["PASSED_STACKS", "stack_signature"]

# Stack signatures that passed, per base and state version.
PASSED_STACKS = PassedSignatures(limit=32)

# shape, dtype and device of a tensor in one C call; AttributeError for a value that is not a tensor.
_META = operator.attrgetter("shape", "dtype", "device")


def stack_signature(params: Any, buffers: Any) -> Hashable | None:
    """The signature of a stack, or None when it has none (not two dicts of tensors): then it is always checked."""
    if type(params) is not dict or type(buffers) is not dict:
        return None
    try:
        return (tuple(params), tuple(map(_META, params.values())), tuple(buffers), tuple(map(_META, buffers.values())))
    except AttributeError:  # a value that is not a tensor: the check reports it
        return None
