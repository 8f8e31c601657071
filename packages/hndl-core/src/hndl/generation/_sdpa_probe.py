"""Running the nodes an imported decoder computes its masks and positions with, on probe inputs, to read what
they are: :mod:`._sdpa_pattern`'s rule says which values they must have. Three rows (none, two and four padding
tokens on the left) at two lengths: 6, and one past every number the mask's nodes hold (a sliding window's size
among them), so the causal pattern, the padding and a window of any size show in the values."""

from __future__ import annotations

import copy
import math
from typing import Any

from .._graph import Graph, split_ref
from ._graph_edit import refuse

__all__ = ["Probe"]

_SHORT = 6
_LONGEST = 8192
_PADS = (0, 2, 4)


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [abs(float(value))] if math.isfinite(value) else []
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _numbers(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    return []


def _nodes_of(graph: Graph, refs: list[str]) -> set[str]:
    seen: set[str] = set()
    todo = [split_ref(r)[0] for r in refs]
    while todo:
        name = todo.pop()
        if name in seen or name not in graph.nodes:
            continue
        seen.add(name)
        todo.extend(split_ref(r)[0] for r in graph.nodes[name].inputs)
    return seen


class Probe:
    """The values of ``masks`` and of the integer ``[T]`` / ``[1, T]`` / ``[B, T]`` nodes ``side`` is computed from (the
    candidates for positions), at each probe length."""

    def __init__(self, graph: Graph, checked: dict[str, Any], analysis: Any, masks: list[str], side: list[str]):
        import torch

        from .._errors import HndlError
        from ..torch import build_module

        self.graph, self.a = graph, analysis
        self.masks = list(dict.fromkeys(masks))
        mask_nodes = _nodes_of(graph, self.masks)
        side_nodes = _nodes_of(graph, side)
        self.candidates = [
            name
            for name in graph.nodes
            if name in side_nodes and name in checked and self._positions_like(checked[name].out_types[0])
        ]
        numbers = [n for name in mask_nodes for n in _numbers(graph.nodes[name].params)]
        longest = min(_LONGEST, max([_SHORT + 1, *(int(n) + 2 for n in numbers if n <= _LONGEST)]))
        self.lengths = (_SHORT, longest)
        probe = copy.deepcopy(graph)
        probe.nodes = {name: node for name, node in probe.nodes.items() if name in mask_nodes | side_nodes}
        probe.outputs, probe.output_locations, probe.output_specs = [], [], []
        outputs = self.masks + self.candidates
        if not outputs:
            self.values: list[dict[str, Any]] = []
            return
        probe.output(outputs)
        try:
            model = build_module(probe).eval()
        except HndlError as exc:
            raise refuse(
                f"the nodes the masks and positions are computed from do not build alone: {exc.problems[0].message}"
            ) from exc
        self.pads: list[Any] = []
        self.values = []
        for t in self.lengths:
            padding = torch.ones(len(_PADS), t, dtype=torch.bool)
            for row, pad in enumerate(_PADS):
                padding[row, :pad] = False
            self.pads.append(padding)
            args = []
            for name, spec in graph.inputs.items():
                dtype = getattr(torch, str(spec.contract.dtype or "int64"), torch.int64)
                if name == analysis.ids:
                    args.append(torch.zeros(len(_PADS), t, dtype=torch.int64))
                elif name == analysis.position_input:
                    args.append((padding.long().cumsum(-1) - 1).masked_fill(~padding, 1))
                else:
                    args.append(padding.to(dtype if isinstance(dtype, torch.dtype) else torch.int64))
            with torch.no_grad():
                got = model(*args)
            got = got if isinstance(got, tuple) else (got,)
            self.values.append(dict(zip(outputs, got)))

    def _positions_like(self, typ: Any) -> bool:
        shape = typ.shape
        if shape is None or not 1 <= len(shape) <= 2 or typ.dtype not in ("int64", "int32"):
            return False
        return str(shape[-1]) == self.a.length and (len(shape) == 1 or str(shape[0]) in ("1", self.a.batch))

    def mask_window(self, ref: str) -> int | None:
        """The sliding window of the causal padding mask ``ref`` (``None``: no window).

        Raises:
            HndlError: E_INPUT naming the mask's node when its values are not those of a causal padding mask.
        """
        import torch

        window = None
        for index, (t, padding) in enumerate(zip(self.lengths, self.pads)):
            allowed = self._allowed(ref, self.values[index][ref], t)
            if index == len(self.lengths) - 1:
                seen = int(allowed[0, t - 1].sum())
                window = seen if seen < t else None
            query = torch.arange(t)[:, None]
            key = torch.arange(t)[None, :]
            pattern = key <= query
            if window is not None:
                pattern = pattern & (key > query - window)
            expected = padding[:, None, :] & pattern
            real = padding[:, :, None].expand_as(expected)
            wrong = (allowed != expected) & real
            if bool(wrong.any()):
                b, i, j = (int(x) for x in wrong.nonzero()[0])
                raise refuse(
                    f"the mask {ref!r} is not the causal padding mask: at length {t}, row {b} (padding "
                    f"{_PADS[b]} on the left), query {i} {'may' if bool(allowed[b, i, j]) else 'may not'} see key "
                    f"{j}",
                    split_ref(ref)[0],
                    expected="a bool mask equal to padding[b, j] and j <= i (optionally i - j < window) at each "
                    "real query i",
                )
        return window

    def _allowed(self, ref: str, value: Any, t: int) -> Any:
        """``value`` (a bool or additive mask broadcastable to ``[B, H, T, T]``) as bool ``[B, T, T]``."""
        import torch

        name = split_ref(ref)[0]
        if value.dim() == 2:  # a padding mask [B, S]: every query sees the same keys
            value = value[:, None, None, :]
        if value.dim() != 4 or value.shape[-1] != t or value.shape[-2] not in (1, t):
            raise refuse(f"the mask {ref!r} has shape {list(value.shape)}, not [B, 1, T, T]", name)
        if value.dtype != torch.bool:
            blocked = value <= torch.finfo(value.dtype).min / 2 if value.is_floating_point() else value == 0
            if value.is_floating_point() and not bool((blocked | (value == 0)).all()):
                raise refuse(
                    f"the mask {ref!r} adds scores other than 0 and -inf (a bias, ALiBi's); the cached variant's "
                    "mask only allows or blocks",
                    name,
                )
            value = ~blocked if value.is_floating_point() else value != 0
        if value.shape[1] != 1 and not bool((value == value[:, :1]).all()):
            raise refuse(f"the mask {ref!r} differs between heads; the cached variant's mask is one per row", name)
        return value[:, 0].expand(len(_PADS), t, t)

    def positions(self) -> list[str]:
        """The nodes whose value is the positions ``0 .. T-1`` on every probe, read by nodes whose value is not."""
        import torch

        same = []
        for name in self.candidates:
            if all(bool((values[name] == torch.arange(t)).all()) for t, values in zip(self.lengths, self.values)):
                same.append(name)
        readers: dict[str, set[str]] = {}
        for node in self.graph.nodes.values():
            for ref in node.inputs:
                readers.setdefault(split_ref(ref)[0], set()).add(node.name)
        return [name for name in same if readers.get(name, set()) - set(same)]
