"""Pipeline stages cut from the plan (``hndl/torch/_pipeline.py``): chained, they compute the model; each holds
exactly its layers under the model's names; the shapes they declare are the ones hndl infers. The two-process
GPipe and 1F1B runs are in test_interop_distributed.py."""

from __future__ import annotations

import itertools

import pytest
import torch
from dist_worker import make_blocks_model

import hndl


def chain(stages, *inputs):
    values = inputs
    for stage in stages:
        out = stage(*values)
        values = out if isinstance(out, tuple) else (out,)
    return values[0] if len(values) == 1 else values


@pytest.mark.parametrize("split_at", [["blocks.2"], ["blocks"], ["blocks.1", "head"], ["stem", "blocks.2"]])
def test_chained_stages_compute_the_model(split_at):
    model = make_blocks_model().eval()
    stages = model.pipeline_stages(split_at)
    x = torch.randn(5, 6)
    assert torch.equal(chain(stages, x), model(x))
    # Stage k takes exactly what stage k-1 gives, in order: what torch.distributed.pipelining passes on.
    for before, after in itertools.pairwise(stages):
        assert before.outputs == after.inputs


def test_a_stage_holds_its_layers_under_the_models_names_and_no_others():
    model = make_blocks_model()
    first, second = model.pipeline_stages(["blocks.2"])
    assert set(first.state_dict()) | set(second.state_dict()) == set(model.state_dict())
    assert not set(first.state_dict()) & set(second.state_dict())
    assert "nodes.n_blocks.2.n_up.weight" in second.state_dict()
    assert second.nodes.n_blocks["2"].n_up is model.nodes.n_blocks[2].n_up  # the model's own layer


def test_values_needed_later_pass_through_a_stage():
    g = hndl.Graph("skip")
    x = g.input("x", ("B", 4))
    a = g.add("linear", x, name="a", out_features=4)
    b = g.add("relu", a, name="b")
    c = g.add("linear", b, name="c", out_features=4)
    g.output(g.add("add", [a, c], name="d"))
    model = hndl.build(g).eval()
    stages = model.pipeline_stages(["b", "c"])
    assert stages[1].inputs == ("a",)
    assert stages[1].outputs == ("a", "b")  # a is read again by d, in the last stage
    x = torch.randn(3, 4)
    assert torch.equal(chain(stages, x), model(x))


def test_splitting_by_cost_balances_the_multiply_adds():
    model = make_blocks_model()
    stages = model.pipeline_stages(num_stages=2, B=8)
    assert [s.first for s in stages] == ["stem", "blocks.1.up"]
    x = torch.randn(8, 6)
    assert torch.equal(chain(stages, x), model(x))


def test_example_args_have_the_inferred_shapes_and_carry_gradients_between_stages():
    model = make_blocks_model()
    first, second = model.pipeline_stages(["blocks.2"])
    (x,) = first.example_args(B=4)
    assert x.shape == (4, 6)
    assert x.device.type == "meta"
    assert not x.requires_grad  # the model's own input
    (h,) = second.example_args(B=4)
    assert h.shape == (4, 8)
    assert h.requires_grad
    assert second.example_outputs(B=4)[0].shape == (4, 3)
    with pytest.raises(hndl.HndlError) as err:
        second.example_args()
    assert err.value.problems[0].code == "E_INPUT"


def test_bad_splits_are_e_param():
    model = make_blocks_model()
    with pytest.raises(hndl.HndlError) as err:
        model.pipeline_stages(["blocks.9"])
    assert err.value.problems[0].code == "E_PARAM"
    with pytest.raises(hndl.HndlError) as err:
        model.pipeline_stages(["blokcs.2"])
    assert err.value.problems[0].hint == "did you mean 'blocks.2'?"
    with pytest.raises(hndl.HndlError, match="one of them"):
        model.pipeline_stages(["head"], num_stages=2)
    with pytest.raises(hndl.HndlError, match="only 5 places"):
        model.pipeline_stages(num_stages=9, B=2)
    with pytest.raises(hndl.HndlError, match="needs every symbol"):
        model.pipeline_stages(num_stages=2)


def test_a_parameter_tied_across_stages_is_refused():
    model = hndl.build(hndl.zoo.get("gpt2", n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16))
    with pytest.raises(hndl.HndlError) as err:
        model.pipeline_stages(["h.1"])
    assert "is tied to 'lm_head.weight'" in str(err.value)


def test_a_layer_failing_in_a_stage_is_named():
    model = make_blocks_model()
    _first, second = model.pipeline_stages(["blocks.2"])
    with pytest.raises(hndl.HndlError) as err:
        second(torch.randn(2, 5))
    assert err.value.problems[0].code == "E_RUNTIME"
    assert err.value.problems[0].node == "blocks.2.up"
    with pytest.raises(hndl.HndlError, match="stage 1 takes 1 inputs"):
        second()
