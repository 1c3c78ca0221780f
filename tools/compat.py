"""Does slotopt work on the torch users have? One fresh venv per torch version, as a user would set it up.

For each version: a clone of this repository's HEAD, a new venv, the README's install commands (torch from the
package index, then slotopt), ``slotopt info`` (which kernel path and which step checks run, and why), the core
suite (``CORE`` below), and ``tools/adam_bits.py``, whose digest is compared with the reference torch's (the
venv this script runs from, or ``--reference``). ``--wheel`` installs a built wheel instead of the README's
slotopt commands (the wheel check of docs/compatibility.md), with nothing but the venv's bin/ on PATH (no
compiler), and counts the core suite's skips for want of the C++ checks (a row with any fails). Prints a Markdown table row per version; each venv is
deleted when its row is done (a CUDA build of torch from the index is about 3 GB with its libraries).

    python tools/compat.py 2.4.1 2.9.1 2.15.0             # the table of docs/compatibility.md
    python tools/compat.py --wheel dist/slotopt-*.whl 2.13.0
    python tools/compat.py --wheel dist/slotopt-*.whl 2.9.1 --torch-from 2.9.1=/work/venvs/torch291

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


# (Without PYTHONPATH: a checkout's src/ on it would pass, to pip in the fresh venv, for an installed slotopt.)
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
       "PYTHONNOUSERSITE": "1"}


def run(command: list[str], cwd: str, log: list[str], timeout: float = 3600,
        env: dict | None = None) -> subprocess.CompletedProcess:
    started = time.time()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env or ENV)
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


COMPILERS = ("cc", "gcc", "g++", "c++", "clang", "clang++")
# A skip for want of the C++ checks: their tests skip with tensor_table.status() as the reason.
# (-rs groups equal skips: "SKIPPED [438] tests/x.py:24: {...}")
NO_CHECKS_SKIP = re.compile(r"^SKIPPED (?:\[(\d+)\] )?.*'active': False", re.M)


def no_compiler_env(venv: str) -> dict:
    """The environment of a user without a compiler: PATH holds the venv's own bin/ only (the wheel's install then
    cannot build anything, whatever pip tries)."""
    path = os.path.join(venv, "bin")
    found = [name for name in COMPILERS if shutil.which(name, path=path)]
    if found:
        raise SystemExit(f"{path} holds a compiler ({found}): the no-compiler install would not be one")
    return {**ENV, "PATH": path}


def _torch_from(venv: str, target_venv: str) -> None:
    """Makes the torch (and its libraries) of a prepared ``venv`` importable in the fresh ``target_venv`` through a
    ``.pth`` file, after the target's own site-packages (what the fresh venv installs wins): a CUDA torch from the
    index is 3-7 GB, installed once per version rather than once per row."""
    import glob
    source = glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    target = glob.glob(os.path.join(target_venv, "lib", "python3*", "site-packages"))
    if len(source) != 1 or len(target) != 1:
        raise SystemExit(f"{venv}: no site-packages to take torch from")
    with open(os.path.join(target[0], "zz-prepared-torch.pth"), "w") as out:
        out.write(os.path.abspath(source[0]) + "\n")


def check(version: str, args: argparse.Namespace, reference: dict) -> dict:
    work = tempfile.mkdtemp(prefix=f"slotopt-compat-{version}-", dir=args.workdir)
    log: list[str] = []
    row = {"torch": version}
    try:
        source = os.path.join(work, "slotopt")
        run(["git", "clone", "-q", ROOT, source], work, log)
        run([sys.executable, "-m", "venv", os.path.join(work, "venv")], work, log)
        python = os.path.join(work, "venv", "bin", "python")
        prepared = dict(item.split("=", 1) for item in args.torch_from).get(version)
        if prepared:
            _torch_from(prepared, os.path.join(work, "venv"))
        else:
            torch_install = run([python, "-m", "pip", "install", f"torch=={version}"], source, log)
            if torch_install.returncode:
                row["install"] = "torch not installable"
                return row
        if args.wheel:
            steps = [["-m", "pip", "install", os.path.abspath(args.wheel) + f"[{EXTRAS}]"]]
            env = no_compiler_env(os.path.join(work, "venv"))
        else:
            steps = [[part.format(extras=EXTRAS) for part in step] for step in README_INSTALL]
            env = None
        for step in steps:
            if run([python, *step], source, log, env=env).returncode:
                row["install"] = "fails: " + (log[-1].strip().splitlines() or ["?"])[-1][:120]
                return row
        row["install"] = "ok, no compiler on PATH" if args.wheel else "ok"
        if prepared:
            row["install"] += f" (torch from {os.path.basename(prepared.rstrip('/'))})"
        info = run([os.path.join(work, "venv", "bin", "slotopt"), "info"], work, log)
        row["info"] = " / ".join(line.strip() for line in info.stdout.splitlines()
                                 if line.startswith(("kernels:", "step checks:")))
        # In the clone (its tests and data); `slotopt` is the installed one (the wheel's, with --wheel: pytest puts
        # the clone's root on sys.path, not its src/).
        tests = run([python, "-m", "pytest", "-p", "no:cacheprovider", "-rs", *(["-x"] if args.exitfirst else []),
                     *CORE], source, log, timeout=args.test_timeout)
        row["core"] = pytest_summary(tests.stdout)
        unchecked = sum(int(count or 1) for count in NO_CHECKS_SKIP.findall(tests.stdout))
        row["core"] += f"; {unchecked} skipped for want of the C++ checks" if unchecked else ""
        row["no_checks_skips"] = unchecked
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
    parser.add_argument("--torch-from", action="append", default=[], metavar="VERSION=VENV",
                        help="take torch VERSION from this prepared venv (a .pth in the fresh venv) instead of "
                             "installing it from the index")
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
                         and "error" not in row.get("core", "") and not (args.wheel and row.get("no_checks_skips")))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
