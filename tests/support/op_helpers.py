"""Helpers shared by the op tests (tests/core/test_ops_*.py): build a one-node graph around an op, read what
inference says, and run the built module to compare real shapes with inferred ones."""

from __future__ import annotations

import pytest
import torch

import hndl
from hndl._contracts import format_shape, is_unknown
from hndl._dims import evaluate, parse_dim


def one_node_graph(op: str, shapes: tuple, dtypes: list | None, params: dict) -> hndl.Graph:
    g = hndl.Graph("t")
    dtypes = dtypes or [None] * len(shapes)
    xs = [g.input(f"x{i}", s, dtype=d) for i, (s, d) in enumerate(zip(shapes, dtypes))]
    h = g.add(op, xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([h[i] for i in range(count)] if count > 1 else h)
    return g


def infer(op: str, *shapes, dtypes: list | None = None, **params) -> list[str]:
    """The inferred output shapes of one ``op`` node, as text (``[N, 4, (H-3)//2+1]``)."""
    node = hndl.check(one_node_graph(op, shapes, dtypes, params)).nodes[0]
    return [format_shape(t.shape) for t in node.out_types]


def problem(op: str, *shapes, dtypes: list | None = None, **params) -> hndl.Problem:
    """The single problem the checker reports for one ``op`` node."""
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(one_node_graph(op, shapes, dtypes, params))
    assert len(info.value.problems) == 1, str(info.value)
    return info.value.problems[0]


def runs_as_inferred(op: str, *shapes, env: dict, dtypes: list | None = None, **params) -> list[torch.Tensor]:
    """Build the node, run it in eval mode on tensors sized by ``env``: real shapes equal inferred ones."""
    g = one_node_graph(op, shapes, dtypes, params)
    checked = hndl.check(g)
    model = hndl.build(g).eval()
    tensors = []
    for shape, dtype in zip(shapes, dtypes or [None] * len(shapes)):
        real = [evaluate(parse_dim(d), env) for d in shape]
        tensors.append(torch.randint(0, 4, real) if dtype == "int64" else torch.randn(real))
    out = model(*tensors)
    outs = out if isinstance(out, tuple) else (out,)
    types = checked.nodes[0].out_types
    assert len(outs) == len(types)
    for t, y in zip(types, outs):
        assert t.shape is not None
        assert len(t.shape) == y.dim()
        # an unknown dim (``?``) is one inference could not pin; the run-time check leaves it free too
        expected = tuple(real if is_unknown(d) else evaluate(d, env) for d, real in zip(t.shape, y.shape))
        assert tuple(y.shape) == expected
    return list(outs)
