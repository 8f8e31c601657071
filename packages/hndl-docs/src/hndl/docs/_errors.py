"""The error-code reference: each code of :data:`hndl.CODES` with a message produced by actually triggering it.

Each trigger is a short Python snippet. The page shows the snippet and the message it raised, so both stay
true: if a message changes, ``--check`` notices; if a snippet stops raising its code, the page says so.
A trigger may have alternatives, tried in order, for features that live in optional packages (``E_PARAMS``
comes from hndl-func): the page documents exactly what the installed packages do.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hndl

from ._text import HEADER, code, scrub


@dataclass(frozen=True)
class Trigger:
    """A snippet expected to raise ``HndlError`` with ``code``; ``requires`` names what it needs
    (``hndl.func.functional_call``)."""

    source: str
    requires: str = ""


_MLP = """g = hndl.Graph("mlp")
x = g.input("x", ("B", 784))
g.output(g.add("linear", x, name="hidden", out_features=10))
model = hndl.build(g)
"""

_SHAPE_SPEC = '''hndl.check(hndl.loads("""
hndl: 1
name: mlp
inputs:
  x: {shape: [B, 784]}
nodes:
  hidden: {op: linear, in: x, in_features: 512, out_features: 10}
outputs: [hidden]
"""))
'''

TRIGGERS: dict[str, tuple[Trigger, ...]] = {
    "E_SPEC": (
        Trigger('hndl.loads("hndl: 2\\nname: m\\ninputs: {x: {shape: [B, 4]}}\\nnodes: {}\\noutputs: [x]\\n")\n'),
        Trigger('g = hndl.Graph("m")\ng.input("x", ("B", 4), dtype="float33")\n'),
    ),
    "E_NAME": (Trigger('g = hndl.Graph("mlp")\ng.input("2x", ("B", 784))\n'),),
    "E_REF": (
        Trigger(
            'g = hndl.Graph("mlp")\nx = g.input("x", ("B", 784))\ng.add("linear", x, name="hidden", out_features=64)\n'
            'g.output(g.add("linear", "hiden", name="out", out_features=10))\nhndl.check(g)\n'
        ),
    ),
    "E_CYCLE": (
        Trigger(
            'g = hndl.Graph("loop")\nx = g.input("x", ("B", 8))\n'
            'g.add("linear", "b", name="a", out_features=8)\n'
            'g.add("linear", "a", name="b", out_features=8)\n'
            'g.output("b")\nhndl.check(g)\n'
        ),
    ),
    "E_OP": (
        Trigger(
            'g = hndl.Graph("mlp")\nx = g.input("x", ("B", 784))\ng.output(g.add("lineer", x, out_features=10))\nhndl.check(g)\n'
        ),
    ),
    "E_PARAM": (
        Trigger(
            'g = hndl.Graph("mlp")\nx = g.input("x", ("B", 784))\ng.output(g.add("linear", x, name="hidden", out_features=0))\nhndl.check(g)\n'
        ),
    ),
    "E_SHAPE": (
        Trigger(_SHAPE_SPEC),
        Trigger(
            'g = hndl.Graph("mlp")\nx = g.input("x", ("B", 784))\n'
            'g.output(g.add("linear", x, name="hidden", in_features=512, out_features=10))\nhndl.check(g)\n'
        ),
    ),
    "E_DTYPE": (
        Trigger(
            'g = hndl.Graph("mlp")\nx = g.input("x", ("B", 784), dtype="int64")\n'
            'g.output(g.add("linear", x, name="hidden", out_features=10))\nhndl.check(g)\n'
        ),
    ),
    "E_INPUT": (Trigger(_MLP + "model(torch.randn(32, 100))\n"),),
    "E_CONTRACT": (
        Trigger(
            '# op "module" cannot infer shapes: it promises its input\'s shape unless told otherwise\n'
            'g = hndl.Graph("flat")\nx = g.input("x", ("B", 4, 4))\n'
            'g.output(g.add("module", x, name="flatten", target="torch.nn:Flatten"))\n'
            "model = hndl.build(g)\nmodel(torch.randn(2, 4, 4))\n"
        ),
    ),
    "E_RUNTIME": (
        Trigger(_MLP + "model(torch.randn(32, 784))\nmodel.nodes.n_hidden.bias = None\nmodel(torch.randn(32, 784))\n"),
    ),
    "E_PARAMS": (
        Trigger(
            _MLP + 'params = {"nodes.n_hidden.weight": torch.zeros(10, 100)}\n'
            "hndl.func.functional_call(model, params, (torch.randn(32, 784),))\n",
            "hndl.func.functional_call",
        ),
    ),
    "E_IMPORT": (
        Trigger(
            "class Doubles(torch.nn.Module):\n"
            "    def forward(self, x):\n"
            "        x.mul_(2)  # changes the caller's tensor\n"
            "        return x\n\n"
            "hndl.from_module(Doubles(), torch.randn(2, 3))\n"
        ),
    ),
}

FIXES: dict[str, str] = {
    "E_SPEC": "Fix the spec text at the location shown: check YAML indentation, the `hndl: 1` version line, "
    "key spelling against the [spec-file format](spec-format.md), and value types.",
    "E_NAME": "Use letters, digits and underscores, not starting with a digit. Inputs and nodes share one "
    "namespace within a graph, so every name must be unique there.",
    "E_REF": "Reference an existing input or node by its exact name, or a port as `node.port` "
    "(`node.0` for a node whose outputs are numbered). Declare at least one output.",
    "E_CYCLE": "A node may only consume values computed before it. Break the loop the message lists, usually "
    "a typo that points a node at a later one.",
    "E_OP": "Use a registered op (see [the ops](ops/index.md)); the hint suggests the closest name. Ops from a "
    "plugin appear once the plugin package is installed.",
    "E_PARAM": "Give every required parameter, with the type and range the op's page lists. Parameters that "
    "are *inferred* (like `in_features`) can simply be left out.",
    "E_SHAPE": "Compare the port's shape pattern (expected) with the shape that reaches it (actual). Often a "
    "hand-written size disagrees with the input: drop inferred parameters, or fix the upstream node.",
    "E_DTYPE": "Declare the input with a dtype the op accepts (`dtype:` in the spec), or insert a cast.",
    "E_INPUT": "Call the model with tensors that match the graph's input contracts: the message names the "
    "input and shows the expected pattern, the actual shape and the symbols already bound.",
    "E_CONTRACT": "A layer produced something other than what its op promised. For op `module`, declare the "
    "output `shape`; for your own op, fix its inference rule or its builder.",
    "E_RUNTIME": "Read the chained exception (`raise ... from`) for a failing layer. For changed registered "
    "state, restore what the build made (or rebuild the model from its graph).",
    "E_PARAMS": "Pass a dict whose keys and shapes match `model.state_dict()` (see the "
    "[torch.func recipes](../func.md)); `strict=True` also requires every key.",
    "E_IMPORT": "Change what the message names in the module's forward (each problem gives the layer, its class and "
    "the source line): branch on shapes, not on tensor values; write `x = x * 2`, not `x.mul_(2)`, on an input; "
    "give dynamic dims an example size of 2 or more. An operation hndl has no op for waits on that op (see "
    "[importing a module](../import.md)).",
}


def available(requires: str) -> bool:
    """Whether a dotted name (``hndl.func.functional_call``) can be imported or looked up."""
    if not requires:
        return True
    parts = requires.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def trigger(code_name: str, roots: Sequence[Path] = ()) -> tuple[Trigger, str] | None:
    """Run the first usable trigger for ``code_name``; returns it with the scrubbed message, or ``None``."""
    import torch

    for t in TRIGGERS.get(code_name, ()):
        if not available(t.requires):
            continue
        torch.manual_seed(0)
        namespace: dict[str, Any] = {"hndl": hndl, "torch": torch}
        try:
            exec(compile(t.source, f"<hndl.docs trigger {code_name}>", "exec"), namespace)
        except hndl.HndlError as exc:
            if exc.code == code_name:
                return t, scrub(str(exc), roots)
        except Exception:  # the snippet did not raise an HndlError (yet): try the next one
            continue
    return None


def errors_page(roots: Sequence[Path] = ()) -> str:
    out = [HEADER, "# Error codes\n\n"]
    out.append(
        "Every problem hndl reports is an `hndl.HndlError` whose `code` is one of these. The example messages "
        "below were produced by running the snippet shown with the installed hndl packages, so they are exactly "
        "what you will see. How to read a message is explained in [Reading hndl's errors](../errors.md).\n\n"
    )
    for name in hndl.CODES:
        out.append(code_section(name, roots))
    return "".join(out).rstrip("\n") + "\n"


def code_section(name: str, roots: Sequence[Path] = ()) -> str:
    out = [f"## {name}\n\n", f"**Meaning:** {hndl.CODES[name]}.\n\n"]
    result = trigger(name, roots)
    if result is None:
        needs = sorted({t.requires for t in TRIGGERS.get(name, ()) if t.requires and not available(t.requires)})
        if needs:
            out.append(f"*No example: it needs {', '.join(code(n) for n in needs)}, which is not installed.*\n\n")
        else:
            out.append("*No example: no snippet in the docs generator raises this code with this installation.*\n\n")
    else:
        t, message = result
        out.append("Triggered by:\n\n```python\n" + t.source + "```\n\nMessage:\n\n```text\n" + message + "\n```\n\n")
    out.append(f"**How to fix:** {FIXES.get(name, 'See the message and its hint.')}\n\n")
    return "".join(out)
