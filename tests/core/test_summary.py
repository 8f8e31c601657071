"""hndl.summary / GraphModule.summary: rows and totals as data, and multiply-adds that agree with torch's
FlopCounterMode on every example (FLOPs = 2 x MACs)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import hndl
import hndl.zoo
from hndl._dims import dim_add, dim_mul, evaluate, parse_dim

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
    # Every symbol a contract names, also inside an expression (`4*h`): the examples with symbolic sizes need each.
    names = {d for c in model.plan.checked.contracts for d in re.findall(r"[A-Za-z_]\w*", str(c.shape))}
    return {name: SIZES.get(name, 4) for name in names}


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
    # A tied tensor is counted in the first row that has it and marked in the others: the rows add to the total.
    assert [row.params for row in table.rows] == [72, 8]
    assert [row.tied for row in table.rows] == [(), ("weight = a.weight",)]


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


def test_the_summary_of_a_symbolic_resnet18_fits_100_columns_and_shows_every_rows_expression(capsys):
    # Regression: symbolic multiply-adds of every conv over H and W expand to long polynomials; rows said them in
    # full (394 columns), then hid them as the word "symbolic". Now they are regrouped into the products they
    # came from, exactly, and wrap inside their column; the totals wrap under their label.
    from hndl.cli import main

    assert main(["summary", "zoo:resnet18", "--depth", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 100
    assert not any(line.rstrip().endswith("symbolic") for line in lines)
    conv1 = next(i for i, line in enumerate(lines) if line.startswith("conv1 "))
    assert lines[conv1].endswith("9408*B*((H-1)//2+1)*")
    assert lines[conv1 + 1].endswith("((W-1)//2+1)")  # the next line of the same cell, flush with the first
    assert lines[conv1 + 1].index("((W-1)") == lines[conv1].index("9408*B")
    layer4 = next(i for i, line in enumerate(lines) if line.startswith("layer4 "))
    assert "".join(line.split()[-1] for line in lines[layer4 : layer4 + 3]) == "8388608*B*((H-1)//32+1)*((W-1)//32+1)"
    assert lines[next(i for i, line in enumerate(lines) if line.startswith("MACs:")) + 1].startswith(" " * 13 + "(")


def test_symbolic_rows_hold_the_exact_expression_as_data() -> None:
    from hndl._dims import parse_dim

    table = hndl.summary(hndl.zoo.get("resnet18"), depth=1)
    rows = {row.name: row for row in table.rows}
    assert rows["conv1"].macs == "9408*B*((H-1)//2+1)*((W-1)//2+1)"
    assert rows["layer2"].macs == "524288*B*((H-1)//8+1)*((W-1)//8+1)"
    assert rows["fc"].macs == "512000*B"
    # Exact: the rows add up to the total, as polynomials, and with dims bound to the same numbers.
    total = parse_dim(table.macs)  # type: ignore[arg-type]
    added = 0
    for row in table.rows:
        added = dim_add(added, parse_dim(row.macs))  # type: ignore[arg-type]
    assert added == total
    bound = hndl.summary(hndl.zoo.get("resnet18"), depth=1, B=2, H=64, W=48)
    assert [evaluate(parse_dim(r.macs), {"B": 2, "H": 64, "W": 48}) for r in table.rows] == [  # type: ignore[arg-type]
        r.macs for r in bound.rows
    ]


def test_factored_text_regroups_strided_output_products_and_nothing_else() -> None:
    from hndl._dim_factor import factored_text

    h2 = parse_dim("(H-1)//2")
    conv = dim_mul(dim_mul(9408, parse_dim("B")), dim_mul(dim_add(h2, 1), parse_dim("(W-1)//2+1")))
    assert str(conv) == "9408*B+9408*B*((H-1)//2)+9408*B*((H-1)//2)*((W-1)//2)+9408*B*((W-1)//2)"
    assert factored_text(conv) == "9408*B*((H-1)//2+1)*((W-1)//2+1)"
    # Symbols are not factored: 128*B*S*T+121344*B*T is two costs, not the product 128*B*T*(S+948).
    cross = parse_dim("128*B*S*T+121344*B*T")
    assert factored_text(cross) == str(cross)
    # What forms no product stays as it was, with its sign; a square stays a square.
    for text in ("406528*B", "1024*B*T*T+786432*B*T", "H//2-3", "-(H//2)*5+B", "((H-1)//2)*((H-1)//2)+1", "7"):
        d = parse_dim(text)
        assert parse_dim(factored_text(d)) == d, text
    assert factored_text(parse_dim("H//2+3")) == "H//2+3"
    assert factored_text(parse_dim("2*B*(H//2)+6*B")) == "2*B*(H//2+3)"


def test_wrapped_expressions_break_between_factors() -> None:
    from hndl._summary_text import wrap_expression

    assert wrap_expression("9408*B*((H-1)//2+1)*((W-1)//2+1)", 22) == ["9408*B*((H-1)//2+1)*", "((W-1)//2+1)"]
    assert wrap_expression("406528*B", 22) == ["406528*B"]
    assert wrap_expression("((H-1)//32+1)", 6) == ["((H-1)", "//32+1", ")"]  # only a piece wider than the column


_ATOMS = ["B", "T", "H//2", "(W-1)//2", "(H-1)//4"]


@given(
    st.lists(
        st.tuples(st.integers(-50, 50), st.lists(st.sampled_from(_ATOMS), max_size=3)),
        max_size=8,
    )
)
def test_factored_text_is_the_same_polynomial(terms: list[tuple[int, list[str]]]) -> None:
    from hndl._dim_factor import factored_text

    d = parse_dim(
        "+".join(f"({c})*" + "*".join(f"({a})" for a in atoms) if atoms else f"({c})" for c, atoms in terms) or "0"
    )
    assert parse_dim(factored_text(d)) == d


def test_an_expression_with_no_product_to_regroup_prints_as_everywhere_else() -> None:
    from hndl._dim_factor import factored_text

    for text in ("786432*B*T+1024*B*T*T", "256*B*S*S+128*B*S*T+121344*B*T", "H//2-3"):
        assert factored_text(parse_dim(text)) == str(parse_dim(text))


# --- issue 27: tied rows, the symbols left, input_size, the checked graph's repr --------------------------------


def test_gpt2_tied_head_is_marked_and_the_rows_add_to_the_total() -> None:
    table = hndl.summary(hndl.load("zoo:gpt2"), B=1, T=8)
    rows = {row.name: row for row in table.rows}
    assert (rows["wte"].params, rows["wte"].tied) == (38_597_376, ())
    assert (rows["lm_head"].params, rows["lm_head"].tied) == (0, ("weight = wte.weight",))
    assert sum(row.params for row in table.rows) == table.total_params == 124_439_808
    text = str(table)
    assert "0 (tied)" in next(line for line in text.splitlines() if line.startswith("lm_head"))
    assert "tied:        lm_head.weight = wte.weight (counted once, in the first row that has it)" in text


def test_the_hint_names_every_symbol_left_unbound() -> None:
    table = hndl.summary(hndl.load("zoo:resnet50"), B=8)
    assert table.unbound == ("H", "W")
    assert str(table).endswith(
        "(H and W are not bound: give their sizes for numbers, summary(model, B=8, H=..., W=...) or hndl\n"
        "summary FILE --dims B=8,H=...,W=...; or the inputs' sizes, input_size=(...) or --input-size)"
    )
    assert "not bound" not in str(hndl.summary(hndl.load("zoo:resnet50"), B=8, H=224, W=224))


def test_input_size_binds_the_symbols_as_torchinfo_users_write_it() -> None:
    graph = hndl.load("zoo:resnet50")
    table = hndl.summary(graph, input_size=(8, 3, 224, 224))
    assert table.dims == {"B": 8, "H": 224, "W": 224}
    assert table.macs == hndl.summary(graph, B=8, H=224, W=224).macs == 32_713_474_048
    assert table.unbound == ()


def test_input_size_takes_one_size_per_input() -> None:
    g = hndl.Graph("pair")
    g.output(g.add("add", g.input("a", ("B", "D")), g.input("b", ("B", "D")), name="sum"))
    assert hndl.summary(g, input_size=[(4, 16), (4, 16)]).dims == {"B": 4, "D": 16}
    with pytest.raises(hndl.HndlError) as info:
        hndl.summary(g, input_size=(4, 16))
    assert info.value.problems[0].message == (
        "input_size must give 2 sizes of ints, one per input (a [B, D], b [B, D]), not [4, 16]"
    )


def test_an_input_size_that_does_not_fit_says_the_order_that_would() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.summary(hndl.load("zoo:resnet50"), input_size=(8, 224, 224, 3))
    (p,) = info.value.problems
    assert (p.code, p.node, p.message) == (
        "E_INPUT",
        "image",
        "input_size [8, 224, 224, 3] does not fit: dim 1 expected 3, got 224",
    )
    assert p.hint == "give it as (8, 3, 224, 224) (channels-last to channels-first)"


def test_the_command_takes_input_size() -> None:
    from hndl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summary", "zoo:resnet50", "--input-size", "8,3,224,224", "--depth", "1"]) == 0
    assert out.getvalue().splitlines()[0] == "resnet50 (zoo:resnet50)"
    assert "MACs:        32,713,474,048 (32.71 G)" in out.getvalue()


def test_the_checked_graph_prints_in_one_line() -> None:
    checked = hndl.check(hndl.load("zoo:resnet50"))
    assert (
        repr(checked)
        == str(checked)
        == ("<CheckedGraph 'resnet50': image [B, 3, H, W] float -> fc [B, 1000] float; 175 nodes checked>")
    )
    assert repr(checked.nodes[0]) == (
        "<CheckedNode conv2d 'conv1': [B, 3, H, W] float -> [B, 64, (H-1)//2+1, (W-1)//2+1] float>"
    )


def test_regression_summary_of_a_dim_inference_cannot_know_shows_it_unknown() -> None:
    # slice start=-1 on a symbolic dim gives a dim inference cannot know; summary raised DimError ('?2' is not a
    # valid symbol name) from substituting the caller's dims into it.
    g = hndl.Graph("s")
    x = g.input("x", ("B", "T", 4))
    g.output(g.add("slice", x, name="last", dim=1, start=-1))
    assert hndl.summary(g, B=2).outputs == {"last": "[2, ?, 4]"}
