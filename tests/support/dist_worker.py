"""One rank of tests/core/test_interop_distributed.py: ``python dist_worker.py SCENARIO RANK WORLD PORT OUT``.

Each rank trains the same small hndl model on its half of one global batch, then writes what the test compares
(losses, validation counts, error codes) to ``OUT/rank<N>.json``. It leaves with ``os._exit`` after a barrier
instead of ``destroy_process_group``: with torch 2.13 gloo's teardown sometimes hangs at exit (a plain
``nn.Sequential`` under DDP too), and the test would then wait for nothing; the results are already written.
"""

from __future__ import annotations

import inspect
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


def fsdp_api() -> tuple[Any, Any]:
    """FSDP2's ``fully_shard`` and ``MixedPrecisionPolicy``: public in ``torch.distributed.fsdp`` since torch 2.6,
    in ``torch.distributed._composable.fsdp`` before."""
    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # type: ignore[no-redef]
    return fully_shard, MixedPrecisionPolicy


def fsdp_probe(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str) -> dict[str, Any]:
    """Whether this torch's FSDP2 runs at all here (CPU, gloo): a plain nn.Linear sharded, one step."""
    fully_shard, _ = fsdp_api()
    layer = torch.nn.Linear(6, 3)
    fully_shard(layer)
    torch.nn.functional.mse_loss(layer(x), y).backward()
    return {"ok": True}


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

    fully_shard, _ = fsdp_api()

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
    fully_shard, MixedPrecisionPolicy = fsdp_api()

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


def make_blocks_model() -> hndl.GraphModule:
    """Three residual MLP blocks (a repeated subgraph) and a head: what per-block sharding is for."""
    torch.manual_seed(0)
    block = hndl.Graph("block")
    h = block.input("h", ("B", 8))
    up = block.add("linear", h, name="up", out_features=16)
    act = block.add("relu", up, name="act")
    down = block.add("linear", act, name="down", out_features=8)
    block.output(block.add("add", [h, down], name="residual"))
    g = hndl.Graph("blocks")
    x = g.input("x", ("B", 6))
    h = g.add("linear", x, name="stem", out_features=8)
    h = g.add("graph", h, name="blocks", graph=block, repeat=3)
    g.output(g.add("linear", h, name="head", out_features=3))
    return hndl.build(g)


class _TwinBlock(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.act, self.down = torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.down(self.act(self.up(h)))


class _TwinBlocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = torch.nn.Linear(6, 8)
        self.blocks = torch.nn.ModuleList(_TwinBlock() for _ in range(3))
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def blocks_twin(model: hndl.GraphModule) -> torch.nn.Module:
    plain = _TwinBlocks()
    state = {k.replace("nodes.", "").replace("n_", ""): v for k, v in model.state_dict().items()}
    plain.load_state_dict(state)
    return plain


def fsdp_blocks(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str) -> dict[str, Any]:
    """FSDP2 per block with bf16 mixed precision through model.shard_units(), beside the hand-written twin sharded
    per block the same way; then DCP saves and loads the sharded model and its optimizer."""
    from torch.distributed import checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    fully_shard, MixedPrecisionPolicy = fsdp_api()

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = make_blocks_model()
    plain = blocks_twin(model)
    units = model.shard_units()
    result: dict[str, Any] = {"units": [type(u).__name__ for u in units]}
    for unit in units:
        fully_shard(unit, mp_policy=policy)
    for block in plain.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(plain, mp_policy=policy)
    result["losses"] = train(model, x, y, world)
    result["twin_losses"] = train(plain, x, y, world)
    result["validations"] = model.validations
    result["wrong_width"] = wrong_width_code(model)
    # The refused call gathered the root's parameters in FSDP's pre-forward hook; hndl put the shards back.
    result["after_error"] = sorted({type(p).__name__ for p in model.parameters()})
    # DCP: the sharded model and an optimizer with state (momentum), saved and loaded into fresh ones. The step
    # after the refused call runs as usual (FSDP's backward reshards what its forward gathered).
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    optimizer.step()
    model_state, optim_state = get_state_dict(model, optimizer)
    path = os.path.join(out, "dcp")
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=path)
    fresh = make_blocks_model()
    for unit in fresh.shard_units():
        fully_shard(unit, mp_policy=policy)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=LR, momentum=0.9)
    fresh_model_state, fresh_optim_state = get_state_dict(fresh, fresh_optimizer)
    state = {"model": fresh_model_state, "optim": fresh_optim_state}
    dcp.load(state, checkpoint_id=path)
    set_state_dict(fresh, fresh_optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])

    def full(t: Any) -> torch.Tensor:
        return t.full_tensor() if hasattr(t, "full_tensor") else t

    loaded_model, loaded_optim = get_state_dict(fresh, fresh_optimizer)
    result["dcp_equal"] = all(torch.equal(full(a), full(loaded_model[k])) for k, a in model_state.items())
    momentum = [v["momentum_buffer"] for v in optim_state["state"].values()]
    loaded_momentum = [v["momentum_buffer"] for v in loaded_optim["state"].values()]
    result["dcp_optim_equal"] = len(momentum) == len(loaded_momentum) > 0 and all(
        torch.equal(full(a), full(b)) for a, b in zip(momentum, loaded_momentum)
    )
    result["fresh_runs"] = bool(torch.isfinite(fresh(x)).all())
    return result


def fsdp_gpt2(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str) -> dict[str, Any]:
    """zoo:gpt2 (a tiny configuration) sharded by its own units: the tied wte/lm_head pair stays in the root
    unit, so FSDP2 accepts it; the losses follow the unsharded model's."""
    fully_shard, _ = fsdp_api()

    config = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, dropout=0.0)

    def make() -> hndl.GraphModule:
        torch.manual_seed(0)
        return hndl.build(hndl.zoo.get("gpt2", **config))

    generator = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 64, (4, 8), generator=generator)
    half = ids.shape[0] // world
    local = ids[rank * half : (rank + 1) * half]

    def steps(model: torch.nn.Module, batch: torch.Tensor, world: int) -> list[float]:
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        losses = []
        for _ in range(3):
            optimizer.zero_grad()
            logits = model(batch)
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 64).float(), batch[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            total = loss.detach().clone()
            if world > 1:
                dist.all_reduce(total)
            losses.append(float(total) / world)
        return losses

    reference = steps(make(), ids, 1)
    model = make()
    units = model.shard_units()
    names = {id(m): n for n, m in model.named_modules()}
    for unit in units:
        fully_shard(unit)
    return {
        "units": [names[id(u)] for u in units],
        "losses": steps(model, local, world),
        "reference": reference,
        "tied": model.transformer.wte.weight is model.lm_head.weight,
        "validations": model.validations,
    }


def pipeline(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str, schedule_name: str) -> dict[str, Any]:
    """A 2-stage pipeline cut from the graph (model.pipeline_stages), run by torch.distributed.pipelining on the
    whole global batch in 4 microbatches; the reference is the whole model in one process."""
    from torch.distributed import pipelining

    x, y = data()  # every rank sees the global batch: stage 0 feeds x, the last stage compares with y
    microbatches = 4
    model = make_blocks_model()
    stages = model.pipeline_stages(["blocks.2"])
    stage = stages[rank]
    mb = GLOBAL_BATCH // microbatches
    pipe = pipelining.PipelineStage(
        stage,
        rank,
        world,
        torch.device("cpu"),
        input_args=stage.example_args(B=mb),
        output_args=stage.example_outputs(B=mb),
    )

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        # A microbatch's share of the whole batch's mean: the gradients the schedule sums are the whole batch's.
        return torch.nn.functional.mse_loss(output, target) / microbatches

    schedule_class = getattr(pipelining, schedule_name)
    # Since torch 2.6 a schedule divides the summed gradients by the number of microbatches unless told not to;
    # before, it summed them. The loss above is scaled for summing.
    extra = {"scale_grads": False} if "scale_grads" in inspect.signature(schedule_class).parameters else {}
    schedule = schedule_class(pipe, n_microbatches=microbatches, loss_fn=loss_fn, **extra)
    optimizer = torch.optim.SGD(stage.parameters(), lr=LR)
    losses: list[float] = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        step_losses: list[torch.Tensor] = []
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=step_losses)
        optimizer.step()
        total = torch.tensor(float(sum(float(v) for v in step_losses)))
        dist.broadcast(total, src=world - 1)
        losses.append(float(total))
    return {"losses": losses, "stage_keys": sorted(stage.state_dict())[:2], "first": stage.first}


def tensor_parallel(rank: int, world: int, x: torch.Tensor, y: torch.Tensor, out: str) -> dict[str, Any]:
    """The MLP blocks and a small LLaMA (attention with separate projections, SwiGLU) parallelized with the plan
    hndl derives from the graph and torch's default local outputs: every rank sees the whole batch; the
    reference is the same model in one process."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh("cpu", (world,))
    x, y = data()
    model = make_blocks_model()
    plan = model.tensor_parallel_plan(world)
    parallelize_module(model, mesh, plan)
    result: dict[str, Any] = {"plan": sorted(plan), "losses": train(model, x, y, world=1)}
    result["validations"] = model.validations
    result["wrong_width"] = wrong_width_code(model)

    config = dict(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )

    def make_llama() -> hndl.GraphModule:
        torch.manual_seed(0)
        return hndl.build(hndl.zoo.get("llama", **config))

    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(3))

    def steps(lm: torch.nn.Module) -> list[float]:
        optimizer = torch.optim.SGD(lm.parameters(), lr=LR)
        losses = []
        for _ in range(3):
            optimizer.zero_grad()
            logits = lm(ids, torch.ones(ids.shape, dtype=torch.bool))
            loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1))
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
        return losses

    result["llama_reference"] = steps(make_llama())
    llama = make_llama()
    parallelize_module(llama, mesh, llama.tensor_parallel_plan(world))
    result["llama_losses"] = steps(llama)
    result["llama_validations"] = llama.validations
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
        elif scenario == "fsdp_probe":
            result = fsdp_probe(rank, world, x, y, out)
        elif scenario == "fsdp_mixed":
            result = fsdp_mixed(rank, world, x, y, out)
        elif scenario == "fsdp_blocks":
            result = fsdp_blocks(rank, world, x, y, out)
        elif scenario == "fsdp_gpt2":
            result = fsdp_gpt2(rank, world, x, y, out)
        elif scenario == "tensor_parallel":
            result = tensor_parallel(rank, world, x, y, out)
        elif scenario.startswith("pipeline_"):
            result = pipeline(rank, world, x, y, out, scenario.removeprefix("pipeline_"))
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
