"""Weight tying: a node's ``tie`` makes its layer hold another node's Parameter, as PyTorch ties weights.

One Parameter under both names (``state_dict`` has both keys, ``parameters()`` yields it once), kept by
``dumps``/``loads``, ``copy.deepcopy``, ``state_dict``/``load_state_dict``, ``hndl.func.functional_call`` (with
both names or one, as ``torch.func`` does) and the runtime's stores record; wrong ties are reported at build.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

import hndl
from hndl.cli import main

SPEC = """
hndl: 1
name: tiny_lm
inputs:
  tokens: {shape: [B, T], dtype: int64}
nodes:
  wte: {op: embedding, in: tokens, num_embeddings: 50, embedding_dim: 8}
  mix: {op: linear, in: wte, out_features: 8}
  head: {op: linear, in: mix, out_features: 50, bias: false, tie: {weight: wte.weight}}
outputs: [head]
"""

TIED = ("nodes.n_head.weight", "nodes.n_wte.weight")


def tied_model() -> hndl.torch.GraphModule:
    torch.manual_seed(0)
    return hndl.build(hndl.loads(SPEC))


def tokens() -> torch.Tensor:
    return torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(1))


def test_the_built_model_holds_one_parameter_under_both_names() -> None:
    model = tied_model()
    assert model.nodes.n_head.weight is model.nodes.n_wte.weight
    assert isinstance(model.nodes.n_head.weight, torch.nn.Parameter)
    assert set(TIED) <= set(model.state_dict())
    names = [n for n, _ in model.named_parameters()]
    assert "nodes.n_wte.weight" in names
    assert "nodes.n_head.weight" not in names
    assert sum(p.numel() for p in model.parameters()) == 50 * 8 + (8 * 8 + 8)
    assert set(TIED) <= {n for n, _ in model.named_parameters(remove_duplicate=False)}


def test_the_python_api_ties_the_same_way() -> None:
    g = hndl.Graph("tiny_lm")
    t = g.input("tokens", ("B", "T"), dtype="int64")
    e = g.add("embedding", t, name="wte", num_embeddings=50, embedding_dim=8)
    g.output(g.add("linear", e, name="head", out_features=50, bias=False, tie={"weight": "wte.weight"}))
    model = hndl.build(g)
    assert model.nodes.n_head.weight is model.nodes.n_wte.weight
    assert hndl.loads(hndl.dumps(g)).nodes["head"].tie == {"weight": "wte.weight"}


def test_dumps_and_loads_round_trip_the_tie() -> None:
    text = hndl.dumps(hndl.loads(SPEC))
    assert "tie: {weight: wte.weight}" in text
    assert hndl.dumps(hndl.loads(text)) == text
    model = hndl.build(hndl.loads(text))
    assert model.nodes.n_head.weight is model.nodes.n_wte.weight


def test_deepcopy_keeps_the_tie_and_runs() -> None:
    model = tied_model()
    model(tokens())
    clone = copy.deepcopy(model)
    assert clone.nodes.n_head.weight is clone.nodes.n_wte.weight
    assert clone.nodes.n_head.weight is not model.nodes.n_head.weight
    torch.testing.assert_close(clone(tokens()), model(tokens()))


def test_state_dict_round_trip_keeps_the_tie() -> None:
    source, target = tied_model(), hndl.build(hndl.loads(SPEC))
    with torch.no_grad():
        source.nodes.n_wte.weight.mul_(3)
    target.load_state_dict(source.state_dict())
    assert target.nodes.n_head.weight is target.nodes.n_wte.weight
    torch.testing.assert_close(target(tokens()), source(tokens()))


def test_a_tied_model_stays_on_the_fast_path_and_trains_one_tensor() -> None:
    model = tied_model()
    model(tokens())
    model(tokens()).sum().backward()
    assert model.validations == 1
    grad = model.nodes.n_wte.weight.grad
    assert grad is not None
    assert grad is model.nodes.n_head.weight.grad


def test_untying_by_assignment_is_no_state_change() -> None:
    # Assigning a fresh Parameter of the same shape is what a user does to untie; it matches the build.
    model = tied_model()
    model(tokens())
    model.nodes.n_head.weight = torch.nn.Parameter(torch.zeros(50, 8))
    assert model(tokens()).abs().sum() == 0


@pytest.mark.needs("hndl-func")
@pytest.mark.parametrize("names", [TIED, TIED[:1], TIED[1:]], ids=["both", "head", "wte"])
@pytest.mark.parametrize("strict", [False, True])
def test_functional_call_with_both_names_or_one_behaves_as_torch_func(names: tuple[str, ...], strict: bool) -> None:
    hndl_func = pytest.importorskip("hndl.func")
    model = tied_model()
    weight = torch.randn(50, 8)
    params = {n: weight for n in names}
    if strict:
        params.update({n: t for n, t in model.named_parameters() if n not in TIED})
    got = hndl_func.functional_call(model, params, (tokens(),), strict=strict)
    expected = torch.func.functional_call(model, params, (tokens(),), strict=strict)
    torch.testing.assert_close(got, expected)
    # The value stands for both names: the head uses the new weight too.
    embedded = torch.nn.functional.embedding(tokens(), weight)
    mixed = model.nodes.n_mix(embedded)
    torch.testing.assert_close(got, mixed @ weight.T)


@pytest.mark.needs("hndl-func")
def test_functional_call_with_two_different_values_for_a_tie_fails_as_torch_func_does() -> None:
    hndl_func = pytest.importorskip("hndl.func")
    model = tied_model()
    params = {TIED[0]: torch.randn(50, 8), TIED[1]: torch.randn(50, 8)}
    with pytest.raises(ValueError, match="tied"):
        torch.func.functional_call(model, params, (tokens(),))
    with pytest.raises(ValueError, match="tied"):
        hndl_func.functional_call(model, params, (tokens(),))


def test_summary_counts_a_tied_parameter_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "lm.yaml"
    path.write_text(SPEC)
    assert main(["summary", str(path)]) == 0
    out = capsys.readouterr().out
    once = 50 * 8 + 8 * 8 + 8  # wte (shared with head), mix's weight and bias
    assert re.search(rf"^params:\s+{once} \(trainable {once}, non-trainable 0\)$", out, re.M)
    assert hndl.summary(tied_model()).totals()["total_params"] == once


# --- mistakes ------------------------------------------------------------------------------------------------


def problems(text: str) -> list[hndl.Problem]:
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(text))
    return info.value.problems


def test_a_tie_of_another_shape_is_e_shape_naming_both_nodes() -> None:
    (p,) = problems(SPEC.replace("out_features: 50, bias", "out_features: 40, bias"))
    assert (p.code, p.node, p.op) == ("E_SHAPE", "head", "linear")
    assert "linear 'head' has weight of shape [40, 8]" in p.message
    assert "embedding 'wte' has weight of shape [50, 8]" in p.message
    assert p.location == "<string>:9:3"  # the node's line


def test_a_transposed_tie_is_e_shape_with_the_layout_hint() -> None:
    spec = SPEC.replace("mix: {op: linear, in: wte, out_features: 8}", "mix: {op: linear, in: wte, out_features: 50}")
    spec = spec.replace("out_features: 50, bias: false", "out_features: 8, bias: false")
    (p,) = problems(spec)
    assert p.code == "E_SHAPE"
    assert "transpose" in (p.hint or "")


def test_a_tie_to_an_unknown_node_is_e_ref_with_a_suggestion() -> None:
    (p,) = problems(SPEC.replace("tie: {weight: wte.weight}", "tie: {weight: wtee.weight}"))
    assert (p.code, p.node) == ("E_REF", "head")
    assert "'wtee' is no node of graph 'tiny_lm'" in p.message
    assert p.hint == "did you mean 'wte'?"


def test_a_tie_to_an_unknown_parameter_is_e_ref() -> None:
    (p,) = problems(SPEC.replace("tie: {weight: wte.weight}", "tie: {weight: wte.wieght}"))
    assert (p.code, p.node) == ("E_REF", "head")
    assert "embedding 'wte' has no parameter 'wieght'" in p.message
    assert p.hint == "did you mean 'weight'?"


def test_tying_a_parameter_the_layer_does_not_have_is_e_param() -> None:
    (p,) = problems(SPEC.replace("tie: {weight: wte.weight}", "tie: {bias: wte.weight}"))
    assert (p.code, p.node) == ("E_PARAM", "head")
    assert "no parameter 'bias'" in p.message


def test_a_node_cannot_tie_to_itself() -> None:
    (p,) = problems(SPEC.replace("tie: {weight: wte.weight}", "tie: {weight: head.weight}"))
    assert p.code == "E_REF"
    assert "cannot share its own parameter" in p.message


def test_a_malformed_tie_is_e_spec_at_load() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(SPEC.replace("tie: {weight: wte.weight}", "tie: wte.weight"))
    (p,) = info.value.problems
    assert p.code == "E_SPEC"
    assert p.hint == "e.g. tie: {weight: wte.weight}"


def test_ties_inside_a_repeated_subgraph_refer_to_their_own_repetition() -> None:
    spec = """
hndl: 1
inputs: {x: {shape: [B, 4]}}
nodes:
  blocks: {op: graph, graph: pair, in: x, repeat: 2}
outputs: [blocks]
graphs:
  pair:
    inputs: {x: {shape: [B, 4]}}
    nodes:
      a: {op: linear, in: x, out_features: 4}
      b: {op: linear, in: a, out_features: 4, tie: {weight: a.weight}}
    outputs: [b]
"""
    model = hndl.build(hndl.loads(spec))
    first, second = model.nodes.n_blocks
    assert first.n_b.weight is first.n_a.weight
    assert second.n_b.weight is second.n_a.weight
    assert first.n_a.weight is not second.n_a.weight
    assert sum(p.numel() for p in model.parameters()) == 2 * (16 + 4 + 4)
