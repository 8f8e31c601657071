"""The fast path writes out the forward of a few standard layers (hndl/torch/_inline.py): Linear, ReLU, GELU,
LayerNorm, Embedding, the element-wise families, and the weightless layers that rearrange or convert a tensor
(reshape, slice, concat, ...) with the parameter and buffer nodes. What it writes must compute exactly what the
layer's own forward computes (a view where that is a view), read the layer's current tensors and settings, and
give way to the class's code whenever that is not the code it was written from."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from torch import nn

import hndl
from hndl.torch._inline import inline_for


def layer_model(op: str, **params: object) -> hndl.GraphModule:
    g = hndl.Graph(op)
    x = g.input("x", ("B", 6))
    g.output(g.add(op, x, name="layer", **params))
    return hndl.build(g)


CASES = [
    ("linear", {"out_features": 5}),
    ("linear", {"out_features": 5, "bias": False}),
    ("relu", {}),
    ("gelu", {}),
    ("gelu", {"approximate": "tanh"}),
    ("layernorm", {}),
    ("layernorm", {"elementwise_affine": False}),
]


@pytest.mark.parametrize(("op", "params"), CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)])
def test_a_written_out_layer_equals_its_own_forward(op, params):
    model = layer_model(op, **params)
    layer = model.nodes.n_layer
    for p in layer.parameters():  # not the initial ones and zeros, so every tensor matters
        nn.init.normal_(p)
    assert inline_for(layer) is not None
    assert "if k0.forward is f0 else m0.forward(a0)" in model.code
    for batch in (2, 3, 2):
        x = torch.randn(batch, 6)
        assert torch.equal(model(x), layer.forward(x))
    assert model.validations == 1


def test_the_fast_path_reads_the_layers_current_settings():
    model = layer_model("relu")
    x = torch.randn(4, 6)
    model(x)
    model.nodes.n_layer.inplace = True  # a plain attribute: no hook, no new instance attribute
    y = x.clone()
    out = model(y)
    assert out is y
    assert torch.equal(y, torch.relu(x))


def test_the_fast_path_reads_tensors_swapped_in_by_functional_call():
    model = layer_model("linear", out_features=5)
    x = torch.randn(3, 6)
    model(x)
    zeros = {name: torch.zeros_like(t) for name, t in model.named_parameters()}
    assert torch.equal(torch.func.functional_call(model, zeros, (x,)), torch.zeros(3, 5))
    assert not torch.equal(model(x), torch.zeros(3, 5))
    assert model.validations == 1


def test_a_class_patched_before_the_build_is_called_not_written_out(monkeypatch):
    monkeypatch.setattr(nn.GELU, "forward", lambda self, x: x * 0)
    model = layer_model("gelu")
    assert inline_for(model.nodes.n_layer) is None
    assert torch.equal(model(torch.ones(2, 6)), torch.zeros(2, 6))


def test_a_subclass_or_a_hooked_layer_runs_its_own_code():
    class Halved(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) / 2

    model = layer_model("linear", out_features=5)
    x = torch.randn(3, 6)
    full = model(x)
    model.nodes.n_layer.__class__ = Halved
    assert torch.allclose(model(x), full / 2)
    model.nodes.n_layer.__class__ = nn.Linear
    calls = []
    model.nodes.n_layer.register_forward_hook(lambda *a: calls.append(1))
    assert torch.equal(model(x), full)
    assert calls == [1]


def test_a_weight_moved_to_the_buffers_is_read_where_forward_reads_it():
    # `del lin.weight` then `register_buffer("weight", ...)`: forward finds the buffer through __getattr__; a
    # written-out call reading _parameters['weight'] would fail. The layer is left to its forward instead.
    model = layer_model("linear", out_features=5)
    x = torch.randn(3, 6)
    model(x)
    layer = model.nodes.n_layer
    weight = layer.weight.detach().clone()
    del layer.weight
    layer.register_buffer("weight", weight)
    assert inline_for(layer) is None
    assert torch.allclose(model(x), x @ weight.T + layer.bias)


# --- the element-wise families and the vision activations (ops/_elementwise.py, ops/_activation.py) ----------

ONE_INPUT = [
    ("sigmoid", {}),
    ("tanh", {}),
    ("silu", {}),
    ("hardswish", {}),
    ("hardsigmoid", {}),
    ("relu6", {}),
    ("hardtanh", {"min_val": -0.5, "max_val": 0.5}),
    ("leaky_relu", {"negative_slope": 0.2}),
    ("elu", {"alpha": 0.5}),
    ("mish", {}),
    ("exp", {}),
    ("clamp", {"min": 0.0}),
    ("roll", {"shifts": 2, "dims": 1}),
    ("sub", {"b": 1.0}),
    ("sub", {"a": 1}),
    ("pow", {"b": 2}),
    ("lt", {"b": 0.5}),
]


@pytest.mark.parametrize(("op", "params"), ONE_INPUT, ids=[f"{op}-{i}" for i, (op, _) in enumerate(ONE_INPUT)])
def test_a_written_out_element_wise_layer_equals_its_own_forward(op, params):
    model = layer_model(op, **params)
    layer = model.nodes.n_layer
    assert inline_for(layer) is not None
    assert "if k0.forward is f0 else m0.forward(a0)" in model.code
    for batch in (2, 3):
        x = torch.randn(batch, 6) * 4
        assert torch.equal(model(x), layer.forward(x))


@pytest.mark.parametrize("op", ["sub", "mul", "maximum", "eq"])
def test_a_written_out_binary_layer_equals_its_own_forward(op):
    g = hndl.Graph(op)
    g.output(g.add(op, g.input("a", ("B", 6)), g.input("b", (6,)), name="layer"))
    model = hndl.build(g)
    assert "if k0.forward is f0 else m0.forward(a0, a1)" in model.code
    a, b = torch.randn(3, 6), torch.randn(6)
    assert torch.equal(model(a, b), model.nodes.n_layer.forward(a, b))


def test_a_written_out_layernorm2d_equals_its_own_forward():
    g = hndl.Graph("ln")
    g.output(g.add("layernorm2d", g.input("x", ("B", 6, 4, 4)), name="layer", eps=1e-6))
    model = hndl.build(g)
    layer = model.nodes.n_layer
    nn.init.normal_(layer.weight)
    nn.init.normal_(layer.bias)
    assert inline_for(layer) is not None
    x = torch.randn(2, 6, 4, 4)
    assert torch.equal(model(x), layer.forward(x))


# --- the weightless layers and the parameter/buffer nodes (_shape_layers.py, _function_layers.py,
# _tensor_layers.py) ----------------------------------------------------------------------------------------

# (op, input shapes, input dtypes or None, params). The slices cover both forms of the template: the last dim
# (``x[..., a:b:c]``) by a positive and a negative dim, and a leading dim; the reshapes both start_dim branches.
WEIGHTLESS = [
    ("transpose", [(2, 3, 4)], None, {"dim0": 0, "dim1": 2}),
    ("permute", [(2, 3, 4)], None, {"dims": [2, 0, 1]}),
    ("select", [(2, 3, 4)], None, {"dim": 1, "index": 2}),
    ("select", [(2, 3, 4)], None, {"dim": -1, "index": -1}),
    ("reshape", [(2, 6)], None, {"shape": [3, 4]}),
    ("reshape", [(2, 6)], None, {"shape": [2, 3], "start_dim": 1}),
    ("slice", [(2, 3, 8)], None, {"dim": 2, "start": 1, "end": 7, "step": 2}),
    ("slice", [(2, 3, 8)], None, {"dim": -1, "start": -5}),
    ("slice", [(2, 3, 8)], None, {"dim": 1, "start": 1, "end": 99}),
    ("slice", [(2, 3, 8)], None, {"dim": 0, "start": 0}),
    ("expand", [(1, 6)], None, {"shape": [4, 6]}),
    ("expand", [(3, 1)], None, {"shape": [-1, 5]}),
    ("concat", [(2, 3), (2, 4)], None, {"dim": -1}),
    ("concat", [(2, 3), (1, 3)], None, {"dim": 0}),
    ("pad", [(2, 3, 4)], None, {"pad": [1, 2], "value": 0.5}),
    ("pad", [(2, 3, 4)], None, {"pad": [1, 2, 0, 1], "mode": "reflect"}),
    ("mean", [(2, 3, 4)], None, {"dim": [-1], "keepdim": True}),
    ("mean", [(2, 3, 4)], None, {"dim": [0, 2]}),
    ("cast", [(2, 6)], None, {"dtype": "float64"}),
    ("cast", [(2, 6)], None, {"dtype": "float32"}),  # the input itself, as Tensor.to returns it
    ("type_as", [(2, 6), (3,)], ["float32", "float64"], {}),
    ("type_as", [(2, 6), (3,)], None, {}),
    ("scale", [(2, 6)], None, {"factor": 0.5}),
    ("matmul", [(2, 3), (3, 4)], None, {}),
]


def weightless_model(op, shapes, dtypes, params):
    g = hndl.Graph(op)
    xs = [g.input(f"x{i}", shape, dtype=None if dtypes is None else dtypes[i]) for i, shape in enumerate(shapes)]
    g.output(g.add(op, *([xs] if op == "concat" else xs), name="layer", **params))
    model = hndl.build(g)
    gen = torch.Generator().manual_seed(0)
    inputs = [
        torch.randn(shape, generator=gen, dtype=getattr(torch, dtypes[i]) if dtypes else torch.float32)
        for i, shape in enumerate(shapes)
    ]
    return model, inputs


def assert_same_tensor_as(out, ref, inputs):
    """Equal values, shape, strides, dtype and storage offset; a view of an input where forward returns one (the
    same storage), the input itself where forward returns it."""
    assert torch.equal(out, ref)
    assert (out.shape, out.stride(), out.storage_offset(), out.dtype) == (
        ref.shape,
        ref.stride(),
        ref.storage_offset(),
        ref.dtype,
    )
    for x in inputs:
        assert (out is x) == (ref is x)
        assert (out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()) == (
            ref.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
        )


def _ids(cases):
    return [f"{case[0]}-{i}" for i, case in enumerate(cases)]


@pytest.mark.parametrize(("op", "shapes", "dtypes", "params"), WEIGHTLESS, ids=_ids(WEIGHTLESS))
def test_a_written_out_weightless_layer_returns_what_its_forward_returns(op, shapes, dtypes, params):
    model, inputs = weightless_model(op, shapes, dtypes, params)
    layer = model.nodes.n_layer
    assert inline_for(layer) is not None
    line = next(text for text in model.code.splitlines() if text.strip().startswith("v0 = "))
    assert " if k0.forward is f0" in line  # then the template's `when`, if any
    assert f"else m0.forward({', '.join(f'a{i}' for i in range(len(shapes)))})  # {op} 'layer'" in line
    for _ in range(2):  # the first call validates, the second runs the generated line
        out = model(*inputs)
        assert_same_tensor_as(out, layer.forward(*inputs), inputs)
    assert model.validations == 1


def test_a_view_stays_a_view_of_the_input():
    # Writing into the result writes into the input, as it does for the result of the layers' forward.
    model, (x,) = weightless_model("slice", [(2, 3, 8)], None, {"dim": 2, "start": 2, "end": 4})
    model(x)
    model(x).fill_(7.0)
    assert torch.equal(x[:, :, 2:4], torch.full((2, 3, 2), 7.0))


# (op, input shapes, params, the setting changed after the first call and its new value)
CHANGED = [
    ("transpose", [(3, 3, 3)], {"dim0": 0, "dim1": 1}, "dim1", 2),
    ("permute", [(2, 3, 4)], {"dims": [1, 0, 2]}, "dims", (2, 1, 0)),
    ("select", [(2, 3, 4)], {"dim": 1, "index": 2}, "index", 0),
    ("select", [(2, 3, 4)], {"dim": 1, "index": 2}, "dim", 2),
    ("slice", [(2, 4, 8)], {"dim": 2, "start": 0, "end": 4}, "start", 2),
    ("slice", [(2, 4, 8)], {"dim": 2, "start": 0, "end": 4}, "dim", 1),  # the last dim, then a leading one
    ("slice", [(2, 4, 8)], {"dim": 1, "start": 0, "end": 4}, "dim", -1),  # and back
    ("slice", [(2, 4, 8)], {"dim": 2, "start": 0, "end": 4}, "step", 3),
    ("reshape", [(2, 3, 4)], {"shape": [-1], "start_dim": 1}, "start_dim", 0),
    ("reshape", [(2, 6)], {"shape": [3, 4]}, "shape", (4, 3)),
    ("expand", [(1, 6)], {"shape": [4, 6]}, "sizes", [2, 6]),
    ("concat", [(2, 2), (2, 2)], {"dim": 0}, "dim", 1),
    ("pad", [(2, 3, 4)], {"pad": [1, 2]}, "mode", "replicate"),
    ("mean", [(3, 4)], {"dim": [0]}, "keepdim", True),
    ("cast", [(2, 6)], {"dtype": "float64"}, "dtype", torch.float16),
    ("scale", [(2, 6)], {"factor": 0.5}, "factor", 3.0),
]


@pytest.mark.parametrize(("op", "shapes", "params", "name", "value"), CHANGED, ids=_ids(CHANGED))
def test_a_written_out_weightless_layer_reads_its_settings_on_every_call(op, shapes, params, name, value):
    model, inputs = weightless_model(op, shapes, None, params)
    layer = model.nodes.n_layer
    before = model(*inputs)
    setattr(layer, name, value)  # a plain attribute: no new instance attribute, so the record stands
    out = model(*inputs)
    assert model.validations == 1  # the generated line ran, not a validation
    assert_same_tensor_as(out, layer.forward(*inputs), inputs)
    assert not (out.shape == before.shape and out.dtype == before.dtype and torch.equal(out, before))


def test_a_reshape_given_sizes_to_read_calls_its_forward():
    # A size read per call from the input (a symbol in the spec) is forward's loop: the written-out line has
    # a `when` condition that sends it there. Set after the first call, it is honoured there too: (-1, -1)
    # alone cannot be reshaped to.
    model, (x,) = weightless_model("reshape", [(4, 6)], None, {"shape": [6, 4]})
    layer = model.nodes.n_layer
    assert "and (not d0['reads']) else m0.forward(a0)" in model.code
    model(x)
    layer.shape, layer.reads = (-1, -1), [(0, ("x", 0))]
    out = model(x)
    assert model.validations == 1
    assert_same_tensor_as(out, x.reshape(4, 6), [x])

    g = hndl.Graph("symbolic")
    g.output(g.add("reshape", g.input("x", ("B", 6)), shape=["B", 2, 3], name="layer"))
    symbolic = hndl.build(g)
    assert symbolic.nodes.n_layer.reads  # the spec's symbol is read per call
    for batch in (2, 5):
        x = torch.randn(batch, 6)
        assert_same_tensor_as(symbolic(x), symbolic.nodes.n_layer.forward(x), [x])


def test_a_slice_given_a_float_dim_fails_as_its_forward_does():
    # forward's `[slice(None)] * (dim % x.dim())` refuses a float; the last-dim form must not accept one.
    model, (x,) = weightless_model("slice", [(2, 3, 8)], None, {"dim": 2, "start": 1})
    layer = model.nodes.n_layer
    model(x)
    layer.dim = 2.0
    with pytest.raises(TypeError):
        layer.forward(x)
    with pytest.raises(hndl.HndlError) as failure:
        model(x)
    assert failure.value.problems[0].code == "E_RUNTIME"
    assert isinstance(failure.value.__cause__, TypeError)


def test_a_concat_of_three_calls_its_forward():
    # forward takes any number of inputs; the written-out form is for two.
    g = hndl.Graph("cat3")
    xs = [g.input(f"x{i}", (2, 3)) for i in range(3)]
    g.output(g.add("concat", xs, name="layer", dim=0))
    model = hndl.build(g)
    assert "m0.forward(a0, a1, a2)  #" in model.code
    assert "torch.cat" not in model.code.split("def unchecked")[0]
    inputs = [torch.randn(2, 3) for _ in range(3)]
    for _ in range(2):
        assert torch.equal(model(*inputs), torch.cat(inputs))


@pytest.mark.parametrize(("op", "shapes", "dtypes", "params"), WEIGHTLESS[::3], ids=_ids(WEIGHTLESS[::3]))
def test_a_weightless_layers_class_patched_after_the_build_runs_its_own_code(monkeypatch, op, shapes, dtypes, params):
    model, inputs = weightless_model(op, shapes, dtypes, params)
    model(*inputs)
    marker = torch.full((1,), 7.0)
    monkeypatch.setattr(type(model.nodes.n_layer), "forward", lambda self, *args: marker)
    assert model(*inputs) is marker


def parameter_and_buffer_model() -> hndl.GraphModule:
    g = hndl.Graph("stores")
    g.output(
        [
            g.add("parameter", name="p", shape=[2, 6]),
            g.add("buffer", name="b", shape=[6], init="arange", dtype="float32"),
        ]
    )
    return hndl.build(g)


def test_the_parameter_and_buffer_nodes_return_the_layers_current_tensors():
    model = parameter_and_buffer_model()
    weight_layer, buffer_layer = model.nodes.n_p, model.nodes.n_b
    assert inline_for(weight_layer) is not None
    assert inline_for(buffer_layer) is not None
    assert "p0['weight'] if k0.forward is f0 else m0.forward()" in model.code
    assert "d1['_buffers']['value'] if k1.forward is f1 else m1.forward()" in model.code
    model()
    with torch.no_grad():
        weight_layer.weight.mul_(2)
    weight, buffer = model()
    assert weight is weight_layer.weight
    assert buffer is buffer_layer.value
    assert model.validations == 1
    buffer_layer.value = torch.ones(6)  # a new tensor in the same slot: read from _buffers on the call
    assert model()[1] is buffer_layer.value
    swapped = {"nodes.n_p.weight": torch.zeros(2, 6), "nodes.n_b.value": torch.full((6,), 3.0)}
    weight, buffer = torch.func.functional_call(model, swapped, ())
    assert weight is swapped["nodes.n_p.weight"]
    assert buffer is swapped["nodes.n_b.value"]
    assert model()[1] is buffer_layer.value


def test_a_buffer_made_a_parameter_is_read_where_forward_reads_it():
    model = parameter_and_buffer_model()
    model()
    layer = model.nodes.n_b
    value = layer.value
    del layer.value
    layer.value = nn.Parameter(value * 2)  # now in _parameters, where __getattr__ looks first
    assert inline_for(layer) is None
    assert model()[1] is layer.value


@pytest.mark.parametrize("params", [{}, {"padding_idx": 0}])
def test_a_written_out_embedding_equals_its_own_forward(params):
    g = hndl.Graph("embed")
    g.output(g.add("embedding", g.input("ids", ("B", 5), dtype="int64"), name="layer", num_embeddings=9,
                   embedding_dim=4, **params))  # fmt: skip
    model = hndl.build(g)
    layer = model.nodes.n_layer
    assert inline_for(layer) is not None
    assert "F.embedding(a0, p0['weight']" in model.code
    ids = torch.randint(0, 9, (3, 5))
    for _ in range(2):
        assert torch.equal(model(ids), layer.forward(ids))
    layer.max_norm = 0.5  # read per call: forward renormalises the rows it looks up, in place
    out = model(ids)
    assert model.validations == 1
    assert bool((out.norm(dim=-1) <= 0.5 + 1e-6).all())
    assert torch.equal(out, layer.forward(ids))


def decoder_like_model() -> hndl.GraphModule:
    """A rotary-style chain of the written-out layers: split heads, rotate halves, merge, normalise, cast."""
    g = hndl.Graph("chain")
    x = g.input("x", ("B", "T", 8))
    heads = g.add("transpose", g.add("reshape", x, shape=[2, 4], start_dim=2), dim0=1, dim1=2)
    first = g.add("slice", heads, dim=3, start=0, end=2)
    second = g.add("slice", heads, dim=3, start=2)
    rotated = g.add("concat", [g.add("neg", second), first], dim=-1)
    merged = g.add("reshape", g.add("transpose", rotated, dim0=1, dim1=2), shape=[8], start_dim=2)
    scale = g.add("mean", g.add("select", merged, dim=0, index=0), dim=[-1], keepdim=True)
    out = g.add(
        "mul", g.add("add", merged, g.add("buffer", name="b", shape=[8], init="arange", dtype="float32")), scale
    )
    g.output(g.add("type_as", g.add("mul", out, g.add("parameter", name="p", shape=[8])), x))
    return hndl.build(g)


@pytest.mark.parametrize("how", ["pickle", "deepcopy"])
def test_a_copied_model_runs_its_written_out_layers(how):
    model = decoder_like_model()
    x = torch.randn(3, 5, 8)
    expected = model(x)
    copied = pickle.loads(pickle.dumps(model)) if how == "pickle" else copy.deepcopy(model)
    for _ in range(2):
        assert torch.equal(copied(x), expected)
    assert copied.code == model.code
    validated = copied.validations
    # The copy reads its own layers: a setting changed on it leaves the original alone.
    copied.nodes.n_select.index = 1
    assert not torch.equal(copied(x), expected)
    assert torch.equal(model(x), expected)
    assert copied.validations == validated
