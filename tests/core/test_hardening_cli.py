"""The ``hndl`` command with hostile input: nothing it prints can control the terminal or forge a line, checking
never allocates a real model, and ``summary`` prints whatever ``check`` passed."""

from __future__ import annotations

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
