"""hndl-docs: the reference-docs generator (``python -m hndl.docs``).

:func:`generate` builds every reference page in memory from the code itself (the op registry, the error
codes, the spec-file schema, the command's parser, the example spec files); :func:`write` puts them under
``docs/reference/`` and :func:`stale` compares them with what is there. The output is deterministic: the
same installed code gives the same bytes on every run and machine.

Installed by the ``hndl-docs`` distribution as a portion of the ``hndl`` package.
"""

from __future__ import annotations

import difflib
from pathlib import Path

__all__ = ["CHECKOUT_MARKERS", "REFERENCE_DIR", "generate", "is_checkout", "main", "stale", "write"]

#: Where the generated pages live, relative to the repository root. The generator owns this folder.
REFERENCE_DIR = Path("docs") / "reference"

_INDEX = """{header}# Reference

These pages are generated from the code by `python -m hndl.docs` and checked in CI by
`python -m hndl.docs --check`, so they always describe the installed hndl: its ops (plugins included),
its error codes with real messages, the spec-file format and its JSON Schema, the command's usage, and
diagrams of the example graphs.

```{{toctree}}
:maxdepth: 1

ops/index
errors
spec-format
cli
examples
```
"""


#: What a checkout of hndl has, and a user's project almost never both: :func:`main` writes under the current
#: directory only when it has them (or when ``--root`` names the folder on purpose).
CHECKOUT_MARKERS = ("packages/hndl-docs/", "SPEC.md")


def is_checkout(root: Path | str) -> bool:
    """Whether ``root`` looks like a checkout of hndl (:data:`CHECKOUT_MARKERS`)."""
    root = Path(root)
    return (root / "packages" / "hndl-docs").is_dir() and (root / "SPEC.md").is_file()


def generate(root: Path | str = ".") -> dict[str, str]:
    """Every generated file, as ``{path relative to docs/reference (POSIX): text}``, sorted by path."""
    import hndl

    from ._cli import cli_page
    from ._diagrams import examples_page
    from ._errors import errors_page
    from ._ops import op_pages
    from ._schema import schema_text, spec_page
    from ._text import HEADER

    root = Path(root).resolve()
    ops = list(hndl.registry)
    schema = hndl.spec_schema(ops)
    files = {
        "index.md": _INDEX.format(header=HEADER),
        "errors.md": errors_page([root]),
        "spec.schema.json": schema_text(schema),
        "spec-format.md": spec_page(schema),
        "cli.md": cli_page(),
        "examples.md": examples_page(root, [root]),
        **op_pages(ops),
    }
    return dict(sorted(files.items()))


def _on_disk(root: Path) -> dict[str, str]:
    base = root / REFERENCE_DIR
    if not base.is_dir():
        return {}
    return {
        p.relative_to(base).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(base.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def stale(root: Path | str = ".", files: dict[str, str] | None = None) -> dict[str, str]:
    """``{path: unified diff}`` for each generated file that differs from disk (missing and extra included)."""
    root = Path(root)
    files = generate(root) if files is None else files
    disk = _on_disk(root)
    diffs: dict[str, str] = {}
    for rel in sorted(set(files) | set(disk)):
        old, new = disk.get(rel), files.get(rel)
        if old == new:
            continue
        path = (REFERENCE_DIR / rel).as_posix()
        diff = difflib.unified_diff(
            (old or "").splitlines(keepends=True),
            (new or "").splitlines(keepends=True),
            fromfile=f"a/{path}" if old is not None else "/dev/null",
            tofile=f"b/{path}" if new is not None else "/dev/null",
        )
        diffs[rel] = "".join(line if line.endswith("\n") else line + "\n" for line in diff)
    return diffs


def write(root: Path | str = ".", files: dict[str, str] | None = None) -> list[str]:
    """Write the generated files under ``docs/reference/`` and delete files there it no longer generates.

    Returns the paths (relative to ``docs/reference``) that changed.
    """
    root = Path(root)
    files = generate(root) if files is None else files
    base = root / REFERENCE_DIR
    changed = list(stale(root, files))
    for rel in changed:
        target = base / rel
        if rel in files:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(files[rel], encoding="utf-8", newline="\n")
        else:
            target.unlink()
    for folder in sorted((p for p in base.rglob("*") if p.is_dir()), reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m hndl.docs [--check] [--root DIR]``; returns the exit status."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(
        prog="python -m hndl.docs",
        description="Regenerate hndl's reference docs under docs/reference/, or check that they are current.",
    )
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 if stale")
    parser.add_argument(
        "--root",
        default=None,
        help="the folder whose docs/reference/ to generate (default: the current directory, which must then be "
        "a checkout of hndl)",
    )
    args = parser.parse_args(argv)
    root = Path(args.root if args.root is not None else ".")
    if args.root is None and not is_checkout(root):
        # Run by accident in a project of one's own, it would rewrite (and delete files in) its docs/reference.
        print(
            f"hndl.docs: {root.resolve()} is not a checkout of hndl (it has no {' and no '.join(CHECKOUT_MARKERS)}); "
            "this command regenerates hndl's own reference docs. To read about the ops, run `hndl ops`; to "
            "generate into another folder on purpose, pass --root DIR"
        )
        return 2
    if not (root / "docs").is_dir():
        print(f"hndl.docs: {root.resolve()} has no docs/ folder; run from the repository root or pass --root")
        return 2
    files = generate(root)
    if args.check:
        diffs = stale(root, files)
        if not diffs:
            print("current")
            return 0
        for diff in diffs.values():
            sys.stdout.write(diff)
        noun = "file is" if len(diffs) == 1 else "files are"
        print(f"\n{len(diffs)} reference {noun} stale: {', '.join(diffs)}")
        print("regenerate them with: python -m hndl.docs")
        return 1
    changed = write(root, files)
    print(f"wrote {len(changed)} changed files under {REFERENCE_DIR.as_posix()}/" if changed else "current")
    return 0
