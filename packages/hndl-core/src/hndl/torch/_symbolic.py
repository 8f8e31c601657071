"""Checked once per *symbolic* signature: a new binding of the graph's symbols needs only its inputs checked.

Static inference proves a graph for every value of its symbols (``B``, ``T``): each node's output type is an
expression over them. So once a call with some dtype/device pattern has validated fully, another call whose
shapes are a new binding of the same symbols cannot break a node's contract that the first did not: checking
its inputs against the input contracts is enough. The *symbolic key* of a signature is each input's rank,
dtype and device plus the state version (its concrete dims left out); :class:`SymbolicCheck` remembers the
keys that validated fully and checks a new binding's inputs with generated code (no Python-level loop for the
common patterns: ints and bare symbols).

Where inference did not prove everything, every concrete shape still validates: a ``module`` op (its output
shape is only declared), an output whose shape or some dim inference could not determine, an output contract
that inference could not prove.
"""

from __future__ import annotations

import builtins
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

from .._checked import CheckedGraph
from .._contracts import Variadic, is_unknown
from .._dims import free_symbols
from .._plan import Plan

__all__ = ["SymbolicCheck", "proven_for_all_bindings", "symbolic_key"]


def proven_for_all_bindings(plan: Plan) -> bool:
    """Whether static inference typed every step's outputs for every binding of the graph's symbols, and proved
    every output's declared contract (one it could not is checked on each validating call)."""
    if any(declared is not None and not declared.proven for declared in plan.checked.declared_outputs):
        return False
    for step in plan.steps:
        node = step.node
        if node.op == "module":
            return False
        for out in node.out_types:
            if out.shape is None:
                return False
            for d in out.shape:  # a plain loop: this runs for every dim of every step of each build
                if not isinstance(d, Variadic) and is_unknown(d):
                    return False
    return True


def symbolic_key(sig: tuple[Any, ...]) -> tuple[Any, ...]:
    """A signature without its concrete dims: per input ``(rank, dtype, device)``, then the state version."""
    return (*(len(v) if i % 3 == 0 else v for i, v in enumerate(sig[:-1])), sig[-1])


def _bare_symbol(d: Any) -> str | None:
    symbols = free_symbols(d)
    if len(symbols) == 1:
        (name,) = symbols
        if str(d) == name:
            return name
    return None


def _input_check_source(checked: CheckedGraph) -> str | None:
    """``def inputs_ok(args)`` testing each input's rank, int dims, symbol agreement and the contracts' ranges;
    ``None`` when a contract has a variadic entry or an expression dim (then :func:`~._validate.check_inputs`
    decides)."""
    lines = ["def inputs_ok(args):"]
    bound: dict[str, str] = {}
    for i, contract in enumerate(checked.contracts):
        shape = contract.shape
        if shape.variadic is not None:
            return None
        lines.append(f"    s = args[{i}].shape")
        tests = [f"len(s) != {len(shape.dims)}"]
        binds: list[str] = []
        for k, d in enumerate(shape.dims):
            if isinstance(d, int):
                if not 0 <= d < 2**63:  # no tensor has such a dim; and a huge int has no decimal text to emit
                    return None
                tests.append(f"s[{k}] != {d}")
                continue
            name = _bare_symbol(d)
            if name is None:
                return None
            if name in bound:
                tests.append(f"s[{k}] != {bound[name]}")
            else:
                local = f"d{len(bound)}"
                bound[name] = local
                binds.append(f"    {local} = s[{k}]")
        lines.append(f"    if {' or '.join(tests)}:")
        lines.append("        return False")
        lines.extend(binds)
    # The ranges of input contracts (an imported trace's, a position table's rows): each symbol is bound by now.
    limits = []
    for contract in checked.contracts:
        for r in contract.ranges:
            symbol = bound.get(r.symbol)
            if symbol is None:
                return None
            if r.minimum is not None:
                limits.append(f"{symbol} < {r.minimum}")
            if r.maximum is not None:
                limits.append(f"{symbol} > {r.maximum}")
    if limits:
        lines.append(f"    if {' or '.join(limits)}:")
        lines.append("        return False")
    lines.append("    return True")
    return "\n".join(lines)


class SymbolicCheck:
    """One model's symbolic keys that validated fully, and the check a new binding's inputs must pass."""

    def __init__(self, plan: Plan, check_inputs: Callable[[CheckedGraph, Sequence[Any]], Any]) -> None:
        self.proven: dict[tuple[Any, ...], None] = {}
        self._lock = threading.Lock()
        # Bounds a node puts on the symbols (H >= 7) are checked by check_inputs, not the generated test; the ranges
        # of input contracts are in the generated test.
        bounded = any(step.node.requires for step in plan.steps)
        source = None if bounded else _input_check_source(plan.checked)
        if source is not None:
            code = compile(source, f"<hndl input check: {plan.checked.graph.name}>", "exec")
            function = next(c for c in code.co_consts if isinstance(c, types.CodeType))
            self.inputs_ok: Callable[[Sequence[Any]], bool] = types.FunctionType(
                function, {"__builtins__": builtins}, "inputs_ok"
            )
        else:
            checked = plan.checked

            def inputs_ok(args: Sequence[Any]) -> bool:
                try:
                    check_inputs(checked, args)
                except Exception:
                    return False  # the full validation that follows raises it
                return True

            self.inputs_ok = inputs_ok

    def validated(self, sig: tuple[Any, ...]) -> None:
        """Remember that a call with ``sig`` validated fully (its key's older state versions are dropped)."""
        key = symbolic_key(sig)
        with self._lock:
            if key not in self.proven:
                for old in [k for k in self.proven if k[-1] != key[-1]]:
                    del self.proven[old]
                self.proven[key] = None

    def admits(self, sig: tuple[Any, ...], args: Sequence[Any]) -> bool:
        """Whether ``sig`` is a new binding of a key that validated fully, with inputs that meet the contracts."""
        return symbolic_key(sig) in self.proven and self.inputs_ok(args)
