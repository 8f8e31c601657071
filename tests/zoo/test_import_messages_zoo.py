"""What a failed import of a torchvision model says (issue 39): MaxViT's two missing operations in 22 layers fit on
a screen, and RegNetY with symbolic H and W is told the range it takes, which then imports. Reference-only: skips
unless torchvision imports (`nox -s reference`)."""

from __future__ import annotations

import re

import pytest
import torch
from parity import randomise_batchnorm, require
from torch.export import Dim

import hndl


def test_maxvit_imports_with_built_in_ops_and_equals_torchvision() -> None:
    # MaxViT's import message was 73,380 characters for two missing ops (einsum, 44 times, and swapaxes), then
    # 1,947 grouped (issue 39); with the einsum op and swapaxes as transpose (issue 37) it imports whole.
    # tests/core/test_import_messages.py holds the grouping itself to a model with two missing ops.
    net = require("torchvision").models.maxvit_t().eval()
    randomise_batchnorm(net)
    x = torch.randn(1, 3, 224, 224)
    graph = hndl.from_module(net, x)
    assert graph.fallbacks == []
    assert not {n.op for n in graph.nodes.values()} & {"module"}
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), net(x))


def test_regnet_y_with_symbolic_h_and_w_is_told_the_range_that_imports() -> None:
    net = require("torchvision").models.regnet_y_400mf().eval()
    randomise_batchnorm(net)
    x = torch.randn(2, 3, 224, 224)
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(net, x, dynamic_shapes=({2: Dim("H"), 3: Dim("W")},))
    hint = err.value.problems[0].hint
    found = dict(re.findall(r'(\w) = Dim\("\w", min=(\d+)\)', hint or ""))
    assert set(found) == {"H", "W"}, hint
    low = int(found["H"])
    graph = hndl.from_module(net, x, dynamic_shapes=({2: Dim("H", min=low), 3: Dim("W", min=int(found["W"]))},))
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    y = torch.randn(2, 3, low, low + 24)
    assert torch.allclose(model.eval()(y), net(y), atol=1e-5)
