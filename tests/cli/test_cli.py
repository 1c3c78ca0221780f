"""The ``slotopt`` command: help, exit codes, parity report, demo output, benchmark tables (never timed)."""

import importlib.util
import math
import os
import re
import subprocess
import sys

import pytest
import torch

from slotopt.cli import bench, bench_report
from slotopt.cli import command as cli
from slotopt.cli.reference import load_cases

HAVE_DEMO_DEPS = all(importlib.util.find_spec(m) is not None for m in ("sklearn", "matplotlib"))


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------- help / usage
def test_console_script_help_lists_every_command():
    proc = subprocess.run([sys.executable, "-m", "slotopt.cli.command", "--help"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0
    for command in ("demo", "parity", "bench"):
        assert command in proc.stdout
    assert "Exit codes" in proc.stdout


@pytest.mark.parametrize("command", ["demo", "parity", "bench"])
def test_every_subcommand_has_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: slotopt {command}")


def test_no_command_is_a_usage_error(capsys):
    code, _, err = run([], capsys)
    assert code == cli.EXIT_USAGE == 2
    assert "usage: slotopt" in err


@pytest.mark.parametrize("argv, named", [(["parity", "--api", "keras9"], "--api"),
                                         (["demo", "--epochs", "0"], "--epochs"),
                                         (["demo", "--epochs", "x"], "--epochs"),
                                         (["bench", "--workload", "huge"], "--workload"),
                                         (["frobnicate"], "frobnicate")])
def test_bad_arguments_exit_with_2_and_name_the_argument(argv, named, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert named in err and repr(argv[-1]) in err


# ------------------------------------------------------------------------------------------- optimizers
def test_unknown_optimizer_exits_2_and_lists_valid_names(capsys):
    code, out, err = run(["demo", "--optimizer", "adam", "--optimizer", "nosuchopt"], capsys)
    assert code == 2
    assert "nosuchopt" in err
    listed = err.split("Valid optimizer names:")[1]
    names = [n.strip() for n in listed.strip().split(",")]
    assert {"adam", "sgd", "adamw"} <= set(names)
    assert "lossscaleoptimizer" not in names  # needs an inner optimizer: not usable by name
    assert out == ""  # nothing trained


def test_invalid_json_optimizer_exits_2_and_names_the_option(capsys):
    code, _, err = run(["demo", "--optimizer", '{"class_name": "Adam",'], capsys)
    assert code == 2
    assert "--optimizer" in err and "JSON" in err


def test_bad_optimizer_config_exits_2_and_names_the_argument(capsys):
    code, _, err = run(["demo", "--optimizer", '{"class_name": "Adam", "config": {"learning_rat": 0.1}}'],
                       capsys)
    assert code == 2
    assert "learning_rat" in err


def test_optimizers_given_the_keras_way_resolve_with_their_config():
    from slotopt.cli import demo

    opt = demo.resolve_optimizer(demo.parse_optimizer_arg(
        '{"class_name": "SGD", "config": {"learning_rate": 0.25, "momentum": 0.5}}'))
    assert type(opt).__name__ == "SGD"
    assert float(opt.learning_rate) == 0.25 and opt.momentum == 0.5
    assert type(demo.resolve_optimizer(demo.parse_optimizer_arg(" Adam "))).__name__ == "Adam"


# ------------------------------------------------------------------------------------------- parity
ROW = re.compile(r"^(?P<id>\S+)\s+(?P<api>keras3|legacy|v1|composite)\s+(?P<opt>\S+)\s+(?P<abs>\S+)\s+(?P<rel>\S+)\s+"
                 r"(?P<status>OK|FAIL|ERROR)$")


from test_registry_table import PENDING  # noqa: E402


def parse_parity(out):
    rows, lines = {}, out.splitlines()
    for i, line in enumerate(lines):
        m = ROW.match(line)
        if m:
            note = lines[i + 1].strip() if i + 1 < len(lines) and lines[i + 1].startswith("    ") else ""
            rows[m["id"]] = (m["status"], m["abs"], m["rel"], note)
    return rows


def test_parity_keras3_reports_every_case_and_fails_none(capsys):
    code, out, _ = run(["parity", "--api", "keras3"], capsys)
    rows = parse_parity(out)
    expected = [c["id"] for c in load_cases() if c["api"] == "keras3"]
    assert sorted(rows) == sorted(expected)
    assert not [i for i, r in rows.items() if r[0] == "FAIL" and i not in PENDING]
    errors = {i: r for i, r in rows.items() if r[0] == "ERROR" and i not in PENDING}
    # Only optimizers that do not exist yet may be reported as errors, and cleanly.
    assert all(r[3].startswith("not implemented yet: slotopt.") for r in errors.values()), errors
    assert code == (0 if not errors and not PENDING else 1)
    for status, abs_err, rel_err, _ in rows.values():
        if status == "OK":
            assert float(abs_err) <= 2e-5 and math.isfinite(float(rel_err))
    pending = [i for i in rows if i in PENDING]
    oks = [i for i, r in rows.items() if r[0] == "OK"]
    assert len(oks) >= len(rows) - len(errors) - len(pending)


def test_parity_case_filter_and_exit_code_0(capsys):
    code, out, _ = run(["parity", "--case", "keras3/sgd*"], capsys)
    rows = parse_parity(out)
    assert set(rows) == {"keras3/sgd", "keras3/sgd_momentum", "keras3/sgd_nesterov", "keras3/sgd_global_clipnorm",
                         "keras3/sgd_clipvalue", "keras3/sgd_ema", "keras3/sgd_schedule_exponential"}
    assert {r[0] for r in rows.values()} == {"OK"}
    assert code == 0


def test_parity_failure_exits_1(monkeypatch, capsys):
    import slotopt.cli.reference as reference

    real = reference.replay

    def wrong(case, device="cpu"):
        result = real(case, device=device)
        result.failures.append("step 1 w: max |diff| 1")  # as a numerical mismatch would
        return result

    monkeypatch.setattr(reference, "replay", wrong)
    code, out, _ = run(["parity", "--case", "keras3/sgd"], capsys)
    assert code == 1
    assert parse_parity(out)["keras3/sgd"][0] == "FAIL"
    assert "step 1 w: max |diff| 1" in out


def test_parity_case_that_raises_is_an_error_row(monkeypatch, capsys):
    import slotopt.cli.reference as reference

    def broken(case, device="cpu"):
        raise RuntimeError("kernel exploded")

    monkeypatch.setattr(reference, "replay", broken)
    code, out, _ = run(["parity", "--case", "keras3/adam", "--case", "keras3/sgd"], capsys)
    assert code == 1
    rows = parse_parity(out)
    assert rows["keras3/adam"][0] == rows["keras3/sgd"][0] == "ERROR"
    assert rows["keras3/adam"][3] == "RuntimeError: kernel exploded"


def test_parity_no_matching_case_is_a_usage_error(capsys):
    code, _, err = run(["parity", "--case", "nothing/*"], capsys)
    assert code == 2 and "--case" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when CUDA is missing")
def test_parity_cuda_without_gpu_is_a_usage_error(capsys):
    code, _, err = run(["parity", "--device", "cuda"], capsys)
    assert code == 2 and "CUDA" in err


# ------------------------------------------------------------------------------------------- demo
@pytest.mark.skipif(not HAVE_DEMO_DEPS, reason="needs the extras: pip install 'slotopt[demo,digits]'")
def test_demo_one_epoch_prints_table_and_writes_png(tmp_path, capsys):
    path = tmp_path / "sub" / "x.png"
    code, out, _ = run(["demo", "--epochs", "1", "--out", str(path), "--optimizer", "adam",
                        "--optimizer", '{"class_name": "SGD", "config": {"learning_rate": 0.05, "momentum": 0.9}}'],
                       capsys)
    assert code == 0, out
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.path.getsize(path) > 10_000
    assert f"Loss curves written to {path}" in out
    header = next(line for line in out.splitlines() if line.startswith("task"))
    assert header.split() == ["task", "optimizer", "final", "loss", "test", "accuracy", "seconds"]
    rows = [line for line in out.splitlines() if line.startswith("digits MLP")]
    assert [r.split()[2] for r in rows] == ["adam", "SGD(learning_rate=0.05,"]
    for r in rows:
        loss, acc = float(r.split()[-3]), float(r.split()[-2].rstrip("%"))
        assert 0 < loss < math.log(10)  # better than chance after one epoch
        assert 30 < acc <= 100


def test_missing_demo_dependency_message_says_how_to_install():
    from slotopt.cli import demo

    with pytest.raises(demo.MissingDependencyError, match=r"pip install 'slotopt\[demo\]'"):
        demo.require("slotopt_no_such_module_for_test")


# ------------------------------------------------------------------------------------------- bench (not timed)
def test_benchmark_workloads_have_the_documented_shapes():
    model = bench.WORKLOADS["model"]
    assert len(model) == 150
    assert sum(math.prod(s) for s in model) == 31_527_936  # 31.5M
    assert bench.WORKLOADS["large"] == [(4096, 4096)]
    assert bench.WORKLOADS["small"] == [(1024,)] * 2000


def test_benchmark_table_ratios():
    ms = {"slotopt": 3.0, "torch loop": 6.0, "torch foreach": 1.5, "torch fused": 0.75, "copy floor": 0.5}
    results = [bench.Measurement("large", "Adam", impl, ms=v, peak_mb=1.0) for impl, v in ms.items()]
    results += [bench.Measurement("large", "RMSprop", impl, ms=2.0) for impl in ("slotopt", "torch loop",
                                                                                   "torch foreach")]
    results.append(bench.Measurement("large", "RMSprop", "torch fused", note="n/a"))
    lines = bench_report.format_dense(results).splitlines()
    adam = lines[2].split()
    assert adam[:2] == ["large", "Adam"] and adam[-5:] == ["4.00x", "(fused)", "6.00x", "1", "1"]
    rms = lines[3].split()
    assert rms[-6:] == ["-", "1.00x", "(foreach)", "-", "-", "-"]  # no fused RMSprop in torch: foreach instead


def test_time_steps_runs_warmup_then_timed_steps():
    calls = []
    samples = bench.time_steps(lambda: calls.append(1), steps=4, warmup=2)
    assert len(calls) == 6 and len(samples) == 4 and all(s >= 0 for s in samples)


def test_dense_measurement_runs_every_implementation_on_a_tiny_workload():
    params, grads = bench._make_tensors([(8, 4), (3,)], "cpu")
    by_label = {s.label: s for s in bench.OPTIMIZERS}
    rows = {m.implementation: m for m in bench._measure_dense_group("tiny", by_label["RMSprop"], params, grads,
                                                                    steps=3, warmup=1, device="cpu")}
    for impl in ("slotopt", "torch loop", "torch foreach", "copy floor"):
        assert len(rows[impl].samples) == 3 and rows[impl].ms >= 0, impl
    assert rows["torch fused"].note == "n/a" and not rows["torch fused"].failed  # torch has no fused RMSprop
    assert all(p.grad is None for p in params)  # the measurement leaves no gradients behind


def test_a_step_that_allocates_a_temporary_shows_it_in_its_peak_memory():
    if not sys.platform.startswith("linux"):
        pytest.skip("resident-set measurement is Linux-only")
    x = torch.ones(4_000_000)  # 16 MB
    assert bench.step_peak_extra_mb(lambda: x.add_(1.0)) < 8
    assert bench.step_peak_extra_mb(lambda: (x * 2.0).sum()) > 12


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")  # raised inside torch.optim.Adagrad
@pytest.mark.parametrize("kind, name, kwargs", [("torch", "Adagrad", {"lr": 0.1}),
                                                ("slotopt", "Adagrad", {"learning_rate": 0.1})])
def test_sparse_worker_reports_step_times_and_memory(kind, name, kwargs):
    result = bench._sparse_worker({"device": "cpu", "steps": 3, "warmup": 1, "rows": 1000, "dim": 8, "touched": 16,
                                   "kind": kind, "name": name, "kwargs": kwargs})
    assert len(result["samples"]) == 3
    assert math.isfinite(result["peak_mb"]) and result["peak_mb"] >= 0


def test_a_reader_that_stops_early_ends_the_command_quietly():
    result = subprocess.run(f"{sys.executable} -m slotopt.cli.command info | head -c 7", shell=True, capture_output=True,
                            text=True, timeout=60)
    assert result.stdout == "slotopt"
    assert "Traceback" not in result.stderr and "BrokenPipeError" not in result.stderr
