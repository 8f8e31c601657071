"""The error messages the documentation shows are the ones hndl prints.

Runs the examples of ``hndl._errors``'s module docstring (doctest) and every python block of docs/errors.md,
in order, in one namespace, and compares each error message the page shows with what the block before it
printed. An error message the page shows without code that prints it is a failure: it could drift (the page
once showed a ``bound:`` line on a static error, which static checks never print).
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
from pathlib import Path

from shell_blocks import blocks_in

import hndl._errors

ERRORS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "errors.md"
_ERROR_CODE = re.compile(r"\bE_[A-Z]+\b")


def test_the_errors_module_example_prints_what_it_shows():
    examples = doctest.DocTestParser().get_doctest(hndl._errors.__doc__ or "", {}, "hndl._errors", None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    out = io.StringIO()
    result = runner.run(examples, out=out.write)
    assert result.attempted >= 10
    assert result.failed == 0, out.getvalue()


def fenced_blocks(text: str) -> list[tuple[str, str, bool]]:
    """``(language, body, marked expect-output)`` for each fenced block of a Markdown page (the reader the doc
    tests share, tests/support/shell_blocks.py)."""
    return [(b.lang, b.text, b.mark == "expect-output") for b in blocks_in(text, ERRORS_PAGE.name)]


def test_every_error_message_in_the_errors_page_is_printed_by_its_example(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write a spec file
    namespace: dict = {}
    printed: str | None = None
    compared = 0
    for language, body, marked in fenced_blocks(ERRORS_PAGE.read_text(encoding="utf-8")):
        if language == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(body, str(ERRORS_PAGE), "exec"), namespace)
            printed = out.getvalue()
        elif _ERROR_CODE.search(body):
            assert marked, f"this message is shown without the code that prints it:\n{body}"
            assert printed == body
            compared += 1
    assert compared >= 3


def test_fenced_blocks_finds_marked_output():
    page = "x\n```python\nprint(1)\n```\n<!-- expect-output -->\n```text\n1\n```\n"
    assert fenced_blocks(page) == [("python", "print(1)\n", False), ("text", "1\n", True)]
