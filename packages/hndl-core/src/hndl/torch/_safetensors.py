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
from typing import Any

import torch

from .._errors import HndlError, Problem, ProblemList
from ..naming import suggestion
from ._module import GraphModule

__all__ = ["FORMAT_VERSION", "load_model", "save"]

#: Written as ``hndl.format`` in the metadata; :func:`load_model` reads the versions it knows.
FORMAT_VERSION = "1"
_SPEC_KEY = "hndl.spec"
_FORMAT_KEY = "hndl.format"
_TIED_KEY = "hndl.tied"  # JSON {alias: stored name}
# safetensors refuses headers above 100 MB; a larger length field means the file is not one.
_MAX_HEADER = 100_000_000


def save(model: GraphModule, path: str | os.PathLike[str]) -> None:
    """Write ``model`` as one ``.safetensors`` file: every parameter and buffer, and its spec in the metadata.

    Tensors are written from the CPU in their own dtype. A tensor registered under several names (tied
    weights) is stored once. :func:`load_model` rebuilds the model from the file alone.

    Raises:
        HndlError: E_SPEC when the graph cannot be written as spec text (see :func:`hndl.dumps`).
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
    metadata = {"format": "pt", _FORMAT_KEY: FORMAT_VERSION, _SPEC_KEY: spec, _TIED_KEY: json.dumps(tied)}
    save_file(tensors, os.fspath(path), metadata=metadata)


def load_model(path: str | os.PathLike[str]) -> GraphModule:
    """Rebuild the model :func:`save` wrote to ``path``: spec from the metadata, weights from the tensors.

    The result is a checked :class:`GraphModule` equal to the saved one: same graph, same tensor values and
    dtypes, tied names tied again. Nothing in the file is executed.

    Raises:
        HndlError: E_SPEC when the file cannot be read, is not safetensors, is truncated, or carries no hndl
            spec (then it holds weights only: build the model and use ``load_state_dict``); the spec's own
            problems as :func:`hndl.loads` and :func:`hndl.build` report them; E_PARAMS listing every weight
            that is missing, unexpected or of the wrong shape for the spec.
    """
    from safetensors import safe_open

    from .._spec_loader import loads
    from ._build import build_module as build

    where = os.fspath(path)
    metadata = _read_metadata(where)
    spec = metadata.get(_SPEC_KEY)
    if spec is None:
        raise _file_error(
            where,
            "holds no hndl spec in its metadata",
            hint="a weights-only file: build the model from its spec, then model.load_state_dict(load_file(path))",
        )
    if metadata.get(_FORMAT_KEY) != FORMAT_VERSION:
        raise _file_error(where, f"has hndl format {metadata.get(_FORMAT_KEY)!r}, this hndl reads {FORMAT_VERSION!r}")
    try:
        tied = json.loads(metadata.get(_TIED_KEY, "{}"))
        if not isinstance(tied, dict) or not all(isinstance(v, str) for v in tied.values()):
            raise ValueError("not a mapping of names")
    except ValueError as exc:
        raise _file_error(where, f"has unreadable {_TIED_KEY!r} metadata: {exc}") from None
    model = build(loads(spec))
    try:
        with safe_open(where, framework="pt", device="cpu") as handle:
            stored = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118 (not a dict)
    except Exception as exc:  # safetensors raises its own error type, OSError, or a torch error for bad dtypes
        raise _file_error(where, f"cannot be read as safetensors: {exc}") from None
    _check_weights(model, stored, tied, where)
    state = {name: stored[tied.get(name, name)] for name in model.state_dict(keep_vars=True)}
    model.load_state_dict(state, strict=True, assign=True)
    for alias, name in tied.items():
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
    assert value is not None  # _check_weights found a tensor for this name
    return value


def _check_weights(model: GraphModule, stored: dict[str, torch.Tensor], tied: dict[str, str], where: str) -> None:
    """Every name of the build is in the file (or tied to one that is) with the built shape, and nothing else."""
    problems = ProblemList()
    slots = model.build_state.tensors
    expected = {name: slot for name, slot in slots.items() if slot.shape is not None}
    for alias, target in tied.items():
        if alias not in expected or target not in stored:
            problems.append_problem(
                Problem("E_PARAMS", f"tied name {alias!r} -> {target!r} does not match the spec", location=where)
            )
    for name, slot in expected.items():
        source = tied.get(name, name)
        if source not in stored:
            problems.append_problem(
                Problem(
                    "E_PARAMS",
                    f"{slot.kind} {name!r} is missing from the file",
                    node=slot.node,
                    op=slot.op,
                    expected=f"{list(slot.shape or ())}",
                    actual="missing",
                    location=where,
                )
            )
        elif tuple(stored[source].shape) != slot.shape:
            problems.append_problem(
                Problem(
                    "E_PARAMS",
                    f"{slot.kind} {name!r} has shape {list(stored[source].shape)} in the file",
                    node=slot.node,
                    op=slot.op,
                    expected=f"{list(slot.shape or ())} (what the spec builds)",
                    actual=f"{list(stored[source].shape)}",
                    location=where,
                )
            )
    for name in stored:
        if name not in expected:
            problems.append_problem(
                Problem(
                    "E_PARAMS",
                    f"the file holds {name!r}, which the spec does not build",
                    actual=name,
                    location=where,
                    hint=suggestion(name, list(expected)),
                )
            )
    problems.raise_if_any(f"weights in {where}")


def _read_metadata(where: str) -> dict[str, str]:
    """The header's ``__metadata__``, after checking the layout: length field, JSON header, data extent."""
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
    except ValueError as exc:
        raise _file_error(where, f"is not a safetensors file: its header is not JSON ({exc})") from None
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        offsets = entry.get("data_offsets") if isinstance(entry, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)):
            raise _file_error(where, f"is not a safetensors file: entry {name!r} has no data offsets")
        end = max(end, offsets[1])
    if 8 + length + end > size:
        raise _file_error(where, f"is truncated: its tensors need {end} bytes of data, it holds {size - 8 - length}")
    metadata = header.get("__metadata__") or {}
    if not isinstance(metadata, dict):
        raise _file_error(where, "is not a safetensors file: its __metadata__ is not a mapping")
    return metadata


def _file_error(where: str, message: str, hint: str | None = None) -> HndlError:
    return HndlError(Problem("E_SPEC", f"model file '{where}' {message}", location=where, hint=hint))
