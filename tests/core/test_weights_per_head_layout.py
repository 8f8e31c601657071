"""The ``per_head`` layout (issue 38): a projection fused head by head, GPT-NeoX's ``query_key_value`` (``[H * 3 *
Dh, D]`` laid out as ``[H, 3, Dh, D]``), loaded into separate q/k/v projections by a rule string, with no Python
``Layout`` subclass. Read with ``rows`` instead it loads with the same shapes and computes something else, which
is the mistake this layout exists to prevent. The real GPT-NeoX model is in tests/zoo/test_layers_reference.py.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch
from torch.nn import functional as F

import hndl
from hndl.weights import Flatten, PerHead, Rows, as_layout, rule

H, DH, D = 4, 8, 32

SPEC = f"""
hndl: 1
name: neox_attention
inputs:
  x: {{shape: [B, T, {D}]}}
nodes:
  attention: {{op: attention, in: x, fused: false, num_heads: {H}, causal: true}}
outputs: [attention]
"""


def neox_attention(x: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
    """GPT-NeoX's attention without rotary, as transformers writes it: the fused projection viewed per head."""
    b, t, _ = x.shape
    qkv = F.linear(x, state["query_key_value.weight"], state["query_key_value.bias"])
    q, k, v = qkv.view(b, t, -1, 3 * DH).transpose(1, 2).chunk(3, dim=-1)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(y.transpose(1, 2).reshape(b, t, D), state["dense.weight"], state["dense.bias"])


@pytest.fixture
def checkpoint() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "query_key_value.weight": torch.randn(3 * H * DH, D, generator=gen) / 4,
        "query_key_value.bias": torch.randn(3 * H * DH, generator=gen),
        "dense.weight": torch.randn(D, D, generator=gen) / 4,
        "dense.bias": torch.randn(D, generator=gen),
    }


def rules(layouts: tuple[str, str, str]) -> list:
    return [
        rule(
            "query_key_value.{t}",
            *((f"nodes.n_attention.{p}_proj.{{t}}", layout) for p, layout in zip("qkv", layouts, strict=True)),
        ),
        rule("dense.{t}", "nodes.n_attention.o_proj.{t}"),
    ]


PER_HEAD = tuple(f"per_head({i}, 3, heads={H})" for i in range(3))


def test_a_fused_per_head_projection_loads_by_rule_strings_and_gives_neoxs_outputs(checkpoint):
    model = hndl.build(hndl.loads(SPEC)).eval()
    report = hndl.load_state_dict(model, checkpoint, rules(PER_HEAD))
    assert "nodes.n_attention.k_proj.weight (rows 1/3..2/3 of each of 4 heads)" in str(report)
    x = torch.randn(2, 7, D)
    with torch.no_grad():
        assert torch.equal(model(x), neox_attention(x, checkpoint))


def test_regression_a_per_head_projection_read_as_rows_has_the_right_shapes_and_the_wrong_outputs(checkpoint):
    model = hndl.build(hndl.loads(SPEC)).eval()
    hndl.load_state_dict(model, checkpoint, rules(("rows 0/3..1/3", "rows 1/3..2/3", "rows 2/3..3/3")))
    x = torch.randn(2, 7, D)
    with torch.no_grad():
        assert not torch.allclose(model(x), neox_attention(x, checkpoint), atol=1e-2)


def test_per_head_takes_each_heads_part_as_the_per_head_view_does():
    weight = torch.arange(3 * H * DH * 5).reshape(3 * H * DH, 5)
    for i in range(3):
        layout = as_layout(f"per_head({i}, 3, heads={H})")
        assert layout == PerHead(Fraction(i, 3), Fraction(i + 1, 3), H)
        assert layout.expected_shape(tuple(weight.shape)) == (H * DH, 5)
        assert torch.equal(layout.convert(weight), weight.view(H, 3, DH, 5)[:, i].reshape(H * DH, 5))
    bias = torch.arange(3 * H * DH)
    assert torch.equal(as_layout("per_head(2, 3, heads=4)").convert(bias), bias.view(H, 3, DH)[:, 2].reshape(-1))


def test_per_head_split_reads_a_grouped_layout_with_unequal_parts():
    # Per key/value group: 2 query heads, then 1 key and 1 value head (Falcon's grouped layout), 3 groups.
    groups, per_group = 3, 4
    weight = torch.arange(groups * per_group * DH * 2).reshape(groups * per_group * DH, 2)
    q, k, v = PerHead.split(2, 1, 1, heads=groups)
    blocks = weight.view(groups, per_group, DH, 2)
    assert torch.equal(q.convert(weight), blocks[:, :2].reshape(-1, 2))
    assert torch.equal(k.convert(weight), blocks[:, 2].reshape(-1, 2))
    assert torch.equal(v.convert(weight), blocks[:, 3].reshape(-1, 2))
    assert str(q) == "rows 0..1/2 of each of 3 heads"


def test_per_head_along_another_dim():
    weight = torch.arange(5 * 3 * H * 2).reshape(5, 3 * H * 2)  # [in, out], as GPT-2's Conv1D stores it
    layout = PerHead(Fraction(1, 3), Fraction(2, 3), H, dim=1)
    assert layout.expected_shape((5, 3 * H * 2)) == (5, H * 2)
    assert torch.equal(layout.convert(weight), weight.view(5, H, 3, 2)[:, :, 1].reshape(5, H * 2))
    assert str(layout) == "rows 1/3..2/3 of each of 4 heads of dim 1"


def test_rows_and_per_head_with_one_head_are_the_same_split():
    weight = torch.randn(12, 3)
    assert torch.equal(PerHead(Fraction(1, 3), Fraction(2, 3), 1).convert(weight), Rows("1/3", "2/3").convert(weight))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("per_head(3, 3, heads=4)", "part 3 of 3 parts does not exist (parts count from 0)"),
        ("per_head(0, 3, heads=0)", "heads must be a positive integer, got 0"),
        ("per_head(0, 3)", "is not 'per_head(i, n, heads=H)' with whole numbers"),
        ("per_head(0, 3, heads=H)", "is not 'per_head(i, n, heads=H)' with whole numbers"),
        ("per head 0/3", "'per_head(i, n, heads=H)'"),
    ],
)
def test_a_malformed_per_head_layout_is_e_params_naming_the_rule(text, message):
    with pytest.raises(hndl.HndlError) as info:
        hndl.weights.as_rules([("qkv.weight", ("q.weight", text))])
    (p,) = info.value.problems
    assert p.code == "E_PARAMS"
    assert p.message.startswith("rule 0: ")
    assert message in p.message


def test_regression_a_checkpoint_whose_rows_do_not_split_into_the_heads_is_refused_before_copying(checkpoint):
    model = hndl.build(hndl.loads(SPEC)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_state_dict(model, checkpoint, rules(tuple(f"per_head({i}, 3, heads=5)" for i in range(3))))
    assert info.value.code == "E_PARAMS"
    assert "96 rows do not split into 5 heads" in str(info.value)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_head_block_that_does_not_divide_into_the_parts_is_refused():
    with pytest.raises(ValueError, match="a head's 4 rows do not split at 0 and 1/3"):
        as_layout("per_head(0, 3, heads=2)").expected_shape((8, 2))


def test_flatten_reads_a_weight_kept_as_1_1_1_c():
    layout = as_layout("flatten")
    assert layout == Flatten()
    assert layout.expected_shape((1, 1, 1, 6)) == (6,)
    assert torch.equal(layout.convert(torch.arange(6.0).view(1, 1, 1, 6)), torch.arange(6.0))
    assert str(layout) == "flatten"
