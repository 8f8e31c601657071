"""Recognising causal self-attention written as ``sdpa`` (a decoder imported with ``hndl.from_module``: its
projections, rotations and grouped heads are nodes of their own, its mask and positions computed from the
inputs). The rule, for a flat graph whose first input is the token ids ``[B, T]``:

- a node *reads the tokens* when one of its inputs is the ids or a node that reads them (``arange`` and the
  ``*_like``/``new_*`` creations read only a size); every such node must act on each token alone
  (:mod:`._token_rules`; here the heads' layout may move the sequence dim), except the ``sdpa`` nodes;
- each ``sdpa`` node reads the tokens through ``q``, ``k`` and ``v``; its mask (or ``causal: true``) is the
  causal padding mask: its value, on probe inputs, is ``padding[b, j] and j <= i`` (and, if every row says so,
  ``i - j < window``) at every real query ``i`` -- checked by running the nodes it is computed from at two
  lengths, the longer past every number those nodes hold, so a sliding window of any size shows;
- ``k`` and ``v`` may come through the grouped heads' repeat (``[B, Hkv, T, D] -> [B, Hkv, 1, T, D] ->
  expand -> [B, Hkv*g, T, D]``): the cache then holds the ``Hkv`` heads and ``sdpa`` groups them itself;
- any other value the token path reads from the inputs is computed from positions ``0 .. T-1`` (a ``[1, T]``
  or ``[B, T]`` integer node with that value on the probes, which the variant replaces by ``position_ids``:
  rotary tables, a learned position embedding; a ``[T]`` one only where embeddings broadcast into the token
  path read it); anything else computed from the inputs is refused.

Every refusal is an ``E_INPUT`` naming the node and what was expected."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._graph import Graph, Node, split_ref
from ._graph_edit import checked_by_name, consumers_of, refuse
from ._token_rules import ALONG_DIM, LAYOUT, NORMS, PER_TOKEN, check_along, check_layout

__all__ = ["SHAPE_ONLY", "FoundSdpa", "SdpaAnalysis", "analyze"]

#: Ops that read only their input's size, never its values.
SHAPE_ONLY = frozenset(["arange", "zeros_like", "ones_like", "full_like", "new_zeros", "new_ones", "new_full"])
#: The probes' longest length is past every number the mask's nodes hold, up to this.
_LONGEST_PROBE = 8192
_EXPECTED_MASK = "a bool mask equal to padding[b, j] and j <= i (optionally i - j < window) at each real query i"


@dataclass
class FoundSdpa:
    node: Node
    checked: Any
    k: str  # the keys the cache holds: sdpa's k, or the grouped heads' source
    v: str
    window: int | None = None


@dataclass
class SdpaAnalysis:
    ids: str
    batch: str
    length: str
    sdpas: list[FoundSdpa] = field(default_factory=list)
    positions: list[str] = field(default_factory=list)  # nodes whose value is 0 .. T-1, read as position_ids
    padding: str | None = None
    position_input: str | None = None
    layers: int = 0
    heads: tuple[int, int] = (0, 0)


def _name(ref: str) -> str:
    return split_ref(ref)[0]


def _cone(graph: Graph, refs: list[str], stop: set[str] = frozenset()) -> set[str]:  # type: ignore[assignment]
    """The nodes and inputs ``refs`` are computed from (themselves included), not looking past ``stop``."""
    seen: set[str] = set()
    todo = [_name(r) for r in refs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph.nodes and name not in stop:
            todo.extend(_name(r) for r in graph.nodes[name].inputs)
    return seen


def _token_ids(graph: Graph) -> tuple[str, str, str]:
    ids = next(iter(graph.inputs), None)
    if ids is None:
        raise refuse("the graph has no inputs; the first input is the token ids [B, T]")
    shape = graph.inputs[ids].contract.shape
    entries = shape.entries
    if len(entries) != 2 or shape.variadic is not None or not all(isinstance(e, str) for e in entries):
        raise refuse(
            f"the first input {ids!r} is {shape}, not token ids [B, T] with symbolic B and T",
            ids,
            hint="import with both dims dynamic: dynamic_shapes=({0: Dim('B'), 1: Dim('T')}, ...)",
        )
    return ids, str(entries[0]), str(entries[1])


#: Elementwise ops that broadcast an embedding's ``[T, d]`` rows into a ``[B, T, d]`` result.
_BROADCASTING = frozenset(["add", "sub", "mul"])


def _batched(shape: Any, a: SdpaAnalysis) -> bool:
    return shape is not None and len(shape) >= 3 and str(shape[0]) == a.batch and str(shape[1]) == a.length


def _grouped_source(graph: Graph, checked: dict[str, Any], ref: str, readers: dict[str, list[Any]]) -> str:
    """The ``[B, Hkv, T, D]`` keys (or values) ``ref`` repeats for grouped heads (reshape to ``[B, Hkv, 1, T, D]``,
    expand the 1, reshape to ``[B, Hkv*g, T, D]``, each node read once), or ``ref`` itself."""
    chain = []
    current = _name(ref)
    for op in ("reshape", "expand", "reshape"):
        node = graph.nodes.get(current)
        if node is None or node.op != op or len(readers.get(current, [])) != 1 or node.name not in checked:
            return ref
        chain.append(checked[node.name])
        current = _name(node.inputs[0])
    last, widened, one = chain  # from the sdpa backwards
    source, inserted = one.in_types[0].shape, one.out_types[0].shape
    grouped, merged = widened.out_types[0].shape, last.out_types[0].shape
    if None in (source, inserted, grouped, merged) or len(source) != 4:
        return ref
    b, hkv, t, d = (str(x) for x in source)
    g = grouped[2] if len(grouped) == 5 else None
    wanted = (
        [str(x) for x in inserted] == [b, hkv, "1", t, d]
        and [str(x) for x in grouped] == [b, hkv, str(g), t, d]
        and isinstance(g, int)
        and isinstance(source[1], int)
        and [str(x) for x in merged] == [b, str(source[1] * g), t, d]
    )
    return current if wanted else ref


class _Recognizer:
    def __init__(self, graph: Graph, checked: Any) -> None:
        self.graph = graph
        self.checked = checked
        self.by_name = checked_by_name(checked.nodes)
        ids, batch, length = _token_ids(graph)
        self.a = SdpaAnalysis(ids=ids, batch=batch, length=length)
        self.readers = consumers_of(graph)

    def run(self) -> SdpaAnalysis:
        graph, a = self.graph, self.a
        if len(graph.outputs) != 1:
            raise refuse(
                f"the graph has {len(graph.outputs)} outputs; the cached variant returns the logits alone "
                "(and, growing, the caches)",
                hint="return only the logits [B, T, vocab]",
            )
        tokens = {a.ids}
        frontier: list[tuple[Node, str]] = []  # (token node, a value it reads that does not read the tokens)
        masks: list[tuple[FoundSdpa, str | None]] = []
        for node in graph.nodes.values():
            if node.op == "graph":
                raise refuse(
                    f"node {node.name!r} runs a subgraph; the variant maps sdpa-written attention in a flat graph",
                    node.name,
                )
            reads = [r for r in node.inputs if _name(r) in tokens]
            if node.op in SHAPE_ONLY or not reads:
                continue
            tokens.add(node.name)
            c = self.by_name.get(node.name)
            if c is None:
                raise refuse(f"node {node.name!r} has no checked type", node.name)
            if node.op == "sdpa":
                masks.append(self._sdpa(node, c, tokens))
                continue
            self._per_token(node, c)
            frontier += [(node, r) for r in node.inputs if _name(r) not in tokens]
        if not a.sdpas:
            raise refuse("the graph has no sdpa node reading the tokens; there are no keys and values to cache")
        self._inputs()
        self._probe(masks, frontier)
        self._heads()
        return a

    def _per_token(self, node: Node, c: Any) -> None:
        t = self.a.length
        if node.op in PER_TOKEN:
            return
        if node.op in ALONG_DIM or node.op in NORMS:
            check_along(node, c, node.name, t)
        elif node.op in LAYOUT or node.op == "expand":
            check_layout(node, c, node.name, t, moves=True)
        else:
            raise refuse(
                f"node {node.name!r} (op {node.op!r}) is not known to act on each token alone; the cached variant "
                "runs only the new tokens through it",
                node.name,
            )

    def _sdpa(self, node: Node, c: Any, tokens: set[str]) -> tuple[FoundSdpa, str | None]:
        p = c.params
        if p.cache or p.past:
            raise refuse(f"sdpa node {node.name!r} already has a key/value cache", node.name)
        if not all(_name(r) in tokens for r in node.inputs[:3]):
            raise refuse(
                f"sdpa node {node.name!r} takes q, k or v from values that do not read the tokens; the cache holds "
                "self-attention's keys and values",
                node.name,
            )
        mask = node.inputs[3] if p.masked else None
        if mask is not None and _name(mask) in tokens:
            raise refuse(
                f"the mask of sdpa node {node.name!r} is computed from the tokens' values ({mask!r})",
                node.name,
                expected=_EXPECTED_MASK,
            )
        if mask is None and not p.causal:
            raise refuse(
                f"sdpa node {node.name!r} is not causal (causal: false, no mask); a token's output would change as "
                "later tokens arrive",
                node.name,
            )
        k = _grouped_source(self.graph, self.by_name, node.inputs[1], self.readers)
        v = _grouped_source(self.graph, self.by_name, node.inputs[2], self.readers)
        found = FoundSdpa(node, c, k, v, p.window)
        self.a.sdpas.append(found)
        return found, mask

    def _inputs(self) -> None:
        a = self.a
        for name, spec in self.graph.inputs.items():
            if name == a.ids:
                continue
            entries = [str(e) for e in spec.contract.shape.entries]
            if entries == [a.batch, a.length] and name == "position_ids":
                a.position_input = name
            elif entries == [a.batch, a.length] and a.padding is None:
                a.padding = name
            else:
                raise refuse(
                    f"input {name!r} {entries} is neither the token ids, a padding mask [B, T] nor position_ids "
                    "[B, T]; the cache interface has no place for it",
                    name,
                )

    def _probe(self, masks: list[tuple[FoundSdpa, str | None]], frontier: list[tuple[Node, str]]) -> None:
        from ._sdpa_probe import Probe

        graph, a = self.graph, self.a
        inputs = set(graph.inputs)
        mask_refs = [m for _, m in masks if m is not None]
        side = [(node, ref) for node, ref in frontier if _cone(graph, [ref]) & inputs]
        probe = Probe(graph, self.by_name, a, mask_refs, [ref for _, ref in side])
        windows = {ref: probe.mask_window(ref) for ref in dict.fromkeys(mask_refs)}
        for found, mask in masks:
            if mask is None:
                continue
            window = windows[mask]
            if window is not None:
                found.window = window if found.window is None else min(window, found.window)
        a.positions = probe.positions()
        for name in a.positions:
            self._shared_positions(name)
        stop = set(a.positions) | ({a.position_input} if a.position_input else set())
        for node, ref in side:
            reached = (_cone(graph, [ref], stop) & inputs) - stop
            if reached:
                source = _name(ref)
                raise refuse(
                    f"node {node.name!r} reads {ref!r}, computed from input {sorted(reached)[0]!r} as something "
                    "other than the positions 0 .. T-1 or the causal padding mask; the cached variant has no such "
                    "value for the new tokens",
                    source if source in graph.nodes else node.name,
                    expected="values from the inputs only through sdpa masks and position ids",
                )

    def _shared_positions(self, name: str) -> None:
        """Positions ``[T]``, one row for the whole batch (``arange(T)`` in nanoGPT), become the variant's
        per-row ``[B, T]`` ``position_ids`` (what makes a left-padded row equal to its prompt run alone). That
        keeps every later shape only where they index a learned table (``embedding``) whose ``[T, d]`` rows are
        broadcast into a ``[B, T, d]`` value (``tok_emb + pos_emb``); any other reader is refused here, where it
        would make the variant fail its own check."""
        shape = self.by_name[name].out_types[0].shape
        if shape is None or len(shape) != 1:
            return
        a = self.a
        for reader, _ in self.readers.get(name, []):
            later = self.readers.get(reader.name, []) if reader.op == "embedding" else []
            fits = [r.op in _BROADCASTING and _batched(self._type(r.name).shape, a) for r, _ in later]
            if later and all(fits):
                continue
            bad = next((r for (r, _), ok in zip(later, fits) if not ok), reader)
            raise refuse(
                f"node {name!r} holds the positions as one row [{a.length}] for the whole batch, read by node "
                f"{bad.name!r} (op {bad.op!r}); the cached variant's positions are per row ([{a.batch}, "
                f"{a.length}]), which keep the shapes only where they index an embedding added to a [{a.batch}, "
                f"{a.length}, ...] value",
                name,
                expected=f"positions [{a.batch}, {a.length}] or [1, {a.length}], or [{a.length}] read only by embeddings "
                "added to the token path",
                hint=f"write the positions with a batch dim: torch.arange(T)[None] ([1, {a.length}])",
            )

    def _heads(self) -> None:
        a = self.a
        heads: tuple[Any, Any] | None = None
        for found in a.sdpas:
            k = self._type(found.k).shape
            v = self._type(found.v).shape
            mine = (k[1], k[3]) if k is not None and len(k) == 4 else None
            if mine is None or not all(isinstance(x, int) for x in mine) or v is None or str(v[3]) != str(k[3]):
                raise refuse(
                    f"sdpa node {found.node.name!r} has keys {list(map(str, k or ()))} and values "
                    f"{list(map(str, v or ()))}; the cache holds [B, Hkv, T, D] keys and values of fixed heads "
                    "and width, one D for both",
                    found.node.name,
                )
            if heads is not None and mine != heads:
                raise refuse(
                    f"sdpa node {found.node.name!r} has {mine[0]} key/value heads of {mine[1]}, the first "
                    f"{heads[0]} of {heads[1]}; one cache tensor holds every layer's",
                    found.node.name,
                )
            heads = mine
        a.heads = heads  # type: ignore[assignment]
        a.layers = len(a.sdpas)

    def _type(self, ref: str) -> Any:
        name, port = split_ref(ref)
        if name in self.graph.inputs:
            return self.checked.types[name]
        return self.by_name[name].out_types[int(port or 0)]


def analyze(graph: Graph, checked: Any) -> SdpaAnalysis:
    """The sdpa nodes, positions and masks of ``graph`` (see the module docstring).

    Raises:
        HndlError: E_INPUT naming the node that does not follow the rule, and what was expected.
    """
    return _Recognizer(graph, checked).run()
