"""hndl-func: torch.func for hndl GraphModules.

Installed by the ``hndl-func`` distribution as a portion of the ``hndl`` package.

- :func:`functional_call`: :func:`torch.func.functional_call` with the parameter dict checked against the build
  (``E_PARAMS``), once per parameter signature.
- :func:`stack` and :func:`ensemble_call`: many models built from one graph, run at once under ``vmap``.
- :func:`param_shapes`: the shapes a parameter dict must have, for hypernetworks.

A GraphModule also works with ``torch.func`` directly (``vmap``, ``grad``, ``functional_call``, ...); this package
adds the check and the ensemble plumbing.
"""

from __future__ import annotations

from ._ensemble import ensemble_call as ensemble_call
from ._ensemble import stack as stack
from ._functional import functional_call as functional_call
from ._params import param_shapes as param_shapes

__all__ = ["functional_call", "stack", "ensemble_call", "param_shapes"]
