"""One value as one line of flow YAML (:func:`flow_yaml`): how a spec writes every input and node, and how messages
write a node (``{op: drop_path, mode: row}``). Its own module, below the graph, so that the registry's hints and
the spec writer share it without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from ._errors import HndlError, Problem
from ._yaml_reader import CORE_RESOLVERS, STR
from .naming import excerpt

__all__ = ["flow_yaml"]


class _Dumper(yaml.SafeDumper):
    """Writes scalars so that both YAML 1.2 (hndl) and YAML 1.1 (``yaml.safe_load``) read them back the same:
    a string that either schema would take for a number, boolean or null is quoted."""


# SafeDumper already quotes what YAML 1.1 would resolve; adding the 1.2 core resolvers quotes the rest.
for _tag, _regexp, _first in CORE_RESOLVERS:
    _Dumper.add_implicit_resolver(_tag, _regexp, _first)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Line breaks and control characters are written escaped in double quotes, so every value stays on one line.
    style = '"' if any(not ch.isprintable() for ch in value) else None
    return dumper.represent_scalar(STR, value, style=style)


_Dumper.add_representer(str, _represent_str)


def flow_yaml(value: Any) -> str:
    """``value`` (plain data: mappings, lists, strings, numbers, booleans, None) as one line of flow YAML.

    This is how :func:`dumps` writes every input and node (``{op: linear, in: x, out_features: 512}``).
    Strings that YAML 1.1 or 1.2 would read as another type are quoted; strings with line breaks or control
    characters are double-quoted with escapes; tuples are written as lists.

    Raises:
        HndlError: E_SPEC for a value that is not plain data.
    """
    try:
        text = yaml.dump(
            _lists(value),
            Dumper=_Dumper,
            default_flow_style=True,
            sort_keys=False,
            allow_unicode=True,
            width=2**31 - 1,
            explicit_end=False,
        )
    except yaml.YAMLError:
        raise HndlError(Problem("E_SPEC", f"{type(value).__name__} {excerpt(value)} is not plain data")) from None
    except ValueError:  # Python cannot write an integer of more than 4,300 digits as text
        raise HndlError(
            Problem("E_SPEC", f"{excerpt(value)} holds an integer of more than 4,300 digits, which cannot be written")
        ) from None
    # A lone scalar is written as a document ("x\n...\n"); keep only the value.
    return text.removesuffix("\n...\n").rstrip("\n")


def _lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _lists(v) for k, v in value.items()}
    return value
