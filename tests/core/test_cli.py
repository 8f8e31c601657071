"""The ``hndl`` command: check and summary, run in-process through main(), and once as the installed script."""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

import hndl
from hndl.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GOOD = sorted(p for p in EXAMPLES.glob("*.yaml") if p.name != "broken.yaml")
BROKEN = EXAMPLES / "broken.yaml"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_examples_are_the_ones_the_docs_promise() -> None:
    assert [p.name for p in GOOD] == [
        "clip_text.yaml",
        "conv_stack.yaml",
        "convnextv2.yaml",
        "deit.yaml",
        "efficientformer.yaml",
        "efficientnet_v2.yaml",
        "encoder_decoder.yaml",
        "gemma.yaml",
        "gpt2.yaml",
        "gpt_neox.yaml",
        "lstm_classifier.yaml",
        "maxvit.yaml",
        "mlp.yaml",
        "phi.yaml",
        "qwen2.yaml",
        "regnety.yaml",
        "resnet18.yaml",
        "resnet_basic_block.yaml",
        "tiny_gpt_decoder.yaml",
        "tiny_qwen2_decoder.yaml",
        "transformer_block.yaml",
        "unet.yaml",
        "vit.yaml",
        "vit_patch_embedding.yaml",
    ]


# --- check -------------------------------------------------------------------------------------------------


def test_check_passes_every_good_example(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", *GOOD)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{EXAMPLES / 'clip_text.yaml'}: OK (102 nodes)",
        f"{EXAMPLES / 'conv_stack.yaml'}: OK (12 nodes)",
        f"{EXAMPLES / 'convnextv2.yaml'}: OK (108 nodes)",
        f"{EXAMPLES / 'deit.yaml'}: OK (138 nodes)",
        f"{EXAMPLES / 'efficientformer.yaml'}: OK (468 nodes)",
        f"{EXAMPLES / 'efficientnet_v2.yaml'}: OK (546 nodes)",
        f"{EXAMPLES / 'encoder_decoder.yaml'}: OK (42 nodes)",
        f"{EXAMPLES / 'gemma.yaml'}: OK (25 nodes)",
        f"{EXAMPLES / 'gpt2.yaml'}: OK (102 nodes)",
        f"{EXAMPLES / 'gpt_neox.yaml'}: OK (25 nodes)",
        f"{EXAMPLES / 'lstm_classifier.yaml'}: OK (4 nodes)",
        f"{EXAMPLES / 'maxvit.yaml'}: OK (1052 nodes)",
        f"{EXAMPLES / 'mlp.yaml'}: OK (4 nodes)",
        f"{EXAMPLES / 'phi.yaml'}: OK (23 nodes)",
        f"{EXAMPLES / 'qwen2.yaml'}: OK (24 nodes)",
        f"{EXAMPLES / 'regnety.yaml'}: OK (270 nodes)",
        f"{EXAMPLES / 'resnet18.yaml'}: OK (69 nodes)",
        f"{EXAMPLES / 'resnet_basic_block.yaml'}: OK (7 nodes)",
        f"{EXAMPLES / 'tiny_gpt_decoder.yaml'}: OK (22 nodes)",
        f"{EXAMPLES / 'tiny_qwen2_decoder.yaml'}: OK (34 nodes)",
        f"{EXAMPLES / 'transformer_block.yaml'}: OK (33 nodes)",
        f"{EXAMPLES / 'unet.yaml'}: OK (37 nodes)",
        f"{EXAMPLES / 'vit.yaml'}: OK (27 nodes)",
        f"{EXAMPLES / 'vit_patch_embedding.yaml'}: OK (5 nodes)",
    ]


def test_check_lists_every_problem_of_broken_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", BROKEN)
    assert code == 1
    headlines = [line for line in out.splitlines() if not line.startswith(" ")]
    b = str(BROKEN)
    assert headlines == [
        f"{b}:10:12: E_OP node 'act': unknown op 'reluu'",
        f"{b}:11:21: E_SHAPE add 'gate' port 'b': 'hidden' [B, 512] and 'mask' [B, 100] do not broadcast: "
        "dim -1 is 512 in 'hidden' and 100 in 'mask'",
        f"{b}:12:24: E_REF linear 'out': refers to unknown input or node 'hiden'",
        f"{b}:13:37: E_PARAM dropout 'drop': parameter 'p' must be <= 1, got 1.5",
        "Found 4 problems in 1 file.",
    ]
    assert "    hint:     did you mean 'relu'?" in out
    assert "    hint:     did you mean 'hidden'?" in out
    assert "    actual:   [B, 100]" in out


def test_check_reports_good_and_bad_files_together(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", EXAMPLES / "mlp.yaml", BROKEN)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == f"{EXAMPLES / 'mlp.yaml'}: OK (4 nodes)"
    assert lines[-1] == "Found 4 problems in 1 file."


def test_check_reports_structural_problems_with_locations(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("hndl: 2\ninputs:\n  x: {shape: [B, 4]}\nnodes:\n  a: {in: x}\noutputs: [a]\n")
    code, out, _ = run(capsys, "check", spec)
    assert code == 1
    assert out.splitlines() == [
        f"{spec}:1:7: E_SPEC: unsupported format version 2",
        "    hint:     this hndl reads 'hndl: 1'",
        f"{spec}:5:3: E_SPEC node 'a': missing key 'op'",
        "    hint:     add op: <name>, e.g. op: linear",
        "Found 2 problems in 1 file.",
    ]


def test_check_reports_a_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "syntax.yml"
    spec.write_text("hndl: 1\nnodes: {a: [\n")
    code, out, _ = run(capsys, "check", spec)
    assert code == 1
    assert out.startswith(f"{spec}:2:12: E_SPEC: YAML syntax error: the '[' opened at 2:12 is not closed")


def test_check_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    code, out, _ = run(capsys, "check", missing)
    assert code == 1
    assert out.splitlines() == [
        f"{missing}: E_SPEC: no such file: '{missing}'",
        "Found 1 problem in 1 file.",
    ]


def test_check_reads_any_file_name_as_a_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "model"
    spec.write_text((EXAMPLES / "mlp.yaml").read_text())
    code, out, _ = run(capsys, "check", spec)
    assert (code, out) == (0, f"{spec}: OK (4 nodes)\n")
    code, out, _ = run(capsys, "check", tmp_path / "not_there")
    assert code == 1
    assert "E_SPEC: no such file" in out


def test_check_and_allow_imports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "imports.yaml"
    spec.write_text(
        textwrap.dedent(
            """\
            hndl: 1
            inputs: {x: {shape: [B, 4]}}
            nodes:
              act: {op: module, in: x, target: "torch.nn:Tanh"}
            outputs: [act]
            """
        )
    )
    code, out, _ = run(capsys, "check", spec)
    assert code == 1
    assert out.splitlines()[0] == (
        f"{spec}:4:28: E_PARAM module 'act': importing 'torch.nn:Tanh' is refused: "
        "this spec was loaded without allow_imports"
    )
    code, out, _ = run(capsys, "check", "--allow-imports", spec)
    assert (code, out) == (0, f"{spec}: OK (1 node)\n")
    code, out, _ = run(capsys, "summary", "--allow-imports", spec)
    assert code == 0
    assert "act   module (Tanh)  x           [B, 4]             0     ?" in out
    assert "MACs:        0 (without act)" in out


def test_check_finds_what_only_the_layer_constructor_rejects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The static check cannot know what torch.nn.Tanh accepts; building (on the meta device) does.
    spec = tmp_path / "ctor.yaml"
    spec.write_text(
        "hndl: 1\ninputs: {x: {shape: [B, 4]}}\n"
        "nodes:\n  act: {op: module, in: x, target: 'torch.nn:Tanh', kwargs: {nonsense: 1}}\noutputs: [act]\n"
    )
    code, out, _ = run(capsys, "check", "--allow-imports", spec)
    assert (code, out) == (0, f"{spec}: OK (1 node)\n")  # without --build, no layer is made
    code, out, _ = run(capsys, "check", "--allow-imports", "--build", spec)
    assert code == 1
    assert out.startswith(f"{spec}:4:3: E_PARAM module 'act': building the layer failed: TypeError:")


# --- summary -----------------------------------------------------------------------------------------------


def test_summary_of_the_mlp(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "mlp.yaml"
    code, out, err = run(capsys, "summary", path, "--dims", "B=8")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"mlp ({path})",
        "inputs:  x [8, 784]",
        "outputs: out [8, 10]",
        "",
        "node    op (layer)         input from  output shape   params     MACs",
        "------  -----------------  ----------  ------------  -------  -------",
        "hidden  linear (Linear)    x           [8, 512]      401,920   3.21 M",
        "act     relu (ReLU)        hidden      [8, 512]            0        0",
        "drop    dropout (Dropout)  act         [8, 512]            0        0",
        "out     linear (Linear)    drop        [8, 10]         5,130  40.96 k",
        "------  -----------------  ----------  ------------  -------  -------",
        "params:      407,050 (trainable 407,050, non-trainable 0)",
        "buffers:     0 elements",
        "size:        1.63 MB of parameters and buffers",
        "MACs:        3,252,224 (3.25 M)",
        "activations: 49,472 B (49.47 kB) (every node's outputs, one forward)",
    ]


def test_summary_counts_match_the_built_model(capsys: pytest.CaptureFixture[str]) -> None:
    path = EXAMPLES / "transformer_block.yaml"
    code, out, _ = run(capsys, "summary", path)
    assert code == 0
    model = hndl.build(hndl.load(path))
    total = sum(p.numel() for p in model.parameters())
    lines = out.splitlines()
    assert f"params:      {total:,} (trainable {total:,}, non-trainable 0)" in lines
    names = [line.split()[0] for line in lines[6:] if line.startswith("  blocks.")]
    assert names[:3] == ["blocks.0.ln1", "blocks.0.attn", "blocks.0.res1"]
    assert "blocks.3.res2" in names
    # Symbolic until dims are given, and the table fits a 100-column terminal.
    assert "MACs:        786432*B*T+1024*B*T*T" in lines
    assert all(len(line) <= 100 for line in lines)


def test_summary_depth_1_collapses_subgraphs_with_subtotals(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "summary", EXAMPLES / "transformer_block.yaml", "--depth", "1", "--dims", "B=8,T=64")
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith(("blocks", "norm"))]
    assert rows == [
        "blocks  graph (block x4)       x           [8, 64, 128]  793,088  436.21 M",
        "norm    layernorm (LayerNorm)  blocks      [8, 64, 128]      256         0",
    ]


def test_summary_reads_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Regression: `hndl summary -` said the file '-' does not exist.
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO((EXAMPLES / "mlp.yaml").read_text()))
    code, out, _ = run(capsys, "summary", "-")
    assert code == 0
    assert out.splitlines()[0] == "mlp (-)"


def test_summary_refuses_a_dim_the_graph_does_not_have(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "summary", EXAMPLES / "mlp.yaml", "--dims", "T=8")
    assert code == 1
    assert out.splitlines()[:4] == [
        f"{EXAMPLES / 'mlp.yaml'}: E_INPUT: the graph's inputs have no dim 'T'",
        "    expected: B",
        "    actual:   T",
        "    hint:     its dims: B",
    ]


def test_zoo_names_a_model_only_when_the_zoo_is_installed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "zoo:resnet18")
    if hasattr(hndl, "zoo"):
        assert code == 0
        assert out.startswith("zoo:resnet18: OK")
    else:
        assert code == 1
        assert "E_SPEC: no model zoo in this install, so 'zoo:resnet18' names nothing" in out


def test_summary_is_plain_text(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "summary", EXAMPLES / "conv_stack.yaml")
    assert "\x1b" not in out
    assert "fc      linear (Linear)" in out


def test_summary_of_a_broken_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "summary", BROKEN)
    assert code == 1
    assert out.splitlines()[0] == f"{BROKEN}:10:12: E_OP node 'act': unknown op 'reluu'"
    assert out.splitlines()[-1] == "Found 4 problems in 1 file."


# --- usage -------------------------------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--version")
    assert (code, out) == (0, f"hndl {hndl.__version__}\n")


def test_parser_is_public_and_new_each_call() -> None:
    # hndl.docs reads the usage from it; each call builds a fresh parser, so callers may change it.
    from hndl.cli import parser

    first, second = parser(), parser()
    assert first is not second
    assert first.prog == "hndl"
    assert first.parse_args(["check", "a.yaml", "--allow-imports"]).allow_imports is True
    assert "check" in first.format_help()
    assert "summary" in first.format_help()


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert out.startswith("usage: hndl ")
    assert "check" in out
    assert "summary" in out
    code, out, _ = run(capsys, "check", "--help")
    assert code == 0
    assert "--allow-imports" in out


@pytest.mark.parametrize("argv", [[], ["check"], ["summary"], ["frobnicate"], ["summary", "a.yaml", "b.yaml"]])
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert "usage: hndl" in err


# --- as a program ------------------------------------------------------------------------------------------


def test_check_does_not_import_torch() -> None:
    # hndl check runs on every save: it must not pay for importing torch (about a second).
    code = (
        "import sys; from hndl.cli import main; rc = main(['check', 'examples/mlp.yaml', 'examples']); "
        "assert 'torch' not in sys.modules, 'torch was imported'; print(rc)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.stderr == ""
    assert result.stdout.splitlines()[0] == "examples/mlp.yaml: OK (4 nodes)"
    assert result.stdout.splitlines()[-1] == "1"  # examples/ holds broken.yaml


def test_check_reads_every_spec_in_a_folder(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", EXAMPLES)
    assert code == 1
    checked = [line.split(":")[0] for line in out.splitlines() if line.endswith("nodes)")]
    assert checked == [str(p) for p in GOOD]


def test_installed_script(tmp_path: Path) -> None:
    script = Path(sysconfig.get_path("scripts")) / "hndl"
    assert script.exists(), f"the hndl console script is not installed at {script}"
    result = subprocess.run(
        [str(script), "check", "examples/mlp.yaml", "examples/broken.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "examples/mlp.yaml: OK (4 nodes)"
    assert lines[1] == "examples/broken.yaml:10:12: E_OP node 'act': unknown op 'reluu'"
    assert result.stderr == ""


def test_python_dash_m_hndl() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "hndl", "--version"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (result.returncode, result.stdout) == (0, f"hndl {hndl.__version__}\n")


def test_tracebacks_name_hndl_dot_hndlerror() -> None:
    # Regression: tracebacks said hndl._errors.HndlError where the docs say hndl.HndlError.
    result = subprocess.run(
        [sys.executable, "-c", "import hndl; hndl.loads('hndl: 2')"], cwd=ROOT, capture_output=True, text=True
    )
    assert "\nhndl.HndlError: " in result.stderr
    assert "_errors" not in result.stderr.splitlines()[-1]


def test_pre_commit_hook_runs_hndl_check() -> None:
    import yaml

    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert [(h["id"], h["entry"]) for h in hooks] == [("hndl-check", "hndl check")]
    import re

    assert re.search(hooks[0]["files"], "models/mlp.yaml")
    assert not re.search(hooks[0]["files"], "train.py")


# --- --param: graph-parameter overrides ---------------------------------------------------------------------

SIZED = """\
hndl: 1
name: sized
params: {size: 8, width: 4, rate: 0.5, act: gelu}
inputs:
  x: {shape: [B, size]}
nodes:
  table: {op: parameter, shape: ["$size", "$size", 16]}
  hidden: {op: linear, in: x, out_features: "$width * 2"}
  drop: {op: dropout, in: hidden, p: $rate}
outputs: [drop]
"""


@pytest.fixture
def sized(tmp_path: Path) -> Path:
    path = tmp_path / "sized.yaml"
    path.write_text(SIZED, encoding="utf-8")
    return path


def test_param_overrides_a_spec_parameter_in_check_summary_and_draw(
    sized: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "check", sized, "--param", "width=16", "--build")
    assert (code, out) == (0, f"{sized}: OK (3 nodes)\n")
    code, out, _ = run(capsys, "summary", sized, "--param", "width=16", "--param", "size=2", "--dims", "B=1")
    assert code == 0
    lines = out.splitlines()
    assert "inputs:  x [1, 2]" in lines
    # the expression '$width * 2' follows the override: 2*32 + 32 parameters, and the table's 2*2*16
    assert "params:      160 (trainable 160, non-trainable 0)" in lines
    target = tmp_path / "sized.mmd"
    code, out, _ = run(capsys, "draw", sized, "-o", target, "--param", "width=16")
    assert code == 0
    assert "linear 32" in target.read_text()


def test_param_values_are_read_as_yaml(sized: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hndl.cli import parser

    values = ["a=96", "b=0.1", "c=true", "d=null", "e=gelu", "f=[2, 2, 6, 2]", "g='96'", "h={k: 1}"]
    args = parser().parse_args(["check", "f.yaml", *(part for v in values for part in ("--param", v))])
    assert dict(args.param) == {
        "a": 96,
        "b": 0.1,
        "c": True,
        "d": None,
        "e": "gelu",
        "f": [2, 2, 6, 2],
        "g": "96",
        "h": {"k": 1},
    }
    code, _, _ = run(capsys, "check", sized, "--param", "rate=0", "--param", "act=null", "--param", "width=3")
    assert code == 0


def test_param_of_an_unknown_name_is_e_param_with_did_you_mean(sized: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", sized, "--param", "widht=16")
    assert code == 1
    assert out.splitlines() == [
        f"{sized}:3:10: E_PARAM: graph 'sized' has no parameter 'widht'",
        "    expected: one of size, width, rate, act",
        "    actual:   widht",
        "    hint:     did you mean 'width'?",
        "Found 1 problem in 1 file.",
    ]


def test_param_of_the_wrong_kind_is_e_param_at_its_declaration(sized: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "summary", sized, "--param", "width=wide")
    assert code == 1
    assert out.splitlines()[0] == (
        f"{sized}:3:19: E_PARAM: parameter 'width' of graph 'sized' is an integer (4 in the spec), got string 'wide'"
    )
    code, out, _ = run(capsys, "draw", sized, "-o", "x.mmd", "--param", "width=1.5")
    assert code == 1
    assert "got number 1.5" in out


def test_param_on_a_zoo_name_and_on_stdin(
    sized: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    _, default, _ = run(capsys, "check", "zoo:resnet18")
    code, out, _ = run(capsys, "check", "zoo:resnet18", "--param", "num_classes=10", "--param", "layers4=1")
    assert code == 0
    assert out.startswith("zoo:resnet18: OK (")
    assert out != default  # one block fewer in the last stage
    code, out, _ = run(capsys, "check", "zoo:resnet18", "--param", "num_class=10")
    assert code == 1
    assert out.startswith("zoo:resnet18:")
    assert "E_PARAM: zoo:resnet18 has no parameter 'num_class'" in out
    monkeypatch.setattr("sys.stdin", io.StringIO(SIZED))
    code, out, _ = run(capsys, "summary", "-", "--param", "size=3", "--dims", "B=2")
    assert code == 0
    assert "inputs:  x [2, 3]" in out.splitlines()


def test_param_that_is_not_name_equals_value_is_a_usage_error(sized: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for bad in ["width", "=3", "width=", "width=[1,"]:
        code, out, err = run(capsys, "check", sized, "--param", bad)
        assert (code, out) == (2, "")
        assert "--param" in err


def test_param_and_dims_giving_one_size_two_values_is_e_input(sized: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "summary", sized, "--param", "size=4", "--dims", "B=1,size=6")
    assert code == 1
    assert out.splitlines()[0] == f"{sized}: E_INPUT: 'size' is given two sizes: --param size=4 and --dims size=6"
    code, _, _ = run(capsys, "summary", sized, "--param", "size=6", "--dims", "B=1,size=6")
    assert code == 0


def test_help_names_param_on_every_verb_that_loads_a_spec() -> None:
    from hndl.cli import parser

    top = parser()
    for verb in ("check", "summary", "draw"):
        with pytest.raises(SystemExit):
            top.parse_args([verb, "--help"])
    commands = next(a for a in top._actions if a.dest == "command")
    for verb in ("check", "summary", "draw"):
        assert "--param NAME=VALUE" in commands.choices[verb].format_help()  # type: ignore[attr-defined]


def test_hndl_ops_points_to_the_expressions_section(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "ops")
    assert code == 0
    assert out.splitlines()[-1].endswith("docs/spec-files.md#expressions")
    code, out, _ = run(capsys, "ops", "--help")
    assert "docs/spec-files.md#expressions" in re.sub(r"-\n\s*", "-", out)  # argparse may wrap at the hyphen


# --- huge --dims: an error, never an allocator's traceback --------------------------------------------------


def test_summary_with_dims_too_large_to_build_is_e_input_naming_them(
    sized: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # size=10**10 makes the parameter 'table' 10**20 x 16 elements: past what even the meta device can describe
    code, out, _ = run(capsys, "summary", sized, "--dims", "B=1000000000000,size=10000000000")
    assert code == 1
    first = out.splitlines()[0]
    assert first.startswith(f"{sized}:7:3: E_INPUT: the model cannot be built at the sizes given (--dims ")
    assert "B=1000000000000,size=10000000000" in first
    assert "Traceback" not in out
    assert out.splitlines()[-1] == "Found 1 problem in 1 file."


def test_summary_and_draw_with_huge_batch_dims_answer(
    sized: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "summary", sized, "--dims", "B=1000000000000", "--train")
    assert code == 0
    assert "activations:" in out
    code, out, _ = run(capsys, "draw", sized, "-o", tmp_path / "big.mmd", "--dims", "B=1000000000000")
    assert code == 0


@pytest.mark.parametrize("failure", [MemoryError(), RuntimeError("DefaultCPUAllocator: can't allocate memory")])
def test_a_failure_to_allocate_at_the_sizes_given_is_e_input(
    failure: Exception, sized: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def fails(*args: object, **kwargs: object) -> None:
        raise failure

    monkeypatch.setattr("hndl._summary.summary", fails)
    monkeypatch.setattr("hndl._draw.draw", fails)
    code, out, _ = run(capsys, "summary", sized, "--dims", "B=1000000000000")
    assert code == 1
    assert out.splitlines()[0].startswith(
        f"{sized}: E_INPUT: the model cannot be built at the sizes given (--dims B=1000000000000): "
        f"{type(failure).__name__}"
    )
    code, out, _ = run(capsys, "draw", sized, "-o", tmp_path / "x.mmd", "--dims", "B=1000000000000")
    assert code == 1
    assert "E_INPUT: the model cannot be built at the sizes given (--dims B=1000000000000)" in out
