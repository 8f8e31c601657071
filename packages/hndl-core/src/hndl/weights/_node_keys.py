"""Keys saved before a node had a ``module_path``: ``nodes.n_layers.0.n_gate_proj.weight``, the node-path spelling,
for what now lives at ``model.layers.0.mlp.gate_proj.weight`` (SPEC 6.7).

:func:`node_path_rules` gives, for a built model, one rule per written node whose layer moved (its repetition
indexes as fields), so a file saved from the old layout loads into the new one. They come after the caller's rules:
a key the caller's rules take is theirs, and a model whose nodes all keep ``n_<name>`` gets none.
"""

from __future__ import annotations

from typing import Any

from ._rules import Rule, rule

__all__ = ["NodePathRule", "node_path_rules"]


class NodePathRule(Rule):
    """A rule reading the node-path spelling: it loads such a key, but is never offered as the key a model's
    tensor expects (messages name the caller's rules' keys, or the model's own)."""


def node_path_rules(model: Any) -> tuple[Rule, ...]:
    """The rules taking node-path keys (``nodes.n_<name>...``) to ``model``'s module paths, where they differ."""
    plan = model.plan
    found: dict[str, str] = {}
    for step in plan.steps:  # layers only: a block's rule would catch its layers' keys too
        qualname, path = step.node.qualname, step.node.path
        old: list[str] = []
        new, index = list(path), 0
        for part in qualname.split("."):
            if part.isdecimal():  # a repetition of a repeated subgraph: a field on both sides
                old.append(f"{{i{index}}}")
                new[new.index(part)] = f"{{i{index}}}"
                index += 1
            else:
                old.append(f"n_{part}")
        source, target = "nodes." + ".".join(old), ".".join(new)
        if source != target:
            found.setdefault(f"{source}.{{t*}}", f"{target}.{{t*}}")
    made = (rule(s, t) for s, t in found.items())
    return tuple(NodePathRule(r.sources, r.targets) for r in made)
