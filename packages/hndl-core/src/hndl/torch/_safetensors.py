"""One-file models: a ``.safetensors`` file holding the weights and, in its metadata, the spec that rebuilds them.

:func:`save` writes every parameter and buffer of the state_dict once (a tied tensor, one object under several
names, is stored under its first name and the other names are listed in the metadata) and the graph as spec
text (:func:`hndl.dumps`). :func:`load_model` checks the file's layout before reading any tensor, rebuilds the
graph from the spec text (reading spec text never imports or executes anything, and a spec that uses op
``module`` is refused, as :func:`hndl.loads` refuses it by default), checks the weights against the build,
assigns them (dtype and values exactly as saved, so outputs are reproduced bit for bit) and ties the tied
names again. safetensors itself stores raw tensor bytes and a JSON header: no pickle, no code.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Any

import torch

from .._errors import HndlError, Problem, ProblemList
from ..naming import dtype_name, excerpt, suggestion
from ._module import GraphModule

__all__ = ["FORMAT_VERSION", "load_model", "save"]

#: Written as ``hndl.format`` in the metadata; :func:`load_model` reads the versions it knows.
FORMAT_VERSION = "1"
_SPEC_KEY = "hndl.spec"
_FORMAT_KEY = "hndl.format"
_TIED_KEY = "hndl.tied"  # JSON {alias: stored name}
# safetensors refuses headers above 100 MB; a larger length field means the file is not one.
_MAX_HEADER = 100_000_000
_MAX_SIZE = 2**63 - 1


def save(model: GraphModule, path: str | os.PathLike[str]) -> None:
    """Write ``model`` as one ``.safetensors`` file: every parameter and buffer, and its spec in the metadata.

    Tensors are written from the CPU in their own dtype. A tensor registered under several names (tied
    weights) is stored once. :func:`load_model` rebuilds the model from the file alone, so the model's ties
    must be those its spec declares (a node's ``tie``).

    Raises:
        HndlError: E_SPEC when the graph cannot be written as spec text (see :func:`hndl.dumps`), or when the
            model's tied tensors are not those of its spec (tied or untied after it was built).
    """
    from safetensors.torch import save_file

    from .._spec_dumper import dumps

    spec = dumps(model.graph)
    tensors: dict[str, torch.Tensor] = {}
    stored_as: dict[int, str] = {}
    tied: dict[str, str] = {}
    storages: set[tuple[Any, int]] = set()
    for name, value in model.state_dict(keep_vars=True).items():
        first = stored_as.setdefault(id(value), name)
        if first != name:
            tied[name] = first
            continue
        tensor = value.detach().to("cpu").contiguous()
        # safetensors refuses two entries that share memory (views of one tensor); those are copied, not tied.
        storage = (tensor.untyped_storage().data_ptr(), tensor.untyped_storage().nbytes())
        if storage in storages and tensor.numel():
            tensor = tensor.clone()
        storages.add(storage)
        tensors[name] = tensor
    _check_ties_are_the_specs(model, tied)
    metadata = {"format": "pt", _FORMAT_KEY: FORMAT_VERSION, _SPEC_KEY: spec, _TIED_KEY: json.dumps(tied)}
    save_file(tensors, os.fspath(path), metadata=metadata)


_TIE_HINT = (
    "load_model rebuilds ties from the spec: declare them there (Graph.add(..., tie={'weight': 'emb.weight'}), "
    "a node's 'tie:' in a spec file)"
)


def _check_ties_are_the_specs(model: GraphModule, tied: dict[str, str]) -> None:
    """E_SPEC unless the tensors ``model`` holds under several names are exactly those its spec ties: a file
    whose ties the spec does not make could not be loaded (:func:`load_model` refuses it)."""
    from ._build import build_module

    with torch.device("meta"):
        skeleton = build_module(model.graph, model.plan.checked)
    declared, actual = _groups(_spec_ties(skeleton)), _groups(tied)
    problems = ProblemList()
    for group in sorted(actual - declared, key=sorted):
        names = ", ".join(repr(n) for n in sorted(group))
        problems.add("E_SPEC", f"{names} are one tensor in the model, but the spec does not tie them", hint=_TIE_HINT)
    for group in sorted(declared - actual, key=sorted):
        names = ", ".join(repr(n) for n in sorted(group))
        problems.add("E_SPEC", f"the spec ties {names}, but in the model they are not one tensor", hint=_TIE_HINT)
    problems.raise_if_any(f"graph '{model.graph.name}'")


def _groups(ties: dict[str, str]) -> set[frozenset[str]]:
    """``{other name: first name}`` as the sets of names that are one tensor."""
    groups: dict[str, set[str]] = {}
    for alias, head in ties.items():
        groups.setdefault(head, {head}).add(alias)
    return {frozenset(g) for g in groups.values()}


def load_model(path: str | os.PathLike[str], *, allow_imports: bool = False) -> GraphModule:
    """Rebuild the model :func:`save` wrote to ``path``: spec from the metadata, weights from the tensors.

    The result is a checked :class:`GraphModule` equal to the saved one: same graph, same tensor values and
    dtypes, tied names tied again. Nothing in the file is executed.

    The file is untrusted until checked, and nothing is allocated for it before: its layout is read first
    (length field, JSON header, every tensor's dtype, shape and bytes inside the file), the spec is checked and
    built on PyTorch's meta device, and the header's names, shapes, dtypes and ties are compared with that
    build; only then is the model built and are the tensors read.

    Args:
        path: the ``.safetensors`` file.
        allow_imports: as for :func:`hndl.load`: whether the spec may use op ``module``, which imports the
            Python class it names when the model is built. Leave it off for files you did not write.

    Raises:
        HndlError: E_SPEC when the file cannot be read, is not safetensors, is truncated, carries no hndl
            spec (then it holds weights only: build the model and use ``load_state_dict``), or its ``hndl.tied``
            metadata is unreadable or ties names other than the spec ties; the spec's own problems as
            :func:`hndl.loads` and :func:`hndl.build` report them; E_PARAMS listing every weight that is
            missing, unexpected, or of another shape or dtype kind than the spec builds.
    """
    from safetensors import safe_open

    from .._check import check
    from .._spec_loader import loads
    from ._build import build_module

    where = os.fspath(path)
    entries, metadata = _read_header(where)
    spec = metadata.get(_SPEC_KEY)
    if spec is None:
        raise _file_error(
            where,
            "holds no hndl spec in its metadata",
            hint="a weights-only file: build the model from its spec, then model.load_state_dict(load_file(path))",
        )
    if metadata.get(_FORMAT_KEY) != FORMAT_VERSION:
        found = excerpt(metadata.get(_FORMAT_KEY))
        raise _file_error(where, f"has hndl format {found}, this hndl reads {FORMAT_VERSION!r}")
    tied = _read_tied(metadata.get(_TIED_KEY, "{}"), where)
    graph = loads(spec, allow_imports=allow_imports)
    checked = check(graph)
    with torch.device("meta"):
        skeleton = build_module(graph, checked)
    _check_against_build(skeleton, entries, tied, where)
    model = build_module(graph, checked)
    try:
        with safe_open(where, framework="pt", device="cpu") as handle:
            stored = {name: handle.get_tensor(name) for name in entries}
    except Exception as exc:  # safetensors raises its own error type, OSError, or a torch error
        raise _file_error(where, f"cannot be read as safetensors: {_cut(str(exc))}") from None
    spec_ties = _spec_ties(model)  # read before assigning, which makes each name a Parameter of its own
    state = {name: stored[tied.get(name, name)] for name in model.state_dict(keep_vars=True)}
    model.load_state_dict(state, strict=True, assign=True)
    for alias, name in spec_ties.items():
        owner, _, leaf = alias.rpartition(".")
        setattr(model.get_submodule(owner), leaf, _live(model, name))  # one object again, as when saved
    model.build_state.refresh_dtypes(model)  # the file's dtypes are the model's now (a saved .half() model)
    return model


def _live(model: GraphModule, name: str) -> torch.Tensor:
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner)
    value: torch.Tensor | None = module._parameters.get(leaf)
    if value is None:
        value = module._buffers[leaf]
    assert value is not None  # _check_against_build found a tensor for this name
    return value


def _spec_ties(model: GraphModule) -> dict[str, str]:
    """``{other name: first name}`` for every tensor the build registered under several names (the spec's
    ties), grouped as :func:`save` groups them."""
    first: dict[int, str] = {}
    ties: dict[str, str] = {}
    for name, value in model.state_dict(keep_vars=True).items():
        head = first.setdefault(id(value), name)
        if head != name:
            ties[name] = head
    return ties


@dataclass(frozen=True)
class _Entry:
    """A tensor as the file's header describes it."""

    dtype: torch.dtype
    shape: tuple[int, ...]


def _check_against_build(model: GraphModule, entries: dict[str, _Entry], tied: dict[str, str], where: str) -> None:
    """The file's ties are the spec's ties (E_SPEC otherwise); every name of the build is in the file (or tied
    to one that is) with the built shape and a dtype of the built kind, and nothing else is there (E_PARAMS)."""
    slots = model.build_state.tensors
    # What save wrote: the state_dict's names. A non-persistent buffer (rotary's frequencies) is computed at build,
    # so it is neither in the file nor expected there.
    saved = model.state_dict(keep_vars=True)
    expected = {name: slot for name, slot in slots.items() if slot.shape is not None and name in saved}
    spec_ties = _spec_ties(model)

    def group(name: str) -> str:
        return spec_ties.get(name, name)

    def source(name: str) -> str:
        return tied.get(name, name)

    ties = ProblemList()
    hint = _TIE_HINT
    for alias, target in tied.items():
        if alias in entries and alias != target:
            # save stores a tied tensor once; a file holding it twice would have one copy kept and one ignored.
            ties.add(
                "E_SPEC",
                f"the file holds {excerpt(alias)} as a tensor and 'hndl.tied' ties it to {excerpt(target)}: "
                "one of the two stored values would be dropped",
                location=where,
                hint="a tied tensor is stored once, under its first name (as hndl.save writes it)",
            )
        elif alias not in expected:
            ties.add("E_SPEC", f"'hndl.tied' names {excerpt(alias)}, which the spec does not build", location=where)
        elif target not in entries:
            ties.add(
                "E_SPEC",
                f"'hndl.tied' ties {excerpt(alias)} to {excerpt(target)}, which the file does not hold",
                location=where,
            )
        elif target not in expected or group(alias) != group(target):
            ties.add(
                "E_SPEC",
                f"'hndl.tied' ties {excerpt(alias)} to {excerpt(target)}, which the spec does not tie",
                location=where,
                hint=hint,
            )
    for alias, head in spec_ties.items() if not ties else ():  # (a tie refused above would be reported twice)
        if source(alias) != source(head):
            ties.add(
                "E_SPEC",
                f"the spec ties {excerpt(alias)} to {excerpt(head)}, but the file stores them apart",
                location=where,
                hint=hint,
            )
    ties.raise_if_any(f"model file '{where}'")

    problems = ProblemList()
    for name, slot in expected.items():
        entry = entries.get(source(name))
        if entry is None:
            problems.add(
                "E_PARAMS",
                f"{slot.kind} {name!r} is missing from the file",
                node=slot.node,
                op=slot.op,
                expected=f"{list(slot.shape or ())}",
                actual="missing",
                location=where,
            )
        elif entry.shape != slot.shape:
            problems.add(
                "E_PARAMS",
                f"{slot.kind} {name!r} has shape {list(entry.shape)} in the file",
                node=slot.node,
                op=slot.op,
                expected=f"{list(slot.shape or ())} (what the spec builds)",
                actual=f"{list(entry.shape)}",
                location=where,
            )
        elif not _same_kind(entry.dtype, slot.dtype):
            floating = slot.dtype is not None and slot.dtype.is_floating_point
            problems.add(
                "E_PARAMS",
                f"{slot.kind} {name!r} has dtype {dtype_name(entry.dtype)} in the file",
                node=slot.node,
                op=slot.op,
                expected=f"a floating dtype (the spec builds {dtype_name(slot.dtype)})"
                if floating
                else dtype_name(slot.dtype),
                actual=dtype_name(entry.dtype),
                location=where,
            )
    for name in entries:
        if name not in expected:
            problems.add(
                "E_PARAMS",
                f"the file holds {excerpt(name)}, which the spec does not build",
                actual=excerpt(name),
                location=where,
                hint=suggestion(name, list(expected)),
            )
    problems.raise_if_any(f"weights in {where}")


def _same_kind(stored: torch.dtype, built: torch.dtype | None) -> bool:
    """Whether a tensor stored as ``stored`` may take the place of one built as ``built``: any floating dtype
    for a floating one (a model saved after ``.half()`` or ``.double()``), the very dtype otherwise (a
    conversion leaves integer and bool tensors as they are)."""
    if built is None or built.is_floating_point:
        return stored.is_floating_point
    return stored == built


def _read_tied(text: Any, where: str) -> dict[str, str]:
    """The ``hndl.tied`` metadata: JSON ``{other name: stored name}``."""
    try:
        if not isinstance(text, str):
            raise ValueError(f"it is {type(text).__name__}, not text")
        tied = json.loads(text)
        if not isinstance(tied, dict) or not all(isinstance(v, str) for v in tied.values()):
            raise ValueError("not a mapping of names")
    except (ValueError, RecursionError) as exc:
        raise _file_error(where, f"has unreadable {_TIED_KEY!r} metadata: {_cut(str(exc))}") from None
    return tied


#: safetensors' dtype names -> torch dtypes (those this torch has).
_DTYPES: dict[str, torch.dtype] = {
    code: getattr(torch, name)
    for code, name in {
        "F64": "float64",
        "F32": "float32",
        "F16": "float16",
        "BF16": "bfloat16",
        "F8_E4M3": "float8_e4m3fn",
        "F8_E5M2": "float8_e5m2",
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U64": "uint64",
        "U32": "uint32",
        "U16": "uint16",
        "U8": "uint8",
        "BOOL": "bool",
        "C64": "complex64",
    }.items()
    if hasattr(torch, name)
}


def _read_header(where: str) -> tuple[dict[str, _Entry], dict[str, str]]:
    """The tensors the header describes and its ``__metadata__``, after checking the layout: length field, JSON
    header, each tensor's dtype, shape and data offsets (its bytes inside the file, as many as its shape and
    dtype need), metadata of text only. Reads the header only."""
    try:
        size = os.path.getsize(where)
        with open(where, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise _file_error(where, f"is {size} bytes long: not a safetensors file (too short for a header)")
            (length,) = struct.unpack("<Q", head)
            if length > _MAX_HEADER or 8 + length > size:
                what = "truncated" if length <= _MAX_HEADER and size > 8 else "not a safetensors file"
                raise _file_error(
                    where, f"is {what}: its header claims {length} bytes, the file has {size - 8} after the length"
                )
            raw = f.read(length)
    except OSError as exc:
        raise _file_error(where, f"cannot be read: {exc.strerror or exc}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("the header is not a JSON object")
    except RecursionError:  # json's C parser recurses once per level of nesting
        raise _file_error(where, "is not a safetensors file: its header nests too deep") from None
    except ValueError as exc:
        raise _file_error(where, f"is not a safetensors file: its header is not JSON ({exc})") from None
    data = size - 8 - length
    entries: dict[str, _Entry] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        entries[name] = _entry(name, entry, data, where)
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _file_error(where, "is not a safetensors file: its __metadata__ is not a mapping of text")
    return entries, metadata


def _entry(name: str, entry: Any, data: int, where: str) -> _Entry:
    """One tensor of the header, checked: a known dtype, a shape of sizes, and data offsets inside the data
    that span exactly the bytes the shape and dtype need."""
    shown = excerpt(name)
    if not isinstance(entry, dict):
        raise _file_error(where, f"is not a safetensors file: entry {shown} is not a mapping")
    offsets, shape, code = entry.get("data_offsets"), entry.get("shape"), entry.get("dtype")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_size(o) for o in offsets)):
        raise _file_error(where, f"is not a safetensors file: entry {shown} has no data offsets")
    if not (isinstance(shape, list) and all(_is_size(d) for d in shape)):
        raise _file_error(where, f"is not a safetensors file: entry {shown} has no shape")
    dtype = _DTYPES.get(code) if isinstance(code, str) else None
    if dtype is None:
        raise _file_error(where, f"entry {shown} has dtype {excerpt(code)}, which hndl cannot load")
    begin, end = offsets
    if end > data:
        raise _file_error(where, f"is truncated: its tensors need {end} bytes of data, it holds {data}")
    need = _nbytes(shape, dtype.itemsize, data)
    if end - begin != need:
        needs = f"more than the {data} the file holds" if need is None else str(need)
        raise _file_error(
            where, f"is not a safetensors file: entry {shown} has {end - begin} bytes, its shape and dtype need {needs}"
        )
    return _Entry(dtype, tuple(shape))


def _nbytes(shape: list[int], itemsize: int, cap: int) -> int | None:
    """The bytes a tensor of ``shape`` takes, or ``None`` when that is more than ``cap``: multiplied a dim at
    a time and stopped there, so a header of many large dims costs no huge product."""
    if 0 in shape:
        return 0
    size = itemsize
    for d in shape:
        size *= d
        if size > cap:
            return None
    return size


def _cut(text: str, limit: int = 160) -> str:
    """The first line of a message from a parser, cut to ``limit`` characters (HndlError escapes the rest)."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _is_size(value: Any) -> bool:
    """A size or offset: an int from 0 to 2**63-1 (torch's sizes are 64-bit, and so are safetensors' offsets)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SIZE


def _file_error(where: str, message: str, hint: str | None = None) -> HndlError:
    return HndlError(Problem("E_SPEC", f"model file '{where}' {message}", location=where, hint=hint))
