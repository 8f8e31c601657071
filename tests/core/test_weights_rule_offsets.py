"""Key templates with an offset field, ``{i+1}``: a checkpoint that counts from 1 (torchvision's DenseNet,
``denselayer1``) loads into repetitions counted from 0, both ways (forward for loading, backward for naming the
checkpoint key a missing tensor should have come from)."""

from __future__ import annotations

import pytest

from hndl.weights import rule


def test_an_offset_field_carries_the_number_minus_its_offset():
    r = rule("block.layer{i+1}.{t}", "nodes.n_block.{i}.n_conv.{t}")
    assert r.forward("block.layer1.weight").targets[0][0] == "nodes.n_block.0.n_conv.weight"
    assert r.forward("block.layer12.bias").targets[0][0] == "nodes.n_block.11.n_conv.bias"
    assert r.backward("nodes.n_block.11.n_conv.bias") == ("block.layer12.bias",)
    assert rule("a{i-2}", "b{i}").forward("a5").targets[0][0] == "b7"  # a5 is i-2: i is 7
    assert rule("a{i-2}", "b{i}").backward("b1") is None  # would be a-1


@pytest.mark.parametrize("key", ["block.layer0.weight", "block.layer01.weight", "block.layerx.weight"])
def test_an_offset_field_matches_whole_numbers_that_stay_whole(key):
    assert rule("block.layer{i+1}.{t}", "nodes.n_block.{i}.{t}").forward(key) is None


def test_a_field_without_offset_filling_one_with_an_offset_needs_a_number():
    r = rule("layers.{i}.{t}", "nodes.n_layer{i+1}.{t}")
    assert r.forward("layers.4.weight").targets[0][0] == "nodes.n_layer5.weight"
    assert r.forward("layers.x.weight") is None
    assert r.backward("nodes.n_layer0.weight") is None  # would be layers.-1
    assert r.backward("nodes.n_layer1.weight") == ("layers.0.weight",)


@pytest.mark.parametrize(("template", "why"), [("a.{i+1}.{i}", "two offsets"), ("a.{i*+1}", "both")])
def test_malformed_offset_fields_are_refused(template, why):
    with pytest.raises(ValueError, match=why):
        rule(template, "b")
