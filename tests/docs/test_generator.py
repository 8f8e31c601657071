"""The reference generator: deterministic output, ``--check`` failing and passing, plugin ops, the schema."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
docs = pytest.importorskip("hndl.docs")

import hndl  # noqa: E402
from hndl.docs import _errors  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return docs.generate(ROOT)


def _reference_tree(tmp_path: Path) -> Path:
    """A repository root with the real examples and an empty docs/ folder."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
    return tmp_path


# --- --check on the committed tree -----------------------------------------------------------------------


def test_the_committed_reference_is_current():
    # A fresh process, so nothing another test registered can leak in: this is what CI runs.
    result = subprocess.run(
        [sys.executable, "-m", "hndl.docs", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert result.stdout.strip() == "current"


def test_check_fails_with_a_diff_when_an_op_docstring_changes(capsys, monkeypatch):
    linear = hndl.registry.find("linear")
    changed = dataclasses.replace(linear, doc="Multiply by a matrix, then add a vector (rewritten docstring).")
    monkeypatch.setitem(hndl.registry._ops, "linear", changed)

    assert docs.main(["--check", "--root", str(ROOT)]) == 1
    out = capsys.readouterr().out
    assert "--- a/docs/reference/ops/linear.md" in out
    assert "+++ b/docs/reference/ops/linear.md" in out
    assert "+Multiply by a matrix, then add a vector (rewritten docstring)." in out
    assert "regenerate them with: python -m hndl.docs" in out


def test_check_fails_when_a_parameter_changes(capsys, monkeypatch):
    dropout = hndl.registry.find("dropout")
    params = tuple(dataclasses.replace(p, default=0.25) if p.name == "p" else p for p in dropout.params)
    monkeypatch.setitem(hndl.registry._ops, "dropout", dataclasses.replace(dropout, params=params))

    assert docs.main(["--check", "--root", str(ROOT)]) == 1
    out = capsys.readouterr().out
    assert "docs/reference/ops/dropout.md" in out
    assert "docs/reference/spec.schema.json" in out  # the schema carries defaults too
    assert '"default": 0.25' in out
    assert '"default": 0.5' in out


def test_write_check_and_stale_files(tmp_path, capsys):
    root = _reference_tree(tmp_path)
    assert docs.main(["--check", "--root", str(root)]) == 1  # nothing generated yet
    assert "/dev/null" in capsys.readouterr().out

    assert docs.main(["--root", str(root)]) == 0
    assert (root / "docs/reference/ops/linear.md").is_file()
    assert (root / "docs/reference/spec.schema.json").is_file()
    capsys.readouterr()
    assert docs.main(["--check", "--root", str(root)]) == 0
    assert capsys.readouterr().out.strip() == "current"

    # A file the generator no longer makes (an op that went away) is stale too, and writing removes it.
    (root / "docs/reference/ops/gone.md").write_text("# gone\n", encoding="utf-8")
    assert docs.main(["--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "--- a/docs/reference/ops/gone.md" in out
    assert "+++ /dev/null" in out
    assert docs.main(["--root", str(root)]) == 0
    assert not (root / "docs/reference/ops/gone.md").exists()


def test_a_root_without_docs_is_refused(tmp_path, capsys):
    assert docs.main(["--check", "--root", str(tmp_path)]) == 2
    assert "no docs/ folder" in capsys.readouterr().out


# --- determinism -------------------------------------------------------------------------------------------


def test_generation_is_deterministic_and_machine_independent(generated, tmp_path):
    assert docs.generate(ROOT) == generated
    # Same bytes from another checkout location of the same examples.
    other = docs.generate(_reference_tree(tmp_path))
    assert other == generated
    for rel, text in generated.items():
        assert str(ROOT) not in text, rel
        assert str(tmp_path) not in text, rel
        assert " at 0x" not in text, rel
        assert text.endswith("\n"), rel
        assert not text.endswith("\n\n"), rel
    assert list(generated) == sorted(generated)


# --- plugins -------------------------------------------------------------------------------------------------

PLUGIN = '''
import hndl


def register():
    @hndl.op(
        "demo_scale",
        params=[hndl.Param("factor", "float", default=2.0, min=0, doc="the multiplier")],
        inputs=[hndl.Port("x", ["*shape"], doc="anything")],
        outputs=[hndl.Port("y", ["*shape"], dtype="same:x")],
        module="hndl_demo_plugin.Scale",
        example={"op": "demo_scale", "factor": 3.0},
        input_shape_example=["B", 8],
        replace=True,
    )
    def demo_scale(p, inputs):
        """Multiply by a constant factor (an op from a plugin package)."""
        import torch

        class Scale(torch.nn.Module):
            def forward(self, x):
                return x * p.factor

        return Scale()
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A plugin distribution on sys.path: a module and a dist-info whose entry point is in group hndl.ops."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "hndl_demo_plugin.py").write_text(textwrap.dedent(PLUGIN), encoding="utf-8")
    info = site / "hndl_demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hndl-demo-plugin\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[hndl.ops]\ndemo = hndl_demo_plugin:register\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(hndl.registry, "_plugins_loaded", False)
    yield
    hndl.registry.unregister("demo_scale")
    sys.modules.pop("hndl_demo_plugin", None)


def test_a_plugin_op_appears_when_installed_and_disappears_when_not(plugin, tmp_path, monkeypatch):
    (tmp_path / "repo").mkdir()
    root = _reference_tree(tmp_path / "repo")
    docs.write(root)  # the plugin is installed: its page is written
    with_plugin = docs.generate(root)
    page = with_plugin["ops/demo_scale.md"]
    assert "Multiply by a constant factor (an op from a plugin package)." in page
    assert "Registered by:** `hndl_demo_plugin`" in page
    assert "`[B, 8] float`" in page  # its example was checked through the plugin's contracts
    assert "[`demo_scale`](demo_scale.md)" in with_plugin["ops/index.md"]
    assert "plugin `hndl_demo_plugin`" in with_plugin["ops/index.md"]
    schema = json.loads(with_plugin["spec.schema.json"])
    assert "demo_scale" in schema["$defs"]["node"]["properties"]["op"]["enum"]

    # Uninstall: the module is gone from sys.path and the registry forgets it.
    monkeypatch.undo()
    hndl.registry.unregister("demo_scale")
    sys.modules.pop("hndl_demo_plugin", None)
    hndl.registry._plugins_loaded = False
    without = docs.generate(root)
    assert "ops/demo_scale.md" not in without
    assert "demo_scale" not in without["ops/index.md"]
    stale = docs.stale(root, without)
    assert "ops/demo_scale.md" in stale  # --check would now report the plugin's page as stale


# --- content -------------------------------------------------------------------------------------------------


def test_every_op_has_a_page_with_its_schema(generated):
    names = hndl.registry.names()
    assert {f"ops/{docs._ops.page_name(n)}.md" for n in names} <= set(generated)
    linear = generated["ops/linear.md"]
    assert "- **Builds:** `torch.nn.Linear`" in linear
    assert "| `in_features` | `int`: integer | inferred | >= 1 |" in linear
    assert "| `x` | input | `[*batch, in_features]` | `float` |" in linear
    assert "linear: {op: linear, in: x, out_features: 128}" in linear
    assert "Checked with hndl: the node's output is `linear`: `[B, 128] float`." in linear
    assert "does not check" not in "".join(generated[f"ops/{docs._ops.page_name(n)}.md"] for n in names)


def test_every_declared_mistake_is_refused_and_its_page_shows_the_message(generated):
    declared = [o for o in hndl.registry if o.error_example is not None]
    assert len(declared) >= 60
    for o in declared:
        page = generated[f"ops/{docs._ops.page_name(o.name)}.md"]
        assert "## A mistake it catches" in page, o.name
        assert "though it is declared as a mistake" not in page, o.name
    sub = generated["ops/sub.md"]
    assert "  sub: {op: sub, in: [x0, x1]}" in sub
    assert "E_SHAPE sub 'sub' port 'b': 'x0' [B, 3] and 'x1' [B, 4] do not broadcast" in sub
    assert "| `b` (or a number: parameter `b`) | input | any | `any` | right operand |" in sub


def test_every_error_code_is_documented_with_a_real_message(generated):
    page = generated["errors.md"]
    assert set(_errors.FIXES) == set(hndl.CODES)
    assert set(_errors.TRIGGERS) == set(hndl.CODES)
    sections = page.split("\n## ")[1:]
    assert [s.split("\n", 1)[0] for s in sections] == list(hndl.CODES)
    for section in sections:
        code = section.split("\n", 1)[0]
        assert "**How to fix:**" in section
        if "Message:" in section:
            message = section.split("Message:\n\n```text\n", 1)[1].split("\n```", 1)[0]
            # the message the snippet raised carries its code, where the layout puts it
            assert re.search(rf"(^|: ){code}[ :]", message, re.MULTILINE), code
    # The static codes need nothing but hndl-core, so their examples are always real messages.
    for code in ("E_SPEC", "E_NAME", "E_REF", "E_CYCLE", "E_OP", "E_PARAM", "E_SHAPE", "E_DTYPE"):
        section = next(s for s in sections if s.startswith(code + "\n"))
        assert "Message:" in section, code


def test_the_error_trigger_runs_its_snippet():
    trigger, message = _errors.trigger("E_OP")
    assert 'g.add("lineer"' in trigger.source
    assert "E_OP" in message
    assert "did you mean 'linear'?" in message
    assert _errors.trigger("E_NOT_A_CODE") is None


def test_the_schema_accepts_the_examples_and_rejects_mistakes(generated):
    jsonschema = pytest.importorskip("jsonschema")
    yaml = pytest.importorskip("yaml")
    schema = json.loads(generated["spec.schema.json"])
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    good = [p for p in sorted((ROOT / "examples").glob("*.yaml")) if p.name != "broken.yaml"]
    assert good
    for path in good:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text(encoding="utf-8"))))
        assert not errors, f"{path.name}: {errors[0].message}"
    base = {"hndl": 1, "name": "m", "inputs": {"x": {"shape": ["B", 4]}}, "outputs": ["h"]}
    ok = {**base, "nodes": {"h": {"op": "linear", "in": "x", "out_features": 3}}}
    assert validator.is_valid(ok)
    for node in (
        {"op": "linear", "in": "x", "out_features": "3"},  # wrong type
        {"op": "linear", "in": "x", "out_features": 0},  # below the minimum
        {"op": "linear", "in": "x"},  # a required parameter missing
        {"op": "linear", "in": "x", "out_features": 3, "out_feature": 3},  # unknown key
        {"op": "lineer", "in": "x", "out_features": 3},  # unknown op
    ):
        assert not validator.is_valid({**base, "nodes": {"h": node}}), node
    assert not validator.is_valid({**ok, "hndl": 2})


def test_the_spec_page_is_generated_from_the_schema(generated):
    page = generated["spec-format.md"]
    assert "| `hndl` | exactly `1` | required | format version |" in page
    assert "### `linear`\n\n| key | value | default | description |" in page
    assert "| `out_features` | integer >= 1 | required |" in page


def test_the_command_page_captures_its_help(generated):
    page = generated["cli.md"]
    assert "$ hndl --help\nusage: hndl" in page
    assert "## `hndl check`" in page
    assert "## `hndl summary`" in page


def test_each_example_spec_has_a_diagram(generated):
    page = generated["examples.md"]
    examples = sorted((ROOT / "examples").glob("*.yaml"))
    for path in examples:
        assert f"## `examples/{path.name}`" in page
    assert page.count("```{graphviz}\ndigraph hndl {\n") == len(examples)  # one picture per example
    assert '  i1 [label="x\\n[B, 784] float", shape=box, style=rounded];' in page  # the mlp's input
    assert 'label="blocks: graph block x4, 793.09 k params"' in page  # subgraphs are clusters, with their parameters
    assert "This graph does not check" in page  # broken.yaml shows its errors


def test_hndl_docs_uses_only_public_hndl_core_names():
    # The private boundary: hndl-docs imports no underscore module of hndl-core and reads no underscore
    # attribute of its objects (argparse's own _actions are the stdlib's, not hndl's).
    source_dir = Path(docs.__file__).parent
    for path in sorted(source_dir.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(from|import)\s+hndl(\.torch)?\._", text), path.name
        assert not re.search(r"\bhndl\.\w*\._", text.replace("hndl.ops._dense", "")), path.name
        for attribute in re.findall(r"\b(?:opdef|o|p|cn|checked|graph|registry)\._\w+", text):
            raise AssertionError(f"{path.name} reads {attribute}")


def test_regression_the_generator_refuses_to_write_outside_an_hndl_checkout(tmp_path, capsys, monkeypatch):
    # Run in a user's project (as a hint once suggested), it rewrote that project's docs/reference: 58 files
    # changed, one deleted.
    reference = tmp_path / "docs" / "reference"
    reference.mkdir(parents=True)
    (reference / "mine.md").write_text("my own page\n")
    monkeypatch.chdir(tmp_path)
    for argv in ([], ["--check"]):
        assert docs.main(argv) == 2
        out = capsys.readouterr().out
        assert "is not a checkout of hndl (it has no packages/hndl-docs/ and no SPEC.md)" in out
        assert "run `hndl ops`" in out
    assert [p.name for p in reference.iterdir()] == ["mine.md"]
    assert (reference / "mine.md").read_text() == "my own page\n"


def test_the_generator_writes_where_root_names_on_purpose(tmp_path):
    (tmp_path / "docs").mkdir()
    assert not docs.is_checkout(tmp_path)
    assert docs.main(["--root", str(tmp_path)]) == 0
    assert (tmp_path / "docs" / "reference" / "ops" / "linear.md").is_file()


def test_a_checkout_is_recognised(monkeypatch):
    assert docs.is_checkout(ROOT)
    monkeypatch.chdir(ROOT)
    assert docs.main(["--check"]) in (0, 1)  # compared, not refused


def test_regression_the_index_op_has_its_own_page_beside_the_list_of_ops(generated):
    # The index op's page was ops/index.md, the list of every op: one of the two replaced the other.
    assert generated["ops/index.md"].startswith(docs._ops.HEADER)
    assert "[`index`](index_op.md)" in generated["ops/index.md"]
    assert "# `index`" in generated["ops/index_op.md"]
