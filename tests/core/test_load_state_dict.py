"""hndl.load_state_dict from mappings: rules (renames, splits, joins, transposes, drops), strict and non-strict
loads, dtypes, tied weights, the report, and every way a load is refused without touching the model."""

from __future__ import annotations

import subprocess
import sys
from fractions import Fraction

import pytest
import small_models
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hndl
from hndl.weights import Chain, Concat, Layout, LoadReport, Rows, Rule, Same, Target, Transpose, rule


def mlp() -> hndl.GraphModule:
    torch.manual_seed(0)
    return small_models.mlp(6, 4, 3)


def qkv_model(fused: bool) -> hndl.GraphModule:
    """Projections of a 4-wide input to queries, keys and values: one fused linear, or three."""
    g = hndl.Graph("proj")
    x = g.input("x", ("B", 4))
    if fused:
        g.output(g.add("linear", x, name="qkv", out_features=12))
    else:
        g.output([g.add("linear", x, name=n, out_features=w) for n, w in (("q", 4), ("k", 2), ("v", 2))])
    torch.manual_seed(0)
    return hndl.build(g)


def tied_lm() -> hndl.GraphModule:
    g = hndl.Graph("lm")
    ids = g.input("ids", ("B", "T"), dtype="int64")
    h = g.add("embedding", ids, name="emb", num_embeddings=11, embedding_dim=8)
    g.output(g.add("linear", h, name="head", out_features=11, bias=False, tie={"weight": "emb.weight"}))
    return hndl.build(g)


def bn_model() -> hndl.GraphModule:
    g = hndl.Graph("bn")
    g.output(g.add("batchnorm1d", g.input("x", ("B", 3)), name="bn"))
    return hndl.build(g)


def snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def assert_unchanged(model: torch.nn.Module, before: dict[str, torch.Tensor]) -> None:
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key


def refused(model, source, rules=(), strict=True) -> hndl.HndlError:
    before = snapshot(model)
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_state_dict(model, source, rules, strict)
    assert all(p.code == "E_PARAMS" for p in info.value.problems)
    assert_unchanged(model, before)  # all or nothing
    return info.value


def random_like(model: torch.nn.Module, seed: int = 7) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) for k, v in model.state_dict().items()}


# --- the plain case ---------------------------------------------------------------------------------------


def test_a_state_dict_with_the_models_own_names_loads_and_the_report_says_so():
    model = mlp()
    state = random_like(model)
    report = hndl.load_state_dict(model, state)
    assert isinstance(report, LoadReport)
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key])
    assert report.missing_keys == report.unexpected_keys == report.dropped_keys == ()
    assert report.model_keys == tuple(state)
    assert str(report) == "\n".join(
        [
            "loaded 4 checkpoint keys from the state_dict into 4 keys of graph 'mlp':",
            "  nodes.n_hidden.weight -> nodes.n_hidden.weight",
            "  nodes.n_hidden.bias -> nodes.n_hidden.bias",
            "  nodes.n_out.weight -> nodes.n_out.weight",
            "  nodes.n_out.bias -> nodes.n_out.bias",
        ]
    )


def test_hndl_load_state_dict_is_hndl_weights_load_state_dict():
    model, state = mlp(), random_like(mlp())
    assert hndl.weights.load_state_dict(model, state).model_keys == hndl.load_state_dict(model, state).model_keys


def test_loading_keeps_the_models_tensors_and_its_validated_signature():
    model = mlp()
    x = torch.randn(2, 6)
    model(x)
    weight = model.nodes.n_hidden.weight
    hndl.load_state_dict(model, random_like(model))
    assert model.nodes.n_hidden.weight is weight  # copied into, not replaced
    model(x)
    assert model.validations == 1  # values changed, registered state did not: still the fast path


def test_importing_hndl_weights_does_not_import_torch():
    code = "import sys, hndl.weights; hndl.weights.rule('a.{t}', 'b.{t}'); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# --- renames ----------------------------------------------------------------------------------------------


def test_fields_carry_over_from_checkpoint_keys_to_model_keys():
    model = mlp()
    state = {"fc1.weight": torch.ones(4, 6), "fc1.bias": torch.zeros(4), "fc2.weight": torch.ones(3, 4)}
    state["fc2.bias"] = torch.full((3,), 2.0)
    report = hndl.load_state_dict(
        model, state, [rule("fc1.{t}", "nodes.n_hidden.{t}"), rule("fc2.{t}", "nodes.n_out.{t}")]
    )
    assert torch.equal(model.nodes.n_out.bias, torch.full((3,), 2.0))
    assert [(item.sources, item.targets) for item in report.loaded][:1] == [
        (("fc1.weight",), (("nodes.n_hidden.weight", "same"),))
    ]


def test_a_star_field_takes_several_parts_so_a_ddp_prefix_comes_off():
    model = mlp()
    state = {f"module.{k}": v for k, v in random_like(model).items()}
    hndl.load_state_dict(model, state, [rule("module.{key*}", "{key*}")])
    assert torch.equal(model.nodes.n_out.weight, state["module.nodes.n_out.weight"])


def test_rules_may_be_pairs_or_a_mapping():
    state = {"fc1.weight": torch.ones(4, 6), "fc1.bias": torch.zeros(4), "fc2.weight": torch.ones(3, 4)}
    state["fc2.bias"] = torch.zeros(3)
    pairs = [("fc1.{t}", "nodes.n_hidden.{t}"), ("fc2.{t}", "nodes.n_out.{t}")]
    as_pairs = hndl.load_state_dict(mlp(), state, pairs)
    as_mapping = hndl.load_state_dict(mlp(), state, dict(pairs))
    assert as_pairs.loaded == as_mapping.loaded


def test_the_first_matching_rule_wins_and_unmatched_keys_keep_their_names():
    model = mlp()
    state = random_like(model)
    state["special.weight"] = state.pop("nodes.n_out.weight")
    rules = [rule("special.{t}", "nodes.n_out.{t}"), rule("special.{t}", "nowhere.{t}")]
    report = hndl.load_state_dict(model, state, rules)
    assert torch.equal(model.nodes.n_out.weight, state["special.weight"])
    assert report.loaded[0].sources == ("nodes.n_hidden.weight",)


def test_a_rule_without_target_drops_the_key_and_the_report_lists_it():
    model = mlp()
    state = random_like(model)
    state["mask.bias"] = torch.ones(3)
    report = hndl.load_state_dict(model, state, [rule("mask.{t}")])
    assert report.dropped_keys == ("mask.bias",)
    assert str(report).endswith("dropped by a rule:\n  mask.bias")


# --- layouts ----------------------------------------------------------------------------------------------


def test_a_transposed_layout_is_transposed_on_the_way_in():
    model = mlp()
    conv1d = {"h.w": torch.randn(6, 4), "h.b": torch.randn(4), "o.w": torch.randn(4, 3), "o.b": torch.randn(3)}
    rules = {
        "h.w": ("nodes.n_hidden.weight", "transpose"),
        "h.b": "nodes.n_hidden.bias",
        "o.w": ("nodes.n_out.weight", Transpose()),
        "o.b": "nodes.n_out.bias",
    }
    report = hndl.load_state_dict(model, conv1d, rules)
    assert torch.equal(model.nodes.n_hidden.weight, conv1d["h.w"].t())
    assert torch.equal(model.nodes.n_out.weight, conv1d["o.w"].t())
    assert "  h.w -> nodes.n_hidden.weight (transpose)" in str(report).splitlines()


def test_a_fused_tensor_splits_into_parts_of_any_sizes():
    model = qkv_model(fused=False)  # q is 4 wide, k and v 2 (grouped-query attention's proportions)
    fused = {"c_attn.weight": torch.randn(8, 4), "c_attn.bias": torch.randn(8)}
    q, k, v = Rows.split(2, 1, 1)
    rules = [rule("c_attn.{t}", ("nodes.n_q.{t}", q), ("nodes.n_k.{t}", k), ("nodes.n_v.{t}", v))]
    report = hndl.load_state_dict(model, fused, rules)
    assert torch.equal(model.nodes.n_q.weight, fused["c_attn.weight"][:4])
    assert torch.equal(model.nodes.n_k.weight, fused["c_attn.weight"][4:6])
    assert torch.equal(model.nodes.n_v.bias, fused["c_attn.bias"][6:])
    assert str(report.loaded[0]) == (
        "c_attn.weight -> nodes.n_q.weight (rows 0..1/2), nodes.n_k.weight (rows 1/2..3/4), "
        "nodes.n_v.weight (rows 3/4..1)"
    )


def test_row_ranges_written_as_text_are_the_same_layouts():
    assert hndl.weights.as_layout("rows 1/3..3/3") == Rows(Fraction(1, 3), 1)
    assert Rows.split(1, 1, 1) == (Rows(0, "1/3"), Rows("1/3", "2/3"), Rows("2/3", 1))


def test_separate_tensors_join_into_one_fused_tensor():
    model = qkv_model(fused=True)
    parts = {
        f"{p}_proj.{t}": torch.randn(4, 4) if t == "weight" else torch.randn(4)
        for p in "qkv"
        for t in ("weight", "bias")
    }
    joined = Rule(("q_proj.{t}", "k_proj.{t}", "v_proj.{t}"), (Target("nodes.n_qkv.{t}", Concat()),))
    report = hndl.load_state_dict(model, parts, [joined])
    expected = torch.cat([parts["q_proj.weight"], parts["k_proj.weight"], parts["v_proj.weight"]])
    assert torch.equal(model.nodes.n_qkv.weight, expected)
    assert str(report.loaded[0]) == "q_proj.weight + k_proj.weight + v_proj.weight -> nodes.n_qkv.weight (concat dim 0)"
    assert len(report.loaded) == 2  # one application per joined tensor, whichever part came first


def test_layouts_chain():
    model = qkv_model(fused=False)
    conv1d = torch.randn(4, 8)  # GPT-2's fused Conv1D layout: [in, 3 parts of out]
    q, k, v = Rows.split(2, 1, 1)
    rules = [
        rule("c.weight", *((f"nodes.n_{n}.weight", Chain(Transpose(), part)) for n, part in zip("qkv", (q, k, v)))),
        rule("c.bias", *((f"nodes.n_{n}.bias", part) for n, part in zip("qkv", (q, k, v)))),
    ]
    hndl.load_state_dict(model, {"c.weight": conv1d, "c.bias": torch.randn(8)}, rules)
    assert torch.equal(model.nodes.n_k.weight, conv1d.t()[4:6])
    assert str(Chain(Transpose(), q)) == "transpose, then rows 0..1/2"


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    dims=st.tuples(st.integers(-4, 3), st.integers(-4, 3)),
)
def test_every_layouts_expected_shape_agrees_with_its_convert(shape, sizes, dims):
    tensor = torch.randn(shape)
    layouts: list[Layout] = [Same(), Transpose(*dims), *Rows.split(*sizes, dim=dims[0])]
    for layout in layouts:
        try:
            expected = layout.expected_shape(tuple(shape))
        except ValueError:
            continue  # refused from the shape alone: the loader reports it and never calls convert
        assert tuple(layout.convert(tensor).shape) == expected, layout
    other = list(shape)
    joined = Concat(dims[0])
    try:
        expected = joined.expected_shape(tuple(shape), tuple(other))
    except ValueError:
        return
    assert tuple(joined.convert(tensor, torch.randn(other)).shape) == expected


@settings(max_examples=100, deadline=None)
@given(
    parts=st.lists(st.from_regex(r"[a-z0-9_]{1,6}", fullmatch=True), min_size=1, max_size=3),
    rest=st.lists(st.from_regex(r"[a-z0-9_]{1,6}", fullmatch=True), min_size=1, max_size=3),
)
def test_a_rule_run_forward_then_backward_gives_the_key_back(parts, rest):
    r = rule("blocks.{i}.{layer}.{t*}", "nodes.n_blocks.{i}.n_{layer}.{t*}")
    key = ".".join(["blocks", "0", parts[0], *rest])
    ((target, _),) = r.forward(key).targets
    assert target == ".".join(["nodes.n_blocks", "0", f"n_{parts[0]}", *rest])
    assert r.backward(target) == (key,)


# --- dtypes -----------------------------------------------------------------------------------------------


def test_the_model_keeps_its_dtype_and_the_report_names_the_conversion():
    model = mlp()
    half = {k: v.half() for k, v in random_like(model).items()}
    report = hndl.load_state_dict(model, half)
    assert model.nodes.n_hidden.weight.dtype == torch.float32
    assert torch.equal(model.nodes.n_hidden.weight, half["nodes.n_hidden.weight"].float())
    assert report.loaded[0].dtype == "float16 -> float32"
    assert "[float16 -> float32]" in str(report)


def test_a_model_converted_first_loads_in_its_own_dtype():
    model = mlp().to(torch.bfloat16)
    state = {k: v.to(torch.bfloat16) for k, v in random_like(model).items()}
    report = hndl.load_state_dict(model, state)
    assert model.nodes.n_out.weight.dtype == torch.bfloat16
    assert torch.equal(model.nodes.n_out.weight, state["nodes.n_out.weight"])
    assert all(item.dtype is None for item in report.loaded)


def test_floating_values_into_an_integer_buffer_are_refused():
    model = bn_model()
    state = dict(model.state_dict())
    state["nodes.n_bn.num_batches_tracked"] = torch.tensor(2.5)
    err = refused(model, state)
    assert err.problems[0].message == (
        "checkpoint key 'nodes.n_bn.num_batches_tracked' holds float32 values; "
        "'nodes.n_bn.num_batches_tracked' is int64, which cannot hold them unchanged"
    )
    assert err.problems[0].node == "bn"


# --- tied weights -----------------------------------------------------------------------------------------


def test_a_tied_tensor_is_filled_once_from_either_name_and_stays_tied():
    for key in ("nodes.n_emb.weight", "nodes.n_head.weight"):
        model = tied_lm()
        value = torch.randn(11, 8)
        report = hndl.load_state_dict(model, {key: value})
        assert model.nodes.n_head.weight is model.nodes.n_emb.weight
        assert torch.equal(model.nodes.n_emb.weight, value)
        assert set(report.model_keys) == {"nodes.n_emb.weight", "nodes.n_head.weight"}
        assert "tied:" in str(report)


def test_a_tied_tensor_given_twice_equal_is_copied_once():
    model = tied_lm()
    value = torch.randn(11, 8)
    report = hndl.load_state_dict(model, {"nodes.n_emb.weight": value, "nodes.n_head.weight": value.clone()})
    assert [item.duplicate for item in report.loaded] == [False, True]
    assert model.nodes.n_head.weight is model.nodes.n_emb.weight


def test_a_tied_tensor_given_twice_with_different_values_is_refused():
    model = tied_lm()
    err = refused(model, {"nodes.n_emb.weight": torch.zeros(11, 8), "nodes.n_head.weight": torch.ones(11, 8)})
    assert err.problems[0].message == (
        "'nodes.n_emb.weight' and 'nodes.n_head.weight' are one tied tensor, but checkpoint key "
        "'nodes.n_emb.weight' and checkpoint key 'nodes.n_head.weight' hold different values"
    )
    assert model.nodes.n_head.weight is model.nodes.n_emb.weight


def test_a_missing_tied_tensor_is_one_problem_naming_both_keys():
    err = refused(tied_lm(), {})
    (problem,) = err.problems
    assert problem.message == (
        "'nodes.n_emb.weight' (tied: nodes.n_head.weight) has no tensor in the checkpoint: expected checkpoint "
        "key 'nodes.n_emb.weight' or 'nodes.n_head.weight'"
    )


# --- strict and not -----------------------------------------------------------------------------------------


def test_every_unmatched_key_is_named_with_the_closest_names():
    model = mlp()
    state = random_like(model)
    state["nodes.n_hiden.weight"] = state.pop("nodes.n_hidden.weight")
    state["nodes.n_out.bais"] = state.pop("nodes.n_out.bias")
    state["extra"] = torch.zeros(1)
    err = refused(model, state)
    assert str(err) == "\n".join(
        [
            "5 problems in weights from the state_dict for graph 'mlp':",
            "E_PARAMS linear 'hidden': 'nodes.n_hidden.weight' has no tensor in the checkpoint: expected checkpoint "
            "key 'nodes.n_hidden.weight'",
            "    expected: nodes.n_hidden.weight",
            "    actual:   missing",
            "    hint:     did you mean 'nodes.n_hiden.weight'?",
            "E_PARAMS linear 'out': 'nodes.n_out.bias' has no tensor in the checkpoint: expected checkpoint key "
            "'nodes.n_out.bias'",
            "    expected: nodes.n_out.bias",
            "    actual:   missing",
            "    hint:     did you mean 'nodes.n_out.bais'?",
            "E_PARAMS: checkpoint key 'nodes.n_hiden.weight' has no place in graph 'mlp'",
            "    expected: a key of one of the model's 4 tensors",
            "    actual:   nodes.n_hiden.weight",
            "    hint:     did you mean 'nodes.n_hidden.weight'?",
            "E_PARAMS: checkpoint key 'nodes.n_out.bais' has no place in graph 'mlp'",
            "    expected: a key of one of the model's 4 tensors",
            "    actual:   nodes.n_out.bais",
            "    hint:     did you mean 'nodes.n_out.bias'?",
            "E_PARAMS: checkpoint key 'extra' has no place in graph 'mlp'",
            "    expected: a key of one of the model's 4 tensors",
            "    actual:   extra",
            "    hint:     map it with a rule, drop it with a rule, or load with strict=False",
        ]
    )


def test_a_missing_key_names_the_checkpoint_key_its_rule_expects():
    model = mlp()
    state = {"fc1.weight": torch.ones(4, 6), "fc1.bias": torch.zeros(4), "fc2.weight": torch.ones(3, 4)}
    err = refused(model, state, [rule("fc1.{t}", "nodes.n_hidden.{t}"), rule("fc2.{t}", "nodes.n_out.{t}")])
    (problem,) = err.problems
    assert problem.message == "'nodes.n_out.bias' has no tensor in the checkpoint: expected checkpoint key 'fc2.bias'"
    assert (problem.node, problem.op) == ("out", "linear")


def test_a_key_a_rule_renames_to_nothing_says_what_it_became():
    err = refused(mlp(), {**random_like(mlp()), "fc3.weight": torch.ones(1)}, [rule("fc3.{t}", "nodes.n_fc3.{t}")])
    assert err.problems[0].hint == "a rule makes it 'nodes.n_fc3.weight', which the model does not have"


def test_strict_false_loads_what_matches_and_reports_the_rest():
    model = mlp()
    before = snapshot(model)
    state = random_like(model)
    del state["nodes.n_out.bias"]
    state["extra.weight"] = torch.zeros(2)
    report = hndl.load_state_dict(model, state, strict=False)
    assert report.missing_keys == ("nodes.n_out.bias",)
    assert report.unexpected_keys == ("extra.weight",)
    assert torch.equal(model.nodes.n_out.bias, before["nodes.n_out.bias"])  # left as it was
    assert torch.equal(model.nodes.n_out.weight, state["nodes.n_out.weight"])
    assert str(report).endswith(
        "missing (left as they were):\n  nodes.n_out.bias\nunexpected (not loaded):\n  extra.weight"
    )


def test_strict_false_still_refuses_a_shape_that_does_not_fit():
    model = mlp()
    state = random_like(model)
    state["nodes.n_out.weight"] = torch.zeros(10, 4)
    err = refused(model, state, strict=False)
    assert (
        err.problems[0].message
        == "checkpoint key 'nodes.n_out.weight' has shape [10, 4]; 'nodes.n_out.weight' needs [3, 4]"
    )
    assert err.problems[0].hint.startswith("was the checkpoint made with the same configuration")


def test_dropping_the_head_and_loading_the_rest_is_how_a_new_head_is_fine_tuned():
    model = mlp()
    state = random_like(model)
    state["nodes.n_out.weight"] = torch.zeros(10, 4)
    state["nodes.n_out.bias"] = torch.zeros(10)
    report = hndl.load_state_dict(model, state, [rule("nodes.n_out.{t}")], strict=False)
    assert report.missing_keys == ("nodes.n_out.weight", "nodes.n_out.bias")
    assert report.dropped_keys == ("nodes.n_out.weight", "nodes.n_out.bias")


# --- refused: nothing is copied ------------------------------------------------------------------------------


def test_a_shape_that_does_not_fit_after_the_transform_is_refused():
    model = mlp()
    state = random_like(model)
    rules = [rule("nodes.n_hidden.weight", ("nodes.n_hidden.weight", "transpose"))]
    err = refused(model, state, rules)  # [4, 6] transposed is [6, 4]
    assert err.problems[0].message == (
        "checkpoint key 'nodes.n_hidden.weight' has shape [4, 6], read as transpose; 'nodes.n_hidden.weight' needs [4, 6]"
    )
    assert err.problems[0].actual == [6, 4]


def test_two_checkpoint_keys_for_one_model_key_are_refused():
    model = mlp()
    state = random_like(model)
    state["hidden.weight"] = state["nodes.n_hidden.weight"].clone()
    err = refused(model, state, [rule("hidden.{t}", "nodes.n_hidden.{t}")])
    assert err.problems[0].message == (
        "'nodes.n_hidden.weight' would be filled twice: from checkpoint key 'nodes.n_hidden.weight' "
        "and from checkpoint key 'hidden.weight'"
    )


def test_a_checkpoint_key_read_by_two_rules_is_refused():
    model = qkv_model(fused=True)
    parts = {f"{p}.weight": torch.randn(4, 4) for p in "qkv"} | {f"{p}.bias": torch.randn(4) for p in "qkv"}
    rules = [rule("k.weight", "nodes.n_qkv.weight"), rule(("q.{t}", "k.{t}", "v.{t}"), ("nodes.n_qkv.{t}", "concat"))]
    err = refused(model, parts, rules)
    assert err.problems[0].message == (
        "checkpoint key 'k.weight' is read by two rules: "
        "'q.{t} + k.{t} + v.{t} -> nodes.n_qkv.{t} (concat dim 0)' and 'k.weight -> nodes.n_qkv.weight'"
    )


def test_a_joined_rule_with_a_part_missing_leaves_its_target_missing_when_not_strict():
    model = qkv_model(fused=True)
    before = snapshot(model)
    parts = {"q.weight": torch.randn(4, 4), "k.weight": torch.randn(4, 4), "nodes.n_qkv.bias": torch.randn(12)}
    report = hndl.load_state_dict(
        model, parts, [rule(("q.{t}", "k.{t}", "v.{t}"), ("nodes.n_qkv.{t}", "concat"))], strict=False
    )
    assert report.missing_keys == ("nodes.n_qkv.weight",)
    assert report.unexpected_keys == ("q.weight", "k.weight")
    assert torch.equal(model.nodes.n_qkv.weight, before["nodes.n_qkv.weight"])
    assert torch.equal(model.nodes.n_qkv.bias, parts["nodes.n_qkv.bias"])


def test_a_joined_rule_with_a_part_missing_is_refused():
    model = qkv_model(fused=True)
    parts = {"q.weight": torch.randn(4, 4), "k.weight": torch.randn(4, 4), "nodes.n_qkv.bias": torch.randn(12)}
    err = refused(model, parts, [rule(("q.{t}", "k.{t}", "v.{t}"), ("nodes.n_qkv.{t}", "concat"))])
    assert err.problems[0].message == (
        "rule 'q.{t} + k.{t} + v.{t} -> nodes.n_qkv.{t} (concat dim 0)' joins checkpoint keys 'q.weight', "
        "'k.weight', 'v.weight', but the checkpoint lacks 'v.weight'"
    )


def test_rows_that_do_not_divide_are_refused():
    model = qkv_model(fused=False)
    err = refused(
        model,
        {"c.weight": torch.randn(10, 4), "c.bias": torch.randn(8)},
        [rule("c.{t}", *((f"nodes.n_{n}.{{t}}", p) for n, p in zip("qkv", Rows.split(2, 1, 1))))],
    )
    assert [p.message for p in err.problems] == [
        "checkpoint key 'c.weight' has shape [10, 4], read as rows 0..1/2; 'nodes.n_q.weight' needs [4, 4]",
        "checkpoint key 'c.weight' (shape [10, 4]) cannot be read as rows 1/2..3/4: 10 rows do not split at 1/2 and 3/4",
        "checkpoint key 'c.weight' (shape [10, 4]) cannot be read as rows 3/4..1: 10 rows do not split at 3/4 and 1",
    ]
    assert [p.node for p in err.problems] == ["q", "k", "v"]


def test_a_layout_whose_convert_breaks_its_promise_is_refused_before_copying():
    class Liar(Layout):
        def expected_shape(self, *shapes):
            return shapes[0]

        def convert(self, *tensors):
            return tensors[0][:1]

        def __str__(self):
            return "liar"

    class Broken(Liar):
        def convert(self, *tensors):
            raise RuntimeError("no")

    model = mlp()
    state = random_like(model)
    err = refused(model, state, [rule("nodes.n_hidden.weight", ("nodes.n_hidden.weight", Liar()))])
    assert err.problems[0].message == (
        "layout liar (Liar) of checkpoint key 'nodes.n_hidden.weight' -> 'nodes.n_hidden.weight' declares shape "
        "[4, 6], but its convert returned shape [1, 6]"
    )
    err = refused(model, state, [rule("nodes.n_out.bias", ("nodes.n_out.bias", Broken()))])
    assert err.problems[0].message.endswith("but its convert RuntimeError: no")


def test_a_value_that_is_not_a_tensor_and_a_key_that_is_not_a_string_are_refused():
    model = mlp()
    state = random_like(model)
    state["nodes.n_out.bias"] = [0.0, 0.0, 0.0]
    err = refused(model, state)
    assert err.problems[0].message == "checkpoint key 'nodes.n_out.bias' holds list, not a tensor"
    err = refused(model, {**random_like(model), 3: torch.zeros(1)})
    assert err.problems[0].message == "the state_dict has a key that is not a string: 3"


def test_sparse_and_empty_keys_are_refused_before_copying():
    model = mlp()
    state = random_like(model)
    state["nodes.n_out.weight"] = state["nodes.n_out.weight"].to_sparse()
    state[""] = torch.zeros(1)
    err = refused(model, state)
    assert [p.message for p in err.problems] == [
        "checkpoint key 'nodes.n_out.weight' holds a torch.sparse_coo tensor, which cannot be copied into a model's "
        "dense tensor (make it dense first)",
        "checkpoint key '' has no place in graph 'mlp'",
    ]
    assert err.problems[0].node == "out"


def test_malformed_rules_are_e_params_naming_the_rule():
    model, state = mlp(), random_like(mlp())
    err = refused(
        model,
        state,
        [
            ("a.{t}", ("b.{u}", "same")),
            ("a.{t}", ("b.{t}", "flip")),
            ("a.{t}", ["b.{t}", "b.{t}"]),
            (("a.{t}", "b.{t}"), "c.{t}"),
            ("a.{t", "b"),
            42,
        ],
    )
    assert [p.message for p in err.problems] == [
        "rule 0: target 'b.{u}' uses field 'u', which 'a.{t}' does not have",
        "rule 1: unknown layout 'flip': same, transpose, concat, flatten, 'rows i/n..j/n', "
        "'per_head(i, n, heads=H)' or a hndl.weights.Layout object",
        "rule 2: a rule names target 'b.{t}' twice",
        "rule 3: layout 'same' of target 'c.{t}' takes 1 tensor(s), the rule gives it 2; join them with concat",
        "rule 4: template 'a.{t' has a brace that opens no field: write fields as {name} or {name*}",
        "rule 5: a rule is a Rule or a (source, target) pair, not 42",
    ]
    assert str(err).startswith("6 problems in rules:")


@pytest.mark.parametrize(
    ("model", "source", "rules", "strict", "message"),
    [
        (torch.nn.Linear(2, 2), {}, (), True, "load_state_dict loads into a built hndl model, not Linear"),
        (None, torch.nn.Linear(2, 2), (), True, "the source is a module (Linear), not its weights"),
        (None, 42, (), True, "cannot read weights from int"),
        (None, {}, "a.{t}", True, "rules must be a sequence of rules or a mapping, not str"),
        (None, {}, (), "yes", "strict must be True or False"),
    ],
)
def test_arguments_of_the_wrong_kind_are_e_params(model, source, rules, strict, message):
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_state_dict(model if model is not None else mlp(), source, rules, strict)
    assert info.value.code == "E_PARAMS"
    assert info.value.problems[0].message == message


def test_a_model_on_the_meta_device_is_refused():
    with torch.device("meta"):
        model = mlp()
    with pytest.raises(hndl.HndlError) as info:
        hndl.load_state_dict(model, random_like(model))
    assert (
        info.value.problems[0].message
        == "'nodes.n_hidden.weight' is on the meta device: copying into it would store nothing"
    )


# --- convert_state_dict ----------------------------------------------------------------------------------------


def test_convert_state_dict_gives_the_tensors_under_the_models_names_without_copying():
    model = tied_lm()
    before = snapshot(model)
    value = torch.randn(8, 11)
    out = hndl.weights.convert_state_dict(model, {"e": value}, [rule("e", ("nodes.n_emb.weight", "transpose"))])
    assert set(out) == {"nodes.n_emb.weight", "nodes.n_head.weight"}
    assert torch.equal(out["nodes.n_head.weight"], value.t())
    assert_unchanged(model, before)


# --- rules as objects ------------------------------------------------------------------------------------------


def test_rule_construction_refuses_what_cannot_run_both_ways():
    with pytest.raises(ValueError, match="must have the same fields"):
        Rule(("a.{i}", "b.{j}"), (Target("c", "concat"),))
    with pytest.raises(ValueError, match="fills exactly one model key"):
        Rule(("a", "b"), ())
    with pytest.raises(ValueError, match="with and without"):
        rule("a.{t}.{t*}", "b")
    with pytest.raises(ValueError, match="only the first layout of a chain"):
        Chain(Transpose(), Concat())


def test_a_rule_whose_target_drops_a_field_has_no_backward():
    r = rule("layers.{i}.w", "w")
    assert r.forward("layers.3.w").targets[0][0] == "w"
    assert r.backward("w") is None
