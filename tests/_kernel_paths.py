"""What the tests that run a step on every CPU path share (test_plan_trust.py, test_python_checks.py,
test_step_atomic.py): the paths, their test ids, and running on one of them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from slotopt.kernels import native
from slotopt.kernels.native import tensor_table

#: (kernel mode, C++ checks on): every way a step's checks and kernels run on a CPU.
ALL_PATHS = [("auto", True), ("auto", False), ("foreach", True), ("foreach", False)]


def path_id(path: tuple[str, bool]) -> str:
    kernels, table = path
    return f"{kernels}-table{'on' if table else 'off'}"


@contextmanager
def on_path(kernels: str, table: bool) -> Iterator[None]:
    """Runs the block under kernel mode ``kernels`` with the C++ checks on or off, then puts both back."""
    previous = native.use(kernels), tensor_table.use(table)
    try:
        yield
    finally:
        native.use(previous[0])
        tensor_table.use(previous[1])
