"""Call-time errors: E_INPUT for inputs, E_CONTRACT for node outputs, E_RUNTIME for failing layers, on both paths."""

from __future__ import annotations

import pytest
import small_models
import torch
from torch import nn

import hndl


def mlp() -> hndl.GraphModule:
    return small_models.mlp(act=False)


def two_inputs(device: str | None = None) -> hndl.GraphModule:
    g = hndl.Graph("pair")
    a = g.input("a", ("B", "D"), device=device)
    b = g.input("b", ("B", "D"), dtype="float32")
    g.output(g.add("add", a, b, name="sum"))
    return hndl.build(g)


# --- E_INPUT ---------------------------------------------------------------------------------------------


def test_a_wrong_dim_names_the_input_the_dim_and_both_shapes():
    model = mlp()
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(3, 9))
    err = info.value
    assert err.code == "E_INPUT"
    assert err.node == "x"
    assert str(err).splitlines() == [
        "E_INPUT input 'x': dim 1 expected 8, got 9",
        "    expected: [B, 8]",
        "    actual:   [3, 9]",
        "    hint:     pass x shaped [B, 8], or write the shape it has in the graph's inputs",
    ]
    assert model.validations == 1


def test_a_wrong_rank_is_an_input_error():
    with pytest.raises(hndl.HndlError, match=r"expected rank 2 \[B, 8\], got rank 3 \[2, 3, 8\]") as info:
        mlp()(torch.randn(2, 3, 8))
    assert info.value.code == "E_INPUT"


def test_a_symbol_bound_two_ways_names_both_inputs_and_the_binding():
    model = two_inputs()
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 4), torch.randn(3, 4))
    err = info.value
    assert err.code == "E_INPUT"
    assert err.node == "b"
    text = str(err)
    assert "dim 0 is B, bound to 2, but got 3" in text
    assert "bound:    B=2 D=4" in text
    assert "B was bound by input 'a'" in text


def test_a_wrong_dtype_is_an_input_error():
    with pytest.raises(hndl.HndlError, match="dtype must be float32, got float64") as info:
        two_inputs()(torch.randn(2, 4), torch.randn(2, 4, dtype=torch.float64))
    assert info.value.node == "b"


def test_an_int_tensor_for_a_float_input_is_an_input_error():
    with pytest.raises(hndl.HndlError, match="dtype must be float, got int64"):
        mlp()(torch.ones(2, 8, dtype=torch.int64))


def test_a_pinned_device_is_checked():
    with pytest.raises(hndl.HndlError, match="must be on device cuda, got cpu") as info:
        two_inputs(device="cuda")(torch.randn(2, 4), torch.randn(2, 4))
    assert info.value.code == "E_INPUT"
    assert info.value.node == "a"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, x: m(), "E_INPUT input 'a': missing"),
        (lambda m, x: m(x, x, x), "graph 'pair' takes 2 inputs, got 3"),
        (lambda m, x: m(x, c=x), "E_INPUT input 'c': unknown input 'c' for graph 'pair'"),
        (lambda m, x: m(x, a=x), "E_INPUT input 'a': given both by position and by name"),
        (lambda m, x: m(x, [1, 2]), "E_INPUT input 'b': must be a tensor, got list"),
    ],
)
def test_binding_errors_are_input_errors(call, message):
    model = two_inputs()
    with pytest.raises(hndl.HndlError) as info:
        call(model, torch.randn(2, 4))
    assert info.value.code == "E_INPUT"
    assert message in str(info.value)


def test_an_input_error_after_the_fast_path_still_raises():
    model = mlp()
    model(torch.randn(3, 8))
    with pytest.raises(hndl.HndlError, match="dim 1 expected 8, got 7"):
        model(torch.randn(3, 7))
    assert model(torch.randn(3, 8)).shape == (3, 4)


# --- E_CONTRACT ------------------------------------------------------------------------------------------


class WrongWidth(nn.Module):
    """Claims (through the 'module' op's declared shape) to keep the width, but doubles it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x], dim=-1)


class ToDouble(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double()


class NotATensor(nn.Module):
    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [x]


def graph_with(target: str) -> hndl.GraphModule:
    g = hndl.Graph("g")
    x = g.input("x", ("B", 4))
    h = g.add("module", x, name="odd", target=f"{__name__}:{target}")
    g.output(g.add("relu", h, name="act"))
    return hndl.build(g)


def test_an_output_breaking_its_shape_names_node_port_dim_expected_actual_and_bindings():
    model = graph_with("WrongWidth")
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 4))
    err = info.value
    assert err.code == "E_CONTRACT"
    assert err.node == "odd"
    assert err.port == "y"
    assert str(err).splitlines() == [
        "E_CONTRACT module 'odd' port 'y': output dim 1 expected 4, got 8",
        "    expected: [2, 4]",
        "    actual:   [2, 8]",
        "    bound:    B=2",
        "    hint:     op module promises its input's shape unless told: give the layer's output shape with shape: [...]",
    ]


def test_an_output_breaking_same_dtype_as_input_is_a_contract_error():
    with pytest.raises(hndl.HndlError, match="output dtype must match input 'x' \\(float32\\), got float64") as info:
        graph_with("ToDouble")(torch.randn(2, 4))
    assert info.value.code == "E_CONTRACT"


def test_an_output_that_is_not_a_tensor_is_a_contract_error():
    with pytest.raises(hndl.HndlError, match="output is list, not a tensor") as info:
        graph_with("NotATensor")(torch.randn(2, 4))
    assert info.value.node == "odd"


def test_a_symbolic_dim_is_reported_with_its_value():
    g = hndl.Graph("g")
    x = g.input("x", ("B", "D"))
    g.output(g.add("module", x, name="odd", target=f"{__name__}:WrongWidth"))
    with pytest.raises(hndl.HndlError, match=r"output dim 1 expected D = 3, got 6"):
        hndl.build(g)(torch.randn(2, 3))


def test_inputs_of_one_node_on_two_devices_are_a_contract_error():
    g = hndl.Graph("pair")
    a = g.input("a", ("B", 4))
    b = g.input("b", ("B", 4))
    g.output(g.add("add", a, b, name="sum"))
    with pytest.raises(hndl.HndlError) as info:
        hndl.build(g)(torch.randn(2, 4), torch.empty(2, 4, device="meta"))
    err = info.value
    assert err.code == "E_CONTRACT"
    assert err.node == "sum"
    assert err.port == "b"
    assert "the inputs are on different devices: a on cpu, b on meta" in str(err)


# --- E_RUNTIME: a layer raises -----------------------------------------------------------------------------


class Boom(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.armed = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.armed:
            raise ValueError("the fuse was lit")
        return x


def boom_graph() -> hndl.GraphModule:
    g = hndl.Graph("bn")
    x = g.input("x", ("B", 4))
    h = g.add("batchnorm1d", x, name="norm")
    h = g.add("module", h, name="boom", target=f"{__name__}:Boom")
    g.output(g.add("relu", h, name="act"))
    return hndl.build(g)


@pytest.mark.parametrize("path", ["validating", "fast"])
def test_a_failing_layer_names_node_op_and_input_shapes_and_chains_the_cause(path):
    model = boom_graph()
    x = torch.randn(3, 4)
    if path == "fast":
        model(x)
    model.nodes.n_boom.armed = True
    with pytest.raises(hndl.HndlError) as info:
        model(x)
    err = info.value
    assert err.code == "E_RUNTIME"
    assert err.node == "boom"
    assert str(err) == "E_RUNTIME module 'boom': the layer failed on input x[0] [3, 4]: ValueError: the fuse was lit"
    assert isinstance(err.__cause__, ValueError)
    assert model.validations == 1


@pytest.mark.parametrize("path", ["validating", "fast"])
def test_no_node_runs_twice_when_a_later_node_fails(path):
    model = boom_graph()
    x = torch.randn(3, 4)
    if path == "fast":
        model(x)
    tracked = int(model.nodes.n_norm.num_batches_tracked)
    model.nodes.n_boom.armed = True
    with pytest.raises(hndl.HndlError):
        model(x)
    assert int(model.nodes.n_norm.num_batches_tracked) == tracked + 1


class LinearThatFailsOnWideInputs(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > 3:
            return super().forward(x.T)  # mat1 and mat2 shapes cannot be multiplied
        return super().forward(x)


def test_a_torch_error_inside_a_layer_is_a_runtime_error_naming_the_node():
    model = mlp()
    model.nodes.n_out.__class__ = LinearThatFailsOnWideInputs  # a subclass: validated, then used
    model(torch.randn(3, 8))
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(5, 8))  # a new binding of B: admitted without a full validation, fails in the layer
    assert info.value.node == "out"
    assert "the layer failed on input x [5, 16]: RuntimeError: mat1 and mat2 shapes cannot be multiplied" in str(
        info.value
    )
    assert model.validations == 1


def test_a_tensor_given_another_shape_in_place_is_a_registered_state_change_on_the_next_call():
    # Regression: `.data = ...` fires no hook; the fast path used to run it (and broadcast a wrong-shaped bias).
    model = mlp()
    x = torch.randn(3, 8)
    model(x)
    original = model.nodes.n_out.bias.data
    with torch.no_grad():
        model.nodes.n_out.bias.data = torch.zeros(1)
    with pytest.raises(hndl.HndlError) as info:
        model(x)
    assert info.value.code == "E_RUNTIME"
    assert info.value.node == "out"
    assert "parameter 'nodes.n_out.bias' has shape [1], the build made [4]" in str(info.value)
    model.nodes.n_out.bias.data = original
    assert model(x).shape == (3, 4)


def test_the_generated_code_is_readable_in_tracebacks():
    model = boom_graph()
    x = torch.randn(3, 4)
    model(x)
    model.nodes.n_boom.armed = True
    with pytest.raises(hndl.HndlError) as info:
        model(x)
    import traceback

    text = "".join(traceback.format_exception(info.value.__cause__))
    assert "<hndl generated: bn" in text
    assert "# module 'boom'" in text
