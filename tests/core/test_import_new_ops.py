"""The importer rows of issue 37's ops: each a tiny module through ``hndl.from_module`` with symbolic dims where the
op allows them, giving ``torch.equal`` outputs (same dtype) at shapes other than the traced one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.export import Dim

import hndl
from hndl.importer import MIN_TORCH

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)


class One(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> Any:
        return self.fn(x)


class Two(One):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> Any:  # type: ignore[override]
        return self.fn(x, y)


def Fn(fn: Callable[..., Any]) -> nn.Module:
    """``fn`` as a module whose forward takes as many tensors as ``fn`` (torch.export reads the signature)."""
    import inspect

    return (One if len(inspect.signature(fn).parameters) == 1 else Two)(fn)


def ops_of(graph: hndl.Graph) -> list[str]:
    return [n.op for n in graph.nodes.values()]


def assert_imports(
    fn: Callable[..., Any], make: Callable[[int, int], tuple[torch.Tensor, ...]], dynamic: Any, expect: set[str]
) -> hndl.Graph:
    net = Fn(fn).eval()
    graph = hndl.from_module(net, *make(2, 5), dynamic_shapes=dynamic)
    assert expect <= set(ops_of(graph)), ops_of(graph)
    model = hndl.build(graph)
    for b, t in ((3, 7), (4, 9)):
        args = make(b, t)
        with torch.no_grad():
            got, want = model(*args), net(*args)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for a, w in zip(got, want, strict=True):
            assert a.dtype == w.dtype
            assert torch.equal(a, w)
    return graph


#: T from 4: torch.export guards a few of the cases (diff of T-1 != 1, arange(1, T, 2)) on small T.
T = Dim("T", min=4)
BT = ({0: Dim("B"), 1: T},)
BT2 = ({0: Dim("B"), 1: T}, {0: Dim("B"), 1: T})


def ids(b: int, t: int) -> tuple[torch.Tensor, ...]:
    return (torch.randint(0, 5, (b, t)),)


def floats(b: int, t: int) -> tuple[torch.Tensor, ...]:
    return (torch.randn(b, t, 6),)


CASES = {
    "sum": (lambda x: (x.sum(-1), x.sum(), x.sum((0, 2), keepdim=True)), floats, BT, {"sum"}),
    "sum_of_ints": (lambda i: i.sum(-1), ids, BT, {"sum"}),
    "cumsum": (lambda i: i.cumsum(-1), ids, BT, {"cumsum"}),
    "norm": (lambda x: x / x.norm(dim=-1, keepdim=True), floats, BT, {"norm"}),
    "argmax": (lambda i: (i.argmax(-1), i.argmin(1, keepdim=True)), ids, BT, {"argmax", "argmin"}),
    "diff": (lambda i: torch.diff(i, dim=-1), ids, BT, {"diff"}),
    "diff_prepend": (lambda i: torch.diff(i, dim=-1, prepend=i[:, :1]), ids, BT, {"diff", "concat"}),
    "gather": (lambda x: torch.gather(x, 2, x.argmax(-1, keepdim=True)), floats, BT, {"gather"}),
    "einsum": (lambda x: torch.einsum("btc,bsc->bts", x, x), floats, BT, {"einsum"}),
    "arange": (lambda i: torch.arange(i.shape[1]) + i, ids, BT, {"arange"}),
    "arange_start_step": (lambda i: torch.arange(1, i.shape[1], 2), ids, BT, {"arange"}),
    "new_ones": (lambda x: x.new_ones(x.shape[0], x.shape[1]), floats, BT, {"new_ones"}),
    "new_full": (lambda x: x.new_full((x.shape[1], 2), 3.0, dtype=torch.bool), floats, BT, {"new_full"}),
    "zeros_like": (
        lambda x: (torch.zeros_like(x), torch.full_like(x, -2.5), torch.ones_like(x, dtype=torch.int64)),
        floats,
        BT,
        {"zeros_like", "full_like", "ones_like"},
    ),
    "ones_of_sizes": (lambda i: torch.ones(i.shape[0], i.shape[1], dtype=torch.bool), ids, BT, {"new_ones"}),
    "flip": (lambda x: (x.flip(1), torch.flip(x, (0, -1))), floats, BT, {"flip"}),
    "repeat": (lambda x: (x.repeat(1, 2, 1), x.repeat(2, 1, 1, 3)), floats, BT, {"repeat"}),
    # GPT-J's interleaved rotary: the halves stacked on a new last dim, then that dim flattened
    "stack": (lambda x: torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2), floats, BT, {"stack"}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_row_imports_with_symbolic_dims_and_equal_outputs(name: str) -> None:
    fn, make, dynamic, expect = CASES[name]
    assert_imports(fn, make, dynamic, expect)


def test_clip_row_picking_imports_as_index() -> None:
    # CLIP's text model: the hidden state at each sequence's end token (the largest id)
    def pick(h: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return h[torch.arange(h.shape[0]), i.argmax(-1)]

    assert_imports(  # at batch sizes 3 and 4: B stays symbolic
        pick, lambda b, t: (torch.randn(b, t, 6), torch.randint(0, 9, (b, t))), BT2, {"index", "argmax", "arange"}
    )


def test_indexing_by_one_tensor_on_a_dim_imports_as_index() -> None:
    def make(b: int, t: int) -> tuple[torch.Tensor, ...]:
        return torch.randn(b, t, 6), torch.randint(0, 3, (b, 4))

    assert_imports(lambda h, i: h[:, i[0]], make, ({0: Dim("B"), 1: T}, {0: Dim("B")}), {"index"})


def test_unbind_of_a_fixed_dim_imports() -> None:
    def split(x: torch.Tensor) -> Any:
        q, k, v = x.reshape(x.shape[0], x.shape[1], 3, 2).permute(2, 0, 1, 3).unbind(0)
        return q * k + v

    assert_imports(split, floats, BT, {"unbind"})


def test_a_causal_mask_from_create_causal_mask_style_code_keeps_b_and_t() -> None:
    def mask(ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        t = ids.shape[1]
        cache_position = torch.arange(t, device=ids.device)
        causal = cache_position[None, None, None, :] <= cache_position[None, None, :, None]
        padding = attention_mask.bool()[:, None, None, :]
        position_ids = attention_mask.long().cumsum(-1) - 1
        return causal & padding, position_ids

    def make(b: int, t: int) -> tuple[torch.Tensor, ...]:
        m = torch.ones(b, t, dtype=torch.long)
        m[0, :2] = 0  # left padding
        return torch.randint(0, 9, (b, t)), m

    assert_imports(mask, make, BT2, {"arange", "cumsum"})


def test_regression_indexing_by_a_bool_mask_is_refused_with_the_reason() -> None:
    net = Fn(lambda x, m: x[m > 0])
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(net, torch.randn(2, 5), torch.randint(0, 2, (2, 5)))
    assert err.value.code == "E_IMPORT"
    assert "mask" in str(err.value)


def test_regression_unbind_of_a_symbolic_dim_is_refused_with_the_reason() -> None:
    net = Fn(lambda x: x.unbind(1)[0])
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(net, torch.randn(2, 5), dynamic_shapes=({1: Dim("T")},))
    assert err.value.code == "E_IMPORT"


def test_repeat_by_a_traced_size_is_refused_naming_the_line() -> None:
    net = Fn(lambda x: x.repeat(1, x.shape[1], 1)).eval()
    with pytest.raises(hndl.HndlError) as info:
        hndl.from_module(net, *floats(2, 5), dynamic_shapes=BT)
    problem = info.value.problems[0]
    assert problem.code == "E_IMPORT"
    assert "argument 'repeats'" in problem.message
    assert "not a list of constant ints" in problem.message
