"""The transformer entries (llama, mistral, bert, whisper_encoder, t5_encoder) against transformers, built from the
same configuration with random weights (nothing is downloaded): parameter counts at the defaults and at every
preset (on the meta device), eval outputs against transformers' eager attention and its SDPA attention, gradients,
and a padded batch against the unpadded rows. transformers does not import beside the default sessions' torch, so
these run in `nox -s reference` (torch 2.14.1, transformers 5) and skip elsewhere.

Closeness: hndl runs ``scaled_dot_product_attention`` as transformers' "sdpa" implementation does, with the same
masks, so against it the outputs are ``torch.equal`` for all five (a padded batch too, at its real positions),
and so are the gradients; transformers' "eager" implementation computes the softmax by hand, so against it they
agree to ``1e-6`` of the output's largest magnitude (measured: 1.4e-7 to 3.1e-7).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from parity import llama_reference, mistral_reference, parameter_count, require  # noqa: E402

import hndl  # noqa: E402
import hndl.zoo  # noqa: E402

#: Largest output difference against transformers' eager attention, relative to the output's largest magnitude.
EAGER_RELATIVE = 1e-6


@dataclass(frozen=True)
class Case:
    """How one entry meets its transformers reference: the reference model for a spec configuration, inputs
    (with their padding mask, if the model takes one), and the reference's outputs in hndl's order."""

    name: str
    reference: Callable[[Any, dict[str, Any], str], Any]  # (transformers, spec params, attn) -> model
    inputs: Callable[[int, int, torch.Generator], dict[str, torch.Tensor]]  # (batch, length, gen) -> inputs
    outputs: Callable[[Any, dict[str, torch.Tensor]], tuple[torch.Tensor, ...]]  # (reference, inputs)
    dropouts: tuple[str, ...]  # the spec parameters to zero for the gradient check
    masked: bool = True  # takes a padding mask


def _decoder_inputs(vocab: int) -> Callable[[int, int, torch.Generator], dict[str, torch.Tensor]]:
    def make(batch: int, length: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        return {
            "input_ids": torch.randint(0, vocab, (batch, length), generator=gen),
            "attention_mask": torch.ones(batch, length, dtype=torch.bool),
        }

    return make


def _decoder_outputs(reference: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (reference(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"].long()).logits,)


def _bert(tf: Any, p: dict[str, Any], attn: str) -> Any:
    config = tf.BertConfig(
        vocab_size=p["vocab_size"],
        hidden_size=p["hidden_size"],
        num_hidden_layers=p["num_hidden_layers"],
        num_attention_heads=p["num_attention_heads"],
        intermediate_size=p["intermediate_size"],
        max_position_embeddings=p["max_position_embeddings"],
        type_vocab_size=p["type_vocab_size"],
        pad_token_id=p["pad_token_id"],
        layer_norm_eps=p["layer_norm_eps"],
        hidden_dropout_prob=p["hidden_dropout_prob"],
        attention_probs_dropout_prob=p["attention_probs_dropout_prob"],
        attn_implementation=attn,
    )
    return tf.BertModel(config, add_pooling_layer=True)


def _bert_inputs(batch: int, length: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    return {
        "input_ids": torch.randint(1, 256, (batch, length), generator=gen),
        "attention_mask": torch.ones(batch, length, dtype=torch.bool),
        "token_type_ids": torch.randint(0, 2, (batch, length), generator=gen),
    }


def _bert_outputs(reference: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    out = reference(
        input_ids=inputs["input_ids"],
        attention_mask=inputs["attention_mask"].long(),
        token_type_ids=inputs["token_type_ids"],
    )
    return out.last_hidden_state, out.pooler_output


def _whisper(tf: Any, p: dict[str, Any], attn: str) -> Any:
    config = tf.WhisperConfig(
        num_mel_bins=p["num_mel_bins"],
        d_model=p["d_model"],
        encoder_layers=p["encoder_layers"],
        encoder_attention_heads=p["encoder_attention_heads"],
        encoder_ffn_dim=p["encoder_ffn_dim"],
        decoder_layers=1,
        decoder_attention_heads=p["encoder_attention_heads"],
        decoder_ffn_dim=p["encoder_ffn_dim"],
        max_source_positions=p["max_source_positions"],
        dropout=p["dropout"],
        attention_dropout=p["attention_dropout"],
        activation_dropout=p["activation_dropout"],
        attn_implementation=attn,
    )
    return tf.WhisperModel(config).encoder


def _whisper_inputs(mel: int, positions: int) -> Callable[[int, int, torch.Generator], dict[str, torch.Tensor]]:
    def make(batch: int, length: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        return {"input_features": torch.randn(batch, mel, 2 * positions, generator=gen)}

    return make


def _whisper_outputs(reference: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return (reference(inputs["input_features"]).last_hidden_state,)


def _t5(tf: Any, p: dict[str, Any], attn: str) -> Any:
    config = tf.T5Config(
        vocab_size=p["vocab_size"],
        d_model=p["d_model"],
        d_kv=p["d_kv"],
        d_ff=p["d_ff"],
        num_layers=p["num_layers"],
        num_heads=p["num_heads"],
        relative_attention_num_buckets=p["relative_attention_num_buckets"],
        relative_attention_max_distance=p["relative_attention_max_distance"],
        layer_norm_epsilon=p["layer_norm_epsilon"],
        dropout_rate=p["dropout_rate"],
        feed_forward_proj="relu",
        attn_implementation=attn,
    )
    return tf.T5EncoderModel(config)


def _t5_outputs(reference: Any, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    out = reference(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"].long())
    return (out.last_hidden_state,)


CASES = {
    "llama": Case("llama", llama_reference, _decoder_inputs(256), _decoder_outputs, ("attention_dropout",)),
    "mistral": Case("mistral", mistral_reference, _decoder_inputs(256), _decoder_outputs, ("attention_dropout",)),
    "bert": Case("bert", _bert, _bert_inputs, _bert_outputs, ("hidden_dropout_prob", "attention_probs_dropout_prob")),
    "whisper_encoder": Case(
        "whisper_encoder",
        _whisper,
        _whisper_inputs(16, 24),
        _whisper_outputs,
        ("dropout", "attention_dropout", "activation_dropout"),
        masked=False,
    ),
    "t5_encoder": Case("t5_encoder", _t5, _decoder_inputs(256), _t5_outputs, ("dropout_rate",)),
}
NAMES = list(CASES)


def _pair(case: Case, attn: str, **overrides: Any) -> tuple[hndl.GraphModule, Any]:
    """The entry built and the reference made from the same configuration, its weights loaded into the entry."""
    tf = require("transformers")
    params = dict(hndl.zoo.get(case.name, **overrides).params)
    torch.manual_seed(0)
    reference = case.reference(tf, params, attn)
    model = hndl.build(hndl.zoo.get(case.name, **overrides))
    hndl.zoo.load_reference_state_dict(model, case.name, reference.state_dict())
    return model, reference


def _ours(model: hndl.GraphModule, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    out = model(**inputs)
    return out if isinstance(out, tuple) else (out,)


def _padded(inputs: dict[str, torch.Tensor], lengths: list[int]) -> dict[str, torch.Tensor]:
    """``inputs`` with each row's positions past its length marked as padding (right padding)."""
    out = dict(inputs)
    mask = torch.arange(inputs["attention_mask"].shape[1])[None, :] < torch.tensor(lengths)[:, None]
    out["attention_mask"] = mask
    return out


@pytest.mark.parametrize("name", NAMES)
def test_counts_equal_transformers_at_the_defaults_and_at_every_preset(name: str) -> None:
    tf = require("transformers")
    case = CASES[name]
    model, reference = _pair(case, "sdpa")
    assert parameter_count(model) == parameter_count(reference) == hndl.zoo.entry(name).parameters
    for preset, count in hndl.zoo.entry(name).preset_parameters.items():
        params = dict(hndl.zoo.get(name, preset=preset).params)
        with torch.device("meta"):
            ours = hndl.build(hndl.zoo.get(name, preset=preset))
            theirs = case.reference(tf, params, "sdpa")
        assert parameter_count(ours) == parameter_count(theirs) == count, preset


@pytest.mark.parametrize("name", NAMES)
def test_eval_outputs_equal_transformers_eager_and_sdpa_attention(name: str) -> None:
    case = CASES[name]
    inputs = case.inputs(3, 9, torch.Generator().manual_seed(1))
    for attn in ("sdpa", "eager"):
        model, reference = _pair(case, attn)
        model.eval()
        reference.eval()
        with torch.no_grad():
            ours, theirs = _ours(model, inputs), case.outputs(reference, inputs)
        for a, b in zip(ours, theirs, strict=True):
            assert a.shape == b.shape
            if attn == "sdpa":
                assert torch.equal(a, b), (a - b).abs().max()  # the same ops, masks and kernel
            else:
                assert (a - b).abs().max() <= EAGER_RELATIVE * b.abs().max(), (a - b).abs().max()


@pytest.mark.parametrize("name", NAMES)
def test_gradients_equal_transformers(name: str) -> None:
    case = CASES[name]
    zero = dict.fromkeys(case.dropouts, 0.0)
    model, reference = _pair(case, "sdpa", **zero)
    model.train()
    reference.train()
    inputs = case.inputs(2, 7, torch.Generator().manual_seed(3))
    if case.masked:
        inputs = _padded(inputs, [7, 5])
    ours, theirs = _ours(model, inputs), case.outputs(reference, inputs)
    gen = torch.Generator().manual_seed(4)
    loss_ours = sum((a * torch.randn(a.shape, generator=gen)).sum() for a in ours)
    gen = torch.Generator().manual_seed(4)
    loss_theirs = sum((b * torch.randn(b.shape, generator=gen)).sum() for b in theirs)
    loss_ours.backward()  # type: ignore[union-attr]
    loss_theirs.backward()  # type: ignore[union-attr]
    own = dict(model.named_parameters())
    grads = {k: p.grad for k, p in reference.named_parameters() if p.grad is not None}
    # strict: every gradient transformers computes has a place in the model (whisper's frozen position table has
    # none there, and is not in ``grads``), and the conversion is what load_reference_state_dict applies.
    expected = hndl.weights.convert_state_dict(model, grads, hndl.zoo.entry(name).rules, strict=False)
    assert expected
    for key, grad in expected.items():
        # the same kernels forward, so the same backward: bit for bit
        assert torch.equal(own[key].grad, grad), (key, (own[key].grad - grad).abs().max())


@pytest.mark.parametrize("name", [n for n in NAMES if CASES[n].masked])
def test_a_padded_batch_equals_its_unpadded_rows_and_transformers(name: str) -> None:
    case = CASES[name]
    model, reference = _pair(case, "sdpa")
    model.eval()
    reference.eval()
    lengths = [9, 6, 2]
    inputs = _padded(case.inputs(3, 9, torch.Generator().manual_seed(5)), lengths)
    with torch.no_grad():
        ours = _ours(model, inputs)
        theirs = case.outputs(reference, inputs)
        for b, n in enumerate(lengths):
            row = {k: v[b : b + 1, :n] for k, v in inputs.items()}
            alone = _ours(model, row)
            # the sequence outputs at the real positions; a pooled output (BERT's first token) whole
            for padded_out, alone_out in zip(ours, alone, strict=True):
                mine = padded_out[b, :n] if padded_out.dim() == 3 else padded_out[b]
                torch.testing.assert_close(mine, alone_out[0], atol=1e-5, rtol=0)
        for a, b in zip(ours, theirs, strict=True):
            real = inputs["attention_mask"] if a.dim() == 3 else torch.ones(a.shape[0], dtype=torch.bool)
            assert torch.equal(a[real], b[real]), (a[real] - b[real]).abs().max()


def test_llama3_frequency_scaling_and_partial_head_dim_match_transformers() -> None:
    case = CASES["llama"]
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    model, reference = _pair(case, "sdpa", rope_scaling=scaling, head_dim=32, rope_theta=500000.0)
    inputs = case.inputs(2, 40, torch.Generator().manual_seed(6))
    model.eval()
    reference.eval()
    with torch.no_grad():
        assert torch.equal(_ours(model, inputs)[0], case.outputs(reference, inputs)[0])


def test_mistral_window_shorter_than_the_sequence_changes_the_output() -> None:
    # The default window (4) is shorter than the test sequences, so the window is what the parity above checks;
    # without it the outputs differ.
    case = CASES["mistral"]
    inputs = case.inputs(1, 9, torch.Generator().manual_seed(7))
    windowed, _ = _pair(case, "sdpa")
    full, _ = _pair(case, "sdpa", sliding_window=None)
    with torch.no_grad():
        assert not torch.allclose(_ours(windowed.eval(), inputs)[0], _ours(full.eval(), inputs)[0])


# --- transformers folders (hndl.zoo.from_pretrained) ------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "mistral", "bert"])
def test_a_folder_written_by_save_pretrained_loads_through_from_pretrained(name: str, tmp_path: Any) -> None:
    tf = require("transformers")
    case = CASES[name]
    params = dict(hndl.zoo.get(name).params)
    torch.manual_seed(0)
    reference = case.reference(tf, params, "sdpa").eval()
    reference.save_pretrained(tmp_path)
    model = hndl.zoo.from_pretrained(tmp_path)
    inputs = case.inputs(2, 9, torch.Generator().manual_seed(8))
    with torch.no_grad():
        for a, b in zip(_ours(model, inputs), case.outputs(reference, inputs), strict=True):
            assert torch.equal(a, b), (a - b).abs().max()


def test_llama3_frequency_scaling_comes_from_rope_parameters(tmp_path: Any) -> None:
    tf = require("transformers")
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16,
    }
    params = dict(hndl.zoo.get("llama", rope_scaling=scaling, rope_theta=500000.0).params)
    torch.manual_seed(0)
    reference = llama_reference(tf, params, "sdpa").eval()
    reference.save_pretrained(tmp_path)
    model = hndl.zoo.from_pretrained(tmp_path)
    inputs = CASES["llama"].inputs(1, 40, torch.Generator().manual_seed(9))
    with torch.no_grad():
        assert torch.equal(_ours(model, inputs)[0], CASES["llama"].outputs(reference, inputs)[0])


def test_a_bert_config_with_another_activation_is_refused(tmp_path: Any) -> None:
    tf = require("transformers")
    params = dict(hndl.zoo.get("bert").params)
    reference = _bert(tf, params, "sdpa")
    reference.config.hidden_act = "relu"
    reference.save_pretrained(tmp_path)
    with pytest.raises(hndl.HndlError) as info:
        hndl.zoo.from_pretrained(tmp_path)
    problem = info.value.problems[0]
    assert problem.code == "E_PARAM"
    assert "'hidden_act' is 'relu'" in problem.message
