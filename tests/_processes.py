"""Multi-process test runs that always end: gloo on 127.0.0.1, a free port each, and a deadline.

A deadlocked collective (a process that never reaches a barrier, gloo hanging in its destructor) would
otherwise hold the whole suite until CI's limit. ``run_processes`` waits at most ``seconds``, then kills every
process it started and fails the test with what it was running.
"""

from __future__ import annotations

import datetime
import socket
import time
from typing import Any, Callable

import torch.distributed as dist
import torch.multiprocessing as mp

#: What one collective may take before gloo raises in the process that waits (the deadline of a whole run is
#: longer: a run makes many collectives).
COLLECTIVE_TIMEOUT = datetime.timedelta(seconds=60)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo(rank: int, world: int, port: int) -> None:
    """Joins the gloo group of ``world`` processes on 127.0.0.1:``port``, with a bounded collective time."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=COLLECTIVE_TIMEOUT)


def run_processes(fn: Callable[..., Any], args: tuple[Any, ...], nprocs: int, seconds: float = 240.0) -> None:
    """``fn(rank, *args)`` in ``nprocs`` spawned processes; raises if one fails or all have not ended in time."""
    context = mp.start_processes(fn, args=args, nprocs=nprocs, join=False, start_method="spawn")
    deadline = time.monotonic() + seconds
    while not context.join(timeout=max(deadline - time.monotonic(), 0.0)):  # raises if a process failed
        if time.monotonic() >= deadline:
            for process in context.processes:
                if process.is_alive():
                    process.kill()
            for process in context.processes:
                process.join(5)
            raise TimeoutError(f"{getattr(fn, '__name__', fn)} on {nprocs} processes did not end within "
                               f"{seconds:.0f} s; its processes were killed")
