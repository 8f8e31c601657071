"""The shape of the source tree (issue 35): small modules, each named in IMPLEMENTATION.md's module map.

A module past 650 lines is doing more than one job; a module the map does not name is one a reader of the map
cannot find. Both held by review alone until a round of growth broke them (nine modules over 600 lines, a map
that missed a dozen files), so they are tests now.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted(
    path
    for package in ("hndl-core", "hndl-func", "hndl-docs")
    for path in (ROOT / "packages" / package / "src" / "hndl").rglob("*.py")
    if "__pycache__" not in path.parts
)
MAX_LINES = 650
pytestmark = pytest.mark.skipif(not SOURCES, reason="needs the source tree (a checkout, not an installed wheel)")


def _relative(path: Path) -> str:
    """``torch/_module.py`` for hndl-core's ``hndl/torch/_module.py``; ``func/_ensemble.py`` for hndl-func's."""
    parts = path.parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("hndl") + 1 :])


def test_every_source_module_is_at_most_650_lines():
    long = {_relative(p): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by job (at most {MAX_LINES} lines each): {long}"


def test_every_source_module_is_named_in_the_implementation_notes():
    notes = (ROOT / "IMPLEMENTATION.md").read_text()
    named = set(re.findall(r"`([\w/]+\.py)`", notes))
    basenames = {name.rsplit("/", 1)[-1] for name in named}
    missing = [
        _relative(p)
        for p in SOURCES
        if p.name != "__init__.py" and _relative(p) not in named and p.name not in basenames
    ]
    assert not missing, f"IMPLEMENTATION.md's module map does not name: {missing}"


def test_every_module_the_map_names_exists():
    notes = (ROOT / "IMPLEMENTATION.md").read_text()
    rows = [line for line in notes.splitlines() if line.startswith("| `")]
    first_cells = {name for row in rows for name in re.findall(r"`([\w/]+\.py)`", row.split("|")[1])}
    present = {_relative(p) for p in SOURCES} | {p.name for p in SOURCES}
    stale = sorted(name for name in first_cells if name not in present and name.rsplit("/", 1)[-1] not in present)
    assert not stale, f"the module map names modules that are gone: {stale}"
