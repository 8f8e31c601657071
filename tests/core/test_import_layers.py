"""hndl's modules import top-down: no module imports, directly or through others, a module that imports it.

The imports are read from the sources: every ``import`` and ``from ... import``, inside functions too (a lazy
import that goes both ways is still a tangle) and under ``if TYPE_CHECKING:`` too (a module that needs another's
types to be read depends on it: a cycle hidden from the interpreter is still one for a reader and for the type
checker). A cycle fails the test with the modules in it and the imports that make it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "packages" / name / "src" for name in ("hndl-core", "hndl-func", "hndl-docs")]


def modules(sources: list[Path]) -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's ``__init__``), for every module under ``hndl``."""
    found: dict[str, tuple[Path, bool]] = {}
    for src in sources:
        for path in (src / "hndl").rglob("*.py"):
            parts = list(path.relative_to(src).with_suffix("").parts)
            package = parts[-1] == "__init__"
            found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


def imports(found: dict[str, tuple[Path, bool]]) -> dict[str, dict[str, int]]:
    """Module -> {hndl module it imports: line of the import}. ``from . import x`` imports submodule ``x`` when
    there is one (its package is already loaded), else the package itself."""
    edges: dict[str, dict[str, int]] = {m: {} for m in found}
    for name, (path, package) in found.items():
        here = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    source = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in found else source for a in node.names]
            for target in targets:
                if target in found and target != name:
                    edges[name].setdefault(target, node.lineno)
    return edges


def cycles(edges: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(edges[succ])))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_hndl_has_no_import_cycle() -> None:
    found = modules(SOURCES)
    edges = imports(found)
    tangles = cycles(edges)
    report = []
    for component in tangles:
        members = set(component)
        lines = [
            f"  {a} imports {b} ({found[a][0].relative_to(ROOT)}:{line})"
            for a in component
            for b, line in sorted(edges[a].items())
            if b in members
        ]
        report.append(" <-> ".join(component) + "\n" + "\n".join(lines))
    assert not tangles, "import cycles:\n" + "\n".join(report)


def test_the_cycle_finder_finds_a_cycle_and_names_its_imports() -> None:
    edges = {"a": {"b": 3}, "b": {"c": 5}, "c": {"a": 7}, "d": {"a": 1}}
    assert cycles(edges) == [["a", "b", "c"]]
    assert cycles({"a": {"b": 1}, "b": {}}) == []


def test_a_cycle_hidden_under_type_checking_is_found(tmp_path: Path) -> None:
    # The GraphModule's capabilities imported it back under TYPE_CHECKING only: a cycle of eight modules that the
    # old reading skipped.
    package = tmp_path / "hndl"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (package / "b.py").write_text("def f():\n    from .a import A\n")
    edges = imports(modules([tmp_path]))
    assert edges["hndl.a"] == {"hndl.b": 3}
    assert edges["hndl.b"] == {"hndl.a": 2}  # a lazy import counts
    assert cycles(edges) == [["hndl.a", "hndl.b"]]
