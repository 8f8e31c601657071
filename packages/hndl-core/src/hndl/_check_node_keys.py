"""The node keys the walk of :mod:`hndl._check` reads besides ``op``, ``in`` and the op's parameters, once
graph parameters are bound: ``when`` and ``otherwise``, and ``tie``.

``when`` says whether a node is there (SPEC 1.6, pattern 1: an optional part of a model). A node left out
passes an input through, the one ``otherwise`` names or its only one; with none it is not there either, and a
node or output that reads it is reported with why. ``tie`` names the parameters a node shares with another
node of its graph.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ._errors import ProblemList
from ._graph import Graph, Node, split_ref
from .naming import excerpt, suggestion

__all__ = ["is_present", "node_ties", "passed_through", "report_absent_reads", "why_absent"]


def is_present(
    problems: ProblemList, node: Node, qual: str, in_ids: list[str | None], missing: Sequence[int] = ()
) -> bool | None:
    """Whether a node with a ``when`` exists (``None`` once a problem is reported). ``missing`` are the
    positions of inputs that name nodes left out: a node left out passes through its only other one."""
    if not isinstance(node.when, bool):
        problems.add(
            "E_PARAM",
            f"'when' must be true, false or a condition ('$name', '$not name', '$depth > 2'), got {excerpt(node.when)}",
            node=qual,
            op=node.op,
            location=node.where("when"),
        )
        return None
    if node.otherwise is not None and node.otherwise not in node.inputs:
        problems.add(
            "E_PARAM",
            f"'otherwise' names {excerpt(node.otherwise)}, which is not an input of the node",
            node=qual,
            op=node.op,
            location=node.where("otherwise"),
            expected="one of " + ", ".join(repr(r) for r in node.inputs) if node.inputs else "an input",
            actual=node.otherwise,
            hint=suggestion(node.otherwise, node.inputs),
        )
        return None
    there = len(in_ids) - len(missing)
    if not node.when and node.otherwise is None and there > 1:
        gone = f" (and {len(missing)} left out)" if missing else ""
        problems.add(
            "E_PARAM",
            f"a node left out by 'when' passes its input through, so it needs one input; it has {there}{gone}",
            node=qual,
            op=node.op,
            location=node.where("when"),
            hint="say which passes through: otherwise: <one of its inputs>",
        )
        return None
    return node.when


def passed_through(node: Node, missing: Sequence[int]) -> int | None:
    """The position of the input a node left out passes through: the one ``otherwise`` names, else its only
    one that exists (``None``: it has none)."""
    if node.otherwise is not None:
        return node.inputs.index(node.otherwise)
    there = [i for i in range(len(node.inputs)) if i not in missing]
    return there[0] if there else None


def why_absent(written: Node, passed: int | None, missing: Sequence[int] | None) -> str:
    """Why a node left out is not there at all, worded to follow ``which``. ``missing``: the inputs that are
    not there, when that (not its ``when``) is what left it out."""
    if missing:  # left out for reading a node that is not there, so its 'otherwise' is what it passes
        assert passed is not None
        return f"is not there: its 'otherwise', {excerpt(written.inputs[passed])}, is not there either"
    when = str(written.when).lower() if isinstance(written.when, bool) else excerpt(written.when)
    left_out = f"is left out (when: {when})"
    if not written.inputs:
        return f"{left_out} and has no input to pass through"
    if passed is not None:
        return f"{left_out} and so is {excerpt(written.inputs[passed])}, the input it would pass through"
    return f"{left_out} and so are all its inputs"


def report_absent_reads(
    problems: ProblemList, written: Node, qual: str, missing: Sequence[int], absent: Mapping[str, str]
) -> None:
    """E_REF for each input of a node that exists but reads a node left out with nothing to pass through."""
    for i in missing:
        ref = written.inputs[i]
        problems.add(
            "E_REF",
            f"reads {excerpt(ref)}, which {absent[split_ref(ref)[0]]}",
            node=qual,
            op=written.op,
            location=written.where("in"),
            hint=f"give {written.name!r} an 'otherwise' (the input it passes through when {excerpt(ref)} is "
            "not there), or read a value that is always there",
        )


def node_ties(problems: ProblemList, g: Graph, node: Node, qual: str, prefix: str) -> dict[str, str]:
    """``node``'s ties with qualified targets; a target that names no node of ``g`` is reported (E_REF).
    Empty when the tie's ``when`` (bound by then) is false; one that is no bool is reported (E_PARAM).

    Whether the parameters exist and agree in shape is known once the layers are built: the builder checks it.
    """
    ties: dict[str, str] = {}
    when = node.tie.get("when", True)
    if not isinstance(when, bool):
        written = g.nodes[node.name].tie.get("when") if node.name in g.nodes else None
        source = f" (from {excerpt(written)})" if written != when and isinstance(written, str) else ""
        problems.add(
            "E_PARAM",
            f"the tie's 'when' must be true, false or a condition ('$name', '$not name', '$depth > 2'), got {excerpt(when)}"
            + source,
            node=qual,
            op=node.op,
            location=node.where("tie"),
            hint="e.g. tie: {weight: embed_tokens.weight, when: $tie_word_embeddings}, the parameter true or false",
        )
        return ties
    if not when:  # the tie is off: the layer keeps its own parameters
        return ties
    for own, target in node.tie.items():
        if own == "when":
            continue
        target_node = target.partition(".")[0] if isinstance(target, str) else None
        if not isinstance(own, str) or not own or not isinstance(target, str) or "." not in target:
            problems.add(
                "E_SPEC",
                f"tie {excerpt(own)}: {excerpt(target)} must map a parameter of this node to 'node.parameter'",
                node=qual,
                op=node.op,
                location=node.where("tie"),
                hint="e.g. tie: {weight: wte.weight}",
            )
        elif target_node == node.name or target_node not in g.nodes:
            problems.add(
                "E_REF",
                f"tie {own!r} refers to {excerpt(target)}, but "
                + (
                    "a node cannot share its own parameter"
                    if target_node == node.name
                    else f"{target_node!r} is no node of graph {g.name!r}"
                ),
                node=qual,
                op=node.op,
                location=node.where("tie"),
                hint=suggestion(target_node or "", [n for n in g.nodes if n != node.name]),
            )
        else:
            ties[own] = prefix + target
    return ties
