"""Every op's declared output ports agree with what its inference computes.

An op with an ``infer`` function may still declare output shape patterns (``conv2d``'s
``(H+2*padding_h-dilation_h*(kernel_h-1)-1)//stride_h+1``): the reference docs show them, the checker uses
``infer``. So that the two never drift apart, this test checks every registered op on random concrete input
shapes and parameters: whenever the node checks, its declared output patterns, evaluated under the inputs'
bindings, the parameters and ``derive``'s names, must give the shapes and dtypes inference gave. A name in an
output pattern that none of those binds (pooling's ``H_out``) is a dim only ``infer`` computes: it must stand
alone as a dim and the op's ``inference`` text must explain it, so a pattern that silently lost a binding
(an op's ``derive`` removed) fails here.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import pytest

import hndl
from hndl._contracts import TensorType, dtype_satisfies, is_unknown
from hndl._dims import evaluate, free_symbols
from hndl._infer import declared_output_types

TRIES = 60
#: More tries for ops whose parameters depend on each other so that most random draws are refused: attention's
#: static and growing caches (cache, past) each need causal self-attention and the node's heads and head dim.
TRIES_FOR = {"attention": 120}
#: A sample must check this often for the comparison to mean something (the rest hit E_SHAPE/E_PARAM).
MIN_CHECKED = 5


def _param_value(p: hndl.Param, example: dict[str, Any], rng: random.Random) -> Any:
    """A value for ``p``: the example's or the default, or a random one of its type within its bounds."""
    if p.nullable and rng.random() < 0.15:
        return None
    lo = int(p.min) if p.min is not None else -2
    hi = min(int(p.max) if p.max is not None else lo + 5, lo + 5)
    if p.choices is not None:
        return rng.choice(p.choices)
    if p.type.name == "int":
        return rng.randint(lo, hi)
    if p.type.name == "float":
        return rng.uniform(p.min or 0.0, p.max if p.max is not None else 1.0)
    if p.type.name == "bool":
        return rng.random() < 0.5
    if p.type.name == "int_or_pair":
        return rng.randint(lo, hi) if rng.random() < 0.5 else [rng.randint(lo, hi), rng.randint(lo, hi)]
    if p.type.name == "ints":
        return [rng.randint(lo, hi) for _ in range(rng.randint(1, 3))]
    if p.type.name == "numbers":
        return [rng.choice([0, 1, rng.randint(lo, hi), rng.uniform(-2.0, 2.0)]) for _ in range(rng.randint(1, 4))]
    if p.type.name == "sizes":  # expand's target: sizes, or -1 to keep a dim
        return [rng.choice([-1, -1, 1, 2]) for _ in range(rng.randint(3, 4))]
    return example.get(p.name, p.default)  # strings, shapes, mappings, graph names: the example's


def sample_params(opdef: hndl.OpDef, rng: random.Random) -> dict[str, Any]:
    """Random parameters: half the time each drawn at random (or left to the example), half the time the example
    with one parameter drawn at random, so ops whose parameters depend on each other (a buffer's formula and
    the numbers it reads) are checked around a valid configuration too."""
    example = {k: v for k, v in opdef.example.items() if k not in ("op", "in")}
    params: dict[str, Any] = {}
    numbers_for = {port.name for port in opdef.inputs if port.scalar}
    drawn = [p for p in opdef.params if not p.inferred and p.type.name != "graph"]
    if drawn and rng.random() < 0.5:
        varied = rng.choice(drawn)
        params = {k: v for k, v in example.items() if k != varied.name}
        params[varied.name] = _param_value(varied, example, rng)
        return params
    for p in drawn:
        if p.name in numbers_for:  # a number in place of an input, half the time (an int or a float)
            if rng.random() < 0.5:
                params[p.name] = rng.choice([rng.randint(-3, 3), rng.uniform(-3.0, 3.0)])
            continue
        if rng.random() < 0.3:
            if p.name in example:
                params[p.name] = example[p.name]
            elif p.required:
                params[p.name] = _param_value(p, example, rng)
        else:
            params[p.name] = _param_value(p, example, rng)
    return params


def _concrete(entries: Sequence[Any], symbols: dict[str, int], params: dict[str, Any], rng: random.Random) -> list:
    shape: list[int] = []
    for entry in entries:
        if isinstance(entry, int):
            shape.append(entry)
        elif isinstance(entry, str) and entry.startswith("*"):
            shape += [rng.randint(1, 5) for _ in range(rng.randint(0, 2))]
        elif isinstance(entry, str) and isinstance(params.get(entry), int):
            shape.append(params[entry])
        else:
            symbols.setdefault(str(entry), rng.randint(1, 12))
            shape.append(symbols[str(entry)])
    return shape


def sample_inputs(opdef: hndl.OpDef, params: dict[str, Any], rng: random.Random) -> list[tuple[list, str]]:
    """Concrete (shape, dtype) per input: from each port's pattern, else from the op's example input shape."""
    symbols: dict[str, int] = {}
    example = list(opdef.input_shape_example or ("B", 16))
    shared = _concrete(example, symbols, params, rng)  # ports without a pattern share one shape (add, concat)
    out: list[tuple[list, str]] = []
    dtypes: dict[str, str] = {}
    active = opdef.active_inputs(params)
    for port in opdef.inputs:
        if port not in active or (port.optional and rng.random() < 0.5):
            continue  # a port its flag leaves out (or a number stands for), or an optional one left out
        rule = port.dtype
        dtype = {"float": "float32", "any": "float32", "int": "int64"}.get(rule, rule)
        if rule.startswith("same:"):
            dtype = dtypes[rule[5:]]
        dtypes[port.name] = dtype
        # A port with no pattern, or one that is a single open run (*shape), takes the example's shape (roll's dims
        # need its rank); one with a pattern gets dims drawn for it.
        entries = list(port.pattern.entries) if port.pattern is not None else []
        whole_run = len(entries) == 1 and str(entries[0]).startswith("*")
        shape = shared if port.shape is None or whole_run else _concrete(entries, symbols, params, rng)
        out += [(list(shape), dtype)] * (2 if port.variadic else 1)
    return out


def check_one(opdef: hndl.OpDef, rng: random.Random) -> tuple[list[TensorType], list[TensorType]] | None:
    """(declared, inferred) output types of one random node of ``opdef``, or None when it does not check.

    Also asserts that every name the output patterns leave unbound is one the op explains.
    """
    params = sample_params(opdef, rng)
    g = hndl.Graph("sample")
    inputs = sample_inputs(opdef, params, rng)
    xs = [g.input(f"x{i}", tuple(s), dtype=d) for i, (s, d) in enumerate(inputs)]
    if opdef.runs_subgraph:
        block = hndl.Graph("block")
        block.output(block.add("relu", block.input("h", tuple(inputs[0][0]))))
        params.update(graph=block, repeat=rng.randint(1, 3))
        xs = xs[:1]
    node = g.add(opdef.name, xs, name="n", **params)
    count = g.output_count("n") or 1
    g.output([node[i] for i in range(count)] if count > 1 else node)
    try:
        checked = hndl.check(g).nodes[0]
    except hndl.HndlError as exc:
        refused: hndl.HndlError | None = exc
    else:
        refused = None
    if refused is not None:  # random parameters are often wrong for the shapes; nothing else may be
        assert refused.code in ("E_SHAPE", "E_PARAM"), str(refused)
        return None
    unexplained = unexplained_names(opdef, checked.params)
    assert not unexplained, f"{opdef.name}: output pattern names nothing binds nor explains: {unexplained}"
    return declared_output_types(opdef, checked.params, checked.in_types), checked.out_types


def _names(pattern: Any) -> set[str]:
    names = {s for d in pattern.dims if d is not None for s in free_symbols(d)}
    return names | ({pattern.variadic_name} if pattern.variadic_name else set())


def unexplained_names(opdef: hndl.OpDef, params: hndl.Params) -> list[str]:
    """Names in ``opdef``'s output patterns that neither the inputs, the integer parameters nor ``derive``
    bind, and that are not a whole dim explained by the op's ``inference`` text."""
    bound = {name for port in opdef.inputs if port.pattern is not None for name in _names(port.pattern)}
    bound |= {k for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool)}
    bound |= set(opdef.derive(params)) if opdef.derive is not None else set()
    found = []
    for port in opdef.outputs:
        if port.pattern is None:
            continue
        whole_dims = {e for e in port.pattern.entries if isinstance(e, str) and e.isidentifier()}
        for name in sorted(_names(port.pattern) - bound):
            if name not in whole_dims or name not in opdef.inference.replace(",", " ").split():
                found.append(name)
    return found


def disagreements(declared: list[TensorType], inferred: list[TensorType]) -> list[str]:
    """How the declared types differ from the inferred ones; a dim or dtype the declaration leaves open
    (no pattern, a name nothing binds, dtype ``any``) agrees with anything, and a declared category (``float``)
    with each of its members."""
    if len(declared) != len(inferred):
        return [f"{len(declared)} outputs declared, {len(inferred)} inferred"]
    found = []
    for i, (d, t) in enumerate(zip(declared, inferred)):
        if dtype_satisfies(t.dtype, d.dtype) is not True:
            found.append(f"output {i}: dtype {d.dtype} declared, {t.dtype} inferred")
        if d.shape is None:
            continue
        if t.shape is None or len(d.shape) != len(t.shape):
            found.append(f"output {i}: shape {d} declared, {t} inferred")
            continue
        for dim, got in zip(d.shape, t.shape):
            if not is_unknown(dim) and evaluate(dim, {}) != got:
                found.append(f"output {i}: shape {d} declared, {t} inferred")
                break
    return found


@pytest.mark.parametrize("name", hndl.registry.names())
def test_declared_output_ports_agree_with_inference(name: str) -> None:
    opdef = hndl.registry.find(name)
    rng = random.Random(name)
    checked = 0
    tries = TRIES_FOR.get(name, TRIES)
    for _ in range(tries):
        result = check_one(opdef, rng)
        if result is None:
            continue
        checked += 1
        problems = disagreements(*result)
        assert not problems, f"{name}: {problems}"
    assert checked >= MIN_CHECKED, f"{name}: only {checked} of {tries} random nodes checked"


def test_a_declaration_that_disagrees_with_inference_is_caught():
    @hndl.op(
        "test_doubles",
        inputs=[hndl.Port("x", ["B", "D"])],
        outputs=[hndl.Port("y", ["B", "D"], dtype="same:x")],  # wrong: infer doubles D
        infer=lambda p, ins: [TensorType((ins[0].shape[0], 2 * ins[0].shape[1]), ins[0].dtype)],
    )
    def build(p, inputs):
        """Declares one width, infers another."""

    try:
        result = check_one(hndl.registry.find("test_doubles"), random.Random(0))
        assert result is not None
        assert disagreements(*result) == [f"output 0: shape {result[0][0]} declared, {result[1][0]} inferred"]
    finally:
        hndl.registry.unregister("test_doubles")


def test_an_output_pattern_that_lost_its_derive_is_caught():
    conv2d = hndl.registry.find("conv2d")
    params = hndl.check(_one_conv2d()).nodes[0].params
    assert unexplained_names(conv2d, params) == []
    without_derive = dataclasses.replace(conv2d, derive=None)
    assert unexplained_names(without_derive, params) == [
        "dilation_h",
        "dilation_w",
        "kernel_h",
        "kernel_w",
        "padding_h",
        "padding_w",
        "stride_h",
        "stride_w",
    ]


def _one_conv2d() -> hndl.Graph:
    g = hndl.Graph()
    g.output(g.add("conv2d", g.input("x", ("B", 3, 8, 8)), out_channels=4, kernel_size=3))
    return g
