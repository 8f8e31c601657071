"""What a failed import says (issue 39): problems of one reason grouped so the message fits on a screen, every
problem kept on the error and behind ``--verbose``; the range a dynamic dim needs, read from torch.export's
guards, in the user's dim names; example inputs too large to make refused before any is made (issue 40)."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import import_message_models as N
import pytest
import torch
from torch.export import Dim

import hndl
from hndl.importer import FUNCTIONS, MAX_EXAMPLE_BYTES, MIN_TORCH
from hndl.importer._dim_ranges import suggested_ranges
from hndl.importer._messages import SCREEN, grouped, import_error

pytestmark = pytest.mark.skipif(
    tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]) < MIN_TORCH,
    reason=f"hndl.from_module needs torch {MIN_TORCH}; this is {torch.__version__}",
)

MODELS = Path(N.__file__).resolve()


def run_cli(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "hndl", *argv], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def two_missing_ops() -> hndl.HndlError:
    assert not set(N.MISSING) & set(FUNCTIONS), "the model must use operations hndl has no row for"
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(N.Net(), torch.randn(2, 5, 8))
    return err.value


# --- grouped messages ---------------------------------------------------------------------------------------


def test_import_message_repeating_every_parent_chain_is_grouped_by_missing_op(two_missing_ops: hndl.HndlError) -> None:
    message = str(two_missing_ops)
    assert len(message) < 3000
    assert message.startswith("40 problems in import of Net, grouped by reason into 2")
    lines = message.splitlines()
    einsum = next(line for line in lines if "aten.logcumsumexp.default" in line)
    cumsum = next(line for line in lines if "aten.cumprod.default" in line)
    for line, code in ((einsum, "torch.logcumsumexp(self.proj(x), dim=1)"), (cumsum, "torch.cumprod(mixed, dim=1)")):
        assert "E_IMPORT" in line
        assert "20 times in 20 Mix layers" in line
        assert code in line  # the source line
        assert "stages.0.blocks.0.mix, stages.0.blocks.1.mix, stages.0.blocks.2.mix and 17 more" in line
        # the enclosing layers that could not be module nodes, each class once
        assert "no layer around it can be a module node: Mix (" in line
        assert line.count("Block (") == 1
        assert line.count("Stage (") == 1
    assert f"{MODELS}:22: E_IMPORT" in einsum


def test_import_error_keeps_every_problem_in_full(two_missing_ops: hndl.HndlError) -> None:
    problems = two_missing_ops.problems
    assert len(problems) == 40
    assert {p.code for p in problems} == {"E_IMPORT"}
    layers = {f"stages.{s}.blocks.{b}.mix" for s in range(4) for b in range(5)}
    assert {p.node for p in problems} == layers
    full = two_missing_ops.full_message  # type: ignore[attr-defined]
    assert full.startswith("40 problems in import of Net:")
    assert all(f"Mix '{layer}'" in full for layer in layers)
    assert len(full) > len(str(two_missing_ops))
    assert pickle.loads(pickle.dumps(two_missing_ops)).problems == problems


def test_import_message_that_fits_on_a_screen_is_left_as_it_is() -> None:
    problem = hndl.Problem("E_IMPORT", "hndl has no op for aten.einsum.default, 2 times (at `x`)", node="a", op="A")
    error = import_error([problem], title="import of A")
    assert str(error) == str(hndl.HndlError([problem], title="import of A"))
    assert len(str(error)) <= SCREEN


def test_import_message_groups_other_kinds_of_problem_and_counts_the_rest() -> None:
    repeated = [
        hndl.Problem("E_IMPORT", "aten.foo.default: reads a buffer as data (at `y = f(x)`)", node=f"l{i}", op="L")
        for i in range(30)
    ]
    distinct = [hndl.Problem("E_IMPORT", f"input 'x{i}' is not a tensor ({'x' * 200})") for i in range(12)]
    shown = grouped([*repeated, *distinct])
    assert shown[0].message.startswith(
        "aten.foo.default: reads a buffer as data, 30 times in 30 L layers (at `y = f(x)`)"
    )
    assert shown[1:8] == distinct[:7]  # a lone problem reads as it was
    assert shown[8].message.startswith("and 5 more problem(s) of 5 other kind(s), such as: input 'x7'")
    assert len(str(import_error([*repeated, *distinct], title="import of M"))) < 3000


def test_hndl_import_groups_its_problems_and_verbose_lists_each(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "import", f"{MODELS}:Net", "--input", "2,5,8")
    assert result.returncode == 1
    assert len(result.stdout) < 3000
    lines = result.stdout.splitlines()
    assert lines[-1] == "Found 2 problems in 1 file."
    assert sum("20 times in 20 Mix layers" in line for line in lines) == 2
    assert "these 2 group 40 problems by reason; --verbose lists each" in lines[-2]
    result = run_cli(tmp_path, "import", f"{MODELS}:Net", "--input", "2,5,8", "--verbose")
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[-1] == "Found 40 problems in 1 file."
    assert sum(f"Mix 'stages.{s}.blocks.{b}.mix'" in result.stdout for s in range(4) for b in range(5)) == 20


def test_hndl_summary_of_a_module_groups_the_same_way(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "summary", f"{MODELS}:Net", "--input", "B,5,8")
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "Found 2 problems in 1 file."
    assert "20 times in 20 Mix layers" in result.stdout


# --- the range a dynamic dim needs ----------------------------------------------------------------------------


def test_dynamic_size_hint_names_the_users_dims_with_the_lower_bound_the_guards_need() -> None:
    net = N.StridedCNN().eval()
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(net, torch.randn(2, 3, 64, 96), dynamic_shapes=({2: Dim("H"), 3: Dim("W")},))
    (problem,) = err.value.problems
    assert problem.code == "E_IMPORT"
    assert (
        problem.hint
        == 'the model does not take every size of H and W; the sizes it takes: H = Dim("H", min=33); W = Dim("W", min=33)'
    )
    assert "Dim('T'" not in str(err.value)
    # the range suggested imports, and the graph computes what the module does at other sizes in it
    graph = hndl.from_module(
        net, torch.randn(2, 3, 64, 96), dynamic_shapes=({2: Dim("H", min=33), 3: Dim("W", min=33)},)
    )
    model = hndl.build(graph)
    model.load_state_dict(graph.convert(net.state_dict()))
    x = torch.randn(2, 3, 40, 123)
    assert torch.allclose(model.eval()(x), net(x), atol=1e-6)


def test_dynamic_size_hint_is_the_range_that_imports_where_torchs_suggestion_does_not() -> None:
    net = N.ValidCNN().eval()
    x = torch.randn(2, 3, 128, 128)
    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(net, x, dynamic_shapes=({2: Dim("H"), 3: Dim("W")},))
    assert (
        err.value.problems[0].hint
        == 'the model does not take every size of H and W; the sizes it takes: H = Dim("H", min=111); W = Dim("W", min=111)'
    )
    with pytest.raises(hndl.HndlError):  # torch.export's own suggestion, min=63, fails again
        hndl.from_module(net, x, dynamic_shapes=({2: Dim("H", min=63), 3: Dim("W", min=63)},))
    hndl.from_module(net, x, dynamic_shapes=({2: Dim("H", min=111), 3: Dim("W", min=111)},))


def test_dynamic_size_hint_keeps_the_users_bounds_and_finds_an_upper_one() -> None:
    text = (
        "Constraints violated (T)!\n"
        "  - Not all values of T = L['x'].size()[1] in the specified range 4 <= T <= 2048 satisfy the generated "
        "guard 4 <= L['x'].size()[1] and L['x'].size()[1] <= 512\n"
    )
    assert suggested_ranges(text, {"T": 7}) == {"T": (4, 512)}
    far = text.replace("2048", "100000").replace("<= 512", "<= 70000")
    assert suggested_ranges(far, {"T": 7}) == {"T": (4, 70000)}
    # a guard outside the grammar (a call it does not know) suggests nothing, and runs nothing
    odd = text.replace("L['x'].size()[1] <= 512", "__import__('os').getpid() <= L['x'].size()[1]")
    assert suggested_ranges(odd, {"T": 7}) == {}


def test_dynamic_size_hint_for_a_dim_the_model_fixes_says_to_leave_it_static() -> None:
    import import_models as M

    with pytest.raises(hndl.HndlError) as err:
        hndl.from_module(M.FixesBatch(), torch.randn(2, 4), dynamic_shapes=({0: Dim("B")},))
    assert (
        err.value.problems[0].hint
        == "the model fixes B to 2, the example's size: leave B static; torch suggests: B = 2"
    )


# --- example inputs too large (issue 40) ----------------------------------------------------------------------


def test_huge_dims_for_an_imported_module_are_e_input_before_any_tensor_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an example tensor was made")

    monkeypatch.setattr(torch, "randn", refuse)
    monkeypatch.setattr(torch, "zeros", refuse)
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(N.Mix(8), input_size=("B", 5, 8), B=10**12)
    (problem,) = err.value.problems
    assert problem.code == "E_INPUT"
    assert problem.message.startswith("example inputs [B=1000000000000, 5, 8] would take 145.5 TiB, more than")
    assert (
        problem.hint
        == "give B small example sizes, or none (2, 3, 5, ... then): it stays symbolic, so the graph takes any size"
    )
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(N.Mix(8), input_size=(10**40, 8))
    assert err.value.code == "E_INPUT"
    assert "[10000000000000000000000000000000000000000, 8] would take about 2**" in err.value.problems[0].message
    with pytest.raises(hndl.HndlError) as err:
        hndl.summary(N.Mix(8), input_size=("B", 5, 8), B=-3)
    assert str(err.value) == "E_INPUT: the example size of 'B' is -3, not a size (0, 1, 2, ...)"
    assert MAX_EXAMPLE_BYTES == 2**31


@pytest.mark.parametrize("command", ["import", "summary", "draw"])
def test_huge_dims_on_the_command_line_are_e_input_naming_the_dims(tmp_path: Path, command: str) -> None:
    argv = [command, f"{MODELS}:Mix", "--kwargs", '{"width": 8}', "--input", "B,T,8", "--dims", f"B={10**12},T=3"]
    result = run_cli(tmp_path, *argv, *(["-o", "m.mmd"] if command == "draw" else []))
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout.splitlines() == [
        f"{MODELS}:Mix: E_INPUT: example inputs [B=1000000000000, T=3, 8] would take 87.3 TiB, more than the 2.0 GiB "
        "an import may make to trace the module",
        "    hint:     give B, T small example sizes, or none (2, 3, 5, ... then): they stay symbolic, so the graph "
        "takes any size",
        "Found 1 problem in 1 file.",
    ]
