"""The install commands of the README and the quickstart work from a checkout as written.

Regression: the quickstart said `pip install hndl-core`, which no package index has, and the README installed
into the system Python, which refuses (`externally-managed-environment`). These tests read the shell blocks and
hold them to what a checkout has (running them in a fresh venv is not automated yet).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def shell_blocks(page: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / page).read_text(), re.S)


def commands(block: str) -> list[list[str]]:
    out = []
    for line in block.splitlines():
        line = line.split("  #")[0].strip()
        for part in line.split("&&"):
            if part.strip():
                out.append(shlex.split(part))
    return out


def installs(page: str) -> list[list[str]]:
    return [c for b in shell_blocks(page) for c in commands(b) if "install" in c and "pip" in c[0]]


def test_every_install_names_a_path_of_the_checkout_or_a_registry_tool() -> None:
    for page in ("README.md", "docs/quickstart.md"):
        found = installs(page)
        assert found, page
        for command in found:
            args = command[command.index("install") + 1 :]
            for i, arg in enumerate(args):
                if args[i - 1] == "-c" if i else False:
                    assert (ROOT / arg).is_file(), (page, arg)
                elif arg.startswith("./"):
                    assert (ROOT / arg).is_dir(), (page, arg)
                elif not arg.startswith("-"):
                    assert arg == "nox", f"{page}: {arg!r} is not in the checkout (and not on any index)"


def test_the_readme_starts_with_a_venv() -> None:
    first = commands(shell_blocks("README.md")[0])
    assert first[0] == ["python3", "-m", "venv", ".venv"]
    assert all(c[0].startswith(".venv/bin/") for c in first[1:])
    assert first[-1][:3] == [".venv/bin/hndl", "summary", "examples/transformer_block.yaml"]


def test_the_quickstart_installs_into_a_venv() -> None:
    first = commands(shell_blocks("docs/quickstart.md")[0])
    assert first[:2] == [["python3", "-m", "venv", ".venv"], [".", ".venv/bin/activate"]]
