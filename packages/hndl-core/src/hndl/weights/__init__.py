"""Weights from any layout: load a checkpoint into a built model, renaming keys and converting layouts on the way.

:func:`load_state_dict` (also :func:`hndl.load_state_dict`) takes a mapping, a ``.safetensors`` / ``.bin`` /
``.pt`` file, a sharded checkpoint's ``*.index.json`` or a folder holding one, and ``rules`` that say how the
checkpoint's keys become the model's. A :class:`Rule` pairs key templates whose ``{fields}`` carry over;
its targets each have a :class:`Layout`: :class:`Same`, :class:`Transpose` (GPT-2's ``Conv1D``), :class:`Rows`
(one part of a fused tensor), :class:`PerHead` (one part of a tensor fused head by head: GPT-NeoX's
``query_key_value``), :class:`Flatten`, :class:`Concat` (several tensors joined into one) and :class:`Chain`
(layouts in turn); a layout of your own is a subclass with ``expected_shape`` and ``convert``.

>>> from hndl.weights import rule
>>> r = rule("h.{i}.attn.c_attn.weight", ("nodes.n_h.{i}.n_attn.qkv.weight", "transpose"))
>>> [(key, str(layout)) for key, layout in r.forward("h.3.attn.c_attn.weight").targets]
[('nodes.n_h.3.n_attn.qkv.weight', 'transpose')]
>>> r.backward("nodes.n_h.3.n_attn.qkv.weight")
('h.3.attn.c_attn.weight',)

Importing this module does not import torch; loading does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._layouts import Chain as Chain
from ._layouts import Concat as Concat
from ._layouts import Flatten as Flatten
from ._layouts import Layout as Layout
from ._layouts import PerHead as PerHead
from ._layouts import Rows as Rows
from ._layouts import Same as Same
from ._layouts import Transpose as Transpose
from ._layouts import as_layout as as_layout
from ._report import Loaded as Loaded
from ._report import LoadReport as LoadReport
from ._rules import Rule as Rule
from ._rules import RuleMatch as RuleMatch
from ._rules import Target as Target
from ._rules import as_rules as as_rules
from ._rules import rule as rule

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

    import torch

    from ..torch import GraphModule

    #: What ``source`` may be.
    Source = Mapping[str, Any] | str | os.PathLike[str]

__all__ = [
    "Chain",
    "Concat",
    "Flatten",
    "Layout",
    "LoadReport",
    "Loaded",
    "PerHead",
    "Rows",
    "Rule",
    "RuleMatch",
    "Same",
    "Target",
    "Transpose",
    "as_layout",
    "as_rules",
    "convert_state_dict",
    "load_state_dict",
    "rule",
]


def load_state_dict(
    model: GraphModule,
    source: Source,
    rules: Sequence[Rule | tuple[Any, Any]] | Mapping[Any, Any] = (),
    strict: bool = True,
) -> LoadReport:
    """Load weights from ``source`` into ``model``, renaming and converting them by ``rules``: all or nothing.

    Each checkpoint key goes through the first rule that matches it (a key no rule matches keeps its name).
    Everything is checked before anything is copied: every model tensor must be filled exactly once, in its
    built shape, from a dtype it can hold unchanged (no float into an integer buffer). Values are copied into
    the model's own tensors, as ``torch.nn.Module.load_state_dict`` copies: the model keeps its dtypes and devices
    (a float16 checkpoint loads into a float32 model as float32; ``model.half()`` first to keep float16). Tied
    names are one tensor, filled once from any of their keys (when the checkpoint holds several, they must be
    equal), and stay tied. A sharded checkpoint is read one tensor at a time from memory-mapped files.

    Args:
        model: a built model (:func:`hndl.build`).
        source: a mapping of names to tensors (a ``state_dict``); a path to a ``.safetensors`` file or a
            ``.bin``/``.pt``/``.pth`` file (read with ``torch.load(weights_only=True)``: no code runs); a sharded
            checkpoint's ``*.index.json``; or a folder holding ``model.safetensors``, ``pytorch_model.bin`` or one
            ``*.index.json`` (transformers' layouts).
        rules: :class:`Rule` objects, ``(source, target)`` pairs or a mapping ``{source: target}``: a source is a
            key template (``"h.{i}.ln_1.{t}"``) or a tuple of them that one target joins; a target is a model key
            template, a ``(template, layout)`` pair, a list of them (one fused tensor split), or None (dropped).
        strict: with False, checkpoint keys with no place in the model and model tensors the checkpoint lacks
            are reported instead of refused (shapes, dtypes and conflicts are still refused, as with torch).

    Returns:
        A :class:`LoadReport`: which checkpoint keys went to which model keys, in which layout, and the dropped,
        missing and unexpected keys. Prints as a readable list.

    Raises:
        HndlError: E_PARAMS, before anything is copied, naming every problem at once: a checkpoint key with no
            place in the model (with the closest expected key), a model tensor nothing fills (with the
            checkpoint key expected), a shape or dtype that does not fit, a key filled twice or read by two
            rules, tied keys with different values, a malformed rule, and a source that is not a checkpoint.
    """
    from ._load import load_state_dict as load

    return load(model, source, rules, strict)


def convert_state_dict(
    model: GraphModule,
    source: Source,
    rules: Sequence[Rule | tuple[Any, Any]] | Mapping[Any, Any] = (),
    strict: bool = True,
) -> dict[str, torch.Tensor]:
    """What :func:`load_state_dict` would copy into ``model``, without copying: ``{model key: tensor}`` for every
    key it would fill (tied names included), in the checkpoint's dtype, as views of the source where the layout
    allows. Checked the same way; useful to compare a reference model's gradients under the model's names.

    Raises:
        HndlError: as :func:`load_state_dict`.
    """
    from ._load import convert_state_dict as convert

    return convert(model, source, rules, strict)
