"""The ``hndl`` command with hostile input: nothing it prints can control the terminal or forge a line, checking
never allocates a real model, and ``summary`` prints whatever ``check`` passed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import hndl
from hndl.cli import main

FORGED = "\x1b[2J\nother.yaml: OK"
GOOD = "hndl: 1\ninputs: {x: {shape: [B, 4]}}\nnodes: {n: {op: relu, in: x}}\noutputs: [n]\n"


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    return code, capsys.readouterr().out


def assert_harmless(out: str) -> None:
    """No control character but the line breaks between lines, and no line anyone else wrote."""
    assert all(ch == "\n" or ch.isprintable() for ch in out), repr(out)
    assert not any(line.startswith("other.yaml: OK") for line in out.splitlines()), out


@pytest.fixture
def hostile_layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module of layers for op ``module``: one whose error message carries escape codes, one that cannot be
    built on the meta device (and records any build anywhere else)."""
    (tmp_path / "hostile_layers.py").write_text(
        textwrap.dedent(
            f"""
            import torch

            REAL_BUILDS = []

            class Loud(torch.nn.Module):
                def __init__(self):
                    raise RuntimeError({FORGED!r})

            class NotOnMeta(torch.nn.Module):
                def __init__(self):
                    super().__init__()
                    if torch.empty(0).device.type == "meta":
                        raise RuntimeError("this layer needs real memory")
                    REAL_BUILDS.append(self)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("hostile_layers", None)


def module_spec(directory: Path, target: str) -> Path:
    spec = directory / f"{target.replace(':', '_')}.yaml"
    spec.write_text(
        f"hndl: 1\ninputs: {{x: {{shape: [B, 4]}}}}\nnodes: {{n: {{op: module, in: x, target: '{target}'}}}}\n"
        "outputs: [n]\n"
    )
    return spec


def test_check_output_cannot_be_forged_by_a_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / f"good{FORGED}.yaml"
    good.write_text(GOOD)
    bad = tmp_path / f"bad{FORGED}.yaml"
    bad.write_text(GOOD.replace("hndl: 1", "hndl: 2"))
    code, out = run(capsys, "check", good, bad)
    assert code == 1
    assert_harmless(out)
    assert out.splitlines() == [
        f"{tmp_path}/good\\x1b[2J\\nother.yaml: OK.yaml: OK (1 node)",
        f"{tmp_path}/bad\\x1b[2J\\nother.yaml: OK.yaml:1:7: E_SPEC: unsupported format version 2",
        "    hint:     this hndl reads 'hndl: 1'",
        "Found 1 problem in 1 file.",
    ]


def test_summary_output_cannot_be_forged_by_a_file_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = tmp_path / f"good{FORGED}.yaml"
    good.write_text(GOOD)
    code, out = run(capsys, "summary", good)
    assert code == 0
    assert_harmless(out)
    assert out.splitlines()[0] == f"graph ({tmp_path}/good\\x1b[2J\\nother.yaml: OK.yaml)"


def test_check_escapes_a_layer_error_with_escape_codes(
    hostile_layers: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = module_spec(hostile_layers, "hostile_layers:Loud")
    code, out = run(capsys, "check", "--build", "--allow-imports", spec)
    assert code == 1
    assert_harmless(out)
    # Only the first line of a layer's error is in the message (the exception itself is chained).
    assert out.splitlines()[0] == f"{spec}:3:9: E_PARAM module 'n': building the layer failed: RuntimeError: \\x1b[2J"


def test_check_never_falls_back_to_a_real_build(hostile_layers: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A layer that fails on the meta device used to be built for real: 8 GB for a large one.
    spec = module_spec(hostile_layers, "hostile_layers:NotOnMeta")
    for command in (["check", "--build"], ["summary"]):
        code, out = run(capsys, *command, "--allow-imports", spec)
        assert code == 1
        assert out.splitlines()[:2] == [
            f"{spec}:3:9: E_PARAM module 'n': building the layer failed: RuntimeError: this layer needs real memory",
            "    hint:     hndl builds the model on PyTorch's meta device, which allocates no memory; "
            "the layer failed there",
        ]
    assert sys.modules["hostile_layers"].REAL_BUILDS == []


def test_check_reports_a_meta_build_failure_that_is_not_an_hndl_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_build(graph: hndl.Graph, checked: object = None) -> None:
        raise RuntimeError("no meta kernel\nother.yaml: OK")

    import hndl.torch._meta

    monkeypatch.setattr(hndl.torch._meta, "build_module", broken_build)
    spec = tmp_path / "m.yaml"
    spec.write_text(GOOD)
    code, out = run(capsys, "check", "--build", spec)
    assert code == 1
    assert_harmless(out)
    assert out.splitlines()[0] == (
        f"{spec}: E_PARAM: the model could not be built on PyTorch's meta device: RuntimeError: "
        "'no meta kernel\\nother.yaml: OK'"
    )


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        ("9" * 4300 + "*" + "9" * 4300, "a dimension expression is longer than 1,000 characters"),
        ("9" * 300 + "*B", "a dimension has a number of 300 digits, beyond the limit of 2**63-1"),
        ("99999999999*99999999999", "a dimension grows to 1.000e+22, beyond the limit of 2**63-1"),
    ],
    ids=["8600 digits", "300-digit coefficient", "product beyond 2**63"],
)
def test_a_dim_too_large_for_torch_is_refused_at_load(
    entry: str, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A product of two 4,300-digit literals in a shape used to check fine, with 8,600 digits no summary could print.
    spec = tmp_path / "big.yaml"
    spec.write_text(GOOD.replace("[B, 4]", f"[B, '{entry}']"))
    for command in ("check", "summary"):
        code, out = run(capsys, command, spec)
        assert code == 1
        first = out.splitlines()[0]
        assert first.startswith(f"{spec}:2:21: E_SPEC input 'x': bad shape entry ")
        assert first.endswith(reason)
        assert len(first) < len(str(spec)) + 200


# --- issue 20 -------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes")
def test_regression_check_on_a_fifo_is_refused_not_a_hang(tmp_path: Path) -> None:
    # Opening a FIFO that nothing writes to waited forever. A subprocess, so that a regression fails the test
    # instead of hanging the run.
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    done = subprocess.run(
        [sys.executable, "-m", "hndl", "check", str(fifo)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        f"{fifo}: E_SPEC: spec file '{fifo}' is a FIFO (named pipe), not a file",
        "    hint:     hndl reads a spec from a file, or from standard input as '-' (`hndl check -`, hndl.loads(text))",
        "Found 1 problem in 1 file.",
    ]


def test_regression_a_100k_character_zoo_name_is_echoed_cut(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "check", "zoo:" + "a" * 100_000)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("zoo:aaaa")
    assert lines[0].endswith("a...: E_SPEC: the zoo has no entry '" + "a" * 56 + "...")
    assert max(map(len, lines)) < 400


def test_regression_a_file_name_too_long_for_the_system_is_a_spec_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The folder test (`is_dir`) raised OSError: File name too long.
    name = str(tmp_path / ("b" * 5000)) + ".yaml"
    code, out = run(capsys, "check", name)
    assert code == 1
    assert "E_SPEC: cannot read spec file" in out
    assert "Traceback" not in out
    assert max(map(len, out.splitlines())) < 600


def test_the_import_hint_names_the_commands_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = module_spec(tmp_path, "torch.nn:Tanh")
    code, out = run(capsys, "check", spec)
    assert code == 1
    assert out.splitlines()[1] == "    hint:     pass --allow-imports if you trust this file"
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.load(spec))
    assert info.value.problems[0].hint == (
        "pass allow_imports=True to hndl.load (or hndl.load_model) if you trust this file"
    )


def test_hndl_ops_lists_every_op_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "ops")
    assert code == 0
    lines = out.splitlines()
    names = [line.split()[0] for line in lines[:-2]]
    assert names == sorted(o.name for o in hndl.registry)
    linear = next(line for line in lines if line.startswith("linear "))
    assert linear.split(None, 1)[1] == hndl.registry.find("linear").summary
    assert lines[-2] == f"{len(names)} ops; `hndl ops NAME` describes one"
    assert lines[-1].endswith("docs/spec-files.md#expressions")  # where the expression grammar is written down


def test_hndl_ops_describes_one_op_from_its_declaration(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "ops", "linear")
    assert code == 0
    assert out.splitlines() == [
        "linear: Affine map of the last dim: ``y = x @ W.T + b``.",
        "",
        "``in_features`` follows from the input's last dim and is never written by hand.",
        "",
        "builds: torch.nn.Linear",
        "",
        "parameters:",
        "  name          type  default   constraints  description",
        "  out_features  int   required  >= 1         size of each output sample",
        "  in_features   int   inferred  >= 1         size of each input sample (inferred)",
        "  bias          bool  true                   learn an additive bias",
        "",
        "ports:",
        "  port  direction  shape                   dtype   description",
        "  x     input      [*batch, in_features]   float   features in the last dim",
        "  y     output     [*batch, out_features]  same:x",
        "",
        "shape rule: binds symbols from x [*batch, in_features]; produces y [*batch, out_features] (same:x)",
    ]


@pytest.mark.parametrize("op", sorted(o.name for o in hndl.registry))
def test_hndl_ops_describes_every_op(op: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "ops", op)
    opdef = hndl.registry.find(op)
    assert code == 0
    assert out.startswith(f"{op}: {opdef.summary}\n" if opdef.summary else f"{op}\n")
    assert f"\nshape rule: {opdef.describe_inference().strip()}\n" in out
    for p in opdef.params:
        assert f"  {p.name}  " in out or out.count(f"  {p.name} ") >= 1


def test_hndl_ops_on_an_unknown_op_suggests_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "ops", "lineer")
    assert code == 1
    assert out.splitlines() == [
        "hndl ops: E_OP: unknown op 'lineer'",
        "    hint:     did you mean 'linear'?",
        "Found 1 problem in 1 file.",
    ]


def test_an_unknown_op_without_a_close_name_points_to_hndl_ops() -> None:
    with pytest.raises(hndl.HndlError) as info:
        hndl.check(hndl.loads(GOOD.replace("op: relu", "op: zzzzzz")))
    assert info.value.problems[0].hint == "`hndl ops` lists the ops"
