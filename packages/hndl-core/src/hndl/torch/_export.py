"""Inputs and dynamic dims for ``torch.export``, both read off the graph's input contracts.

:func:`example_inputs` makes tensors that satisfy every input contract; :func:`dynamic_shapes` turns each
symbol of the contracts into one ``torch.export.Dim`` shared by every input that uses it. Both take the same
``**dims`` (a symbol's size, a ``*name`` entry's sizes), so the two always describe the same inputs::

    ep = torch.export.export(model, model.example_inputs(B=4), dynamic_shapes=model.dynamic_shapes())

Under ``torch.export`` (as under ``torch.compile``) ``torch.compiler.is_compiling()`` is true, so the model runs
its unchecked call: plain module calls that export traces like hand-written code. SPEC.md section 13 states
what works and what does not.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from .._contracts import DTYPES, Contract
from .._dims import Poly, evaluate, free_symbols
from .._errors import HndlError, Problem
from ..naming import suggestion
from ._built import BuiltModel

__all__ = ["EXPORT_STATIC", "dynamic_shapes", "example_inputs", "not_scriptable", "symbol_ranges"]

# Defaults for symbols the caller leaves out: distinct and above 1, because torch.export specializes a dim whose
# example is 0 or 1, and two dynamic dims with the same example could be taken for one.
_FIRST_DEFAULT = 2


def _inputs(model: BuiltModel) -> Iterator[tuple[str, Contract]]:
    checked = model.plan.checked
    yield from zip(checked.input_names, checked.contracts)


def _symbols(model: BuiltModel) -> tuple[list[str], list[str]]:
    """The contracts' symbols and ``*name`` entries, each once, in the order the inputs first use them."""
    scalars: list[str] = []
    variadics: list[str] = []
    for _name, contract in _inputs(model):
        pattern = contract.shape
        for index, dim in enumerate(pattern.dims):
            if index == pattern.variadic:
                if pattern.variadic_name not in variadics:
                    variadics.append(pattern.variadic_name or "")
                continue
            for symbol in sorted(free_symbols(dim)) if dim is not None else ():
                if symbol not in scalars:
                    scalars.append(symbol)
    return scalars, variadics


# --- the range of each symbol under torch.export ------------------------------------------------------------

# torch.export specializes some layers' dims to the example's size whatever dynamic_shapes says: nn.LSTM and
# nn.GRU read the sequence length as a Python int (a torch limitation, not hndl's). A symbol written there is
# exported static: (op, input index, dim index).
EXPORT_STATIC: dict[str, tuple[int, int]] = {"lstm": (0, 1), "gru": (0, 1)}

# Past this size a symbol's minimum is not searched further (a constraint that no size up to it satisfies is
# left to torch.export to report).
_SEARCH_CAP = 1 << 20


def _all_nodes(checked: Any) -> Iterator[Any]:
    for node in checked.nodes:
        yield node
        for body in node.body:
            yield from _all_nodes(body)


def _fixed_sizes(contract: Contract) -> dict[str, int]:
    """The symbols a node fixes to one size (``D = 16`` for a ``linear`` of ``in_features`` 16; the checker's
    ranges, :mod:`hndl._fixed_dims`), or a range given by hand with ``min == max``."""
    return {r.symbol: r.minimum for r in contract.ranges if r.minimum is not None and r.minimum == r.maximum}


def _constraints(model: BuiltModel, scalars: Sequence[str]) -> tuple[list[tuple[Any, int]], set[str]]:
    """What the graph requires of its symbols for torch.export: every requirement a node's shape arithmetic
    imposes (``H >= 7``), and every symbolic dim of every input and value at least 2 (export specializes a dim
    of size 0 or 1, and a symbolic dim that may be 1 makes it guard on broadcasting); plus the symbols an op
    forces static (:data:`EXPORT_STATIC`)."""
    known = set(scalars)
    found: list[tuple[Any, int]] = []
    static: set[str] = set()

    def symbolic(dim: Any) -> bool:
        return isinstance(dim, Poly) and bool(free_symbols(dim)) and free_symbols(dim) <= known

    for _name, contract in _inputs(model):
        found += [(d, 2) for d in contract.shape.dims if d is not None and symbolic(d)]
        static |= set(_fixed_sizes(contract)) & known  # a size a node fixes is no dynamic dim
    for node in _all_nodes(model.plan.checked):
        found += [(r.dim, r.minimum) for r in node.requires if symbolic(r.dim)]
        for t in node.out_types:
            if t.shape is not None:
                found += [(d, 2) for d in t.shape if symbolic(d)]
        fixed = EXPORT_STATIC.get(node.op)
        if fixed is not None and fixed[0] < len(node.in_types):
            shape = node.in_types[fixed[0]].shape
            if shape is not None and fixed[1] < len(shape) and isinstance(shape[fixed[1]], Poly):
                static |= free_symbols(shape[fixed[1]]) & known
    return found, static


def _smallest(dim: Any, minimum: int, symbol: str, values: dict[str, int]) -> int | None:
    """The smallest size of ``symbol`` (from its current value up) for which ``dim >= minimum``, the others as
    in ``values``; None when none up to the search cap is. Sizes grow every dim, so a doubling search then a
    bisection finds it."""

    def holds(size: int) -> bool:
        return evaluate(dim, {**values, symbol: size}) >= minimum

    low = values[symbol]
    if holds(low):
        return low
    high = max(2 * low, 2)
    while not holds(high):
        if high >= _SEARCH_CAP:
            return None
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if holds(middle) else (middle, high)
    return high


def symbol_ranges(model: BuiltModel) -> dict[str, int]:
    """The smallest size of each symbol of the input contracts for which the whole graph is valid under
    torch.export (:func:`_constraints`), found by raising each symbol until every constraint holds; symbols an
    op forces static are left out."""
    scalars, _variadics = _symbols(model)
    constraints, static = _constraints(model, scalars)
    minima = {s: 2 for s in scalars}
    for _round in range(64):  # each round raises at least one minimum, or ends
        raised = False
        for dim, minimum in constraints:
            if evaluate(dim, minima) >= minimum:
                continue
            for symbol in sorted(free_symbols(dim)):
                size = _smallest(dim, minimum, symbol, minima)
                if size is not None:
                    minima[symbol] = size
                    raised = True
                    break
        if not raised:
            break
    return {s: v for s, v in minima.items() if s not in static}


def _resolve_dims(model: BuiltModel, dims: Mapping[str, Any]) -> tuple[dict[str, int], dict[str, tuple[int, ...]]]:
    """Every symbol's size and every ``*name``'s sizes: the given ones checked, the rest defaulted."""
    scalars, variadics = _symbols(model)
    known = [*scalars, *variadics]
    for key in dims:
        if key not in known:
            hint = suggestion(key, known)
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"graph '{model.graph.name}' has no input symbol {key!r}",
                    expected=", ".join(known) or "no symbols (every input dim is fixed)",
                    actual=key,
                    hint=hint,
                )
            )
    given = {v for v in dims.values() if isinstance(v, int)}
    given |= {v for run in dims.values() if isinstance(run, Sequence) for v in run if isinstance(v, int)}
    minima = symbol_ranges(model)
    fixed = {s: n for _name, contract in _inputs(model) for s, n in _fixed_sizes(contract).items()}
    given |= set(fixed.values())
    sizes: dict[str, int] = {}
    for symbol in scalars:
        value = dims.get(symbol, fixed.get(symbol))
        if value is None:
            # The smallest size the graph is valid at under torch.export, distinct from every other example.
            value = next(n for n in itertools.count(minima.get(symbol, _FIRST_DEFAULT)) if n not in given)
            given.add(value)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise HndlError(
                Problem("E_INPUT", f"symbol {symbol!r} must be a size", expected="an int >= 0", actual=repr(value))
            )
        sizes[symbol] = value
    runs: dict[str, tuple[int, ...]] = {}
    for name in variadics:
        value = dims.get(name)
        if value is None:
            value = (next(n for n in itertools.count(_FIRST_DEFAULT) if n not in given),)
            given.add(value[0])
        if not isinstance(value, Sequence) or not all(isinstance(v, int) and v >= 0 for v in value):
            raise HndlError(
                Problem(
                    "E_INPUT",
                    f"'*{name}' must be given as the sizes it stands for",
                    expected="a tuple of ints, e.g. (4, 16)",
                    actual=repr(value),
                )
            )
        runs[name] = tuple(value)
    return sizes, runs


def _dtype(contract: Contract) -> torch.dtype:
    """A concrete dtype meeting the contract's rule: the rule itself, or the category's usual member."""
    rule = contract.dtype
    if rule in DTYPES:
        dtype: torch.dtype = getattr(torch, rule)
        return dtype
    return torch.int64 if rule == "int" else torch.get_default_dtype()


def _device(model: BuiltModel, contract: Contract) -> torch.device:
    if contract.device is not None:
        return torch.device(contract.device)
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def example_inputs(model: BuiltModel, **dims: Any) -> tuple[torch.Tensor, ...]:
    """Tensors that satisfy every input contract of ``model``, in input order.

    Args:
        dims: a size for any symbol of the input contracts (``B=4``), or for a ``*name`` entry the sizes it
            stands for (``batch=(4, 16)``). Symbols left out get distinct defaults from 2 up, skipping the sizes
            given (one dim each for a ``*name``), in the order the inputs use them, so no two dynamic dims
            share an example size.

    Floating inputs are ``randn`` from a generator seeded with 0 (the same inputs every time); integer inputs
    are zeros, which are valid indices for any embedding; bool inputs are all True, a padding mask that keeps
    every position (all False would mask every key, and attention over no key is NaN). Each input is on its contract's device,
    else on the device of the model's first parameter or buffer.

    Raises:
        HndlError: E_INPUT for a name that is no symbol of the contracts (with a did-you-mean), or a size that
            is not an int >= 0.
    """
    sizes, runs = _resolve_dims(model, dims)
    generator = torch.Generator().manual_seed(0)
    inputs: list[torch.Tensor] = []
    for _name, contract in _inputs(model):
        pattern = contract.shape
        shape: list[int] = []
        for index, dim in enumerate(pattern.dims):
            if index == pattern.variadic:
                shape.extend(runs[pattern.variadic_name or ""])
            else:
                assert dim is not None
                shape.append(evaluate(dim, sizes))
        dtype = _dtype(contract)
        if dtype.is_floating_point or dtype.is_complex:
            value = torch.randn(shape, generator=generator, dtype=dtype)
        elif dtype == torch.bool:
            value = torch.ones(shape, dtype=dtype)
        else:
            value = torch.zeros(shape, dtype=dtype)
        inputs.append(value.to(_device(model, contract)))
    return tuple(inputs)


def dynamic_shapes(model: BuiltModel, **dims: Any) -> dict[str, dict[int, Any]]:
    """``dynamic_shapes`` for ``torch.export.export(model, args, ...)``: one ``Dim`` per symbol, shared.

    Each symbol of the input contracts becomes ``torch.export.Dim(symbol)`` at every position where it is
    written, so ``B`` in two inputs is one dynamic dim; ``2*T`` or ``T+1`` becomes a derived dim of ``T``. Fixed
    entries (``784``) stay static. A ``*name`` entry becomes one ``Dim`` per dim it stands for (``batch_0``,
    ``batch_1``, ...); its count comes from ``dims`` as in :func:`example_inputs`. The result is keyed by input name, as ``forward``'s
    signature names the inputs (``{"input_ids": {0: Dim("B"), 1: Dim("T")}, ...}``, one ``{dim index: Dim}`` per
    input), so it serves ``torch.export`` whether it gets the inputs by position (``args``) or by name
    (``kwargs``); ``tuple(model.dynamic_shapes().values())`` is the form with one entry per input. (It was the
    one-item tuple ``(({...}, ...),)`` that a ``forward(*args)`` signature needed, which torch.export refuses now
    that the signature names the inputs.)

    Raises:
        HndlError: E_INPUT for an unknown symbol name, or for an entry that torch.export cannot express as a
            dim derived from one symbol (a product such as ``C*H*W``, a floor division): pass such a model's
            ``dynamic_shapes`` by hand.
    """
    from torch.export import Dim as ExportDim

    _sizes, runs = _resolve_dims(model, dims)
    minima = symbol_ranges(model)
    scalars, _variadics = _symbols(model)
    static = set(scalars) - set(minima)
    # First every position as (root symbol, scale, offset); then each root's Dim, whose maximum keeps every dim
    # derived from it within torch's sizes (torch 2.4 refuses a derived dim whose maximum could pass 2**63-2).
    positions: list[dict[int, tuple[str, int, int]]] = []
    for name, contract in _inputs(model):
        pattern = contract.shape
        spec: dict[int, tuple[str, int, int]] = {}
        position = 0
        for index, dim in enumerate(pattern.dims):
            if index == pattern.variadic:
                for k in range(len(runs[pattern.variadic_name or ""])):
                    spec[position] = (f"{pattern.variadic_name}_{k}", 1, 0)
                    position += 1
                continue
            assert dim is not None
            if not isinstance(dim, int) and not (free_symbols(dim) & static):
                spec[position] = _linear(name, position, dim)
            position += 1
        positions.append(spec)
    largest: dict[str, int] = {}  # only for roots some dim is derived from: the others keep torch's default
    for spec in positions:
        for root, scale, offset in spec.values():
            if (scale, offset) != (1, 0):
                bound = (_LARGEST_SIZE - offset) // scale
                largest[root] = min(largest.get(root, bound), bound)
    made: dict[str, Any] = {}
    for spec in positions:
        for root, _scale, _offset in spec.values():
            if root not in made:
                bounds = {"max": largest[root]} if root in largest else {}
                made[root] = ExportDim(root, min=minima.get(root, _FIRST_DEFAULT), **bounds)

    def export_dim(root: str, scale: int, offset: int) -> Any:
        out = made[root] if scale == 1 else scale * made[root]
        return out + offset if offset else out

    names = [name for name, _contract in _inputs(model)]
    return {name: {p: export_dim(*where) for p, where in spec.items()} for name, spec in zip(names, positions)}


# The largest size torch.export lets a dim reach (torch 2.4 checks derived dims against it).
_LARGEST_SIZE = 2**63 - 2


def _linear(input_name: str, position: int, dim: Poly) -> tuple[str, int, int]:
    """``a*S + b`` as ``(S, a, b)``, what torch.export can derive from one dim; anything else cannot be
    expressed."""
    scale, offset, root = 0, 0, None
    for monomial, coeff in dim.terms:
        if not monomial:
            offset = coeff
        elif len(monomial) == 1 and isinstance(monomial[0], str) and root in (None, monomial[0]):
            root, scale = monomial[0], coeff
        else:
            root = None
            break
    if root is None or scale < 1:
        raise HndlError(
            Problem(
                "E_INPUT",
                f"dim {position} of input '{input_name}' is {dim}: torch.export has no dynamic dim for it",
                node=input_name,
                op="input",
                expected="a symbol, or a*S+b of one symbol S",
                actual=str(dim),
                hint="write this model's dynamic_shapes by hand (torch.export.Dim), or make the dim a symbol",
            )
        )
    return root, scale, offset


def not_scriptable(model: BuiltModel) -> HndlError:
    """The error ``torch.jit.script`` gets: the checked call is Python that TorchScript cannot compile."""
    return HndlError(
        Problem(
            "E_RUNTIME",
            f"graph '{model.graph.name}' cannot be compiled by torch.jit.script: its checked call is generated "
            "Python (variable inputs, signature cache) that TorchScript does not support",
            expected="torch.export, torch.compile or torch.jit.trace",
            actual="torch.jit.script",
            hint="use torch.export.export(model, model.example_inputs(), dynamic_shapes=model.dynamic_shapes()) "
            "(or torch.jit.trace, which records one input shape)",
        )
    )
