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


# --- ResNet-18-sized ---------------------------------------------------------------------------------------

RESNET_STAGES = ((64, 1), (128, 2), (256, 2), (512, 2))  # (channels, first block's stride), 2 blocks each


def resnet18_graph(size: int = 224) -> hndl.Graph:
    """torchvision's ResNet-18 layout: stem (7x7/2 conv, bn, relu, 3x3/2 max pool), 4 stages of 2 basic blocks
    (3x3 conv, bn, relu, 3x3 conv, bn, add the shortcut, relu; a strided 1x1 conv + bn shortcut where the shape
    changes), global average pool, linear 1000."""
    g = hndl.Graph("resnet18")
    h = g.input("image", ("N", 3, size, size))
    h = g.add("conv2d", h, name="conv1", out_channels=64, kernel_size=7, stride=2, padding=3, bias=False)
    h = g.add("batchnorm2d", h, name="bn1")
    h = g.add("relu", h, name="relu")
    h = g.add("maxpool2d", h, name="maxpool", kernel_size=3, stride=2, padding=1)
    in_channels = 64
    for s, (channels, stride) in enumerate(RESNET_STAGES, start=1):
        for b in range(2):
            p = f"layer{s}_{b}_"
            step = stride if b == 0 else 1
            y = g.add(
                "conv2d", h, name=p + "conv1", out_channels=channels, kernel_size=3, stride=step, padding=1, bias=False
            )
            y = g.add("batchnorm2d", y, name=p + "bn1")
            y = g.add("relu", y, name=p + "relu1")
            y = g.add("conv2d", y, name=p + "conv2", out_channels=channels, kernel_size=3, padding=1, bias=False)
            y = g.add("batchnorm2d", y, name=p + "bn2")
            if step != 1 or in_channels != channels:
                h = g.add("conv2d", h, name=p + "down", out_channels=channels, kernel_size=1, stride=step, bias=False)
                h = g.add("batchnorm2d", h, name=p + "down_bn")
            h = g.add("relu", g.add("add", y, h, name=p + "add"), name=p + "relu2")
            in_channels = channels
    h = g.add("adaptive_avgpool2d", h, name="avgpool", output_size=1)
    h = g.add("flatten", h, name="flatten")
    g.output(g.add("linear", h, name="fc", out_features=1000))
    return g


class _BasicBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_channels != channels:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_channels, channels, 1, stride, bias=False), nn.BatchNorm2d(channels)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # torchvision's BasicBlock.forward
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        return self.relu(out + identity)


class ResNet18Twin(nn.Module):
    """torchvision.models.resnet18 written out (torchvision is not a dependency), same module names."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        in_channels = 64
        for s, (channels, stride) in enumerate(RESNET_STAGES, start=1):
            blocks = [_BasicBlock(in_channels, channels, stride), _BasicBlock(channels, channels, 1)]
            self.add_module(f"layer{s}", nn.Sequential(*blocks))
            in_channels = channels
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _resnet_key(key: str) -> str:
    # nodes.n_layer2_0_down.weight -> layer2.0.downsample.0.weight ; nodes.n_layer1_1_bn2.bias -> layer1.1.bn2.bias
    key = key.removeprefix("nodes.n_")
    if not key.startswith("layer"):
        return key
    stage, block, rest = key.split("_", 2)
    rest = rest.replace("down_bn.", "downsample.1.").replace("down.", "downsample.0.")
    return f"{stage}.{block}.{rest}"


def make_resnet18(size: int = 224, seed: int = 0) -> tuple[nn.Module, nn.Module, Example]:
    torch.manual_seed(seed)
    model = hndl.build(resnet18_graph(size))
    twin = ResNet18Twin()
    _load(twin, model, _resnet_key)
    model.eval()
    twin.eval()
    return model, twin, lambda batch: torch.randn(batch, 3, size, size)


# --- MBConv stack: element-wise heavy (EfficientNet-style blocks) ---------------------------------------------

MB_CHANNELS, MB_EXPAND, MB_BLOCKS, MB_SIZE = 32, 4, 4, 28


def mbconv_graph() -> hndl.Graph:
    """A stem and MB_BLOCKS of EfficientNet's MBConv: expand (1x1, BN, SiLU), depthwise (3x3, BN, SiLU),
    squeeze-and-excitation (pool, 1x1, SiLU, 1x1, sigmoid, mul), project (1x1, BN), drop_path, residual add:
    nine of its fifteen nodes are element-wise, the kind of op the vision zoo runs most often."""
    c, h = MB_CHANNELS, MB_CHANNELS * MB_EXPAND
    g = hndl.Graph("mbconv_stack")
    x = g.add("conv2d", g.input("x", ("B", 3, MB_SIZE, MB_SIZE)), name="stem", out_channels=c, kernel_size=3, padding=1)
    for i in range(MB_BLOCKS):
        n = f"b{i}_"
        e = g.add("conv2d", x, name=n + "expand", out_channels=h, kernel_size=1, bias=False)
        e = g.add("silu", g.add("batchnorm2d", e, name=n + "expand_bn"), name=n + "expand_act")
        d = g.add("conv2d", e, name=n + "dw", out_channels=h, kernel_size=3, padding=1, groups=h, bias=False)
        d = g.add("silu", g.add("batchnorm2d", d, name=n + "dw_bn"), name=n + "dw_act")
        s = g.add("adaptive_avgpool2d", d, name=n + "pool", output_size=1)
        s = g.add("silu", g.add("conv2d", s, name=n + "fc1", out_channels=c // 4, kernel_size=1), name=n + "fc1_act")
        s = g.add("sigmoid", g.add("conv2d", s, name=n + "fc2", out_channels=h, kernel_size=1), name=n + "gate")
        d = g.add("mul", s, d, name=n + "excite")
        p = g.add("conv2d", d, name=n + "project", out_channels=c, kernel_size=1, bias=False)
        p = g.add("drop_path", g.add("batchnorm2d", p, name=n + "project_bn"), name=n + "drop", p=0.1)
        x = g.add("add", p, x, name=n + "residual")
    g.output(x)
    return g


class MBConvTwin(nn.Module):
    """One MBConv block as torchvision writes it (layers called through ``__call__``, ``scale * input``)."""

    def __init__(self, c: int, h: int) -> None:
        super().__init__()
        self.expand, self.expand_bn, self.expand_act = nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.SiLU()
        self.dw = nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False)
        self.dw_bn, self.dw_act = nn.BatchNorm2d(h), nn.SiLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1, self.fc1_act = nn.Conv2d(h, c // 4, 1), nn.SiLU()
        self.fc2, self.gate = nn.Conv2d(c // 4, h, 1), nn.Sigmoid()
        self.project, self.project_bn = nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = self.dw_act(self.dw_bn(self.dw(self.expand_act(self.expand_bn(self.expand(x))))))
        d = self.gate(self.fc2(self.fc1_act(self.fc1(self.pool(d))))) * d
        return self.project_bn(self.project(d)) + x  # stochastic depth is the identity in eval mode


class MBConvStackTwin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, MB_CHANNELS, 3, padding=1)
        self.blocks = nn.ModuleList(MBConvTwin(MB_CHANNELS, MB_CHANNELS * MB_EXPAND) for _ in range(MB_BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return x


def _mbconv_key(key: str) -> str:
    # nodes.n_b2_dw_bn.weight -> blocks.2.dw_bn.weight
    key = key.removeprefix("nodes.n_")
    if not key.startswith("b"):
        return key
    block, rest = key[1:].split("_", 1)
    return f"blocks.{block}.{rest}"


def make_mbconv(seed: int = 0) -> tuple[nn.Module, nn.Module, Example]:
    torch.manual_seed(seed)
    model = hndl.build(mbconv_graph())
    twin = MBConvStackTwin()
    _load(twin, model, _mbconv_key)
    model.eval()
    twin.eval()
    return model, twin, lambda batch: torch.randn(batch, 3, MB_SIZE, MB_SIZE)
