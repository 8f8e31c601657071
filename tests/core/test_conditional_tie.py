"""A tie that depends on a graph parameter (SPEC 1.7): ``tie: {weight: wte.weight, when: $tie_word_embeddings}``.

Before, a node's ``tie`` could not depend on a parameter, so a spec fixed its head tied or untied (examples/qwen2
was tied, the untied Qwen2-7B needed a line deleted by hand). The tie's ``when`` is bound per use like a node's:
true ties, false leaves the layer its own parameter, and anything else is reported where the tie is written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import hndl
from hndl.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

SPEC = """
hndl: 1
name: tiny_lm
params: {tie_word_embeddings: true}
inputs:
  tokens: {shape: [B, T], dtype: int64}
nodes:
  wte:  {op: embedding, in: tokens, num_embeddings: 50, embedding_dim: 8}
  head: {op: linear, in: wte, out_features: 50, bias: false, tie: {weight: wte.weight, when: $tie_word_embeddings}}
outputs: [head]
"""

#: The same tie inside a repeated subgraph, on for some repetitions only (a per-repetition parameter list).
BLOCKS = """
hndl: 1
name: blocks
inputs:
  x: {shape: [B, 8]}
nodes:
  blocks: {op: graph, graph: block, repeat: 3, in: x, params: [{share: true}, {share: false}, {share: true}]}
outputs: [blocks]
graphs:
  block:
    params: {share: true}
    inputs:
      h: {shape: [B, 8]}
    nodes:
      a: {op: linear, in: h, out_features: 8}
      b: {op: linear, in: a, out_features: 8, tie: {weight: a.weight, when: $share}}
    outputs: [b]
"""


def _tokens() -> torch.Tensor:
    return torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(1))


def test_a_tie_when_true_ties_the_head_to_the_embedding() -> None:
    model = hndl.build(hndl.loads(SPEC))
    assert model.nodes.n_head.weight is model.nodes.n_wte.weight
    assert sum(p.numel() for p in model.parameters()) == 50 * 8


def test_a_tie_when_false_leaves_the_head_untied_with_its_own_weight() -> None:
    model = hndl.build(hndl.loads(SPEC, params={"tie_word_embeddings": False}))
    assert model.nodes.n_head.weight is not model.nodes.n_wte.weight
    assert sum(p.numel() for p in model.parameters()) == 2 * 50 * 8
    assert hndl.summary(hndl.loads(SPEC, params={"tie_word_embeddings": False})).total_params == 2 * 50 * 8
    with torch.no_grad():
        model.nodes.n_head.weight.zero_()
    assert model.nodes.n_wte.weight.abs().sum() > 0  # writing one leaves the other
    assert torch.equal(model(_tokens()), torch.zeros(2, 5, 50))


def test_a_literal_false_tie_when_is_no_tie() -> None:
    model = hndl.build(hndl.loads(SPEC.replace("$tie_word_embeddings", "false")))
    assert model.nodes.n_head.weight is not model.nodes.n_wte.weight


def test_the_python_api_takes_the_same_when() -> None:
    for value in (True, False):
        g = hndl.Graph("tiny_lm", params={"tie": value})
        t = g.input("tokens", ("B", "T"), dtype="int64")
        e = g.add("embedding", t, name="wte", num_embeddings=50, embedding_dim=8)
        g.output(
            g.add("linear", e, name="head", out_features=50, bias=False, tie={"weight": "wte.weight", "when": "$tie"})
        )
        model = hndl.build(g)
        assert (model.nodes.n_head.weight is model.nodes.n_wte.weight) is value


def test_a_tie_when_is_bound_per_repetition() -> None:
    model = hndl.build(hndl.loads(BLOCKS))
    shared = [block.n_b.weight is block.n_a.weight for block in model.nodes.n_blocks]
    assert shared == [True, False, True]


def test_dumps_keeps_a_conditional_tie() -> None:
    graph = hndl.loads(SPEC)
    text = hndl.dumps(graph)
    assert "tie: {weight: wte.weight, when: $tie_word_embeddings}" in text
    again = hndl.loads(text)
    assert again.nodes["head"].tie == {"weight": "wte.weight", "when": "$tie_word_embeddings"}
    assert hndl.dumps(again) == text
    untied = hndl.build(hndl.loads(text, params={"tie_word_embeddings": False}))
    assert untied.nodes.n_head.weight is not untied.nodes.n_wte.weight


def test_regression_a_tie_when_that_names_a_non_bool_parameter_is_e_param_at_the_tie(tmp_path: Path) -> None:
    path = tmp_path / "lm.yaml"
    path.write_text(
        SPEC.replace("$tie_word_embeddings}}", "$vocab}}").replace("{tie_word_embeddings: true}", "{vocab: 50}")
    )
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.load(path))
    problem = info.value.problems[0]
    assert problem.code == "E_PARAM"
    assert problem.location is not None
    assert problem.location.startswith(f"{path}:9:")
    assert "tie's 'when'" in problem.message
    assert "50" in problem.message
    assert "$vocab" in problem.message
    assert problem.node == "head"


def test_regression_a_tie_when_given_a_non_bool_value_is_e_param_with_file_and_line() -> None:
    # A repetition's parameter 2 where the subgraph's tie reads it as a bool: reported at the tie, for that block.
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(BLOCKS.replace("{share: false}", "{share: 2}")))
    (problem,) = info.value.problems
    assert (problem.code, problem.node) == ("E_PARAM", "blocks.1.b")
    assert problem.location is not None
    assert problem.location.startswith("<string>:16:")
    assert "must be true, false or a condition" in problem.message
    assert "got 2" in problem.message
    # and an override of the top-level parameter that is no bool is refused before any node is bound
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(hndl.loads(SPEC, params={"tie_word_embeddings": 1}))
    assert info.value.problems[0].code == "E_PARAM"
    assert "true or false" in str(info.value)


def test_regression_a_tie_when_that_is_no_bool_or_reference_is_e_spec_at_load() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.loads(SPEC.replace("$tie_word_embeddings", "yes please"))
    problem = info.value.problems[0]
    assert problem.code == "E_SPEC"
    assert problem.location is not None
    assert problem.location.startswith("<string>:9:")
    assert "'when'" in problem.message
    assert "'yes please'" in problem.message


def test_a_tie_when_naming_an_undeclared_parameter_is_e_param_with_a_did_you_mean() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(SPEC.replace("$tie_word_embeddings}}", "$tie_word_embedding}}")))
    problem = info.value.problems[0]
    assert problem.code == "E_PARAM"
    assert "tie_word_embedding" in problem.message
    assert "tie_word_embeddings" in (problem.hint or "") + problem.message


def test_the_spec_schema_accepts_a_conditional_tie_and_refuses_a_number() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    import yaml

    schema = hndl.spec_schema()
    jsonschema.validate(yaml.safe_load(SPEC), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(yaml.safe_load(SPEC.replace("$tie_word_embeddings", "3")), schema)


@pytest.mark.parametrize("tie", [True, False])
def test_qwen2_example_ties_its_head_as_tie_word_embeddings_says(tie: bool, capsys: pytest.CaptureFixture[str]) -> None:
    graph = hndl.load(EXAMPLES / "qwen2.yaml", params={"tie_word_embeddings": tie})
    with torch.device("meta"):
        model = hndl.build(graph)
    assert (model.get_submodule("lm_head").weight is model.get_submodule("model.embed_tokens").weight) is tie
    assert hndl.check(graph).warnings == []
    assert main(["check", str(EXAMPLES / "qwen2.yaml")]) == 0
    assert capsys.readouterr().err == ""
