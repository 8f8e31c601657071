"""Unknown names: the alias table (names brought from torch, timm, transformers, Keras) and the did-you-mean,
which only fixes spelling and never offers an op that means something else (hndl.naming.closest)."""

from __future__ import annotations

import pytest

import hndl
from hndl.naming import closest


def e_op(op: str) -> hndl.Problem:
    g = hndl.Graph("t")
    g.output(g.add(op, g.input("x", ("B", 8)), name="n"))
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(g)
    (p,) = info.value.problems
    assert (p.code, p.node) == ("E_OP", "n")
    return p


@pytest.mark.parametrize(
    ("written", "hint"),
    [
        ("Hardsigmoid", "'Hardsigmoid' is {op: hardsigmoid} in hndl"),
        ("nn.Hardswish", "'nn.Hardswish' is {op: hardswish} in hndl"),
        ("LayerNorm2d", "'LayerNorm2d' is {op: layernorm2d} in hndl"),
        ("layer_norm2d", "'layer_norm2d' is {op: layernorm2d} in hndl"),
        ("DropPath", "'DropPath' is {op: drop_path} in hndl"),
        ("StochasticDepth", "'StochasticDepth' is {op: drop_path, mode: row} in hndl"),
        ("GELU(approximate='tanh')", "\"GELU(approximate='tanh')\" is {op: gelu, approximate: tanh} in hndl"),
        ("gelu_new", "'gelu_new' is {op: gelu, approximate: tanh_formula} in hndl"),
        ("SiLU", "'SiLU' is {op: silu} in hndl"),
        ("Swish", "'Swish' is {op: silu} in hndl"),
        (
            "LeakyReLU(negative_slope=0.2)",
            "'LeakyReLU(negative_slope=0.2)' is {op: leaky_relu, negative_slope: 0.2} in hndl",
        ),
        ("torch.nn.ReLU6", "'torch.nn.ReLU6' is {op: relu6} in hndl"),
        ("Dense", "'Dense' is {op: linear} in hndl"),
        ("GlobalAveragePooling2D", "'GlobalAveragePooling2D' is {op: adaptive_avgpool2d, output_size: 1} in hndl"),
        ("greater_equal", "'greater_equal' is {op: ge} in hndl"),
        ("clip", "'clip' is {op: clamp} in hndl"),
        ("register_buffer", "'register_buffer' is {op: buffer} in hndl"),
    ],
)
def test_a_name_from_another_library_is_shown_as_hndl_writes_it(written, hint):
    assert e_op(written).hint == hint


def test_a_call_is_read_not_run_and_only_the_ops_parameters_are_kept():
    assert e_op("GELU(approximate=__import__('os').getcwd())").hint.endswith("is {op: gelu} in hndl")
    assert e_op("LeakyReLU(0.2, inplace=True)").hint == "'LeakyReLU(0.2, inplace=True)' is {op: leaky_relu} in hndl"
    assert e_op("Hardswish(" + "x" * 300).hint == "`hndl ops` lists the ops"


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("reluu", "relu"),
        ("lineer", "linear"),
        ("sigmod", "sigmoid"),
        ("hardsigmod", "hardsigmoid"),
        ("dropot", "dropout"),
        ("softmx", "softmax"),
        ("atention", "attention"),
        ("emebdding", "embedding"),
        ("rleu", "relu"),
        ("leaky_rleu", "leaky_relu"),
        ("minimun", "minimum"),
        ("batchnrom2d", "batchnorm2d"),
    ],
)
def test_a_misspelt_op_gets_the_op(written, meant):
    assert e_op(written).hint == f"did you mean '{meant}'?"


@pytest.mark.parametrize(
    "written",
    [
        "conv3d",  # another number: another op
        "maxpool",  # which dimension?
        "lelu",  # relu, gelu, selu, celu or elu: one letter of a short word changed
        "lte",  # le or lt
        "adaptive_maxpool2d",  # max is not avg
        "dropout2d",  # drops channels, not elements
        "sinh",  # not sin, not sign
        "log_cosh",
    ],
)
def test_a_name_that_means_something_else_gets_no_spelling_fix(written):
    assert e_op(written).hint == "`hndl ops` lists the ops"


def test_no_op_name_is_offered_as_a_spelling_fix_for_another_op():
    """The rule, over the whole registry: were any op missing, its name would not be 'corrected' to another op.
    Every op means something different from every other, so each such suggestion would change the model."""
    names = hndl.registry.names()
    offered = {name: closest(name, [n for n in names if n != name]) for name in names}
    assert {name: other for name, other in offered.items() if other is not None} == {}


def test_every_single_typo_of_an_op_is_that_op_or_nothing():
    """One swap, one doubled letter or one separator changed in any op's name never suggests a different op."""
    names = hndl.registry.names()
    registered = {n.replace("_", "") for n in names}
    for name in names:
        typos = {name[:i] + name[i + 1] + name[i] + name[i + 2 :] for i in range(len(name) - 1)}
        typos |= {name[:i] + name[i] + name[i:] for i in range(len(name))}
        typos |= {name.replace("_", ""), name.upper()}
        for typo in typos - {name}:
            if typo.replace("_", "").lower() in registered - {name.replace("_", "")}:
                continue  # the typo is another op's name: that op is what runs
            assert closest(typo, names) in (name, None), (typo, closest(typo, names))


def test_the_rule_keeps_spelling_fixes_for_keys_and_references():
    assert closest("out_feature", ["out_features", "in_features", "bias"]) == "out_features"
    assert closest("kernal_size", ["kernel_size", "stride"]) == "kernel_size"
    assert closest("bais", ["bias", "weight"]) == "bias"
    assert closest("num_class", ["num_classes", "width"]) == "num_classes"
    assert closest("wtee", ["wte", "head"]) == "wte"
    assert closest("Layer_Norm", ["layernorm"]) == "layernorm"
    assert closest("block3", ["block2", "block4"]) is None
