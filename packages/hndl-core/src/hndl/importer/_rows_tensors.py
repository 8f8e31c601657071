"""Rows for issue 37's ops: reductions, scans, picking by integer tensors, einsum, and tensors made at the
call's sizes (``arange``, ``*_like``, ``new_*``, ``zeros``/``ones``/``full``)."""

from __future__ import annotations

from typing import Any

from ._rows import _floating
from ._site import Emit, Row, Site, Unsupported, _show, giver, is_tensor_node

# --- issue 37's ops: reductions, scans, picking by tensors, einsum, tensors made at the call's sizes ---------------


def _size_source(site: Site, size: Any) -> tuple[Any, int]:
    """The traced tensor and dim a symbolic size is read from: the ``sym_size`` node that made it, else a graph
    input that has the size as a dim.

    Raises:
        Unsupported: for a size that is an expression (``T+1``) or that no input carries.
    """
    if str(getattr(size, "target", "")) == "aten.sym_size.int":
        return size.args[0], int(size.args[1])
    value = size.meta.get("val") if hasattr(size, "meta") else size
    if not isinstance(site.symbols.plain(value), str):
        raise Unsupported(f"a size computed as {site.symbols.entry(value)} (hndl reads a size from one input dim)")
    for n in site.node.graph.nodes:
        held = n.meta.get("val") if n.op == "placeholder" and n.name not in site.parameters else None
        for i, d in enumerate(getattr(held, "shape", ())):
            if is_tensor_node(n) and site.symbols.same(d, value):
                return n, i
    raise Unsupported(f"no traced tensor has the size {site.symbols.entry(value)}")


def _int_argument(site: Site, name: str, default: int) -> int:
    value = site.args.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise Unsupported(f"argument {name!r} is {_show(value)}, not a constant int")
    return value


def _arange(site: Site) -> Emit:
    """``torch.arange(T)``, ``arange(start, T, step)`` of a traced size -> ``arange`` reading the size from the tensor
    it came from on every call (an arange of a fixed length folds into a buffer before any row is asked)."""
    from ..naming import dtype_name

    end = site.args.get("end")
    if isinstance(end, int):
        raise Unsupported("arange of a fixed length that did not fold at import")
    if end is None or not hasattr(end, "meta"):
        raise Unsupported(f"arange to {_show(end)}")
    start, step = _int_argument(site, "start", 0), _int_argument(site, "step", 1)
    source, dim = _size_source(site, end)
    params: dict[str, Any] = {"dim": dim, "start": start, "step": step}
    if site.out.dtype != _torch_int64():
        params["dtype"] = dtype_name(site.out.dtype)
    return Emit("arange", [source], params)


def _torch_int64() -> Any:
    import torch

    return torch.int64


def _dtype_param(site: Site, follows: Any) -> dict[str, Any]:
    """``{"dtype": ...}`` when the result's dtype is not that of ``follows`` (hndl's default), else nothing."""
    from ..naming import dtype_name

    if follows is not None and site.out.dtype == follows.meta["val"].dtype:
        return {}
    return {"dtype": dtype_name(site.out.dtype)}


def _accumulating(op: str) -> Row:
    """``sum`` and ``cumsum``: the dtype is written only where it is not torch's default (int64 for integers)."""

    def row(site: Site) -> Emit:
        import torch

        x = site.tensor("self")
        dtype = x.meta["val"].dtype
        default = torch.int64 if not (dtype.is_floating_point or dtype.is_complex) else dtype
        params: dict[str, Any] = {}
        if op == "sum":
            dims = site.args.get("dim")
            params["dim"] = site.ints("dim") if dims else None  # torch sums everything for dim=None and dim=[]
            params["keepdim"] = bool(site.args.get("keepdim", False))
        else:
            params["dim"] = _int_argument(site, "dim", -1)
        if site.out.dtype != default:
            from ..naming import dtype_name

            params["dtype"] = dtype_name(site.out.dtype)
        return Emit(op, [x], params)

    return row


def _norm(site: Site) -> Emit:
    if site.args.get("dtype") is not None:
        raise Unsupported("linalg_vector_norm with a dtype")
    x = _floating(site)
    ord_ = site.number("ord")
    dims = site.args.get("dim")
    return Emit(
        "norm",
        [x],
        {"ord": float(ord_), "dim": site.ints("dim") if dims else None, "keepdim": bool(site.args.get("keepdim"))},
    )


def _arg(op: str) -> Row:
    def row(site: Site) -> Emit:
        dim = site.args.get("dim")
        if dim is not None and not isinstance(dim, int):
            raise Unsupported(f"{op} along {_show(dim)}")
        return Emit(op, [site.tensor("self")], {"dim": dim, "keepdim": bool(site.args.get("keepdim", False))})

    return row


def _diff(site: Site) -> Emit:
    """``torch.diff(x, n, dim, prepend, append)``: a prepended or appended tensor is a ``concat`` first, which is
    what torch computes."""
    x = site.tensor("self")
    dim = _int_argument(site, "dim", -1)
    parts = [site.args.get("prepend"), x, site.args.get("append")]
    for name, part in (("prepend", parts[0]), ("append", parts[2])):
        if part is not None and not is_tensor_node(part):
            raise Unsupported(f"diff with the constant {name} {_show(part)}")
    taken = [p for p in parts if p is not None]
    source: Any = x if len(taken) == 1 else Emit("concat", taken, {"dim": dim})
    return Emit("diff", [source], {"n": _int_argument(site, "n", 1), "dim": dim})


def _gather(site: Site) -> Emit:
    if site.args.get("sparse_grad"):
        raise Unsupported("gather with sparse_grad")
    return Emit("gather", [site.tensor("self"), site.tensor("index")], {"dim": _int_argument(site, "dim", 0)})


def _index(site: Site) -> Emit:
    """``x[idx]``, ``x[:, idx]``, ``x[rows, cols]`` with integer tensors -> ``index`` at those dims; a bool or uint8
    index (a mask: how many elements it selects is data) is refused."""
    import torch

    x = site.tensor("self")
    entries = list(site.args.get("indices") or [])
    dims, tensors = [], []
    for d, entry in enumerate(entries):
        if entry is None:
            continue
        if not is_tensor_node(entry):
            raise Unsupported(f"indexing by {_show(entry)}")
        if entry.meta["val"].dtype not in (torch.int64, torch.int32):
            raise Unsupported(
                f"indexing by a {entry.meta['val'].dtype} mask (the number of elements it selects is data)",
                waits="an index by a mask, whose result's size no contract can state; write it with where",
            )
        dims.append(d)
        tensors.append(entry)
    if not tensors:
        raise Unsupported("indexing with no index tensor")
    params = {} if dims == list(range(len(dims))) else {"dims": dims}
    return Emit("index", [x, *tensors], params)


def _unbind(site: Site) -> Emit:
    x = site.tensor("self")
    dim = _int_argument(site, "dim", 0)
    size = site.symbols.plain(site.shape(x)[dim])
    if not isinstance(size, int):
        raise Unsupported(f"unbind of the symbolic dim {size} (the number of outputs must be fixed)")
    return Emit("unbind", [x], {"dim": dim, "size": size})


def _einsum(site: Site) -> Emit:
    equation = site.args.get("equation")
    if not isinstance(equation, str):
        raise Unsupported(f"einsum with the equation {_show(equation)}")
    return Emit("einsum", site.tensors("tensors"), {"equation": equation})


def _fill_value(site: Site, name: str) -> float:
    value = site.args.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Unsupported(f"a fill value {_show(value)}, not a constant number")
    return float(value)


def _like(op: str) -> Row:
    """``zeros_like``, ``ones_like``, ``full_like`` of a tensor whose sizes the trace does not fix (a fixed one
    folds): the dtype is written only where it is not the tensor's, so it follows the tensor's as torch's does."""

    def row(site: Site) -> Emit:
        x = site.tensor("self")
        if site.out.device != x.meta["val"].device:
            raise Unsupported(f"{op} on another device")
        params = {"value": _fill_value(site, "fill_value")} if op == "full_like" else {}
        return Emit(op, [x], params | _dtype_param(site, x))

    return row


def _sizes(site: Site, x: Any | None) -> tuple[list[int | str], list[Any]]:
    """The ``size`` argument as ``new_*``'s ``shape`` (ints and symbol names), and a tensor holding the symbols
    ``x`` does not (or ``[]``)."""
    shape: list[int | str] = []
    others: list[Any] = []
    for size in site.args.get("size") or []:
        value = size.meta.get("val") if hasattr(size, "meta") else size
        plain = site.symbols.plain(value)
        if plain is None:  # a computed size (8*h): computed per call from the dims that give its symbols
            entry = site.symbols.entry(value)
            source = giver(site, x, [str(entry)]) if x is not None else None
            if source is None:
                raise Unsupported(f"a tensor of the computed size {entry}, whose symbols no traced tensor gives")
            shape.append(entry)
            if source is not x and all(source is not o for o in others):
                others.append(source)
            continue
        shape.append(plain)
        if isinstance(plain, str):
            held = x is not None and any(site.symbols.same(d, value) for d in site.shape(x))
            if not held:
                source, _ = _size_source(site, size)
                if all(source is not o for o in others):
                    others.append(source)
    if len(others) > 1:
        raise Unsupported("a tensor whose symbolic sizes come from more than one other tensor")
    return shape, others


def _new(op: str, value: str | None = None) -> Row:
    """``x.new_ones(size)`` and kin of traced sizes -> ``new_*`` (a fixed size folds at import)."""

    def row(site: Site) -> Emit:
        x = site.tensor("self")
        if site.out.device != x.meta["val"].device:
            raise Unsupported(f"{op} on another device")
        shape, others = _sizes(site, x)
        params: dict[str, Any] = {"shape": shape}
        if value is not None:
            params["value"] = _fill_value(site, value)
        return Emit(op, [x, *others], params | _dtype_param(site, x))

    return row


def _full(fill: float | None) -> Row:
    """``torch.ones(B, T)``, ``zeros``, ``full`` of traced sizes -> ``new_*`` on the tensor the first symbolic size
    comes from (its device; the dtype is always written, as it does not follow that tensor)."""

    def row(site: Site) -> Emit:
        from ..naming import dtype_name

        sym = [s for s in site.args.get("size") or [] if not isinstance(s, int)]
        if not sym:
            raise Unsupported("a tensor of a fixed size that did not fold at import")
        x, _ = _size_source(site, sym[0])
        if site.out.device != x.meta["val"].device:
            raise Unsupported("a tensor made on another device than the input its size comes from")
        shape, others = _sizes(site, x)
        params: dict[str, Any] = {"shape": shape, "dtype": dtype_name(site.out.dtype)}
        if fill is None:
            params["value"] = _fill_value(site, "fill_value")
        op = "new_full" if fill is None else "new_ones" if fill == 1 else "new_zeros"
        return Emit(op, [x, *others], params)

    return row


#: Traced ATen operation -> row. Key: ``str(node.target)``, the operation as torch.export writes it.
