"""Issue 51's probe of torch's stable C ABI for the step checks: builds ``stable_checks.c`` (plain C, the limited
Python API, torch's ``aoti_torch_*`` C shim: no torch C++ ABI) once, then runs it under the torch of the Python
that runs this script. One build serves every torch that has the shim functions and ``torch._C._aoti``'s bulk
handle route (checked: 2.9.1 and 2.13.0).

    python tools/stable_abi/probe.py --build     # with a C compiler, against this torch's libtorch_cpu.so
    python tools/stable_abi/probe.py             # under any torch: verdicts and the cost per tensor

What it checks, per tensor of a list, from a strong handle of each (``unsafe_alloc_void_ptrs_from_tensors``, one
call for the list; the handles hold the storages, as the C++ checks' pins do, until released): contiguous, at the
recorded address, of the recorded element count, inside its storage. Not the kinds (views, functional, inference:
``operands.Kinds`` does those in one pass), not ``.grad`` or version counters.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import sysconfig
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
LIBRARY = os.path.join(HERE, "libslotopt_stable_checks.so")


def build() -> None:
    lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-shared", "-fPIC",
                    f"-I{sysconfig.get_paths()['include']}", os.path.join(HERE, "stable_checks.c"), "-o", LIBRARY,
                    f"-L{lib}", "-ltorch_cpu"], check=True)  # (no rpath: the loaded libtorch_cpu.so is found by name)


def main() -> int:
    lib = ctypes.PyDLL(LIBRARY)  # (the GIL held: it reads a list of capsules)
    fit = lib.slotopt_stable_fit
    fit.argtypes, fit.restype = [ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p], ctypes.c_int
    release = lib.slotopt_stable_release
    release.argtypes, release.restype = [ctypes.py_object], None
    handles_of = torch._C._aoti.unsafe_alloc_void_ptrs_from_tensors
    tensors = [torch.nn.Parameter(torch.randn(256)) for _ in range(1000)]
    addresses = np.array([t.data_ptr() for t in tensors], dtype=np.uint64)
    numels = np.full(len(tensors), 256, dtype=np.int64)

    def check() -> bool:
        handles = handles_of(tensors)
        try:
            return fit(handles, addresses.ctypes.data, numels.ctypes.data) == 1
        finally:
            release(handles)

    verdicts = {"as recorded": check()}
    tensors[5].data = torch.randn(256)
    verdicts["p.data = ... (moved)"] = check()
    addresses[5] = tensors[5].data_ptr()
    verdicts["recorded again"] = check()
    tensors[7].untyped_storage().resize_(0)
    verdicts["storage freed"] = check()
    tensors[7].untyped_storage().resize_(1024)
    addresses[7] = tensors[7].data_ptr()
    verdicts["storage back"] = check()
    best = float("inf")
    for _ in range(100):
        started = time.thread_time()
        check()
        best = min(best, time.thread_time() - started)
    expected = {"as recorded": True, "p.data = ... (moved)": False, "recorded again": True, "storage freed": False,
                "storage back": True}
    print(f"torch {torch.__version__}: {verdicts}; {best / len(tensors) * 1e9:.0f} ns per tensor (handles, "
          "checks, release)")
    return 0 if verdicts == expected else 1


if __name__ == "__main__":
    if "--build" in sys.argv:
        build()
    sys.exit(main())
