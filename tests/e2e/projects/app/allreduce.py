"""Two gloo ranks (torchrun) all-reduce rank+1; every rank prints the sum it received.

Each line is one write(): with PYTHONUNBUFFERED, print() writes text and newline separately,
and the two ranks share the container's stdout, so their lines could interleave.
"""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
sys.stdout.write(f"rank {rank}/{world} all_reduce={value.item()}\n")
sys.stdout.flush()
dist.destroy_process_group()
