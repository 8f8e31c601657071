"""Rows for the element-wise, activation, dense, convolution, pooling, normalisation and attention operations."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ._site import Alias, Emit, Row, Site, Unsupported, _show, is_tensor_node

# --- rows ---------------------------------------------------------------------------------------------------


def unary(op: str, **fixed: Any) -> Row:
    """``op`` on the argument ``self``, with fixed parameters."""

    def row(site: Site) -> Emit:
        return Emit(op, [site.tensor("self")], dict(fixed))

    return row


def _gelu(site: Site) -> Emit:
    approximate = site.args.get("approximate", "none")
    return Emit("gelu", [site.tensor("self")], {} if approximate == "none" else {"approximate": approximate})


def _binary(op: str, scalar: Callable[[Site, Any, Any], Emit] | None = None, numbers: bool = True) -> Row:
    """``op`` of ``self`` and ``other``: two tensors, or (``numbers``) a tensor and a number, which becomes the
    op's ``b`` parameter (hndl's binary ops promote a number as torch promotes a Python number)."""

    def row(site: Site) -> Emit:
        a = site.tensor("self")
        other = site.args.get("other")
        if site.args.get("alpha", 1) != 1:
            raise Unsupported(f"{op} with alpha={site.args['alpha']!r}")
        if is_tensor_node(other):
            return Emit(op, [a, other])
        if scalar is not None:
            return scalar(site, a, other)
        if numbers:
            return Emit(op, [a], {"b": _constant(other, op)})
        raise Unsupported(f"{op} of a tensor and the constant {other!r} (torch.{op} takes tensors only)")

    return row


def _constant(value: Any, what: str, finite: bool = True) -> int | float:
    """A number operand as a node parameter: an int stays an int (``x - 1`` on int64 stays int64). ``finite``
    is the parameter's own: ``where`` takes ``-inf`` (a masked score), arithmetic's ``b`` does not."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unsupported(f"{what} with the operand {_show(value)}, which is not a constant int or float")
    if finite and isinstance(value, float) and not math.isfinite(value):
        raise Unsupported(f"{what} with the operand {value}: {what}'s number parameter is finite")
    return value


def _times_constant(site: Site, a: Any, other: Any) -> Emit:
    """A floating tensor times a number that keeps its dtype is ``scale``; anything else ``mul`` with ``b``."""
    import torch

    factor = _constant(other, "mul")
    same = isinstance(site.out, torch.Tensor) and site.out.dtype == a.meta["val"].dtype
    if a.meta["val"].is_floating_point() and same:
        return Emit("scale", [a], {"factor": float(factor)})
    return Emit("mul", [a], {"b": factor})


def _rsub(site: Site) -> Emit:
    """``rsub(x, y)`` is ``y - x``: ``1 - x`` traces as ``rsub.Scalar(x, 1)``, the number is ``sub``'s ``a``."""
    if site.args.get("alpha", 1) != 1:
        raise Unsupported(f"rsub with alpha={site.args['alpha']!r}")
    x = site.tensor("self")
    other = site.args.get("other")
    if is_tensor_node(other):
        return Emit("sub", [other, x])
    return Emit("sub", [x], {"a": _constant(other, "rsub")})


def _power(site: Site) -> Emit:
    """``x ** y``, ``x ** n`` (the number is ``b``) and ``n ** x`` (``pow.Scalar``: the number is ``a``)."""
    exponent = site.args.get("exponent")
    base = site.args.get("self")
    if not is_tensor_node(base):
        return Emit("pow", [site.tensor("exponent")], {"a": _constant(base, "pow")})
    if is_tensor_node(exponent):
        return Emit("pow", [base, exponent])
    return Emit("pow", [base], {"b": _constant(exponent, "pow")})


def _floating(site: Site, name: str = "self") -> Any:
    """The tensor ``name``, which must be floating: hndl's activation ops take floating tensors, as torch.nn's do."""
    x = site.tensor(name)
    if not x.meta["val"].is_floating_point():
        raise Unsupported(f"{site.node.target} of a {x.meta['val'].dtype} tensor (hndl's op takes floating tensors)")
    return x


def activation(op: str, **params: str) -> Row:
    """``op`` on the floating argument ``self``, its parameters read from the arguments named
    (``activation("leaky_relu", negative_slope="negative_slope")``)."""

    def row(site: Site) -> Emit:
        x = _floating(site)
        return Emit(op, [x], {mine: float(site.number(theirs)) for mine, theirs in params.items()})

    return row


def _hardtanh(site: Site) -> Emit:
    """``F.hardtanh``, and ``nn.ReLU6``, which torch.export writes as ``hardtanh(x, 0.0, 6.0)``: ``relu6`` at 0 and 6,
    else ``hardtanh`` with its bounds (``clamp`` where they are not ordered, which hardtanh refuses)."""
    x = _floating(site)
    low, high = float(site.number("min_val")), float(site.number("max_val"))
    if (low, high) == (0.0, 6.0):
        return Emit("relu6", [x])
    if not high > low:
        return Emit("clamp", [x], {"min": low, "max": high})
    return Emit("hardtanh", [x], {"min_val": low, "max_val": high})


def _elu(site: Site) -> Emit:
    if site.args.get("scale", 1) != 1 or site.args.get("input_scale", 1) != 1:
        raise Unsupported("elu with a scale or input_scale other than 1")
    return Emit("elu", [_floating(site)], {"alpha": float(site.number("alpha"))})


def _clamp(*bounds: str) -> Row:
    """``clamp``, ``clamp_min``, ``clamp_max`` with number bounds (a bound left ``None`` is open)."""

    def row(site: Site) -> Emit:
        params: dict[str, Any] = {}
        for name in bounds:
            value = site.args.get(name)
            if is_tensor_node(value):
                raise Unsupported(f"clamp with a tensor {name} (hndl's clamp takes number bounds)")
            if value is not None:
                params[name] = _constant(value, "clamp")
        return Emit("clamp", [site.tensor("self")], params)

    return row


def _masked_fill(site: Site) -> Emit:
    """``x.masked_fill(mask, value)`` with a number ``value``: ``where(mask, value, x)``. torch keeps x's dtype
    where ``where`` promotes to the number's kind, so a float value on an integer or bool tensor is refused."""
    x = site.tensor("self")
    mask = site.tensor("mask")
    value = site.args.get("value")
    if is_tensor_node(value):
        raise Unsupported("masked_fill with a tensor value (hndl's where takes it as a number only here)")
    value = _constant(value, "masked_fill", finite=False)
    import torch

    dtype = x.meta["val"].dtype
    if dtype.is_floating_point or (isinstance(value, int) and dtype != torch.bool):
        if len(site.shape(mask)) > len(site.shape(x)):  # torch refuses it; where would broadcast x up
            raise Unsupported("masked_fill with a mask of higher rank than the tensor")
        return Emit("where", [mask, x], {"a": value})
    raise Unsupported(f"masked_fill of a {dtype} tensor with {value!r}, whose kind where would promote to")


def _where(site: Site) -> Emit:
    """``torch.where(condition, a, b)``: a branch that is a number becomes the op's ``a`` or ``b`` parameter."""
    inputs = [site.tensor("condition")]
    params: dict[str, Any] = {}
    for port, name in (("a", "self"), ("b", "other")):
        value = site.args.get(name)
        if is_tensor_node(value):
            inputs.append(value)
        else:
            params[port] = _constant(value, "where", finite=False)
    return Emit("where", inputs, params)


def _logical(op: str) -> Row:
    """``a | b``, ``a & b``, ``a ^ b``, ``~a`` (bitwise in torch) of bool tensors, where they are the logical ops."""

    def row(site: Site) -> Emit:
        operands = [site.tensor("self")] + ([site.tensor("other")] if "other" in site.args else [])
        if any(t.meta["val"].dtype != _torch_bool() for t in operands):
            raise Unsupported(f"{site.node.target} of integer tensors (bitwise; hndl's {op} is of bool tensors)")
        return Emit(op, operands)

    return row


def _torch_bool() -> Any:
    import torch

    return torch.bool


def _triangle(op: str) -> Row:
    def row(site: Site) -> Emit:
        return Emit(op, [site.tensor("self")], {"diagonal": int(site.number("diagonal"))})

    return row


def _roll(site: Site) -> Emit:
    dims = site.ints("dims") if site.args.get("dims") else None
    return Emit("roll", [site.tensor("self")], {"shifts": site.ints("shifts"), "dims": dims})


def _glu(site: Site) -> Emit:
    return Emit("glu", [_floating(site)], {"dim": int(site.number("dim"))})


def _sdpa(site: Site) -> Emit:
    """``F.scaled_dot_product_attention`` on ``[B, H, T, D]`` -> ``sdpa``, which calls it with the same arguments.

    torch broadcasts an ``attn_mask`` against the scores ``[B, H, T, S]`` from the right (a rank-2 mask is
    ``[T, S]``), while hndl's ``sdpa`` reads a mask below rank 4 as starting with the batch (``[B, S]``,
    ``[B, T, S]``); so a mask of rank 4 is passed as it is, and one of rank 2 through a ``reshape`` to
    ``[1, 1, T, S]``, which is how torch reads it (and computes it: the outputs are equal). Bool (true: attend) and
    additive float masks mean the same to both. A rank-3 mask is refused: torch computes it another way than its
    rank-4 form, an ulp apart."""
    q, k, v = site.tensor("query"), site.tensor("key"), site.tensor("value")
    if any(len(site.shape(t)) != 4 for t in (q, k, v)):
        raise Unsupported("scaled_dot_product_attention of tensors whose rank is not 4 (sdpa takes [B, H, T, D])")
    if site.args.get("dropout_p", 0.0):
        # The trace is of eval mode: a call that drops out there too is not sdpa, which drops out in training only.
        raise Unsupported(f"scaled_dot_product_attention with dropout_p={site.args['dropout_p']!r} in eval mode")
    params: dict[str, Any] = {"causal": bool(site.args.get("is_causal", False))}
    if site.args.get("scale") is not None:
        params["scale"] = float(site.number("scale"))
    inputs: list[Any] = [q, k, v]
    if site.args.get("attn_mask") is not None:
        mask = site.tensor("attn_mask")
        if params["causal"]:
            raise Unsupported("scaled_dot_product_attention with both an attn_mask and is_causal (torch refuses it)")
        rank = len(site.shape(mask))
        if rank == 3:
            # torch computes a rank-3 mask on another path than the same mask as [1, H, T, S] (an ulp apart on
            # CPU), and hndl's sdpa reads rank 3 as [B, T, S]: neither would give torch's outputs exactly.
            raise Unsupported(
                "scaled_dot_product_attention with a rank-3 attn_mask ([H, T, S] to torch, [B, T, S] to hndl's sdpa)",
                waits="an sdpa mask of rank 3 read as torch reads it",
            )
        if rank not in (2, 4):
            raise Unsupported(f"scaled_dot_product_attention with an attn_mask of rank {rank}")
        if rank == 2:
            sizes: list[int] = []
            for size in site.shape(mask):
                plain = site.symbols.plain(size)
                if isinstance(plain, int):
                    sizes.append(plain)
                elif -1 in sizes:
                    raise Unsupported(
                        f"scaled_dot_product_attention with an attn_mask of shape {site.symbols.shape(mask.meta['val'])}"
                        ": it is read as rank 4, and hndl's reshape takes one symbolic size"
                    )
                else:
                    sizes.append(-1)
            mask = Emit("reshape", [mask], {"shape": [1] * (4 - rank) + sizes})
        inputs.append(mask)
        params["masked"] = True
    return Emit("sdpa", inputs, params)


def _linear(site: Site) -> Emit:
    weight = site.weight("weight")
    bias = site.optional_weight("bias")
    out_features = int(site.shape(site.args["weight"])[0])
    weights = {"weight": weight} | ({"bias": bias} if bias is not None else {})
    return Emit("linear", [site.tensor("input")], {"out_features": out_features, "bias": bias is not None}, weights)


def _addmm(site: Site) -> Emit:
    """``torch.addmm(b, x, W)`` with ``W`` ``[in, out]`` and ``b`` parameters (transformers' ``Conv1D``) ->
    ``linear_in_out``, which computes the same ``addmm``."""
    if site.args.get("beta", 1) != 1 or site.args.get("alpha", 1) != 1:
        raise Unsupported("addmm with beta or alpha other than 1")
    weight, bias = site.weight("mat2"), site.weight("self")
    w, b = site.shape(site.args["mat2"]), site.shape(site.args["self"])
    if len(w) != 2 or len(b) != 1 or int(b[0]) != int(w[1]):
        raise Unsupported("addmm whose bias is not one value per output column")
    return Emit("linear_in_out", [site.tensor("mat1")], {"out_features": int(w[1])}, {"weight": weight, "bias": bias})


def _conv(op: str, dims: int, transposed: bool = False) -> Row:
    def row(site: Site) -> Emit:
        weight = site.weight("weight")
        bias = site.optional_weight("bias")
        w = [int(s) for s in site.shape(site.args["weight"])]
        padding = site.args.get("padding")
        if isinstance(padding, str):
            raise Unsupported(f"{op} with padding={padding!r}")
        groups = int(site.number("groups"))
        params: dict[str, Any] = {
            "out_channels": w[1] * groups if transposed else w[0],
            "kernel_size": _pair(w[2:], dims),
            "stride": _pair(site.ints("stride"), dims),
            "padding": _pair(site.ints("padding"), dims),
            "dilation": _pair(site.ints("dilation"), dims),
            "groups": groups,
            "bias": bias is not None,
        }
        if transposed:
            params["output_padding"] = _pair(site.ints("output_padding"), dims)
        weights = {"weight": weight} | ({"bias": bias} if bias is not None else {})
        return Emit(op, [site.tensor("input")], params, weights)

    return row


def _pair(values: list[int], dims: int) -> Any:
    """One int where every dim has the same value (``3``), else the list (``[1, 3]``)."""
    if len(values) == 1:
        return values[0]
    if len(values) != dims:
        raise Unsupported(f"{values} has {len(values)} entries for {dims} dims")
    return values[0] if all(v == values[0] for v in values) else list(values)


def _pool(op: str, dims: int, average: bool = False) -> Row:
    def row(site: Site) -> Emit:
        stride = site.ints("stride") if site.args.get("stride") else []
        params: dict[str, Any] = {
            "kernel_size": _pair(site.ints("kernel_size"), dims),
            "stride": _pair(stride, dims) if stride else None,
            "padding": _pair(site.ints("padding"), dims),
            "ceil_mode": bool(site.args.get("ceil_mode", False)),
        }
        if average:
            if site.args.get("divisor_override") is not None:
                raise Unsupported(f"{op} with divisor_override")
            params["count_include_pad"] = bool(site.args.get("count_include_pad", True))
        else:
            params["dilation"] = _pair(site.ints("dilation"), dims)
        return Emit(op, [site.tensor("self")], params)

    return row


def _adaptive(op: str, dims: int) -> Row:
    def row(site: Site) -> Emit:
        return Emit(op, [site.tensor("self")], {"output_size": _pair(site.ints("output_size"), dims)})

    return row


def _layer_norm(site: Site) -> Emit:
    weight = site.optional_weight("weight")
    bias = site.optional_weight("bias")
    if bias is not None and weight is None:
        raise Unsupported("layer_norm with a bias and no weight")
    params = {"normalized_shape": site.ints("normalized_shape"), "eps": float(site.number("eps"))}
    if weight is None:
        params["elementwise_affine"] = False
    elif bias is None:
        params["bias"] = False
    weights = ({"weight": weight} if weight is not None else {}) | ({"bias": bias} if bias is not None else {})
    return Emit("layernorm", [site.tensor("input")], params, weights)


def _group_norm(site: Site) -> Emit:
    weight = site.optional_weight("weight")
    bias = site.optional_weight("bias")
    if (weight is None) != (bias is None):
        raise Unsupported("group_norm with only one of weight and bias")
    x = site.tensor("input")
    params = {
        "num_groups": int(site.number("num_groups")),
        "num_channels": int(site.shape(x)[1]),
        "eps": float(site.number("eps")),
        "affine": weight is not None,
    }
    weights = {"weight": weight, "bias": bias} if weight is not None and bias is not None else {}
    return Emit("groupnorm", [x], params, weights)


def _embedding(site: Site) -> Emit:
    if site.args.get("scale_grad_by_freq") or site.args.get("sparse"):
        raise Unsupported("embedding with scale_grad_by_freq or sparse")
    weight = site.weight("weight")
    n, d = (int(size) for size in site.shape(site.args["weight"]))
    padding_idx = site.args.get("padding_idx", -1)
    params: dict[str, Any] = {"num_embeddings": n, "embedding_dim": d}
    if padding_idx is not None and padding_idx >= 0:
        params["padding_idx"] = int(padding_idx)
    return Emit("embedding", [site.tensor("indices")], params, {"weight": weight})


def _dropout(site: Site) -> Emit | Alias:
    """Dropout; one the eval-mode trace shows on (``F.dropout(x, training=True)``: Monte Carlo dropout) drops
    in eval mode too (``always``), as the module does."""
    x = site.tensor("input" if "input" in site.args else "self")
    p = float(site.number("p"))
    if p == 0:
        return Alias(x)
    return Emit("dropout", [x], {"p": p, "always": True} if site.args.get("train") is True else {"p": p})
