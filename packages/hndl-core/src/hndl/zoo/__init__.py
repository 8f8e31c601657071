"""The model zoo: well-known architectures as spec files, checked against their reference implementations.

Each entry is a spec file shipped with hndl-core (``hndl/zoo/specs/<name>.yaml``) whose top-level ``params``
are its configuration: :func:`get` returns the spec as a :class:`~hndl.Graph` with any of them overridden, and
``"zoo:<name>"`` works wherever a spec file is accepted (``hndl.load("zoo:resnet18")``, ``hndl summary
zoo:gpt2``). :func:`load_reference_state_dict` loads the reference implementation's ``state_dict`` (torchvision,
timm, transformers, or the hand-written references of the tests) into a built zoo model, all of it or nothing.

Each entry is configurable in the dimensions its reference's constructor exposes, under the reference's names
where it has them (the spec file's header comment says what each one means):

============================ ==================================================================================
entry                        configuration
============================ ==================================================================================
``resnet18``                 ``layers1`` .. ``layers4`` (blocks per stage), ``width``, ``num_classes``
``resnet50``                 ``layers1`` .. ``layers4``, ``width``, ``groups``, ``width_per_group``,
                             ``num_classes``
``vit_b_16``                 ``image_size``, ``patch_size``, ``depth``, ``num_heads``, ``hidden_dim``,
                             ``mlp_dim``, ``dropout``, ``attention_dropout``, ``num_classes``
``vit_tiny_patch16_224``     ``image_size``, ``patch_size``, ``depth``, ``num_heads``, ``hidden_dim``,
                             ``mlp_dim``, ``dropout``, ``num_classes``
``gpt2``                     ``vocab_size``, ``n_positions``, ``n_embd``, ``n_layer``, ``n_head``, ``dropout``
``unet``                     ``num_classes``, ``width``, ``in_channels``
``lstm_classifier``          ``vocab_size``, ``embed_dim``, ``hidden_size``, ``num_layers``, ``num_classes``,
                             ``dropout``
``seq2seq_transformer``      ``src_vocab``, ``tgt_vocab``, ``d_model``, ``nhead``, ``num_encoder_layers``,
                             ``num_decoder_layers``, ``dim_feedforward``, ``dropout``, ``max_len``
============================ ==================================================================================

>>> import hndl
>>> "resnet18" in hndl.zoo.names()
True
>>> hndl.zoo.get("resnet18", num_classes=10).params["num_classes"]
10
>>> hndl.zoo.get("resnet50", layers3=23).params["layers3"]  # ResNet-101's depth
23
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from .._errors import HndlError, Problem
from .._graph import Graph
from ..naming import excerpt, suggestion
from ._entries import ENTRIES, Entry
from ._weights import Rule, Target
from ._weights import load_reference_state_dict as _load_with_rules

if TYPE_CHECKING:
    from ..torch import GraphModule

__all__ = ["Entry", "Rule", "Target", "entry", "get", "load_reference_state_dict", "names", "spec_text"]

#: What names a zoo entry where a spec file is accepted: ``zoo:resnet18``.
PREFIX = "zoo:"


def names() -> list[str]:
    """The zoo's entries, in the order of the table in SPEC §14."""
    return list(ENTRIES)


def entry(name: str) -> Entry:
    """The entry ``name``: its reference implementation, the reference's parameter count and its key map.

    Raises:
        HndlError: E_SPEC for a name that is not an entry (with a did-you-mean).
    """
    found = ENTRIES.get(name) if isinstance(name, str) else None
    if found is None:
        raise HndlError(
            Problem(
                "E_SPEC",
                f"the zoo has no entry {excerpt(name)}",
                expected="one of " + ", ".join(ENTRIES),
                actual=excerpt(name),
                hint=suggestion(name, ENTRIES) if isinstance(name, str) else None,
            )
        )
    return found


def spec_text(name: str) -> str:
    """The spec file of entry ``name``, as text."""
    entry(name)
    return resources.files(__name__).joinpath("specs", f"{name}.yaml").read_text(encoding="utf-8")


def get(name: str, **overrides: Any) -> Graph:
    """Entry ``name`` as a :class:`~hndl.Graph`, with its configuration (its spec's ``params``) overridden.

    Args:
        name: an entry of :func:`names` (``"resnet18"``; a leading ``"zoo:"`` is accepted).
        **overrides: values for the spec's parameters, ``num_classes=10``, ``n_layer=6``, ``image_size=384``
            (the module docstring lists each entry's). Their validity (type,
            range, whether the result is a consistent model) is checked by :func:`hndl.check`/:func:`hndl.build`
            like any spec parameter, at the spec line that uses them.

    Returns:
        A fresh graph: locations read ``zoo:<name>:line:col``; ``graph.params`` holds the configuration.

    Raises:
        HndlError: E_SPEC for an unknown entry, E_PARAM for an override the entry does not have (each with a
            did-you-mean).
    """
    from .._spec_loader import _load_text

    if isinstance(name, str) and name.startswith(PREFIX):
        name = name[len(PREFIX) :]
    graph = _load_text(spec_text(name), PREFIX + name, allow_imports=False)
    unknown = [key for key in overrides if key not in graph.params]
    if unknown:
        declared = ", ".join(graph.params)
        raise HndlError(
            [
                Problem(
                    "E_PARAM",
                    f"zoo:{name} has no parameter {key!r}",
                    expected=f"one of {declared}",
                    actual=key,
                    hint=suggestion(key, graph.params),
                )
                for key in unknown
            ],
            title=f"zoo:{name}",
        )
    graph.params.update(overrides)
    return graph


def load_reference_state_dict(model: GraphModule, name: str, state_dict: Mapping[str, Any]) -> None:
    """Load the reference implementation's ``state_dict`` into ``model``, a build of zoo entry ``name``.

    Keys are renamed and layouts converted by the entry's map (transformers' GPT-2 ``Conv1D`` weights are
    transposed; ``torch.nn.MultiheadAttention``'s fused cross-attention projection is split). Everything is
    checked before anything is copied, so a mismatch leaves the model as it was.

    Args:
        model: ``hndl.build(hndl.zoo.get(name, ...))``, built with the reference's configuration.
        name: the entry (``"resnet50"`` or ``"zoo:resnet50"``).
        state_dict: the reference model's ``state_dict()`` (e.g. ``torchvision.models.resnet50(weights=...)``).

    Raises:
        HndlError: E_PARAMS listing every reference key with no place in the model (with the closest key the
            model expects), every model tensor the dict lacks (with the reference key it should have had) and
            every shape that differs.
    """
    if isinstance(name, str) and name.startswith(PREFIX):
        name = name[len(PREFIX) :]
    _load_with_rules(model, entry(name).rules, state_dict, name)
