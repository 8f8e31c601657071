"""Transformers-style folders (``config.json`` + weights) as zoo models: one row per ``model_type``.

A row says which zoo entry reproduces a transformers architecture, which of the entry's parameters come from
which ``config.json`` field, the values the entry assumes for fields it has no parameter for (a config with
another value would build a different model, so it is refused rather than loaded into the wrong one), and the
key rules (by default the entry's own, which accept the hub's key layout). Adding an architecture is adding a row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import HndlError, Problem, echo
from ..naming import printable, suggestion
from ._entries import _BERT_PRESETS, _LLAMA_7B

if TYPE_CHECKING:
    from .._graph import Graph
    from ..torch import GraphModule

__all__ = ["PRETRAINED", "HeadTie", "Pretrained", "Requirement", "build_loaded", "pretrained_row", "read_config"]

#: A config.json holds a few hundred settings (a few KB; a classifier's label names, tens of KB); a larger file is
#: not one.
MAX_CONFIG_BYTES = 4 * 1024 * 1024


class _Wrong(ValueError):
    """A config field of the wrong type or shape, found while reading an entry parameter from it."""

    def __init__(self, key: str, expected: str, value: Any) -> None:
        super().__init__(key)
        self.key, self.expected, self.actual = key, expected, value


@dataclass(frozen=True)
class Requirement:
    """A config field the entry has no parameter for, and the values it reproduces.

    Attributes:
        key: the ``config.json`` field.
        allowed: the values the entry reproduces (compared with ``==``); empty when ``same_as`` says instead.
        same_as: another field this one must equal (GPT-2's three dropout rates, which the entry keeps as one).
        unless: an entry parameter whose override settles the question (``dropout=0.1``), or None.
        why: what a different value would change, for the message.
    """

    key: str
    allowed: tuple[Any, ...] = ()
    same_as: str | None = None
    unless: str | None = None
    why: str = ""

    def reason(self, config: Mapping[str, Any], defaults: Mapping[str, Any]) -> tuple[str, str] | None:
        """``(expected, actual)`` when ``config`` breaks the requirement, else None."""
        value = config.get(self.key, defaults.get(self.key))
        if self.same_as is not None:
            other = config.get(self.same_as, defaults.get(self.same_as))
            return None if value == other else (f"{echo(other)} (as {self.same_as})", echo(value))
        if any(value == v and type(value) is type(v) for v in self.allowed):
            return None
        return " or ".join(repr(v) for v in self.allowed), echo(value)


@dataclass(frozen=True)
class HeadTie:
    """A head that shares the token embedding's weight when a config field says so.

    Attributes:
        key: the ``config.json`` field (``tie_word_embeddings``).
        node: the head's node (``lm_head``).
        params: the node's ``tie`` (``{"weight": "embed_tokens.weight"}``).
    """

    key: str
    node: str
    params: Mapping[str, str]

    def apply(self, graph: Graph) -> None:
        """Tie the head of ``graph`` (the entry's graph, as :func:`hndl.zoo.get` makes it), in place."""
        graph.nodes[self.node].tie = dict(self.params)

    def applied(self, graph: Graph) -> bool:
        """Whether the head of ``graph`` is tied as :meth:`apply` ties it."""
        node = graph.nodes.get(self.node)
        return node is not None and node.tie == dict(self.params)


@dataclass(frozen=True)
class Pretrained:
    """One transformers architecture the zoo reproduces.

    Attributes:
        model_type: ``config.json``'s ``model_type`` (``"gpt2"``).
        entry: the zoo entry built for it.
        params: entry parameter -> the config field it is read from (or a function of the whole config).
        defaults: config field -> its value when ``config.json`` leaves it out (the config class's default;
            ``save_pretrained`` omits fields equal to transformers' base defaults).
        requires: what the entry assumes of the fields it has no parameter for.
        rules: the key rules; None: the entry's own (``hndl.zoo.entry(name).rules``).
        architecture: transformers' class of the model (``config.json``'s ``architectures``).
        tie: the config field that ties the head to the token embedding where the entry's spec has no parameter
            for it (zoo:mistral's ``tie_word_embeddings``; zoo:llama's spec has one), or None.
    """

    model_type: str
    entry: str
    params: Mapping[str, str | Callable[[Mapping[str, Any]], Any]]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    requires: tuple[Requirement, ...] = ()
    rules: tuple[Any, ...] | None = None
    architecture: str = ""
    tie: HeadTie | None = None

    def tied(self, config: Mapping[str, Any], where: str) -> bool:
        """Whether ``config`` ties the head (False for an entry without :attr:`tie`).

        Raises:
            HndlError: E_PARAM when the field is not a boolean.
        """
        if self.tie is None:
            return False
        value = config.get(self.tie.key, self.defaults.get(self.tie.key, False))
        if not isinstance(value, bool):
            raise HndlError(
                Problem(
                    "E_PARAM",
                    f"config.json's {self.tie.key!r} is {_type_name(value)}, not a boolean",
                    expected="true or false",
                    actual=echo(value),
                    location=where,
                )
            )
        return value

    def configuration(self, config: Mapping[str, Any], overrides: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The entry's parameters for ``config``, ``overrides`` applied.

        Raises:
            HndlError: E_PARAM for each field the entry cannot reproduce or that is missing without a default.
        """
        merged = {**self.defaults, **config}
        problems: list[Problem] = []
        values: dict[str, Any] = {}
        for name, source in self.params.items():
            if name in overrides:
                continue
            if callable(source):
                try:
                    values[name] = source(merged)
                except _Wrong as wrong:
                    if any(p.message.startswith(f"config.json's {wrong.key!r} is ") for p in problems):
                        continue  # (rope_parameters gives two parameters: named once)
                    problems.append(
                        Problem(
                            "E_PARAM",
                            f"config.json's {wrong.key!r} is {_type_name(wrong.actual)}, not {wrong.expected}",
                            expected=wrong.expected,
                            actual=echo(wrong.actual),
                            location=where,
                        )
                    )
            elif source in merged:
                values[name] = merged[source]
            else:
                problems.append(
                    Problem(
                        "E_PARAM",
                        f"config.json has no {source!r}, which gives zoo:{self.entry}'s {name!r}",
                        expected=source,
                        actual="missing",
                        location=where,
                        hint=suggestion(source, config),
                    )
                )
        for req in self.requires:
            if req.unless is not None and req.unless in overrides:
                continue
            broken = req.reason(config, self.defaults)
            if broken is not None:
                problems.append(
                    Problem(
                        "E_PARAM",
                        f"config.json's {req.key!r} is {broken[1]}; zoo:{self.entry} reproduces {broken[0]}"
                        + (f" ({req.why})" if req.why else ""),
                        expected=broken[0],
                        actual=broken[1],
                        location=where,
                        hint=f"pass {req.unless}=... to choose one" if req.unless else None,
                    )
                )
        if problems:
            raise HndlError(problems, title=f"{where} for zoo:{self.entry}")
        values.update(overrides)
        return values


def read_config(folder: Path) -> tuple[dict[str, Any], str]:
    """``folder/config.json`` as a dict, and its path for messages.

    Only a regular file of at most :data:`MAX_CONFIG_BYTES` is read, nesting at most
    :data:`~hndl.weights._sources.MAX_JSON_DEPTH` levels (a FIFO, ``/dev/zero`` or a huge file is refused
    unread).

    Raises:
        HndlError: E_SPEC when the folder or the file cannot be read, or the file is not a JSON object with a
            string ``model_type``.
    """
    from ..weights._sources import Unreadable, read_json

    path = folder / "config.json"
    where = str(path)

    def error(message: str, hint: str | None = None) -> HndlError:
        return HndlError(Problem("E_SPEC", f"'{printable(where)}' {message}", location=where, hint=hint))

    if not folder.is_dir():
        raise HndlError(
            Problem(
                "E_SPEC",
                f"'{printable(str(folder))}' is not a folder",
                expected="a folder with config.json and the weights (what save_pretrained writes)",
                actual=str(folder),
                location=str(folder),
            )
        )
    try:
        config = read_json(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        raise error("does not exist", hint="a transformers folder holds config.json beside its weights") from None
    except Unreadable as exc:
        raise error(f"{exc}: not a model configuration") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        got = echo(config.get("model_type")) if isinstance(config, dict) else type(config).__name__
        raise error(f"has no model_type (got {got})", hint="config.json names its architecture in 'model_type'")
    return config, where


def _gpt2() -> Pretrained:
    same = "GPT-2's tanh-approximated GELU"
    return Pretrained(
        "gpt2",
        "gpt2",
        params={
            "vocab_size": "vocab_size",
            "n_positions": "n_positions",
            "n_embd": "n_embd",
            "n_layer": "n_layer",
            "n_head": "n_head",
            "dropout": "resid_pdrop",
        },
        # GPT2Config's defaults, for configs that leave a field out.
        defaults={
            "vocab_size": 50257,
            "n_positions": 1024,
            "n_embd": 768,
            "n_layer": 12,
            "n_head": 12,
            "n_inner": None,
            "activation_function": "gelu_new",
            "resid_pdrop": 0.1,
            "embd_pdrop": 0.1,
            "attn_pdrop": 0.1,
            "layer_norm_epsilon": 1e-5,
            "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False,
            "add_cross_attention": False,
            "tie_word_embeddings": True,
        },
        requires=(
            Requirement("n_inner", (None,), why="the MLP is 4*n_embd wide"),
            Requirement("activation_function", ("gelu_new", "gelu_pytorch_tanh"), why=same),
            Requirement("layer_norm_epsilon", (1e-5,), why="layernorm's eps"),
            Requirement("scale_attn_weights", (True,), why="attention scaled by 1/sqrt(head size)"),
            Requirement("scale_attn_by_inverse_layer_idx", (False,), why="no per-layer scaling"),
            Requirement("add_cross_attention", (False,), why="no cross-attention"),
            Requirement("tie_word_embeddings", (True,), why="the head shares the token embedding"),
            Requirement("embd_pdrop", same_as="resid_pdrop", unless="dropout", why="one dropout rate"),
            Requirement("attn_pdrop", same_as="resid_pdrop", unless="dropout", why="one dropout rate"),
        ),
        architecture="GPT2LMHeadModel",
    )


def _object(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``config[key]`` when it is a JSON object, ``{}`` when it is absent or null; :class:`_Wrong` otherwise."""
    value = config.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Wrong(key, "an object of settings or null", value)
    return value


def _rope_theta(config: Mapping[str, Any]) -> Any:
    """The rotary base: ``rope_theta`` (transformers 4), or inside ``rope_parameters`` (transformers 5)."""
    if "rope_theta" in config:
        return config["rope_theta"]
    return _object(config, "rope_parameters").get("rope_theta", 10000.0)


def _rope_scaling(config: Mapping[str, Any]) -> Any:
    """The rotary frequency scaling as zoo:llama takes it (``rope_type`` and its settings), None for none:
    ``rope_scaling`` (transformers 4) or ``rope_parameters`` without its base (transformers 5)."""
    if config.get("rope_scaling") is not None:
        return dict(_object(config, "rope_scaling"))
    scaling = {k: v for k, v in _object(config, "rope_parameters").items() if k != "rope_theta"}
    return None if scaling.get("rope_type", "default") == "default" else scaling


def _type_name(value: Any) -> str:
    """A JSON value's kind, as a message names it: ``a number``, ``a list``."""
    kinds = ((bool, "a boolean"), ((int, float), "a number"), (str, "a string"), (list, "a list"), (dict, "an object"))
    return next((name for kind, name in kinds if isinstance(value, kind)), type(value).__name__)


def _boolean(key: str) -> Callable[[Mapping[str, Any]], bool]:
    """The reader of boolean field ``key`` (the config class's default in the merged config); :class:`_Wrong`
    for anything else (a string "true" is no boolean: JSON has its own)."""

    def read(config: Mapping[str, Any]) -> bool:
        value = config.get(key)
        if not isinstance(value, bool):
            raise _Wrong(key, "a boolean", value)
        return value

    return read


def _kv_heads(config: Mapping[str, Any]) -> Any:
    # LlamaConfig's num_key_value_heads None means one key/value head per query head.
    heads = config.get("num_key_value_heads")
    return config.get("num_attention_heads") if heads is None else heads


def _decoder(model_type: str, defaults: Mapping[str, Any], *extra: str) -> Pretrained:
    """LLaMA and Mistral (``*ForCausalLM``): the config's names are zoo:llama's and zoo:mistral's."""
    names = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    params: dict[str, str | Callable[[Mapping[str, Any]], Any]] = {n: n for n in names}
    params |= {"num_key_value_heads": _kv_heads, "head_dim": lambda c: c.get("head_dim"), "rope_theta": _rope_theta}
    params |= {n: n for n in ("rms_norm_eps", "attention_dropout", *extra)}
    if model_type == "llama":
        params["rope_scaling"] = _rope_scaling
        # zoo:llama has the parameter (its spec ties the head when it is true); zoo:mistral is tied below.
        params["tie_word_embeddings"] = _boolean("tie_word_embeddings")
    requires: tuple[Requirement, ...] = (Requirement("hidden_act", ("silu",), why="the SwiGLU MLP's SiLU"),)
    if model_type == "llama":
        requires += (Requirement("pretraining_tp", (1,), why="one slice per projection"),)
    else:
        requires += (Requirement("rope_scaling", (None,), why="zoo:mistral has no frequency scaling"),)
    # tie_word_embeddings: the head is the token embedding, the files hold it once.
    tie = (
        None if model_type == "llama" else HeadTie("tie_word_embeddings", "lm_head", {"weight": "embed_tokens.weight"})
    )
    architecture = f"{model_type.capitalize()}ForCausalLM"
    return Pretrained(model_type, model_type, params, defaults, requires, architecture=architecture, tie=tie)


# LlamaConfig's and MistralConfig's defaults share the 7B presets' sizes.
_DECODER_DEFAULTS = {
    **_LLAMA_7B,
    "rms_norm_eps": 1e-6,
    "attention_dropout": 0.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
}


def _llama() -> Pretrained:
    defaults = {**_DECODER_DEFAULTS, "intermediate_size": 11008, "attention_bias": False, "mlp_bias": False}
    return _decoder("llama", {**defaults, "pretraining_tp": 1}, "attention_bias", "mlp_bias")


def _mistral() -> Pretrained:
    defaults = {**_DECODER_DEFAULTS, "intermediate_size": 14336, "num_key_value_heads": 8, "sliding_window": 4096}
    return _decoder("mistral", defaults, "sliding_window")


def _bert() -> Pretrained:
    names = (
        *("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"),
        *("max_position_embeddings", "type_vocab_size", "pad_token_id", "layer_norm_eps", "hidden_dropout_prob"),
        "attention_probs_dropout_prob",
    )
    return Pretrained(
        "bert",
        "bert",
        params={n: n for n in names},
        # BertConfig's defaults: the bert-base preset, and the rest.
        defaults={
            **_BERT_PRESETS["bert-base"],
            "type_vocab_size": 2,
            "pad_token_id": 0,
            "layer_norm_eps": 1e-12,
            "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1,
            "hidden_act": "gelu",
            "position_embedding_type": "absolute",
            "is_decoder": False,
            "add_cross_attention": False,
        },
        requires=(
            Requirement("hidden_act", ("gelu",), why="the feed-forward's exact GELU"),
            Requirement("position_embedding_type", ("absolute",), why="learned absolute positions"),
            Requirement("is_decoder", (False,), why="an encoder: no causal mask"),
            Requirement("add_cross_attention", (False,), why="no cross-attention"),
        ),
        architecture="BertModel",
    )


#: The architectures :func:`hndl.zoo.from_pretrained` reads, by ``model_type``.
PRETRAINED: dict[str, Pretrained] = {row.model_type: row for row in (_gpt2(), _llama(), _mistral(), _bert())}


def pretrained_row(folder: Path) -> tuple[Pretrained, dict[str, Any], str]:
    """The row of the folder's ``config.json`` (by its ``model_type``), the config and where it was read.

    Raises:
        HndlError: E_SPEC for a config that cannot be read or a ``model_type`` the zoo does not reproduce.
    """
    config, where = read_config(folder)
    model_type = config["model_type"]
    row = PRETRAINED.get(model_type)
    if row is None:
        raise HndlError(
            Problem(
                "E_SPEC",
                f"the zoo reproduces no model_type {echo(model_type)}",
                expected="one of " + ", ".join(PRETRAINED),
                actual=echo(model_type),
                location=where,
                hint=suggestion(model_type, PRETRAINED) if len(model_type) <= 100 else None,
            )
        )
    return row, config, where


def build_loaded(graph: Graph, folder: Path, rules: Any, entry: str) -> GraphModule:
    """``graph`` built and loaded from the weights in ``folder``: the weights found first and checked against a
    meta-device build (no memory for the model, nothing initialised), then the model built and loaded."""
    import torch

    from ..torch import build_module
    from ..weights._load import check_state_dict, load_state_dict
    from ..weights._sources import open_checkpoint

    into, title = f"zoo:{entry}", f"reference weights for zoo:{entry}"
    # A folder of the wrong weights, or of none, is refused before the model takes memory (a 7B model: 28 GB):
    # the weights are found first, then checked against a build on the meta device.
    checkpoint = open_checkpoint(folder)
    with checkpoint:
        with torch.device("meta"):
            skeleton = build_module(graph)
        check_state_dict(skeleton, checkpoint, rules, into=into, title=title)
    del skeleton
    model = build_module(graph)
    load_state_dict(model, folder, rules, strict=True, into=into, title=title)
    return model.eval()
