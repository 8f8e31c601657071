"""Where each input of an ``attention`` node sits: one answer for inference, cost, memory and the layer.

An attention node's inputs are ``x``, then ``kv`` (cross-attention, when given), ``mask`` (``masked``),
``score_bias`` (``score_bias``), ``cache_k, cache_v, offset`` (``cache``), ``past_k, past_v`` (``past``) and
``positions`` (``position_ids``), in that order, each present or not by the node's parameters; only ``kv`` is
told by the count. Every reader asks :meth:`AttentionPorts.of` instead of counting for itself: counts written in
several places drifted (a node with ``rope`` and ``position_ids`` passed the checker and then made the cost and
memory estimates read the positions as the keys). No torch here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["AttentionPorts"]

T = TypeVar("T")


@dataclass(frozen=True)
class AttentionPorts:
    """The index of each input of one attention node, ``None`` for a port the node does not have."""

    count: int
    kv: int | None
    mask: int | None
    score_bias: int | None
    cache_k: int | None
    cache_v: int | None
    offset: int | None
    past_k: int | None
    past_v: int | None
    positions: int | None
    x: int = 0

    @classmethod
    def of(cls, params: Mapping[str, Any], count: int) -> AttentionPorts:
        """The ports of a node with ``params`` (a mapping with the op's flags) and ``count`` inputs."""
        flags = {name: bool(params.get(name)) for name in ("masked", "score_bias", "cache", "past", "position_ids")}
        fixed = 1 + flags["masked"] + flags["score_bias"] + 3 * flags["cache"] + 2 * flags["past"]
        has_kv = count - fixed - flags["position_ids"] == 1
        at = 1
        slots: dict[str, int | None] = {}
        for name, present in (
            ("kv", has_kv),
            ("mask", flags["masked"]),
            ("score_bias", flags["score_bias"]),
            ("cache_k", flags["cache"]),
            ("cache_v", flags["cache"]),
            ("offset", flags["cache"]),
            ("past_k", flags["past"]),
            ("past_v", flags["past"]),
            ("positions", flags["position_ids"]),
        ):
            slots[name] = at if present else None
            at += int(present)
        return cls(count, **slots)  # type: ignore[arg-type]  # every slot is an int or None, as the fields are

    def pick(self, values: Sequence[T], port: str) -> T | None:
        """The input at ``port`` among ``values`` (the node's inputs, in order), ``None`` when it has none."""
        at = getattr(self, port)
        return None if at is None or at >= len(values) else values[at]

    def take(self, values: Sequence[T], port: str) -> T:
        """The input at ``port``, which the node has (its parameters open it)."""
        value = self.pick(values, port)
        if value is None:
            raise LookupError(f"attention node has no {port} input among {len(values)}")
        return value
