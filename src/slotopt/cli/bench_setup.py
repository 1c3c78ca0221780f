"""What ``slotopt bench`` measures: the workloads, the contenders, the hyperparameters on both sides, the full and
``--quick`` settings, and one measurement's record (shared by ``cli/bench.py``, which measures, and
``cli/bench_report.py``, which reports)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .bench_faces import FACE_COUNTS

Shapes = list[tuple[int, ...]]

WORKLOADS: dict[str, Shapes] = {
    "large": [(4096, 4096)],
    "model": [(512, 512)] * 24 + [(2048, 512)] * 12 + [(512, 2048)] * 12 + [(512,)] * 90 + [(2048,)] * 12,
    "small": [(1024,)] * 2000,
}

IMPLEMENTATIONS = ("slotopt", "slotopt foreach", "torch loop", "torch foreach", "torch fused")

#: Bytes a one-pass step must move per parameter element (float32), reads plus writes: the variable, the
#: gradient and each state tensor are read once, the variable and the state written once.
TRAFFIC_ELEMENTS = {"Adam": 7, "AdamW": 7, "SGD-momentum": 5, "RMSprop": 5, "Adagrad": 5}


@dataclass(frozen=True)
class OptimizerSpec:
    """One benchmarked algorithm: the slotopt class and arguments, and the torch.optim equivalent."""

    label: str
    slotopt_name: str
    slotopt_kwargs: dict[str, Any]
    torch_name: str
    torch_kwargs: dict[str, Any]


#: Same hyperparameters on both sides (epsilon 1e-7 as in Keras; torch's own default is 1e-8).
OPTIMIZERS: list[OptimizerSpec] = [
    OptimizerSpec("Adam", "Adam", {"learning_rate": 1e-3}, "Adam", {"lr": 1e-3, "eps": 1e-7}),
    OptimizerSpec("AdamW", "AdamW", {"learning_rate": 1e-3, "weight_decay": 0.004},
                  "AdamW", {"lr": 1e-3, "eps": 1e-7, "weight_decay": 0.004}),
    OptimizerSpec("SGD-momentum", "SGD", {"learning_rate": 0.01, "momentum": 0.9},
                  "SGD", {"lr": 0.01, "momentum": 0.9}),
    OptimizerSpec("RMSprop", "RMSprop", {"learning_rate": 1e-3}, "RMSprop", {"lr": 1e-3, "alpha": 0.9, "eps": 1e-7}),
    OptimizerSpec("Adagrad", "Adagrad", {"learning_rate": 1e-3},
                  "Adagrad", {"lr": 1e-3, "initial_accumulator_value": 0.1, "eps": 1e-7}),
]

#: The sparse row: (label, kind, module or torch class, class name, kwargs, what the step touches).
SPARSE_OPTIMIZERS: list[tuple[str, str, str, dict[str, Any], str]] = [
    ("slotopt.legacy.Adam", "slotopt.legacy", "Adam", {"learning_rate": 1e-3},
     "tf.keras semantics: moments decayed and table updated on all rows"),
    ("torch.optim.SparseAdam", "torch", "SparseAdam", {"lr": 1e-3, "eps": 1e-7},
     "lazy: touched rows only (not Keras semantics)"),
    ("slotopt.Adam", "slotopt", "Adam", {"learning_rate": 1e-3},
     "Keras 3 semantics: dense update of the summed gradient"),
    ("slotopt.legacy.Adagrad", "slotopt.legacy", "Adagrad", {"learning_rate": 1e-3},
     "touched rows only (= dense result)"),
    ("slotopt.Adagrad", "slotopt", "Adagrad", {"learning_rate": 1e-3}, "touched rows only (= dense result)"),
    ("torch.optim.Adagrad", "torch", "Adagrad", {"lr": 1e-3, "initial_accumulator_value": 0.1, "eps": 1e-7},
     "touched rows only"),
]

SPARSE_ROWS, SPARSE_DIM, SPARSE_TOUCHED = 1_000_000, 64, 1024


@dataclass(frozen=True)
class Setting:
    """What one run measures: the dense workloads' shapes, the timed and warm-up steps, the sparse table's rows
    and the tensor counts the per-face cost is fitted over."""

    workloads: dict[str, Shapes]
    steps: int
    warmup: int
    sparse_rows: int
    face_counts: tuple[int, ...]
    #: Whether the sparse, faces and keras3-sparse figures run in fresh processes (a fresh heap each; ``--quick``
    #: runs them in its own process: no interpreter to start for each, figures a little less clean).
    fresh: bool = True


FULL = Setting(WORKLOADS, 20, 3, SPARSE_ROWS, FACE_COUNTS)
#: ``--quick``: every contender and figure of the full run, on workloads made small enough (a quarter of the
#: model's tensors, each a sixteenth of the size; a tenth of ``small``'s count) that the whole run takes about a
#: minute on a 2-core machine: a check that everything runs, not a measurement.
QUICK = Setting({"large": [(1024, 1024)],
                 "model": [(128, 128)] * 6 + [(512, 128)] * 3 + [(128, 512)] * 3 + [(128,)] * 22 + [(512,)] * 3,
                 "small": [(1024,)] * 200},
                3, 1, SPARSE_ROWS // 10, (100, 300, 600), fresh=False)


@dataclass
class Measurement:
    """Median milliseconds per step of one (workload, optimizer, implementation), or why it did not run."""

    workload: str
    optimizer: str
    implementation: str
    ms: float = math.nan
    peak_mb: float = math.nan
    note: str = ""
    samples: list[float] = field(default_factory=list)
    failed: bool = False
