"""``slotopt bench``'s per-face and Keras 3 sparse figures run and report every contender (never timed)."""

import math

from slotopt.cli import bench_faces


def test_every_face_and_api_is_measured_against_the_floor():
    results = bench_faces.measure_faces(steps=2, warmup=1, counts=(2, 4, 6))
    assert [r["face"] for r in results] == ["Keras 3 step()", "Keras 3 apply_gradients", "legacy step()",
                                            "legacy apply_gradients", "TF1 step()", "TF1 apply_gradients",
                                            "TFRS CompositeOptimizer", "Keras 3 MultiOptimizer",
                                            "Keras 3 LossScaleOptimizer", "legacy LossScaleOptimizer"]
    assert all(math.isfinite(r["us_per_tensor"]) and math.isfinite(r["floor_us_per_tensor"]) for r in results)
    text = bench_faces.format_faces(results)
    assert "TFRS CompositeOptimizer" in text and "x floor" in text


def test_keras3_sparse_is_reported_as_multiples_of_both_floors():
    results = bench_faces.measure_keras3_sparse(rows=300, touched=8, steps=1, warmup=1)
    assert [r["optimizer"] for r in results] == [label for label, _, _ in bench_faces.KERAS3_SPARSE]
    assert all(r["ms"] > 0 and r["table_floor_ms"] > 0 and r["rows_floor_ms"] > 0 and r["in_place_floor_ms"] > 0
               for r in results)
    text = bench_faces.format_keras3_sparse(results, 300)
    assert "x table" in text and "x rows" in text and "SGD momentum" in text


def test_both_figures_run_in_fresh_processes_and_come_back_whole():
    # (``slotopt bench`` measures them in workers: a fresh heap for each, whatever ran before)
    from slotopt.cli import bench

    faces = bench.in_fresh_process("--faces-worker", {"steps": 1, "warmup": 0, "counts": [2, 4, 6]})
    assert len(faces["results"]) == 10 and all(math.isfinite(r["us_per_tensor"]) for r in faces["results"])
    sliced = bench.in_fresh_process("--keras3-sparse-worker", {"rows": 300, "touched": 8, "steps": 1, "warmup": 0})
    assert [r["optimizer"] for r in sliced["results"]] == [label for label, _, _ in bench_faces.KERAS3_SPARSE]
    assert "failed" in bench.in_fresh_process("--faces-worker", {})  # a worker that raises: its last line
