"""Data-parallel training with slotopt on torch.distributed: DDP or FSDP2, and a DCP checkpoint.

Run on CPU with two processes (gloo; on GPUs the same code runs with NCCL):

    torchrun --standalone --nproc-per-node 2 examples/data_parallel.py --engine fsdp2 --out /tmp/slotopt-ckpt

Each process trains on its part of every batch; the gradients are reduced by DDP/FSDP2 (slotopt never reduces
them again). At the end the sharded optimizer state is saved with torch.distributed.checkpoint.
"""

from __future__ import annotations

import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

import slotopt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["ddp", "fsdp2"], default="fsdp2")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", default=None, help="directory for the DCP checkpoint (optional)")
    args = parser.parse_args()

    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    try:
        train(args, backend)
    finally:
        # Everything that holds process-group work (DDP's reducer, FSDP2's hooks on the last loss's graph, the
        # checkpoint's DTensors) was local to train() and is gone now: destroying the group while such objects
        # are alive, or leaving them to interpreter exit, can abort or deadlock gloo's threads.
        gc.collect()
        dist.barrier()
        dist.destroy_process_group()


def train(args: argparse.Namespace, backend: str) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count()) if backend == "nccl" else torch.device("cpu")

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    if args.engine == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard

        fully_shard(model)
    opt = slotopt.AdamW(learning_rate=5e-2, weight_decay=1e-3, clipnorm=1.0, params=model)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps)

    generator = torch.Generator().manual_seed(1)
    true_w = torch.randn(16, 1, generator=generator)
    for step in range(args.steps):
        x = torch.randn(64, 16, generator=generator)
        y = x @ true_w
        x, y = x.chunk(world)[rank].to(device), y.chunk(world)[rank].to(device)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        scheduler.step()
        if rank == 0 and (step + 1) % 5 == 0:
            print(f"step {step + 1:3d}  loss {loss.item():.4f}  lr {opt.param_groups[0]['lr']:.5f}")

    if args.out:
        model_state, optim_state = get_state_dict(model, opt)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=args.out)
        if rank == 0:
            print(f"saved a {world}-process checkpoint to {args.out} (iterations={int(opt.iterations)})")


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
