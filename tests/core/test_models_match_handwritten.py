"""hndl-built models against hand-written ``nn.Module`` twins holding the same weights.

Each test builds a model with hndl, builds the way a PyTorch user would write it by hand, copies the hndl
weights (and batch-norm statistics) into the twin through a renamed ``state_dict``, and requires bit-identical
outputs in eval mode: hndl adds no computation of its own between the layers.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

import hndl


def _randomise(model: nn.Module, seed: int = 0) -> None:
    """Give every parameter and buffer a non-default value, so copying the wrong tensor cannot go unseen."""
    gen = torch.Generator().manual_seed(seed)
    state = model.state_dict()
    for key, value in state.items():
        if not value.is_floating_point():
            continue
        noise = torch.randn(value.shape, generator=gen) * 0.2
        state[key] = noise.abs() + 0.5 if key.endswith("running_var") else noise
    model.load_state_dict(state)


def _mapped(model: nn.Module, renames: dict[str, str]) -> dict[str, torch.Tensor]:
    """``model``'s state dict with each key's prefix renamed; every key must be covered by one rename."""
    out = {}
    for key, value in model.state_dict().items():
        prefix = next(p for p in sorted(renames, key=len, reverse=True) if key.startswith(p))
        out[renames[prefix] + key[len(prefix) :]] = value
    return out


def _assert_same(built: nn.Module, hand: nn.Module, renames: dict[str, str], *inputs: torch.Tensor) -> None:
    _randomise(built)
    missing, unexpected = hand.load_state_dict(_mapped(built, renames), strict=True)
    assert (missing, unexpected) == ([], [])
    assert sum(p.numel() for p in built.parameters()) == sum(p.numel() for p in hand.parameters())
    built.eval()
    hand.eval()
    with torch.no_grad():
        expected = hand(*inputs)
        got = built(*inputs)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)


# --- MLP ------------------------------------------------------------------------------------------------


def test_mlp():
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 784))
    h = g.add("linear", x, name="hidden", out_features=256)
    a = g.add("relu", h, name="act")
    g.output(g.add("linear", a, name="out", out_features=10))

    hand = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    renames = {"nodes.n_hidden.": "0.", "nodes.n_out.": "2."}
    _assert_same(hndl.build(g), hand, renames, torch.randn(32, 784))


# --- conv stack -----------------------------------------------------------------------------------------


class ConvStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 16 * 16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(F.relu(self.bn(self.conv(x))))
        return self.fc(torch.flatten(x, 1))


def test_conv_stack():
    g = hndl.Graph("convnet")
    x = g.input("x", ("B", 3, 32, 32))
    h = g.add("conv2d", x, name="conv", out_channels=16, kernel_size=3, padding=1)
    h = g.add("batchnorm2d", h, name="bn")
    h = g.add("relu", h, name="act")
    h = g.add("maxpool2d", h, name="pool", kernel_size=2)
    h = g.add("flatten", h, name="flat")
    g.output(g.add("linear", h, name="fc", out_features=10))

    model = hndl.build(g)
    assert model.nodes["n_fc"].in_features == 4096  # sized by inference: 16 * 16 * 16
    renames = {"nodes.n_conv.": "conv.", "nodes.n_bn.": "bn.", "nodes.n_fc.": "fc."}
    _assert_same(model, ConvStack(), renames, torch.randn(4, 3, 32, 32))


# --- GPT-2 style transformer block, repeated ------------------------------------------------------------


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.n_head = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPTBlocks(nn.Module):
    def __init__(self, d: int, heads: int, layers: int) -> None:
        super().__init__()
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.h:
            x = block(x)
        return x


def _block_graph(d: int, heads: int) -> hndl.Graph:
    b = hndl.Graph("block")
    x = b.input("x", ("B", "T", d))
    a = b.add("layernorm", x, name="ln1")
    a = b.add("attention", a, name="attn", num_heads=heads, causal=True)
    r = b.add("add", [x, a], name="res1")
    m = b.add("layernorm", r, name="ln2")
    m = b.add("linear", m, name="fc", out_features=4 * d)
    m = b.add("gelu", m, name="act", approximate="tanh")
    m = b.add("linear", m, name="proj", out_features=d)
    b.output(b.add("add", [r, m], name="res2"))
    return b


def test_gpt2_blocks_via_a_repeated_subgraph():
    d, heads = 64, 4
    g = hndl.Graph("gpt")
    x = g.input("x", ("B", "T", d))
    g.output(g.add("graph", x, name="blocks", graph=_block_graph(d, heads), repeat=2))

    renames: dict[str, str] = {}
    for i in range(2):
        ours, theirs = f"nodes.n_blocks.{i}.", f"h.{i}."
        renames |= {
            ours + "n_ln1.": theirs + "ln_1.",
            ours + "n_attn.qkv.": theirs + "attn.c_attn.",
            ours + "n_attn.proj.": theirs + "attn.c_proj.",
            ours + "n_ln2.": theirs + "ln_2.",
            ours + "n_fc.": theirs + "c_fc.",
            ours + "n_proj.": theirs + "c_proj.",
        }
    _assert_same(hndl.build(g), GPTBlocks(d, heads, 2), renames, torch.randn(2, 10, d))


# --- ResNet basic block ---------------------------------------------------------------------------------


class BasicBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + x)


def test_resnet_basic_block():
    g = hndl.Graph("basic_block")
    x = g.input("x", ("B", 16, "H", "W"))
    h = g.add("conv2d", x, name="conv1", out_channels=16, kernel_size=3, padding=1, bias=False)
    h = g.add("batchnorm2d", h, name="bn1")
    h = g.add("relu", h, name="relu1")
    h = g.add("conv2d", h, name="conv2", out_channels=16, kernel_size=3, padding=1, bias=False)
    h = g.add("batchnorm2d", h, name="bn2")
    h = g.add("add", [h, x], name="skip")
    g.output(g.add("relu", h, name="relu2"))

    out_type = hndl.check(g).types["relu2"]
    assert str(out_type) == "[B, 16, H, W] float"
    renames = {f"nodes.n_{name}.": f"{name}." for name in ("conv1", "bn1", "conv2", "bn2")}
    _assert_same(hndl.build(g), BasicBlock(16), renames, torch.randn(2, 16, 8, 12))


# --- ViT patch embedding --------------------------------------------------------------------------------


class PatchEmbed(nn.Module):
    def __init__(self, patch: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


def test_vit_patch_embedding():
    g = hndl.Graph("patch_embed")
    x = g.input("x", ("B", 3, 32, 32))
    h = g.add("conv2d", x, name="proj", out_channels=48, kernel_size=8, stride=8)
    h = g.add("flatten", h, name="tokens", start_dim=2)
    g.output(g.add("transpose", h, name="seq", dim0=1, dim1=2))

    assert str(hndl.check(g).types["seq"]) == "[B, 16, 48] float"
    _assert_same(hndl.build(g), PatchEmbed(8, 48), {"nodes.n_proj.": "proj."}, torch.randn(3, 3, 32, 32))
