"""Every ```python block in docs/*.md runs, page by page, in order, in one namespace per page.

Conventions a page can use, as an HTML comment on the line before a fence (MyST and GitHub hide them):

- ``<!-- requires: hndl.func.stack -->`` before a python block: run it only when that dotted name can be
  imported or looked up; otherwise the block is skipped (and the test says so). Later blocks that use what a
  skipped block defined must carry the same marker.
- ``<!-- expect-output -->`` before a text block: it must equal what the preceding python block printed.

Blocks run in a temporary directory, so an example that writes files leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import importlib
import io
from pathlib import Path
from typing import Any

import pytest
from shell_blocks import Block, fenced_blocks

pytest.importorskip("torch")

# The pages are read by users of every install set: blocks that need only hndl-core must run without the others.
pytestmark = pytest.mark.every_install_set

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md"))


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, each with the marker comment just before it (if any): the one
    reader of tests/support/shell_blocks.py, which the install-docs checks use too."""
    return fenced_blocks(path.name, path.parent)


def available(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return False
        return True
    return False


def test_the_docs_have_runnable_examples():
    assert PAGES, f"no pages found in {DOCS}"
    assert sum(1 for p in PAGES for b in blocks(p) if b.lang == "python") >= 10


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    skipped: list[str] = []
    last_output: str | None = None
    for block in blocks(page):
        if block.lang == "text" and block.mark == "expect-output":
            if last_output is None:  # the block it describes was skipped
                continue
            assert last_output == block.text, f"{page.name}:{block.line}: printed output differs from the page"
            continue
        if block.lang != "python":
            continue
        last_output = None
        if block.mark == "requires" and not all(available(n.strip()) for n in block.arg.split(",")):
            skipped.append(f"line {block.line} (needs {block.arg})")
            continue
        out = io.StringIO()
        code = compile(block.text, f"{page.name}:{block.line}", "exec")
        try:
            with contextlib.redirect_stdout(out):
                exec(code, namespace)
        except Exception as exc:
            raise AssertionError(f"{page.name}: the python block at line {block.line} failed: {exc!r}") from exc
        last_output = out.getvalue()
    if skipped:
        pytest.skip(f"{page.name}: ran the other blocks; skipped " + "; ".join(skipped))


def test_blocks_parse_markers(tmp_path: Path):
    page = tmp_path / "p.md"
    page.write_text(
        "# t\n\n<!-- requires: hndl.nothing_here -->\n```python\nraise SystemExit\n```\n\n"
        "```python\nprint('hi')\n```\n\n<!-- expect-output -->\n```text\nhi\n```\n",
        encoding="utf-8",
    )
    found = blocks(page)
    assert [(b.lang, b.mark, b.arg) for b in found] == [
        ("python", "requires", "hndl.nothing_here"),
        ("python", None, ""),
        ("text", "expect-output", ""),
    ]
    assert not available("hndl.nothing_here")
    assert available("hndl.Graph")
