"""DDP example: one process per GPU (torchrun starts them); gloo on CPU, nccl on GPU.

Each rank contributes rank+1 to an all-reduce; the sum must be n(n+1)/2 everywhere.
Under `gpulaunch smoke` (GPULAUNCH_SMOKE=1) it trains GPULAUNCH_SMOKE_STEPS steps, not 20.
"""

import os

import torch
import torch.distributed as dist

SMOKE = os.environ.get("GPULAUNCH_SMOKE") == "1"
STEPS = int(os.environ.get("GPULAUNCH_SMOKE_STEPS", "2")) if SMOKE else 20


def main() -> None:
    use_cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)

    value = torch.tensor([float(rank + 1)], device=device)
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    assert value.item() == expected, (value.item(), expected)

    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Linear(8, 1).to(device), device_ids=[local_rank] if use_cuda else None
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(STEPS):
        opt.zero_grad()
        loss = model(torch.randn(32, 8, device=device)).pow(2).mean()
        loss.backward()
        opt.step()
    print(
        f"rank {rank}/{world} all_reduce={value.item():.0f} expected={expected:.0f} "
        f"steps={STEPS} ok"
    )
    # every rank is done before any tears the group down: a rank that destroys it while a
    # peer's last gloo work is in flight can abort both ("terminate called without an
    # active exception", exit -6)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
