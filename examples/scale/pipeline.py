"""A two-stage pipeline cut from the graph: ``torchrun --nproc-per-node 2 examples/scale/pipeline.py``.

``model.pipeline_stages(num_stages=2, B=...)`` cuts the plan where the multiply-adds split evenly (or at named
nodes: ``pipeline_stages(["h.2"])``); each stage holds the model's own layers under their names and states the
shapes of what crosses into it and out of it, which is what ``PipelineStage`` takes.
"""

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe

import hndl

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
block = hndl.Graph("block")
h = block.input("h", ("B", 64))
up = block.add("gelu", block.add("linear", h, name="up", out_features=256), name="act")
block.output(block.add("add", [h, block.add("linear", up, name="down", out_features=64)], name="residual"))
g = hndl.Graph("mlp_stack")
x = g.input("x", ("B", 32))
h = g.add("linear", x, name="stem", out_features=64)
h = g.add("graph", h, name="blocks", graph=block, repeat=4)
g.output(g.add("linear", h, name="head", out_features=10))
model = hndl.build(g)

microbatches, batch = 4, 16
stages = model.pipeline_stages(num_stages=world, B=batch // microbatches)
stage = stages[rank]
pipe = PipelineStage(
    stage,
    rank,
    world,
    torch.device("cpu"),
    input_args=stage.example_args(B=batch // microbatches),
    output_args=stage.example_outputs(B=batch // microbatches),
)
schedule = ScheduleGPipe(pipe, n_microbatches=microbatches, loss_fn=torch.nn.functional.cross_entropy)
optimizer = torch.optim.SGD(stage.parameters(), lr=0.1)
inputs = torch.randn(batch, 32, generator=torch.Generator().manual_seed(1))
target = torch.randint(0, 10, (batch,), generator=torch.Generator().manual_seed(2))
for step in range(3):
    optimizer.zero_grad()
    losses: list[torch.Tensor] = []
    if rank == 0:
        schedule.step(inputs)
    else:
        schedule.step(target=target, losses=losses)
        print(f"step {step}: stage {stage.index} ({stage.first} .. {stage.last}) loss {torch.stack(losses).mean():.4f}")
    optimizer.step()
dist.destroy_process_group()
