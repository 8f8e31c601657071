"""Two-process training on CPU (gloo over loopback): DDP, FSDP2 and torch.distributed.checkpoint.

Each test spawns two ranks of tests/support/dist_worker.py and bounds them in time: a rank that hangs (gloo's
teardown does, now and then, with torch 2.13) is killed and the test fails with every rank's output, rather
than stalling the run. The reference is single-process training on the same global batch.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("torch.distributed")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

WORKER = Path(__file__).resolve().parents[1] / "support" / "dist_worker.py"
WORLD = 2
TIMEOUT_S = 240
sys.path.insert(0, str(WORKER.parent))
import dist_worker  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(scenario: str, tmp_path: Path, timeout_s: float = TIMEOUT_S) -> list[dict[str, Any]]:
    """Run both ranks; return their results, or fail with their output if one hangs, crashes or errs."""
    port = free_port()
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), scenario, str(rank), str(WORLD), str(port), str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
        for rank in range(WORLD)
    ]
    outputs: list[str] = []
    hung = False
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            hung = True
            for p in procs:
                p.kill()
            out, _ = proc.communicate()
        outputs.append(out)
    report = "\n".join(f"--- rank {r} (exit {p.returncode}) ---\n{o}" for r, (p, o) in enumerate(zip(procs, outputs)))
    if hung:
        pytest.fail(f"{scenario}: a rank did not finish within {timeout_s}s\n{report}")
    results = []
    for rank in range(WORLD):
        path = tmp_path / f"rank{rank}.json"
        if not path.exists():
            pytest.fail(f"{scenario}: rank {rank} wrote no result\n{report}")
        results.append(json.loads(path.read_text(encoding="utf-8")))
    errors = [r for r in results if "error" in r]
    if errors:
        raise AssertionError(f"{scenario}: a rank failed:\n" + "\n".join(r["traceback"] for r in errors))
    return results


@pytest.fixture(scope="module")
def fsdp2(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip where this torch's FSDP2 does not run on CPU with gloo (missing, or broken there in some releases):
    a plain nn.Linear, sharded on two ranks, takes one step first."""
    try:
        spawn("fsdp_probe", tmp_path_factory.mktemp("probe"), timeout_s=120)
    except (AssertionError, pytest.fail.Exception) as exc:
        last = [line for line in str(exc).splitlines() if line.strip()][-1]
        pytest.skip(f"torch {torch.__version__}'s FSDP2 does not run on CPU with gloo here: {last.strip()[:200]}")


def single_process_losses() -> list[float]:
    x, y = dist_worker.data()
    return dist_worker.train(dist_worker.make_model(), x, y, world=1)


def check_training(results: list[dict[str, Any]]) -> None:
    reference = single_process_losses()
    for rank, result in enumerate(results):
        assert result["losses"] == pytest.approx(reference, rel=1e-5, abs=1e-6), f"rank {rank}"
        assert result["validations"] == 1, f"rank {rank} validated {result['validations']} times, not once"
        assert result["wrong_width"] == "E_INPUT", f"rank {rank}: {result['wrong_width']}"
        assert result["dcp_equal"], f"rank {rank}: the checkpoint loaded back differs"
        assert result["dcp_changed"], f"rank {rank}: the checkpoint did not change the fresh model"


def test_ddp_trains_like_one_process_and_checkpoints_with_dcp(tmp_path):
    check_training(spawn("ddp", tmp_path))


def test_fsdp2_fully_shard_per_node_and_root(tmp_path, fsdp2):
    # FSDP2 swaps each sharded module's class (FSDPGraphModule, FSDPLinear) and swaps unsharded parameters in
    # through _parameters writes: neither is a false E_RUNTIME, and each rank validates once in all its steps.
    check_training(spawn("fsdp_per_node", tmp_path))


def test_fsdp2_fully_shard_root_only(tmp_path, fsdp2):
    check_training(spawn("fsdp_root", tmp_path))


def test_fsdp2_bf16_mixed_precision_trains_like_the_hand_written_model_under_the_same_policy(tmp_path, fsdp2):
    # The usual LLM recipe: MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32). FSDP registers the
    # unsharded parameters in bf16 while a unit runs and casts its inputs: not a change to the build.
    for rank, result in enumerate(spawn("fsdp_mixed", tmp_path)):
        # The same layers in the same order under the same policy: equal, not merely within bf16's tolerance.
        assert result["losses"] == result["twin_losses"], f"rank {rank}"
        assert result["validations"] == 1, f"rank {rank}"
        assert result["output_dtype"] == "torch.bfloat16"
        assert result["wrong_width"] == "E_INPUT"
        assert result["edit"].startswith("E_RUNTIME"), result["edit"]
        assert "'nodes.n_out.bias' was removed" in result["edit"]


def test_fsdp2_per_block_with_bf16_mixed_precision_through_shard_units_and_dcp_of_model_and_optimizer(tmp_path, fsdp2):
    # A repeated subgraph's repetitions are modules with a forward: fully_shard(block) hooks its calls.
    for rank, result in enumerate(spawn("fsdp_blocks", tmp_path)):
        assert result["units"] == ["Block", "Block", "Block", "GraphModule"], f"rank {rank}"
        assert result["losses"] == result["twin_losses"], f"rank {rank}"
        assert result["validations"] == 1, f"rank {rank}"
        assert result["wrong_width"] == "E_INPUT"
        assert result["after_error"] == ["DTensor"], "an error left FSDP's gathered parameters registered"
        assert result["dcp_equal"], f"rank {rank}: the sharded model loaded back differs"
        assert result["dcp_optim_equal"], f"rank {rank}: the optimizer state loaded back differs"
        assert result["fresh_runs"]


def test_fsdp2_shards_zoo_gpt2_by_its_units_keeping_the_tied_head_in_the_root(tmp_path, fsdp2):
    for rank, result in enumerate(spawn("fsdp_gpt2", tmp_path)):
        assert result["units"] == ["transformer.h.0", "transformer.h.1", ""], f"rank {rank}"
        assert result["tied"]
        assert result["losses"] == pytest.approx(result["reference"], rel=1e-4), f"rank {rank}"
        assert result["validations"] == 1


def _whole_batch_losses() -> list[float]:
    x, y = dist_worker.data()
    return dist_worker.train(dist_worker.make_blocks_model(), x, y, world=1)


@pytest.mark.parametrize("schedule", ["ScheduleGPipe", "Schedule1F1B"])
def test_a_two_stage_pipeline_cut_from_the_graph_trains_like_one_process(tmp_path, schedule):
    pytest.importorskip("torch.distributed.pipelining")
    version = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    if schedule == "Schedule1F1B" and version < (2, 5):
        pytest.skip("torch 2.4's Schedule1F1B deadlocks on CPU with gloo (seen on 2.4.1; GPipe runs)")
    reference = _whole_batch_losses()
    results = spawn(f"pipeline_{schedule}", tmp_path)
    assert results[0]["first"] == "stem"
    assert results[1]["first"] == "blocks.2.up"
    assert results[1]["stage_keys"] == ["nodes.n_blocks.2.n_down.bias", "nodes.n_blocks.2.n_down.weight"]
    for rank, result in enumerate(results):
        # Microbatch means summed in another order than the whole batch's: equal to float32 rounding.
        assert result["losses"] == pytest.approx(reference, rel=1e-5), f"rank {rank}"


def test_tensor_parallel_with_the_plan_from_the_graph_and_local_outputs(tmp_path):
    pytest.importorskip("torch.distributed.tensor.parallel")
    reference = _whole_batch_losses()
    for rank, result in enumerate(spawn("tensor_parallel", tmp_path)):
        assert result["plan"][:2] == ["nodes.n_blocks.0.n_down", "nodes.n_blocks.0.n_up"]
        # The row-parallel linear sums partial products across ranks: equal to float32 rounding.
        assert result["losses"] == pytest.approx(reference, rel=1e-5), f"rank {rank}"
        assert result["validations"] == 1  # the local [B, 16/2] shards pass as the logical [B, 16]
        assert result["wrong_width"] == "E_INPUT"
        assert result["llama_losses"] == pytest.approx(result["llama_reference"], rel=1e-5), f"rank {rank}"
        assert result["llama_validations"] == 1


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scale"


def run_example(name: str, tmp_path: Path, timeout_s: float = TIMEOUT_S) -> str:
    """``torchrun --nproc-per-node 2 examples/scale/<name>.py`` as docs/training-at-scale.md shows it; its
    output, or a failure with it."""
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(WORLD),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(free_port()),
        str(EXAMPLES / f"{name}.py"),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{name}.py did not finish within {timeout_s}s:\n{exc.stdout}\n{exc.stderr}")
    if done.returncode != 0:
        pytest.fail(f"{name}.py exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}")
    return done.stdout


def test_the_fsdp2_recipe_runs_as_written(tmp_path, fsdp2):
    out = run_example("fsdp2", tmp_path)
    assert "step 2: loss" in out
    assert "validations 1" in out


def test_the_tensor_parallel_recipe_runs_as_written(tmp_path):
    pytest.importorskip("torch.distributed.tensor.parallel")
    out = run_example("tensor_parallel", tmp_path)
    assert "step 2: loss" in out
    assert "validations 1" in out


def test_the_pipeline_recipe_runs_as_written(tmp_path):
    pytest.importorskip("torch.distributed.pipelining")
    out = run_example("pipeline", tmp_path)
    assert "step 2: stage 1" in out


def test_a_hung_rank_becomes_a_failure_with_every_ranks_output(tmp_path):
    with pytest.raises(pytest.fail.Exception) as err:
        spawn("hang", tmp_path, timeout_s=15)
    message = str(err.value)
    assert "did not finish within 15s" in message
    assert "rank 0 is waiting forever" in message
    assert "rank 1 is waiting forever" in message
