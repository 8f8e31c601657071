"""Hints computed from the mismatch: the edit that turns what a value is into what its contract wants, said as
tensor code for a call (E_INPUT) and as a node for a graph (E_SHAPE), from one search (hndl._hints)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hndl
from hndl._contracts import ShapePattern
from hndl._hints import call_hint, dtype_fix, node_hint, shape_fix

# --- the search ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "actual", "code", "result"),
    [
        ("B 3 32 32", (8, 32, 32, 3), "x.permute(0, 3, 1, 2)", (8, 3, 32, 32)),  # channels-last, square
        ("B 3 32 48", (8, 32, 48, 3), "x.permute(0, 3, 1, 2)", (8, 3, 32, 48)),
        ("B 32 32 3", (8, 3, 32, 32), "x.permute(0, 2, 3, 1)", (8, 32, 32, 3)),  # and back
        ("B 3 32 32", (3, 32, 32), "x.unsqueeze(0)", (1, 3, 32, 32)),  # a missing batch dim
        ("B 3 32 32", (32, 32, 3), "x.unsqueeze(0).permute(0, 3, 1, 2)", (1, 3, 32, 32)),
        ("B 1 28 28", (64, 28, 28), "x.unsqueeze(1)", (64, 1, 28, 28)),  # a missing channel dim
        ("B 784", (64, 28, 28), "x.flatten(1)", (64, 784)),
        ("B 784", (64, 1, 784), "x.squeeze(1)", (64, 784)),
        ("B 1 28 28", (64, 784), "x.reshape(-1, 1, 28, 28)", (64, 1, 28, 28)),
        ("*batch 3136", (8, 64, 7, 7), "x.flatten(1)", (8, 3136)),
        ("B T 32", (16, 8, 32), "x.transpose(0, 1)", (8, 16, 32)),  # sequence-first
    ],
)
def test_the_likely_edit_is_found(pattern: str, actual: tuple[int, ...], code: str, result: tuple[int, ...]) -> None:
    env = {"B": 8} if pattern == "B T 32" else {}
    fix = shape_fix(ShapePattern.parse(pattern), actual, env)
    assert fix is not None
    assert (fix.code("x"), fix.result) == (code, result)


@pytest.mark.parametrize(
    ("pattern", "actual"),
    [
        ("B 3 32 32", (8, 3, 32, 31)),  # a wrong size: no edit makes it right
        ("B 20", (8, 10)),  # a reshape to [4, 20] would change the batch
        ("B 784", (64, 28, 27)),  # the element counts differ
    ],
)
def test_no_hint_when_no_single_edit_makes_it_fit(pattern: str, actual: tuple[int, ...]) -> None:
    assert shape_fix(ShapePattern.parse(pattern), actual, {}) is None


def test_a_bound_symbol_is_respected() -> None:
    # [B, T, D] with B already bound to 8: [16, 8, 32] is sequence-first, not a batch of 16.
    fix = shape_fix(ShapePattern.parse("B T D"), (16, 8, 32), {"B": 8})
    assert fix is not None
    assert fix.code("x") == "x.transpose(0, 1)"


EDITS = st.sampled_from(["permute", "unsqueeze", "flatten"])


@given(
    dims=st.lists(st.integers(2, 9), min_size=2, max_size=4, unique=True),
    edit=EDITS,
    data=st.data(),
)
def test_an_edited_shape_gets_a_fix_that_the_contract_accepts(dims: list[int], edit: str, data: st.DataObject) -> None:
    """Distinct sizes, so the edit is recoverable: the fix found must fit the contract (never a hint that fails
    again), and a shape one forgotten edit away always gets one."""
    wanted = tuple(dims)
    pattern = ShapePattern.parse(list(wanted))
    if edit == "permute":
        order = data.draw(st.permutations(range(len(wanted))))
        actual = tuple(wanted[i] for i in order)
    elif edit == "unsqueeze":  # the contract wants a dim of 1 that the value lacks
        at = data.draw(st.integers(0, len(wanted)))
        pattern = ShapePattern.parse([*wanted[:at], 1, *wanted[at:]])
        actual = wanted
    else:  # the value is unflattened: its last dim split in two
        last = wanted[-1]
        pattern = ShapePattern.parse([*wanted[:-1], last * 6])
        actual = (*wanted[:-1], 2, 3 * last)
    fix = shape_fix(pattern, actual, {})
    if actual == tuple(d for d in pattern.dims):
        assert fix is None or fix.result == actual
        return
    assert fix is not None
    assert pattern.match(fix.result, {}, strict=True) == ""
    # What the code says is what the search computed.
    assert tuple(eval(fix.code("t"), {"t": torch.zeros(actual)}).shape) == fix.result


@pytest.mark.parametrize(
    ("actual", "rule", "fix"),
    [
        (
            "uint8",
            "float",
            (".float() / 255", "uint8 image values run 0..255; the model computes in floats, usually 0..1"),
        ),
        ("int64", "float", (".float()", "")),
        ("int32", "float64", (".double()", "")),
        ("float32", "int64", (".long()", "indices are integers")),
        ("float32", "float", None),
    ],
)
def test_dtype_fixes(actual: str, rule: str, fix: tuple[str, str] | None) -> None:
    assert dtype_fix(actual, rule) == fix


# --- said at run time: E_INPUT --------------------------------------------------------------------------------


def conv_model() -> hndl.torch.GraphModule:
    g = hndl.Graph("cnn")
    g.output(g.add("conv2d", g.input("images", ("B", 3, 32, 32)), name="conv", out_channels=8, kernel_size=3))
    return hndl.build(g)


def call_error(model: torch.nn.Module, *args: torch.Tensor) -> str:
    with pytest.raises(hndl.HndlError) as info:
        model(*args)
    return str(info.value)


def test_channels_last_image_hints_permute() -> None:
    assert call_error(conv_model(), torch.randn(8, 32, 32, 3)) == (
        "E_INPUT input 'images': dim 1 expected 3, got 32\n"
        "    expected: [B, 3, 32, 32]\n"
        "    actual:   [8, 32, 32, 3]\n"
        "    hint:     images.permute(0, 3, 1, 2) makes it [8, 3, 32, 32] (channels-last to channels-first)"
    )


def test_missing_batch_dim_hints_unsqueeze() -> None:
    assert call_error(conv_model(), torch.randn(3, 32, 32)) == (
        "E_INPUT input 'images': expected rank 4 [B, 3, 32, 32], got rank 3 [3, 32, 32]\n"
        "    expected: [B, 3, 32, 32]\n"
        "    actual:   [3, 32, 32]\n"
        "    hint:     images.unsqueeze(0) makes it [1, 3, 32, 32] (a missing batch dim)"
    )


def test_unflattened_input_hints_flatten() -> None:
    g = hndl.Graph("mlp")
    g.output(g.add("linear", g.input("x", ("B", 784)), name="fc", out_features=10))
    assert call_error(hndl.build(g), torch.randn(64, 28, 28)) == (
        "E_INPUT input 'x': expected rank 2 [B, 784], got rank 3 [64, 28, 28]\n"
        "    expected: [B, 784]\n"
        "    actual:   [64, 28, 28]\n"
        "    hint:     x.flatten(1) makes it [64, 784]"
    )


def test_uint8_image_hints_a_normalising_conversion() -> None:
    image = torch.randint(0, 255, (8, 3, 32, 32), dtype=torch.uint8)
    assert call_error(conv_model(), image) == (
        "E_INPUT input 'images': dtype must be float, got uint8\n"
        "    expected: float\n"
        "    actual:   uint8\n"
        "    bound:    B=8\n"
        "    hint:     convert it: images.float() / 255 (uint8 image values run 0..255; the model computes in floats,"
        " usually 0..1)"
    )


def test_uint8_channels_last_image_gets_both_edits_in_one_hint() -> None:
    image = torch.randint(0, 255, (8, 32, 32, 3), dtype=torch.uint8)
    message = call_error(conv_model(), image)
    assert (
        message.splitlines()[-1]
        == "    hint:     images.permute(0, 3, 1, 2).float() / 255 makes it [8, 3, 32, 32] float"
    )


def test_a_size_no_edit_fixes_keeps_the_general_hint() -> None:
    message = call_error(conv_model(), torch.randn(8, 3, 32, 31))
    assert message.splitlines()[-1] == (
        "    hint:     pass images shaped [B, 3, 32, 32], or write the shape it has in the graph's inputs"
    )


# --- said statically: E_SHAPE with the node to add ----------------------------------------------------------------


def spec_problem(text: str) -> hndl.Problem:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(text))
    (problem,) = info.value.problems
    return problem


def test_channels_last_input_wired_into_a_conv_hints_a_permute_node() -> None:
    p = spec_problem(
        "hndl: 1\ninputs:\n  x: {shape: [B, 32, 32, 3]}\n"
        "nodes:\n  conv: {op: conv2d, in: x, in_channels: 3, out_channels: 8, kernel_size: 3}\noutputs: [conv]\n"
    )
    assert (p.code, p.node, p.message) == ("E_SHAPE", "conv", "dim 1 is in_channels, bound to 3, but got 32")
    assert p.hint == (
        "add a node {op: permute, dims: [0, 3, 1, 2]} before it: it makes [B, 32, 32, 3] into [B, 3, 32, 32]"
        " (channels-last to channels-first)"
    )


def test_the_static_and_run_time_hints_come_from_one_search() -> None:
    fix = shape_fix(ShapePattern.parse("B 3 32 32"), (8, 32, 32, 3), {})
    assert fix is not None
    assert call_hint(fix, "x") == "x.permute(0, 3, 1, 2) makes it [8, 3, 32, 32] (channels-last to channels-first)"
    assert node_hint(fix) == (
        "add a node {op: permute, dims: [0, 3, 1, 2]} before it: it makes [8, 32, 32, 3] into [8, 3, 32, 32]"
        " (channels-last to channels-first)"
    )


def test_a_uint8_graph_input_into_a_float_layer_hints_the_normalising_conversion() -> None:
    p = spec_problem(
        "hndl: 1\ninputs:\n  x: {shape: [B, 3, 32, 32], dtype: uint8}\n"
        "nodes:\n  conv: {op: conv2d, in: x, out_channels: 8, kernel_size: 3}\noutputs: [conv]\n"
    )
    assert (p.code, p.node) == ("E_DTYPE", "conv")
    assert p.hint == "declare the input's dtype: float32, and pass a floating tensor (x.float() / 255 in torch)"
