"""Building on PyTorch's meta device: what ``hndl.summary``, ``hndl summary`` and ``hndl check --build`` count
parameters with, without allocating them."""

from __future__ import annotations

import dataclasses

import torch

from .._check import check
from .._check_limits import meta_build_problem
from .._errors import HndlError, Problem
from .._graph import Graph
from ..naming import excerpt
from ._build import build_module
from ._module import GraphModule

__all__ = ["build_on_meta"]

_META_HINT = "hndl builds the model on PyTorch's meta device, which allocates no memory; the layer failed there"


def build_on_meta(graph: Graph) -> GraphModule:
    """Build ``graph`` on PyTorch's ``meta`` device: the layers' constructors run and parameters get their
    shapes, but no memory is allocated, so a model with billions of parameters is as quick as a small one and a
    hostile spec cannot make hndl allocate gigabytes. A layer that fails there is reported as failing there
    (there is no retry with a real build).

    Raises:
        HndlError: what checking the graph raises, as it is; a layer's constructor failing on the meta device,
            with a hint saying where it ran (E_PARAM for an exception that is not an HndlError).
    """
    checked = check(graph)  # static problems are raised as they are: only the build below runs on the meta device
    too_large = meta_build_problem(checked)
    if too_large is not None:
        raise HndlError(too_large)
    try:
        with torch.device("meta"):
            return build_module(graph, checked)
    except HndlError as exc:
        # The graph checked, so these are the layers' own constructors failing; say where they ran.
        problems = [p if p.hint else dataclasses.replace(p, hint=_META_HINT) for p in exc.problems]
        raise HndlError(problems, title=exc.title) from exc
    except Exception as exc:
        raise HndlError(
            Problem(
                "E_PARAM",
                f"the model could not be built on PyTorch's meta device: {type(exc).__name__}: {excerpt(str(exc))}",
                hint="hndl builds on the meta device to count parameters, so that it allocates no memory",
            )
        ) from exc
