"""FSDP2 with bf16 mixed precision, sharded per block: ``torchrun --nproc-per-node 2 examples/scale/fsdp2.py``.

The model's blocks are modules with a forward, so ``fully_shard`` hooks each block's call; ``shard_units()`` lists
them, with tied parameters (GPT-2's ``wte`` and ``lm_head``) kept in the root unit. The runtime check stays on:
FSDP's bf16 parameters and inputs are the compute dtype, not a change to the build.
"""

import os

import torch
import torch.distributed as dist

import hndl

try:  # public since torch 2.6
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
except ImportError:
    from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = hndl.build(hndl.zoo.get("gpt2", n_layer=2, n_embd=64, n_head=4, vocab_size=128, n_positions=32, dropout=0.0))

policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for unit in model.shard_units():  # the blocks h.0, h.1, then the root with the tied embedding and head
    fully_shard(unit, mp_policy=policy)

optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
ids = torch.randint(0, 128, (4, 16), generator=torch.Generator().manual_seed(rank))  # this rank's batch
for step in range(3):
    optimizer.zero_grad()
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 128).float(), ids[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
    if rank == 0:
        print(f"step {step}: loss {loss.item():.4f}, validations {model.validations}")

if os.environ.get("HNDL_EXAMPLE_CHECKPOINT"):  # the sharded model and optimizer, saved with DCP
    from torch.distributed import checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=os.environ["HNDL_EXAMPLE_CHECKPOINT"])
    if rank == 0:
        print("saved", os.environ["HNDL_EXAMPLE_CHECKPOINT"])
dist.destroy_process_group()
