"""Which traced tensors share memory, and which in-place writes cannot be written out of place.

torch.export's training IR keeps in-place operations (``relu_``, ``add_``). The importer writes each as its
out-of-place op, which computes the same unless a tensor that shares the written memory and was made before the
write is read after it. Aliasing comes from each operation's schema: a return marked ``Tensor(a)`` views its input,
an argument marked ``Tensor(a!)`` is written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from .._errors import HndlError, Problem
from ._table import Unsupported
from ._trace import cut, node_location

__all__ = ["Aliases"]


class Aliases:
    """Which traced tensors share memory, and whether an in-place write changes a value that is read later.

    A view (``view``, ``transpose``, ``select``...) and an in-place operation's result alias their input, as the
    operation's schema says (``Tensor(a)``). A write into a tensor is safe to translate out of place unless a
    tensor of its alias group that was made before the write is read after it.
    """

    def __init__(
        self,
        nodes: Sequence[Any],
        user_inputs: Sequence[Any],
        parameters: Mapping[str, str],
        buffers: Mapping[str, str],
        describe: Callable[[Any], tuple[str, str]],
    ) -> None:
        self.position = {n: i for i, n in enumerate(nodes)}
        self.user_inputs = set(user_inputs)
        self.parameters = parameters
        self.buffers = buffers
        self.describe = describe
        self.root: dict[Any, Any] = {}
        self.writes: dict[Any, list[int]] = {}
        for n in nodes:
            self.root[n] = n
            schema = getattr(n.target, "_schema", None) if n.op == "call_function" else None
            if schema is None:
                if n.op == "call_function" and str(n.target) == "<built-in function getitem>":
                    self.root[n] = self.root.get(n.args[0], n.args[0])
                continue
            for i, arg in enumerate(schema.arguments):
                info = arg.alias_info
                if info is None or i >= len(n.args) or not hasattr(n.args[i], "op"):
                    continue
                source = self.root.get(n.args[i], n.args[i])
                if schema.returns and schema.returns[0].alias_info is not None:
                    self.root[n] = source
                if info.is_write:
                    self.writes.setdefault(source, []).append(self.position[n])

    def check(self, n: Any, written_out: Callable[[Any, Any, int], bool] | None = None) -> None:
        """Refuse ``n`` if it writes into an input (``HndlError``), or reads a value an earlier write changed
        (``Unsupported``, so that a layer around it may still be kept whole).

        Args:
            written_out: ``(value read, its memory, position of the write)`` -> whether the importer writes that
                write out of place and redirects this read to its result (``_region_writes``).
        """
        schema = getattr(n.target, "_schema", None)
        if schema is not None:
            for i, arg in enumerate(schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write and i < len(n.args):
                    source = self.root.get(n.args[i], n.args[i])
                    if getattr(source, "op", "") != "placeholder":
                        continue
                    key = self.parameters.get(source.name) or self.buffers.get(source.name) or source.name
                    if source not in self.user_inputs:
                        raise Unsupported(f"{n.target} writes into the parameter or buffer {key!r} in place")
                    location, code = node_location(n)
                    path, cls = self.describe(n)
                    raise HndlError(
                        Problem(
                            "E_IMPORT",
                            f"{n.target} writes into the input {key!r} in place"
                            + (f" (at `{cut(code, 100)}`)" if code else ""),
                            node=path,
                            op=cls,
                            location=location,
                            hint="a graph never changes its inputs: write x = x + 1 instead of x += 1",
                        )
                    )
        here = self.position[n]
        for arg in _tensor_args(n):
            source = self.root.get(arg, arg)
            for write in self.writes.get(source, ()):
                if self.position.get(arg, -1) < write < here:
                    if written_out is not None and written_out(arg, source, write):
                        continue
                    raise Unsupported(f"reads {arg.name!r} after an in-place operation changed it through another view")


def _tensor_args(n: Any) -> Iterator[Any]:
    for a in [*n.args, *n.kwargs.values()]:
        if isinstance(a, (list, tuple)):
            yield from (x for x in a if hasattr(x, "op"))
        elif hasattr(a, "op"):
            yield a
