"""Does slotopt work on the torch users have? One fresh venv per torch version, as a user would set it up.

For each version: a clone of this repository's HEAD, a new venv, the README's install commands (torch from the
package index, then slotopt), ``slotopt info`` (which kernel path and which step checks run, and why), the core
suite (``CORE`` below), and ``tools/adam_bits.py``, whose digest is compared with the reference torch's (the
venv this script runs from, or ``--reference``). ``--wheel`` installs a built wheel instead of the README's
slotopt commands (the wheel check of docs/compatibility.md). Prints a Markdown table row per version; each venv is
deleted when its row is done (a CUDA build of torch from the index is about 3 GB with its libraries).

    python tools/compat.py 2.4.1 2.9.1 2.15.0             # the table of docs/compatibility.md
    python tools/compat.py --wheel dist/slotopt-*.whl 2.13.0

Needs the package index and a C compiler, and takes minutes per version; it is a tool, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The core suite: the step on every path (compiled, foreach, C++ and Python checks), the three generations' faces,
# torch's optimizer protocol and checkpoints. A few minutes on two cores; the whole suite is `make test`.
CORE = ["tests/kernels/test_native_kernels.py", "tests/kernels/test_native_bounds.py", "tests/kernels/test_native_slices.py",
        "tests/kernels/test_tensor_table.py", "tests/engine/test_step_plan.py", "tests/keras3/test_keras3_base.py",
        "tests/legacy/test_legacy_base.py", "tests/v1/test_v1_optimizer.py", "tests/pytorch/test_torch_protocol.py",
        "tests/keras3/test_composite.py", "tests/kernels/test_native_portable.py"]
# The README's install commands, after `pip install torch==<version>` (README.md, "Install"); {extras} are the
# test tools the core suite needs.
README_INSTALL = [["-m", "pip", "install", "setuptools>=64", "wheel"],
                  ["-m", "pip", "install", "--no-build-isolation", "-e", "."],
                  ["-m", "pip", "install", "--no-build-isolation", "-e", ".[{extras}]"]]
EXTRAS = "test,keras,tf"


ENV = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1"}


def run(command: list[str], cwd: str, log: list[str], timeout: float = 3600) -> subprocess.CompletedProcess:
    started = time.time()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=ENV)
    log.append(f"$ {' '.join(command)}  [{result.returncode}, {time.time() - started:.0f} s]\n"
               f"{result.stdout[-20000:]}{result.stderr[-4000:]}")
    return result


def adam(python: str, cwd: str, log: list[str]) -> dict:
    result = run([python, os.path.join(ROOT, "tools", "adam_bits.py")], cwd, log)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode or not lines:
        return {"error": (result.stderr.strip().splitlines() or ["no output"])[-1]}
    return json.loads(lines[-1])


def pytest_summary(output: str) -> str:
    lines = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    counts = re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", lines[-1] if lines else "")
    return ", ".join(f"{n} {what}" for n, what in counts) or "no summary"


def check(version: str, args: argparse.Namespace, reference: dict) -> dict:
    work = tempfile.mkdtemp(prefix=f"slotopt-compat-{version}-", dir=args.workdir)
    log: list[str] = []
    row = {"torch": version}
    try:
        source = os.path.join(work, "slotopt")
        run(["git", "clone", "-q", ROOT, source], work, log)
        run([sys.executable, "-m", "venv", os.path.join(work, "venv")], work, log)
        python = os.path.join(work, "venv", "bin", "python")
        torch_install = run([python, "-m", "pip", "install", f"torch=={version}"], source, log)
        if torch_install.returncode:
            row["install"] = "torch not installable"
            return row
        if args.wheel:
            steps = [["-m", "pip", "install", os.path.abspath(args.wheel) + f"[{EXTRAS}]"]]
        else:
            steps = [[part.format(extras=EXTRAS) for part in step] for step in README_INSTALL]
        for step in steps:
            if run([python, *step], source, log).returncode:
                row["install"] = "fails: " + (log[-1].strip().splitlines() or ["?"])[-1][:120]
                return row
        row["install"] = "ok"
        info = run([os.path.join(work, "venv", "bin", "slotopt"), "info"], work, log)
        row["info"] = " / ".join(line.strip() for line in info.stdout.splitlines()
                                 if line.startswith(("kernels:", "step checks:")))
        # In the clone (its tests and data); `slotopt` is the installed one (the wheel's, with --wheel: pytest puts
        # the clone's root on sys.path, not its src/).
        tests = run([python, "-m", "pytest", "-p", "no:cacheprovider", *(["-x"] if args.exitfirst else []),
                     *CORE], source, log, timeout=args.test_timeout)
        row["core"] = pytest_summary(tests.stdout)
        result = adam(python, source, log)
        row["adam"] = result
        row["same_bits"] = bool(reference.get("digest")) and result.get("digest") == reference.get("digest")
        return row
    except subprocess.TimeoutExpired as error:
        row["error"] = f"timed out: {' '.join(map(str, error.cmd))[:80]}"
        return row
    finally:
        with open(os.path.join(args.workdir, f"compat-{version}.log"), "w") as out:
            out.write("\n".join(log))
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def markdown(row: dict, reference: dict) -> str:
    adam_row = row.get("adam", {})
    if "digest" in adam_row:
        bits = "identical" if row.get("same_bits") else f"**differ** ({adam_row['digest'][:12]})"
        bits += f"; bad step: {adam_row['bad_step_error']}, " + (
            "**half applied**" if adam_row["half_applied"] else "nothing changed")
    else:
        bits = adam_row.get("error", "–")
    return (f"| {row['torch']} | {row.get('install', row.get('error', '–'))} | {row.get('info', '–')} | "
            f"{row.get('core', '–')} | {bits} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("versions", nargs="+", help="torch versions, e.g. 2.5.1 2.10.0 2.15.0")
    parser.add_argument("--wheel", help="install this wheel instead of the README's slotopt commands")
    parser.add_argument("--reference", help="a JSON line of tools/adam_bits.py to compare with (default: run it "
                                            "with this Python)")
    parser.add_argument("--workdir", default=tempfile.gettempdir())
    parser.add_argument("--keep", action="store_true", help="keep each venv (several GB each)")
    parser.add_argument("--exitfirst", action="store_true")
    parser.add_argument("--test-timeout", type=float, default=1800)
    parser.add_argument("--ignore-pip-config", action="store_true",
                        help="pip without its configuration files (a machine-wide constraints file may cap torch)")
    args = parser.parse_args(argv)
    if args.ignore_pip_config:
        ENV["PIP_CONFIG_FILE"] = os.devnull
    log: list[str] = []
    reference = json.loads(args.reference) if args.reference else adam(sys.executable, ROOT, log)
    print(f"reference: torch {reference.get('torch')}, digest {str(reference.get('digest'))[:12]}", flush=True)
    print("| torch | install | `slotopt info` | core suite | Adam, 20 steps, vs reference |\n|---|---|---|---|---|",
          flush=True)
    failures = 0
    for version in args.versions:
        row = check(version, args, reference)
        print(markdown(row, reference), flush=True)
        failures += not (row.get("same_bits") and "failed" not in row.get("core", "failed")
                         and "error" not in row.get("core", ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
