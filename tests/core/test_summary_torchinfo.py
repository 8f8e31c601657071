"""hndl.summary's totals against torchinfo's, on every example that builds and the zoo's cheaper entries.

What agrees: total, trainable and non-trainable parameters and their bytes (``total_param_bytes``), except that
torchinfo counts a tied tensor once for every module that holds it (GPT-2's ``wte`` and ``lm_head``) where hndl
counts it once. Multiply-adds agree per layer where both count the same products: a convolution, and a linear
layer on ``[B, features]``; torchinfo adds the bias additions (one per output element), which hndl, like
``torch.utils.flop_counter.FlopCounterMode``, does not count. Elsewhere torchinfo counts another thing, so the
totals differ by design (docs/tutorial.md, "What the summary counts"): it multiplies a linear layer's
parameters by the batch dim only (not the tokens of ``[B, T, D]``), counts a transposed convolution's weights
once per output position (FlopCounterMode: per input position), counts an LSTM's parameters once per output
element of its first two dims, adds ``B x`` the affine parameters of a norm, and sees no functional op
(``scaled_dot_product_attention``, ``matmul``). hndl's counts stay pinned to FlopCounterMode's
(tests/core/test_summary.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

import hndl
import hndl.zoo
from hndl._dims import free_symbols

torch = pytest.importorskip("torch")
torchinfo = pytest.importorskip("torchinfo")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml") if p.name != "broken.yaml")
# gpt2 is examples/gpt2.yaml already (the one model with tied weights); the others are cheap at these dims.
ZOO = ["resnet18", "unet", "lstm_classifier", "vit_tiny_patch16_224", "seq2seq_transformer"]
SOURCES = [pytest.param(p, id=p.stem) for p in EXAMPLES] + [pytest.param(f"zoo:{n}", id=f"zoo-{n}") for n in ZOO]
SIZES = {"B": 2, "T": 6, "S": 5, "H": 64, "W": 64}  # zoo:unet's h, w count 16-pixel tiles: 4 is 64 pixels

pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration:UserWarning")


def build(source: Path | str) -> tuple[Any, dict[str, int]]:
    graph = hndl.zoo.get(source[4:]) if isinstance(source, str) else hndl.load(source)
    torch.manual_seed(0)
    model = hndl.build(graph)
    names = {s for c in model.plan.checked.contracts for d in c.shape.dims if d is not None for s in free_symbols(d)}
    return model, {name: SIZES.get(name, 4) for name in names}


def torchinfo_summary(model: Any, dims: dict[str, int]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torchinfo.summary(model, input_data=list(model.example_inputs(**dims)), verbose=0, device="cpu")


@pytest.mark.parametrize("source", SOURCES)
def test_parameter_totals_agree_with_torchinfo(source: Path | str) -> None:
    model, dims = build(source)
    first = next(model.parameters())
    first.requires_grad_(False)  # one frozen tensor, so that the non-trainable count is compared too
    ours, theirs = model.summary(**dims), torchinfo_summary(model, dims)
    # torchinfo counts a tied tensor once per module that holds it; hndl once. The difference is exactly the
    # tensors named more than once (named_parameters without deduplication), frozen or not.
    names: dict[int, int] = {}
    tensors = {}
    for _, p in model.named_parameters(remove_duplicate=False):
        names[id(p)] = names.get(id(p), 0) + 1
        tensors[id(p)] = p
    extra = sum((names[i] - 1) * p.numel() for i, p in tensors.items())
    extra_trainable = sum((names[i] - 1) * p.numel() for i, p in tensors.items() if p.requires_grad)
    extra_bytes = sum((names[i] - 1) * p.numel() * p.element_size() for i, p in tensors.items())
    assert ours.total_params == theirs.total_params - extra
    assert ours.trainable_params == theirs.trainable_params - extra_trainable
    assert ours.non_trainable_params == first.numel()
    assert ours.non_trainable_params == theirs.total_params - theirs.trainable_params - (extra - extra_trainable)
    assert ours.param_bytes == theirs.total_param_bytes - extra_bytes
    if source == ROOT / "examples" / "gpt2.yaml":
        assert extra == 50257 * 768  # lm_head is wte: torchinfo counts it twice


def modules_by_row(model: Any) -> dict[str, Any]:
    return {step.node.qualname: model.node_module(step.node.path) for step in model.plan.steps}


@pytest.mark.parametrize("source", SOURCES)
def test_multiply_adds_agree_with_torchinfo_where_both_count_the_same_products(source: Path | str) -> None:
    model, dims = build(source)
    ours, theirs = model.summary(**dims), torchinfo_summary(model, dims)
    layers = {id(info.module): info for info in theirs.summary_list}
    modules = modules_by_row(model)
    compared = 0
    for row in ours.rows:
        module = modules.get(row.name)
        if module is None or id(module) not in layers:
            continue
        info = layers[id(module)]
        plain_linear = isinstance(module, torch.nn.Linear) and len(info.output_size) == 2
        if not (isinstance(module, (torch.nn.Conv1d, torch.nn.Conv2d)) or plain_linear):
            continue  # counted another way by torchinfo: see the module docstring
        # torchinfo adds the bias: one addition per output element.
        bias = torch.Size(info.output_size).numel() if getattr(module, "bias", None) is not None else 0
        assert info.macs == row.macs + bias, row.name
        compared += 1
    # The transformers (every linear on [B, T, D]) have no such layer; every other model has some.
    assert compared or all(len(row.output_shapes[0].split(",")) == 3 for row in ours.rows if row.op == "linear")


def test_where_torchinfo_counts_other_products_it_is_what_the_docs_say() -> None:
    # A linear layer on [B, T, D]: torchinfo multiplies its parameters by B alone; hndl (and FlopCounterMode)
    # count every token. A transposed conv: torchinfo counts its weights per output position.
    g = hndl.Graph("other")
    x = g.input("x", (2, 6, 8))
    g.output(g.add("linear", x, name="lin", out_features=4, bias=False))
    img = g.input("img", (2, 3, 5, 5))
    g.output(g.add("conv_transpose2d", img, name="up", out_channels=4, kernel_size=2, stride=2, bias=False))
    model = hndl.build(g)
    ours, theirs = model.summary(), torchinfo_summary(model, {})
    layers = {info.module: info for info in theirs.summary_list}
    rows = {row.name: row for row in ours.rows}
    lin, up = model.nodes["n_lin"], model.nodes["n_up"]
    assert rows["lin"].macs == 2 * 6 * 8 * 4
    assert layers[lin].macs == 2 * 8 * 4  # the batch dim only
    assert rows["up"].macs == 2 * 5 * 5 * 3 * 4 * 2 * 2  # every input element meets Cout x k x k weights
    assert layers[up].macs == 3 * 4 * 2 * 2 * (2 * 10 * 10)  # the weights at every output position
