"""The install commands of the README and the quickstart work from a checkout as written.

Regression: the quickstart said `pip install hndl-core`, which no package index has, and the README installed
into the system Python, which refuses (`externally-managed-environment`). These tests read the shell blocks
(through tests/support/shell_blocks.py, the reader ``nox -s install_docs`` runs them with) and hold them to what
a checkout has; ``nox -s install_docs`` (in CI's .ci/run) runs them, exactly as written, in fresh venvs in a
clean copy of the checkout. The `hndl` commands whose output a page shows run here too, in process.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path

import pytest
from shell_blocks import (
    IN_PAGE_ORDER,
    QUICKSTART,
    README,
    ROOT,
    TUTORIAL,
    Block,
    BlockFailed,
    commands,
    fenced_blocks,
    run_blocks,
    shell_blocks,
    shown_output,
    walkthroughs,
)

PAGES = (README, QUICKSTART)


def installs(page: str) -> list[list[str]]:
    return [c for b in shell_blocks(page) for c in commands(b) if "install" in c and "pip" in c[0]]


def test_every_install_names_a_path_of_the_checkout_or_a_registry_tool() -> None:
    for page in PAGES:
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
                    assert arg == "nox[uv]", f"{page}: {arg!r} is not in the checkout (and not on any index)"


def test_every_install_of_torch_is_pinned_to_the_local_cpu_build() -> None:
    # Without the pin a fresh venv fetches the newest torch (a multi-GB CUDA build): slow for a newcomer, and
    # `nox -s install_docs` runs these commands exactly as written.
    for page in PAGES:
        for command in installs(page):
            if any(arg.startswith("./packages/hndl-core") for arg in command):
                assert command[command.index("-c") + 1] == "constraints/torch-2.13.txt", (page, command)


def test_the_readme_starts_with_a_venv() -> None:
    first = commands(shell_blocks(README)[0])
    assert first[0] == ["python3", "-m", "venv", ".venv"]
    assert all(c[0].startswith(".venv/bin/") for c in first[1:])
    assert first[-1][:3] == [".venv/bin/hndl", "summary", "examples/transformer_block.yaml"]


def test_the_quickstart_installs_into_a_venv() -> None:
    first = commands(shell_blocks(QUICKSTART)[0])
    assert first[:2] == [["python3", "-m", "venv", ".venv"], [".", ".venv/bin/activate"]]


def test_the_walkthroughs_are_what_the_pages_say() -> None:
    plan = walkthroughs()
    assert [b.line for b in plan[README]] == [b.line for b in shell_blocks(README)[:2]]
    tutorial = plan[TUTORIAL]
    assert [(b.page, b.lang) for b in tutorial] == [
        (QUICKSTART, "bash"),  # the set-up, which activates the venv
        (TUTORIAL, "python"),  # writes classifier.yaml
        (TUTORIAL, "bash"),  # hndl check and hndl draw
    ]
    assert TUTORIAL in IN_PAGE_ORDER
    quickstart = plan[QUICKSTART]
    # install; check and summarise; the broken file, which fails on purpose; then the python example
    assert [b.lang for b in quickstart[:4]] == ["bash", "bash", "bash", "python"]
    assert [b.expected_exit for b in quickstart[:3]] == [0, 0, 1]
    assert len([b for b in quickstart if b.lang == "python"]) >= 4


def _cli(argv: list[str]) -> tuple[int, str]:
    from hndl.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        status = main(argv)
    return status, out.getvalue()


@pytest.mark.parametrize("page", PAGES)
def test_the_hndl_commands_a_page_shows_print_what_it_shows(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The quickstart shows `hndl check examples/broken.yaml` failing: same messages, same exit status here.
    monkeypatch.chdir(ROOT)
    shown = shown_output(page)
    if page == QUICKSTART:
        assert shown, "the quickstart shows what checking examples/broken.yaml prints"
    for block in shell_blocks(page):
        if block.line not in shown:
            continue
        argvs = commands(block)
        assert all(argv[0] == "hndl" for argv in argvs), f"{block.where}: only hndl commands run in process"
        printed, status = "", 0
        for argv in argvs:
            status, out = _cli(argv[1:])
            printed += out
        assert status == block.expected_exit, block.where
        assert printed == shown[block.line], f"{block.where}: the page shows other output than hndl prints"


# --- the runner nox -s install_docs uses -----------------------------------------------------------------


def _page(tmp_path: Path, text: str) -> list[Block]:
    (tmp_path / "page.md").write_text(text, encoding="utf-8")
    from shell_blocks import fenced_blocks

    return [b for b in fenced_blocks("page.md", tmp_path) if b.lang == "bash"]


def test_blocks_run_in_order_with_the_environment_the_previous_one_left(tmp_path: Path) -> None:
    blocks = _page(
        tmp_path,
        "```bash\nexport GREETING=hi\nmkdir -p made\n```\n\n<!-- expect-exit: 3 -->\n```bash\n"
        'test "$GREETING" = hi && test -d made && exit 3\n```\n',
    )
    log: list[str] = []
    run_blocks(blocks, tmp_path, log=log.append)
    assert log[0].startswith("page.md:1: ok")
    assert log[1].startswith("page.md:7: ok")


def test_a_failing_block_is_named_and_shown(tmp_path: Path) -> None:
    blocks = _page(tmp_path, "# p\n\n```bash\necho one\nfalse\necho never\n```\n")
    with pytest.raises(BlockFailed) as caught:
        run_blocks(blocks, tmp_path, log=lambda _: None)
    message = str(caught.value)
    assert message.startswith("page.md:3: the bash block exited with status 1, not 0")
    assert "echo one\nfalse\necho never\n" in message
    assert message.endswith("one")
    assert "never" not in message.split("--- its output (end) ---")[1]


def test_a_block_that_prints_other_than_the_page_shows_fails(tmp_path: Path) -> None:
    (tmp_path / "page.md").write_text("```bash\necho 2\n```\n<!-- shell-output -->\n```text\n1\n```\n")
    blocks = _page(tmp_path, (tmp_path / "page.md").read_text())
    with pytest.raises(BlockFailed, match="printed other than the page shows"):
        run_blocks(blocks, tmp_path, shown=shown_output("page.md", tmp_path), log=lambda _: None)


def test_the_clean_copy_has_the_tracked_files_and_no_venv(tmp_path: Path) -> None:
    from shell_blocks import clean_copy

    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    copy = clean_copy(ROOT, tmp_path / "copy")
    assert (copy / "README.md").read_text() == (ROOT / "README.md").read_text()
    assert (copy / "constraints" / "torch-2.13.txt").is_file()
    assert not (copy / ".venv").exists()
    assert not (copy / ".nox").exists()
    assert os.listdir(copy / "examples")


# --- the draw commands of the README and the tutorial (issue 27: they failed after the documented set-up) --------


def draw_commands() -> list[list[str]]:
    plan = walkthroughs()
    argvs = [c for page in (README, TUTORIAL) for b in plan[page] if b.lang == "bash" for c in commands(b)]
    return [argv for argv in argvs if argv[0].endswith("hndl") and argv[1] == "draw"]


def test_the_readme_and_the_tutorial_draw_svg_and_png_in_their_walkthroughs() -> None:
    drawn = {Path(argv[argv.index("-o") + 1]).suffix for argv in draw_commands()}
    assert drawn == {".svg", ".png"}


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot program is not installed")
def test_the_draw_commands_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What install_docs runs in a fresh venv, run here in process: the README's against the checkout's examples,
    the tutorial's against the spec its first python block writes."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    first = next(b for b in fenced_blocks(TUTORIAL) if b.lang == "python")
    exec(compile(first.text, first.where, "exec"), {})  # writes classifier.yaml, as the walkthrough does
    for argv in draw_commands():
        status, out = _cli(argv[1:])
        assert status == 0, (argv, out)
        written = tmp_path / argv[argv.index("-o") + 1]
        assert written.read_bytes().startswith((b"<?xml", b"\x89PNG"))
