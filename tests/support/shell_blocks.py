"""The shell blocks of the README and the quickstart: read from the pages, and run as a newcomer would run them.

One reader for both users, so the pages cannot drift from what is checked and run:
``tests/docs/test_install_docs.py`` holds the blocks to what a checkout has, and ``nox -s install_docs``
(noxfile.py) runs them, exactly as written, in a clean copy of the checkout's tracked files (:func:`clean_copy`,
:func:`run_blocks`).

Markers a page can put, as an HTML comment, on the line before a fence (MyST and GitHub hide them):

- ``<!-- expect-exit: 1 -->`` before a ```bash block: the exit status the block ends with (``0`` otherwise),
  for a block that shows a failure on purpose.
- ``<!-- shell-output -->`` before a ```text block: exactly what the preceding bash block prints (stdout and
  stderr as a terminal shows them).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = "README.md"
QUICKSTART = "docs/quickstart.md"
TUTORIAL = "docs/tutorial.md"

_FENCE = re.compile(r"^(`{3,})([^`\n]*)$")
_MARK = re.compile(r"^<!--\s*([a-z-]+)(?::\s*(.*?))?\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its language, text, 1-based line of the opening fence, and marker."""

    page: str
    lang: str
    text: str
    line: int
    mark: str | None = None
    arg: str = ""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def expected_exit(self) -> int:
        return int(self.arg) if self.mark == "expect-exit" else 0


def fenced_blocks(page: str, root: Path = ROOT) -> list[Block]:
    """Every fenced block of ``page`` (a path relative to ``root``), each with the marker just before it."""
    return blocks_in((root / page).read_text(encoding="utf-8"), page)


def blocks_in(text: str, page: str) -> list[Block]:
    """Every fenced block of the Markdown ``text`` (named ``page`` in each block's ``where``), each with the
    marker just before it."""
    lines = text.splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2).strip(), i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].strip() != fence:
            body.append(lines[i])
            i += 1
        mark = _MARK.match(lines[start - 1].strip()) if start > 0 else None
        found.append(
            Block(
                page=page,
                lang=info.split()[0] if info else "",
                text="\n".join(body) + "\n",
                line=start + 1,
                mark=mark.group(1) if mark else None,
                arg=(mark.group(2) or "") if mark else "",
            )
        )
        i += 1
    return found


def shell_blocks(page: str, root: Path = ROOT) -> list[Block]:
    """The page's ```bash blocks, in order."""
    return [b for b in fenced_blocks(page, root) if b.lang == "bash"]


def shown_output(page: str, root: Path = ROOT) -> dict[int, str]:
    """Line of a bash block -> the text of the ``shell-output`` block that shows what it prints."""
    shown: dict[int, str] = {}
    last: Block | None = None
    for block in fenced_blocks(page, root):
        if block.lang == "text" and block.mark == "shell-output" and last is not None:
            shown[last.line] = block.text
        elif block.lang == "bash":
            last = block
    return shown


def commands(block: Block) -> list[list[str]]:
    """The commands of a shell block, as argument lists (comments dropped, ``&&`` chains split)."""
    out = []
    for line in block.text.splitlines():
        line = line.split("  #")[0].strip()
        for part in line.split("&&"):
            if part.strip():
                out.append(shlex.split(part))
    return out


def walkthroughs(root: Path = ROOT) -> dict[str, list[Block]]:
    """What a newcomer runs, page by page: the README's first two bash blocks (set-up in one command, then
    drawing); the quickstart's bash blocks in order, then its python blocks as one script; for the tutorial, the
    quickstart's set-up, the tutorial's first python block (it writes the spec file) and its shell commands,
    in that order (:data:`IN_PAGE_ORDER`)."""
    quickstart = [b for b in fenced_blocks(QUICKSTART, root) if b.lang in ("bash", "python")]
    ordered = [b for b in quickstart if b.lang == "bash"] + [b for b in quickstart if b.lang == "python"]
    tutorial = [b for b in fenced_blocks(TUTORIAL, root) if b.lang in ("bash", "python")]
    first_python = next(b for b in tutorial if b.lang == "python")
    return {
        README: shell_blocks(README, root)[:2],
        QUICKSTART: ordered,
        TUTORIAL: [shell_blocks(QUICKSTART, root)[0], first_python, *(b for b in tutorial if b.lang == "bash")],
    }


#: The walkthroughs run block by block in the order listed (each python block its own script), rather than the
#: bash blocks first and the python blocks together.
IN_PAGE_ORDER = frozenset({TUTORIAL})


# --- running them ---------------------------------------------------------------------------------------


class BlockFailed(Exception):
    """A block ended with another exit status than its page says, or printed other than its page shows."""

    def __init__(self, block: Block, why: str, output: str) -> None:
        tail = "\n".join(output.splitlines()[-60:])
        super().__init__(
            f"{block.where}: the {block.lang} block {why}\n--- the block ---\n{block.text}--- its output (end) ---\n{tail}"
        )
        self.block = block


def clean_copy(checkout: Path, dest: Path) -> Path:
    """Copy the files git tracks in ``checkout`` (as they are in the working tree) to ``dest``: what a fresh
    clone has, with local edits, and without .venv, .nox or build output."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=checkout, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = checkout / name
        if not source.is_file():  # deleted in the working tree, or a submodule
            continue
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    return dest


def run_blocks(
    blocks: list[Block],
    where: Path,
    *,
    shown: dict[int, str] | None = None,
    log: Callable[[str], None] = print,
    in_order: bool = False,
) -> None:
    """Run ``blocks`` from ``where``, as one terminal session runs what is pasted into it: each bash block in
    ``bash -euo pipefail`` from ``where``, with the environment the previous block left (so a
    ``. .venv/bin/activate`` holds for the blocks after it); the python blocks, with the venv's python, together
    as one script after the bash blocks, or with ``in_order`` each as its own script where it stands. Raises
    :class:`BlockFailed` at the first block that fails."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    python = [b for b in blocks if b.lang == "python"]
    if in_order:
        steps = [[b] for b in blocks]
    else:
        steps = [[b] for b in blocks if b.lang == "bash"] + ([python] if python else [])
    with tempfile.TemporaryDirectory(prefix="hndl-blocks-") as scratch:
        for i, group in enumerate(steps):
            if group[0].lang == "bash":
                env = _run_bash(group[0], where, env, Path(scratch), i, shown, log)
            else:
                _run_python(group, where, env, Path(scratch), i, log)


def _run_bash(
    block: Block,
    where: Path,
    env: dict[str, str],
    scratch: Path,
    i: int,
    shown: dict[int, str] | None,
    log: Callable[[str], None],
) -> dict[str, str]:
    """Run one bash block; returns the environment it leaves."""
    script, env_file = scratch / f"block{i}.sh", scratch / f"block{i}.env"
    # The block as written; the line after it saves the environment it leaves for the next block.
    script.write_text(f"{block.text}\nenv -0 > {shlex.quote(str(env_file))}\n")
    started = time.monotonic()
    # stderr into stdout: the order a terminal shows them in.
    done = subprocess.run(
        ["bash", "-euo", "pipefail", str(script)],
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = done.stdout
    if done.returncode != block.expected_exit:
        raise BlockFailed(block, f"exited with status {done.returncode}, not {block.expected_exit}", output)
    if shown is not None and block.line in shown and output != shown[block.line]:
        raise BlockFailed(block, "printed other than the page shows", output)
    if env_file.exists():
        pairs = (item.split("=", 1) for item in env_file.read_text().split("\0") if "=" in item)
        env = dict(pairs)
    log(f"{block.where}: ok ({time.monotonic() - started:.1f} s)")
    return env


def _run_python(
    python: list[Block], where: Path, env: dict[str, str], scratch: Path, i: int, log: Callable[[str], None]
) -> None:
    """Run python blocks as one script, with the venv's python."""
    script = scratch / f"example{i}.py"
    script.write_text("".join(b.text for b in python))
    started = time.monotonic()
    venv_python = where / ".venv" / "bin" / "python"
    done = subprocess.run(
        [str(venv_python), str(script)],
        cwd=where,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if done.returncode != 0:
        joined = Block(python[0].page, "python", script.read_text(), python[0].line)
        together = "(all of them, as one script) " if len(python) > 1 else ""
        raise BlockFailed(joined, f"{together}exited with status {done.returncode}", done.stdout)
    what = f"{len(python)} python blocks" if len(python) > 1 else f"the python block at line {python[0].line}"
    log(f"{python[0].page}: {what} ok ({time.monotonic() - started:.1f} s)")
