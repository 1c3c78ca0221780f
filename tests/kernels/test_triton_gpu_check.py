"""``benchmarks/gpu_check.py``, the device check of the CUDA path, run the way the test suite can: on the CPU
(``--device cpu --dry``: Triton's interpreter, tiny sizes), so that a bug in any of its sections shows here and
not in the few minutes of a GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]


def test_every_section_of_the_device_check_runs_on_the_cpu(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--device", "cpu", "--dry",
                           "--skip", "cuda-tests"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads((tmp_path / "gpu_check.json").read_text())
    assert set(results) == {"info", "kernels", "launch", "libm", "parity", "sync", "tune", "timing", "host", "graph",
                            "sync-all", "layout"}
    assert [r["function"] for r in results["libm"]["rows"]] == ["expf", "logf", "cosf", "powf", "exp", "log", "pow"]
    assert all(r["differing"] == 0 and r["inputs"] > 100 for r in results["libm"]["rows"])
    assert all(r["ok"] for r in results.values())
    passed, total = results["kernels"]["summary"].split()[0].split("/")
    assert passed == total and int(total) >= 12  # (a dry run takes every fourth case, float32 only)
    parity = results["parity"]["rows"]
    assert len(parity) >= 30 and all(r["differing"] == 0 for r in parity)
    timing = results["timing"]["rows"]
    assert {(r["workload"], r["rule"]) for r in timing} == {
        (w, r) for w in ("large", "model", "small") for r in ("Adam", "AdamW", "SGD momentum", "RMSprop", "Adagrad")}
    assert all(r["slotopt_ms"] > 0 and r["copy_ms"] > 0 for r in timing)
    tune = results["tune"]["rows"]
    assert {(r["workload"], r["rule"]) for r in tune} == {
        (w, r) for w in ("large", "model") for r in ("Adam", "SGD momentum")}
    assert all(len(r["configs"]) == 3 and r["chosen"] == "1024x4" for r in tune)  # (dry sizes are small)
    host = results["host"]["rows"]  # (issue 48) the host's time of a quiet step by part, each workload
    assert [r["workload"] for r in host] == ["large", "model", "small"]
    assert all(r["step_us"] > 0 and r["launch_us"] > 0 and r["table_us"] > 0 and r["scalars_us"] > 0
               and r["capturable_step_us"] > 0 for r in host)
    assert [r["target_us"] for r in host] == [30.0 + 0.3 * r["tensors"] for r in host]
    graph = results["graph"]  # (issue 48) capturable steps: the interpreter's recorded launches replayed
    assert "n/a on the CPU" in graph["summary"] and "interpreter: 5/5 identical" in graph["summary"]
    assert [r["rule"] for r in graph["rows"]] == ["Adam", "AdamW", "SGD momentum", "RMSprop", "Adagrad"]
    assert all(r["identical"] and r["compared_steps"] == 3 for r in graph["rows"])
    assert graph["refused"].startswith("slotopt.Adam: `clipnorm=1.0`")
    assert results["sync-all"]["summary"].startswith("n/a on the CPU (") and not results["sync-all"]["failures"]
    layout = results["layout"]["rows"]  # (issue 48) the table's layouts and chunking, small tensors first
    assert [(r["workload"], r["rule"]) for r in layout] == [
        ("small", "SGD momentum"), ("small", "Adam"), ("large", "Adam"), ("large", "SGD momentum"), ("model", "Adam"),
        ("model", "SGD momentum")]
    small = layout[0]["ms"]
    assert {"step rows", "step table", "step staged", "kernel rows 1024x4", "kernel table 1024x4", "copy"} <= set(small)
    assert all(v > 0 for r in layout for v in r["ms"].values()) and layout[0]["default"] == "step rows"
    report = (tmp_path / "gpu_check.md").read_text()
    assert "Launch table layouts and chunking" in report and "| step rows | step table | step staged |" in report
    launch = results["launch"]  # (issue 48) the prepared Triton launch against kernel[grid]: the interpreter's
    assert [r["rule"] for r in launch["rows"]] == ["sgd", "keras_momentum"]  # (dry: the first two rules)
    assert all(r["identical"] and r["prepared_launches"] == 0 and r["normal_us"] > 0 for r in launch["rows"])
    assert "2/2 rule variants bit-identical" in launch["summary"] and "interpreter: the normal route" in launch["summary"]
    report = (tmp_path / "gpu_check.md").read_text()
    assert "| rule | dtype | bit-identical | prepared launches | normal us | prepared us |" in report
    assert "Host time of one quiet step (Adam)" in report and "| checks | table | scalars | launch | target | capturable step |" in report
    assert "| slotopt replay | vs floor | bit-identical |" in report and "| True (3 steps) |" in report
    assert "| timing | yes |" in report and "vs floor" in report and "slotopt host ms/step" in report
    assert "Triton chunk x warps" in report and "| 1024x4 | 2048x4 | 4096x4 |" in report
    assert report.count("* |") == 4  # each row stars its size-based choice


def test_the_cuda_tests_are_reported_as_skipped_with_a_reason_without_a_device():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the cuda tests run for real")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "cuda",
                           "tests/kernels/test_triton_cuda.py", "-k", "two_thousand"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "SKIPPED [1]" in done.stdout and "no CUDA device here" in done.stdout
