"""Facts an op declares on its OpDef, held to what its layer does: what its output may share memory with
(``returns``, from which the fast path's table of layers that return a new tensor is derived), and what it
costs (hndl's multiply-adds against torch's FlopCounterMode), for every registered op with an example."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

import hndl
from hndl.torch import _inline, layers
from hndl.torch._inline import fresh_layers, layer_classes

pytestmark = pytest.mark.filterwarnings("ignore:TF32 acceleration:UserWarning")

BUILTIN = [o for o in hndl.registry if o.build.__module__.startswith("hndl.ops.")]
#: Ops whose declaration other work owns; they declare nothing yet, so their layers are never written into.
UNDECLARED = {"graph", "module"}  # what their layer returns is the subgraph's or the imported class's


def example_model(opdef: hndl.OpDef) -> tuple[hndl.GraphModule, tuple[torch.Tensor, ...]]:
    """The op's docs example as a one-node model, and inputs for it."""
    params = {k: v for k, v in opdef.example.items() if k not in ("op", "in")}
    shape = [2 if d == "B" else 5 if isinstance(d, str) else d for d in (opdef.input_shape_example or ("B", 16))]
    g = hndl.Graph(opdef.name)
    xs = []
    for i, port in enumerate(opdef.active_inputs(params)):
        if port.optional:
            continue
        dtype = {"float": None, "any": None, "int": "int64"}.get(port.dtype, port.dtype)
        xs.append(g.input(f"x{i}", tuple(shape), dtype=None if dtype is None or dtype.startswith("same:") else dtype))
    node = g.add(opdef.name, *xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([node[i] for i in range(count)] if count > 1 else node)
    model = hndl.build(g)
    inputs = tuple(
        torch.rand(shape) > 0.5
        if str(t.dtype) == "bool"
        else torch.randint(0, 3, shape)
        if "int" in str(t.dtype)
        else torch.randn(shape)
        for t in (model.plan.checked.types[v] for v in model.plan.input_ids)
    )
    return model, inputs


def storages(*tensors: Any) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


WITH_EXAMPLES = [o for o in BUILTIN if o.example and o.name not in UNDECLARED and o.inputs is not None]


def test_every_built_in_op_declares_what_it_returns():
    assert {o.name for o in BUILTIN if o.returns == "unknown"} == UNDECLARED


@pytest.mark.parametrize("opdef", WITH_EXAMPLES, ids=[o.name for o in WITH_EXAMPLES])
def test_what_an_op_declares_it_returns_is_what_its_layer_returns(opdef):
    model, inputs = example_model(opdef)
    layer = model.nodes["n_n"]
    held = storages(*layer.parameters(), *layer.buffers())
    for mode in (True, False):
        model.train(mode)
        with torch.no_grad():
            out = model(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        shared = storages(*outs) & storages(*inputs)
        if opdef.returns == "new":
            assert not shared, f"{opdef.name} returned an input's memory"
            assert not storages(*outs) & held, f"{opdef.name} returned its own tensor"
        elif opdef.returns == "state":
            assert storages(*outs) <= held
        elif opdef.returns == "input" and not mode:
            assert any(o is x for o in outs for x in inputs), f"{opdef.name} should pass its input through in eval"


def test_the_fast_paths_table_of_new_tensors_is_derived_from_the_declarations():
    assert fresh_layers(BUILTIN) == _inline._FRESH
    fresh = set(_inline._FRESH)
    assert {nn.Conv2d, nn.Linear, nn.LayerNorm, layers.Add, layers.Binary, layers.Where, nn.Sigmoid} <= fresh
    # a layer a user may switch to in place, or that returns its input, a view or its own tensor
    assert not {nn.ReLU, nn.Hardswish, nn.SiLU, nn.Dropout, layers.Cast, layers.Reshape, layers.FixedTensor} & fresh
    assert all(forward is cls.forward for cls, forward in _inline._FRESH.items())


def test_a_class_two_ops_declare_differently_is_not_counted_as_new():
    new = hndl.OpDef("a", build=lambda p, i: None, module="hndl.torch.layers.Unary", returns="new")
    view = hndl.OpDef("b", build=lambda p, i: None, module="hndl.torch.layers.Unary", returns="view")
    assert fresh_layers([new]) == {layers.Unary: layers.Unary.forward}
    assert fresh_layers([new, view]) == {}


@pytest.mark.parametrize(
    ("module", "classes"),
    [
        ("torch.nn.Linear", [nn.Linear]),
        (
            "hndl.torch.layers.Add or TensorScalar or ScalarTensor",
            [layers.Add, layers.TensorScalar, layers.ScalarTensor],
        ),
        ("whatever 'target' names", []),
        ("mylib.layers.Thing", []),
        ("torch.nn.NoSuchLayer", []),
        ("", []),
    ],
)
def test_an_ops_module_text_names_its_classes(module, classes):
    assert layer_classes(module) == classes


def test_a_port_that_takes_a_number_needs_its_parameter():
    with pytest.raises(ValueError, match="port 'b' takes a number, so it needs a parameter 'b'"):
        hndl.op("test_scalar", inputs=[hndl.Port("a"), hndl.Port("b", scalar=True)])(lambda p, i: None)
    with pytest.raises(ValueError, match="returns must be one of new, input, view, state, unknown"):
        hndl.op("test_returns", returns="fresh")(lambda p, i: None)


# --- costs ---------------------------------------------------------------------------------------------------


def flops(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> int:
    with (
        FlopCounterMode(display=False) as counter,
        sdpa_kernel(SDPBackend.MATH),
        torch.backends.mkldnn.flags(enabled=False),
    ):
        model(*inputs)
    return int(counter.get_total_flops())


COUNTED = [o for o in BUILTIN if o.example and o.name not in ("graph", "module")]


@pytest.mark.parametrize("opdef", COUNTED, ids=[o.name for o in COUNTED])
def test_every_ops_multiply_adds_are_what_flop_counter_mode_counts(opdef):
    model, inputs = example_model(opdef)
    assert model.eval().summary().macs * 2 == flops(model, inputs)
