"""Build of the optional compiled kernels (everything else is in pyproject.toml).

``slotopt/kernels/native/slotopt_kernels.c`` becomes a plain shared library that slotopt loads with ctypes: no
Python C API and no torch C++ ABI are involved, so one build serves every Python and torch version of the
machine. It is compiled for the building machine's processor, with every operation rounded separately
(``-ffp-contract=off``, no fast-math) so that it reproduces the foreach kernels bit for bit. The build is
allowed to fail (no C compiler, no OpenMP): slotopt then runs its foreach kernels, with the same results, and
``slotopt info`` says so.

``slotopt/kernels/native/tensor_table.cpp`` is a small Python extension against torch's C++ API: the per-step
checks of an ordinary step (engine/plan.py) in one pass. It is built only where torch is importable at build
time (``pip install --no-build-isolation``; the Makefile does so), records the torch it was built against, and
is loaded only under that torch. It too may fail to build: the same checks then run in Python.
"""

import os
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = "src/slotopt/kernels/native"
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-std=c11"]
# SLOTOPT_NATIVE_DEBUG=1 at build time: a library that checks the bounds of every call in C before the rule runs
# (slotopt_kernels.c, SLOTOPT_BOUNDS_CHECK; slower, for debugging and the test suite).
if os.environ.get("SLOTOPT_NATIVE_DEBUG", "").strip() not in ("", "0"):
    FLAGS.append("-DSLOTOPT_BOUNDS_CHECK")


TENSOR_TABLE = "slotopt.kernels.native._tensor_table"


def _tensor_table_extension():
    """The C++ tensor-table extension, configured for the torch of the build environment, or None without one."""
    try:
        import torch
        from torch.utils.cpp_extension import include_paths, library_paths
    except Exception:  # no torch where the build runs (an isolated build): the Python checks run instead
        print("slotopt: torch not importable at build time: the tensor-table checks will run in Python")
        return None
    version = f"{torch.__version__}+{torch.version.git_version}"
    # The language standard the installed torch's headers require (C++20 from torch 2.14 on), all warnings on and
    # fatal for slotopt's own code; torch's and Python's headers are system headers (-isystem: their warnings are
    # theirs; GCC then ignores the same directory given with -I).
    major, minor = (int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
    standard = "-std=c++20" if (major, minor) >= (2, 14) else "-std=c++17"
    return Extension(
        TENSOR_TABLE,
        sources=[os.path.join(NATIVE, "tensor_table.cpp")],
        library_dirs=library_paths(),
        runtime_library_dirs=library_paths(),
        libraries=["c10", "torch", "torch_cpu", "torch_python"],
        extra_compile_args=["-O2", standard, "-Wall", "-Wextra", "-Werror",
                            *[flag for path in [*include_paths(), sysconfig.get_paths()["include"]]
                              for flag in ("-isystem", path)],
                            f'-DSLOTOPT_TORCH_VERSION="{version}"',
                            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"],
        language="c++",
        optional=True,
    )


class OptionalNativeBuild(build_ext):
    """Tries the best configuration first, then simpler ones; never fails the install."""

    def get_ext_filename(self, fullname):
        if fullname.split(".")[-1] == TENSOR_TABLE.split(".")[-1]:  # a Python extension module, named as Python expects
            return super().get_ext_filename(fullname)
        # A plain library name, without Python's ABI tag and not ending in ".so": it is not an extension module
        # (ctypes loads it; nothing must try to import it), and one build serves every Python version.
        parts = fullname.split(".")
        return os.path.join(*parts[:-1], f"lib{parts[-1].lstrip('_')}.so.1")

    ATTEMPTS = (["-march=native", "-fopenmp"], ["-fopenmp"], ["-march=native"], [])

    def build_extension(self, ext):
        if ext.name == TENSOR_TABLE:
            try:
                super().build_extension(ext)
                print("slotopt: tensor-table checks built")
            except Exception as error:
                print(f"slotopt: tensor-table checks NOT built ({error}); they will run in Python")
            return
        # A failed rebuild must not leave an older library to be loaded (an editable install copies the
        # library into the source tree).
        in_tree = os.path.join(os.path.dirname(os.path.abspath(__file__)), "src", self.get_ext_filename(ext.name))
        for stale in {self.get_ext_fullpath(ext.name), in_tree}:
            if os.path.exists(stale):
                os.remove(stale)
        base_compile, base_link = list(ext.extra_compile_args), list(ext.extra_link_args)
        for extra in self.ATTEMPTS:
            ext.extra_compile_args = base_compile + extra
            ext.extra_link_args = base_link + [f for f in extra if f == "-fopenmp"]
            try:
                super().build_extension(ext)
            except Exception as error:  # a compiler missing or refusing a flag: try the next configuration
                print(f"slotopt: compiled kernels not built with {extra or 'plain flags'}: {error}")
                continue
            print(f"slotopt: compiled kernels built with {' '.join(FLAGS + extra)}")
            return
        print("slotopt: compiled kernels NOT built; the foreach kernels will run (same results, slower)")


setup(
    ext_modules=[
        Extension(
            "slotopt.kernels.native._slotopt_kernels",
            sources=[os.path.join(NATIVE, "slotopt_kernels.c")],
            depends=[os.path.join(NATIVE, "rules.inc")],
            extra_compile_args=FLAGS,
            optional=True,
        ),
        *[extension for extension in [_tensor_table_extension()] if extension is not None],
    ],
    cmdclass={"build_ext": OptionalNativeBuild},
)
