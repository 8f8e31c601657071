"""The ``module`` escape hatch: declared symbolic shapes, several outputs, an output selector for classes that
return tuples (torch.nn.LSTM), several inputs, and a wrong declaration reported on the validating call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hndl

LSTM_SPEC = """\
hndl: 1
inputs: {{x: {{shape: [B, T, 32]}}}}
nodes:
  rnn: {{op: module, in: x, target: "torch.nn:LSTM",
        kwargs: {{input_size: 32, hidden_size: 64, batch_first: true}}, {declaration}}}
outputs: [{outputs}]
"""


def lstm_model(declaration: str, outputs: str = "rnn") -> hndl.GraphModule:
    text = LSTM_SPEC.format(declaration=declaration, outputs=outputs)
    return hndl.build(hndl.loads(text, allow_imports=True))


def test_lstm_with_selector_and_symbolic_shape_checks_and_runs():
    model = lstm_model("shape: [B, T, 64], output: 0")
    (node,) = hndl.check(model.graph).nodes
    assert [str(d) for d in node.out_types[0].shape] == ["B", "T", "64"]
    y = model(torch.randn(3, 5, 32))
    assert y.shape == (3, 5, 64)
    y = model(torch.randn(2, 7, 32))  # B and T are not pinned by the declaration
    assert y.shape == (2, 7, 64)


def test_lstm_declares_two_outputs_sequence_and_last_hidden():
    model = lstm_model("outputs: [[B, T, 64], [1, B, 64]], output: [0, 1]", outputs="rnn.0, rnn.1")
    sequence, h_n = model(torch.randn(4, 6, 32))
    assert sequence.shape == (4, 6, 64)
    assert h_n.shape == (1, 4, 64)
    lstm = model.nodes["n_rnn"].module
    assert isinstance(lstm, nn.LSTM)  # the wrapped class, its weights under module.
    assert "nodes.n_rnn.module.weight_ih_l0" in model.state_dict()


def test_regression_lstm_without_selector_is_a_contract_error_naming_the_node_with_a_hint():
    model = lstm_model("shape: [B, T, 64]")
    with pytest.raises(hndl.HndlError, match="output is tuple, not a tensor") as info:
        model(torch.randn(2, 5, 32))
    assert (info.value.code, info.value.node) == ("E_CONTRACT", "rnn")
    assert "output" in info.value.problems[0].hint


def test_a_wrong_declared_shape_is_a_contract_error_on_the_validating_call():
    model = lstm_model("shape: [B, T, 32], output: 0")
    with pytest.raises(hndl.HndlError, match=r"output dim 2 expected 32, got 64") as info:
        model(torch.randn(2, 5, 32))
    assert (info.value.code, info.value.node) == ("E_CONTRACT", "rnn")


def test_a_selector_past_the_result_is_a_contract_error_naming_the_node():
    model = lstm_model("shape: [B, T, 64], output: 3")  # LSTM gives output, h_n, c_n
    with pytest.raises(hndl.HndlError, match="output index 3 is out of range: the module returned 3 values") as info:
        model(torch.randn(2, 5, 32))
    assert (info.value.code, info.value.node) == ("E_CONTRACT", "rnn")


def test_a_wrong_output_count_is_a_contract_error():
    model = lstm_model("outputs: [[B, T, 64], [1, B, 64]]", outputs="rnn.0, rnn.1")  # LSTM returns 2 values, nested
    with pytest.raises(hndl.HndlError) as info:
        model(torch.randn(2, 5, 32))
    assert (info.value.code, info.value.node) == ("E_CONTRACT", "rnn")


def test_a_symbol_no_input_carries_is_refused_at_check_time():
    with pytest.raises(hndl.HndlError, match="symbol 'N' is not in the inputs' shapes") as info:
        lstm_model("shape: [N, T, 64], output: 0")
    assert (info.value.code, info.value.node) == ("E_PARAM", "rnn")


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ("shape: [B, T, 64], outputs: [[B, T, 64]]", "'shape' and 'outputs' both declare the output"),
        ("outputs: [[B, T, 64], [1, B, 64]], output: 0", "'output' selects one value, the node declares 2"),
        ("shape: [B, T, 64], output: [0, 1]", "'output' selects 2 values, the node declares 1"),
        ("shape: [B, -1]", "entries must be sizes"),
    ],
)
def test_inconsistent_declarations_are_param_errors(declaration: str, message: str):
    with pytest.raises(hndl.HndlError, match=message) as info:
        lstm_model(declaration)
    assert info.value.code == "E_PARAM"


class Bilinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Bilinear(4, 6, 3)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.inner(a, b)


def test_several_inputs_are_passed_positionally():
    g = hndl.Graph("pair")
    a, b = g.input("a", ("B", 4)), g.input("b", ("B", 6))
    g.output(g.add("module", [a, b], name="bi", target=f"{__name__}:Bilinear", shape=("B", 3)))
    model = hndl.build(g)
    assert model(torch.randn(5, 4), torch.randn(5, 6)).shape == (5, 3)


def test_dumps_round_trips_the_declaration():
    model = lstm_model("outputs: [[B, T, 64], [1, B, 64]], output: [0, 1]", outputs="rnn.0, rnn.1")
    again = hndl.loads(hndl.dumps(model.graph), allow_imports=True)
    assert hndl.dumps(again) == hndl.dumps(model.graph)
