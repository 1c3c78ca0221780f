"""Two figures of ``slotopt bench`` that set slotopt against the memory floor measured in the same run.

* ``faces``: the Python cost of a step per tensor, for every face and API (Keras 3 ``step()`` and
  ``apply_gradients``, tf.keras legacy, TF1, TFRS ``CompositeOptimizer``, Keras 3 ``MultiOptimizer``, and the Keras 3
  and tf.keras ``LossScaleOptimizer`` wrappers), Adam on float32 tensors of 256 elements.
  Each contender steps 100, 1,000 and 3,000 tensors, interleaved round by round with a copy that moves the bytes
  the update must move (the floor); the slope of a least-squares line through the median step times is the cost of
  one more tensor, in microseconds.
* ``keras3-sparse``: Keras 3 optimizers on slices of an embedding table (1,000,000 x 64 float32, 1,024 rows per
  step drawn with repeats), in one process, interleaved with three floors: one pass over the table and its state
  where they are, each element read and written back (what an update that rewrites every row must move), a copy
  moving the bytes of the touched rows of the variable and its state (contiguous), and those rows read and written
  back where they are (what an update that leaves untouched rows alone must do, scattered over the table). Each is
  reported as a multiple of all three.
"""

from __future__ import annotations

import gc
import statistics
from typing import Any, Callable

import numpy as np
import torch

__all__ = ["FACE_COUNTS", "measure_faces", "measure_keras3_sparse", "format_faces", "format_keras3_sparse"]

FACE_COUNTS = (100, 1000, 3000)
FACE_ELEMENTS = 256
ADAM_TRAFFIC = 7  # elements moved per parameter element by a one-pass Adam step (reads + writes)


def _faces() -> dict[str, Callable[[list[torch.nn.Parameter], list[torch.Tensor]], Callable[[], Any]]]:
    import slotopt
    from slotopt import legacy, v1

    def torch_step(opt: Any, params: list[torch.nn.Parameter], grads: list[torch.Tensor]) -> Callable[[], Any]:
        for p, g in zip(params, grads):
            p.grad = g
        return opt.step

    def apply(opt: Any, params: list[torch.nn.Parameter], grads: list[torch.Tensor]) -> Callable[[], Any]:
        pairs = list(zip(grads, params))
        return lambda: opt.apply_gradients(pairs)

    def composite(params: list[torch.nn.Parameter], grads: list[torch.Tensor]) -> Callable[[], Any]:
        half = len(params) // 2
        opt = slotopt.CompositeOptimizer([(slotopt.Adam(learning_rate=1e-3), lambda: params[:half]),
                                          (slotopt.Adam(learning_rate=1e-3), lambda: params[half:])])
        return apply(opt, params, grads)

    def multi(params: list[torch.nn.Parameter], grads: list[torch.Tensor]) -> Callable[[], Any]:
        # Keras 3.15's composite routes by variable path: odd variables to one Adam, the rest to the default.
        named = [slotopt.Variable(p.detach(), name=f"{'odd' if i % 2 else 'even'}_{i}") for i, p in enumerate(params)]
        opt = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Adam(learning_rate=1e-3),
                                                          {"odd_.*": slotopt.Adam(learning_rate=1e-3)}))
        return apply(opt, named, grads)

    return {
        "Keras 3 step()": lambda p, g: torch_step(slotopt.Adam(learning_rate=1e-3, params=p), p, g),
        "Keras 3 apply_gradients": lambda p, g: apply(slotopt.Adam(learning_rate=1e-3), p, g),
        "legacy step()": lambda p, g: torch_step(legacy.Adam(learning_rate=1e-3, params=p), p, g),
        "legacy apply_gradients": lambda p, g: apply(legacy.Adam(learning_rate=1e-3), p, g),
        "TF1 step()": lambda p, g: torch_step(v1.AdamOptimizer(learning_rate=1e-3, params=p), p, g),
        "TF1 apply_gradients": lambda p, g: apply(v1.AdamOptimizer(learning_rate=1e-3), p, g),
        "TFRS CompositeOptimizer": composite,
        "Keras 3 MultiOptimizer": multi,
        "Keras 3 LossScaleOptimizer": lambda p, g: apply(slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=1e-3)),
                                                         p, g),
        "legacy LossScaleOptimizer": lambda p, g: apply(legacy.LossScaleOptimizer(legacy.Adam(learning_rate=1e-3)),
                                                        p, g),
    }


def _copy(elements: int) -> Callable[[], Any]:
    """A copy moving ``elements`` float32 through memory (a third each: read, write-allocate, write)."""
    src, dst = torch.ones(max(elements // 3, 1)), torch.empty(max(elements // 3, 1))
    return lambda: dst.copy_(src)


def _interleaved(contenders: dict[str, Callable[[], Any]], steps: int) -> dict[str, float]:
    """Median seconds per call of each contender, one call of each per round in a rotating order."""
    names = list(contenders)
    samples: dict[str, list[float]] = {n: [] for n in names}
    import time

    for r in range(steps):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = time.perf_counter()
            contenders[name]()
            samples[name].append(time.perf_counter() - start)
    return {n: statistics.median(s) for n, s in samples.items()}


def _slope_us(counts: tuple[int, ...], seconds: list[float]) -> float:
    return float(np.polyfit(np.array(counts, dtype=float), np.array(seconds), 1)[0] * 1e6)


def measure_faces(steps: int = 20, warmup: int = 3, counts: tuple[int, ...] = FACE_COUNTS) -> list[dict[str, Any]]:
    """``[{"face", "us_per_tensor", "floor_us_per_tensor"}]`` (see the module docstring)."""
    faces = _faces()
    medians: dict[str, list[float]] = {name: [] for name in [*faces, "floor"]}
    # Every round's contenders stay alive until the end: freed, their memory would be handed to the next round's
    # first contenders in scattered pieces (tensor objects and buffers freed in another order than made), and
    # those would pay cache and TLB misses the later ones, made from fresh memory, do not (measured: the same face
    # at 1.5 us per tensor when made first, 1.0 when made last). Kept, each face's tensors are made one after the
    # other from fresh memory, as a model's parameters are.
    kept: list[dict[str, Callable[[], Any]]] = []
    for n in counts:
        g = torch.Generator().manual_seed(n)
        contenders: dict[str, Callable[[], Any]] = {}
        for name, make in faces.items():
            params = [torch.nn.Parameter(torch.randn(FACE_ELEMENTS, generator=g)) for _ in range(n)]
            grads = [torch.randn(FACE_ELEMENTS, generator=g) * 0.01 for _ in range(n)]
            contenders[name] = make(params, grads)
            for _ in range(warmup):
                contenders[name]()
        contenders["floor"] = _copy(n * FACE_ELEMENTS * ADAM_TRAFFIC)
        for name, seconds in _interleaved(contenders, steps).items():
            medians[name].append(seconds)
        kept.append(contenders)
    kept.clear()
    gc.collect()
    floor = _slope_us(counts, medians["floor"])
    return [{"face": name, "us_per_tensor": _slope_us(counts, medians[name]), "floor_us_per_tensor": floor}
            for name in faces]


#: Keras 3 optimizers on slices: (label, class name, kwargs).
KERAS3_SPARSE = [
    ("Adam", "Adam", {"learning_rate": 1e-3}),
    ("AdamW", "AdamW", {"learning_rate": 1e-3}),
    ("Nadam", "Nadam", {"learning_rate": 1e-3}),
    ("Adamax", "Adamax", {"learning_rate": 1e-3}),
    ("RMSprop", "RMSprop", {"learning_rate": 1e-3}),
    ("SGD momentum", "SGD", {"learning_rate": 1e-3, "momentum": 0.9}),
    ("Adagrad", "Adagrad", {"learning_rate": 1e-3}),
    ("SGD", "SGD", {"learning_rate": 1e-3}),
]


def measure_keras3_sparse(rows: int, dim: int = 64, touched: int = 1024, steps: int = 10,
                          warmup: int = 2) -> list[dict[str, Any]]:
    """``[{"optimizer", "ms", "table_floor_ms", "rows_floor_ms"}]`` (see the module docstring)."""
    import slotopt

    out = []
    g = torch.Generator().manual_seed(0)
    for label, name, kwargs in KERAS3_SPARSE:
        table = slotopt.Variable(torch.empty(rows, dim).normal_(0.0, 0.01, generator=g), name="table")
        opt = getattr(slotopt, name)(**kwargs)
        grads = [slotopt.IndexedSlices(torch.randn(touched, dim, generator=g) * 0.01,
                                       torch.randint(0, rows, (touched,), generator=g), (rows, dim))
                 for _ in range(4)]
        turn = iter(range(1 << 62))

        def step(opt: Any = opt, table: Any = table, grads: list[Any] = grads, turn: Any = turn) -> None:
            opt.apply_gradients([(grads[next(turn) % len(grads)], table)])

        for _ in range(warmup):
            step()
        # What one pass must move: reads plus writes of the variable and every table-sized state tensor.
        state = [table, *[v for v in opt.variables if tuple(v.shape) == (rows, dim)]]
        contenders = {"step": step, "table": _table_in_place(state), "rows": _copy(2 * len(state) * touched * dim),
                      "in place": _rows_in_place(state, [g.indices for g in grads])}
        medians = _interleaved(contenders, steps)
        out.append({"optimizer": label, "ms": medians["step"] * 1e3, "table_floor_ms": medians["table"] * 1e3,
                    "rows_floor_ms": medians["rows"] * 1e3, "in_place_floor_ms": medians["in place"] * 1e3})
        del table, opt, grads, contenders
        gc.collect()
    return out


def _table_in_place(tensors: list[torch.Tensor]) -> Callable[[], Any]:
    """One pass over the variable and its state where they are: every element read and written back unchanged
    (``mul_(1.0)``, exact for every value), the bytes an update that rewrites every row must move, in the same
    memory as the step (a copy between two other buffers runs 10-50% faster or slower from run to run with where
    the kernel placed its pages)."""
    def one_pass() -> None:
        with torch.no_grad():
            for t in tensors:
                t.mul_(1.0)

    return one_pass


def _rows_in_place(tensors: list[torch.Tensor], indices: list[torch.Tensor]) -> Callable[[], Any]:
    """The touched rows of the variable and its state read and written back where they are (``index_select``
    into a buffer, ``index_copy_`` back), each step's rows in turn: the same bytes at the same scattered places
    as an update that leaves untouched rows alone, with torch's own gather and scatter."""
    buffers = [torch.empty((indices[0].numel(), *t.shape[1:]), dtype=t.dtype) for t in tensors]
    turn = iter(range(1 << 62))

    def copy() -> None:
        rows = indices[next(turn) % len(indices)]
        with torch.no_grad():
            for t, buffer in zip(tensors, buffers):
                torch.index_select(t, 0, rows, out=buffer)
                t.index_copy_(0, rows, buffer)

    return copy


def format_faces(results: list[dict[str, Any]], counts: tuple[int, ...] = FACE_COUNTS) -> str:
    lines = [f"Per-tensor cost of a step (Adam, float32 tensors of {FACE_ELEMENTS} elements, fitted over "
             f"{', '.join(map(str, counts))} tensors; floor: a copy moving the bytes the update moves)",
             f"  {'face and API':<28}{'us/tensor':>10}{'floor us':>10}{'x floor':>9}"]
    for r in results:
        floor = r["floor_us_per_tensor"]
        ratio = f"{r['us_per_tensor'] / floor:.1f}" if floor > 0 else "-"  # (a noisy run can fit a floor <= 0)
        lines.append(f"  {r['face']:<28}{r['us_per_tensor']:>10.2f}{floor:>10.2f}{ratio:>9}")
    return "\n".join(lines)


def format_keras3_sparse(results: list[dict[str, Any]], rows: int) -> str:
    lines = [f"Keras 3 on slices: {rows:,} x 64 float32 table, 1,024 touched rows per step (with repeats); floors: one "
             "pass over the table and its state in place / a copy of the bytes of the touched rows, contiguous / the "
             "touched rows read and written back in place (gather + scatter)",
             f"  {'optimizer':<14}{'ms/step':>9}{'table floor':>13}{'x table':>9}{'rows floor':>12}{'x rows':>9}"
             f"{'in place':>10}{'x in place':>12}"]
    for r in results:
        lines.append(f"  {r['optimizer']:<14}{r['ms']:>9.2f}{r['table_floor_ms']:>13.2f}"
                     f"{r['ms'] / r['table_floor_ms']:>9.2f}{r['rows_floor_ms']:>12.3f}"
                     f"{r['ms'] / r['rows_floor_ms']:>9.1f}{r['in_place_floor_ms']:>10.3f}"
                     f"{r['ms'] / r['in_place_floor_ms']:>12.2f}")
    return "\n".join(lines)
