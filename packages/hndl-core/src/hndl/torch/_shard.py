"""Sharding units for FSDP2, read off the plan: the blocks, with tied parameters kept in one unit.

``fully_shard`` makes each module it is given one unit of all-gather and reduce-scatter, and a parameter may
belong to one unit only: sharding ``wte`` and ``lm_head`` of a GPT-2 apart splits one tied ``Parameter`` between
two units, which FSDP2 refuses. The graph knows both what a block is (one use of a subgraph, one repetition of
a repeated one: a :class:`._blocks.Block` with a ``forward``, so ``fully_shard(block)`` hooks its calls) and which
parameters are tied, so the units come from it::

    for unit in model.shard_units():
        fully_shard(unit, mp_policy=policy)

The outermost blocks are the units, in order, except a block holding a parameter that a module outside it also
holds (a tie across blocks): its parameters stay with the root. The root comes last, with every parameter no
block took (embeddings, the tied head, the final norm).
"""

from __future__ import annotations

from torch import nn

from ._built import BuiltModel

__all__ = ["shard_units"]


def shard_units(model: BuiltModel) -> list[nn.Module]:
    """The modules to pass to ``fully_shard``, in order, the root (``model``) last. See the module docstring."""
    plan = model.plan
    owners: dict[int, set[int]] = {}  # id(parameter) -> ids of the modules whose own stores hold it
    for module in model.modules():
        for value in module._parameters.values():
            if value is not None:
                owners.setdefault(id(value), set()).add(id(module))
    units: list[nn.Module] = []
    taken_until = -1  # the end of the last block taken: inner blocks of a unit are not units of their own
    for group in plan.groups:
        if group.start < taken_until:
            continue
        block = model.node_module(group.path)
        if block is None:
            continue
        if next(block.parameters(), None) is None:
            continue  # nothing to shard
        inside = {id(m) for m in block.modules()}
        shared_outside = any(
            not owners[id(p)] <= inside for m in block.modules() for p in m._parameters.values() if p is not None
        )
        if shared_outside:
            continue  # a tie to a module outside the block: its parameters stay with an outer unit
        units.append(block)
        taken_until = group.stop
    units.append(model)
    return units
