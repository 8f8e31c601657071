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
from hndl.torch import _in_place, layers
from hndl.torch._in_place import fresh_layers, layer_classes

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
        for j in range(2 if port.variadic else 1):  # a variadic port gets two values, as in the docs' example
            xs.append(
                g.input(f"x{i}_{j}", tuple(shape), dtype=None if dtype is None or dtype.startswith("same:") else dtype)
            )
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
    # The class the op declares (OpDef.layer: the docs' "Builds" line, the fast path's tables) is what it builds.
    if opdef.layer_paths:
        assert type(layer) in layer_classes(opdef.layer_paths), f"{opdef.name} builds {type(layer).__name__}"
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
    assert fresh_layers(BUILTIN) == _in_place.FRESH
    fresh = set(_in_place.FRESH)
    assert {nn.Conv2d, nn.Linear, nn.LayerNorm, layers.Add, layers.Binary, layers.Where, nn.Sigmoid} <= fresh
    # a layer a user may switch to in place, or that returns its input, a view or its own tensor
    assert not {nn.ReLU, nn.Hardswish, nn.SiLU, nn.Dropout, layers.Cast, layers.Reshape, layers.FixedTensor} & fresh
    assert all(forward is cls.forward for cls, forward in _in_place.FRESH.items())


def test_a_class_two_ops_declare_differently_is_not_counted_as_new():
    new = hndl.OpDef("a", build=lambda p, i: None, layer="hndl.torch.layers.Unary", returns="new")
    view = hndl.OpDef("b", build=lambda p, i: None, layer="hndl.torch.layers.Unary", returns="view")
    assert fresh_layers([new]) == {layers.Unary: layers.Unary.forward}
    assert fresh_layers([new, view]) == {}


@pytest.mark.parametrize(
    ("layer", "classes"),
    [
        ("torch.nn.Linear", [nn.Linear]),
        (
            ("hndl.torch.layers.Add", "hndl.torch.layers.TensorScalar", "hndl.torch.layers.ScalarTensor"),
            [layers.Add, layers.TensorScalar, layers.ScalarTensor],
        ),
        ("mylib.layers.Thing", []),
        ("torch.nn.NoSuchLayer", []),
        ((), []),
    ],
)
def test_an_ops_layer_path_names_its_classes(layer, classes):
    assert layer_classes(layer) == classes


def test_the_docs_name_the_layer_the_op_declares():
    # One place names the class: the "Builds" line is derived from it unless the op words it itself.
    assert hndl.registry.find("linear").module == "torch.nn.Linear"
    assert hndl.registry.find("add").module == "hndl.torch.layers.Add or TensorScalar or ScalarTensor"
    assert hndl.registry.find("module").layer_paths == ()
    assert hndl.registry.find("module").module.startswith("whatever 'target' names")


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


# --- what backward keeps, inner memory, multiply-adds: declared on the OpDef, read through the registry ---------

KEPT = ("inputs", "output", "both", "none")


def _sizes(shape: Any, concrete: bool) -> tuple[Any, ...]:
    return tuple((2 if d == "B" else 5) if concrete and isinstance(d, str) else d for d in shape)


def _checked_node(opdef: hndl.OpDef, params: dict[str, Any], shape: tuple[Any, ...]) -> Any:
    g = hndl.Graph(opdef.name)
    xs = []
    for i, port in enumerate(opdef.active_inputs(params)):
        if port.optional:
            continue
        dtype = {"float": None, "any": None, "int": "int64"}.get(port.dtype, port.dtype)
        for j in range(2 if port.variadic else 1):  # a variadic port gets two values, as in the docs' example
            xs.append(g.input(f"x{i}_{j}", shape, dtype=None if dtype is None or dtype.startswith("same:") else dtype))
    node = g.add(opdef.name, *xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([node[i] for i in range(count)] if count > 1 else node)
    return next(n for n in hndl.check(g).nodes if n.name == "n")


def parameter_sets(opdef: hndl.OpDef) -> list[tuple[str, dict[str, Any], tuple[Any, ...]]]:
    """The op's docs example on its example shape and on concrete sizes, and the example with each parameter
    that has a default left at it (on concrete sizes): the cases that check."""
    example = {k: v for k, v in opdef.example.items() if k not in ("op", "in")}
    shape = tuple(opdef.input_shape_example or ("B", 16))
    cases = [("example", example, shape), ("concrete", example, _sizes(shape, True))]
    for name in example:
        param = opdef.param(name)
        if param is not None and param.default is not hndl.REQUIRED:
            cases.append((f"default {name}", {k: v for k, v in example.items() if k != name}, _sizes(shape, True)))
    found = []
    for label, params, sizes in cases:
        try:
            found.append((label, params, sizes, _checked_node(opdef, params, sizes)))
        except hndl.HndlError:
            continue  # a variation the op refuses (a parameter without which the example does not check)
    return found


FACTS = [o for o in BUILTIN if o.example and not o.runs_subgraph]


def test_every_built_in_op_is_in_the_fact_tests():
    assert len(BUILTIN) > 100
    assert {o.name for o in BUILTIN} - {o.name for o in FACTS} == {"graph"}  # its nodes' facts are their own


@pytest.mark.parametrize("opdef", FACTS, ids=[o.name for o in FACTS])
def test_every_ops_facts_hold_for_several_parameter_sets(opdef):
    from hndl import _autograd_facts, _costs

    cases = parameter_sets(opdef)
    assert len(cases) >= 2, f"{opdef.name}: fewer than two parameter sets check"
    for label, _params, sizes, node in cases:
        concrete = all(isinstance(d, int) for d in sizes)
        assert _autograd_facts.saves(node) in KEPT, label
        inner = _autograd_facts.inner(node)
        assert inner is not None, label  # every shape is known
        if opdef.inner_memory is not None:
            assert inner, f"{opdef.name} ({label}) keeps nothing inside"
            assert all(count for count, _dtype in inner), label
        macs = _costs.macs(node)
        if opdef.imports_code:
            assert macs is None
        elif opdef.macs is None:
            assert macs == 0
        else:
            assert macs is not None, label
            assert macs != 0, f"{opdef.name} ({label}) counts no multiply-adds"
            if concrete:
                assert isinstance(macs, int)
                assert macs > 0


def test_the_side_tables_are_views_of_the_declarations():
    from hndl import _autograd_facts, _costs

    ops = list(hndl.registry)
    assert dict(_autograd_facts.SAVES) == {o.name: o.saves for o in ops if o.saves != "unknown"}
    assert dict(_costs.MACS) == {o.name: o.macs for o in ops if o.macs is not None}
    assert dict(_autograd_facts.INNER) == {o.name: o.inner_memory for o in ops if o.inner_memory is not None}
    assert set(_autograd_facts.PASSES_GRADIENT) == {o.name for o in ops if o.passes_gradient}
    assert {"linear", "conv2d", "attention", "sdpa", "lstm", "gru"} <= set(_costs.MACS)
    assert {"add", "reshape", "concat", "identity"} <= set(_autograd_facts.PASSES_GRADIENT)
    assert "relu" not in _autograd_facts.PASSES_GRADIENT
    assert "no_such_op" not in _autograd_facts.SAVES


def test_regression_a_built_in_op_without_what_backward_keeps_is_refused_at_registration():
    # The side table missed gru, lstm and relative_position_bias and nothing noticed: a built-in op must say.
    def build(p, i):
        """An op of hndl's own."""

    build.__module__ = "hndl.ops._made_up"
    with pytest.raises(ValueError, match="a built-in op must declare what its backward keeps"):
        hndl.op("test_undeclared_saves")(build)
    assert hndl.registry.find("test_undeclared_saves") is None
    hndl.op("test_declared_saves", saves="none")(build)
    hndl.registry.unregister("test_declared_saves")


@pytest.mark.parametrize(
    ("facts", "message"),
    [
        ({"saves": "kept"}, "saves must be one of inputs, output, both, none, unknown"),
        ({"passes_gradient": True, "saves": "inputs"}, "passes its gradient through keeps nothing"),
        ({"passes_gradient": "yes"}, "passes_gradient must be True or False"),
        ({"macs": 3}, "macs must be a function of the checked node"),
        ({"inner_memory": "mask"}, "inner_memory must be a function of the checked node"),
        ({"layer": "a Linear layer"}, "layer must be a class's dotted path"),
        ({"layer": ("torch.nn.Linear", 3)}, "layer must be a class's dotted path"),
    ],
)
def test_an_ops_facts_are_checked_at_registration(facts, message):
    with pytest.raises(ValueError, match=message):
        hndl.op("test_bad_facts", **facts)(lambda p, i: None)
    assert hndl.registry.find("test_bad_facts") is None


# --- a plugin op declares each fact ----------------------------------------------------------------------------


class Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _register_plugin(name: str, **facts: Any) -> None:
    def build(p, i):
        """Twice its input."""
        return Double()

    hndl.op(
        name,
        inputs=[hndl.Port("x", ["B", 16])],
        outputs=[hndl.Port("y", ["B", 16], dtype="same:x")],
        returns="new",
        replace=True,
        **facts,
    )(build)


@pytest.fixture
def plugin_ops():
    from hndl._dims import dim_mul
    from hndl._op_facts import numel

    _register_plugin("test_facts_plain")
    _register_plugin(
        "test_facts_declared",
        layer="tests.Double",
        saves="none",
        passes_gradient=True,
        inner_memory=lambda node: [(dim_mul(numel(node.out_types[0].shape), 8), "float")],
        macs=lambda node: dim_mul(numel(node.out_types[0].shape), 7),
    )
    yield
    for name in ("test_facts_plain", "test_facts_declared"):
        hndl.registry.unregister(name)


def _after_linear(op: str, then: bool = True) -> hndl.Graph:
    """x -> linear -> ``op`` (-> linear when ``then``)."""
    g = hndl.Graph("g")
    x = g.input("x", ("B", 16))
    y = g.add(op, g.add("linear", x, name="fc1", out_features=16), name="mid")
    g.output(g.add("linear", y, name="fc2", out_features=16) if then else y)
    return g


def _training(graph: hndl.Graph) -> Any:
    training = hndl.summary(graph, B=4, train=True).training
    assert training is not None
    assert training.activation_bytes is not None
    return training.activation_bytes


def _kept(op: str) -> set[str]:
    """The nodes whose output the training-memory estimate keeps for backward in x -> fc1 -> ``op``."""
    model = hndl.build(_after_linear(op, then=False))
    kept, _inner = hndl._memory.activations(model.plan, {"B": 4}, 4).kept(model.plan, range(len(model.plan.steps)), ())
    return {model.plan.steps[step].node.name for step, _output in kept}


def test_a_plugin_ops_declared_facts_reach_the_summary_and_the_training_estimate(plugin_ops):
    from hndl import _autograd_facts, _costs
    from hndl._dims import dim_mul
    from hndl._op_facts import numel

    elements = 4 * 16  # the plugin op's output, [B, 16] at B=4
    linears = 2 * elements * 16
    assert hndl.summary(_after_linear("test_facts_plain"), B=4).macs == linears  # no cost declared: 0
    assert hndl.summary(_after_linear("test_facts_declared"), B=4).macs == linears + 7 * elements
    # What backward keeps: of x -> fc1 -> mid, an op that keeps nothing keeps neither value, one that keeps its
    # inputs fc1's output, and one that declares nothing is counted as keeping its output (the cautious guess).
    _register_plugin("test_facts_keeps_none", saves="none")
    _register_plugin("test_facts_keeps_inputs", saves="inputs")
    inner = lambda node: [(dim_mul(numel(node.out_types[0].shape), 8), "float")]  # noqa: E731
    _register_plugin("test_facts_inner", saves="none", inner_memory=inner)
    _register_plugin("test_facts_passes", saves="none", inner_memory=inner, passes_gradient=True)
    try:
        assert _kept("test_facts_plain") == {"mid"}
        assert _kept("test_facts_keeps_none") == set()
        assert _kept("test_facts_keeps_inputs") == {"fc1"}
        # Eight floats per element kept inside the layer.
        kept = _training(_after_linear("test_facts_inner")) - _training(_after_linear("test_facts_keeps_none"))
        assert kept >= 8 * elements * 4
        # Passing its gradient through, its backward makes no gradient of its input (where that sets the peak).
        assert _training(_after_linear("test_facts_passes")) < _training(_after_linear("test_facts_inner"))
    finally:
        for name in ("test_facts_keeps_none", "test_facts_keeps_inputs", "test_facts_passes", "test_facts_inner"):
            hndl.registry.unregister(name)
    assert _autograd_facts.SAVES["test_facts_declared"] == "none"
    assert "test_facts_plain" not in _autograd_facts.SAVES
    assert "test_facts_declared" in _autograd_facts.PASSES_GRADIENT
    assert "test_facts_declared" in _autograd_facts.INNER
    assert "test_facts_declared" in _costs.MACS
    assert hndl.registry.find("test_facts_declared").module == "tests.Double"


def test_a_plugin_ops_failing_cost_rule_is_an_hndl_error(plugin_ops):
    _register_plugin("test_facts_broken", saves="none", macs=lambda node: 2 * node.out_types[0].shape[0] * "B")
    try:
        with pytest.raises(hndl.HndlError) as caught:
            hndl.summary(_after_linear("test_facts_broken"), B=4)
    finally:
        hndl.registry.unregister("test_facts_broken")
    assert caught.value.code == "E_OP"
    message = str(caught.value)
    assert "'mid'" in message
    assert "could not count the multiply-adds" in message
    assert "TypeError" in message
    assert "fix the op's macs rule" in message
