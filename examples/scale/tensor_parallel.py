"""Tensor parallelism with the plan hndl derives: ``torchrun --nproc-per-node 2 examples/scale/tensor_parallel.py``.

``model.tensor_parallel_plan(world)`` cuts every MLP (column-parallel into, row-parallel out of it, SwiGLU's two
input projections included) and every attention with separate projections (query, key and value heads split
between the ranks), with torch's default local outputs. The runtime check sees the local shards as the logical
shapes the graph declares, so the model validates once, as always.
"""

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import parallelize_module

import hndl

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
mesh = init_device_mesh("cpu", (world,))
torch.manual_seed(0)  # the same weights on every rank before they are cut
model = hndl.build(hndl.zoo.get("llama", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2))

plan = model.tensor_parallel_plan(world)  # {"model.layers.0.self_attn.q_proj": ColwiseParallel(), ...}
parallelize_module(model, mesh, plan)

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, model.graph.params["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
mask = torch.ones(ids.shape, dtype=torch.bool)
for step in range(3):  # every rank sees the same batch: tensor parallelism splits the layers, not the data
    optimizer.zero_grad()
    logits = model(ids, mask)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step}: loss {loss.item():.4f}, validations {model.validations}")
dist.destroy_process_group()
