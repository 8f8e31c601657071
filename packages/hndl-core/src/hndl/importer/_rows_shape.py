"""Rows for the operations that move, view or regroup values: aliases, casts, reshapes, permutations, slicing,
concatenation, padding and resampling."""

from __future__ import annotations

from typing import Any

from ._site import _INT64_MAX, Alias, Emit, Row, Site, Unsupported, giver, is_tensor_node


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


def _type_as(site: Site) -> Emit:
    """``x.type_as(y)``: always ``type_as``, which reads ``y``'s dtype on every call (the two may agree in the
    trace and not under autocast)."""
    return Emit("type_as", [site.tensor("self"), site.tensor("other")])


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
    rest = after[keep:]
    symbolic = [size for size in rest if not isinstance(sym.plain(size), int)]
    inputs = [x]
    if len(symbolic) <= 1:  # ints and one -1
        sizes: list[int | str] = [p if isinstance(p, int) else -1 for p in map(sym.plain, rest)]
    else:  # each symbolic size by its name or expression, read or computed from x's dims (or another's)
        sizes = [sym.entry(size) if sym.plain(size) is None else sym.plain(size) for size in rest]  # type: ignore[misc]
        like = _holder(site, symbolic) or giver(site, x, [e for e in sizes if isinstance(e, str)])
        if like is None:
            raise Unsupported(
                f"reshape to {sym.shape(site.out)}: no traced tensor has its symbolic sizes or gives their symbols"
            )
        if like is not x:
            inputs.append(like)
    params: dict[str, Any] = {"shape": sizes}
    if keep:
        params["start_dim"] = keep
    return Emit("reshape", inputs, params)


def _flatten(site: Site) -> Emit:
    return Emit(
        "flatten", [site.tensor("self")], {"start_dim": site.args["start_dim"], "end_dim": site.args["end_dim"]}
    )


def _permute(site: Site) -> Emit:
    return Emit("permute", [site.tensor("self")], {"dims": site.ints("dims")})


def _transpose(site: Site) -> Emit:
    return Emit("transpose", [site.tensor("self")], {"dim0": site.args["dim0"], "dim1": site.args["dim1"]})


def _swapaxes(site: Site) -> Emit:
    """``swapaxes``/``swapdims`` (numpy's names, MaxViT's ``SwapAxes``): a transpose under other argument names."""
    first, second = ("axis0", "axis1") if "axis0" in site.args else ("dim0", "dim1")
    return Emit("transpose", [site.tensor("self")], {"dim0": site.args[first], "dim1": site.args[second]})


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


def _stack(site: Site) -> Emit:
    return Emit("stack", site.tensors("tensors"), {"dim": site.args.get("dim", 0)})


def _flip(site: Site) -> Emit:
    return Emit("flip", [site.tensor("self")], {"dims": site.ints("dims")})


def _repeat(site: Site) -> Emit:
    """``x.repeat(*counts)``: counts that are traced sizes (``x.repeat(1, T)``) are refused by :meth:`Site.ints`."""
    return Emit("repeat", [site.tensor("self")], {"repeats": site.ints("repeats")})


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
    if not all(isinstance(v, int) for v in (start, step)):
        raise Unsupported("slice with a computed start or step")
    if end is not None and not isinstance(end, int):
        return _slice_to_size(site, x, dim, start, end, step)
    if end is not None and (end >= _INT64_MAX or (isinstance(size, int) and end >= size)):
        end = None
    if start == 0 and end is None and step == 1:
        return Alias(x)
    params: dict[str, Any] = {"dim": dim, "start": start, "step": step}
    if end is not None:
        params["end"] = end
    return Emit("slice", [x], params)


def _slice_to_size(site: Site, x: Any, dim: int, start: int, end: Any, step: int) -> Emit:
    """``x[:, :T]`` to a traced size (BERT's and CLIP's position ids, a buffer cut to the call's length): the
    positions ``arange(start, T, step)``, read from the tensor ``T`` comes from on every call, picked by ``index``
    (``slice`` takes int bounds). Within the range the trace assumed (``T`` at most the buffer's length), torch's
    slice and this pick the same elements."""
    from ._rows_tensors import _size_source

    if start < 0:
        raise Unsupported(f"a slice from {start} (counted from the end) to a computed size")
    source, source_dim = _size_source(site, end)
    positions = Emit("arange", [source], {"dim": source_dim, "start": start, "step": step})
    params = {} if dim == 0 else {"dims": [dim]}
    return Emit("index", [x, positions], params)


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
    for value in site.args.get("size") or site.args.get("shape") or []:
        source = getattr(value, "target", None)
        if source is not None and str(source) == "aten.sym_size.int":
            candidates.append(value.args[0])
    candidates.append(site.args.get("self"))
    candidates.extend(n for n in site.node.graph.nodes if n.op == "placeholder" and n.name not in site.parameters)
    for c in candidates:
        if is_tensor_node(c) and all(any(sym.same(s, d) for d in c.meta["val"].shape) for s in sizes):
            return c
    return None


def _pad(site: Site) -> Emit | Alias:
    """``F.pad``: the amounts as ints; one computed from sizes must be the same int at every size the input
    contract takes (Swin's ``(window - H % window) % window`` is 0 where ``H`` is a multiple of the window)."""
    mode = site.args.get("mode", "constant")
    value = site.args.get("value")
    amounts: list[int] = []
    for amount in site.args.get("pad") or []:
        if isinstance(amount, int):
            amounts.append(amount)
            continue
        size = site.symbols.dim(amount)
        if not isinstance(size, int):
            raise Unsupported(
                f"padding by {site.symbols.entry(amount)}, which differs with the input's sizes",
                waits="a pad whose amounts are size expressions; until then make the dim a multiple that pads by 0",
            )
        amounts.append(size)
    if not any(amounts):
        return Alias(site.tensor("self"))
    params: dict[str, Any] = {"pad": amounts}
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
