"""Where a node's layer is registered: its ``module_path`` (SPEC 6.7), checked before anything is built.

A node without one keeps ``n_<name>`` (under ``nodes`` in the root graph, directly in a subgraph's block); a node
with one puts its layer at that dotted path relative to the module of its graph, with plain containers
(:class:`hndl.torch._containers.Container`) for the names on the way. Every part must be a Python identifier that
no ``nn.Module`` attribute uses (a layer registered as ``forward`` or ``to`` would hide the method, or be hidden by
it), and no two nodes of one graph may claim one path, or paths one of which holds the other (a layer cannot hold
another node's layer). The checks read the graphs as written, once per graph, so a repeated subgraph's problem is
reported once, at its spec line.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterator

from ._errors import ProblemList
from ._graph import Graph, Node
from .naming import excerpt

__all__ = ["MODULE_ATTRIBUTES", "check_module_paths", "relative_path", "reserved"]

_PART = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

#: Where the root graph's nodes without a ``module_path`` live (``GraphModule.nodes``).
NODES = "nodes"


def relative_path(node: Node, root: bool) -> tuple[str, ...]:
    """The path of ``node``'s layer relative to the module of its graph (``root``: the GraphModule itself)."""
    if isinstance(node.module_path, str):
        return tuple(node.module_path.split("."))
    return (NODES, f"n_{node.name}") if root else (f"n_{node.name}",)


#: Public attributes of ``nn.Module`` (its methods and what every instance sets), as of torch 2.14. Written out, not
#: read from torch: ``hndl check`` imports no torch. tests/core/test_module_paths.py checks it against torch.
MODULE_ATTRIBUTES = frozenset(
    [
        "T_destination",
        "add_module",
        "apply",
        "bfloat16",
        "buffers",
        "call_super_init",
        "children",
        "compile",
        "cpu",
        "cuda",
        "double",
        "dump_patches",
        "eval",
        "extra_repr",
        "float",
        "forward",
        "get_buffer",
        "get_extra_state",
        "get_parameter",
        "get_submodule",
        "half",
        "ipu",
        "load_state_dict",
        "modules",
        "mtia",
        "named_buffers",
        "named_children",
        "named_modules",
        "named_parameters",
        "parameters",
        "register_backward_hook",
        "register_buffer",
        "register_forward_hook",
        "register_forward_pre_hook",
        "register_full_backward_hook",
        "register_full_backward_pre_hook",
        "register_load_state_dict_post_hook",
        "register_load_state_dict_pre_hook",
        "register_module",
        "register_parameter",
        "register_state_dict_post_hook",
        "register_state_dict_pre_hook",
        "requires_grad_",
        "set_extra_state",
        "set_submodule",
        "share_memory",
        "state_dict",
        "to",
        "to_empty",
        "train",
        "training",
        "type",
        "xpu",
        "zero_grad",
    ]
)
#: What a subgraph's block (a ``ModuleDict``) adds.
BLOCK_ATTRIBUTES = frozenset(["clear", "items", "keys", "pop", "update", "values"])
#: What a GraphModule (and a pipeline stage) adds, its instance attributes included.
ROOT_ATTRIBUTES = frozenset(
    [
        "nodes",
        "graph",
        "validations",
        "build_state",
        "checkpointed",
        "checkpointing",
        "code",
        "dynamic_shapes",
        "example_args",
        "example_inputs",
        "example_outputs",
        "get_input_embeddings",
        "get_output_embeddings",
        "layer",
        "layer_name",
        "node_module",
        "pipeline_stages",
        "plan",
        "replace_layer",
        "shard_units",
        "state_version",
        "summary",
        "tensor_parallel_plan",
        "index",
        "inputs",
        "outputs",
        "first",
        "last",
    ]
)


def reserved(part: str, level: str) -> bool:
    """Whether ``part`` may not name a module registered on a GraphModule (and a pipeline stage) for the first
    part in a root graph (``level="root"``), on a subgraph's block for the first part in a subgraph (``"block"``),
    on a plain container for the parts after it (``"container"``): an attribute of that class, or any name
    beginning with an underscore (``nn.Module``'s private state, ``__init__``)."""
    if part.startswith("_") or part in MODULE_ATTRIBUTES:
        return True
    return part in (ROOT_ATTRIBUTES if level == "root" else BLOCK_ATTRIBUTES if level == "block" else ())


def check_module_paths(root: Graph, problems: ProblemList) -> None:
    """Report (E_NAME) each invalid, reserved, taken or overlapping ``module_path`` of ``root`` and its subgraphs."""
    for graph, is_root in _graphs(root):
        _check_graph(graph, is_root, problems)


def _graphs(root: Graph) -> Iterator[tuple[Graph, bool]]:
    yield root, True
    seen = {id(root)}
    for sub in root.graphs.values():
        if id(sub) not in seen:
            seen.add(id(sub))
            yield sub, False


def _check_graph(graph: Graph, is_root: bool, problems: ProblemList) -> None:
    where = "" if is_root else f" (in graph '{graph.name}')"
    for node in graph.nodes.values():
        path = node.module_path
        if path is None:
            continue
        location = node.where("module_path")
        reason = _invalid(path, is_root)
        if reason:
            problems.add(
                "E_NAME",
                f"module_path {excerpt(path)}{where} is not valid: {reason}",
                node=node.name,
                op=node.op,
                location=location,
                expected="a dotted path of identifiers that are no nn.Module attribute, e.g. 'mlp.gate_proj'",
                actual=excerpt(path),
                hint="rename the part (e.g. 'forward_proj' for 'forward'), or leave module_path out for n_<name>",
            )
    _check_overlaps(graph, is_root, where, problems)


def _invalid(path: object, is_root: bool) -> str:
    if not isinstance(path, str) or not path:
        return "it must be a non-empty string"
    for index, part in enumerate(path.split(".")):
        if not _PART.match(part) or keyword.iskeyword(part):
            return f"part {excerpt(part)} is no identifier"
        level = "container" if index else "root" if is_root else "block"
        if reserved(part, level):
            holder = {"root": "a GraphModule", "block": "a subgraph's block", "container": "an nn.Module"}[level]
            return f"part {part!r} is an attribute of {holder} (or begins with '_')"
    return ""


def _check_overlaps(graph: Graph, is_root: bool, where: str, problems: ProblemList) -> None:
    """Two nodes at one path, or one node's layer at a path inside another's."""
    if all(node.module_path is None for node in graph.nodes.values()):
        # Every layer at n_<name> (in ``nodes`` at the root): node names differ, so these paths differ, and none
        # lies inside another (``nodes`` itself belongs to no node). Most graphs; no table of paths needed.
        return
    owners: dict[tuple[str, ...], list[str]] = {}
    for node in graph.nodes.values():
        if node.module_path is not None and _invalid(node.module_path, is_root):
            continue
        owners.setdefault(relative_path(node, is_root), []).append(node.name)
    for path, names in owners.items():
        node = graph.nodes[names[-1]]
        if len(names) > 1:
            problems.add(
                "E_NAME",
                f"module_path {'.'.join(path)!r}{where} is claimed by nodes {', '.join(map(repr, names))}",
                node=names[-1],
                op=node.op,
                location=node.where("module_path"),
                hint="give each node its own module_path",
            )
            continue
        for cut in range(1, len(path)):
            outer = owners.get(path[:cut])
            if outer:
                problems.add(
                    "E_NAME",
                    f"module_path {'.'.join(path)!r} of node {names[0]!r}{where} lies inside the layer of node "
                    f"{outer[0]!r} ({'.'.join(path[:cut])!r})",
                    node=names[0],
                    op=node.op,
                    location=node.where("module_path"),
                    hint="a layer holds no other node's layer: pick a path beside it",
                )
                break
