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
``llama``                    ``vocab_size``, ``hidden_size``, ``intermediate_size``, ``num_hidden_layers``,
                             ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``rope_theta``,
                             ``rope_scaling``, ``rms_norm_eps``, ``attention_bias``, ``mlp_bias``,
                             ``attention_dropout``, ``tie_word_embeddings`` (the head is the token embedding:
                             Llama 3.2 1B/3B); presets ``llama-2-7b``, ``llama-3-8b``, ``llama-3.1-8b``
``mistral``                  as ``llama`` with ``sliding_window`` (no ``rope_scaling``, no biases); preset
                             ``mistral-7b``
``bert``                     ``vocab_size``, ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
                             ``intermediate_size``, ``max_position_embeddings``, ``type_vocab_size``,
                             ``pad_token_id``, ``layer_norm_eps``, ``hidden_dropout_prob``,
                             ``attention_probs_dropout_prob``; presets ``bert-base``, ``bert-large``
``whisper_encoder``          ``num_mel_bins``, ``d_model``, ``encoder_layers``, ``encoder_attention_heads``,
                             ``encoder_ffn_dim``, ``max_source_positions``, ``dropout``, ``attention_dropout``,
                             ``activation_dropout``; presets ``whisper-tiny``, ``whisper-base``
``t5_encoder``               ``vocab_size``, ``d_model``, ``d_kv``, ``d_ff``, ``num_layers``, ``num_heads``,
                             ``relative_attention_num_buckets``, ``relative_attention_max_distance``,
                             ``layer_norm_epsilon``, ``dropout_rate``; presets ``t5-small``, ``t5-base``
``mobilenet_v3_small``       ``width_mult``, ``num_classes``, ``dropout``
``convnext_tiny``            ``depths1`` .. ``depths4`` (blocks per stage), ``dims1`` .. ``dims4`` (widths),
                             ``layer_scale``, ``stochastic_depth_prob``, ``num_classes``
``efficientnet_b0``          ``width_mult``, ``depth_mult``, ``stochastic_depth_prob``, ``dropout``,
                             ``num_classes``, ``norm_eps``, ``norm_momentum``
``swin_t``                   ``patch_size``, ``embed_dim``, ``depths1`` .. ``depths4``, ``num_heads1`` ..
                             ``num_heads4``, ``window_size``, ``mlp_ratio``, ``dropout``, ``attention_dropout``,
                             ``stochastic_depth_prob``, ``num_classes`` (the image's H and W are symbols)
``densenet121``              ``growth_rate``, ``block_config1`` .. ``block_config4`` (layers per block),
                             ``num_init_features``, ``bn_size``, ``drop_rate``, ``num_classes``
============================ ==================================================================================

The transformer entries default to small configurations that run fast on a CPU; ``preset`` selects a published
one (``hndl.zoo.get("llama", preset="llama-2-7b")``, or ``zoo:llama@llama-2-7b`` wherever a spec file is
accepted).

>>> import hndl
>>> "resnet18" in hndl.zoo.names()
True
>>> hndl.zoo.get("resnet18", num_classes=10).params["num_classes"]
10
>>> hndl.zoo.get("resnet50", layers3=23).params["layers3"]  # ResNet-101's depth
23
"""

from __future__ import annotations

import copy
import os
from importlib import resources
from typing import TYPE_CHECKING, Any

from .._errors import HndlError, Problem
from .._graph import Graph
from .._param_overrides import override_params
from ..naming import excerpt, suggestion
from ._entries import ENTRIES, Entry
from ._weights import Rule, Target
from ._weights import load_reference_state_dict as _load_with_rules

if TYPE_CHECKING:
    from ..torch import GraphModule
    from ..weights import LoadReport

__all__ = [
    "KV_CACHE_ENTRIES",
    "Entry",
    "Rule",
    "Target",
    "entry",
    "from_pretrained",
    "get",
    "KV_CACHE_KINDS",
    "kv_cache_spec_text",
    "load_reference_state_dict",
    "names",
    "presets",
    "save_pretrained",
    "spec_text",
]

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


#: The entries with key/value cache variants (``get(name, kv_cache=True)``, static; ``kv_cache="grow"``): the
#: decoders. Each variant is :func:`hndl.generation.with_kv_cache` of the plain entry.
KV_CACHE_ENTRIES = ("gpt2", "llama", "mistral")


#: The key/value caches ``get(name, kv_cache=...)`` takes: ``"static"`` (``True``), ``"grow"``.
KV_CACHE_KINDS = ("static", "grow")


def _kv_cache_kind(name: str, kind: Any) -> str:
    """``kind`` checked (E_PARAM for another kind), for an entry that has cache variants (E_SPEC otherwise)."""
    entry(name)
    if not isinstance(kind, str) or kind not in KV_CACHE_KINDS:
        raise HndlError(
            Problem(
                "E_PARAM",
                f"kv_cache={excerpt(kind)} is no kind of key/value cache",
                expected="True or 'static' (preallocated, written in place), 'grow' (concatenated each step)",
                actual=excerpt(kind),
                hint=suggestion(kind, KV_CACHE_KINDS) if isinstance(kind, str) else None,
            )
        )
    if name not in KV_CACHE_ENTRIES:
        raise HndlError(
            Problem(
                "E_SPEC",
                f"zoo:{name} has no key/value cache variant",
                expected="one of " + ", ".join(KV_CACHE_ENTRIES),
                actual=name,
                hint="kv_cache=True is for the decoders, which generate text; "
                "hndl.generation.with_kv_cache(graph) makes the variant of any causal decoder",
            )
        )
    return kind


def kv_cache_spec_text(name: str, kind: str = "static") -> str:
    """The spec file of entry ``name``'s variant with a static key/value cache, or with ``kind="grow"`` a growing
    one: :func:`hndl.dumps` of ``get(name, kv_cache=kind)``, what :func:`hndl.generation.with_kv_cache` makes of
    the plain entry.

    Raises:
        HndlError: E_SPEC for an entry without one; E_PARAM for another kind.
    """
    from .._spec_dumper import dumps

    return dumps(get(name, kv_cache=_kv_cache_kind(name, kind)))


def get(name: str, preset: str | None = None, *, kv_cache: bool | str = False, **overrides: Any) -> Graph:
    """Entry ``name`` as a :class:`~hndl.Graph`, with its configuration (its spec's ``params``) overridden.

    Args:
        name: an entry of :func:`names` (``"resnet18"``; a leading ``"zoo:"`` is accepted, and so is a preset
            after ``@``: ``"zoo:llama@llama-2-7b"``, which is how ``hndl summary`` and :func:`hndl.load` name one).
        preset: a published configuration of the entry (``"llama-2-7b"``, ``"bert-base"``; :func:`presets`
            lists them), applied before ``overrides``.
        kv_cache: the entry's variant with a static key/value cache (:data:`KV_CACHE_ENTRIES`): the same
            parameters and state_dict keys, the inputs of one decoding step (new tokens, their positions, a padding
            mask over the cache's slots, the offset, every layer's keys and values). :func:`hndl.generate` builds
            it itself; pass this to run the cache by hand. ``"static"`` is the same; ``"grow"`` the variant
            with a growing cache: the past keys and values in, past and new concatenated out (SPEC 17.2).
        **overrides: values for the spec's parameters, ``num_classes=10``, ``n_layer=6``, ``image_size=384``
            (the module docstring lists each entry's), checked as :func:`hndl.load`'s ``params`` are: each name
            must be one the entry has, each value of its kind (an integer for ``num_classes``). Whether the
            values make a consistent model (a head count that divides the width) is checked by
            :func:`hndl.check`/:func:`hndl.build` like any spec parameter, at the spec line that uses them.

    Returns:
        A fresh graph: locations read ``zoo:<name>:line:col``; ``graph.params`` holds the configuration.

    Raises:
        HndlError: E_SPEC for an unknown entry or preset, E_PARAM for an override the entry does not have (each
            with a did-you-mean) or of another kind than the entry's value.
    """
    from .._spec_loader import _load_text

    if isinstance(name, str) and name.startswith(PREFIX):
        name = name[len(PREFIX) :]
    if isinstance(name, str) and "@" in name and preset is None:
        name, _, preset = name.partition("@")
    if kv_cache is not False and kv_cache is not None:
        from ..generation import with_kv_cache

        kind = _kv_cache_kind(name, "static" if kv_cache is True else kv_cache)
        # The variant's own parameter (the last token's logits only) is set on it; the rest size the plain entry.
        own = {k: overrides.pop(k) for k in list(overrides) if k == "last_logits"}
        variant = with_kv_cache(get(name, preset, **overrides), kind)
        return override_params(variant, own, what=f"{PREFIX}{name}[kv_cache={kind}]")
    graph = _load_text(spec_text(name), PREFIX + name, allow_imports=False)
    if preset is not None:
        graph.params.update(_preset(name, preset))
    return override_params(graph, overrides, what=PREFIX + name)


def presets(name: str) -> dict[str, dict[str, Any]]:
    """The published configurations of entry ``name``: preset name -> the spec parameters it sets."""
    if isinstance(name, str) and name.startswith(PREFIX):
        name = name[len(PREFIX) :]
    return {key: dict(values) for key, values in entry(name).presets.items()}


def _preset(name: str, preset: str) -> dict[str, Any]:
    known = entry(name).presets
    if not isinstance(preset, str) or preset not in known:
        raise HndlError(
            Problem(
                "E_SPEC",
                f"zoo:{name} has no preset {excerpt(preset)}",
                expected=("one of " + ", ".join(known)) if known else "no preset: this entry has none",
                actual=excerpt(preset),
                hint=suggestion(preset, known) if isinstance(preset, str) else None,
            )
        )
    return copy.deepcopy(dict(known[preset]))


def load_reference_state_dict(model: GraphModule, name: str, state_dict: Any) -> LoadReport:
    """Load the reference implementation's weights into ``model``, a build of zoo entry ``name``.

    This is :func:`hndl.load_state_dict` with the entry's key map (``entry(name).rules``): keys are renamed and
    layouts converted (transformers' GPT-2 ``Conv1D`` weights are transposed, and both ``GPT2LMHeadModel``'s
    ``transformer.``-prefixed keys and the hub's unprefixed ``GPT2Model`` keys load;
    ``torch.nn.MultiheadAttention``'s fused cross-attention projection is split). Everything is checked before
    anything is copied, so a mismatch leaves the model as it was.

    Args:
        model: ``hndl.build(hndl.zoo.get(name, ...))``, built with the reference's configuration.
        name: the entry (``"resnet50"`` or ``"zoo:resnet50"``).
        state_dict: the reference model's ``state_dict()`` (e.g. ``torchvision.models.resnet50(weights=...)``),
            or anything :func:`hndl.load_state_dict` reads (a checkpoint file or folder).

    Returns:
        The :class:`hndl.weights.LoadReport`.

    Raises:
        HndlError: E_PARAMS listing every reference key with no place in the model (with the closest key the
            model expects), every model tensor the dict lacks (with the reference key it should have had) and
            every shape that differs.
    """
    if isinstance(name, str) and name.startswith(PREFIX):
        name = name[len(PREFIX) :]
    return _load_with_rules(model, entry(name).rules, state_dict, name)


def from_pretrained(path: str | os.PathLike[str], **overrides: Any) -> GraphModule:
    """A transformers-style folder (``config.json`` and its weights) as the matching zoo model, offline.

    ``config.json``'s ``model_type`` picks the entry (``gpt2``, ``llama``, ``mistral``, ``bert`` -> the zoo entry
    of that name); its fields give the entry's parameters (``n_layer``, ``n_embd``, ... under GPT2Config's names,
    LlamaConfig's, MistralConfig's, BertConfig's); the model is built and the weights
    (``model.safetensors``, ``pytorch_model.bin``, or either sharded with its ``*.index.json``) are loaded with
    the hub key layout accepted, strictly. A LLaMA or Mistral config with ``tie_word_embeddings: true`` (Llama
    3.2 1B/3B) builds the entry with its head tied to the token embedding (the files hold no ``lm_head.weight``):
    for LLaMA, the entry's own parameter (``hndl.zoo.get("llama", tie_word_embeddings=True)`` is the same graph).
    The model is returned in eval mode, as transformers returns it. :func:`save_pretrained` writes it back.

    Args:
        path: the folder, as ``save_pretrained`` writes it (or a downloaded hub snapshot).
        **overrides: entry parameters to set instead of the config's (``dropout=0.0``).

    Returns:
        The built, loaded :class:`~hndl.torch.GraphModule`.

    Raises:
        HndlError: E_SPEC for a folder without a readable ``config.json`` or a ``model_type`` the zoo does not
            reproduce (with a did-you-mean); E_PARAM for a config field the entry cannot reproduce (another
            activation, an untied head, ...) and for an override the entry does not have; E_PARAMS from
            :func:`hndl.load_state_dict` for weights that do not fit.
    """
    from pathlib import Path

    from ._pretrained import build_loaded, pretrained_row

    folder = Path(os.fspath(path))
    row, config, where = pretrained_row(folder)
    graph = get(row.entry, **overrides)  # E_PARAM for an override the entry does not have
    graph.params.update(row.configuration(config, overrides, where))
    if row.tied(config, where):
        row.tie.apply(graph)  # type: ignore[union-attr]  # (tied is False without a tie)
    rules = row.rules if row.rules is not None else entry(row.entry).rules
    return build_loaded(graph, folder, rules, row.entry)


def save_pretrained(
    model: GraphModule,
    folder: str | os.PathLike[str],
    *,
    safe_serialization: bool = True,
    max_shard_size: int | str = "50GB",
) -> None:
    """Write a zoo model as a transformers folder: what :func:`from_pretrained` reads, and transformers'
    ``AutoModel*.from_pretrained`` too (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ``MistralForCausalLM``,
    ``BertModel``), with every weight in place.

    ``config.json`` holds transformers' field names for the entry's parameters (``model.graph.params``: ``n_embd``,
    ``num_key_value_heads``, ...), the values the entry assumes for the fields it has no parameter for
    (``hidden_act``, GPT-2's three dropout rates), ``model_type``, ``architectures``, ``torch_dtype`` and
    ``tie_word_embeddings``. The weights are the entry's key rules (:func:`entry`'s ``rules``, which
    :func:`from_pretrained` loads through) run backward: transformers' keys, GPT-2's ``Conv1D`` weights transposed
    back, a tied tensor written once (the head shares the token embedding: the file holds the embedding only).
    Everything is checked before a file is written: the config is read back through :func:`from_pretrained`'s
    own reading and must give the model's parameters, and the planned keys, shapes and dtypes must load back into
    the model. Files are written under temporary names and renamed into place; weights a previous save left in
    the folder (another split, the other format) are removed, nothing else.

    Args:
        model: a build of zoo entry ``gpt2``, ``llama``, ``mistral`` or ``bert`` (``hndl.build(hndl.zoo.get(...))``
            or :func:`from_pretrained`), its graph unedited: only the entry's parameters changed.
        folder: the folder, made if it does not exist.
        safe_serialization: ``model.safetensors`` (True) or ``pytorch_model.bin`` (False).
        max_shard_size: the largest file, in bytes or as transformers writes it (``"5GB"``, ``"500MB"``,
            ``"2GiB"``); a larger model is split into ``model-00001-of-0000N.safetensors`` files with a
            ``model.safetensors.index.json``, as transformers splits it (a tensor larger than the limit gets a file
            of its own).

    Raises:
        HndlError: E_PARAM for a model that is not a build of one of those entries, whose graph was edited after
            :func:`get` (no transformers config describes it), whose tensors are on the meta device, or for a bad
            argument or a folder that cannot be written; E_SPEC for tied tensors that are not the spec's ties.
    """
    from ._save_pretrained import save_pretrained as save

    save(model, folder, safe_serialization=safe_serialization, max_shard_size=max_shard_size, get=get)
