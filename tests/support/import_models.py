"""Hand-written ``nn.Module``s for the import tests (``hndl.from_module``), importable by name: a layer the
importer keeps as a ``module`` node must be rebuildable from ``package.module:Class``, which a class defined
in a test file (imported with ``--import-mode=importlib``) is not."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class Block(nn.Module):
    """A ResNet basic block: in-place ReLUs and an in-place residual add, as torchvision writes them."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += x
        return self.relu(out)


class SmallResNet(nn.Module):
    """Stem, two blocks, pooling, flatten, a classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.layer1 = nn.Sequential(Block(8), Block(8))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(x, 1))


class TinyViT(nn.Module):
    """Patches, a class token and position embedding read as data, self-attention, the first token's head."""

    def __init__(self, dim: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 4, stride=4)
        self.class_token = nn.Parameter(torch.randn(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.randn(1, 17, dim))
        self.norm = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(2 * dim, dim))
        self.head = nn.Linear(dim, 5)

    def forward(self, x: Tensor) -> Tensor:
        x = self.patch(x)
        n, c = x.shape[0], x.shape[1]
        x = x.reshape(n, c, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1) + self.pos_embedding
        h = self.norm(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm(x))
        return self.head(x[:, 0])


class Shapes(nn.Module):
    """The shape vocabulary: view, transpose, chunk, cat, mean, softmax, matmul, select, slice, unsqueeze."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(12, 12)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        b, t, _d = x.shape
        h = self.proj(x).view(b, t, 3, 4).transpose(1, 2).contiguous()
        a, c = h.chunk(2, dim=-1)
        scores = torch.matmul(a, c.transpose(-2, -1)).softmax(dim=-1)
        y = torch.cat([scores, scores], dim=-1).mean(dim=1)
        first = x[:, 0]
        tail = x[:, 1:, :4].unsqueeze(1)
        return y * 0.5, first + tail.flatten(1)[:, :12]


class TiedLM(nn.Module):
    """An embedding whose weight the output projection shares, as GPT-2 ties wte and lm_head."""

    def __init__(self, vocab: int = 20, dim: int = 8) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.ln = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: Tensor) -> Tensor:
        return self.lm_head(self.ln(self.wte(ids)))


class WithUnused(nn.Module):
    """A head the forward never calls (like GoogLeNet's auxiliary classifiers in eval mode)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


class Clipped(nn.Module):
    """ReLU6 and Hardswish (MobileNet's activations): ``relu6`` and ``hardswish``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.ReLU6(inplace=True)
        self.out = nn.Hardswish()

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.act(self.fc(x)))


class DropPath(nn.Module):
    """Stochastic depth written like torchvision's StochasticDepth: the identity in eval mode."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.empty([x.shape[0]] + [1] * (x.dim() - 1), dtype=x.dtype).bernoulli_(1 - self.p)
        return x * keep.div_(1 - self.p)


class Residual(nn.Module):
    """A residual branch with stochastic depth."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = DropPath(0.5)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.drop(self.fc(x))


class Opaque(nn.Module):
    """A layer with an op hndl lacks and a constructor argument it does not keep: it cannot be a module node."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.factor = scale

    def forward(self, x: Tensor) -> Tensor:
        return torch.cumprod(x, -1) * self.factor


class UsesOpaque(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.opaque = Opaque(2.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.opaque(self.fc(x))


class DataDependent(nn.Module):
    """Branches on a tensor's values: no graph can say which branch runs."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        y = self.fc(x)
        if y.sum() > 0:
            return y
        return -y


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = DataDependent()

    def forward(self, x: Tensor) -> Tensor:
        return self.inner(x)


class WritesInput(nn.Module):
    """Adds into its input in place."""

    def forward(self, x: Tensor) -> Tensor:
        x.mul_(2)
        return F.relu(x)


class FixesBatch(nn.Module):
    """Works for batch 2 only: a dim declared dynamic that the model fixes."""

    def forward(self, x: Tensor) -> Tensor:
        return x.view(2, -1)


class TrainOnlyScale(nn.Module):
    """Computes something else in training mode, in a layer that is not a leaf."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        y = self.fc(x)
        return y * 2 if self.training else y


class DropsOnlyIfAsked(nn.Module):
    """Reads self.training but computes the same in both modes with its settings (DenseNet's layers)."""

    def __init__(self, rate: float = 0.0) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.rate = rate

    def forward(self, x: Tensor) -> Tensor:
        y = self.fc(x)
        if self.rate > 0:
            y = F.dropout(y, p=self.rate, training=self.training)
        return y


class ViewThenWrite(nn.Module):
    """Writes through a view, then reads the tensor from before the write: not expressible out of place."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        y = self.fc(x)
        z = y.view(-1)
        z.relu_()
        return y + y


class TwoInputs(nn.Module):
    """Two inputs, an integer one: token ids and a float feature."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 6)
        self.fc = nn.Linear(6, 6)

    def forward(self, ids: Tensor, feats: Tensor) -> Tensor:
        return self.emb(ids) + self.fc(feats)


class Tagger(nn.Module):
    """Embedding, LSTM (its output sequence only), a head per step."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(20, 8)
        self.lstm = nn.LSTM(8, 16, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 3)

    def forward(self, ids: Tensor) -> Tensor:
        out, _ = self.lstm(self.emb(ids))
        return self.head(out)


class Shrunk(nn.Module):
    """Hardshrink and Softshrink: torch.nn layers hndl has no op for, kept as module nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.act = nn.Hardshrink(0.25)
        self.out = nn.Softshrink()

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.act(self.fc(x)))


class StochasticDepth(nn.Module):
    """torchvision's ``StochasticDepth`` as it is written (``torchvision.ops.stochastic_depth``), for the tests
    that run without torchvision: the identity in eval mode, whole samples dropped in training mode."""

    def __init__(self, p: float, mode: str) -> None:
        super().__init__()
        self.p = p
        self.mode = mode

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        survival = 1.0 - self.p
        size = [x.shape[0]] + [1] * (x.ndim - 1) if self.mode == "row" else [1] * x.ndim
        noise = torch.empty(size, dtype=x.dtype, device=x.device).bernoulli_(survival)
        if survival > 0.0:
            noise.div_(survival)
        return x * noise


class DeepResidual(nn.Module):
    """Residual branches with stochastic depth, per sample and for the whole batch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.row = StochasticDepth(0.5, "row")
        self.batch = StochasticDepth(0.25, "batch")

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.row(self.fc(x))
        return x + self.batch(self.fc(x))
