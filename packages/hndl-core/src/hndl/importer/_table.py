"""What each traced torch operation becomes in hndl: two tables of rows.

``FUNCTIONS`` maps a traced ATen operation (``aten.relu.default``, as torch.export writes ``F.relu``,
``nn.ReLU`` and ``x.relu()`` alike) to a row: a function of the call :class:`Site` that returns the hndl node
(:class:`Emit`), says the value is its input (:class:`Alias`), or raises :class:`Unsupported` with the reason.
``MODULES`` maps a layer class (by its qualified name) to a row that turns the whole call into one node, for the
layers whose traced operations do not say all they do: a ``BatchNorm2d`` traced in eval mode shows only its
eval-mode arithmetic, not that it updates running statistics in training mode.

A new hndl op is a new row (``"aten.hardswish.default": unary("hardswish")``). ``PENDING`` lists the operations
common models use that no row takes yet, with what would take them, so an import that meets one says what it
waits on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._symbols import Symbols

__all__ = ["FUNCTIONS", "MODULES", "PENDING", "Alias", "Call", "Emit", "Site", "Unsupported"]

#: torch's "until the end" for slices (``x[a:]`` traces as ``end=2**63-1``).
_INT64_MAX = 2**63 - 1


class Unsupported(Exception):
    """A traced operation (or a layer) that hndl's ops cannot express; ``waits`` names the op that would."""

    def __init__(self, reason: str, waits: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.waits = waits


@dataclass
class Emit:
    """One hndl node: its op, its inputs (traced values, in the op's port order) and parameters, and the
    original state-dict key of each of its layer's tensors (``{"weight": "layer1.0.conv1.weight"}``)."""

    op: str
    inputs: list[Any]
    params: dict[str, Any] = field(default_factory=dict)
    weights: dict[str, str] = field(default_factory=dict)


@dataclass
class Alias:
    """The operation's result is its input's value (``contiguous``, a slice of everything, dropout with p=0)."""

    value: Any


@dataclass
class Port:
    """One output of a multi-output node (``getitem`` of a ``chunk``)."""

    value: Any
    index: int


class Site:
    """A traced operation as a row sees it: its arguments by name (defaults filled in from the operation's
    schema), their traced values, and the model's parameters.

    Args:
        node: the ``torch.fx`` node.
        symbols: the traced symbols' names.
        parameters: placeholder name -> state-dict key of a parameter.
    """

    def __init__(self, node: Any, symbols: Symbols, parameters: Mapping[str, str]) -> None:
        self.node = node
        self.symbols = symbols
        self.parameters = parameters
        self.args = _bind(node)

    @property
    def out(self) -> Any:
        return self.node.meta.get("val")

    def tensor(self, name: str) -> Any:
        """The traced tensor passed as ``name``."""
        value = self.args.get(name)
        if not _is_tensor_node(value):
            raise Unsupported(f"argument {name!r} is {_show(value)}, not a tensor")
        return value

    def tensors(self, name: str) -> list[Any]:
        values = self.args.get(name)
        if not isinstance(values, (list, tuple)) or not all(_is_tensor_node(v) for v in values):
            raise Unsupported(f"argument {name!r} is not a list of tensors")
        return list(values)

    def weight(self, name: str) -> str:
        """The state-dict key of the parameter passed as ``name``."""
        key = self.optional_weight(name)
        if key is None:
            raise Unsupported(f"argument {name!r} is missing")
        return key

    def optional_weight(self, name: str) -> str | None:
        """The state-dict key of the parameter passed as ``name``, or ``None`` when the argument is ``None``."""
        value = self.args.get(name)
        if value is None:
            return None
        key = self.parameters.get(value.name) if getattr(value, "op", "") == "placeholder" else None
        if key is None:
            raise Unsupported(f"argument {name!r} is a computed tensor, not a parameter of the model")
        return key

    def shape(self, value: Any) -> Sequence[Any]:
        """A traced value's shape (sizes may be ``SymInt``)."""
        return value.meta["val"].shape

    def ints(self, name: str) -> list[int]:
        """An argument that must be a list of plain ints (kernel sizes, strides, dims)."""
        value = self.args.get(name)
        items: list[Any] = list(value) if isinstance(value, (list, tuple)) else [value]
        ints = [v for v in items if isinstance(v, int) and not isinstance(v, bool)]
        if len(ints) != len(items):
            raise Unsupported(f"argument {name!r} is {_show(value)}, not a list of constant ints")
        return ints

    def number(self, name: str) -> Any:
        """An argument that must be a constant number (not a traced size or tensor)."""
        value = self.args.get(name)
        if not isinstance(value, (int, float)):
            raise Unsupported(f"argument {name!r} is {_show(value)}, not a constant number")
        return value


def _is_tensor_node(value: Any) -> bool:
    import torch

    return hasattr(value, "meta") and isinstance(value.meta.get("val"), torch.Tensor)


def _show(value: Any) -> str:
    if hasattr(value, "meta"):
        return f"the traced value {value.name!r}"
    return repr(value)


def _bind(node: Any) -> dict[str, Any]:
    """The node's arguments by schema name, defaults filled in."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return {str(i): a for i, a in enumerate(node.args)}
    bound: dict[str, Any] = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(node.args):
            bound[arg.name] = node.args[i]
        elif arg.name in node.kwargs:
            bound[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            bound[arg.name] = arg.default_value
    return bound


Row = Callable[[Site], "Emit | Alias | Port"]


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
        if _is_tensor_node(other):
            return Emit(op, [a, other])
        if scalar is not None:
            return scalar(site, a, other)
        if numbers:
            return Emit(op, [a], {"b": _constant(other, op)})
        raise Unsupported(f"{op} of a tensor and the constant {other!r} (torch.{op} takes tensors only)")

    return row


def _constant(value: Any, what: str) -> int | float:
    """A number operand as a node parameter: an int stays an int (``x - 1`` on int64 stays int64)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unsupported(f"{what} with the operand {_show(value)}, which is not a constant int or float")
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
    if _is_tensor_node(other):
        return Emit("sub", [other, x])
    return Emit("sub", [x], {"a": _constant(other, "rsub")})


def _power(site: Site) -> Emit:
    """``x ** y``, ``x ** n`` (the number is ``b``) and ``n ** x`` (``pow.Scalar``: the number is ``a``)."""
    exponent = site.args.get("exponent")
    base = site.args.get("self")
    if not _is_tensor_node(base):
        return Emit("pow", [site.tensor("exponent")], {"a": _constant(base, "pow")})
    if _is_tensor_node(exponent):
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
            if _is_tensor_node(value):
                raise Unsupported(f"clamp with a tensor {name} (hndl's clamp takes number bounds)")
            if value is not None:
                params[name] = _constant(value, "clamp")
        return Emit("clamp", [site.tensor("self")], params)

    return row


def _where(site: Site) -> Emit:
    """``torch.where(condition, a, b)``: a branch that is a number becomes the op's ``a`` or ``b`` parameter."""
    inputs = [site.tensor("condition")]
    params: dict[str, Any] = {}
    for port, name in (("a", "self"), ("b", "other")):
        value = site.args.get(name)
        if _is_tensor_node(value):
            inputs.append(value)
        else:
            params[port] = _constant(value, "where")
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
    x = site.tensor("input" if "input" in site.args else "self")
    p = float(site.number("p"))
    return Alias(x) if p == 0 else Emit("dropout", [x], {"p": p})


def _alias(site: Site) -> Alias:
    return Alias(site.tensor("self"))


def _to(site: Site) -> Emit | Alias:
    """``x.to(dtype)``, ``x.float()``, ``_to_copy``: the value itself at its own dtype, else ``cast``."""
    from ..naming import dtype_name

    x = site.tensor("self")
    if site.out.device != x.meta["val"].device:
        raise Unsupported("a conversion to another device (a graph runs where its parameters are)")
    if site.out.dtype == x.meta["val"].dtype:
        return Alias(x)
    return Emit("cast", [x], {"dtype": dtype_name(site.out.dtype)})


def _reshape(site: Site) -> Emit | Alias:
    """``view``, ``reshape``, ``unsqueeze``, ``squeeze``, ``unflatten``: hndl's reshape keeps the dims the input and
    the result share at the front (``start_dim``) and writes the rest as ints, with -1 for one symbolic size."""
    x = site.tensor("self")
    sym = site.symbols
    before, after = list(site.shape(x)), list(site.out.shape)
    if len(before) == len(after) and all(sym.same(a, b) for a, b in zip(before, after)):
        return Alias(x)
    keep = 0
    while keep < min(len(before), len(after)) and sym.same(before[keep], after[keep]):
        keep += 1
    if keep == len(after):  # nothing left to write: restate the last kept dim
        keep -= 1
    sizes: list[int] = []
    for size in after[keep:]:
        plain = sym.plain(size)
        if isinstance(plain, int):
            sizes.append(plain)
        elif -1 in sizes:
            raise Unsupported(
                f"reshape to {sym.shape(site.out)} needs two symbolic sizes after the {keep} dim(s) it keeps; "
                "hndl's reshape takes ints and one -1"
            )
        else:
            sizes.append(-1)
    params: dict[str, Any] = {"shape": sizes}
    if keep:
        params["start_dim"] = keep
    return Emit("reshape", [x], params)


def _flatten(site: Site) -> Emit:
    return Emit(
        "flatten", [site.tensor("self")], {"start_dim": site.args["start_dim"], "end_dim": site.args["end_dim"]}
    )


def _permute(site: Site) -> Emit:
    return Emit("permute", [site.tensor("self")], {"dims": site.ints("dims")})


def _transpose(site: Site) -> Emit:
    return Emit("transpose", [site.tensor("self")], {"dim0": site.args["dim0"], "dim1": site.args["dim1"]})


def _t(site: Site) -> Emit | Alias:
    x = site.tensor("self")
    if len(site.shape(x)) < 2:
        return Alias(x)
    return Emit("transpose", [x], {"dim0": 0, "dim1": 1})


def _mean(site: Site) -> Emit:
    if site.args.get("dtype") is not None:
        raise Unsupported("mean with a dtype")
    x = site.tensor("self")
    dims = site.ints("dim") if site.args.get("dim") is not None else list(range(len(site.shape(x))))
    return Emit("mean", [x], {"dim": dims, "keepdim": bool(site.args.get("keepdim", False))})


def _softmax(op: str) -> Row:
    def row(site: Site) -> Emit:
        if site.args.get("dtype") is not None or site.args.get("half_to_float"):
            raise Unsupported(f"{op} with a dtype")
        return Emit(op, [site.tensor("self")], {"dim": site.args["dim"]})

    return row


def _cat(site: Site) -> Emit | Alias:
    inputs = site.tensors("tensors")
    if len(inputs) == 1:
        return Alias(inputs[0])
    return Emit("concat", inputs, {"dim": site.args.get("dim", 0)})


def _chunk(site: Site) -> Emit:
    x = site.tensor("self")
    dim = site.args.get("dim", 0)
    parts = list(site.out)
    sizes = [site.symbols.plain(p.shape[dim]) for p in parts]
    if len(set(sizes)) != 1:
        raise Unsupported(f"chunk into unequal parts {sizes}")
    return Emit("chunk", [x], {"chunks": len(parts), "dim": dim})


def _split(site: Site) -> Emit:
    x = site.tensor("self")
    dim = site.args.get("dim", 0)
    sizes = [site.symbols.plain(p.shape[dim]) for p in site.out]
    if not all(isinstance(s, int) for s in sizes):
        raise Unsupported("split into symbolic sizes")
    return Emit("split", [x], {"sizes": sizes, "dim": dim})


def _select(site: Site) -> Emit:
    index = site.args["index"]
    if not isinstance(index, int):
        raise Unsupported("select at a computed index")
    return Emit("select", [site.tensor("self")], {"dim": site.args["dim"], "index": index})


def _slice(site: Site) -> Emit | Alias:
    x = site.tensor("self")
    dim = site.args.get("dim", 0)
    start = site.args.get("start") or 0
    end = site.args.get("end")
    step = site.args.get("step", 1)
    size = site.shape(x)[dim]
    if end is not None and not isinstance(end, int) and site.symbols.same(end, size):
        end = None
    if not all(isinstance(v, int) for v in (start, step)) or not (end is None or isinstance(end, int)):
        raise Unsupported("slice with computed bounds")
    if end is not None and (end >= _INT64_MAX or (isinstance(size, int) and end >= size)):
        end = None
    if start == 0 and end is None and step == 1:
        return Alias(x)
    params: dict[str, Any] = {"dim": dim, "start": start, "step": step}
    if end is not None:
        params["end"] = end
    return Emit("slice", [x], params)


def _expand(site: Site) -> Emit:
    """``x.expand(n, -1, -1)``: each size -1 (kept), an int, or a symbol read from a tensor that has that dim."""
    x = site.tensor("self")
    sym = site.symbols
    before, after = list(site.shape(x)), list(site.out.shape)
    offset = len(after) - len(before)
    sizes: list[int | str] = []
    symbolic: list[Any] = []
    for i, size in enumerate(after):
        if i >= offset and sym.same(before[i - offset], size):
            sizes.append(-1)
            continue
        plain = sym.plain(size)
        if plain is None:
            raise Unsupported(f"expand to the computed size {sym.entry(size)}")
        sizes.append(plain)
        if isinstance(plain, str):
            symbolic.append(size)
    inputs = [x]
    if symbolic:
        like = _holder(site, symbolic)
        if like is None:
            raise Unsupported(f"expand to {sizes}: no traced tensor has its symbolic sizes")
        if like is not x:
            inputs.append(like)
    return Emit("expand", inputs, {"shape": sizes})


def _holder(site: Site, sizes: list[Any]) -> Any:
    """A traced tensor whose shape has every one of ``sizes``: one the sizes were read from (``x.shape[0]``)."""
    sym = site.symbols
    candidates: list[Any] = []
    for value in site.args.get("size") or []:
        source = getattr(value, "target", None)
        if source is not None and str(source) == "aten.sym_size.int":
            candidates.append(value.args[0])
    candidates.append(site.args.get("self"))
    for c in candidates:
        if _is_tensor_node(c) and all(any(sym.same(s, d) for d in c.meta["val"].shape) for s in sizes):
            return c
    return None


def _pad(site: Site) -> Emit:
    mode = site.args.get("mode", "constant")
    value = site.args.get("value")
    params: dict[str, Any] = {"pad": site.ints("pad")}
    if mode != "constant":
        params["mode"] = mode
    if value:
        params["value"] = float(value)
    return Emit("pad", [site.tensor("self")], params)


def _upsample(mode: str, dims: int) -> Row:
    def row(site: Site) -> Emit:
        x = site.tensor("input") if "input" in site.args else site.tensor("self")
        params: dict[str, Any] = {"mode": mode}
        if mode != "nearest":
            params["align_corners"] = bool(site.args.get("align_corners"))
        scales = site.args.get("scale_factors")
        if scales:
            if len(set(scales)) != 1:
                raise Unsupported(f"upsampling by different factors per dim {scales}")
            params["scale_factor"] = float(scales[0])
        else:
            sizes = [site.symbols.plain(s) for s in site.out.shape[2:]]
            if not all(isinstance(s, int) for s in sizes):
                raise Unsupported("upsampling to a symbolic size")
            params["size"] = sizes
        return Emit("upsample", [x], params)

    return row


#: Traced ATen operation -> row. Key: ``str(node.target)``, the operation as torch.export writes it.
FUNCTIONS: dict[str, Row] = {
    # activations
    "aten.relu.default": unary("relu"),
    "aten.relu_.default": unary("relu"),
    "aten.sigmoid.default": unary("sigmoid"),
    "aten.sigmoid_.default": unary("sigmoid"),
    "aten.tanh.default": unary("tanh"),
    "aten.tanh_.default": unary("tanh"),
    "aten.silu.default": unary("silu"),
    "aten.silu_.default": unary("silu"),
    "aten.gelu.default": _gelu,
    "aten.gelu_.default": _gelu,
    "aten.softmax.int": _softmax("softmax"),
    "aten._softmax.default": _softmax("softmax"),
    "aten.log_softmax.int": _softmax("log_softmax"),
    "aten._log_softmax.default": _softmax("log_softmax"),
    "aten.hardtanh.default": _hardtanh,
    "aten.hardtanh_.default": _hardtanh,
    "aten.relu6.default": unary("relu6"),
    "aten.relu6_.default": unary("relu6"),
    "aten.hardswish.default": unary("hardswish"),
    "aten.hardswish_.default": unary("hardswish"),
    "aten.hardsigmoid.default": unary("hardsigmoid"),
    "aten.hardsigmoid_.default": unary("hardsigmoid"),
    "aten.mish.default": unary("mish"),
    "aten.mish_.default": unary("mish"),
    "aten.selu.default": unary("selu"),
    "aten.selu_.default": unary("selu"),
    "aten.leaky_relu.default": activation("leaky_relu", negative_slope="negative_slope"),
    "aten.leaky_relu_.default": activation("leaky_relu", negative_slope="negative_slope"),
    "aten.elu.default": _elu,
    "aten.elu_.default": _elu,
    "aten.celu.default": activation("celu", alpha="alpha"),
    "aten.celu_.default": activation("celu", alpha="alpha"),
    "aten.softplus.default": activation("softplus", beta="beta", threshold="threshold"),
    "aten.glu.default": _glu,
    "aten.log_sigmoid.default": unary("logsigmoid"),
    # element-wise math (each ``aten.<name>.default`` and its in-place ``<name>_`` is hndl's op of the name)
    **{
        f"aten.{name}{inplace}.default": unary(name)
        for name in (
            "neg",
            "abs",
            "sign",
            "floor",
            "ceil",
            "exp",
            "log",
            "log1p",
            "sqrt",
            "rsqrt",
            "reciprocal",
            "sin",
            "cos",
            "erf",
        )
        for inplace in ("", "_")
    },
    "aten.round.default": unary("round"),
    "aten.logical_not.default": unary("logical_not"),
    "aten.clamp.default": _clamp("min", "max"),
    "aten.clamp_.default": _clamp("min", "max"),
    "aten.clamp_min.default": _clamp("min"),
    "aten.clamp_max.default": _clamp("max"),
    # arithmetic (a number operand is the op's ``b`` parameter, or ``a`` on the left)
    "aten.add.Tensor": _binary("add"),
    "aten.add_.Tensor": _binary("add"),
    "aten.sub.Tensor": _binary("sub"),
    "aten.sub_.Tensor": _binary("sub"),
    "aten.rsub.Scalar": _rsub,
    "aten.rsub.Tensor": _rsub,
    "aten.mul.Tensor": _binary("mul", _times_constant),
    "aten.mul_.Tensor": _binary("mul", _times_constant),
    "aten.div.Tensor": _binary("div"),
    "aten.div_.Tensor": _binary("div"),
    "aten.pow.Tensor_Scalar": _power,
    "aten.pow.Tensor_Tensor": _power,
    "aten.pow.Scalar": _power,
    "aten.minimum.default": _binary("minimum", numbers=False),
    "aten.maximum.default": _binary("maximum", numbers=False),
    "aten.matmul.default": lambda site: Emit("matmul", [site.tensor("self"), site.tensor("other")]),
    # comparisons and logic
    **{
        f"aten.{name}.{kind}": _binary(name)
        for name in ("eq", "ne", "lt", "le", "gt", "ge")
        for kind in ("Tensor", "Scalar")
    },
    **{f"aten.logical_{name}.default": _binary(f"logical_{name}", numbers=False) for name in ("and", "or", "xor")},
    **{
        f"aten.{name}.Tensor": _logical(f"logical_{op}")
        for op in ("and", "or", "xor")
        for name in (f"__{op}__", f"bitwise_{op}")
    },
    "aten.bitwise_not.default": _logical("logical_not"),
    "aten.where.self": _where,
    "aten.where.ScalarSelf": _where,
    "aten.where.ScalarOther": _where,
    "aten.where.Scalar": _where,
    "aten.tril.default": _triangle("tril"),
    "aten.triu.default": _triangle("triu"),
    "aten.roll.default": _roll,
    # attention
    "aten.scaled_dot_product_attention.default": _sdpa,
    "aten.addmm.default": _addmm,
    # layers with weights (their parameters become the node's)
    "aten.linear.default": _linear,
    "aten.conv1d.default": _conv("conv1d", 1),
    "aten.conv2d.default": _conv("conv2d", 2),
    "aten.conv_transpose1d.default": _conv("conv_transpose1d", 1, transposed=True),
    "aten.conv_transpose2d.input": _conv("conv_transpose2d", 2, transposed=True),
    "aten.layer_norm.default": _layer_norm,
    "aten.group_norm.default": _group_norm,
    "aten.embedding.default": _embedding,
    # pooling and resampling
    "aten.max_pool1d.default": _pool("maxpool1d", 1),
    "aten.max_pool2d.default": _pool("maxpool2d", 2),
    "aten.avg_pool1d.default": _pool("avgpool1d", 1, average=True),
    "aten.avg_pool2d.default": _pool("avgpool2d", 2, average=True),
    "aten.adaptive_avg_pool1d.default": _adaptive("adaptive_avgpool1d", 1),
    "aten.adaptive_avg_pool2d.default": _adaptive("adaptive_avgpool2d", 2),
    "aten.upsample_nearest2d.vec": _upsample("nearest", 2),
    "aten.upsample_bilinear2d.vec": _upsample("bilinear", 2),
    "aten.pad.default": _pad,
    "aten.constant_pad_nd.default": _pad,
    # regularisation: identity in eval mode, hndl's dropout in training mode
    "aten.dropout.default": _dropout,
    "aten.dropout_.default": _dropout,
    # shapes
    "aten.view.default": _reshape,
    "aten.reshape.default": _reshape,
    "aten._unsafe_view.default": _reshape,
    "aten.unsqueeze.default": _reshape,
    "aten.squeeze.dim": _reshape,
    "aten.squeeze.dims": _reshape,
    "aten.squeeze.default": _reshape,
    "aten.unflatten.int": _reshape,
    "aten.flatten.using_ints": _flatten,
    "aten.permute.default": _permute,
    "aten.transpose.int": _transpose,
    "aten.t.default": _t,
    "aten.expand.default": _expand,
    "aten.cat.default": _cat,
    "aten.concat.default": _cat,
    "aten.chunk.default": _chunk,
    "aten.split.Tensor": _split,
    "aten.split_with_sizes.default": _split,
    "aten.select.int": _select,
    "aten.slice.Tensor": _slice,
    "aten.mean.dim": _mean,
    "aten.mean.default": _mean,
    # the same values: copies, layout changes, conversions to what the value already is
    "aten.contiguous.default": _alias,
    "aten.clone.default": _alias,
    "aten.alias.default": _alias,
    "aten.detach.default": _alias,
    "aten.lift_fresh_copy.default": _alias,
    # conversions: the value itself at its own dtype, else ``cast``
    "aten.to.dtype": _to,
    "aten.to.dtype_layout": _to,
    "aten.to.device": _to,
    "aten._to_copy.default": _to,
}

#: Traced operations common models use that no row takes yet -> what would take them. Each hndl op of issues 21
#: and 22 that these models need has its row above; what is left has no hndl op, or an op whose meaning differs.
PENDING: dict[str, str] = {
    "aten.arange.default": "a row making arange of a traced size the positions op",
    "aten.arange.start": "a row making arange of a traced size the positions op",
    "aten.cumsum.default": "a cumsum op",
    "aten.diff.default": "a diff op",
    "aten.new_ones.default": "a constant tensor op (a fixed size folds at import)",
    "aten.gather.default": "a gather op",
    "aten.index.Tensor": "a gather op (indexing by a tensor)",
}


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
    if len(call.args) != 1 or call.kwargs or not _is_tensor_node(call.args[0]):
        raise Unsupported("called with other arguments than one tensor")
    if len(call.outputs) != 1 or not _is_tensor_node(call.outputs[0]):
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
    if not (_is_tensor_node(q) and q is k and k is v):
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
        if len(call.args) != 1 or call.kwargs or not _is_tensor_node(call.args[0]):
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


#: Layer class (``module.qualname``) -> row. A subclass that only adds a constructor maps like its base.
MODULES: dict[str, Callable[[Call], Emit]] = {
    "torch.nn.modules.batchnorm.BatchNorm1d": _batchnorm("batchnorm1d"),
    "torch.nn.modules.batchnorm.BatchNorm2d": _batchnorm("batchnorm2d"),
    "torch.nn.modules.activation.MultiheadAttention": _multihead_attention,
    "torch.nn.modules.rnn.LSTM": _recurrent("lstm"),
    "torch.nn.modules.rnn.GRU": _recurrent("gru"),
    "torchvision.ops.stochastic_depth.StochasticDepth": _stochastic_depth,
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
