"""hndl.from_module on transformers' text models at any batch and sequence length (issue 37).

Each model (a small random config, eval mode, float32) is imported once with a symbolic batch ``B`` and sequence
length ``T`` (its attention mask symbolic too, where the model takes one), must import with built-in ops only
(no ``module`` node), and must give ``torch.equal`` outputs at two other ``(B, T)`` than the traced one, with a
left-padded attention mask. docs/import.md's table ("Transformers (text)") says the same per model.

Reference-only: skips unless transformers imports (``nox -s reference``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from parity import require
from torch.export import Dim

import hndl
from hndl.importer import MIN_TORCH

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)

VOCAB = 100
#: The traced (B, T), and the two others the imported graph is checked at (distinct from it and each other).
TRACED = (2, 8)
CHECKED = ((3, 5), (5, 13))


class Masked(torch.nn.Module):
    """``net(input_ids=..., attention_mask=...)`` for a model whose forward takes the mask as a keyword only in
    practice (GPT-2's second positional parameter is ``past_key_values``): ``from_module`` passes positionally."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        return self.net(input_ids=input_ids, attention_mask=attention_mask)


@dataclass(frozen=True)
class Text:
    """One model: how to make it, whether it is causal (padded on the left, as generation pads), the most
    positions it has (``T``'s upper bound, where its position table is learned)."""

    make: Callable[[Any], torch.nn.Module]
    causal: bool = True
    max_t: int | None = None


def _decoder_config(tf: Any, cls: str, **extra: Any) -> Any:
    fields = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128)
    return getattr(tf, cls)(vocab_size=VOCAB, use_cache=False, **fields, **extra)


MODELS: dict[str, Text] = {
    "llama": Text(lambda tf: tf.LlamaModel(_decoder_config(tf, "LlamaConfig", num_key_value_heads=2))),
    "mistral": Text(lambda tf: tf.MistralModel(_decoder_config(tf, "MistralConfig", num_key_value_heads=2))),
    "qwen2": Text(lambda tf: tf.Qwen2Model(_decoder_config(tf, "Qwen2Config", num_key_value_heads=2))),
    "gemma": Text(lambda tf: tf.GemmaModel(_decoder_config(tf, "GemmaConfig", num_key_value_heads=2, head_dim=16))),
    "phi": Text(lambda tf: tf.PhiModel(_decoder_config(tf, "PhiConfig"))),
    "gpt_neox": Text(lambda tf: tf.GPTNeoXModel(_decoder_config(tf, "GPTNeoXConfig"))),
    "gpt2": Text(
        lambda tf: Masked(
            tf.GPT2Model(
                tf.GPT2Config(
                    n_layer=2,
                    n_embd=64,
                    n_head=4,
                    vocab_size=VOCAB,
                    n_positions=64,
                    use_cache=False,
                    bos_token_id=0,
                    eos_token_id=0,
                )
            )
        ),
        max_t=64,
    ),
    "bert": Text(
        lambda tf: tf.BertModel(
            tf.BertConfig(
                num_hidden_layers=2,
                hidden_size=64,
                num_attention_heads=4,
                intermediate_size=128,
                vocab_size=VOCAB,
                max_position_embeddings=64,
            )
        ),
        causal=False,
        max_t=64,
    ),
    "clip_text": Text(
        lambda tf: tf.CLIPTextModel(
            tf.CLIPTextConfig(
                num_hidden_layers=2,
                hidden_size=64,
                num_attention_heads=4,
                intermediate_size=128,
                vocab_size=VOCAB,
                max_position_embeddings=64,
                bos_token_id=0,
                eos_token_id=1,
                pad_token_id=1,
            )
        ),
        max_t=64,
    ),
    "t5_encoder": Text(
        lambda tf: tf.T5EncoderModel(
            tf.T5Config(d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4, vocab_size=VOCAB)
        ),
        causal=False,
    ),
}


def text_model(name: str) -> torch.nn.Module:
    tf = require("transformers")
    torch.manual_seed(0)
    return MODELS[name].make(tf).eval()


def text_inputs(name: str, batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids and an attention mask with padding: a causal model's first row is padded on the left (as
    generation pads), an encoder's on the right; every row keeps at least two tokens."""
    gen = torch.Generator().manual_seed(batch * 100 + length)
    ids = torch.randint(2, VOCAB, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    pad = min(3, length - 2)
    if MODELS[name].causal:
        mask[0, :pad] = 0
    else:
        mask[0, length - pad :] = 0
    return ids, mask


def outputs(value: Any) -> list[torch.Tensor]:
    """The tensors of a model's output, in order (a transformers ``ModelOutput``, a tuple or one tensor)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if hasattr(value, "to_tuple"):
        value = value.to_tuple()
    return [t for t in value if isinstance(t, torch.Tensor)]


def import_text(name: str) -> tuple[torch.nn.Module, hndl.importer.ImportedGraph, float]:
    net = text_model(name)
    tokens = Dim("T", max=MODELS[name].max_t) if MODELS[name].max_t else Dim("T")
    dims = {0: Dim("B"), 1: tokens}
    ids, mask = text_inputs(name, *TRACED)
    started = time.perf_counter()
    with warnings.catch_warnings():
        # Their forwards read self.training (dropout); the graph is eval mode, and says so in its notes.
        warnings.simplefilter("ignore", hndl.importer.ModeWarning)
        graph = hndl.from_module(net, ids, mask, dynamic_shapes=(dims, dims))
    return net, graph, time.perf_counter() - started


def built(graph: hndl.importer.ImportedGraph, net: torch.nn.Module) -> torch.nn.Module:
    text = hndl.dumps(graph)
    again = hndl.loads(text)  # no allow_imports: a module node would fail here
    model = hndl.build(again)
    model.load_state_dict(graph.convert(net.state_dict()))
    return model.eval()


@pytest.mark.parametrize("name", sorted(MODELS))
def test_text_model_imports_at_any_batch_and_length(name: str) -> None:
    net, graph, seconds = import_text(name)
    assert graph.fallbacks == []
    assert "module" not in {n.op for n in graph.nodes.values()}
    symbols = {str(d) for spec in graph.inputs.values() for d in spec.contract.to_spec()["shape"]}
    assert {"B", "T"} <= symbols
    model = built(graph, net)
    for batch, length in CHECKED:
        args = text_inputs(name, batch, length)
        with torch.no_grad():
            want, got = outputs(net(*args)), outputs(model(*args))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w), f"{name} at B={batch} T={length}: max diff {(g - w).abs().max()}"
    print(f"{name}: imported in {seconds:.1f} s, {len(graph.nodes)} nodes")


#: Not equal under .double() yet: the difference is in the rotary path. Suspected (not confirmed): the folded
#: inv_freq table is a buffer node, which .double() widens, where transformers narrows it back with .float().
ROTARY_DOUBLE = pytest.mark.xfail(strict=True, reason="rotary table under .double() (see ROTARY_DOUBLE)")


@pytest.mark.parametrize(
    "name", [pytest.param("llama", marks=ROTARY_DOUBLE), pytest.param("gpt_neox", marks=ROTARY_DOUBLE), "t5_encoder"]
)
def test_text_model_imported_follows_double(name: str) -> None:
    # The activations' dtype is a run-time fact: under .double() every cast between activations and every
    # constant made in their dtype must follow (the trace saw float32 throughout).
    net, graph, _ = import_text(name)
    model = built(graph, net).double()
    net = net.double()
    args = text_inputs(name, *CHECKED[0])
    with torch.no_grad():
        for g, w in zip(outputs(model(*args)), outputs(net(*args)), strict=True):
            assert g.dtype == w.dtype == torch.float64
            assert torch.equal(g, w)


# --- Whisper's encoder ----------------------------------------------------------------------------------------

WHISPER_FRAMES = 2 * 32  # twice max_source_positions: the encoder refuses any other number of frames


def whisper_encoder() -> torch.nn.Module:
    tf = require("transformers")
    torch.manual_seed(0)
    config = tf.WhisperConfig(
        d_model=64,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_mel_bins=16,
        max_source_positions=WHISPER_FRAMES // 2,
        vocab_size=VOCAB,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    return tf.WhisperModel(config).get_encoder().eval()


def test_whisper_encoder_imports_at_any_batch() -> None:
    # Whisper's frames are fixed by design (it checks input_features' length against its position table, 2 *
    # max_source_positions, and raises otherwise), so only the batch is symbolic.
    net = whisper_encoder()
    features = torch.randn(2, 16, WHISPER_FRAMES, generator=torch.Generator().manual_seed(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", hndl.importer.ModeWarning)
        graph = hndl.from_module(net, features, dynamic_shapes=({0: Dim("B")},))
    assert graph.fallbacks == []
    assert "module" not in {n.op for n in graph.nodes.values()}
    model = built(graph, net)
    for batch in (3, 5):
        x = torch.randn(batch, 16, WHISPER_FRAMES, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            want, got = outputs(net(x)), outputs(model(x))
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w)
