"""The zoo's decoders declare what they are (``kind: decoder``, issue 38), and what they declare agrees with
transformers: each is a causal language model there, the configuration fields the zoo reads are fields of its
config class, and the rotary dims are the fraction of the head that the config class rotates.

Needs transformers (the reference session).
"""

from __future__ import annotations

import warnings

import pytest

import hndl
import hndl.zoo
from hndl.zoo._pretrained import PRETRAINED

transformers = pytest.importorskip("transformers")
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES  # noqa: E402

DECODERS = ("gpt2", "llama", "mistral")


def _config(model_type: str) -> object:
    return transformers.AutoConfig.for_model(model_type)


def _rotary_fraction(config: object) -> float:
    """The fraction of each head the config rotates: its partial_rotary_factor (or rotary_pct), where a rope
    parameters mapping or the config itself gives one, else the whole head."""
    sources = [getattr(config, "rope_parameters", None) or {}, getattr(config, "rope_scaling", None) or {}]
    for source in sources:
        for name in ("partial_rotary_factor", "rotary_pct"):
            if isinstance(source, dict) and source.get(name) is not None:
                return float(source[name])
    for name in ("partial_rotary_factor", "rotary_pct"):
        if getattr(config, name, None) is not None:
            return float(getattr(config, name))
    return 1.0


@pytest.mark.parametrize("name", DECODERS)
def test_zoo_decoder_declares_kind_decoder_as_transformers_causal_lm(name: str) -> None:
    row = PRETRAINED[name]
    graph = hndl.zoo.get(row.entry)
    assert graph.kind == "decoder"
    assert row.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    with warnings.catch_warnings():
        warnings.simplefilter("error", hndl.HndlWarning)
        assert hndl.check(graph).warnings == []


@pytest.mark.parametrize("name", DECODERS)
def test_zoo_decoder_config_fields_are_fields_of_the_transformers_config_class(name: str) -> None:
    row = PRETRAINED[name]
    config = _config(row.model_type)
    fields = set(config.to_dict()) | {k for k in dir(config) if not k.startswith("_")}
    read = [source for source in row.params.values() if isinstance(source, str)]
    assert read, name
    missing = [field for field in read if field not in fields]
    assert missing == [], f"{name} reads fields {type(config).__name__} does not have: {missing}"
    # Every parameter the zoo fills from a config is a parameter of the spec.
    graph = hndl.zoo.get(row.entry)
    assert set(row.params) <= set(graph.params), sorted(set(row.params) - set(graph.params))


@pytest.mark.parametrize("name", DECODERS)
def test_zoo_decoder_rotary_dims_match_the_transformers_rotary_fraction(name: str) -> None:
    row = PRETRAINED[name]
    fraction = _rotary_fraction(_config(row.model_type))
    graph = hndl.zoo.get(row.entry)
    graph.params["partial_rotary_factor"] = fraction
    with warnings.catch_warnings():
        warnings.simplefilter("error", hndl.HndlWarning)
        assert hndl.check(graph).warnings == []
    # The check bites: the same decoder declared to rotate half of each head is warned about (GPT-2 has no rope).
    graph.params["partial_rotary_factor"] = fraction / 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hndl.HndlWarning)
        codes = {p.code for p in hndl.check(graph).warnings}
    assert codes == (set() if name == "gpt2" else {"W_ROTARY"})
