"""A zoo model as a transformers folder: ``config.json`` and the weights in the hub's keys and layouts.

:func:`save_pretrained` is :func:`hndl.zoo.from_pretrained` run backward, from the same two tables, so the two
cannot drift apart:

- the config comes from the entry's row (:mod:`._pretrained`): each parameter is written under the field it is
  read from, each field the entry assumes (``hidden_act``, GPT-2's three dropout rates) with the value the
  entry reproduces, and the result is read back through the row and must give the model's parameters again;
- the weights come from the entry's key rules (``Entry.rules``) run backward: each model tensor goes to the
  checkpoint key the rules would read it from (the first rule that names one: GPT2LMHeadModel's
  ``transformer.``-prefixed keys before GPT2Model's), its layout undone (a transpose transposed back, the parts of
  a split tensor joined), a tied tensor written once under its first name, as transformers writes it. Before
  anything is written, the planned keys, shapes and dtypes are checked against the model through the same
  rules (a meta-tensor load plan), so a folder that would not load back is never written.

Only a zoo entry's own graph has a transformers config: the model's graph must be the entry's graph at its
parameters (the spec text of the two compared), else nothing describes what it computes.
"""

from __future__ import annotations

import contextlib
import difflib
import itertools
import json
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import HndlError, Problem, echo
from ..naming import excerpt

if TYPE_CHECKING:
    import torch

    from .._graph import Graph
    from ..torch import GraphModule
    from ..weights import Layout
    from ._pretrained import Pretrained

__all__ = ["DEFAULT_MAX_SHARD_SIZE", "hub_tensors", "parse_shard_size", "save_pretrained"]

#: transformers' default ``max_shard_size`` (5.x): one file up to this many bytes.
DEFAULT_MAX_SHARD_SIZE = "50GB"

#: Where a field the entry assumes allows several values, the one written: the one that computes what hndl
#: computes (GPT-2's head runs torch's tanh GELU, which transformers calls ``gelu_pytorch_tanh``; its ``gelu_new``
#: is the same formula written out, equal to about 1e-7).
_WRITTEN = {("gpt2", "activation_function"): "gelu_pytorch_tanh"}

_SUFFIXES = {True: ("model", ".safetensors"), False: ("pytorch_model", ".bin")}
# A shard of either format, as transformers names them: model-00001-of-00003.safetensors.
_SHARD = re.compile(r"(model|pytorch_model)-\d{5}-of-\d{5}\.(safetensors|bin)")


def _refuse(message: str, *, expected: Any = None, actual: Any = None, hint: str | None = None) -> HndlError:
    return HndlError(Problem("E_PARAM", message, expected=expected, actual=actual, hint=hint))


# --- what the model is -------------------------------------------------------------------------------------------


def _row(model: Any) -> Pretrained:
    """The from_pretrained row of the zoo entry ``model`` was built from (E_PARAM for any other model)."""
    from ..torch import GraphModule
    from ._entries import ENTRIES
    from ._pretrained import PRETRAINED

    readable = ", ".join(f"zoo:{r.entry}" for r in PRETRAINED.values())
    if not isinstance(model, GraphModule):
        raise _refuse(
            f"save_pretrained writes a built zoo model, not {type(model).__name__}",
            expected=f"hndl.build(hndl.zoo.get(name)) or hndl.zoo.from_pretrained(folder), for {readable}",
            actual=type(model).__name__,
            hint="a transformers model has its own model.save_pretrained(folder)"
            if hasattr(model, "save_pretrained")
            else None,
        )
    name = model.graph.name
    row = next((r for r in PRETRAINED.values() if r.entry == name), None)
    if row is not None:
        return row
    what = f"zoo:{name} has no transformers layout" if name in ENTRIES else f"graph {name!r} is not a zoo entry"
    raise _refuse(
        f"{what}: save_pretrained writes the entries hndl.zoo.from_pretrained reads",
        expected=readable,
        actual=excerpt(name),
        hint="hndl.save(model, 'model.safetensors') writes any model with its spec (hndl.load_model reads it back)",
    )


def _entry_graph(model: GraphModule, row: Pretrained, get: Callable[..., Graph]) -> bool:
    """Whether the head is tied; E_PARAM unless ``model.graph`` is the entry's graph at its parameters (``get``:
    :func:`hndl.zoo.get`, passed in by the package, which imports this module)."""
    from .._spec_dumper import dumps

    params = dict(model.graph.params)
    try:
        reference = get(row.entry, **params)
    except HndlError as exc:
        raise _refuse(
            f"graph {row.entry!r} has parameters zoo:{row.entry} does not: {exc.problems[0].message}",
            expected=f"the parameters of zoo:{row.entry}",
            actual=sorted(params),
            hint="build it with hndl.zoo.get or hndl.zoo.from_pretrained",
        ) from exc
    tied = row.tie is not None and row.tie.applied(model.graph)
    if tied:
        row.tie.apply(reference)  # type: ignore[union-attr]  # (tied is False without a tie)
    ours, theirs = dumps(model.graph).splitlines(), dumps(reference).splitlines()
    if ours != theirs:
        changed = _first_difference(theirs, ours)
        hint = (
            "save it with hndl.save(model, 'model.safetensors') (hndl.load_model reads it back), or change "
            f"only zoo:{row.entry}'s parameters (hndl.zoo.get({row.entry!r}, ...))"
        )
        if "tie_word_embeddings" in params and "tie:" in (changed[1] or ""):
            # A head tied by hand (a node's tie set after get), as zoo:llama had to be before it had the parameter.
            hint = f"a tied head is a parameter: hndl.zoo.get({row.entry!r}, tie_word_embeddings=True)"
        raise _refuse(
            f"graph {row.entry!r} is not zoo:{row.entry} as its parameters build it (edited after hndl.zoo.get), so "
            "no transformers config describes it",
            expected=_cut(changed[0] or "(no such line)"),
            actual=_cut(changed[1] or "(no such line)"),
            hint=hint,
        )
    return tied


def _cut(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _first_difference(a: list[str], b: list[str]) -> tuple[str | None, str | None]:
    """The first lines of spec text that differ, as ``(entry's, model's)`` (None: the line is not there)."""
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            return (a[i1].strip() if i1 < i2 else None, b[j1].strip() if j1 < j2 else None)
    return (None, None)


# --- config.json ----------------------------------------------------------------------------------------------


def _config(row: Pretrained, params: dict[str, Any], tied: bool, dtype: str) -> dict[str, Any]:
    config: dict[str, Any] = {}
    written_by: dict[str, str] = {}
    for name, source in row.params.items():
        # A parameter read through a function of the config (rope_theta from transformers 4's or 5's field) is
        # written under its own name, which is the config's where the entry has it (LlamaConfig's rope_theta).
        key = source if isinstance(source, str) else name
        if key in written_by and config[key] != params[name]:
            raise _refuse(
                f"zoo:{row.entry}'s {written_by[key]!r} and {name!r} are both config.json's {key!r}, "
                f"but they differ ({echo(config[key])} and {echo(params[name])})",
                hint="give them one value",
            )
        config[key], written_by[key] = params[name], name
    for req in row.requires:
        if req.key in config:
            continue
        if req.same_as is not None:
            config[req.key] = config.get(req.same_as, row.defaults.get(req.same_as))
        else:
            config[req.key] = _WRITTEN.get((row.model_type, req.key), req.allowed[0])
    if row.tie is not None:
        config[row.tie.key] = tied
    config = {
        "architectures": [row.architecture],
        "model_type": row.model_type,
        "torch_dtype": dtype,
        **dict(sorted(config.items())),
    }
    _check_reads_back(row, config, params)
    return config


def _check_reads_back(row: Pretrained, config: dict[str, Any], params: dict[str, Any]) -> None:
    """E_PARAM unless from_pretrained's reading of ``config`` gives ``params`` back."""
    where = f"the config.json written for zoo:{row.entry}"
    try:
        read = row.configuration(config, {}, where)
        row.tied(config, where)
    except HndlError as exc:
        raise _refuse(
            f"zoo:{row.entry}'s parameters make a config hndl.zoo.from_pretrained refuses: {exc.problems[0].message}",
            actual=exc.problems[0].actual,
        ) from exc
    for name, value in params.items():
        if name in row.params and not _same(read.get(name), value):
            raise _refuse(
                f"zoo:{row.entry}'s {name!r} = {echo(value)} does not survive config.json: it reads back as "
                f"{echo(read.get(name))}",
                expected=echo(value),
                actual=echo(read.get(name)),
            )


def _same(a: Any, b: Any) -> bool:
    """Equal, and a boolean only to a boolean (Python's ``True == 1``); an int equals the same float."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b) and (type(a) is type(b) or {type(a), type(b)} <= {int, float})


def _dtype(model: GraphModule) -> str:
    """The dtype transformers records: the first floating parameter's (``float32`` when there is none)."""
    import torch

    for tensor in model.parameters():
        if tensor.is_floating_point():
            return str(tensor.dtype).removeprefix("torch.")
    return str(torch.float32).removeprefix("torch.")


# --- the weights ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HubTensor:
    """One tensor of the folder: its key, shape and dtype (known before any value is made), and how to make it."""

    key: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    make: Callable[[], torch.Tensor]

    @property
    def nbytes(self) -> int:
        size = self.dtype.itemsize
        for n in self.shape:
            size *= n
        return size


class _NotInvertible(ValueError):
    """A layout the writer cannot undo (a flatten forgets the shape; a join forgets where the parts met)."""


def hub_tensors(model: GraphModule, rules: Sequence[Any], entry: str) -> list[HubTensor]:
    """``model``'s tensors under the checkpoint keys ``rules`` read (the rules run backward, layouts undone), each
    tied tensor once, in the model's order. Nothing is computed: each :class:`HubTensor` makes its value when
    asked.

    Raises:
        HndlError: E_PARAM for a model tensor no rule writes or a layout that cannot be undone.
    """
    import torch

    from ..weights._load import _candidates, _match
    from ..weights._rules import as_rules

    rules = as_rules(rules)
    state = model.state_dict(keep_vars=True)
    first: dict[int, str] = {}
    heads = [name for name, value in state.items() if first.setdefault(id(value), name) == name]
    out: list[HubTensor] = []
    done: set[str] = set()  # model keys written (a split tensor's parts are written with the first)
    for name in heads:
        if name in done:
            continue
        key = _candidates(rules, name)[0]
        found = _match(rules, key)
        targets = [t for t, _ in found.targets]
        if name not in targets:  # (the name itself, and a broad rule takes it elsewhere)
            raise _refuse(
                f"zoo:{entry}'s key map writes no checkpoint key for {name!r}",
                actual=name,
                hint="the entry's rules (hndl.zoo.entry(name).rules) must name every tensor of the model",
            )
        missing = [t for t in targets if t not in state]
        if len(found.sources) != 1 or missing:
            why = (
                f"it joins {len(found.sources)} checkpoint keys into one"
                if len(found.sources) != 1
                else f"it also fills {missing[0]!r}, which the model does not have"
            )
            raise _refuse(f"rule '{found.rule}' of zoo:{entry} cannot be run backward: {why}", actual=name)
        layouts = [layout for _, layout in found.targets]
        values = [state[t] for t in targets]
        try:
            fake = _undo(layouts, [torch.empty(v.shape, dtype=v.dtype, device="meta") for v in values])
        except _NotInvertible as exc:
            raise _refuse(f"rule '{found.rule}' of zoo:{entry} cannot be run backward: {exc}", actual=name) from None
        out.append(HubTensor(key, tuple(fake.shape), fake.dtype, _maker(layouts, values)))
        done.update(targets)
    return out


def _maker(layouts: list[Layout], values: list[torch.Tensor]) -> Callable[[], torch.Tensor]:
    def make() -> torch.Tensor:
        return _undo(layouts, [v.detach().to("cpu") for v in values]).contiguous()

    return make


def _undo(layouts: list[Layout], tensors: list[torch.Tensor]) -> torch.Tensor:
    """The checkpoint tensor that ``layouts`` (one per model tensor a rule fills from it) turn into ``tensors``."""
    from ..weights import Chain

    if len(layouts) == 1:
        return _undo_one(layouts[0], tensors[0])
    # A split: each part is (a common chain, then) rows or per-head rows of the one checkpoint tensor.
    chains = [layout.layouts if isinstance(layout, Chain) else (layout,) for layout in layouts]
    prefixes = {chain[:-1] for chain in chains}
    if len(prefixes) != 1:
        raise _NotInvertible("its parts are read in different layouts")
    joined = _join([chain[-1] for chain in chains], tensors)
    for layout in reversed(next(iter(prefixes))):
        joined = _undo_one(layout, joined)
    return joined


def _undo_one(layout: Layout, tensor: torch.Tensor) -> torch.Tensor:
    from ..weights import Chain, Same, Transpose

    if isinstance(layout, Same):
        return tensor
    if isinstance(layout, Transpose):
        return tensor.transpose(layout.dim0, layout.dim1)
    if isinstance(layout, Chain):
        for part in reversed(layout.layouts):
            tensor = _undo_one(part, tensor)
        return tensor
    raise _NotInvertible(f"layout '{layout}' does not say how to make the checkpoint's tensor back")


def _join(parts: list[Layout], tensors: list[torch.Tensor]) -> torch.Tensor:
    """The fused tensor whose :class:`~hndl.weights.Rows` (or :class:`~hndl.weights.PerHead`) parts are
    ``tensors``: the parts in order, covering it once."""
    import torch

    from ..weights import PerHead, Rows

    split = [p for p in parts if isinstance(p, (Rows, PerHead))]
    if len(split) != len(parts) or len({(type(p), p.dim, getattr(p, "heads", None)) for p in split}) != 1:
        raise _NotInvertible("its parts are not rows of one tensor along one dim")
    order = sorted(range(len(split)), key=lambda i: split[i].start)
    edges = [(split[i].start, split[i].stop) for i in order]
    if edges[0][0] != 0 or edges[-1][1] != 1 or any(a[1] != b[0] for a, b in itertools.pairwise(edges)):
        raise _NotInvertible("its parts do not cover the tensor once")
    first = split[0]
    dim = first.dim
    if isinstance(first, Rows):
        return torch.cat([tensors[i] for i in order], dim=dim)
    heads = first.heads
    d = dim % tensors[0].dim()
    return torch.cat([tensors[i].unflatten(d, (heads, -1)) for i in order], dim=d + 1).flatten(d, d + 1)


def _check_loads_back(model: GraphModule, tensors: list[HubTensor], rules: Sequence[Any], entry: str) -> None:
    """Plan from_pretrained's load of the planned keys, shapes and dtypes into ``model`` (no value is made):
    every tensor filled, in its shape, and nothing left over, or the folder is not written."""
    import torch

    from ..weights._load import check_state_dict
    from ..weights._sources import Checkpoint, Entry

    checkpoint = Checkpoint(f"the weights written for zoo:{entry}")
    for t in tensors:
        fake = torch.empty(t.shape, dtype=t.dtype, device="meta")
        checkpoint.entries[t.key] = Entry(t.shape, t.dtype, None, _constant(fake))
    check_state_dict(
        model, checkpoint, rules, into=f"zoo:{entry}", title=f"zoo:{entry}: the folder would not load back"
    )


def _constant(value: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: value


# --- writing ----------------------------------------------------------------------------------------------------


def parse_shard_size(size: Any) -> int:
    """``max_shard_size`` in bytes: an int, or transformers' text (``"5GB"``: 10**9 bytes each, ``"500MB"``,
    ``"100KB"``, ``"2GiB"``: 2**30 each, ``"512MiB"``, ``"64KiB"``).

    Raises:
        HndlError: E_PARAM for anything else.
    """
    units = {"GIB": 2**30, "MIB": 2**20, "KIB": 2**10, "GB": 10**9, "MB": 10**6, "KB": 10**3, "B": 1}
    if isinstance(size, int) and not isinstance(size, bool) and size > 0:
        return size
    if isinstance(size, str):
        m = re.fullmatch(r"\s*([0-9]{1,15})\s*([A-Za-z]*)\s*", size)
        if m is not None and m.group(2).upper() in units and int(m.group(1)) > 0:
            return int(m.group(1)) * units[m.group(2).upper()]
    raise _refuse(
        f"max_shard_size={excerpt(size)} is no size",
        expected="a positive number of bytes, or text as transformers takes it: '5GB', '500MB', '2GiB'",
        actual=excerpt(size),
    )


def _shards(tensors: list[HubTensor], limit: int) -> list[list[HubTensor]]:
    """The tensors in files of at most ``limit`` bytes, in order, as transformers (huggingface_hub) splits them:
    a file is closed when the next tensor would not fit; a tensor larger than ``limit`` has a file of its own."""
    shards: list[list[HubTensor]] = []
    current: list[HubTensor] = []
    size = 0
    for t in tensors:
        if t.nbytes > limit:
            shards.append([t])
            continue
        if current and size + t.nbytes > limit:
            shards.append(current)
            current, size = [], 0
        current.append(t)
        size += t.nbytes
    if current or not shards:
        shards.append(current)
    return shards


def _folder(folder: Any) -> Path:
    if not isinstance(folder, (str, os.PathLike)):
        raise _refuse(
            f"save_pretrained writes into a folder, not {type(folder).__name__}",
            expected="a path (str or os.PathLike)",
            actual=excerpt(folder),
        )
    path = Path(os.fspath(folder))
    try:
        if path.exists() and not path.is_dir():
            raise _refuse(f"'{path}' is a file: save_pretrained writes a folder", actual=str(path))
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _refuse(f"cannot make the folder '{path}': {exc.strerror or exc}", actual=str(path)) from None
    return path


def _write(
    folder: Path, config: dict[str, Any], tensors: list[HubTensor], limit: int, safe: bool, parameters: int
) -> None:
    """Every file written under a temporary name, then renamed into place (the config last)."""
    stem, suffix = _SUFFIXES[safe]
    shards = _shards(tensors, limit)
    names = (
        [f"{stem}{suffix}"]
        if len(shards) == 1
        else [f"{stem}-{i + 1:05d}-of-{len(shards):05d}{suffix}" for i in range(len(shards))]
    )
    index = f"{stem}{suffix}.index.json"
    files: dict[str, Callable[[Path], None]] = {}
    for name, shard in zip(names, shards, strict=True):
        files[name] = _shard_writer(shard, safe)
    if len(shards) > 1:
        weight_map = {t.key: name for name, shard in zip(names, shards, strict=True) for t in shard}
        body = {
            "metadata": {"total_parameters": parameters, "total_size": sum(t.nbytes for t in tensors)},
            "weight_map": weight_map,
        }
        files[index] = _text_writer(json.dumps(body, indent=2, sort_keys=True) + "\n")
    files["config.json"] = _text_writer(json.dumps(config, indent=2) + "\n")
    from safetensors import SafetensorError

    temporary = folder
    try:
        for name, write in files.items():
            temporary = folder / f".{name}.tmp"
            write(temporary)
            os.replace(temporary, folder / name)
        _remove_stale(folder, set(files))
    except (OSError, SafetensorError) as exc:
        if temporary != folder:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise _refuse(f"cannot write into '{folder}': {reason}", actual=str(folder)) from None


def _shard_writer(shard: list[HubTensor], safe: bool) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        import torch

        values: dict[str, torch.Tensor] = {}
        storages: set[int] = set()
        for t in shard:
            value = t.make()
            if value.numel() and value.untyped_storage().data_ptr() in storages:
                value = value.clone()  # safetensors refuses two entries in one memory (views of one tensor)
            storages.add(value.untyped_storage().data_ptr())
            values[t.key] = value
        if safe:
            from safetensors.torch import save_file

            save_file(values, os.fspath(path), metadata={"format": "pt"})
        else:
            torch.save(values, path)

    return write


def _text_writer(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(text, encoding="utf-8")

    return write


def _remove_stale(folder: Path, written: set[str]) -> None:
    """Remove weights a previous save left that a loader would read instead of (or beside) the new ones: the other
    format's file, a shard or index of another split. Nothing else in the folder is touched."""
    loadable = {
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "pytorch_model.bin.index.json",
    }
    for path in folder.iterdir():
        if path.name in written or not path.is_file():
            continue
        if path.name in loadable or _SHARD.fullmatch(path.name):
            path.unlink()


def save_pretrained(
    model: GraphModule,
    folder: str | os.PathLike[str],
    *,
    safe_serialization: bool = True,
    max_shard_size: int | str = DEFAULT_MAX_SHARD_SIZE,
    get: Callable[..., Graph],
) -> None:
    """See :func:`hndl.zoo.save_pretrained`; ``get`` is :func:`hndl.zoo.get`."""
    import torch

    from ..torch._safetensors import _check_ties_are_the_specs, _spec_ties
    from ._entries import ENTRIES

    if not isinstance(safe_serialization, bool):
        raise _refuse("safe_serialization must be True or False", actual=excerpt(safe_serialization))
    limit = parse_shard_size(max_shard_size)
    row = _row(model)
    tied = _entry_graph(model, row, get)
    meta = [n for n, t in model.state_dict(keep_vars=True).items() if t.device.type == "meta"]
    if meta:
        raise _refuse(
            f"{meta[0]!r} of zoo:{row.entry} is on the meta device: it has no values to write",
            actual=f"{len(meta)} meta tensor(s)",
            hint="build the model on a real device, or load its weights first",
        )
    _check_ties_are_the_specs(model, _spec_ties(model))  # (a head untied after the build: its values would be lost)
    config = _config(row, dict(model.graph.params), tied, _dtype(model))
    rules = row.rules if row.rules is not None else ENTRIES[row.entry].rules
    tensors = hub_tensors(model, rules, row.entry)
    _check_loads_back(model, tensors, rules, row.entry)
    with torch.no_grad():
        parameters = sum(p.numel() for p in model.parameters())  # (tied once, as transformers counts)
        _write(_folder(folder), config, tensors, limit, safe_serialization, parameters)
