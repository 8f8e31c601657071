"""The entries whose reference is hand-written (references.py), checked in every session: count, outputs,
gradients (see parity.py for what each check means)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import check_count, check_gradients, check_outputs  # noqa: E402
from references import LSTMClassifier, Seq2SeqTransformer, UNet  # noqa: E402


def _seeded(make):
    torch.manual_seed(0)
    return make()


def test_unet_matches_its_reference():
    check_count("unet", UNet())
    # exact: the same convolutions, pools and concatenations in the same order
    check_outputs("unet", _seeded(UNet), [torch.randn(2, 3, 64, 64)], exact=True)
    check_gradients("unet", _seeded(UNet), [torch.randn(2, 3, 32, 32)])


def test_unet_at_another_width_and_class_count():
    check_count("unet", UNet(num_classes=5, width=8), num_classes=5, width=8)
    check_outputs("unet", _seeded(lambda: UNet(5, 8)), [torch.randn(1, 3, 32, 48)], exact=True, num_classes=5, width=8)


def test_unet_with_other_input_channels():
    kw = dict(num_classes=3, width=4, in_channels=1)
    check_count("unet", UNet(**kw), **kw)
    check_outputs("unet", _seeded(lambda: UNet(**kw)), [torch.randn(2, 1, 32, 32)], exact=True, **kw)
    check_gradients("unet", _seeded(lambda: UNet(**kw)), [torch.randn(2, 1, 16, 16)], **kw)


def test_lstm_classifier_matches_its_reference():
    tokens = torch.randint(0, 10000, (3, 11))
    check_count("lstm_classifier", LSTMClassifier())
    # exact: hndl's lstm is torch.nn.LSTM with torch's parameters, and the same concatenation of h[-2], h[-1]
    check_outputs("lstm_classifier", _seeded(LSTMClassifier), [tokens], exact=True)
    check_gradients("lstm_classifier", _seeded(lambda: LSTMClassifier(dropout=0.0)), [tokens], dropout=0.0)


def test_lstm_classifier_with_other_sizes():
    kw = dict(vocab_size=50, embed_dim=8, hidden_size=16, num_layers=3, num_classes=4)
    check_count("lstm_classifier", LSTMClassifier(**kw), **kw)
    check_outputs(
        "lstm_classifier", _seeded(lambda: LSTMClassifier(**kw)), [torch.randint(0, 50, (2, 5))], exact=True, **kw
    )


def test_seq2seq_transformer_matches_torch_nn_transformer():
    src, tgt = torch.randint(0, 1000, (2, 9)), torch.randint(0, 1000, (2, 7))
    check_count("seq2seq_transformer", Seq2SeqTransformer())
    # allclose: torch.nn.Transformer's eval fast path fuses attention differently from hndl's SDPA call
    check_outputs("seq2seq_transformer", _seeded(Seq2SeqTransformer), [src, tgt], exact=False)
    check_gradients("seq2seq_transformer", _seeded(lambda: Seq2SeqTransformer(dropout=0.0)), [src, tgt], dropout=0.0)


def test_seq2seq_transformer_with_other_depths():
    kw = dict(num_encoder_layers=1, num_decoder_layers=2, d_model=32, nhead=4, dim_feedforward=64, src_vocab=20)
    check_count("seq2seq_transformer", Seq2SeqTransformer(**kw), **kw)
    src, tgt = torch.randint(0, 20, (2, 5)), torch.randint(0, 1000, (2, 4))
    check_outputs("seq2seq_transformer", _seeded(lambda: Seq2SeqTransformer(**kw)), [src, tgt], exact=False, **kw)
