"""What a problem the walk finds says beyond the bare mismatch, in the words the user wrote the graph in.

Ops phrase a problem between their inputs in port names (``'a'``, ``'b'``); :func:`name_wired_inputs` puts the
references wired into those ports in their place. A shape that does not fit was usually made some nodes back:
:func:`origin` finds the node that last changed a value's shape, and :func:`explain_inputs` names it for each
input of a node, with a likely cause (a padded window op without padding). Output contracts
(:mod:`hndl._check_outputs`) name the node that made a shape the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ._checked import CheckedNode
from ._graph import Node
from ._infer import BoundPorts

__all__ = ["explain_inputs", "name_wired_inputs", "origin"]


def name_wired_inputs(
    message: str, fields: dict[str, Any], ports: BoundPorts, refs: Sequence[str]
) -> tuple[str, dict[str, Any]]:
    """``message`` and the texts in ``fields`` with each quoted port name (``'a'``) replaced by the reference
    wired into that port (``'hidden'``): ops phrase problems between their inputs in port names, but the user
    wrote the references. The problem's ``port`` field still names the port."""
    wired = {port.name: ref for (port, _), ref in zip(ports, refs) if not port.variadic and port.name != ref}
    if not wired:
        return message, fields
    pattern = re.compile("'(" + "|".join(re.escape(name) for name in wired) + ")'")

    def rename(text: str) -> str:
        return pattern.sub(lambda m: repr(wired[m.group(1)]), text)

    renamed = {
        k: rename(v) if k in ("expected", "actual", "hint") and isinstance(v, str) else v for k, v in fields.items()
    }
    return rename(message), renamed


def origin(producers: Mapping[str, CheckedNode], value: str) -> tuple[CheckedNode | None, list[str]]:
    """The node where ``value``'s shape was last changed, and the shape-keeping nodes passed on the way.
    ``producers``: value id -> the leaf node that makes it."""
    via: list[str] = []
    node = producers.get(value)
    while node is not None and len(node.inputs) == 1 and node.in_types[0].shape == node.out_types[0].shape:
        via.append(node.qualname)
        before = producers.get(node.inputs[0])
        if before is None:
            return node, via[:-1]
        node = before
    return node, via


def explain_inputs(
    producers: Mapping[str, CheckedNode], message: str, node: Node, in_ids: list[str]
) -> tuple[str, str | None]:
    """A shape mismatch between a node's inputs, with where each input's shape comes from and, when one of
    them was changed by a padded window op without padding, that probable cause."""
    parts: list[str] = []
    cause = None
    passed_through = False
    for ref, value in zip(node.inputs, in_ids):
        made_by, via = origin(producers, value)
        passed_through = passed_through or bool(via)
        if made_by is None:
            parts.append(f"'{ref}'")
            continue
        through = f" through '{via[-1]}'" if via else ""
        parts.append(f"{made_by.op} '{made_by.qualname}'{through}")
        padding = made_by.params.get("padding") if "padding" in made_by.params else None
        kernel = made_by.params.get("kernel_size")
        if cause is None and padding in (0, (0, 0)) and kernel not in (None, 1, (1, 1)):
            k = kernel if isinstance(kernel, int) else max(kernel)
            cause = (
                f"probable cause: {made_by.op} '{made_by.qualname}' has no padding, so its kernel of {kernel} "
                f"shrinks the size by {k - 1}; padding: {(k - 1) // 2} keeps it"
            )
    if not passed_through and cause is None:
        return message, None  # each input is what the node names: nothing to add
    return f"{message} (inputs from {' and '.join(parts)})", cause
