"""The benchmark models, each built with hndl and written by hand, loaded with the same weights.

Each ``make_*`` function returns ``(model, twin, example)``: the hndl GraphModule, a hand-written
``nn.Module`` computing the same function with the same weights (outputs are ``torch.equal``), and
``example(batch)`` making an input. The twins are written the way a person would write them, calling each layer
through ``__call__``; they are the reference every ratio is measured against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.nn import functional as F

import hndl

Example = Callable[[int], torch.Tensor]


# --- mlp (5 nodes) ---------------------------------------------------------------------------------------

MLP_IN, MLP_HIDDEN, MLP_OUT = 128, 256, 10


def mlp_graph(nodes: int = 5) -> hndl.Graph:
    """``linear, relu, linear, relu, linear`` (5 nodes) or ``linear, relu, linear`` (3 nodes)."""
    g = hndl.Graph(f"mlp{nodes}")
    h = g.input("x", ("B", MLP_IN))
    for i in range((nodes - 1) // 2):
        h = g.add("linear", h, name=f"hidden{i}", out_features=MLP_HIDDEN)
        h = g.add("relu", h, name=f"act{i}")
    g.output(g.add("linear", h, name="out", out_features=MLP_OUT))
    return g


class MLPTwin(nn.Module):
    def __init__(self, nodes: int = 5) -> None:
        super().__init__()
        self.hidden0 = nn.Linear(MLP_IN, MLP_HIDDEN)
        self.act0 = nn.ReLU()
        self.deep = nodes == 5
        if self.deep:
            self.hidden1 = nn.Linear(MLP_HIDDEN, MLP_HIDDEN)
            self.act1 = nn.ReLU()
        self.out = nn.Linear(MLP_HIDDEN, MLP_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act0(self.hidden0(x))
        if self.deep:
            x = self.act1(self.hidden1(x))
        return self.out(x)


def make_mlp(nodes: int = 5, seed: int = 0) -> tuple[nn.Module, nn.Module, Example]:
    torch.manual_seed(seed)
    model = hndl.build(mlp_graph(nodes))
    twin = MLPTwin(nodes)
    _load(twin, model, lambda k: k.replace("nodes.n_", ""))
    return model, twin, lambda batch: torch.randn(batch, MLP_IN)


# --- conv_stack ------------------------------------------------------------------------------------------


def conv_stack_graph() -> hndl.Graph:
    """Two conv/batchnorm/relu/maxpool stages, flatten, linear: a small image classifier on [N, 3, 32, 32]."""
    g = hndl.Graph("conv_stack")
    h = g.input("image", ("N", 3, 32, 32))
    for i, channels in enumerate((16, 32)):
        h = g.add("conv2d", h, name=f"conv{i}", out_channels=channels, kernel_size=3, padding=1)
        h = g.add("batchnorm2d", h, name=f"bn{i}")
        h = g.add("relu", h, name=f"act{i}")
        h = g.add("maxpool2d", h, name=f"pool{i}", kernel_size=2)
    h = g.add("flatten", h, name="flat")
    g.output(g.add("linear", h, name="head", out_features=10))
    return g


class ConvStackTwin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(3, 16, 3, padding=1)
        self.bn0 = nn.BatchNorm2d(16)
        self.act0 = nn.ReLU()
        self.pool0 = nn.MaxPool2d(2)
        self.conv1 = nn.Conv2d(16, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.act1 = nn.ReLU()
        self.pool1 = nn.MaxPool2d(2)
        self.flat = nn.Flatten()
        self.head = nn.Linear(32 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool0(self.act0(self.bn0(self.conv0(x))))
        x = self.pool1(self.act1(self.bn1(self.conv1(x))))
        return self.head(self.flat(x))


def make_conv_stack(seed: int = 0) -> tuple[nn.Module, nn.Module, Example]:
    torch.manual_seed(seed)
    model = hndl.build(conv_stack_graph())
    twin = ConvStackTwin()
    _load(twin, model, lambda k: k.replace("nodes.n_", ""))
    model.eval()
    twin.eval()
    return model, twin, lambda batch: torch.randn(batch, 3, 32, 32)


# --- transformer_block(n) --------------------------------------------------------------------------------

D_MODEL, HEADS, SEQ = 64, 4, 32


def transformer_graph(n: int = 1) -> hndl.Graph:
    """``n`` pre-norm transformer blocks (attention and a GELU MLP, each with a residual) on [B, T, 64]."""
    block = hndl.Graph("block")
    x = block.input("x", ("B", "T", D_MODEL))
    h = block.add("layernorm", x, name="ln1")
    h = block.add("attention", h, name="attn", num_heads=HEADS, causal=True)
    x1 = block.add("add", x, h, name="res1")
    h = block.add("layernorm", x1, name="ln2")
    h = block.add("linear", h, name="up", out_features=4 * D_MODEL)
    h = block.add("gelu", h, name="act")
    h = block.add("linear", h, name="down", out_features=D_MODEL)
    block.output(block.add("add", x1, h, name="res2"))

    g = hndl.Graph(f"transformer{n}")
    x = g.input("x", ("B", "T", D_MODEL))
    g.output(g.add("graph", x, name="blocks", graph=block, repeat=n))
    return g


class _BlockTwin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(D_MODEL)
        self.qkv = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.proj = nn.Linear(D_MODEL, D_MODEL)
        self.ln2 = nn.LayerNorm(D_MODEL)
        self.up = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q = q.view(b, t, HEADS, d // HEADS).transpose(1, 2)
        k = k.view(b, t, HEADS, d // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, d // HEADS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, d))
        return x + self.down(self.act(self.up(self.ln2(x))))


class TransformerTwin(nn.Module):
    def __init__(self, n: int = 1) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_BlockTwin() for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _transformer_key(key: str) -> str:
    # nodes.n_blocks.0.n_attn.qkv.weight -> blocks.0.qkv.weight ; nodes.n_blocks.0.n_ln1.weight -> blocks.0.ln1.weight
    key = key.replace("nodes.n_blocks.", "blocks.").replace("n_attn.", "").replace("n_", "")
    return key


def make_transformer(n: int = 1, seed: int = 0) -> tuple[nn.Module, nn.Module, Example]:
    torch.manual_seed(seed)
    model = hndl.build(transformer_graph(n))
    twin = TransformerTwin(n)
    _load(twin, model, _transformer_key)
    model.eval()
    twin.eval()
    return model, twin, lambda batch: torch.randn(batch, SEQ, D_MODEL)


# --- shared ----------------------------------------------------------------------------------------------


def _load(twin: nn.Module, model: nn.Module, rename: Callable[[str], str]) -> None:
    state = {rename(k): v for k, v in model.state_dict().items()}
    twin.load_state_dict(state, strict=True)


MODELS: dict[str, Callable[[], tuple[nn.Module, nn.Module, Example]]] = {
    "mlp": make_mlp,
    "conv_stack": make_conv_stack,
    "transformer_block": lambda: make_transformer(2),
}
