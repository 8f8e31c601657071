"""The result of an import: an :class:`hndl.Graph` that also knows how the original's weights map onto it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import HndlError, Problem
from .._graph import Graph
from ..naming import suggestion

__all__ = ["Fallback", "ImportedGraph", "ModeWarning"]


class ModeWarning(UserWarning):
    """An imported module's ``forward`` reads ``self.training`` in code the graph was traced through: the graph
    is what that code computes in eval mode."""


@dataclass(frozen=True)
class Fallback:
    """A layer imported as a ``module`` node, and why no built-in op took it.

    Attributes:
        node: the node's name in the graph.
        path: the layer's path in the original model (``features.1.0.block.3``).
        cls: the layer's class (``torchvision.ops.stochastic_depth.StochasticDepth``).
        reason: why it is a ``module`` node (the traced operation that has no op, or that its training-mode
            behaviour is not in the trace).
    """

    node: str
    path: str
    cls: str
    reason: str


class ImportedGraph(Graph):
    """An :class:`hndl.Graph` made by :func:`hndl.from_module`: a plain graph (check it, build it, ``dumps`` it)
    that also carries how the original module's weights map onto the built model.

    Attributes:
        renames: every key of the original's ``state_dict()`` -> the built model's key
            (``"layer1.0.conv1.weight"`` -> ``"nodes.n_layer1_0_conv1.weight"``), or ``None`` for a tensor the
            forward pass never reads (an unused head).
        fallbacks: the ``module`` nodes, with the layer each rebuilds and why.
        tied: a built model's key -> the other keys of the same tensor (a layer called twice is one node per
            call, tied; a weight two layers share).
        notes: what the import noticed and the graph cannot show (a ``forward`` that reads ``self.training``).
        folded: the original's persistent buffers that a constant folded at import was computed from, key -> the
            value it was computed with. The graph holds the result, not the buffer, so :meth:`convert` refuses a
            state dict holding another value for one (a trained buffer) rather than drop it.
    """

    def __init__(self, name: str = "graph") -> None:
        super().__init__(name)
        self.renames: dict[str, str | None] = {}
        self.fallbacks: list[Fallback] = []
        self.tied: dict[str, list[str]] = {}
        self.notes: list[str] = []
        self.folded: dict[str, Any] = {}

    @property
    def rules(self) -> list[tuple[str, str | None]]:
        """The renames as ``(original key, built model's key or None)`` pairs, in the original's order."""
        return list(self.renames.items())

    def convert(self, state_dict: Mapping[str, Any], *, strict: bool = True) -> dict[str, Any]:
        """The original's ``state_dict`` under the built model's keys, for ``model.load_state_dict``.

        Tensors the forward pass never reads are left out; a tensor the built model holds under several keys
        (tied weights, a layer called twice) comes out under each.

        Raises:
            HndlError: E_PARAMS when ``strict`` and a key is unknown (with the closest known key) or a key the
                built model needs is missing; and, strict or not, when a buffer a constant was folded from
                (:attr:`folded`) holds another value than at import. Every such key is listed.
        """
        out: dict[str, Any] = {}
        problems: list[Problem] = []
        for key, value in state_dict.items():
            if key in self.folded and not _same_value(value, self.folded[key]):
                problems.append(
                    Problem(
                        "E_PARAMS",
                        f"buffer {key!r} holds another value than when the module was imported, and a constant the "
                        "graph holds was computed from it at import",
                        hint="load this state dict into the module, then import it again (hndl.from_module)",
                    )
                )
                continue
            if key not in self.renames:
                if strict:
                    problems.append(
                        Problem(
                            "E_PARAMS",
                            f"key {key!r} is not a tensor of the imported module",
                            hint=suggestion(key, self.renames),
                        )
                    )
                continue
            target = self.renames[key]
            if target is not None:
                out[target] = value
                for other in self.tied.get(target, ()):
                    out.setdefault(other, value)
        if strict:
            given = set(state_dict)
            for key, target in self.renames.items():
                if target is not None and key not in given:
                    problems.append(Problem("E_PARAMS", f"key {key!r} is missing (the built model's {target!r})"))
        if problems:
            raise HndlError(problems, title=f"weights for imported graph '{self.name}'")
        return out


def _same_value(a: Any, b: Any) -> bool:
    """Whether two tensors hold the same shape, dtype and values (NaN equal to NaN)."""
    import torch

    if not isinstance(a, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype or a.device.type == "meta":
        return False
    a = a.detach().cpu()
    return bool(torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)))
