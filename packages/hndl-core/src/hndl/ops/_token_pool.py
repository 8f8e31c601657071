"""Pooling a sequence at one token: ``pool_at_token``, CLIP's text pooler (the vector at the end-of-text token).

Written by hand it is an ``argmax``, an ``arange`` and a two-index gather (18 nodes in a spec); as one op the
position rule is a parameter and the layer computes exactly what transformers' ``CLIPTextTransformer`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._contracts import TensorType
from .._registry import Param, Params, Port, layer_of, op


@op(
    "pool_at_token",
    saves="none",
    params=[
        Param(
            "token_id",
            "int",
            default=None,
            nullable=True,
            min=0,
            doc="the id to pool at (its first position); null: the position of the largest id",
        ),
    ],
    inputs=[
        Port("x", ["B", "T", "*features"], doc="the sequence's vectors, [B, T, D]"),
        Port("ids", ["B", "T"], dtype="int", doc="the token ids, [B, T]"),
    ],
    outputs=[Port("y", ["B", "*features"], dtype="same:x", doc="one vector per sequence, [B, D]")],
    layer="hndl.torch.layers.PoolAtToken",
    inference="x and ids agree on B and T; the output drops T",
    example={"op": "pool_at_token", "token_id": 49407},
    input_shape_example=["B", 77],
    returns="new",
    aliases={"pool_at_max": {}, "eos_pool": {}, "pool_at_eos": {}},
    error_example={"inputs": [["B", 77, 512], {"shape": ["B", 76], "dtype": "int64"}]},
)
def pool_at_token(p: Params, inputs: Sequence[TensorType]) -> Any:
    """Each sequence's vector at the position of one token: CLIP's text pooler, ``[B, T, D]`` and ids ``[B, T]``
    to ``[B, D]``.

    With ``token_id`` null, the position of the largest id in each row (the first of equal ones):
    ``x[arange(B), ids.argmax(-1)]``, what CLIP configs with ``eos_token_id: 2`` do (their end-of-text token is
    the vocabulary's largest id). With a ``token_id`` (the config's ``eos_token_id``, 49407 for OpenAI's CLIP),
    the first position holding it: ``x[arange(B), (ids == token_id).int().argmax(-1)]``; a row without it pools
    position 0, as transformers does (its tokenizer always writes the token). Results equal transformers'
    ``CLIPTextTransformer.pooler_output`` bit for bit (it is a copy of the chosen rows).

    A spec: ``pooled: {op: pool_at_token, in: [final_norm, input_ids], token_id: 49407}``.
    """
    return layer_of("pool_at_token")(p.token_id)
