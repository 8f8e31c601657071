"""Checkpoints opened for reading: every key's shape and dtype known up front, values read one at a time.

:func:`open_checkpoint` takes what ``hndl.load_state_dict`` accepts as its ``source``: a mapping of tensors, a
``.safetensors`` file, a ``.bin``/``.pt``/``.pth`` file (``torch.load(weights_only=True)``), an ``*.index.json``
of a sharded checkpoint (transformers' ``model.safetensors.index.json`` or ``pytorch_model.bin.index.json``), or a
folder holding one of these. Files are read lazily: safetensors through ``safe_open`` (the header now, one tensor
when asked), zip-format torch files memory-mapped (``mmap=True``: the pickle now, the bytes of one tensor when
touched), so loading a sharded checkpoint never holds more than the model plus the tensor being copied. Only a
torch file in the legacy (pre-1.6, non-zip) format is read whole.

Everything that makes a path unreadable is ``E_PARAMS`` naming the file; nothing from a file is executed
(``weights_only=True`` refuses pickled code; safetensors holds raw bytes).
"""

from __future__ import annotations

import functools
import json
import os
import stat
import warnings
import zipfile
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .._errors import HndlError, Problem, clip, echo, echo_list
from ..naming import dtype_name, excerpt, printable

__all__ = ["Checkpoint", "Entry", "Unreadable", "inside", "open_checkpoint", "read_json"]

_TORCH_SUFFIXES = (".bin", ".pt", ".pth")
_SUFFIXES = (".safetensors", *_TORCH_SUFFIXES)
#: An index lists key names and file names only (a 600B-parameter model's is about 10 MB); a larger one is not an
#: index.
MAX_INDEX_BYTES = 64 * 1024 * 1024
#: How deep a JSON file hndl reads (an index, a config.json) may nest: theirs nest three or four levels.
MAX_JSON_DEPTH = 64
# What a transformers folder names its weights, in the order transformers prefers them.
_FOLDER_FILES = (
    "model.safetensors.index.json",
    "model.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model.bin",
)
_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "C64": "complex64",
}


@dataclass(frozen=True)
class Entry:
    """One checkpoint key: its shape and dtype, the file that holds it (``None`` for a mapping), how to read its
    value, and why it cannot be loaded when it cannot (not a tensor; a sparse or quantized tensor, which
    ``copy_`` into a dense tensor refuses): then ``dtype`` is ``None``."""

    shape: tuple[int, ...]
    dtype: torch.dtype | None
    file: str | None
    read: Callable[[], Any]
    refusal: str | None = None
    kind: str = "tensor"  # what the value is, for messages


class Checkpoint:
    """A checkpoint's keys, in its order, each an :class:`Entry`. A context manager: leaving it closes files.

    Attributes:
        name: how messages name it (``'ckpt/model.safetensors'``, ``the mapping``).
        entries: ``{key: Entry}``.
        files: the files read, in order (shards once each).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.entries: dict[str, Entry] = {}
        self.files: list[str] = []
        self._stack = ExitStack()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


class Unreadable(ValueError):
    """Why a JSON file was not read (:func:`read_json`); the caller names the file and the error code."""


def read_json(path: Path, limit: int) -> Any:
    """The JSON value in the regular file ``path``, read only when it is one, of at most ``limit`` bytes, nesting
    at most :data:`MAX_JSON_DEPTH` levels.

    A FIFO, a device (``/dev/zero``) or a folder is refused without reading it (opened non-blocking, so a FIFO
    with no writer does not block); the size is checked on what is read, not on what ``stat`` says (``/proc``
    files say 0).

    Raises:
        FileNotFoundError: there is no such file.
        Unreadable: anything else, with the reason as its message.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise Unreadable(f"cannot be read: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Unreadable(f"is not a regular file (it is {_file_kind(mode)})")
        if os.fstat(fd).st_size > limit:  # refused unread; the read below is capped for a file that grows
            raise Unreadable(f"is larger than {limit:,} bytes")
        try:
            raw = f.read(limit + 1)
        except OSError as exc:
            raise Unreadable(f"cannot be read: {exc.strerror or exc}") from None
    if len(raw) > limit:
        raise Unreadable(f"is larger than {limit:,} bytes")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:  # json's parser recurses once per level
        raise Unreadable(f"nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise Unreadable(f"is not JSON ({str(exc)[:160]})") from None
    if _depth_over(data, MAX_JSON_DEPTH):
        raise Unreadable(f"nests deeper than {MAX_JSON_DEPTH} levels")
    return data


def _file_kind(mode: int) -> str:
    kinds = (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a file")


def _depth_over(data: Any, limit: int) -> bool:
    """Whether ``data`` (parsed JSON) nests more than ``limit`` lists and objects deep; iterative, so a deep value
    costs no recursion here and none later (a message's repr, a comparison)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return True
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return False


def inside(folder: Path, path: Path) -> bool:
    """Whether ``path``, its links followed, is a file inside ``folder`` (links followed too): a file a folder
    names (an index's shard, a folder's weights) must not be a link to a file elsewhere. One place elsewhere is
    allowed: a hub cache's ``blobs`` folder, where every file of a snapshot (``<repo>/snapshots/<revision>/``)
    links to (``<repo>/blobs/<hash>``), as ``huggingface_hub`` downloads them."""
    root = Path(os.path.realpath(folder))
    real = Path(os.path.realpath(path))
    roots = [root]
    if root.parent.name == "snapshots":
        roots.append(root.parent.parent / "blobs")
    return any(real.is_relative_to(r) and real != r for r in roots)


def _error(where: str, message: str, hint: str | None = None) -> HndlError:
    # A path is the caller's text: cut, so a very long one cannot push the reason off the message's line.
    shown = clip(printable(where))
    return HndlError(Problem("E_PARAMS", f"'{shown}' {message}", location=shown, hint=hint))


def open_checkpoint(source: Any) -> Checkpoint:
    """``source`` opened as a :class:`Checkpoint` (see the module docstring for what it may be).

    Raises:
        HndlError: E_PARAMS for a source that is no checkpoint: a path that does not exist, a file of another
            kind, a file that does not read as what its name says, an index that names files it should not.
    """
    if isinstance(source, Mapping):
        return _from_mapping(source, "the state_dict")
    if isinstance(source, torch.nn.Module):
        raise HndlError(
            Problem(
                "E_PARAMS",
                f"the source is a module ({type(source).__name__}), not its weights",
                expected="a state_dict, a checkpoint file or a checkpoint folder",
                actual=type(source).__name__,
                hint="pass module.state_dict()",
            )
        )
    if not isinstance(source, (str, os.PathLike)):
        raise HndlError(
            Problem(
                "E_PARAMS",
                f"cannot read weights from {type(source).__name__}",
                expected="a state_dict, a path to .safetensors/.bin/.pt, an *.index.json or a checkpoint folder",
                actual=excerpt(source),
            )
        )
    path = Path(os.fspath(source))
    where = str(path)
    try:
        is_folder, exists = path.is_dir(), path.exists()
    except OSError as exc:  # a name too long for the file system, a path through a file: nothing to read there
        raise _error(where, f"cannot be looked up ({exc.strerror or type(exc).__name__})") from None
    if is_folder:
        return _from_folder(path)
    if not exists:
        raise _error(where, "does not exist")
    if path.name.endswith(".json"):
        return _from_index(path)
    if path.suffix in _SUFFIXES:
        checkpoint = Checkpoint(f"'{printable(where)}'")
        try:
            _add_file(checkpoint, path, None)
        except BaseException:
            checkpoint._stack.close()
            raise
        return checkpoint
    raise _error(
        where,
        "is not a checkpoint",
        hint="pass a .safetensors, .bin, .pt or .pth file, an *.index.json, or a folder holding one",
    )


def _from_mapping(source: Mapping[Any, Any], name: str) -> Checkpoint:
    checkpoint = Checkpoint(name)
    for key, value in source.items():
        if not isinstance(key, str):
            raise HndlError(
                Problem(
                    "E_PARAMS",
                    f"{name} has a key that is not a string: {excerpt(key)}",
                    expected="str keys, as state_dict() makes",
                    actual=type(key).__name__,
                )
            )
        if not isinstance(value, torch.Tensor):
            kind = type(value).__name__
            checkpoint.entries[key] = Entry((), None, None, _constant(value), f"holds {kind}, not a tensor", kind)
        elif value.layout != torch.strided or value.is_quantized:
            kind = f"a quantized {dtype_name(value.dtype)} tensor" if value.is_quantized else f"a {value.layout} tensor"
            refusal = f"holds {kind}, which cannot be copied into a model's dense tensor"
            hint = "dequantize it" if value.is_quantized else "make it dense"
            checkpoint.entries[key] = Entry((), None, None, _constant(value), f"{refusal} ({hint} first)", kind)
        elif value.device.type == "meta":
            # Refused in the plan, before anything is copied: copy_ from it fails only when reached, after the
            # tensors before it were overwritten.
            refusal = "is on the meta device: it has a shape and a dtype but no values (load real tensors)"
            checkpoint.entries[key] = Entry((), None, None, _constant(value), refusal, "a meta tensor")
        else:
            checkpoint.entries[key] = Entry(tuple(value.shape), value.dtype, None, _constant(value))
    return checkpoint


def _constant(value: Any) -> Callable[[], Any]:
    return lambda: value


def _from_folder(folder: Path) -> Checkpoint:
    for name in _FOLDER_FILES:
        candidate = folder / name
        if candidate.is_file():
            return (
                _from_index(_checked_inside(folder, candidate))
                if name.endswith(".json")
                else _chosen(folder, candidate)
            )
    indexes = sorted(p for p in folder.glob("*.index.json") if p.is_file())
    if len(indexes) == 1:
        return _from_index(_checked_inside(folder, indexes[0]))
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in _SUFFIXES)
    if not indexes and len(files) == 1:
        return _chosen(folder, files[0])
    found = [p.name for p in indexes] or [p.name for p in files]
    raise _error(
        str(folder),
        "holds no checkpoint hndl can choose" + (f": {echo_list(found, 6, quote=False)}" if found else ""),
        hint="a folder holds model.safetensors, pytorch_model.bin or one *.index.json; "
        + ("pass the file to load" if found else "pass the checkpoint's own path"),
    )


def _checked_inside(folder: Path, path: Path) -> Path:
    """``path``, a file hndl chose in ``folder``, when it is one (not a link to a file elsewhere)."""
    if not inside(folder, path):
        raise _error(
            str(path),
            f"is a link to {str(Path(os.path.realpath(path)))!r}, outside the folder {str(folder)!r}",
            hint="a checkpoint's files are in its folder: copy the file there, or pass the file itself",
        )
    return path


def _chosen(folder: Path, path: Path) -> Checkpoint:
    return open_checkpoint(_checked_inside(folder, path))


def _from_index(index: Path) -> Checkpoint:
    """A sharded checkpoint: the index's ``weight_map`` says which shard (a file beside it) holds each key."""
    where = str(index)
    try:
        data = read_json(index, MAX_INDEX_BYTES)
    except FileNotFoundError:
        raise _error(where, "does not exist") from None
    except Unreadable as exc:
        raise _error(where, f"{exc}: not a checkpoint index") from None
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise _error(
            where,
            "is not a checkpoint index: it has no 'weight_map' of key names to file names",
            hint='an index is {"weight_map": {"key": "model-00001-of-00002.safetensors", ...}}',
        )
    checkpoint = Checkpoint(f"'{printable(where)}'")
    try:
        shards: dict[str, Checkpoint] = {}
        for key, file in weight_map.items():
            if file not in shards:
                shards[file] = _shard(checkpoint, index, file)
            entry = shards[file].entries.get(key)
            if entry is None:
                raise _error(where, f"places {echo(key)} in {echo(file)}, which does not hold it")
            checkpoint.entries[key] = entry
    except BaseException:
        checkpoint._stack.close()
        raise
    return checkpoint


def _shard(checkpoint: Checkpoint, index: Path, file: str) -> Checkpoint:
    where = str(index)
    shown = echo(file)
    # A shard is a file beside the index, named plainly: never a path that reaches elsewhere.
    if not file or file != Path(file).name or file in (".", "..") or "\\" in file or "\x00" in file:
        raise _error(where, f"names shard {shown}, which is not a file name beside the index")
    path = index.parent / file
    if Path(file).suffix not in _SUFFIXES:
        raise _error(where, f"names shard {shown}, which is not a .safetensors, .bin, .pt or .pth file")
    try:
        found = path.is_file()
    except OSError as exc:  # a name too long for the file system
        raise _error(where, f"names shard {shown}, which cannot be read: {exc.strerror or exc}") from None
    if not found:
        raise _error(where, f"names shard {shown}, which is not in {str(index.parent)!r}")
    if not inside(index.parent, path):
        raise _error(
            where,
            f"names shard {shown}, a link to {str(Path(os.path.realpath(path)))!r}, outside {str(index.parent)!r}",
            hint="a checkpoint's shards are files in its folder: copy the file there instead of linking to it",
        )
    shard = Checkpoint(file)
    _add_file(shard, path, checkpoint._stack)
    checkpoint.files.extend(shard.files)
    return shard


def _add_file(checkpoint: Checkpoint, path: Path, stack: ExitStack | None) -> None:
    """Read ``path``'s keys into ``checkpoint`` (its values stay in the file until read)."""
    stack = stack if stack is not None else checkpoint._stack
    checkpoint.files.append(str(path))
    if path.suffix == ".safetensors":
        _add_safetensors(checkpoint, path, stack)
    else:
        _add_torch(checkpoint, path)


def _add_safetensors(checkpoint: Checkpoint, path: Path, stack: ExitStack) -> None:
    from safetensors import safe_open

    where = str(path)
    try:
        handle = stack.enter_context(safe_open(where, framework="pt", device="cpu"))
        keys = list(handle.keys())
        shapes = {}
        for key in keys:
            part = handle.get_slice(key)
            shapes[key] = (tuple(int(n) for n in part.get_shape()), str(part.get_dtype()))
    except Exception as exc:  # safetensors' own error type, OSError
        raise _error(where, f"cannot be read as safetensors: {exc}") from None
    for key, (shape, code) in shapes.items():
        dtype = getattr(torch, _SAFETENSORS_DTYPES.get(code, ""), None)
        if not isinstance(dtype, torch.dtype):
            raise _error(where, f"holds {echo(key)} in dtype {echo(code)}, which this torch cannot read")
        checkpoint.entries[key] = Entry(shape, dtype, where, functools.partial(_read_safetensors, handle, key, where))


def _read_safetensors(handle: Any, key: str, where: str) -> torch.Tensor:
    try:
        tensor: torch.Tensor = handle.get_tensor(key)
    except Exception as exc:
        raise _error(where, f"cannot read {echo(key)}: {excerpt(str(exc), 300)}") from None
    return tensor


def _add_torch(checkpoint: Checkpoint, path: Path) -> None:
    where = str(path)
    # Zip-format files (every torch.save since 1.6) are memory-mapped: the pickle is read now, each tensor's
    # bytes when it is touched. The legacy format cannot be mapped and is read whole.
    mmap = zipfile.is_zipfile(where)
    try:
        # torch warns about what it meets in a file it then fails to read; the error says it better, so its
        # warnings are passed on only when the file reads.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            loaded = torch.load(where, map_location="cpu", weights_only=True, mmap=mmap)
        for warning in caught:
            warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
    except Exception as exc:  # UnpicklingError (refused code), RuntimeError (not a torch file), OSError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise _error(
            where,
            f"cannot be read as a torch checkpoint with weights_only=True: {excerpt(first, 200)}",
            hint="hndl never unpickles code: save tensors only (torch.save(model.state_dict(), path))",
        ) from None
    if not isinstance(loaded, Mapping):
        raise _error(where, f"holds {type(loaded).__name__}, not a mapping of names to tensors")
    nested = [
        k for k, v in loaded.items() if isinstance(v, Mapping) and any(isinstance(t, torch.Tensor) for t in v.values())
    ]
    if nested and not any(isinstance(v, torch.Tensor) for v in loaded.values()):
        raise _error(
            where,
            f"holds a training checkpoint (keys {echo_list(list(loaded), 6)}), not a state_dict",
            hint=f"the tensors are under {echo(nested[0])}: pass torch.load(path, weights_only=True)[{echo(nested[0])}]",
        )
    part = _from_mapping(loaded, f"'{printable(where)}'")
    for key, entry in part.entries.items():
        checkpoint.entries[key] = Entry(entry.shape, entry.dtype, where, entry.read, entry.refusal, entry.kind)
