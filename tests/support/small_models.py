"""The small models many test modules start from, built one way (tests/ is not a package: pyproject puts
tests/support on the path).

``mlp_graph`` is the two-layer perceptron the runtime, loading and checking tests share: ``x [B, d_in]`` through
``hidden`` (a linear), ``act`` (ReLU, unless ``act=False``) and ``out`` (a linear). ``mlp`` builds it.
"""

from __future__ import annotations

import hndl


def mlp_graph(
    d_in: int = 8, hidden: int = 16, d_out: int = 4, *, name: str = "mlp", bias: bool = True, act: bool = True
) -> hndl.Graph:
    """``x [B, d_in] -> hidden -> act -> out [B, d_out]``: nodes named ``hidden``, ``act`` and ``out``."""
    g = hndl.Graph(name)
    x = g.input("x", ("B", d_in))
    h = g.add("linear", x, name="hidden", out_features=hidden)
    if act:
        h = g.add("relu", h, name="act")
    g.output(g.add("linear", h, name="out", out_features=d_out, bias=bias))
    return g


def mlp(d_in: int = 8, hidden: int = 16, d_out: int = 4, **options: object) -> hndl.GraphModule:
    """:func:`mlp_graph` built (the current torch seed initialises it)."""
    return hndl.build(mlp_graph(d_in, hidden, d_out, **options))  # type: ignore[arg-type]
