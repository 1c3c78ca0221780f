"""DDP with 2 gloo processes on 127.0.0.1: no optimizer reduces DDP's already-averaged gradients again (issue 10)."""

import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import slotopt

OPTIMIZERS = {
    "keras3-adamw-clipnorm": lambda p: slotopt.AdamW(learning_rate=0.01, clipnorm=0.5, params=p),
    "keras3-sgd-global-clipnorm": lambda p: slotopt.SGD(learning_rate=0.1, momentum=0.9, global_clipnorm=1.0,
                                                        params=p),
    "legacy-sgd": lambda p: slotopt.legacy.SGD(learning_rate=0.1, params=p),
    "legacy-adam": lambda p: slotopt.legacy.Adam(learning_rate=0.01, params=p),
    "legacy-ftrl": lambda p: slotopt.legacy.Ftrl(learning_rate=0.1, params=p),
    "v1-adam": lambda p: slotopt.v1.AdamOptimizer(0.01, params=p),
}
STEPS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).double()


def full_batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=g, dtype=torch.float64), torch.randn(8, 1, generator=g, dtype=torch.float64)


def _worker(rank, port, results):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        for name, make in OPTIMIZERS.items():
            model = torch.nn.parallel.DistributedDataParallel(make_model())
            opt = make(model.module)
            for step in range(STEPS):
                x, y = full_batch(step)
                x, y = x[rank * 4:(rank + 1) * 4], y[rank * 4:(rank + 1) * 4]
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            results[(name, rank)] = [p.detach().clone() for p in model.module.parameters()]
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_results():
    manager = mp.Manager()
    results = manager.dict()
    mp.start_processes(_worker, args=(free_port(), results), nprocs=2, join=True, start_method="spawn")
    return dict(results)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_ddp_equals_single_process_training_on_the_full_batch(name, ddp_results):
    model = make_model()
    opt = OPTIMIZERS[name](model)
    for step in range(STEPS):
        x, y = full_batch(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    for rank in (0, 1):
        for a, b in zip(ddp_results[(name, rank)], model.parameters()):
            torch.testing.assert_close(a, b.detach(), rtol=1e-9, atol=1e-12)
