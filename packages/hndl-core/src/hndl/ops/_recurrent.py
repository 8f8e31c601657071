"""Recurrent layers: lstm, gru, batch-first.

The built modules are ``torch.nn.LSTM`` / ``torch.nn.GRU`` subclasses (``hndl.torch.layers.LSTM``/``GRU``)
with the same parameters under the same names (``weight_ih_l0``, ``weight_hh_l0_reverse``, ...), so a
state_dict saved from a torch model loads as it is. What the node gives is chosen by ``output``: the
sequence of the last layer's hidden states, the final hidden state, or both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._contracts import TensorType
from .._op_facts import recurrent_macs
from .._registry import InferError, Param, Params, Port, layer_of, op
from ._common import shape_of_rank

_OUTPUTS = ("sequence", "last", "both")


def _count(p: Mapping[str, Any]) -> int:
    return 2 if p.get("output") == "both" else 1


def _infer(p: Params, inputs: Sequence[TensorType]) -> list[TensorType]:
    if p.dropout and p.num_layers == 1:
        raise InferError(
            f"dropout={p.dropout} applies between layers, and there is one layer",
            code="E_PARAM",
            param="dropout",
            expected="0 with num_layers=1",
            actual=p.dropout,
            hint="set num_layers >= 2, or drop dropout (add a dropout node after the layer instead)",
        )
    t = inputs[0]
    width = p.hidden_size * (2 if p.bidirectional else 1)
    shape = shape_of_rank(t, 3)
    if shape is None:
        return [TensorType(None, t.dtype)] * _count(p)
    b, steps, _ = shape
    sequence = TensorType((b, steps, width), t.dtype)
    last = TensorType((b, width), t.dtype)
    return {"sequence": [sequence], "last": [last], "both": [sequence, last]}[p.output]


def _params() -> list[Param]:
    return [
        Param("hidden_size", "int", min=1, doc="features of the hidden state (per direction)"),
        Param("num_layers", "int", default=1, min=1, doc="stacked recurrent layers"),
        Param("bidirectional", "bool", default=False, doc="also run backwards; outputs concatenate both directions"),
        Param("dropout", "float", default=0.0, min=0, max=1, doc="dropout between layers, in training only"),
        Param("bias", "bool", default=True, doc="learn the b_ih and b_hh biases"),
        Param(
            "output",
            "str",
            default="sequence",
            choices=_OUTPUTS,
            doc="what the node gives: the sequence, the last hidden state, or both (node.0, node.1)",
        ),
        Param("input_size", "int", min=1, inferred=True, doc="features of the input (inferred)"),
    ]


_INFERENCE = (
    "with D = 2 if bidirectional else 1: output sequence gives the last layer's hidden state at every step, "
    "[B, T, hidden_size*D]; output last gives the final hidden state of the last layer, both directions "
    "concatenated, [B, hidden_size*D]; output both gives the two, as node.0 and node.1. dropout needs "
    "num_layers >= 2"
)


@op(
    "lstm",
    saves="both",
    macs=recurrent_macs(4),
    params=_params(),
    inputs=[Port("x", ["B", "T", "input_size"], doc="batch, time, features (batch first)")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_infer,
    count_outputs=_count,
    layer="hndl.torch.layers.LSTM",
    inference=_INFERENCE,
    example={"op": "lstm", "hidden_size": 128, "num_layers": 2, "bidirectional": True, "output": "last"},
    input_shape_example=["B", "T", 64],
    returns="new",
)
def lstm(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Long short-term memory over ``[B, T, F]`` (``torch.nn.LSTM`` with ``batch_first=True``).

    Parameters and their names are torch's (``weight_ih_l0``, ``bias_hh_l1_reverse``, ...), so torch LSTM
    weights load as they are. The initial hidden and cell states are zeros.
    """
    return layer_of("lstm")(
        p.input_size,
        p.hidden_size,
        num_layers=p.num_layers,
        bias=p.bias,
        dropout=p.dropout,
        bidirectional=p.bidirectional,
        output=p.output,
    )


@op(
    "gru",
    saves="both",
    macs=recurrent_macs(3),
    params=_params(),
    inputs=[Port("x", ["B", "T", "input_size"], doc="batch, time, features (batch first)")],
    outputs=[Port("y", None, dtype="same:x")],
    infer=_infer,
    count_outputs=_count,
    layer="hndl.torch.layers.GRU",
    inference=_INFERENCE,
    example={"op": "gru", "hidden_size": 128, "output": "both"},
    input_shape_example=["B", "T", 64],
    returns="new",
)
def gru(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Gated recurrent unit over ``[B, T, F]`` (``torch.nn.GRU`` with ``batch_first=True``).

    Parameters and their names are torch's, so torch GRU weights load as they are. The initial hidden
    state is zeros.
    """
    return layer_of("gru")(
        p.input_size,
        p.hidden_size,
        num_layers=p.num_layers,
        bias=p.bias,
        dropout=p.dropout,
        bidirectional=p.bidirectional,
        output=p.output,
    )
