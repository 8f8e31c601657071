"""Warnings about graphs that have the right shapes and may have the wrong meaning: what a model declares it is
(``kind: decoder``, SPEC §4.1) or the configuration its parameters follow (transformers' ``partial_rotary_factor``
or ``rotary_pct``) against what its nodes do.

Each was a silent mistake on a hand-written model: ``causal: true`` forgotten in a decoder (1.68 off), rotary
embeddings over the whole head where the configuration rotates a quarter of it (0.215 off). These are warnings,
not errors: the graph is valid, and a model may mean what it says (a prefix-LM's non-causal prefix). The checker
returns them on :attr:`CheckedGraph.warnings` and emits each as a :class:`HndlWarning`; ``hndl check`` prints them.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any

from ._errors import Problem
from .ops._attention_ports import AttentionPorts

if TYPE_CHECKING:
    from ._checked import CheckedGraph, CheckedNode

__all__ = ["KINDS", "ROTARY_FRACTIONS", "WARNING_CODES", "HndlWarning", "meaning_warnings"]

#: What a spec's top-level ``kind`` may declare, and what the checker then holds its attention to.
KINDS = {
    "decoder": "a decoder-only model (a causal language model): every self-attention is causal",
    "encoder": "an encoder: no self-attention is causal",
}

#: The graph parameters, named as transformers' configurations name them, that declare the fraction of each
#: head that rotary embeddings rotate (Phi, GPT-NeoX, StableLM).
ROTARY_FRACTIONS = ("partial_rotary_factor", "rotary_pct")

#: The codes of the warnings (never errors: not in :data:`hndl.CODES`).
WARNING_CODES = {
    "W_CAUSAL": "self-attention's causality disagrees with the model's declared kind",
    "W_ROTARY": "rotary dims disagree with the rotary fraction the model's parameters declare",
}

#: Ops that make a mask that hides later keys: a mask made from one of them is causal.
_CAUSAL_MAKERS = ("tril", "triu")


class HndlWarning(UserWarning):
    """A warning from hndl's checker, with the :class:`~hndl.Problem` that says what and where (``.problem``)."""

    __module__ = "hndl"

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


def meaning_warnings(checked: CheckedGraph) -> list[Problem]:
    """The warnings for ``checked``: one per node, in execution order (subgraph repetitions once each)."""
    graph = checked.graph
    kind = getattr(graph, "kind", None)
    fraction = _declared_fraction(graph.params)
    found: list[Problem] = []
    # What the graph declares decides which ops can be warned about; with nothing declared (most graphs) there is
    # nothing to hold any node to, and the walk below would cost every node of a large graph for nothing.
    ops = (("attention", "sdpa") if kind in KINDS else ()) + (("attention", "rotary") if fraction is not None else ())
    if not ops:
        return found
    seen: set[str] = set()
    trace = _Trace(checked)
    for node in trace.leaves:
        if node.op not in ops:
            continue
        # A repeated block's nodes differ only by index: one warning names the first.
        key = _unindexed(node)
        if key in seen:
            continue
        problem = None
        if kind in KINDS and node.op in ("attention", "sdpa"):
            problem = _causality(node, kind, trace)
        if problem is None and fraction is not None and node.op in ("attention", "rotary"):
            problem = _rotary(node, fraction[0], fraction[1])
        if problem is not None:
            seen.add(key)
            found.append(problem)
    return found


def _declared_fraction(params: dict[str, Any]) -> tuple[str, Fraction] | None:
    for name in ROTARY_FRACTIONS:
        value = params.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1:
            return name, Fraction(value).limit_denominator(1 << 20)
    return None


def _unindexed(node: CheckedNode) -> str:
    return ".".join("#" if part.isdigit() else part for part in node.qualname.split("."))


def _causality(node: CheckedNode, kind: str, trace: _Trace) -> Problem | None:
    p = node.params
    if node.op == "attention":
        ports = AttentionPorts.of(p, len(node.inputs))
        if ports.kv is not None:
            return None  # cross-attention: the keys are another sequence, causality does not apply
        mask = ports.pick(node.inputs, "mask")
        own = bool(p.get("causal") or p.get("cache") or p.get("past"))
    else:
        mask = node.inputs[3] if p.get("masked") and len(node.inputs) > 3 else None
        own = bool(p.get("causal"))
    by_mask = mask is not None and trace.is_causal_mask(mask)
    if kind == "decoder" and not (own or by_mask):
        masked = "" if mask is None else ", and its mask is not made causal in the graph"
        return node.problem(
            "W_CAUSAL",
            f"the model is declared a decoder (kind: decoder), and this self-attention is not causal{masked}: "
            "each position sees later ones",
            expected="causal self-attention",
            actual="causal: false",
            hint="set causal: true (it combines with a mask), or fold causal: true into the attention_mask op",
        )
    if kind == "encoder" and own:
        return node.problem(
            "W_CAUSAL",
            "the model is declared an encoder (kind: encoder), and this self-attention is causal",
            expected="causal: false",
            actual="causal: true",
            hint="drop causal (an encoder sees the whole sequence), or declare kind: decoder",
        )
    return None


def _rotary(node: CheckedNode, name: str, fraction: Fraction) -> Problem | None:
    p = node.params
    if node.op == "attention":
        rope = p.get("rope")
        if rope is None:
            return None
        head = p.get("head_dim") or (p["embed_dim"] // p["num_heads"])
        dims = rope.get("dims")
        where = "rope's dims"
    else:
        head, dims, where = p.get("head_dim"), p.get("dims"), "dims"
    if not isinstance(head, int):
        return None
    dims = head if dims is None else dims
    wanted = fraction * head
    if dims == wanted:
        return None
    exact = wanted.denominator == 1
    return node.problem(
        "W_ROTARY",
        f"{where} {dims} rotate {Fraction(dims, head)} of the head dim {head}, and the model's {name} is "
        f"{float(fraction):g}" + ("" if exact else f" ({float(wanted):g} dims, not a whole number)"),
        expected=f"{name} * head_dim = {int(wanted) if exact else float(wanted)} dims",
        actual=dims,
        hint=f"rotate {int(wanted)} dims ({name} {float(fraction):g} x head_dim {head}): write dims as an "
        "expression of the parameters, so the two cannot disagree"
        if exact
        else f"check {name}: it should rotate a whole, even number of dims",
    )


class _Trace:
    """Every leaf node of a checked graph, and where each value comes from across subgraph boundaries."""

    def __init__(self, checked: CheckedGraph) -> None:
        self.leaves: list[CheckedNode] = []
        self.made_by: dict[str, CheckedNode] = {}
        self.alias: dict[str, str] = {}  # a subgraph input's value id -> the value the caller passed
        self._walk(checked)
        self._causal: dict[str, bool] = {}

    def _walk(self, graph: CheckedGraph) -> None:
        from ._checked import repetition_inputs

        for node in graph.nodes:
            if not node.body:
                self.leaves.append(node)
                for value in node.outputs:
                    self.made_by[value] = node
                continue
            previous: list[str] | None = None
            for body in node.body:
                for inner, outer in zip(body.input_ids, repetition_inputs(node, node.inputs, previous)):
                    self.alias[inner] = outer
                self._walk(body)
                previous = list(body.output_ids)
            if previous is not None:
                for outer, inner in zip(node.outputs, previous):
                    self.alias[outer] = inner

    def _origin(self, value: str) -> CheckedNode | None:
        hops = 0
        while value in self.alias and hops < 10_000:
            value, hops = self.alias[value], hops + 1
        return self.made_by.get(value)

    def is_causal_mask(self, value: str) -> bool:
        """Whether the mask ``value`` is made, through any nodes, by a causal ``attention_mask`` or ``tril``/
        ``triu`` (a mask from a model input alone: hndl cannot see that it is causal)."""
        todo, seen = [value], set()
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            if current in self._causal:
                if self._causal[current]:
                    self._causal[value] = True
                    return True
                continue
            node = self._origin(current)
            if node is None:
                continue
            if (node.op == "attention_mask" and node.params.get("causal")) or node.op in _CAUSAL_MAKERS:
                self._causal[value] = True
                return True
            todo.extend(node.inputs)
        self._causal[value] = False
        return False
