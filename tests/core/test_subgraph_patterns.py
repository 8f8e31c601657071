"""Three patterns of parameterised subgraphs (issue 39), found writing vision models from the docs:

1. an optional learned parameter (a layer scale) left out with ``when``: a node with no input that is left out
   is not there at all, and what reads it takes its other branch;
2. a subgraph with no inputs (a constant table: an index from ``arange``, a learned bias), used by a ``graph``
   node without ``in``;
3. a symbol a subgraph's input shape binds to a number (``C`` of ``[B, C, H, W]``) used as a layer parameter
   (``out_channels: C``, ``$C * 4``), per use and per repetition.

The first test uses all three in a small ConvNeXt-V2-like model and holds it to a hand-written torch module
with the same weights.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import hndl

CONVNEXT = """
hndl: 1
name: tiny_convnext_v2
inputs:
  x: {shape: [B, 3, 32, 32]}
graphs:
  block:
    params: {layer_scale: true}
    inputs: {x: {shape: [B, C, H, W]}}
    nodes:
      dw: {op: conv2d, in: x, out_channels: C, kernel_size: 7, padding: 3, groups: C}
      to_last: {op: permute, in: dw, dims: [0, 2, 3, 1]}
      norm: {op: layernorm, in: to_last}
      fc1: {op: linear, in: norm, out_features: $C * 4}
      act: {op: gelu, in: fc1}
      fc2: {op: linear, in: act, out_features: C}
      gamma: {op: parameter, shape: [C], init: full, value: 0.5, when: $layer_scale}
      scaled: {op: mul, in: [fc2, gamma], when: $layer_scale}
      to_first: {op: permute, in: scaled, dims: [0, 3, 1, 2]}
      res: {op: add, in: [x, to_first]}
    outputs: [res]
  down:
    inputs: {x: {shape: [B, C, H, W]}}
    nodes:
      norm: {op: layernorm2d, in: x}
      conv: {op: conv2d, in: norm, out_channels: $C * 2, kernel_size: 2, stride: 2}
    outputs: [conv]
  pos_bias:
    params: {width: 8, side: 4}
    inputs: {}
    nodes:
      index: {op: buffer, shape: ["$side * side"], init: arange}
      table: {op: embedding, in: index, num_embeddings: $side * side, embedding_dim: $width}
      rows: {op: transpose, in: table, dim0: 0, dim1: 1}
      grid: {op: reshape, in: rows, shape: [1, $width, $side, $side], start_dim: 0}
    outputs: [grid]
nodes:
  stem: {op: conv2d, in: x, out_channels: 16, kernel_size: 4, stride: 4}
  stage1: {op: graph, graph: block, in: stem, repeat: 2}
  down1: {op: graph, graph: down, in: stage1}
  stage2: {op: graph, graph: block, in: down1, repeat: 2, params: {layer_scale: false}}
  bias: {op: graph, graph: pos_bias, params: {width: 32}}
  out: {op: add, in: [stage2, bias]}
outputs: [out]
"""


class _Block(nn.Module):
    def __init__(self, c: int, layer_scale: bool) -> None:
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.fc1 = nn.Linear(c, 4 * c)
        self.fc2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5)) if layer_scale else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc2(F.gelu(self.fc1(self.norm(self.dw(x).permute(0, 2, 3, 1)))))
        if self.gamma is not None:
            h = h * self.gamma
        return x + h.permute(0, 3, 1, 2)


class _TinyConvNeXtV2(nn.Module):
    """The spec above written by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 4, stride=4)
        self.stage1 = nn.Sequential(_Block(16, True), _Block(16, True))
        self.down_norm = nn.LayerNorm(16)
        self.down_conv = nn.Conv2d(16, 32, 2, stride=2)
        self.stage2 = nn.Sequential(_Block(32, False), _Block(32, False))
        self.table = nn.Embedding(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stage1(self.stem(x))
        h = self.down_conv(self.down_norm(h.permute(0, 2, 3, 1)).permute(0, 3, 1, 2))
        h = self.stage2(h)
        bias = self.table(torch.arange(16)).transpose(0, 1).reshape(1, 32, 4, 4)
        return h + bias


def _reference_weights(model: hndl.torch.GraphModule) -> dict[str, torch.Tensor]:
    """The hndl model's weights under the hand-written module's names."""
    state = model.state_dict()
    out = {
        "stem.weight": state["nodes.n_stem.weight"],
        "stem.bias": state["nodes.n_stem.bias"],
        "down_norm.weight": state["nodes.n_down1.n_norm.weight"],
        "down_norm.bias": state["nodes.n_down1.n_norm.bias"],
        "down_conv.weight": state["nodes.n_down1.n_conv.weight"],
        "down_conv.bias": state["nodes.n_down1.n_conv.bias"],
        "table.weight": state["nodes.n_bias.n_table.weight"],
    }
    for key, value in state.items():
        found = re.fullmatch(r"nodes\.n_(stage\d)\.(\d)\.n_(\w+)\.(weight|bias)", key)
        if found:
            stage, index, layer, kind = found.groups()
            out[f"{stage}.{index}.{layer}" if layer == "gamma" else f"{stage}.{index}.{layer}.{kind}"] = value
    return out


def test_a_convnext_v2_like_model_uses_all_three_patterns_and_matches_torch() -> None:
    graph = hndl.loads(CONVNEXT)
    checked = hndl.check(graph)
    assert [str(t) for t in checked.output_types] == ["[B, 32, 4, 4] float"]
    model = hndl.build(graph)
    names = set(model.state_dict())
    # Pattern 1: the layer scale exists in stage 1 only; stage 2's blocks have neither gamma nor the mul.
    assert "nodes.n_stage1.1.n_gamma.weight" in names
    assert not any("n_stage2" in n and "gamma" in n for n in names)
    assert "n_scaled" not in model.nodes["n_stage2"][0]
    # Pattern 3: widths from each use's input: 16 in stage 1, 32 after the downsample that doubles C.
    assert model.nodes["n_stage1"][1]["n_fc1"].out_features == 64
    assert model.nodes["n_stage2"][0]["n_fc1"].out_features == 128
    assert model.nodes["n_down1"]["n_conv"].out_channels == 32
    # Pattern 2: the table is computed by a graph node with no inputs.
    assert model.nodes["n_bias"]["n_index"].value.tolist() == list(range(16))

    reference = _TinyConvNeXtV2()
    reference.load_state_dict(_reference_weights(model))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        expected = reference(x)
        assert torch.allclose(model(x), expected, atol=1e-5, rtol=1e-5)

        # hndl.dumps writes the patterns as written, and hndl.load reads them back into the same model.
        text = hndl.dumps(graph)
        assert "out_channels: C," in text
        assert "out_features: $C * 4" in text
        assert "inputs: {}" in text
        again = hndl.build(hndl.loads(text))
        again.load_state_dict(model.state_dict())
        assert torch.equal(again(x), model(x))


# --- pattern 1: an optional learned parameter ------------------------------------------------------------------

SCALE = """
hndl: 1
name: scaled
params: {layer_scale: LS}
inputs:
  x: {shape: [B, 4]}
nodes:
  fc: {op: linear, in: x, out_features: 4}
  gamma: {op: parameter, shape: [4], init: full, value: 0.5, when: $layer_scale}
NODES
outputs: [OUT]
"""


def _scale(layer_scale: bool, nodes: str, out: str = "scaled") -> str:
    return SCALE.replace("LS", str(layer_scale).lower()).replace("NODES", nodes).replace("OUT", out)


def _problems(text: str) -> list[hndl.Problem]:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    return list(info.value.problems)


def test_a_parameter_left_out_by_when_needs_no_input_and_its_reader_passes_the_other_through() -> None:
    # Regression: E_PARAM "a node left out by 'when' passes its input through, so it needs one input; it has 0".
    nodes = "  scaled: {op: mul, in: [fc, gamma], when: $layer_scale}"
    x = torch.randn(3, 4)
    with_scale = hndl.build(hndl.loads(_scale(True, nodes)))
    without = hndl.build(hndl.loads(_scale(False, nodes)))
    assert "n_gamma" not in without.nodes
    assert "n_scaled" not in without.nodes
    assert not any("gamma" in name for name in without.state_dict())
    with torch.no_grad():
        assert torch.equal(with_scale(x), with_scale.nodes["n_fc"](x) * 0.5)
        assert torch.equal(without(x), without.nodes["n_fc"](x))


def test_a_reader_with_otherwise_takes_it_when_what_it_reads_is_left_out() -> None:
    nodes = "  scaled: {op: mul, in: [fc, gamma], otherwise: fc}"  # no 'when' of its own
    on = hndl.build(hndl.loads(_scale(True, nodes)))
    off = hndl.build(hndl.loads(_scale(False, nodes)))
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(on(x), on.nodes["n_fc"](x) * 0.5)
        assert torch.equal(off(x), off.nodes["n_fc"](x))
    assert [n.name for n in hndl.check(hndl.loads(_scale(False, nodes))).nodes] == ["fc"]


def test_a_node_that_reads_a_node_left_out_and_has_no_other_branch_is_e_ref() -> None:
    (p,) = _problems(_scale(False, "  scaled: {op: mul, in: [fc, gamma]}"))
    assert (p.code, p.node, p.op) == ("E_REF", "scaled", "mul")
    assert p.message == "reads 'gamma', which is left out (when: '$layer_scale') and has no input to pass through"
    assert p.hint is not None
    assert "give 'scaled' an 'otherwise'" in p.hint


def test_an_output_that_is_a_node_left_out_is_e_ref() -> None:
    (p,) = _problems(_scale(False, "", out="gamma"))
    assert p.code == "E_REF"
    assert (
        p.message
        == "output 'gamma' of graph 'scaled' is left out (when: '$layer_scale') and has no input to pass through"
    )
    assert p.hint is not None
    assert "exist in every configuration" in p.hint


def test_a_node_left_out_that_would_pass_a_node_left_out_is_not_there_either() -> None:
    nodes = "  half: {op: scale, in: gamma, factor: 0.5, when: $layer_scale}\n  scaled: {op: mul, in: [fc, half]}"
    (p,) = _problems(_scale(False, nodes))
    assert (p.code, p.node) == ("E_REF", "scaled")
    assert p.message == "reads 'half', which is left out (when: '$layer_scale') and so are all its inputs"


def test_an_otherwise_that_is_left_out_leaves_its_node_out() -> None:
    nodes = "  scaled: {op: mul, in: [fc, gamma], otherwise: gamma}\n  out: {op: relu, in: scaled}"
    (p,) = _problems(_scale(False, nodes, out="out"))
    assert (p.code, p.node) == ("E_REF", "out")
    assert p.message == "reads 'scaled', which is not there: its 'otherwise', 'gamma', is not there either"


def test_a_node_left_out_with_two_inputs_that_exist_still_needs_otherwise() -> None:
    nodes = "  scaled: {op: add, in: [fc, x, gamma], when: $layer_scale}"
    (p,) = _problems(_scale(False, nodes))
    assert (p.code, p.node) == ("E_PARAM", "scaled")
    assert p.message.endswith("needs one input; it has 2 (and 1 left out)")
    assert p.hint == "say which passes through: otherwise: <one of its inputs>"


@settings(max_examples=25, deadline=None)
@given(flags=st.lists(st.booleans(), min_size=1, max_size=4))
def test_each_repetition_leaves_its_layer_scale_out_as_its_parameters_say(flags: list[bool]) -> None:
    # Property: with per-repetition flags, a repetition has a gamma exactly when its flag is true, and the
    # model computes x + fc(x) * (0.5 if flag) per repetition.
    params = "[" + ", ".join(f"{{ls: {str(f).lower()}}}" for f in flags) + ", {}]" if len(flags) > 1 else "{ls: X}"
    params = params.replace("X", str(flags[0]).lower())
    text = f"""
hndl: 1
name: stack
inputs: {{x: {{shape: [B, 4]}}}}
graphs:
  blk:
    params: {{ls: true}}
    inputs: {{x: {{shape: [B, C]}}}}
    nodes:
      fc: {{op: linear, in: x, out_features: C}}
      gamma: {{op: parameter, shape: [C], init: full, value: 0.5, when: $ls}}
      scaled: {{op: mul, in: [fc, gamma], otherwise: fc}}
      res: {{op: add, in: [x, scaled]}}
    outputs: [res]
nodes:
  s: {{op: graph, graph: blk, in: x, repeat: {len(flags)}, params: {params}}}
outputs: [s]
"""
    model = hndl.build(hndl.loads(text))
    x = torch.randn(2, 4)
    expected = x
    with torch.no_grad():
        for r, flag in enumerate(flags):
            layers = model.nodes["n_s"][r]
            assert ("n_gamma" in layers) == flag
            expected = expected + layers["n_fc"](expected) * (0.5 if flag else 1.0)
        assert torch.allclose(model(x), expected)


# --- pattern 2: a subgraph without inputs ------------------------------------------------------------------------

TABLE = """
hndl: 1
name: net
inputs:
  x: {shape: [B, 4]}
graphs:
  table:
    inputs: {}
    nodes:
      index: {op: buffer, shape: [4], init: arange, dtype: float32}
      weight: {op: parameter, shape: [4], init: full, value: 2.0}
      t: {op: mul, in: [index, weight]}
    outputs: [t]
nodes:
  t: {op: graph, graph: table USE}
  y: {op: add, in: [x, t]}
outputs: [y]
"""


def test_a_subgraph_without_inputs_is_used_without_in() -> None:
    # Regression: E_REF "graph takes 1 or more inputs, got 0".
    graph = hndl.loads(TABLE.replace(" USE", ""))
    model = hndl.build(graph)
    x = torch.randn(3, 4)
    with torch.no_grad():
        assert torch.equal(model(x), x + torch.arange(4.0) * 2.0)
    assert sorted(model.state_dict()) == ["nodes.n_t.n_index.value", "nodes.n_t.n_weight.weight"]
    seen: list[tuple[object, ...]] = []
    model.nodes["n_t"].register_forward_hook(lambda module, args, out: seen.append(args))
    model(x)
    assert seen == [()]  # a hooked block is called, with no inputs
    again = hndl.build(hndl.loads(hndl.dumps(graph)))
    again.load_state_dict(model.state_dict())
    assert torch.equal(again(x), model(x))


def test_a_subgraph_without_inputs_used_with_repeat_1_keeps_the_repetition_level() -> None:
    model = hndl.build(hndl.loads(TABLE.replace(" USE", ", repeat: 1")))
    assert "nodes.n_t.0.n_weight.weight" in model.state_dict()


def test_a_subgraph_without_inputs_cannot_repeat() -> None:
    (p,) = _problems(TABLE.replace(" USE", ", repeat: 3"))
    assert (p.code, p.node) == ("E_PARAM", "t")
    assert p.message == (
        "graph 'table' takes no inputs, so its repetitions have nothing to pass from one to the next; "
        "repeat must be 1, got 3"
    )
    assert p.location is not None
    assert p.location.endswith(":15:32")


def test_a_subgraph_without_inputs_given_one_is_e_ref() -> None:
    (p,) = _problems(TABLE.replace(" USE", ", in: x"))
    assert (p.code, p.message, p.expected, p.actual) == ("E_REF", "graph 'table' takes 0 inputs, got 1", "none", "x")


def test_a_subgraph_with_inputs_used_without_in_says_how_many_it_takes() -> None:
    text = TABLE.replace("inputs: {}", "inputs: {z: {shape: [4]}}").replace(" USE", "")
    (p,) = _problems(text)
    assert (p.code, p.message, p.expected, p.actual) == ("E_REF", "graph 'table' takes 1 input, got 0", "z", "none")


# --- pattern 3: sizes of a subgraph's input shape as layer parameters ------------------------------------------

WIDEN = """
hndl: 1
name: widen
inputs:
  x: {shape: [B, 3, 8, 8]}
graphs:
  blk:
    inputs: {x: {shape: [B, C, H, W]}}
    nodes:
      same: {op: conv2d, in: x, out_channels: C, kernel_size: [K, K], padding: 1}
      wide: {op: conv2d, in: same, out_channels: $C * 2, kernel_size: 1}
    outputs: [wide]
nodes:
  s: {op: graph, graph: blk, in: x, repeat: 3}
outputs: [s]
"""


def test_a_subgraph_uses_its_inputs_channel_symbol_as_a_layer_parameter() -> None:
    # Regression: E_PARAM "parameter 'out_channels' must be integer, got string 'C'".
    text = WIDEN.replace("[K, K]", "3")
    model = hndl.build(hndl.loads(text))
    # Each repetition binds its own C: 3, then 6, then 12.
    widths = [
        (model.nodes["n_s"][r]["n_same"].out_channels, model.nodes["n_s"][r]["n_wide"].out_channels) for r in range(3)
    ]
    assert widths == [(3, 6), (6, 12), (12, 24)]
    assert model(torch.randn(2, 3, 8, 8)).shape == (2, 24, 8, 8)
    assert "out_channels: C," in hndl.dumps(hndl.loads(text))


def test_a_size_may_stand_in_a_list_parameter() -> None:
    text = (
        WIDEN.replace("[B, C, H, W]", "[B, C, K, K]")
        .replace("repeat: 3", "repeat: 1")
        .replace("padding: 1", "padding: 0")
    )
    model = hndl.build(hndl.loads(text.replace("x: {shape: [B, 3, 8, 8]}", "x: {shape: [B, 3, 3, 3]}")))
    assert model.nodes["n_s"][0]["n_same"].kernel_size == (3, 3)


def test_a_size_known_only_at_run_time_is_e_param() -> None:
    top = WIDEN.replace("[B, 3, 8, 8]", "[B, D, 8, 8]").replace("[K, K]", "3")
    problems = _problems(top)
    assert [(p.code, p.node) for p in problems] == [("E_PARAM", "s.0.same"), ("E_PARAM", "s.0.wide")]
    p = problems[0]
    assert p.message == (
        "parameter 'out_channels' must be integer, got string 'C'; 'C' is a size of input 'x' ([B, C, H, W]), "
        "here D, only known when the model runs, not a number the layers can be built with"
    )
    assert p.hint is not None
    assert p.hint.startswith("a layer's sizes are fixed when it is built")


def test_an_expression_over_a_size_known_only_at_run_time_is_e_param() -> None:
    text = """
hndl: 1
name: top
inputs:
  x: {shape: [B, T, D]}
nodes:
  fc: {op: linear, in: x, out_features: $D * 2}
outputs: [fc]
"""
    (p,) = _problems(text)
    assert (p.code, p.node) == ("E_PARAM", "fc")
    assert p.message == (
        "'$D * 2' names 'D', which is a size of input 'x' ([B, T, D]) only known when the model runs, not a "
        "number the layers can be built with"
    )


def test_a_declared_parameter_wins_over_a_size_of_the_same_name() -> None:
    text = WIDEN.replace("[K, K]", "3").replace("    inputs: {x:", "    params: {C: 3}\n    inputs: {x:")
    (p,) = _problems(text)  # the second repetition gets 6 channels where the graph says C is 3
    assert (p.code, p.node) == ("E_SHAPE", "s")
    assert "repetition 1" in p.message


def test_a_name_that_is_no_size_is_still_refused_as_before() -> None:
    (p,) = _problems(WIDEN.replace("[K, K]", "3").replace("out_channels: C,", "out_channels: Q,"))
    assert (p.code, p.node, p.message) == (
        "E_PARAM",
        "s.0.same",
        "parameter 'out_channels' must be integer, got string 'Q'",
    )


@settings(max_examples=30, deadline=None)
@given(
    channels=st.lists(st.integers(1, 12), min_size=1, max_size=3),
    factor=st.integers(1, 4),
    bare=st.booleans(),
)
def test_each_use_binds_the_size_of_its_own_input(channels: list[int], factor: int, bare: bool) -> None:
    # Property: a linear block whose widths come from its input's D gives [B, D*factor] for every use, each use
    # fed another width.
    width = "D" if bare else "$D"
    uses = "\n".join(f"  u{i}: {{op: graph, graph: blk, in: x{i}}}" for i in range(len(channels)))
    inputs = "\n".join(f"  x{i}: {{shape: [B, {c}]}}" for i, c in enumerate(channels))
    text = f"""
hndl: 1
name: uses
inputs:
{inputs}
graphs:
  blk:
    inputs: {{x: {{shape: [B, D]}}}}
    nodes:
      a: {{op: linear, in: x, out_features: {width}}}
      b: {{op: linear, in: a, out_features: $D * {factor}}}
    outputs: [b]
nodes:
{uses}
outputs: [{", ".join(f"u{i}" for i in range(len(channels)))}]
"""
    checked = hndl.check(hndl.loads(text))
    assert [str(t) for t in checked.output_types] == [f"[B, {c * factor}] float" for c in channels]


def test_the_json_schema_accepts_sizes_and_references_in_subgraphs_only() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    validator = jsonschema.Draft202012Validator(hndl.spec_schema())
    assert list(validator.iter_errors(yaml.safe_load(CONVNEXT))) == []
    top_level = CONVNEXT.replace(
        "stem: {op: conv2d, in: x, out_channels: 16", "stem: {op: conv2d, in: x, out_channels: C"
    )
    assert not validator.is_valid(yaml.safe_load(top_level))  # the top level's symbols are never numbers
    assert not validator.is_valid(yaml.safe_load(CONVNEXT.replace("kernel_size: 7,", "kernel_size: 7.5,")))
