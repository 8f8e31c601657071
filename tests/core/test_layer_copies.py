"""Weightless layers are built as copies of a pristine instance (hndl/_layer_copies.py) where that is the object
the constructor makes, and through the constructor wherever it might not be."""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict

import pytest
import torch
from torch import nn

import hndl
from hndl._layer_copies import make_layer

ACTIVATIONS = ["relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "leaky_relu", "elu", "softmax", "mish"]


def _same_instance_state(made: nn.Module, constructed: nn.Module) -> None:
    assert type(made) is type(constructed)
    assert list(made.__dict__) == list(constructed.__dict__)  # same attributes, same order
    for name, value in constructed.__dict__.items():
        copied = made.__dict__[name]
        assert type(copied) is type(value), name
        assert copied == value, name
        if isinstance(value, (dict, OrderedDict, set)):
            assert copied is not value, name  # a fresh container, never shared


@pytest.mark.parametrize(
    ("cls", "settings"), [(nn.ReLU, {}), (nn.GELU, {"approximate": "tanh"}), (nn.Softmax, {"dim": 1})]
)
def test_a_copy_is_the_object_the_constructor_makes(cls, settings):
    first, second = make_layer(cls, **settings), make_layer(cls, **settings)
    constructed = cls(**settings)
    for made in (first, second):
        _same_instance_state(made, constructed)
    _same_instance_state(second, first)
    x = torch.randn(3, 4)
    assert torch.equal(second(x), constructed(x))


def test_copies_share_no_hook_dict_and_no_store():
    first, second = make_layer(nn.ReLU), make_layer(nn.ReLU)
    seen: list[str] = []
    first.register_forward_hook(lambda *a: seen.append("first"))
    first.register_buffer("extra", torch.ones(1))
    second(torch.ones(2))
    assert seen == []
    assert "extra" not in dict(second.named_buffers())
    assert not second._forward_hooks


def test_a_patched_constructor_runs_instead_of_the_copy(monkeypatch):
    make_layer(nn.ReLU)  # the snapshot exists
    original = nn.ReLU.__init__

    def patched(self, inplace=False):
        original(self, inplace)
        self.tagged = True

    monkeypatch.setattr(nn.ReLU, "__init__", patched)
    assert make_layer(nn.ReLU).tagged is True


def test_a_patched_module_constructor_runs_instead_of_the_copy(monkeypatch):
    make_layer(nn.Tanh)
    original = nn.Module.__init__

    def patched(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.__dict__["_seen_by_tool"] = True

    monkeypatch.setattr(nn.Module, "__init__", patched)
    assert make_layer(nn.Tanh).__dict__.get("_seen_by_tool") is True


class _WithBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("scale", torch.ones(2))


class _WithList(nn.Module):
    def __init__(self, sizes: list[int] | None = None) -> None:
        super().__init__()
        self.sizes = list(sizes or [1])


def test_layers_holding_more_than_settings_are_always_constructed():
    a, b = make_layer(_WithBuffer), make_layer(_WithBuffer)
    assert a.scale is not b.scale
    c, d = make_layer(_WithList), make_layer(_WithList)
    assert c.sizes is not d.sizes
    # a setting that cannot key the table
    e, f = make_layer(_WithList, sizes=[1, 2]), make_layer(_WithList, sizes=[1, 2])
    assert e.sizes == f.sizes == [1, 2]
    assert e.sizes is not f.sizes


@pytest.mark.parametrize("op", ACTIVATIONS)
def test_every_built_activation_is_a_distinct_layer_equal_to_its_constructed_twin(op):
    g = hndl.Graph(op)
    h = g.input("x", ("B", 6))
    for i in range(3):
        h = g.add(op, h, name=f"a{i}")
    g.output(h)
    model = hndl.build(g)
    layers = [model.nodes[f"n_a{i}"] for i in range(3)]
    assert len({id(layer) for layer in layers}) == 3
    assert len({id(layer._forward_hooks) for layer in layers}) == 3
    twin = type(layers[0])(**{k: v for k, v in layers[0].__dict__.items() if not k.startswith("_") and k != "training"})
    _same_instance_state(layers[1], twin)
    x = torch.randn(2, 6)
    expected = x
    for _ in range(3):
        expected = twin(expected)
    assert torch.equal(model(x), expected)
    for again in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert torch.equal(again(x), expected)
