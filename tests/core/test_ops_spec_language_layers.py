"""The layers a spec had to compose by hand (issue 38): ``rmsnorm`` with ``weight_offset`` (Gemma),
``gelu`` with ``approximate: tanh_formula`` (transformers' ``gelu_new``), ``quick_gelu`` (CLIP), ``pool_at_token``
(CLIP's text pooler) and ``grn``/``grn2d`` (ConvNeXt-V2).

Each is compared with ``torch.equal`` against its reference written here as a few lines of torch, copied from
the reference's source (transformers' GemmaRMSNorm, NewGELUActivation, QuickGELUActivation, CLIPTextTransformer;
timm's GlobalResponseNorm): the point of these ops is the reference's order of operations. The property tests
hold inference to what the layer does on random shapes; tests/zoo/test_layers_reference.py runs the real classes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from op_helpers import infer, one_node_graph, problem

import hndl
from hndl._dims import evaluate

PROPERTY = settings(max_examples=60, deadline=None)

# --- the references, as their libraries write them ------------------------------------------------------------


def gemma_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' GemmaRMSNorm.forward."""
    output = x.float()
    output = output * torch.rsqrt(output.pow(2).mean(-1, keepdim=True) + eps)
    output = output * (1.0 + weight.float())
    return output.type_as(x)


def new_gelu(x: torch.Tensor) -> torch.Tensor:
    """transformers' NewGELUActivation.forward (gelu_new)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def quick_gelu(x: torch.Tensor) -> torch.Tensor:
    """transformers' QuickGELUActivation.forward."""
    return x * torch.sigmoid(1.702 * x)


def clip_pool(x: torch.Tensor, ids: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """CLIPTextTransformer's pooler_output (eos_token_id None: the legacy rule, the largest id)."""
    if eos_token_id is None:
        return x[torch.arange(x.shape[0]), ids.to(dtype=torch.int).argmax(dim=-1)]
    return x[torch.arange(x.shape[0]), (ids.to(dtype=torch.int) == eos_token_id).int().argmax(dim=-1)]


def timm_grn(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float, channels_last: bool) -> Any:
    """timm's GlobalResponseNorm.forward."""
    spatial, channel, shape = ((1, 2), -1, (1, 1, 1, -1)) if channels_last else ((2, 3), 1, (1, -1, 1, 1))
    x_g = x.norm(p=2, dim=spatial, keepdim=True)
    x_n = x_g / (x_g.mean(dim=channel, keepdim=True) + eps)
    return x + torch.addcmul(bias.view(shape), weight.view(shape), x * x_n)


def build(op: str, shapes: Sequence[Sequence[Any]], dtypes: list | None = None, **params: Any) -> Any:
    return hndl.build(one_node_graph(op, tuple(tuple(s) for s in shapes), dtypes, params)).eval()


# --- rmsnorm with weight_offset --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_rmsnorm_with_weight_offset_one_computes_gemmas_rmsnorm(dtype):
    name = str(dtype).removeprefix("torch.")
    model = build("rmsnorm", [("B", "T", 32)], [name], eps=1e-6, weight_offset=1.0).to(dtype)
    layer = model.nodes["n_n"]
    with torch.no_grad():
        layer.weight.normal_(0, 0.5)
    x = (torch.randn(2, 5, 32) * 3).to(dtype)
    got = model(x)
    assert got.dtype == dtype
    if dtype == torch.float64:  # Gemma's x.float() would round float64 to float32; hndl keeps float64
        expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + layer.weight)
        assert torch.equal(got, expected)
    else:
        assert torch.equal(got, gemma_rmsnorm(x, layer.weight, 1e-6))


def test_rmsnorm_with_weight_offset_keeps_gemmas_state_dict_and_starts_as_a_plain_rms_norm():
    model = build("rmsnorm", [("B", 16)], eps=1e-6, weight_offset=1.0)
    state = model.state_dict()
    assert list(state) == ["nodes.n_n.weight"]
    assert torch.equal(state["nodes.n_n.weight"], torch.zeros(16))  # Gemma's initial weight: scale 1 + 0
    x = torch.randn(3, 16)
    plain = build("rmsnorm", [("B", 16)], eps=1e-6)
    torch.testing.assert_close(model(x), plain(x))


def test_rmsnorm_without_an_offset_is_still_torchs_rmsnorm():
    assert type(build("rmsnorm", [("B", 16)], eps=1e-6).nodes["n_n"]) is torch.nn.RMSNorm
    assert type(build("rmsnorm", [("B", 16)], weight_offset=1.0).nodes["n_n"]).__name__ == "OffsetRMSNorm"


def test_rmsnorm_with_weight_offset_over_two_trailing_dims():
    model = build("rmsnorm", [("B", 4, 8)], normalized_shape=[4, 8], eps=1e-5, weight_offset=0.5)
    layer = model.nodes["n_n"]
    assert layer.weight.shape == (4, 8)
    with torch.no_grad():
        layer.weight.normal_()
    x = torch.randn(3, 4, 8)
    expected = x * torch.rsqrt(x.pow(2).mean((-2, -1), keepdim=True) + 1e-5) * (0.5 + layer.weight)
    assert torch.equal(model(x), expected)


def test_regression_a_weight_offset_without_a_weight_is_e_param_not_a_silent_no_op():
    p = problem("rmsnorm", ("B", 8), elementwise_affine=False, weight_offset=1.0)
    assert (p.code, p.node) == ("E_PARAM", "n")
    assert "weight_offset 1.0 offsets a learned scale, but elementwise_affine is false" in p.message
    assert "weight_offset: 1.0" in p.hint


def test_gemmas_class_name_points_at_the_option():
    g = hndl.Graph("t")
    g.output(g.add("GemmaRMSNorm", g.input("x", ("B", 8)), name="n"))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    assert info.value.problems[0].hint == "'GemmaRMSNorm' is {op: rmsnorm, weight_offset: 1.0} in hndl"


# --- gelu tanh_formula and quick_gelu -----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_gelu_tanh_formula_is_gelu_new_bit_for_bit(dtype):
    x = (torch.randn(2048) * 4).to(dtype)
    model = build("gelu", [("N",)], [str(dtype).removeprefix("torch.")], approximate="tanh_formula")
    assert type(model.nodes["n_n"]).__name__ == "GELUTanhFormula"
    assert torch.equal(model(x), new_gelu(x))


def test_regression_torchs_tanh_gelu_is_not_gelu_new_which_is_why_the_formula_is_an_option():
    x = torch.randn(2048) * 4
    tanh = build("gelu", [("N",)], approximate="tanh")
    assert not torch.equal(tanh(x), new_gelu(x))  # about 1e-6 off: not what a reference comparison accepts
    torch.testing.assert_close(tanh(x), new_gelu(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_quick_gelu_is_transformers_quick_gelu_bit_for_bit(dtype):
    x = (torch.randn(2048) * 4).to(dtype)
    model = build("quick_gelu", [("N",)], [str(dtype).removeprefix("torch.")])
    assert torch.equal(model(x), quick_gelu(x))
    assert model(x).dtype == dtype


def test_quick_gelu_and_gelu_tanh_formula_need_a_float_input():
    for op, params in (("quick_gelu", {}), ("gelu", {"approximate": "tanh_formula"})):
        p = problem(op, ("B", 4), dtypes=["int64"], **params)
        assert (p.code, p.message) == ("E_DTYPE", "needs dtype float, got int64")


def test_transformers_activation_names_point_at_the_exact_ops():
    for written, hint in (
        ("gelu_new", "'gelu_new' is {op: gelu, approximate: tanh_formula} in hndl"),
        ("NewGELUActivation", "'NewGELUActivation' is {op: gelu, approximate: tanh_formula} in hndl"),
        ("gelu_pytorch_tanh", "'gelu_pytorch_tanh' is {op: gelu, approximate: tanh} in hndl"),
        ("QuickGELUActivation", "'QuickGELUActivation' is {op: quick_gelu} in hndl"),
    ):
        g = hndl.Graph("t")
        g.output(g.add(written, g.input("x", ("B", 8)), name="n"))
        with pytest.raises(hndl.HndlError) as info:
            hndl.check(g)
        assert info.value.problems[0].hint == hint


# --- pool_at_token ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token_id", [None, 7])
def test_pool_at_token_is_clips_pooler(token_id):
    x = torch.randn(4, 6, 5)
    ids = torch.randint(0, 7, (4, 6))
    ids[0, 3] = 7
    ids[1, 1], ids[1, 4] = 7, 7  # two: the first one
    ids[2, 5] = 7
    ids[3] = 0  # no end token at all (with token_id) / all ids equal (without): position 0, as transformers
    model = build("pool_at_token", [("B", "T", 5), ("B", "T")], [None, "int64"], token_id=token_id)
    assert torch.equal(model(x, ids), clip_pool(x, ids, token_id))


def test_pool_at_token_infers_the_batch_and_the_features():
    assert infer("pool_at_token", ("B", "T", 512), ("B", "T"), dtypes=[None, "int64"]) == ["[B, 512]"]
    assert infer("pool_at_token", ("B", "T", 4, 8), ("B", "T"), dtypes=[None, "int32"]) == ["[B, 4, 8]"]


def test_regression_pool_at_token_with_ids_of_another_length_is_e_shape():
    p = problem("pool_at_token", ("B", 77, 512), ("B", 76), dtypes=[None, "int64"])
    assert (p.code, p.node) == ("E_SHAPE", "n")


def test_pool_at_token_needs_integer_ids():
    p = problem("pool_at_token", ("B", "T", 8), ("B", "T"), dtypes=[None, "float32"])
    assert p.code == "E_DTYPE"
    assert p.port == "ids"


def test_pool_at_token_refuses_a_negative_token_id():
    p = problem("pool_at_token", ("B", "T", 8), ("B", "T"), dtypes=[None, "int64"], token_id=-1)
    assert (p.code, p.node) == ("E_PARAM", "n")


def test_pool_at_token_passes_gradients_to_the_pooled_rows_only():
    model = build("pool_at_token", [("B", "T", 3), ("B", "T")], [None, "int64"])
    x = torch.randn(2, 4, 3, requires_grad=True)
    ids = torch.tensor([[0, 9, 1, 2], [3, 1, 1, 8]])
    model(x, ids).sum().backward()
    expected = torch.zeros(2, 4, 3)
    expected[0, 1], expected[1, 3] = 1, 1
    assert torch.equal(x.grad, expected)


# --- grn and grn2d ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "channels_last"), [("grn", True), ("grn2d", False)])
def test_grn_is_timms_global_response_norm(op, channels_last):
    shape = (2, 5, 7, 12) if channels_last else (2, 12, 5, 7)
    model = build(op, [("B", *shape[1:])])
    layer = model.nodes["n_n"]
    assert {k: tuple(v.shape) for k, v in layer.state_dict().items()} == {"weight": (12,), "bias": (12,)}
    x = torch.randn(shape)
    assert torch.equal(model(x), x)  # weight and bias start at 0: the identity, as timm's
    with torch.no_grad():
        layer.weight.normal_()
        layer.bias.normal_()
    assert torch.equal(model(x), timm_grn(x, layer.weight, layer.bias, 1e-6, channels_last))


def test_grn_infers_its_channels_from_the_last_dim_and_grn2d_from_dim_1():
    assert hndl.check(one_node_graph("grn", (("B", "H", "W", 96),), None, {})).nodes[0].params["num_channels"] == 96
    assert hndl.check(one_node_graph("grn2d", (("B", 96, "H", "W"),), None, {})).nodes[0].params["num_channels"] == 96


def test_regression_grn_on_a_map_that_is_not_rank_4_is_e_shape():
    p = problem("grn", ("B", 384, 56))
    assert (p.code, p.node, p.port) == ("E_SHAPE", "n", "x")


def test_grn_refuses_eps_zero():
    p = problem("grn2d", ("B", 8, 4, 4), eps=0.0)
    assert (p.code, p.message) == ("E_PARAM", "eps must be > 0 for global response normalisation, got 0.0")


# --- property tests: inference agrees with the layer on random shapes ------------------------------------------


def agree(
    op: str,
    shapes: Sequence[Sequence[int]],
    static: Sequence[Sequence[Any]],
    env: dict[str, int],
    params: dict[str, Any],
    oracle: Callable[..., torch.Tensor],
    accepted: bool,
    dtypes: list | None = None,
) -> None:
    """hndl accepts the node exactly when ``accepted``; then the inferred shape, evaluated, is the real one and
    the layer computes the oracle's values bit for bit."""
    g = one_node_graph(op, tuple(tuple(s) for s in static), dtypes, params)
    if not accepted:
        with pytest.raises(hndl.HndlError) as info:
            hndl.check(g)
        assert info.value.code in ("E_SHAPE", "E_PARAM"), str(info.value)
        return
    checked = hndl.check(g)
    gen = torch.Generator().manual_seed(0)
    tensors = [
        torch.randint(0, 5, tuple(s), generator=gen) if (dtypes or [None] * 9)[i] else torch.randn(s, generator=gen)
        for i, s in enumerate(shapes)
    ]
    model = hndl.build(g).eval()
    layer = model.nodes["n_n"]
    with torch.no_grad():
        for p in layer.parameters():
            p.normal_(generator=gen)
    got = model(*tensors)
    expected = oracle(layer, *tensors)
    (t,) = checked.nodes[0].out_types
    assert tuple(evaluate(d, env) for d in t.shape) == tuple(got.shape) == tuple(expected.shape)
    assert torch.equal(got, expected)


def symbolize(draw: Any, shape: Sequence[int], prefix: str = "S") -> tuple[tuple[Any, ...], dict[str, int]]:
    static: list[Any] = list(shape)
    env: dict[str, int] = {}
    for i, n in enumerate(shape):
        if draw(st.booleans()):
            static[i] = f"{prefix}{i}"
            env[f"{prefix}{i}"] = n
    return tuple(static), env


sizes = st.integers(1, 5)


@PROPERTY
@given(st.data())
def test_property_rmsnorm_with_weight_offset(data):
    shape = data.draw(st.lists(sizes, min_size=1, max_size=4))
    static, env = symbolize(data.draw, shape[:-1])
    static = (*static, shape[-1])
    offset = data.draw(st.sampled_from([1.0, 0.5, -2.0]))
    given_last = data.draw(st.none() | sizes)
    params = {"eps": 1e-6, "weight_offset": offset} | ({} if given_last is None else {"normalized_shape": [given_last]})

    def oracle(layer: Any, x: torch.Tensor) -> torch.Tensor:
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (offset + layer.weight)).type_as(x)

    accepted = given_last is None or given_last == shape[-1]
    agree("rmsnorm", [shape], [static], env, params, oracle, accepted)


@PROPERTY
@given(st.data())
def test_property_gelu_tanh_formula_and_quick_gelu_keep_any_shape(data):
    shape = data.draw(st.lists(sizes, min_size=0, max_size=4))
    static, env = symbolize(data.draw, shape)
    op, params, formula = data.draw(
        st.sampled_from([("gelu", {"approximate": "tanh_formula"}, new_gelu), ("quick_gelu", {}, quick_gelu)])
    )
    agree(op, [shape], [static], env, params, lambda _layer, x: formula(x), True)


@PROPERTY
@given(st.data())
def test_property_pool_at_token(data):
    b, t = data.draw(sizes), data.draw(sizes)
    features = data.draw(st.lists(sizes, min_size=0, max_size=2))
    ids_b = data.draw(st.sampled_from([b, b + 1]))
    ids_t = data.draw(st.sampled_from([t, t + 1]))
    token_id = data.draw(st.none() | st.integers(0, 4))
    accepted = (ids_b, ids_t) == (b, t)
    # Symbols only where the two agree: a symbol against a different number is for the first call to refuse.
    x_static, env = symbolize(data.draw, (b, t)) if accepted else ((b, t), {})
    ids_static = x_static if accepted and data.draw(st.booleans()) else (ids_b, ids_t)
    agree(
        "pool_at_token",
        [(b, t, *features), (ids_b, ids_t)],
        [(*x_static, *features), ids_static],
        env,
        {"token_id": token_id},
        lambda _layer, x, ids: clip_pool(x, ids, token_id),
        accepted,
        dtypes=[None, "int64"],
    )


@PROPERTY
@given(st.data())
def test_property_grn(data):
    op = data.draw(st.sampled_from(["grn", "grn2d"]))
    shape = data.draw(st.lists(sizes, min_size=3, max_size=5))
    static, env = symbolize(data.draw, shape)
    channel = -1 if op == "grn" else 1
    if len(static) > 1 and isinstance(static[channel], str):  # the channel count is a layer size: a number
        env.pop(static[channel])
        static = tuple(shape[i] if i == channel % len(shape) else d for i, d in enumerate(static))

    def oracle(layer: Any, x: torch.Tensor) -> torch.Tensor:
        return timm_grn(x, layer.weight, layer.bias, 1e-6, op == "grn")

    agree(op, [shape], [static], env, {}, oracle, len(shape) == 4)
