"""Hand-written reference implementations of the zoo entries that have no library reference.

Each is what a PyTorch user would write for the architecture, with the constructor arguments of the entry's
spec parameters; their state_dict keys are what ``hndl.zoo.load_reference_state_dict`` maps. They need only
torch, so the default test sessions check these entries against them.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class DoubleConv(nn.Module):
    def __init__(self, in_channels: int, width: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(self.conv2(torch.relu(self.conv1(x))))


class UNet(nn.Module):
    """Ronneberger et al.'s UNet with padded 3x3 convolutions, channels width .. 16*width."""

    def __init__(self, num_classes: int = 2, width: int = 16, in_channels: int = 3) -> None:
        super().__init__()
        w = [width * 2**i for i in range(5)]
        self.down1 = DoubleConv(in_channels, w[0])
        self.down2 = DoubleConv(w[0], w[1])
        self.down3 = DoubleConv(w[1], w[2])
        self.down4 = DoubleConv(w[2], w[3])
        self.bottom = DoubleConv(w[3], w[4])
        self.up4 = nn.ConvTranspose2d(w[4], w[3], 2, stride=2)
        self.dec4 = DoubleConv(2 * w[3], w[3])
        self.up3 = nn.ConvTranspose2d(w[3], w[2], 2, stride=2)
        self.dec3 = DoubleConv(2 * w[2], w[2])
        self.up2 = nn.ConvTranspose2d(w[2], w[1], 2, stride=2)
        self.dec2 = DoubleConv(2 * w[1], w[1])
        self.up1 = nn.ConvTranspose2d(w[1], w[0], 2, stride=2)
        self.dec1 = DoubleConv(2 * w[0], w[0])
        self.head = nn.Conv2d(w[0], num_classes, 1)

    def forward(self, x: Tensor) -> Tensor:
        pool = nn.functional.max_pool2d
        d1 = self.down1(x)
        d2 = self.down2(pool(d1, 2))
        d3 = self.down3(pool(d2, 2))
        d4 = self.down4(pool(d3, 2))
        b = self.bottom(pool(d4, 2))
        u = self.dec4(torch.cat([d4, self.up4(b)], dim=1))
        u = self.dec3(torch.cat([d3, self.up3(u)], dim=1))
        u = self.dec2(torch.cat([d2, self.up2(u)], dim=1))
        u = self.dec1(torch.cat([d1, self.up1(u)], dim=1))
        return self.head(u)


class LSTMClassifier(nn.Module):
    """Embedding, a bidirectional LSTM, the last layer's final hidden states of both directions, a linear head."""

    def __init__(
        self,
        vocab_size: int = 10000,
        embed_dim: int = 128,
        hidden_size: int = 256,
        num_layers: int = 2,
        num_classes: int = 2,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, embed_dim)
        self.lstm = nn.LSTM(embed_dim, hidden_size, num_layers, batch_first=True, bidirectional=True, dropout=dropout)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(2 * hidden_size, num_classes)

    def forward(self, tokens: Tensor) -> Tensor:
        _, (h, _) = self.lstm(self.embedding(tokens))
        return self.fc(self.dropout(torch.cat([h[-2], h[-1]], dim=1)))


class Seq2SeqTransformer(nn.Module):
    """torch.nn.Transformer (batch first) with learned token and position embeddings and a linear head."""

    def __init__(
        self,
        src_vocab: int = 1000,
        tgt_vocab: int = 1000,
        d_model: int = 256,
        nhead: int = 8,
        num_encoder_layers: int = 3,
        num_decoder_layers: int = 3,
        dim_feedforward: int = 1024,
        dropout: float = 0.1,
        max_len: int = 512,
    ) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.src_pos = nn.Embedding(max_len, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.tgt_pos = nn.Embedding(max_len, d_model)
        self.transformer = nn.Transformer(
            d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, dropout, batch_first=True
        )
        self.head = nn.Linear(d_model, tgt_vocab)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        s = self.src_embed(src) + self.src_pos(torch.arange(src.shape[1], device=src.device))
        t = self.tgt_embed(tgt) + self.tgt_pos(torch.arange(tgt.shape[1], device=tgt.device))
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        return self.head(self.transformer(s, t, tgt_mask=mask, tgt_is_causal=True))
