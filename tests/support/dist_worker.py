"""One rank of tests/core/test_interop_distributed.py: ``python dist_worker.py SCENARIO RANK WORLD PORT OUT``.

Each rank trains the same small hndl model on its half of one global batch, then writes what the test compares
(losses, validation counts, error codes) to ``OUT/rank<N>.json``. It leaves with ``os._exit`` after a barrier
instead of ``destroy_process_group``: with torch 2.13 gloo's teardown sometimes hangs at exit (a plain
``nn.Sequential`` under DDP too), and the test would then wait for nothing; the results are already written.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from typing import Any

import torch
import torch.distributed as dist

import hndl

STEPS = 4
GLOBAL_BATCH = 8
LR = 0.1


def make_model() -> hndl.GraphModule:
    torch.manual_seed(0)
    g = hndl.Graph("mlp")
    x = g.input("x", ("B", 6))
    h = g.add("linear", x, name="hidden", out_features=12)
    h = g.add("relu", h, name="act")
    g.output(g.add("linear", h, name="out", out_features=3))
    return hndl.build(g)


def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(GLOBAL_BATCH, 6, generator=generator), torch.randn(GLOBAL_BATCH, 3, generator=generator)


def train(wrapped: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, world: int) -> list[float]:
    """STEPS of SGD on the local batch; returns the global loss per step (the mean of the ranks' losses)."""
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=LR)
    losses: list[float] = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(wrapped(x), y)
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        if world > 1:
            dist.all_reduce(total)
        losses.append(float(total) / world)
    return losses


def wrong_width_code(wrapped: torch.nn.Module) -> str:
    try:
        wrapped(torch.randn(2, 5))
    except hndl.HndlError as exc:
        return exc.problems[0].code
    except Exception as exc:  # what a user would see instead of hndl's error
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def ddp(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str) -> dict[str, Any]:
    from torch.distributed import checkpoint as dcp
    from torch.nn.parallel import DistributedDataParallel

    model = make_model()
    wrapped = DistributedDataParallel(model)
    losses = train(wrapped, x, y, world)
    result: dict[str, Any] = {"losses": losses, "validations": model.validations}
    # torch.distributed.checkpoint: save the trained model, load into a fresh one, compare.
    path = os.path.join(out, "dcp")
    dcp.save({"model": model.state_dict()}, checkpoint_id=path)
    fresh = make_model()
    state = {"model": fresh.state_dict()}
    dcp.load(state, checkpoint_id=path)
    fresh.load_state_dict(state["model"])
    result["dcp_equal"] = all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh.state_dict().values())
    )
    result["dcp_changed"] = not all(
        torch.equal(a, b) for a, b in zip(make_model().state_dict().values(), fresh.state_dict().values())
    )
    result["wrong_width"] = wrong_width_code(wrapped)
    return result


def fsdp(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str, per_node: bool) -> dict[str, Any]:
    from torch.distributed import checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.fsdp import fully_shard

    model = make_model()
    if per_node:
        for step in model.plan.steps:
            layer = model.node_module(step.node.path)
            if layer is not None and any(True for _ in layer.parameters()):
                fully_shard(layer)
    fully_shard(model)
    losses = train(model, x, y, world)
    result: dict[str, Any] = {"losses": losses, "validations": model.validations}
    path = os.path.join(out, "dcp")
    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=path)
    fresh = make_model()
    if per_node:
        for step in fresh.plan.steps:
            layer = fresh.node_module(step.node.path)
            if layer is not None and any(True for _ in layer.parameters()):
                fully_shard(layer)
    fully_shard(fresh)
    state = {"model": get_model_state_dict(fresh)}
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(fresh, state["model"])
    full = get_model_state_dict(model)
    loaded = get_model_state_dict(fresh)
    result["dcp_equal"] = all(
        torch.equal(
            a.full_tensor() if hasattr(a, "full_tensor") else a, b.full_tensor() if hasattr(b, "full_tensor") else b
        )
        for a, b in zip(full.values(), loaded.values())
    )
    result["dcp_changed"] = True
    result["wrong_width"] = wrong_width_code(model)
    return result


def twin(model: hndl.GraphModule) -> torch.nn.Module:
    """The same MLP written by hand, with ``model``'s weights."""
    plain = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.ReLU(), torch.nn.Linear(12, 3))
    plain[0].load_state_dict(model.nodes.n_hidden.state_dict())
    plain[2].load_state_dict(model.nodes.n_out.state_dict())
    return plain


def fsdp_mixed(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str) -> dict[str, Any]:
    """FSDP2 with bf16 parameters and fp32 reductions (the usual LLM recipe), per layer and at the root, beside the
    hand-written twin sharded the same way; then a real edit under FSDP is still caught."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = make_model()
    plain = twin(model)
    for layer in (model.nodes.n_hidden, model.nodes.n_out):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    for layer in (plain[0], plain[2]):
        fully_shard(layer, mp_policy=policy)
    fully_shard(plain, mp_policy=policy)
    result: dict[str, Any] = {"losses": train(model, x, y, world), "twin_losses": train(plain, x, y, world)}
    result["validations"] = model.validations
    result["output_dtype"] = str(model(x).dtype)
    result["wrong_width"] = wrong_width_code(model)
    # A real edit is still a change: the output layer's bias removed behind FSDP's back.
    del model.nodes.n_out._parameters["bias"]
    try:
        model(x)
        result["edit"] = "no error"
    except hndl.HndlError as exc:
        result["edit"] = exc.problems[0].code + ": " + exc.problems[0].message
    return result


def main() -> None:
    scenario, rank, world, port, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    if scenario == "hang":  # stands in for a hung teardown: the test's timeout must turn it into a failure
        print(f"rank {rank} is waiting forever", flush=True)
        threading.Event().wait()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x, y = data()
    half = GLOBAL_BATCH // world
    x, y = x[rank * half : (rank + 1) * half], y[rank * half : (rank + 1) * half]
    try:
        if scenario == "ddp":
            result = ddp(rank, world, x, y, out)
        elif scenario == "fsdp_mixed":
            result = fsdp_mixed(rank, world, x, y, out)
        else:
            result = fsdp(rank, world, x, y, out, per_node=scenario == "fsdp_per_node")
    except Exception as exc:
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    with open(os.path.join(out, f"rank{rank}.json"), "w", encoding="utf-8") as f:
        json.dump(result, f)
    sys.stdout.flush()
    sys.stderr.flush()
    if "error" not in result:
        dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    main()
