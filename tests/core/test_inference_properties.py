"""Property tests: static inference agrees with what torch actually does.

For random shapes and parameters, each test runs the real torch operation (the oracle) and checks one graph
node with hndl. Whenever hndl's static check rejects the node, torch must fail too; when every dim is a known
int, hndl must accept exactly what torch accepts; and whenever both succeed, the inferred shape, evaluated
under the input's bindings, must equal the real output's shape, and the built module must compute the same
values as the oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import hndl
from hndl._contracts import is_unknown
from hndl._dims import evaluate

PROPERTY = settings(max_examples=150, deadline=None)
TORCH_ERRORS = (RuntimeError, ValueError, IndexError, TypeError)


def _symbolize(draw: Any, shape: Sequence[int], positions: Sequence[int]) -> tuple[tuple[Any, ...], dict[str, int]]:
    """``shape`` with some of the dims at ``positions`` replaced by symbols, and the symbols' values."""
    static: list[Any] = list(shape)
    env: dict[str, int] = {}
    for i in positions:
        if draw(st.booleans()):
            name = f"S{i}"
            static[i] = name
            env[name] = shape[i]
    return tuple(static), env


def agree(
    op: str,
    shapes: Sequence[Sequence[int]],
    params: dict[str, Any],
    oracle: Callable[..., Any] | torch.nn.Module,
    *,
    static: Sequence[Sequence[Any]] | None = None,
    env: dict[str, int] | None = None,
) -> None:
    """The core property, for one node of ``op`` on inputs of the given real (and static) shapes.

    An ``oracle`` that is a module lends its weights to the built node, so values can be compared too.
    """
    static = static if static is not None else shapes
    env = env or {}
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(tuple(s), generator=gen) for s in shapes]
    if isinstance(oracle, torch.nn.Module):
        oracle.eval()
    try:
        expected = oracle(*tensors)
        torch_error: Exception | None = None
    except TORCH_ERRORS as exc:
        torch_error = exc

    g = hndl.Graph("prop")
    xs = [g.input(f"x{i}", tuple(s)) for i, s in enumerate(static)]
    node = g.add(op, xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([node[i] for i in range(count)] if count > 1 else node)
    try:
        checked = hndl.check(g)
        hndl_error: hndl.HndlError | None = None
    except hndl.HndlError as exc:
        hndl_error = exc
    if hndl_error is not None:
        assert hndl_error.code in ("E_SHAPE", "E_PARAM"), str(hndl_error)
        assert torch_error is not None, f"hndl rejects what torch runs:\n{hndl_error}"
        return
    symbolic = any(not isinstance(d, int) for s in static for d in s)
    if torch_error is not None:
        assert symbolic, f"hndl accepts what torch rejects: {torch_error}"
        return
    outs = expected if isinstance(expected, (tuple, list)) else (expected,)
    types = checked.nodes[0].out_types
    assert len(types) == len(outs)
    for t, y in zip(types, outs):
        assert t.shape is not None
        assert len(t.shape) == y.dim(), (t, tuple(y.shape))
        want = tuple(real if is_unknown(d) else evaluate(d, env) for d, real in zip(t.shape, y.shape))
        assert want == tuple(y.shape), (str(t), tuple(y.shape), env)
    model = hndl.build(g).eval()
    if isinstance(oracle, torch.nn.Module):
        model.nodes["n_n"].load_state_dict(oracle.state_dict())
    got = model(*tensors)
    got = got if isinstance(got, tuple) else (got,)
    for a, b in zip(got, outs):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)  # bit for bit; NaN where torch has NaN


dims = st.integers(1, 6)


def _module(factory: Callable[[], torch.nn.Module]) -> torch.nn.Module | Callable[..., Any]:
    """The oracle layer, or (when torch refuses to build it) a callable that raises the same error."""
    try:
        return factory()
    except TORCH_ERRORS as exc:
        error = exc

        def fail(*xs: Any) -> Any:
            raise error

        return fail


# --- dense and conv -------------------------------------------------------------------------------------


@PROPERTY
@given(st.data())
def test_linear(data):
    shape = data.draw(st.lists(dims, min_size=1, max_size=4))
    out = data.draw(dims)
    given_in = data.draw(st.none() | dims)
    params = {"out_features": out} | ({} if given_in is None else {"in_features": given_in})
    static, env = _symbolize(data.draw, shape, range(len(shape) - 1))
    layer = torch.nn.Linear(shape[-1] if given_in is None else given_in, out)
    agree("linear", [shape], params, layer, static=[static], env=env)


class _Conv1D(torch.nn.Module):
    """transformers' GPT-2 Conv1D: weight [in, out], ``addmm`` on the input flattened to two dims."""

    def __init__(self, nx: int, nf: int) -> None:
        super().__init__()
        self.nf = nf
        self.weight = torch.nn.Parameter(torch.randn(nx, nf))
        self.bias = torch.nn.Parameter(torch.randn(nf))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(*x.shape[:-1], self.nf)


@PROPERTY
@given(st.data())
def test_linear_in_out(data):
    shape = data.draw(st.lists(dims, min_size=1, max_size=4))
    out = data.draw(dims)
    given_in = data.draw(st.none() | dims)
    params = {"out_features": out} | ({} if given_in is None else {"in_features": given_in})
    static, env = _symbolize(data.draw, shape, range(len(shape) - 1))
    layer = _Conv1D(shape[-1] if given_in is None else given_in, out)
    agree("linear_in_out", [shape], params, layer, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_conv1d(data):
    shape = [data.draw(st.integers(1, 2)), data.draw(dims), data.draw(st.integers(1, 12))]
    p = {
        "out_channels": data.draw(dims),
        "kernel_size": data.draw(st.integers(1, 5)),
        "stride": data.draw(st.integers(1, 3)),
        "padding": data.draw(st.integers(0, 3)),
        "dilation": data.draw(st.integers(1, 3)),
        "groups": data.draw(st.integers(1, 3)),
    }
    static, env = _symbolize(data.draw, shape, [0, 2])
    oracle = _module(lambda: torch.nn.Conv1d(shape[1], **p))
    agree("conv1d", [shape], p, oracle, static=[static], env=env)


pairs = st.integers(1, 4) | st.tuples(st.integers(1, 4), st.integers(1, 4)).map(list)


@PROPERTY
@given(st.data())
def test_conv2d(data):
    shape = [
        data.draw(st.integers(1, 2)),
        data.draw(dims),
        data.draw(st.integers(1, 10)),
        data.draw(st.integers(1, 10)),
    ]
    p = {
        "out_channels": data.draw(dims),
        "kernel_size": data.draw(pairs),
        "stride": data.draw(pairs),
        "padding": data.draw(st.integers(0, 2) | st.tuples(st.integers(0, 2), st.integers(0, 2)).map(list)),
        "dilation": data.draw(st.integers(1, 2)),
        "groups": data.draw(st.integers(1, 3)),
        "bias": data.draw(st.booleans()),
    }
    static, env = _symbolize(data.draw, shape, [0, 2, 3])
    oracle = _module(lambda: torch.nn.Conv2d(shape[1], **p))
    agree("conv2d", [shape], p, oracle, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_pools(data):
    shape = [
        data.draw(st.integers(1, 2)),
        data.draw(st.integers(1, 3)),
        data.draw(st.integers(1, 10)),
        data.draw(st.integers(1, 10)),
    ]
    kind = data.draw(st.sampled_from(["maxpool2d", "avgpool2d", "adaptive_avgpool2d"]))
    if kind == "adaptive_avgpool2d":
        p: dict[str, Any] = {"output_size": data.draw(pairs)}
        factory: Callable[[], torch.nn.Module] = lambda: torch.nn.AdaptiveAvgPool2d(p["output_size"])  # noqa: E731
    else:
        p = {
            "kernel_size": data.draw(pairs),
            "stride": data.draw(st.none() | pairs),
            "padding": data.draw(st.integers(0, 2)),
            "ceil_mode": data.draw(st.booleans()),
        }
        if kind == "maxpool2d":
            p["dilation"] = data.draw(st.integers(1, 3))
            factory = lambda: torch.nn.MaxPool2d(**p)  # noqa: E731
        else:
            p["count_include_pad"] = data.draw(st.booleans())
            factory = lambda: torch.nn.AvgPool2d(**p)  # noqa: E731
    static, env = _symbolize(data.draw, shape, [0, 1, 2, 3])
    agree(kind, [shape], p, _module(factory), static=[static], env=env)


# --- shape ops ------------------------------------------------------------------------------------------


@PROPERTY
@given(st.data())
def test_flatten(data):
    shape = data.draw(st.lists(dims, min_size=0, max_size=5))
    p = {"start_dim": data.draw(st.integers(-6, 5)), "end_dim": data.draw(st.integers(-6, 5))}
    static, env = _symbolize(data.draw, shape, range(len(shape)))
    agree("flatten", [shape], p, lambda x: x.flatten(p["start_dim"], p["end_dim"]), static=[static], env=env)


@PROPERTY
@given(st.data())
def test_reshape(data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    target = data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    if data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    start = data.draw(st.integers(-5, 5))
    p = {"shape": target, "start_dim": start}

    def oracle(x: torch.Tensor) -> torch.Tensor:
        if not -x.dim() <= start <= x.dim():
            raise IndexError("start_dim out of range")
        return x.reshape(x.shape[: start + x.dim() if start < 0 else start] + tuple(target))

    # Only leading (kept) dims may be symbolic: a -1 over symbolic dims is refused by design.
    begin = start + len(shape) if start < 0 else start
    static, env = _symbolize(data.draw, shape, range(max(0, min(begin, len(shape)))))
    agree("reshape", [shape], p, oracle, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_concat(data):
    rank = data.draw(st.integers(1, 3))
    base = data.draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    count = data.draw(st.integers(1, 3))
    shapes = []
    for _ in range(count):
        s = list(base)
        if data.draw(st.booleans()):  # perturb one dim (maybe the concat dim, maybe not)
            s[data.draw(st.integers(0, rank - 1))] = data.draw(st.integers(1, 3))
        if data.draw(st.integers(0, 9)) == 0:
            s.append(2)  # a rank mismatch now and then
        shapes.append(s)
    dim = data.draw(st.integers(-4, 3))
    statics, env = [], {}
    for s in shapes:
        st_shape, e = _symbolize(data.draw, s, range(len(s)))
        statics.append(st_shape)
        for k, v in e.items():  # one symbol per position: the same name must mean the same value
            if env.get(k, v) != v:
                st_shape = tuple(v if d == k else d for d in st_shape)
                statics[-1] = st_shape
            else:
                env[k] = v
    agree("concat", shapes, {"dim": dim}, lambda *xs: torch.cat(xs, dim), static=statics, env=env)


@PROPERTY
@given(st.data())
def test_split(data):
    shape = data.draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))
    dim = data.draw(st.integers(-4, 3))
    if data.draw(st.booleans()):
        sections = data.draw(st.integers(1, 4))
        p: dict[str, Any] = {"sections": sections, "dim": dim}

        def oracle(x: torch.Tensor) -> Any:
            length = x.shape[dim]
            if length % sections:
                raise ValueError("sections do not divide the dim")
            return torch.split(x, length // sections, dim)

    else:
        sizes = data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=3))
        p = {"sizes": sizes, "dim": dim}

        def oracle(x: torch.Tensor) -> Any:
            return torch.split(x, sizes, dim)

    agree("split", [shape], p, oracle)


@PROPERTY
@given(st.data())
def test_transpose_and_permute(data):
    shape = data.draw(st.lists(dims, min_size=0, max_size=4))
    static, env = _symbolize(data.draw, shape, range(len(shape)))
    if data.draw(st.booleans()):
        d0, d1 = data.draw(st.integers(-5, 4)), data.draw(st.integers(-5, 4))
        agree("transpose", [shape], {"dim0": d0, "dim1": d1}, lambda x: x.transpose(d0, d1), static=[static], env=env)
    else:
        if data.draw(st.booleans()):
            order = data.draw(st.permutations(range(len(shape))))
            order = [d - len(shape) if data.draw(st.booleans()) else d for d in order]
        else:
            order = data.draw(st.lists(st.integers(-5, 4), max_size=5))
        agree("permute", [shape], {"dims": order}, lambda x: x.permute(order), static=[static], env=env)


# --- arithmetic -----------------------------------------------------------------------------------------

small = st.integers(1, 3)


@PROPERTY
@given(st.data())
def test_add_and_mul_broadcast(data):
    a = data.draw(st.lists(small, min_size=0, max_size=4))
    b = data.draw(st.lists(small, min_size=0, max_size=4))
    sa, env_a = _symbolize(data.draw, a, range(len(a)))
    sb, env_b = _symbolize(data.draw, b, range(len(b)))
    sb = tuple(f"T{d[1:]}" if isinstance(d, str) else d for d in sb)
    env = env_a | {f"T{k[1:]}": v for k, v in env_b.items()}
    op = data.draw(st.sampled_from(["add", "mul"]))
    oracle = (lambda x, y: x + y) if op == "add" else (lambda x, y: x * y)
    agree(op, [a, b], {}, oracle, static=[sa, sb], env=env)


@PROPERTY
@given(st.data())
def test_matmul(data):
    n, k, m = data.draw(small), data.draw(small), data.draw(small)
    batch_a = data.draw(st.lists(small, max_size=2))
    batch_b = data.draw(st.lists(small, max_size=2))
    a = [k] if data.draw(st.booleans()) and not batch_a else [*batch_a, n, k]
    b = [data.draw(st.sampled_from([k, k, m]))] if data.draw(st.booleans()) and not batch_b else [*batch_b, k, m]
    if data.draw(st.integers(0, 4)) == 0:
        b[-2 if len(b) > 1 else 0] = data.draw(small)  # an inner-dim mismatch now and then
    sa, env_a = _symbolize(data.draw, a, range(len(a)))
    sb, env_b = _symbolize(data.draw, b, range(len(b)))
    sb = tuple(f"T{d[1:]}" if isinstance(d, str) else d for d in sb)
    env = env_a | {f"T{k_[1:]}": v for k_, v in env_b.items()}
    agree("matmul", [a, b], {}, torch.matmul, static=[sa, sb], env=env)


# --- indexing, resampling, recurrent --------------------------------------------------------------------


@PROPERTY
@given(st.data())
def test_select_and_slice(data):
    shape = data.draw(st.lists(dims, min_size=0, max_size=4))
    static, env = _symbolize(data.draw, shape, range(len(shape)))
    dim = data.draw(st.integers(-5, 4))
    if data.draw(st.booleans()):
        index = data.draw(st.integers(-7, 6))
        agree("select", [shape], {"dim": dim, "index": index}, lambda x: x.select(dim, index), static=[static], env=env)
    else:
        start, step = data.draw(st.integers(-7, 7)), data.draw(st.integers(1, 3))
        end = data.draw(st.none() | st.integers(-7, 7))

        def oracle(x: torch.Tensor) -> torch.Tensor:
            if x.dim() == 0:
                raise IndexError("a 0-d tensor cannot be sliced")
            return x[(slice(None),) * (dim % x.dim() if -x.dim() <= dim < x.dim() else 99) + (slice(start, end, step),)]

        p = {"dim": dim, "start": start, "end": end, "step": step}
        agree("slice", [shape], p, oracle, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_chunk(data):
    shape = data.draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))
    chunks, dim = data.draw(st.integers(1, 4)), data.draw(st.integers(-4, 3))

    def oracle(x: torch.Tensor) -> Any:
        if x.shape[dim] % chunks:
            raise ValueError("chunks do not divide the dim")
        parts = x.chunk(chunks, dim)
        return parts[0] if chunks == 1 else parts

    static, env = _symbolize(data.draw, shape, range(len(shape)))
    agree("chunk", [shape], {"chunks": chunks, "dim": dim}, oracle, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_pad(data):
    shape = data.draw(st.lists(dims, min_size=1, max_size=4))
    mode = data.draw(st.sampled_from(["constant", "reflect", "replicate", "circular"]))
    pad = data.draw(st.lists(st.integers(-2 if mode == "constant" else 0, 3), min_size=2, max_size=6))
    if len(pad) % 2:
        pad = pad[:-1]
    value = data.draw(st.sampled_from([0.0, 1.5])) if mode == "constant" else 0.0

    def oracle(x: torch.Tensor) -> torch.Tensor:
        if mode == "constant":
            return torch.nn.functional.pad(x, pad, value=value)
        return torch.nn.functional.pad(x, pad, mode=mode)

    static, env = _symbolize(data.draw, shape, range(len(shape)))
    agree("pad", [shape], {"pad": pad, "mode": mode, "value": value}, oracle, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_expand(data):
    shape = data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    shape = [d if data.draw(st.booleans()) else 1 for d in shape]
    lead = data.draw(st.lists(st.integers(1, 3), max_size=2))
    target: list[Any] = [*lead, *(d if d != 1 else data.draw(st.integers(1, 3)) for d in shape)]
    if data.draw(st.booleans()):
        target[-1] = -1
    if data.draw(st.integers(0, 5)) == 0:
        target[-1] = data.draw(st.integers(1, 4))  # maybe a mismatch
    agree("expand", [shape], {"shape": target}, lambda x: x.expand(target))


@PROPERTY
@given(st.data())
def test_conv_transpose(data):
    two_d = data.draw(st.booleans())
    spatial = [data.draw(st.integers(1, 6)) for _ in range(2 if two_d else 1)]
    shape = [data.draw(st.integers(1, 2)), data.draw(dims), *spatial]
    p = {
        "out_channels": data.draw(dims),
        "kernel_size": data.draw(st.integers(1, 4)),
        "stride": data.draw(st.integers(1, 3)),
        "padding": data.draw(st.integers(0, 2)),
        "output_padding": data.draw(st.integers(0, 2)),
        "dilation": data.draw(st.integers(1, 2)),
        "groups": data.draw(st.integers(1, 3)),
    }
    kind = torch.nn.ConvTranspose2d if two_d else torch.nn.ConvTranspose1d
    # An output length of exactly 0 runs or fails depending on torch's kernel choice; hndl accepts it.
    reach = p["dilation"] * (p["kernel_size"] - 1) + p["output_padding"] + 1
    assume(all((n - 1) * p["stride"] - 2 * p["padding"] + reach != 0 for n in spatial))
    static, env = _symbolize(data.draw, shape, [0, *range(2, len(shape))])
    oracle = _module(lambda: kind(shape[1], **p))
    agree("conv_transpose2d" if two_d else "conv_transpose1d", [shape], p, oracle, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_upsample(data):
    rank = data.draw(st.integers(2, 5))
    shape = [data.draw(st.integers(1, 4)) for _ in range(rank)]
    mode = data.draw(st.sampled_from(["nearest", "linear", "bilinear"]))
    if data.draw(st.booleans()):
        p: dict[str, Any] = {"scale_factor": data.draw(st.sampled_from([1, 2, 3, 0.5, 1.5]))}
    else:
        p = {"size": data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))}
    p["mode"] = mode
    size = None if "size" not in p else (p["size"][0] if len(p["size"]) == 1 else tuple(p["size"]))
    oracle = _module(lambda: torch.nn.Upsample(size=size, scale_factor=p.get("scale_factor"), mode=mode))
    static, env = _symbolize(data.draw, shape, range(rank))
    agree("upsample", [shape], p, oracle, static=[static], env=env)


@PROPERTY
@given(st.data())
def test_pools_1d(data):
    shape = [data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), data.draw(st.integers(1, 10))]
    kind = data.draw(st.sampled_from(["maxpool1d", "avgpool1d", "adaptive_avgpool1d"]))
    if kind == "adaptive_avgpool1d":
        p: dict[str, Any] = {"output_size": data.draw(st.integers(1, 4))}
        factory: Callable[[], torch.nn.Module] = lambda: torch.nn.AdaptiveAvgPool1d(p["output_size"])  # noqa: E731
    else:
        p = {
            "kernel_size": data.draw(st.integers(1, 4)),
            "stride": data.draw(st.none() | st.integers(1, 4)),
            "padding": data.draw(st.integers(0, 2)),
            "ceil_mode": data.draw(st.booleans()),
        }
        if kind == "maxpool1d":
            p["dilation"] = data.draw(st.integers(1, 3))
            factory = lambda: torch.nn.MaxPool1d(**p)  # noqa: E731
        else:
            p["count_include_pad"] = data.draw(st.booleans())
            factory = lambda: torch.nn.AvgPool1d(**p)  # noqa: E731
    static, env = _symbolize(data.draw, shape, [0, 1, 2])
    agree(kind, [shape], p, _module(factory), static=[static], env=env)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_lstm_and_gru(data):
    shape = [data.draw(st.integers(1, 3)), data.draw(st.integers(1, 5)), data.draw(dims)]
    kind = data.draw(st.sampled_from(["lstm", "gru"]))
    p = {
        "hidden_size": data.draw(dims),
        "num_layers": data.draw(st.integers(1, 3)),
        "bidirectional": data.draw(st.booleans()),
        "bias": data.draw(st.booleans()),
    }
    output = data.draw(st.sampled_from(["sequence", "last", "both"]))
    layer = (torch.nn.LSTM if kind == "lstm" else torch.nn.GRU)(shape[2], batch_first=True, **p)
    dirs = 2 if p["bidirectional"] else 1

    class Oracle(torch.nn.Module):  # torch's module, giving what the node's output parameter names
        def __init__(self) -> None:
            super().__init__()
            self.rnn = layer

        def forward(self, x: torch.Tensor) -> Any:
            seq, state = self.rnn(x)
            h_n = state[0] if kind == "lstm" else state
            last = torch.cat(list(h_n[-dirs:]), dim=1)
            return {"sequence": seq, "last": last, "both": (seq, last)}[output]

        def state_dict(self, *args: Any, **kwargs: Any) -> Any:
            return self.rnn.state_dict()

    static, env = _symbolize(data.draw, shape, [0, 1])
    agree(kind, [shape], p | {"output": output}, Oracle(), static=[static], env=env)


# --- element-wise families, activations and the vision ops ------------------------------------------------

import operator  # noqa: E402

from hndl.ops._activation import ACTIVATIONS  # noqa: E402
from hndl.ops._elementwise import BINARY, UNARY  # noqa: E402


@PROPERTY
@given(st.data())
def test_element_wise_rows_broadcast_and_compute_as_torch(data):
    row = data.draw(st.sampled_from([*UNARY, *BINARY]))
    a = data.draw(st.lists(small, min_size=0, max_size=4))
    sa, env = _symbolize(data.draw, a, range(len(a)))
    if row in UNARY:
        agree(row.name, [a], {}, getattr(torch, row.torch), static=[sa], env=env)
        return
    if row.operator is not None and data.draw(st.booleans()):
        number = data.draw(st.sampled_from([2, -1, 0.5, 3.0]))
        side = data.draw(st.sampled_from(["a", "b"]))
        fn = getattr(operator, row.operator)
        oracle = (lambda x: fn(number, x)) if side == "a" else (lambda x: fn(x, number))
        agree(row.name, [a], {side: number}, oracle, static=[sa], env=env)
        return
    b = data.draw(st.lists(small, min_size=0, max_size=4))
    sb, env_b = _symbolize(data.draw, b, range(len(b)))
    sb = tuple(f"T{d[1:]}" if isinstance(d, str) else d for d in sb)
    env = env | {f"T{k[1:]}": v for k, v in env_b.items()}
    agree(row.name, [a, b], {}, getattr(torch, row.torch), static=[sa, sb], env=env)


@PROPERTY
@given(st.data())
def test_activations_keep_the_shape_and_compute_as_torch(data):
    row = data.draw(st.sampled_from([r for r in ACTIVATIONS if r.name not in ("prelu", "glu")]))
    shape = data.draw(st.lists(small, min_size=1, max_size=4))
    static, env = _symbolize(data.draw, shape, range(len(shape)))
    params = dict(row.example)
    if "dim" in params or row.name in ("softmax", "log_softmax"):
        params["dim"] = data.draw(st.integers(-5, 4))
    agree(row.name, [shape], params, _module(lambda: getattr(torch.nn, row.cls)(**params)), static=[static], env=env)


@PROPERTY
@given(st.data())
def test_glu_and_prelu(data):
    shape = data.draw(st.lists(st.integers(1, 6), min_size=0, max_size=4))
    static, env = _symbolize(data.draw, shape, range(len(shape)))
    if data.draw(st.booleans()):
        dim = data.draw(st.integers(-5, 4))
        agree("glu", [shape], {"dim": dim}, _module(lambda: torch.nn.GLU(dim)), static=[static], env=env)
    else:
        n = data.draw(st.sampled_from([1, 1, 2, 3, 4]))
        agree("prelu", [shape], {"num_parameters": n}, _module(lambda: torch.nn.PReLU(n)), static=[static], env=env)


@PROPERTY
@given(st.data())
def test_roll(data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=1, max_size=4))
    count = data.draw(st.integers(1, 3))
    shifts = data.draw(st.lists(st.integers(-7, 7), min_size=count, max_size=count))
    dims = (
        None if data.draw(st.integers(0, 3)) == 0 else data.draw(st.lists(st.integers(-5, 4), min_size=1, max_size=3))
    )
    static, env = _symbolize(data.draw, shape, range(len(shape)))
    agree(
        "roll",
        [shape],
        {"shifts": shifts, "dims": dims},
        lambda x: torch.roll(x, shifts, dims),
        static=[static],
        env=env,
    )


@PROPERTY
@given(st.data())
def test_tril_triu_clamp(data):
    shape = data.draw(st.lists(small, min_size=0, max_size=4))
    static, env = _symbolize(data.draw, shape, range(len(shape)))
    op = data.draw(st.sampled_from(["tril", "triu", "clamp"]))
    if op == "clamp":
        lo = data.draw(st.sampled_from([None, -0.5, 0]))
        hi = data.draw(st.sampled_from([None, 0.5, 1]))
        oracle = lambda x: torch.clamp(x, lo, hi)  # noqa: E731
        agree(op, [shape], {"min": lo, "max": hi}, oracle, static=[static], env=env)
        return
    diagonal = data.draw(st.integers(-3, 3))
    agree(op, [shape], {"diagonal": diagonal}, lambda x: getattr(torch, op)(x, diagonal), static=[static], env=env)


class _TorchvisionLayerNorm2d(torch.nn.LayerNorm):
    """torchvision.models.convnext.LayerNorm2d, as published."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.permute(0, 2, 3, 1)
        x = torch.nn.functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


@PROPERTY
@given(st.data())
def test_layernorm2d_and_drop_path(data):
    shape = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=5))
    static, env = _symbolize(data.draw, shape, [0, *range(2, len(shape))])  # the channels stay an int
    if data.draw(st.booleans()):
        channels = shape[1] if len(shape) > 1 else 1
        agree(
            "layernorm2d", [shape], {"eps": 1e-6}, _TorchvisionLayerNorm2d(channels, eps=1e-6), static=[static], env=env
        )
    else:
        agree("drop_path", [shape], {"p": 0.5}, lambda x: x, static=[static], env=env)  # eval: the input
