"""Hostile inputs to the weight loaders (issue 40): ``config.json`` files for ``hndl.zoo.from_pretrained``,
``*.index.json`` files and state dicts for ``hndl.load_state_dict``. Each once raised something other than
``HndlError``, took unbounded work or memory, or echoed megabytes. The regression tests
(``tests/core/test_loading_regressions.py``) load each of them, and the fuzzer (``tests/fuzz/fuzz_specs.py``) runs
them first and then mutates the configs.

Files that are not data (a FIFO, a link to ``/dev/zero``, a shard linked from outside its folder) are made by the
tests themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: A small llama, as config.json gives it; the hostile configs change one field of it.
SMALL_LLAMA: dict[str, Any] = {
    "model_type": "llama",
    "vocab_size": 32,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
}
_DEEP = 100_000

#: config.json texts; each folder holds nothing else, so a config that reads is refused for its missing weights.
HOSTILE_CONFIGS: dict[str, str] = {
    "rope_scaling a number": json.dumps({**SMALL_LLAMA, "rope_scaling": 5}),
    "rope_parameters a list": json.dumps({**SMALL_LLAMA, "rope_parameters": [10000.0]}),
    "rope_parameters a string": json.dumps({**SMALL_LLAMA, "rope_parameters": "default"}),
    "nested 100k deep": '{"model_type": "gpt2", "a": ' + "[" * _DEEP + "]" * _DEEP + "}",
    "nested 100 deep": '{"model_type": "gpt2", "a": ' + "[" * 100 + "]" * 100 + "}",
    "1 MB model_type": json.dumps({"model_type": "m" * 1_000_000}),
    "1 MB field value": json.dumps({"model_type": "gpt2", "activation_function": "g" * 1_000_000}),
    # Four of the default 7B's 32 layers (1.1B parameters): built for real, 4.3 GB, before the weights were looked for.
    "config only, 1.1B parameters": json.dumps({"model_type": "llama", "num_hidden_layers": 4}),
}


def write_config(folder: Path, text: str) -> Path:
    """``folder`` (made) holding ``config.json`` with ``text`` and nothing else."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(text, encoding="utf-8")
    return folder


#: ``model.safetensors.index.json`` texts, each in a folder that holds no shard.
HOSTILE_INDEXES: dict[str, str] = {
    "nested 100k deep": '{"weight_map": ' + "[" * _DEEP + "]" * _DEEP + "}",
    "1 MB key": json.dumps({"weight_map": {"k" * 1_000_000: "model-1.safetensors"}}),
    "1 MB shard name": json.dumps({"weight_map": {"a": "s" * 1_000_000 + ".safetensors"}}),
}


def _meta_tensor(state: dict[str, Any]) -> dict[str, Any]:
    import torch

    out = dict(state)
    last = list(out)[-1]
    out[last] = torch.empty(out[last].shape, device="meta")
    return out


def _unexpected(state: dict[str, Any]) -> dict[str, Any]:
    import torch

    return {**state, **{f"extra.{i}.weight": torch.zeros(1) for i in range(32_000)}}


def _long_key(state: dict[str, Any]) -> dict[str, Any]:
    first = next(iter(state))
    return {("k" * 1_000_000 if key == first else key): value for key, value in state.items()}


#: A model's own state_dict made hostile: ``{case: function of the state_dict}``.
HOSTILE_STATE_DICTS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "a meta tensor": _meta_tensor,
    "32,000 unexpected keys": _unexpected,
    "a 1 MB key": _long_key,
}
