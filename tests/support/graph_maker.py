"""Random valid graphs from the op registry, for fuzzing the runtime: each called on the checked path, the fast
path and the unchecked path (the one ``torch.compile`` traces), with the results compared.

Every op that declares an ``example`` and an ``input_shape_example`` (and neither runs a subgraph nor imports
code) takes part: its example parameters, its inputs as fresh graph inputs of the example shape with the symbols
made small numbers, and after it, at random, elementwise ops or a ``linear`` on its float outputs. Used by
``tests/core/test_runtime_fuzz_paths.py`` (a few fixed seeds, in the normal run) and by
``tests/fuzz/fuzz_runtime.py`` (``nox -s fuzz``, for a time budget).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch

import hndl
from hndl._infer import active_ports
from hndl._registry import OpDef, Params, registry

#: What a symbol in an example shape becomes: small, so a graph runs in milliseconds.
SIZES = {"B": 2, "T": 3, "N": 2, "L": 8, "H": 8, "W": 8, "S": 3}
ELEMENTWISE = ["relu", "tanh", "sigmoid", "gelu", "silu", "identity"]


@dataclass
class Made:
    graph: hndl.Graph
    inputs: list[torch.Tensor]
    ops: list[str]


def concrete(shape: Any) -> list[int]:
    entries = shape if shape is not None else ["B", 16]
    return [e if isinstance(e, int) else SIZES.get(e, 4) for e in entries]


def _ports(opdef: OpDef) -> list[tuple[str, str]]:
    """``(port, dtype rule)`` of each input a node of the example needs (a variadic port twice)."""
    params = Params({k: v for k, v in opdef.example.items() if k != "op"})
    ports = []
    for port in active_ports(opdef, params):
        if port.optional:
            continue
        ports += [(port.name, port.dtype)] * (2 if port.variadic else 1)
    return ports


def _tensor(shape: list[int], rule: str, rng: random.Random) -> torch.Tensor:
    generator = torch.Generator().manual_seed(rng.randrange(2**31))
    if rule in ("int", "int64"):
        return torch.randint(0, 4, shape, generator=generator)
    if rule == "bool":
        return torch.rand(shape, generator=generator) > 0.5
    return torch.randn(shape, generator=generator)


@cache
def eligible_ops() -> tuple[str, ...]:
    """The ops whose example, alone in a graph, checks, builds and runs: the runtime fuzz composes these."""
    names = []
    for opdef in registry:
        if not opdef.example or opdef.input_shape_example is None or opdef.runs_subgraph or opdef.imports_code:
            continue
        rng = random.Random(0)
        g = hndl.Graph("probe")
        made = _add_op(g, opdef, rng, [])
        if made is None:
            continue
        try:
            model = hndl.build(g).eval()
            model(*made)
        except Exception:  # an example that needs more than this file knows (a specific dtype pairing): left out
            continue
        names.append(opdef.name)
    return tuple(names)


def _add_op(g: hndl.Graph, opdef: OpDef, rng: random.Random, tensors: list[torch.Tensor]) -> list[torch.Tensor] | None:
    """One node of ``opdef``'s example on fresh inputs; its outputs declared. Returns the inputs' tensors."""
    params = {k: v for k, v in opdef.example.items() if k != "op"}
    shape = concrete(opdef.input_shape_example)
    handles, made = [], []
    for _port, rule in _ports(opdef):
        name = f"x{len(g.inputs)}"
        dtype = "int64" if rule in ("int", "int64") else "bool" if rule == "bool" else None
        handles.append(g.input(name, shape, dtype=dtype))
        made.append(_tensor(shape, rule, rng))
    try:
        h = g.add(opdef.name, handles, name=f"n{len(g.nodes)}", **params)
        count = g.output_count(h.node) or 1
    except hndl.HndlError:
        return None
    outs = [h[i] for i in range(count)] if count > 1 else [h]
    for out in outs:
        g.output(_decorate(g, out, opdef, rng))
    tensors += made
    return made


def _decorate(g: hndl.Graph, value: hndl.Handle, opdef: OpDef, rng: random.Random) -> hndl.Handle:
    """At random, elementwise ops or a linear after a float output."""
    # An output declared "any" (arange: int64 unless its dtype says otherwise) may be integer: left undecorated.
    float_out = all(p.dtype not in ("int64", "bool", "any") for p in opdef.outputs) and opdef.name not in ("positions",)
    if not float_out:
        return value
    for _ in range(rng.randint(0, 2)):
        if rng.random() < 0.25:
            value = g.add("linear", value, name=f"n{len(g.nodes)}", out_features=rng.randint(1, 5))
        else:
            value = g.add(rng.choice(ELEMENTWISE), value, name=f"n{len(g.nodes)}")
    return value


def random_graph(rng: random.Random, max_ops: int = 4) -> Made:
    """A graph of 1 to ``max_ops`` eligible ops, each on its own inputs, with random layers after them."""
    g = hndl.Graph(f"fuzz{rng.randrange(10**6)}")
    tensors: list[torch.Tensor] = []
    ops = []
    for _ in range(rng.randint(1, max_ops)):
        name = rng.choice(eligible_ops())
        if _add_op(g, registry.find(name), rng, tensors) is not None:  # type: ignore[arg-type]
            ops.append(name)
    return Made(g, tensors, ops)


def call_three_ways(made: Made) -> None:
    """Build ``made.graph`` and call it on the checked path (first call of a signature), the fast path (the
    second) and the unchecked path; every result must be identical, bit for bit."""
    torch.manual_seed(0)
    model = hndl.build(made.graph).eval()
    with torch.no_grad():
        checked = _as_tuple(model(*made.inputs))
        fast = _as_tuple(model(*made.inputs))
        plain = _as_tuple(model._runtime.unchecked(model, *made.inputs))
    assert len(checked) == len(fast) == len(plain) == len(made.graph.outputs)
    for i, (a, b, c) in enumerate(zip(checked, fast, plain)):
        assert identical(a, b), f"output {i} differs between the checked and the fast path ({made.ops})"
        assert identical(a, c), f"output {i} differs between the checked and the unchecked path ({made.ops})"


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit the same values, NaN where the other has NaN: ``torch.equal`` alone calls two equal results
    different when the element-wise ops make a NaN (``log`` of a negative input), as random inputs often do."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.is_floating_point() and not a.is_complex():
        return torch.equal(a, b)
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a.masked_fill(nan, 0), b.masked_fill(nan, 0))


def _as_tuple(out: Any) -> tuple[torch.Tensor, ...]:
    return out if isinstance(out, tuple) else (out,)
