"""Rows for whole layer calls (``MODULES``): the layers whose traced operations do not say all they do (a
``BatchNorm2d`` traced in eval mode shows only its eval-mode arithmetic)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ._site import Emit, Unsupported, is_tensor_node

# --- layers -------------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One call of a layer, as a module row sees it.

    Attributes:
        path: the layer's path in the model (``layer1.0.bn1``).
        module: the layer.
        args, kwargs: what the call passed: traced values for tensors, the values themselves for constants.
        outputs: what the call returned, flattened: traced values, or constants (``None``).
        used: for each of ``outputs``, whether anything after the call reads it.
    """

    path: str
    module: Any
    args: list[Any]
    kwargs: dict[str, Any]
    outputs: list[Any]
    used: list[bool]


def _state_keys(call: Call, names: Mapping[str, str]) -> dict[str, str]:
    """hndl tensor name -> original key, for the layer's tensors in its state dict."""
    own = call.module.state_dict(keep_vars=True)
    prefix = f"{call.path}." if call.path else ""
    return {hndl: prefix + torch_name for torch_name, hndl in names.items() if torch_name in own}


def _one_input(call: Call) -> Any:
    if len(call.args) != 1 or call.kwargs or not is_tensor_node(call.args[0]):
        raise Unsupported("called with other arguments than one tensor")
    if len(call.outputs) != 1 or not is_tensor_node(call.outputs[0]):
        raise Unsupported("returns something other than one tensor")
    return call.args[0]


def _batchnorm(op: str) -> Callable[[Call], Emit]:
    def row(call: Call) -> Emit:
        x = _one_input(call)
        m = call.module
        params = {
            "num_features": int(m.num_features),
            "eps": float(m.eps),
            "momentum": None if m.momentum is None else float(m.momentum),
            "affine": bool(m.affine),
            "track_running_stats": bool(m.track_running_stats),
        }
        names = {n: n for n in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")}
        return Emit(op, [x], params, _state_keys(call, names))

    return row


def _multihead_attention(call: Call) -> Emit:
    """``nn.MultiheadAttention`` used as self-attention (``m(x, x, x)``, batch first, no mask) -> ``attention``."""
    m = call.module
    q, k, v = ([*list(call.args), None, None, None])[:3]
    if not (is_tensor_node(q) and q is k and k is v):
        raise Unsupported("not self-attention: query, key and value are not one tensor")
    options = dict(
        zip(("key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal"), call.args[3:])
    )
    options.update(call.kwargs)
    for name in ("key_padding_mask", "attn_mask"):
        if options.get(name) is not None:
            raise Unsupported(f"called with {name}", waits="a MultiheadAttention row that passes masks on")
    if options.get("is_causal"):
        raise Unsupported("called with is_causal=True", waits="a MultiheadAttention row that passes masks on")
    if not m.batch_first:
        raise Unsupported(
            "batch_first=False (sequence first)", waits="a MultiheadAttention row for sequence-first inputs"
        )
    if not m._qkv_same_embed_dim or m.bias_k is not None or m.add_zero_attn:
        raise Unsupported("separate key/value sizes, bias_k/bias_v or add_zero_attn")
    if len(call.outputs) > 1 and call.used[1]:
        raise Unsupported("its attention weights are used")
    bias = m.in_proj_bias is not None
    names = {"in_proj_weight": "qkv.weight", "out_proj.weight": "proj.weight"}
    if bias:
        names |= {"in_proj_bias": "qkv.bias", "out_proj.bias": "proj.bias"}
    params = {"embed_dim": int(m.embed_dim), "num_heads": int(m.num_heads), "dropout": float(m.dropout), "bias": bias}
    return Emit("attention", [q], params, _state_keys(call, names))


def _recurrent(op: str) -> Callable[[Call], Emit]:
    """``nn.LSTM``/``nn.GRU`` (batch first, no initial state) whose output sequence alone is used -> ``lstm``/``gru``
    (hndl's layers subclass torch's, so the parameters keep their names)."""

    def row(call: Call) -> Emit:
        m = call.module
        if len(call.args) != 1 or call.kwargs or not is_tensor_node(call.args[0]):
            raise Unsupported("called with an initial state or other arguments than one tensor")
        if not m.batch_first or getattr(m, "proj_size", 0) != 0:
            raise Unsupported("batch_first=False or proj_size")
        if any(call.used[1:]):
            raise Unsupported("its final states are used (hndl's op gives the output sequence or the last layer's)")
        params = {
            "hidden_size": int(m.hidden_size),
            "num_layers": int(m.num_layers),
            "bidirectional": bool(m.bidirectional),
            "dropout": float(m.dropout),
            "bias": bool(m.bias),
        }
        names = {name: name for name in m.state_dict()}
        return Emit(op, [call.args[0]], params, _state_keys(call, names))

    return row


def _stochastic_depth(call: Call) -> Emit:
    """torchvision's ``StochasticDepth(p, mode)`` -> ``drop_path``, which draws the same random numbers in training
    mode (in eval mode both are the identity, and the layer is traced in training mode to be seen at all)."""
    x = _one_input(call)
    m = call.module
    if m.mode not in ("row", "batch"):
        raise Unsupported(f"mode={m.mode!r}")
    return Emit("drop_path", [x], {"p": float(m.p), "mode": str(m.mode)})


def _global_response_norm(call: Call) -> Emit:
    """timm's ``GlobalResponseNorm`` (ConvNeXt-V2) -> ``grn`` (channels last) or ``grn2d``: its fused ``addcmul``
    has no op, and hndl's layer computes the same expression, so the outputs are equal bit for bit."""
    x = _one_input(call)
    m = call.module
    op = "grn" if tuple(m.spatial_dim) == (1, 2) else "grn2d"
    params = {"num_channels": int(m.weight.shape[0]), "eps": float(m.eps)}
    return Emit(op, [x], params, _state_keys(call, {"weight": "weight", "bias": "bias"}))


#: Layer class (``module.qualname``) -> row. A subclass that only adds a constructor maps like its base.
MODULES: dict[str, Callable[[Call], Emit]] = {
    "torch.nn.modules.batchnorm.BatchNorm1d": _batchnorm("batchnorm1d"),
    "torch.nn.modules.batchnorm.BatchNorm2d": _batchnorm("batchnorm2d"),
    "torch.nn.modules.activation.MultiheadAttention": _multihead_attention,
    "torch.nn.modules.rnn.LSTM": _recurrent("lstm"),
    "torch.nn.modules.rnn.GRU": _recurrent("gru"),
    "torchvision.ops.stochastic_depth.StochasticDepth": _stochastic_depth,
    "timm.layers.grn.GlobalResponseNorm": _global_response_norm,
}


def module_row(module: Any) -> Callable[[Call], Emit] | None:
    """The row for ``module``'s class: its own, or its nearest base's when every class in between defines
    nothing but ``__init__`` (so the forward is the base's)."""
    for cls in type(module).__mro__:
        row = MODULES.get(f"{cls.__module__}.{cls.__qualname__}")
        if row is not None:
            return row
        if not _constructor_only(cls):
            return None
    return None


_PLAIN_CLASS_KEYS = {"__module__", "__qualname__", "__doc__", "__init__", "__dict__", "__weakref__", "__annotations__"}


def _constructor_only(cls: type) -> bool:
    return set(vars(cls)) <= _PLAIN_CLASS_KEYS
