"""hndl.build: one plain torch module per node, sized by inference, under `nodes` with keys n_<name>."""

from __future__ import annotations

import pytest
import torch
from small_models import mlp_graph
from torch import nn

import hndl


def mlp() -> hndl.Graph:
    return mlp_graph(784, 512, 10)


def test_build_returns_a_graph_module_with_plain_torch_layers():
    model = hndl.build(mlp())
    assert isinstance(model, hndl.torch.GraphModule)
    assert isinstance(model, nn.Module)
    assert list(model.nodes.keys()) == ["n_hidden", "n_act", "n_out"]
    assert type(model.nodes["n_hidden"]) is nn.Linear
    assert (model.nodes["n_hidden"].in_features, model.nodes["n_hidden"].out_features) == (784, 512)
    assert model.graph.name == "mlp"
    assert list(model.state_dict()) == [
        "nodes.n_hidden.weight",
        "nodes.n_hidden.bias",
        "nodes.n_out.weight",
        "nodes.n_out.bias",
    ]


def test_output_equals_a_hand_written_module_with_the_same_weights():
    model = hndl.build(mlp())
    twin = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 10))
    twin.load_state_dict(
        {k.replace("nodes.n_hidden", "0").replace("nodes.n_out", "2"): v for k, v in model.state_dict().items()}
    )
    x = torch.randn(4, 784)
    assert torch.equal(model(x), twin(x))


def test_inputs_bind_positionally_or_by_name():
    g = hndl.Graph("two")
    a = g.input("a", ("B", 3))
    b = g.input("b", ("B", 3))
    g.output(g.add("add", a, b, name="sum"))
    model = hndl.build(g)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    expected = x + y
    assert torch.equal(model(x, y), expected)
    assert torch.equal(model(a=x, b=y), expected)
    assert torch.equal(model(x, b=y), expected)


def test_several_outputs_come_back_as_a_tuple_in_declared_order():
    g = hndl.Graph("multi")
    x = g.input("x", ("B", 4))
    r = g.add("relu", x, name="r")
    t = g.add("tanh", x, name="t")
    g.output([t, r])
    model = hndl.build(g)
    inp = torch.randn(2, 4)
    out = model(inp)
    assert isinstance(out, tuple)
    assert torch.equal(out[0], torch.tanh(inp))
    assert torch.equal(out[1], torch.relu(inp))


def test_a_subgraph_with_repeat_builds_a_module_list_of_module_dicts():
    block = hndl.Graph("block")
    h = block.input("h", ("B", "D"))
    block.output(block.add("relu", block.add("linear", h, name="fc", out_features=8), name="act"))
    g = hndl.Graph("outer")
    g.output(g.add("graph", g.input("x", ("B", 3)), name="blocks", graph=block, repeat=3))
    model = hndl.build(g)
    blocks = model.nodes["n_blocks"]
    assert isinstance(blocks, nn.ModuleList)
    assert len(blocks) == 3
    assert list(blocks[0].keys()) == ["n_fc", "n_act"]
    assert [blocks[i]["n_fc"].in_features for i in range(3)] == [3, 8, 8]
    assert "nodes.n_blocks.2.n_fc.weight" in model.state_dict()
    x = torch.randn(5, 3)
    expected = x
    for i in range(3):
        expected = torch.relu(blocks[i]["n_fc"](expected))
    assert torch.equal(model(x), expected)


def test_build_raises_every_static_problem_and_builds_nothing():
    g = hndl.Graph("bad")
    x = g.input("x", ("B", 4))
    g.add("linear", x, name="a", out_features=0)
    g.output(g.add("linaer", x, name="b"))
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(g)
    assert [p.code for p in info.value.problems] == ["E_PARAM", "E_OP"]


# --- what a built model exposes: its plan, build state, state version and generated code ---------------------


def residual() -> hndl.Graph:
    """x feeds two nodes; a two-output split feeds an add; the block repeats twice."""
    block = hndl.Graph("block")
    h = block.input("h", ("B", 8))
    a, b = block.add("split", h, name="halves", sections=2)
    block.output(block.add("add", h, block.add("concat", b, a, name="swap"), name="res"))
    g = hndl.Graph("outer")
    x = g.input("x", ("B", 8))
    y = g.add("graph", x, name="blocks", graph=block, repeat=2)
    g.output([g.add("relu", y, name="act"), x])
    return g


def test_the_plan_lists_the_leaf_steps_with_resolved_values_and_each_values_last_use():
    model = hndl.build(residual())
    plan = model.plan
    assert isinstance(plan, hndl.Plan)
    assert [s.node.qualname for s in plan.steps] == [
        "blocks.0.halves",
        "blocks.0.swap",
        "blocks.0.res",
        "blocks.1.halves",
        "blocks.1.swap",
        "blocks.1.res",
        "act",
    ]
    assert plan.input_names == ("x",)
    assert plan.input_ids == ("x",)
    first, second = plan.steps[0], plan.steps[3]
    assert first.inputs == ("x",)  # the subgraph's input 'h' is an alias of x
    assert second.inputs == plan.steps[2].outputs  # repetition 2 reads what repetition 1 made
    assert plan.output_ids == (plan.steps[-1].outputs[0], "x")
    last = plan.last_use
    assert last["x"] == len(plan.steps)  # x is also an output: it lives to the end
    assert [last[v] for v in first.outputs] == [1, 1]  # both halves are read by 'swap' only
    assert last[plan.steps[2].outputs[0]] == 5  # read by the next block's split (step 3) and its add (step 5)
    assert last[plan.steps[-1].outputs[0]] == len(plan.steps)
    assert set(plan.locations) == {s.node.qualname for s in plan.steps}
    assert isinstance(plan.steps[0], hndl.Step)


def test_a_value_nothing_reads_dies_at_the_step_that_makes_it():
    g = hndl.Graph("unused")
    x = g.input("x", ("B", 4))
    _a, b = g.add("split", x, name="halves", sections=2)
    g.output(g.add("relu", b, name="act"))
    plan = hndl.build(g).plan
    a_id, b_id = plan.steps[0].outputs
    assert (plan.last_use[a_id], plan.last_use[b_id], plan.last_use["x"]) == (0, 1, 0)


def test_node_module_finds_a_nodes_live_layer_or_none():
    model = hndl.build(residual())
    for step in model.plan.steps:
        assert model.node_module(step.node.path) is model.get_submodule(".".join(step.node.path))
    assert model.node_module(("nodes", "n_missing")) is None
    model.nodes.n_blocks[0]._modules["n_swap"] = None
    assert model.node_module(("nodes", "n_blocks", "1", "n_swap")) is not None
    assert model.node_module(("nodes", "n_blocks", "0", "n_swap")) is None


def test_code_is_the_generated_source_and_names_every_node():
    model = hndl.build(mlp())
    code = model.code
    assert code.startswith("def execute(self, args, kwargs):")
    assert "else m0.forward(a0)  # linear 'hidden'" in code
    assert "def unchecked(self, a0):" in code
    compile(code, "<test>", "exec")


def test_build_state_and_state_version_are_public_and_read_only():
    model = hndl.build(mlp())
    slot = model.build_state.tensors["nodes.n_hidden.weight"]
    assert isinstance(model.build_state, hndl.torch.BuildState)
    assert (slot.kind, slot.shape, slot.dtype, slot.node, slot.op) == (
        "parameter",
        (512, 784),
        torch.float32,
        "hidden",
        "linear",
    )
    version = model.state_version
    model.double()
    assert model.state_version != version
    assert model.build_state.tensors["nodes.n_hidden.weight"].dtype == torch.float64
    with pytest.raises(AttributeError):
        model.state_version = 3  # type: ignore[misc]
    with pytest.raises(AttributeError):
        model.plan = None  # type: ignore[misc]


# --- the collector pause during a build (process-wide; see hndl/torch/_build.py for why it is safe) -------------


def test_a_build_restores_the_collector_even_when_it_fails():
    import gc

    assert gc.isenabled()
    hndl.build(mlp())
    assert gc.isenabled()
    g = hndl.Graph("bad")
    g.output(g.add("module", g.input("x", ("B", 3)), name="m", target="torch.nn:Linear", kwargs={"in_features": -1}))
    with pytest.raises(hndl.HndlError):
        hndl.build(g)
    assert gc.isenabled()


def test_a_build_leaves_a_collector_the_user_turned_off_off():
    import gc

    gc.disable()
    try:
        hndl.build(mlp())
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_overlapping_builds_share_one_pause_that_ends_with_the_last():
    import gc

    from hndl.torch._build import collection_paused

    first, second = collection_paused(), collection_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the other build is still running
    second.__exit__(None, None, None)
    assert gc.isenabled()
    with collection_paused():
        gc.disable()  # another thread's choice, made while a build runs, does not outlive the build
    assert gc.isenabled()


def test_builds_from_many_threads_leave_the_collector_on():
    import gc
    import threading

    errors: list[BaseException] = []

    def build() -> None:
        try:
            for _ in range(5):
                hndl.build(mlp())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert gc.isenabled()
