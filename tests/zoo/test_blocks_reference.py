"""The blocks of MobileNetV3, EfficientNet, ConvNeXt and Swin written with built-in ops only, each against
torchvision's own block with the same weights: eval outputs bit for bit, and in training mode (stochastic depth
drawing the same random numbers from the same seed) outputs and gradients. This is what the zoo entries of
issue 21 are made of; no `module` op, no workaround. Runs in `nox -s reference` (torchvision), skips elsewhere."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from parity import randomise_batchnorm, require  # noqa: E402

import hndl  # noqa: E402

SE = """
      pool: {op: adaptive_avgpool2d, in: DW, output_size: 1}
      fc1: {op: conv2d, in: pool, out_channels: $squeeze, kernel_size: 1}
      fc1_act: {op: SQUEEZE_ACT, in: fc1}
      fc2: {op: conv2d, in: fc1_act, out_channels: $hidden, kernel_size: 1}
      gate: {op: GATE, in: fc2}
      excited: {op: mul, in: [gate, DW]}
"""

MBCONV = """
hndl: 1
name: mbconv
params: {hidden: 96, squeeze: 4, out: 16, kernel: 3, stride: 1, residual: true, p: 0.2}
inputs: {x: {shape: [B, 16, H, W]}}
nodes:
  expand: {op: conv2d, in: x, out_channels: $hidden, kernel_size: 1, bias: false}
  expand_bn: {op: batchnorm2d, in: expand}
  expand_act: {op: ACT, in: expand_bn}
  dw: {op: conv2d, in: expand_act, out_channels: $hidden, kernel_size: $kernel, stride: $stride,
       padding: "$(kernel-1)//2", groups: $hidden, bias: false}
  dw_bn: {op: batchnorm2d, in: dw}
  dw_act: {op: ACT, in: dw_bn}
SE
  project: {op: conv2d, in: excited, out_channels: $out, kernel_size: 1, bias: false}
  project_bn: {op: batchnorm2d, in: project}
  drop: {op: drop_path, in: project_bn, p: $p, when: $residual}
  residual: {op: add, in: [drop, x], when: $residual, otherwise: drop}
outputs: [residual]
"""


def spec(act: str, squeeze_act: str, gate: str) -> str:
    se = SE.replace("DW", "dw_act").replace("SQUEEZE_ACT", squeeze_act).replace("GATE", gate)
    return MBCONV.replace("SE\n", se.lstrip("\n").replace("      ", "  ")).replace("ACT", act)


def load_in_order(model: hndl.GraphModule, reference: torch.nn.Module) -> None:
    """The reference's state_dict, entry by entry in order (the specs list nodes in torchvision's order)."""
    ours, theirs = model.state_dict(), reference.state_dict()
    assert [tuple(v.shape) for v in ours.values()] == [tuple(v.shape) for v in theirs.values()]
    model.load_state_dict(dict(zip(ours, theirs.values())))


def check_same(model: hndl.GraphModule, reference: torch.nn.Module, x: torch.Tensor, *, seed: int = 4) -> None:
    model.eval()
    reference.eval()
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))
    model.train()
    reference.train()
    xs = [x.clone().requires_grad_(True) for _ in range(2)]
    outs = []
    for net, xi in zip((model, reference), xs):
        torch.manual_seed(seed)
        outs.append(net(xi))
    assert torch.equal(outs[0], outs[1])
    projection = torch.randn(outs[0].shape, generator=torch.Generator().manual_seed(2))
    for out in outs:
        (out * projection).sum().backward()
    assert torch.equal(xs[0].grad, xs[1].grad)
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad), name


def test_efficientnets_mbconv_is_torchvisions():
    efficientnet = require("torchvision.models.efficientnet")
    config = efficientnet.MBConvConfig(6, 3, 1, 16, 16, 1)
    reference = efficientnet.MBConv(config, 0.2, torch.nn.BatchNorm2d)
    randomise_batchnorm(reference)
    model = hndl.build(hndl.loads(spec("silu", "silu", "sigmoid")))
    load_in_order(model, reference)
    check_same(model, reference, torch.randn(8, 16, 10, 10))


def test_mobilenet_v3s_inverted_residual_is_torchvisions():
    mobilenetv3 = require("torchvision.models.mobilenetv3")
    config = mobilenetv3.InvertedResidualConfig(16, 5, 96, 16, True, "HS", 1, 1, 1.0)
    reference = mobilenetv3.InvertedResidual(config, torch.nn.BatchNorm2d)
    randomise_batchnorm(reference)
    text = (
        spec("hardswish", "relu", "hardsigmoid").replace("kernel: 3", "kernel: 5").replace("squeeze: 4", "squeeze: 24")
    )
    text = text.replace("  drop: {op: drop_path, in: project_bn, p: $p, when: $residual}\n", "")
    text = text.replace(
        "in: [drop, x], when: $residual, otherwise: drop", "in: [project_bn, x], when: $residual, otherwise: project_bn"
    )
    model = hndl.build(hndl.loads(text))
    load_in_order(model, reference)
    check_same(model, reference, torch.randn(4, 16, 9, 9))


def test_a_strided_block_leaves_its_residual_out():
    efficientnet = require("torchvision.models.efficientnet")
    reference = efficientnet.MBConv(efficientnet.MBConvConfig(6, 3, 2, 16, 24, 1), 0.2, torch.nn.BatchNorm2d)
    randomise_batchnorm(reference)
    graph = hndl.loads(spec("silu", "silu", "sigmoid"))
    graph.params.update(out=24, stride=2, residual=False)
    model = hndl.build(graph)
    assert "n_drop" not in model.nodes
    assert "n_residual" not in model.nodes
    load_in_order(model, reference)
    check_same(model, reference, torch.randn(4, 16, 10, 10))


CNBLOCK = """
hndl: 1
name: cnblock
params: {dim: 32, p: 0.1}
inputs: {x: {shape: [B, 32, H, W]}}
nodes:
  layer_scale: {op: parameter, shape: [$dim, 1, 1], init: full, value: 1.0e-6}
  dw: {op: conv2d, in: x, out_channels: $dim, kernel_size: 7, padding: 3, groups: $dim}
  nhwc: {op: permute, in: dw, dims: [0, 2, 3, 1]}
  norm: {op: layernorm, in: nhwc, eps: 1.0e-6}
  fc1: {op: linear, in: norm, out_features: "$4*dim"}
  act: {op: gelu, in: fc1}
  fc2: {op: linear, in: act, out_features: $dim}
  nchw: {op: permute, in: fc2, dims: [0, 3, 1, 2]}
  scaled: {op: mul, in: [layer_scale, nchw]}
  drop: {op: drop_path, in: scaled, p: $p}
  out: {op: add, in: [drop, x]}
outputs: [out]
"""


def test_convnexts_cnblock_is_torchvisions():
    convnext = require("torchvision.models.convnext")
    reference = convnext.CNBlock(32, 1e-6, 0.1)
    with torch.no_grad():
        reference.layer_scale.normal_()  # 1e-6 everywhere would hide a wrong order
    model = hndl.build(hndl.loads(CNBLOCK))
    assert torch.equal(model.nodes["n_layer_scale"].weight, torch.full((32, 1, 1), 1e-6))
    load_in_order(model, reference)
    check_same(model, reference, torch.randn(4, 32, 14, 14))


SWIN = """
hndl: 1
name: swin_attention
params: {dim: 32, heads: 2, window: 7, shift: 3, size: 14}
inputs: {x: {shape: [B, size, size, dim]}}
nodes:
  # relative position bias: an embedding of Swin's index
  table: {op: embedding, in: index, num_embeddings: "$(2*window-1)*(2*window-1)", embedding_dim: $heads}
  index: {op: buffer, shape: ["$window*window*window*window"], init: relative_position_index, window: $window}
  qkv_proj: {op: linear, in: windows, out_features: "$3*dim"}
  out_proj: {op: linear, in: merged, out_features: $dim}
  # the shifted-window mask, from region ids of the padded map (torchvision: slices filled with a count)
  rows: {op: buffer, shape: [$size], init: arange, persistent: false}
  after_window: {op: ge, in: rows, b: "$size-window"}
  after_shift: {op: ge, in: rows, b: "$size-shift"}
  band_a: {op: cast, in: after_window, dtype: int64}
  band_b: {op: cast, in: after_shift, dtype: int64}
  band: {op: add, in: [band_a, band_b]}
  row_id: {op: mul, in: band, b: 3}
  row_col: {op: reshape, in: row_id, shape: [$size, 1]}
  region: {op: add, in: [row_col, band]}
  region_w: {op: reshape, in: region, shape: ["$size//window", $window, "$size//window", $window]}
  region_p: {op: permute, in: region_w, dims: [0, 2, 1, 3]}
  region_n: {op: reshape, in: region_p, shape: [-1, "$window*window"]}
  region_i: {op: reshape, in: region_n, shape: [-1, 1, "$window*window"]}
  region_j: {op: reshape, in: region_n, shape: [-1, "$window*window", 1]}
  region_d: {op: sub, in: [region_i, region_j]}
  apart: {op: ne, in: region_d, b: 0}
  mask: {op: where, in: apart, a: -100.0, b: 0.0}
  mask5: {op: reshape, in: mask, shape: [-1, 1, "$window*window", "$window*window"]}
  # shift, partition into windows
  shifted: {op: roll, in: x, shifts: ["$-shift", "$-shift"], dims: [1, 2]}
  grid: {op: reshape, in: shifted, shape: ["$size//window", $window, "$size//window", $window, $dim], start_dim: 1}
  grid_p: {op: permute, in: grid, dims: [0, 1, 3, 2, 4, 5]}
  windows: {op: reshape, in: grid_p, shape: [-1, "$window*window", $dim]}
  qkv: {op: reshape, in: qkv_proj, shape: ["$window*window", 3, $heads, "$dim//heads"], start_dim: 1}
  qkv_p: {op: permute, in: qkv, dims: [2, 0, 3, 1, 4]}
  q: {op: select, in: qkv_p, dim: 0, index: 0}
  k: {op: select, in: qkv_p, dim: 0, index: 1}
  v: {op: select, in: qkv_p, dim: 0, index: 2}
  q_scaled: {op: scale, in: q, factor: 0.25}
  k_t: {op: transpose, in: k, dim0: -2, dim1: -1}
  scores: {op: matmul, in: [q_scaled, k_t]}
  bias: {op: reshape, in: table, shape: ["$window*window", "$window*window", $heads]}
  bias_p: {op: permute, in: bias, dims: [2, 0, 1]}
  biased: {op: add, in: [scores, bias_p]}
  per_image: {op: reshape, in: biased, shape: [-1, "$(size//window)*(size//window)", $heads, "$window*window", "$window*window"]}
  masked: {op: add, in: [per_image, mask5]}
  flat: {op: reshape, in: masked, shape: [-1, $heads, "$window*window", "$window*window"]}
  weights: {op: softmax, in: flat, dim: -1}
  attended: {op: matmul, in: [weights, v]}
  heads_last: {op: transpose, in: attended, dim0: 1, dim1: 2}
  merged: {op: reshape, in: heads_last, shape: ["$window*window", $dim], start_dim: 1}
  # reverse the windows and the shift
  back: {op: reshape, in: out_proj, shape: [-1, "$size//window", "$size//window", $window, $window, $dim]}
  back_p: {op: permute, in: back, dims: [0, 1, 3, 2, 4, 5]}
  image: {op: reshape, in: back_p, shape: [$size, $size, $dim], start_dim: 1}
  unshifted: {op: roll, in: image, shifts: [$shift, $shift], dims: [1, 2]}
outputs: [unshifted]
"""


def test_swins_shifted_window_attention_is_torchvisions():
    swin = require("torchvision.models.swin_transformer")
    reference = swin.ShiftedWindowAttention(32, [7, 7], [3, 3], num_heads=2).eval()
    model = hndl.build(hndl.loads(SWIN)).eval()
    state = reference.state_dict()
    model.load_state_dict(
        {
            "nodes.n_table.weight": state["relative_position_bias_table"],
            "nodes.n_index.value": state["relative_position_index"],
            "nodes.n_qkv_proj.weight": state["qkv.weight"],
            "nodes.n_qkv_proj.bias": state["qkv.bias"],
            "nodes.n_out_proj.weight": state["proj.weight"],
            "nodes.n_out_proj.bias": state["proj.bias"],
        }
    )
    assert torch.equal(model.nodes["n_index"].value, state["relative_position_index"])
    x = torch.randn(3, 14, 14, 32)
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))
