"""The zoo's weight loading, written with the public loader (:mod:`hndl.weights`).

An entry's key map (``Entry.rules``, in ``_entries.py``) is a tuple of :class:`hndl.weights.Rule`: the same
objects a user passes to :func:`hndl.load_state_dict`. Loading a reference's ``state_dict`` is that load with
the entry's rules, strict, with messages that name the entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..weights import Rule, Target, rule

if TYPE_CHECKING:
    from ..torch import GraphModule
    from ..weights import LoadReport

__all__ = ["Rule", "Target", "load_reference_state_dict", "rule"]


def load_reference_state_dict(
    model: GraphModule, rules: Sequence[Rule], reference: Mapping[str, Any] | Any, entry: str
) -> LoadReport:
    """Load ``reference`` into ``model`` through ``rules``: all of it, or nothing (one E_PARAMS listing all)."""
    from ..weights._load import load_state_dict

    return load_state_dict(
        model, reference, rules, strict=True, into=f"zoo:{entry}", title=f"reference weights for zoo:{entry}"
    )
