"""A decoder written as nanoGPT writes it, imported with ``hndl.from_module`` at symbolic ``B`` and ``T``: its
positions are one row ``arange(T)`` for the whole batch (``[T]``, not ``[1, T]``) and its attention is either
``F.scaled_dot_product_attention(is_causal=True)`` or written out, masked with ``-inf``. The first generates
with a derived cache, each left-padded row equal to its prompt run alone; the second imports (``-inf`` in
``where``) and is told why it gets no cache."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.export import Dim
from torch.nn import functional as F

import hndl
from hndl.importer import MIN_TORCH

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)

VOCAB, WIDTH, HEADS, BLOCK = 50, 32, 4, 16


class SelfAttention(nn.Module):
    def __init__(self, written_out: bool, rotary_from_shared_positions: bool = False) -> None:
        super().__init__()
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
        self.c_proj = nn.Linear(WIDTH, WIDTH)
        self.written_out = written_out
        self.rotary = rotary_from_shared_positions
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        if self.rotary:  # a table from [T] positions, broadcast over the batch by a reshape: not per row
            angle = torch.arange(T, device=x.device)[:, None].float() * torch.ones(C // 2)[None, :]
            half = angle.cos()[None]
            table = torch.cat([half, half], -1)
            q, k = q * table, k * table
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        if self.written_out:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, **attention: bool) -> None:
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attn = SelfAttention(**attention)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    def __init__(self, layers: int = 2, **attention: bool) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(BLOCK, WIDTH)
        self.h = nn.ModuleList([Block(**attention) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)  # [T]: one row for the batch
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def imported(net: nn.Module) -> tuple[hndl.Graph, nn.Module]:
    torch.manual_seed(0)
    net.eval()
    # torch's own guard: slicing the [16, 16] buffer to T holds T < 16, so the range stops at 15
    dims = {0: Dim("B"), 1: Dim("T", max=BLOCK - 1)}
    graph = hndl.from_module(net, torch.randint(0, VOCAB, (2, 7)), dynamic_shapes=(dims,))
    assert graph.fallbacks == []
    model = hndl.build(hndl.loads(hndl.dumps(graph)))
    model.load_state_dict(graph.convert(net.state_dict()))
    return graph, model.eval()


def greedy_alone(net: nn.Module, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    ids = prompt[None]
    with torch.no_grad():
        for _ in range(steps):
            ids = torch.cat([ids, net(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    return ids[0]


@pytest.mark.parametrize("written_out", [False, True], ids=["sdpa", "written_out"])
def test_nanogpt_imports_at_symbolic_batch_and_length(written_out: bool) -> None:
    torch.manual_seed(1)
    net = NanoGPT(written_out=written_out)
    graph, model = imported(net)
    ops = {n.op for n in graph.nodes.values()}
    assert ("where" in ops) == written_out  # masked_fill(mask, -inf) is where with a = -inf
    for shape in ((3, 15), (1, 1), (4, 5)):
        ids = torch.randint(0, VOCAB, shape)
        with torch.no_grad():
            assert torch.equal(model(ids), net(ids))


@pytest.mark.parametrize("kv_cache", ["static", "grow"])
def test_nanogpt_with_positions_shared_by_the_batch_generates_each_left_padded_prompt_as_alone(
    kv_cache: str,
) -> None:
    torch.manual_seed(2)
    net = NanoGPT(written_out=False)
    _, model = imported(net)
    prompts = [torch.randint(0, VOCAB, (n,)) for n in (5, 3, 1)]
    ids = torch.zeros(3, 5, dtype=torch.long)
    mask = torch.zeros(3, 5, dtype=torch.bool)
    for row, prompt in enumerate(prompts):
        ids[row, 5 - len(prompt) :], mask[row, 5 - len(prompt) :] = prompt, True
    out = hndl.generate(model, ids, 6, attention_mask=mask, kv_cache=kv_cache)
    for row, prompt in enumerate(prompts):
        assert torch.equal(out[row, 5 - len(prompt) :], greedy_alone(net, prompt, 6))
    unpadded = torch.randint(0, VOCAB, (2, 4))
    want = torch.stack([greedy_alone(net, p, 5) for p in unpadded])
    assert torch.equal(hndl.generate(model, unpadded, 5, kv_cache=kv_cache), want)


def test_positions_shared_by_the_batch_read_other_than_by_an_embedding_are_refused_naming_the_node() -> None:
    # per-row positions would turn the [T] rotary table into [B, T]: refused, not a shape error in the variant
    torch.manual_seed(3)
    net = NanoGPT(written_out=False, rotary_from_shared_positions=True)
    graph, model = imported(net)
    with pytest.raises(hndl.HndlError) as info:
        hndl.generation.with_kv_cache(graph)
    problem = info.value.problems[0]
    assert problem.code == "E_INPUT"
    assert problem.node is not None
    assert graph.nodes[problem.node].op == "arange"
    assert "one row [T] for the whole batch" in problem.message
    assert "[1, T]" in (problem.hint or "")
    ids = torch.randint(0, VOCAB, (2, 6))
    with torch.no_grad():
        assert torch.equal(model(ids), net(ids))  # the model itself still runs


def test_attention_written_out_gets_no_cache_and_is_told_why() -> None:
    torch.manual_seed(4)
    _, model = imported(NanoGPT(written_out=True))
    with pytest.raises(hndl.HndlError) as info:
        hndl.generate(model, torch.randint(0, VOCAB, (1, 3)), 2)
    problem = info.value.problems[0]
    assert problem.code == "E_INPUT"
    assert "no attention node and no sdpa node" in problem.message
    assert "scaled_dot_product_attention" in (problem.hint or "")
