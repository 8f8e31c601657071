"""A built model's ``forward`` signature names the graph's inputs (issue 36; ``hndl/torch/_forward.py``).

It was ``(*args, **kwargs)``, so HF ``Trainer`` dropped every dataset column and torch.export refused
``dynamic_shapes`` keyed by input name. The call itself is unchanged: the same binding and the same E_INPUT.
"""

from __future__ import annotations

import copy
import inspect
import io
import pickle

import pytest
import torch

import hndl
from hndl.torch import GraphModule


def two_inputs() -> hndl.GraphModule:
    g = hndl.Graph("pair")
    x = g.input("x", ("B", 4))
    scale = g.input("scale", ("B", 4))
    g.output(g.add("mul", g.add("linear", x, name="proj", out_features=4), scale, name="out"))
    torch.manual_seed(0)
    return hndl.build(g)


def names_of(model: torch.nn.Module) -> list[str]:
    return list(inspect.signature(model.forward).parameters)


def test_forward_signature_was_args_kwargs_and_now_names_the_inputs_in_order():
    model = two_inputs()
    signature = inspect.signature(model.forward)
    assert list(signature.parameters) == ["x", "scale"]
    kinds = {p.kind for p in signature.parameters.values()}
    assert kinds == {inspect.Parameter.POSITIONAL_OR_KEYWORD}  # no *args, no **kwargs
    assert all(p.default is inspect.Parameter.empty for p in signature.parameters.values())  # every input required
    assert list(inspect.signature(type(model).forward).parameters) == ["self", "x", "scale"]


@pytest.mark.parametrize(
    ("name", "inputs"),
    [
        ("llama", ["input_ids", "attention_mask"]),
        ("resnet18", ["image"]),
        ("bert", ["input_ids", "attention_mask", "token_type_ids"]),
    ],
)
def test_forward_signature_of_zoo_models_names_their_inputs(name, inputs):
    model = hndl.build(hndl.zoo.get(name))
    assert names_of(model) == inputs == list(model.plan.input_names)


def test_forward_signature_of_a_kv_cache_model_names_its_cache_inputs():
    model = hndl.build(hndl.zoo.get("llama", kv_cache=True))
    assert names_of(model) == list(model.graph.inputs)
    assert names_of(model)[0] == "input_ids"
    assert "cache_k" in names_of(model)


def test_signed_model_is_still_a_graph_module_named_graph_module():
    model = two_inputs()
    assert isinstance(model, GraphModule)
    assert type(model).__name__ == "GraphModule"
    assert type(model).__qualname__ == "GraphModule"
    assert type(model) is not GraphModule  # a subclass per input list, as torch.fx gives each GraphModule one
    assert type(two_inputs()) is type(model)  # shared by every model with the same inputs: no class per build


def test_calls_bind_and_fail_as_before_the_signature():
    model = two_inputs()
    x, s = torch.randn(2, 4), torch.randn(2, 4)
    want = model(x, s)
    assert torch.equal(model(x, scale=s), want)
    assert torch.equal(model(scale=s, x=x), want)
    assert torch.equal(model.forward(x, s), want)
    cases = [
        ((x,), {}, "missing"),
        ((x, s, s), {}, "takes 2 inputs, got 3"),
        ((x, s), {"bias": s}, "unknown input 'bias'"),
        ((x,), {"x": x}, "given both by position and by name"),
    ]
    for args, kwargs, words in cases:
        with pytest.raises(hndl.HndlError) as info:
            model(*args, **kwargs)
        assert info.value.code == "E_INPUT"
        assert words in str(info.value)


def test_input_named_by_a_python_keyword_is_refused_as_the_signature_cannot_name_it():
    g = hndl.Graph("g")
    with pytest.raises(hndl.HndlError) as info:
        g.input("lambda", ("B", 4))
    assert info.value.code == "E_NAME"
    assert "Python keyword" in str(info.value)
    assert "lambda_" in str(info.value)
    with pytest.raises(hndl.HndlError) as info:
        g.input("self", ("B", 4))  # clashes with Module.__call__'s own first parameter: refused as before
    assert info.value.code == "E_NAME"


def test_soft_keywords_and_argument_like_names_are_valid_inputs():
    g = hndl.Graph("g")
    a, b, c = g.input("match", ("B", 4)), g.input("args", ("B", 4)), g.input("kwargs", ("B", 4))
    g.output(g.add("add", g.add("add", a, b), c))
    model = hndl.build(g)
    assert names_of(model) == ["match", "args", "kwargs"]
    t = torch.ones(1, 4)
    assert torch.equal(model(match=t, args=t, kwargs=t), 3 * t)


def test_deepcopy_pickle_and_torch_save_keep_the_signature_and_outputs():
    model = two_inputs()
    x, s = torch.randn(3, 4), torch.randn(3, 4)
    want = model(x, s)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    copies = [
        copy.deepcopy(model),
        copy.copy(model),
        pickle.loads(pickle.dumps(model)),
        torch.load(buffer, weights_only=False),
    ]
    for clone in copies:
        assert type(clone) is type(model)
        assert isinstance(clone, GraphModule)
        assert names_of(clone) == ["x", "scale"]
        assert torch.equal(clone(x, scale=s), want)


def test_a_subclass_with_its_own_forward_keeps_its_own_signature():
    class Scaled(GraphModule):
        def forward(self, x, scale, factor=2.0):  # type: ignore[override]
            return super().forward(x, scale) * factor

    model = two_inputs()
    mine = Scaled.__new__(Scaled)
    mine.__setstate__(model.__getstate__())
    assert type(mine) is Scaled
    assert names_of(mine) == ["x", "scale", "factor"]
    x, s = torch.randn(2, 4), torch.randn(2, 4)
    assert torch.equal(mine(x, s), 2.0 * model(x, s))


def test_torch_compile_has_no_graph_break_by_position_or_by_name():
    import torch._dynamo as dynamo

    model = hndl.build(hndl.zoo.get("llama")).eval()
    ids, mask = torch.randint(0, 256, (2, 5)), torch.ones(2, 5, dtype=torch.bool)
    assert dynamo.explain(model)(ids, mask).graph_break_count == 0
    assert dynamo.explain(model)(input_ids=ids, attention_mask=mask).graph_break_count == 0
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(model)(ids, attention_mask=mask), model(ids, mask))


def test_functional_call_by_position_and_by_name():
    model = two_inputs()
    x, s = torch.randn(2, 4), torch.randn(2, 4)
    params = {k: torch.zeros_like(v) for k, v in model.named_parameters()}
    want = torch.zeros(2, 4)
    assert torch.equal(torch.func.functional_call(model, params, (x, s)), want)
    assert torch.equal(torch.func.functional_call(model, params, (), {"x": x, "scale": s}), want)
