"""``slotopt bench``'s chart and its ``--quick`` mode (issue 42: the chart's KeyError on the fifth contender).
Nothing here is timed: the figures are checked for being there and finite, never for their size."""

import importlib.util
import math

import pytest

from slotopt.cli import bench, bench_report
from slotopt.cli import command as cli

needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")


def _png(path):
    with open(path, "rb") as f:
        return f.read(8) == b"\x89PNG\r\n\x1a\n"


@needs_matplotlib
def test_the_chart_draws_every_contender_of_every_workload(tmp_path):
    dense = [bench.Measurement(w, opt, impl, ms=1.0 + k) for w in ("large", "small") for opt in ("Adam", "RMSprop")
             for k, impl in enumerate(bench.IMPLEMENTATIONS)]
    dense.append(bench.Measurement("large", "RMSprop", "torch fused", note="n/a"))  # no bar: "n/a" instead
    sparse = [bench.Measurement("sparse", "slotopt.Adam", "slotopt", ms=2.0, peak_mb=3.0)]
    path = tmp_path / "chart.png"
    bench_report.plot(dense, sparse, str(path), "title", 1000, bench.QUICK.workloads)
    assert _png(path)
    assert set(bench_report.COLORS) == set(bench.IMPLEMENTATIONS)  # five contenders, five colours


def test_quick_runs_every_figure_on_smaller_workloads():
    for name, shapes in bench.WORKLOADS.items():
        full, quick = (sum(math.prod(s) for s in w) for w in (shapes, bench.QUICK.workloads[name]))
        assert quick * 4 <= full, name
    assert bench.QUICK.workloads.keys() == bench.WORKLOADS.keys()
    assert bench.QUICK.sparse_rows * 10 == bench.SPARSE_ROWS and bench.QUICK.steps < bench.FULL.steps
    assert bench.FULL.fresh and not bench.QUICK.fresh


@needs_matplotlib
def test_a_quick_run_prints_its_tables_and_writes_the_chart(tmp_path, capsys):
    path = tmp_path / "bench.png"
    code = cli.main(["bench", "--quick", "--workload", "large", "--steps", "1", "--png", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert _png(path) and f"Chart written to {path}" in out
    rows = [line.split() for line in out.splitlines() if line.startswith("large ")]
    assert [r[1] for r in rows] == [s.label for s in bench.OPTIMIZERS]
    assert "(quick: smaller workloads)" in out


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # raised inside torch.optim.Adagrad
def test_quick_runs_the_workers_in_its_own_process():
    for entry in bench.SPARSE_OPTIMIZERS:
        m = bench._measure_sparse(entry, steps=1, warmup=0, device="cpu", rows=500, fresh=False)
        assert not m.failed and len(m.samples) == 1 and math.isfinite(m.peak_mb), entry[0]
    faces = bench.run_worker("--faces-worker", {"steps": 1, "warmup": 0, "counts": [2, 4, 6]}, fresh=False)
    assert len(faces["results"]) == 10 and all(math.isfinite(r["us_per_tensor"]) for r in faces["results"])
    assert "failed" in bench.run_worker("--faces-worker", {}, fresh=False)  # a worker that raises
