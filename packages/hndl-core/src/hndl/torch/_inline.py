"""Layers whose ``forward`` the fast path writes out in place of calling it, with the in-place form of the adds
and ReLUs among them (which steps may use it, and when, is :mod:`._in_place`'s rule).

``torch.nn.Linear.forward`` is ``F.linear(input, self.weight, self.bias)``; called as a method it costs a
Python frame and, for each parameter, a trip through ``nn.Module.__getattr__``: about 0.4 us per linear layer,
as much as the whole stores comparison of a small model. For a few standard layers the generated call runs the
same functional call itself, reading the tensors from the layer's ``_parameters`` dict and its settings from
the layer's instance dict, where ``forward`` would have found them:

``F.linear(a0, p0['weight'], p0['bias']) if k0.forward is f0 else m0.forward(a0)``

``p0``/``d0`` are the layer's ``_parameters`` and ``__dict__``, bound when the stores record is taken (the record
compares them by identity on every call, so a replaced store dict never reaches this line). ``F.linear``
(``torch.cat``) is looked up at call time, as ``forward`` does. The test ``k0.forward is f0`` keeps the class's
current code authoritative: a patched ``Linear.forward`` (or one patched before the build) runs instead. A
layer is written out only when its class is exactly one of the table's (a subclass, e.g. a parametrized or
FSDP2 layer, calls its own ``forward``), it has no hook and was not compiled (those go through ``__call__``),
its instance dict has no ``forward`` of its own, and each name the template reads is where ``forward`` would
find it (a parameter deleted and put back as a buffer is left to ``forward``).

The weightless layers that rearrange or convert a tensor (reshape, transpose, permute, select, slice, expand,
concat, pad, mean, cast, ``type_as``, scale, matmul), the ``parameter``/``buffer`` nodes and ``nn.Embedding``
are written out too: they are most of an imported decoder's ~455 nodes a step, and a frame and bound method
cost each of them more than its tensor work (IMPLEMENTATION.md). Where ``forward`` branches on a setting, the
template writes out every branch (``Reshape``'s ``start_dim``, ``Pad``'s mode; ``Slice`` indexes the last dim
as ``x[..., a:b:c]``, the same view, which torch parses faster than a ``slice(None)`` per leading dim) or
carries a ``when`` condition, tested on every call after the class check, outside which the step calls
``forward`` (a ``Reshape`` with sizes read per call):

``a0.reshape(...) if k0.forward is f0 and (not d0['reads']) else m0.forward(a0)``

A written-out expression returns what ``forward`` returns, a view where it returns a view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from . import layers

__all__ = ["Inline", "inline_for"]


@dataclass(frozen=True)
class Inline:
    """How one layer class's ``forward`` reads, over ``{x}`` (the inputs, comma-separated; ``{x0}``, ``{x1}`` each
    one), ``{p}`` (``_parameters``) and ``{d}`` (the instance dict); ``original`` is the ``forward`` the template
    was written from; ``tensors``, ``buffers`` and ``settings`` the names it reads from ``_parameters``,
    ``{d}['_buffers']`` and the instance dict."""

    template: str
    original: Any
    tensors: tuple[str, ...] = ()
    settings: tuple[str, ...] = ()
    #: The form that writes into operand ``{t}`` (the other is ``{o}``) where ``{may}`` holds; None for a layer
    #: that never does. Which steps use it, in which modes, is :func:`._in_place.in_place_steps`'s rule.
    in_place: str | None = None
    arity: int = 1  # how many inputs forward takes
    #: A condition over the same fields, tested on every call after the class check: where it does not hold
    #: (a branch of ``forward`` the template does not write out) the step calls ``forward``. None: always.
    when: str | None = None
    #: Buffers the template reads as ``{d}['_buffers'][name]`` (looked up per call, as ``__getattr__`` does).
    buffers: tuple[str, ...] = ()

    def reads_what_forward_reads(self, module: Any) -> bool:
        """Whether ``self.<name>`` in ``forward`` would find exactly what the template reads: each tensor in
        ``_parameters`` and not shadowed by an instance attribute (a buffer or plain tensor put in a deleted
        parameter's place is found by ``nn.Module.__getattr__`` elsewhere), each buffer in ``_buffers`` and
        in neither of those (``__getattr__`` looks in ``_parameters`` first), each setting in the instance dict.
        The stores record compares these dicts' keys and the instance dict's size on every call, so a change
        to any of them generates the call again and this is asked again."""
        state = module.__dict__
        params = state.get("_parameters", {})
        buffers = state.get("_buffers", {})
        return (
            all(n in params and n not in state for n in self.tensors)
            and all(n in buffers and n not in params and n not in state for n in self.buffers)
            and all(n in state for n in self.settings)
        )


# Each template is its class's forward with ``self.<tensor>`` read from ``_parameters`` and ``self.<setting>``
# from the instance dict (torch 2.4-2.14 all define them so; a torch whose forward differs fails the identity
# test against the function captured here only if it was patched, so the templates are pinned by a test that
# compares their results with the class's forward).
_TABLE: dict[type, Inline] = {
    nn.Linear: Inline("F.linear({x}, {p}['weight'], {p}['bias'])", nn.Linear.forward, ("weight", "bias")),
    # ReLU writes in place only while gradients are recorded (``_in_place.WRITERS``: its ``{may}`` never holds
    # without them).
    nn.ReLU: Inline(
        "F.relu({x}, inplace={d}['inplace'])",
        nn.ReLU.forward,
        settings=("inplace",),
        in_place="(F.relu({t}, inplace=True) if ({may}) else F.relu({x}, inplace={d}['inplace']))",
    ),
    layers.Add: Inline(
        "{x0} + {x1}",
        layers.Add.forward,
        in_place="({t}.add_({o}) if ({may}) and {t}.shape == {o}.shape and {t}.dtype == {o}.dtype else {x0} + {x1})",
        arity=2,
    ),
    nn.GELU: Inline("F.gelu({x}, approximate={d}['approximate'])", nn.GELU.forward, settings=("approximate",)),
    nn.LayerNorm: Inline(
        "F.layer_norm({x}, {d}['normalized_shape'], {p}['weight'], {p}['bias'], {d}['eps'])",
        nn.LayerNorm.forward,
        ("weight", "bias"),
        ("normalized_shape", "eps"),
    ),
    # The element-wise families (ops/_elementwise.py): one class per shape of forward, the function in its dict.
    layers.Mul: Inline("{x0} * {x1}", layers.Mul.forward, arity=2),
    layers.Unary: Inline("{d}['fn']({x}, **{d}['kwargs'])", layers.Unary.forward, settings=("fn", "kwargs")),
    layers.Binary: Inline("{d}['fn']({x0}, {x1})", layers.Binary.forward, settings=("fn",), arity=2),
    layers.TensorScalar: Inline(
        "{d}['fn']({x}, {d}['scalar'])", layers.TensorScalar.forward, settings=("fn", "scalar")
    ),
    layers.ScalarTensor: Inline(
        "{d}['fn']({d}['scalar'], {x})", layers.ScalarTensor.forward, settings=("fn", "scalar")
    ),
    # Activations of the vision models: a squeeze-and-excitation block runs one per block.
    nn.Sigmoid: Inline("{x}.sigmoid()", nn.Sigmoid.forward),
    nn.Tanh: Inline("{x}.tanh()", nn.Tanh.forward),
    nn.SiLU: Inline("F.silu({x}, inplace={d}['inplace'])", nn.SiLU.forward, settings=("inplace",)),
    nn.Hardswish: Inline("F.hardswish({x}, {d}['inplace'])", nn.Hardswish.forward, settings=("inplace",)),
    nn.Hardsigmoid: Inline("F.hardsigmoid({x}, {d}['inplace'])", nn.Hardsigmoid.forward, settings=("inplace",)),
    nn.ReLU6: Inline(
        "F.hardtanh({x}, {d}['min_val'], {d}['max_val'], {d}['inplace'])",
        nn.ReLU6.forward,
        settings=("min_val", "max_val", "inplace"),
    ),
    nn.Hardtanh: Inline(
        "F.hardtanh({x}, {d}['min_val'], {d}['max_val'], {d}['inplace'])",
        nn.Hardtanh.forward,
        settings=("min_val", "max_val", "inplace"),
    ),
    nn.LeakyReLU: Inline(
        "F.leaky_relu({x}, {d}['negative_slope'], {d}['inplace'])",
        nn.LeakyReLU.forward,
        settings=("negative_slope", "inplace"),
    ),
    nn.ELU: Inline("F.elu({x}, {d}['alpha'], {d}['inplace'])", nn.ELU.forward, settings=("alpha", "inplace")),
    nn.Mish: Inline("F.mish({x}, inplace={d}['inplace'])", nn.Mish.forward, settings=("inplace",)),
    layers.LayerNorm2d: Inline(
        "F.layer_norm({x}.permute(0, 2, 3, 1), {d}['normalized_shape'], {p}['weight'], {p}['bias'], "
        "{d}['eps']).permute(0, 3, 1, 2)",
        layers.LayerNorm2d.forward,
        ("weight", "bias"),
        ("normalized_shape", "eps"),
    ),
    nn.Embedding: Inline(
        "F.embedding({x}, {p}['weight'], {d}['padding_idx'], {d}['max_norm'], {d}['norm_type'], "
        "{d}['scale_grad_by_freq'], {d}['sparse'])",
        nn.Embedding.forward,
        ("weight",),
        ("padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"),
    ),
    # The weightless layers (_shape_layers.py, _function_layers.py) and the parameter/buffer nodes
    # (_tensor_layers.py): an imported decoder's step runs about 200 of them. Each returns what its forward
    # returns, a view where forward returns a view.
    layers.Transpose: Inline(
        "{x}.transpose({d}['dim0'], {d}['dim1'])", layers.Transpose.forward, settings=("dim0", "dim1")
    ),
    layers.Permute: Inline("{x}.permute({d}['dims'])", layers.Permute.forward, settings=("dims",)),
    layers.Select: Inline("{x}.select({d}['dim'], {d}['index'])", layers.Select.forward, settings=("dim", "index")),
    # Both branches of forward on start_dim; sizes read per call from the inputs (``reads``) go to forward,
    # which also takes the ``like`` input (a two-input reshape is never written out: arity 1).
    layers.Reshape: Inline(
        "{x}.reshape({d}['shape'] if {d}['start_dim'] == 0 else {x}.shape[:{d}['start_dim']] + {d}['shape'])",
        layers.Reshape.forward,
        settings=("shape", "start_dim", "reads"),
        when="not {d}['reads']",
    ),
    # forward indexes with ``dim % x.dim()`` leading ``slice(None)``s; the last dim (the rotate-half split of
    # every rotary layer) is indexed as ``x[..., a:b:c]``, the same view, which torch parses ~0.6 us faster. An
    # int dim only: a float one makes forward's ``list * k`` raise, and the general branch does the same.
    layers.Slice: Inline(
        "({x}[..., {d}['start']:{d}['end']:{d}['step']] "
        "if type({d}['dim']) is int and {d}['dim'] % {x}.dim() == {x}.dim() - 1 "
        "else {x}[(slice(None),) * ({d}['dim'] % {x}.dim()) + (slice({d}['start'], {d}['end'], {d}['step']),)])",
        layers.Slice.forward,
        settings=("dim", "start", "end", "step"),
    ),
    layers.Pad: Inline(
        "(F.pad({x}, {d}['pad'], value={d}['value']) if {d}['mode'] == 'constant' "
        "else F.pad({x}, {d}['pad'], mode={d}['mode']))",
        layers.Pad.forward,
        settings=("pad", "mode", "value"),
    ),
    # With one input forward's ``like`` is None, so it always expands to ``sizes``.
    layers.Expand: Inline("{x}.expand({d}['sizes'])", layers.Expand.forward, settings=("sizes",)),
    # ``forward(*inputs)`` takes any number; written out for two (a rotary's halves, a cache's past and new),
    # the count the runtime's arity test allows.
    layers.Concat: Inline("torch.cat(({x},), dim={d}['dim'])", layers.Concat.forward, settings=("dim",), arity=2),
    layers.Mean: Inline(
        "{x}.mean(dim={d}['dim'], keepdim={d}['keepdim'])", layers.Mean.forward, settings=("dim", "keepdim")
    ),
    layers.Cast: Inline("{x}.to({d}['dtype'])", layers.Cast.forward, settings=("dtype",)),
    layers.TypeAs: Inline("{x0}.type_as({x1})", layers.TypeAs.forward, arity=2),
    layers.Scale: Inline("{x} * {d}['factor']", layers.Scale.forward, settings=("factor",)),
    layers.MatMul: Inline("torch.matmul({x0}, {x1})", layers.MatMul.forward, arity=2),
    layers.LearnedTensor: Inline("{p}['weight']", layers.LearnedTensor.forward, ("weight",), arity=0),
    layers.FixedTensor: Inline("{d}['_buffers']['value']", layers.FixedTensor.forward, buffers=("value",), arity=0),
}


def inline_for(module: Any) -> Inline | None:
    """The template for ``module``'s forward, or None when it must be called (not exactly a table class, its
    class's ``forward`` is not the one the template was written from, or ``forward`` set on the instance)."""
    found = _TABLE.get(type(module))
    if found is None or type(module).forward is not found.original or "forward" in module.__dict__:
        return None
    # The record holds these dicts' names and the layer's attribute count from now on, so what is true here
    # stays true until the next install.
    return found if found.reads_what_forward_reads(module) else None
