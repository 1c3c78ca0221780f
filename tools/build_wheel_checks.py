"""Builds the wheel's C++ step checks: one build of kernels/native/tensor_table.cpp per torch minor version (and
C++ ABI), for each Python given, into ``src/slotopt/kernels/native/builds/<tag>/`` (``make wheel`` then packs them).

The checks read tensors through torch's C++ API (ATen/c10 and ``torch/csrc``'s Python bindings), whose layout
is fixed within a torch release line and changes between them, and through the full CPython API that torch's
own headers need (no limited API: ``THPVariable`` is a CPython object). So the wheel carries one build per torch
minor version and Python, and ``kernels/native/tensor_table.py`` picks the one for the torch and Python it finds
(``torch.__version__``'s major.minor, ``torch.compiled_with_cxx11_abi()``, the file's ABI suffix), verifies it
on a few tensors before trusting it, and otherwise runs the Python checks.

Each torch is named as one of:
  * a version (``2.9.1``): its wheel is fetched once with ``pip download --no-deps`` (about 1-3 GB from the
    package index) and only ``torch/include``, ``torch/version.py`` and the four libraries the checks link
    against are kept, under ``build/torch-headers/<version>/torch`` (the wheel is deleted);
  * a ``.whl`` file of torch: the same, from that file;
  * a folder: a venv (its ``site-packages/torch``) or a ``torch`` package folder itself.

    python tools/build_wheel_checks.py 2.4.1 2.9.1 2.13.0 2.15.0
    python tools/build_wheel_checks.py /work/venvs/torch291 --python /usr/bin/python3.12

Each build runs ``setup.py build_ext --inplace`` with ``SLOTOPT_CHECKS_TORCH`` (setup.py's flags: warnings on and
fatal, torch's language standard); the Python running it needs setuptools.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILDS = os.path.join(ROOT, "src", "slotopt", "kernels", "native", "builds")
HEADERS = os.path.join(ROOT, "build", "torch-headers")
# What a build needs of a torch wheel (everything else, the CUDA libraries above all, is left in the wheel).
KEPT_LIBRARIES = ("libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so")


def _keep(name: str) -> bool:
    return (name.startswith("torch/include/") or name == "torch/version.py"
            or name in {f"torch/lib/{library}" for library in KEPT_LIBRARIES})


def _from_wheel(wheel: str, target: str) -> str:
    """Extracts what a build needs of a torch wheel into ``target``; returns the torch folder."""
    partial = target + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            if _keep(member.filename):
                archive.extract(member, partial)
    os.replace(partial, target)
    return os.path.join(target, "torch")


def torch_folder(spec: str, python: str) -> str:
    """The ``torch`` package folder that ``spec`` (a version, a torch wheel or a folder) names."""
    if os.path.isdir(spec):
        if os.path.exists(os.path.join(spec, "version.py")):
            return os.path.abspath(spec)
        found = glob.glob(os.path.join(spec, "lib", "python3*", "site-packages", "torch", "version.py"))
        if not found:
            raise SystemExit(f"{spec}: neither a torch package folder nor a venv with torch")
        return os.path.dirname(found[0])
    if spec.endswith(".whl"):
        return _from_wheel(spec, os.path.join(HEADERS, os.path.basename(spec)[:-4]))
    target = os.path.join(HEADERS, spec)
    if os.path.exists(os.path.join(target, "torch", "version.py")):
        return os.path.join(target, "torch")
    download = tempfile.mkdtemp(prefix=f"torch-{spec}-", dir=os.path.dirname(HEADERS))
    try:
        print(f"fetching torch {spec} (for its headers)", flush=True)
        # (The machine's pip configuration may cap torch below the newest release: the index's own is asked.)
        subprocess.run([python, "-m", "pip", "download", "-q", "--no-deps", "-d", download, f"torch=={spec}"],
                       check=True, env={**os.environ, "PIP_CONSTRAINT": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        wheels = glob.glob(os.path.join(download, "torch-*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"torch {spec}: pip download gave {wheels}")
        return _from_wheel(wheels[0], target)
    finally:
        shutil.rmtree(download, ignore_errors=True)


def build(folder: str, python: str) -> list[str]:
    """Builds the checks against the torch in ``folder`` with ``python``; returns the files made."""
    before = set(glob.glob(os.path.join(BUILDS, "*", "_tensor_table*.so")))
    temp = os.path.join(ROOT, "build", "checks", re.sub(r"[^A-Za-z0-9.]+", "_", f"{folder}-{python}").strip("_"))
    subprocess.run([python, "setup.py", "-q", "build_ext", "--inplace", "--build-temp", temp], cwd=ROOT, check=True,
                   env={**os.environ, "SLOTOPT_CHECKS_TORCH": folder})
    after = set(glob.glob(os.path.join(BUILDS, "*", "_tensor_table*.so")))
    made = sorted(after - before) or sorted(after)
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("torch", nargs="+", help="torch versions, torch wheels or folders (venvs, torch packages)")
    parser.add_argument("--python", action="append", default=None,
                        help="a Python to build for (repeatable; default: this one)")
    parser.add_argument("--clean", action="store_true", help="remove every earlier build first")
    args = parser.parse_args(argv)
    pythons = args.python or [sys.executable]
    if args.clean:
        shutil.rmtree(BUILDS, ignore_errors=True)
    os.makedirs(HEADERS, exist_ok=True)
    failures = 0
    for spec in args.torch:
        folder = torch_folder(spec, pythons[0])
        for python in pythons:
            try:
                for made in build(folder, python):
                    print(f"{spec} / {os.path.basename(python)}: {os.path.relpath(made, ROOT)}", flush=True)
            except subprocess.CalledProcessError as error:
                failures += 1
                print(f"{spec} / {os.path.basename(python)}: FAILED ({error})", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
