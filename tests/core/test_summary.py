"""hndl.summary / GraphModule.summary: rows and totals as data, and multiply-adds that agree with torch's
FlopCounterMode on every example (FLOPs = 2 x MACs)."""

from __future__ import annotations

from pathlib import Path

import pytest

import hndl

torch = pytest.importorskip("torch")
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GOOD = sorted(p for p in (ROOT / "examples").glob("*.yaml") if p.name != "broken.yaml")
SIZES = {"B": 2, "T": 6, "S": 5, "H": 32, "W": 32}


pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration:UserWarning")


def flops(model: torch.nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    # On the CPU, FlopCounterMode counts neither the fused SDPA kernel nor oneDNN's fused RNN: with the math
    # backend and oneDNN off the same products run as bmm/addmm, which it counts. hndl counts them either way.
    math_sdpa, no_onednn = sdpa_kernel(SDPBackend.MATH), torch.backends.mkldnn.flags(enabled=False)
    with FlopCounterMode(display=False) as counter, math_sdpa, no_onednn:
        model(*inputs)
    return int(counter.get_total_flops())


def symbols(model: hndl.GraphModule) -> dict[str, int]:
    names = {d for c in model.plan.checked.contracts for d in str(c.shape).strip("[]").split(", ")}
    return {name: SIZES.get(name, 4) for name in names if name.isidentifier()}


@pytest.mark.parametrize("path", GOOD, ids=lambda p: p.stem)
def test_macs_agree_with_flop_counter_mode(path: Path) -> None:
    model = hndl.build(hndl.load(path))
    dims = symbols(model)
    inputs = model.example_inputs(**dims)
    table = model.summary(**dims)
    assert table.macs * 2 == flops(model, inputs)
    assert sum(row.macs for row in table.rows) == table.macs  # type: ignore[misc]


OTHER_OPS = [
    ("conv1d", {"out_channels": 8, "kernel_size": 3, "groups": 2}, [2, 4, 16]),
    ("conv_transpose1d", {"out_channels": 6, "kernel_size": 2, "stride": 2}, [2, 4, 16]),
    ("conv_transpose2d", {"out_channels": 6, "kernel_size": 3, "stride": 2, "groups": 2}, [2, 4, 8, 8]),
    ("gru", {"hidden_size": 12, "num_layers": 2, "bidirectional": True}, [2, 5, 7]),
    ("lstm", {"hidden_size": 12}, [2, 5, 7]),
]


@pytest.mark.parametrize(("op", "params", "shape"), OTHER_OPS, ids=[o[0] for o in OTHER_OPS])
def test_macs_of_ops_no_example_uses(op: str, params: dict[str, object], shape: list[int]) -> None:
    g = hndl.Graph(op)
    g.output(g.add(op, g.input("x", shape), name="n", **params))
    model = hndl.build(g)
    assert model.summary().macs * 2 == flops(model, (torch.randn(*shape),))


def test_matmul_and_cross_attention_macs() -> None:
    g = hndl.Graph("cross")
    x, kv = g.input("x", ("B", 6, 16)), g.input("kv", ("B", 5, 12))
    att = g.add("attention", x, kv, name="att", num_heads=4)
    g.output(g.add("matmul", att, g.input("w", (16, 3)), name="mm"))
    model = hndl.build(g)
    inputs = model.example_inputs(B=3)
    assert model.summary(B=3).macs * 2 == flops(model, inputs)


def test_summary_of_a_resnet_block_as_data() -> None:
    model = hndl.build(hndl.load(ROOT / "examples" / "resnet_basic_block.yaml"))
    table = model.summary(B=16, H=56, W=56)
    assert isinstance(table, hndl.Summary)
    assert [row.name for row in table.rows][:3] == ["conv1", "bn1", "relu1"]
    skip = next(row for row in table.rows if row.name == "skip")
    assert skip.inputs == ("bn2", "x")  # the skip connection is visible
    assert skip.output_shapes == ("[16, 64, 56, 56]",)
    assert table.rows[0].layer == "Conv2d"
    assert table.trainable_params == sum(p.numel() for p in model.parameters())
    assert table.buffer_elements == sum(b.numel() for b in model.buffers())
    assert table.macs == 2 * 64 * 64 * 9 * 16 * 56 * 56
    assert table.activation_bytes == 7 * 16 * 64 * 56 * 56 * 4
    assert table.size_mb == pytest.approx((table.param_bytes + table.buffer_bytes) / 1e6)
    assert str(table).splitlines()[0] == "resnet_basic_block (B=16, H=56, W=56)"
    assert table.totals()["total_params"] == table.total_params


def test_frozen_and_tied_parameters_are_counted_once_and_apart() -> None:
    g = hndl.Graph("tied")
    a = g.add("linear", g.input("x", ("B", 8)), name="a", out_features=8)
    g.output(g.add("linear", a, name="b", out_features=8))
    model = hndl.build(g)
    model.nodes["n_b"].weight = model.nodes["n_a"].weight  # tied
    model.nodes["n_a"].bias.requires_grad_(False)
    table = hndl.summary(model)
    assert table.total_params == 64 + 8 + 8
    assert (table.trainable_params, table.non_trainable_params) == (72, 8)
    assert [row.params for row in table.rows] == [72, 72]  # a row counts its own layer's tensors


def test_summary_of_a_graph_builds_nothing_real() -> None:
    table = hndl.summary(hndl.load(ROOT / "examples" / "mlp.yaml"))
    assert table.total_params == 407_050
    assert table.macs == "406528*B"  # 784 x 512 + 512 x 10 per sample
    assert table.activation_bytes == "6184*B"


def test_summary_refuses_what_it_cannot_summarise() -> None:
    with pytest.raises(hndl.HndlError, match=r"summary\(\) takes a hndl.Graph or a built GraphModule, not str"):
        hndl.summary("mlp.yaml")  # type: ignore[arg-type]
    with pytest.raises(hndl.HndlError, match="dim 'B' must be a positive int"):
        hndl.summary(hndl.load(ROOT / "examples" / "mlp.yaml"), B=0)


def test_the_summary_of_a_symbolic_resnet18_has_no_row_wider_than_120_columns(capsys):
    # Regression: symbolic multiply-adds of every conv over H and W expand to long polynomials; rows said them in
    # full (394 columns). Rows now say "symbolic" and the totals wrap under their label.
    from hndl.cli import main

    assert main(["summary", str(ROOT / "examples" / "resnet18.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 120
    assert any(line.startswith("conv1 ") and line.endswith("symbolic") for line in lines)
    assert any(line.startswith("MACs:") for line in lines)
