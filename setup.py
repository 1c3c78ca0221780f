"""Build of the optional compiled kernels (everything else is in pyproject.toml).

``slotopt/kernels/native/slotopt_kernels.c`` becomes a plain shared library that slotopt loads with ctypes: no
Python C API and no torch C++ ABI are involved, so one build serves every Python and torch version. On x86-64 it
is compiled three times, each into its own library: for the baseline instruction set (SSE2, every x86-64
processor: ``libslotopt_kernels.so.1``), for x86-64-v3 (AVX2: ``libslotopt_kernels_avx2.so.1``) and x86-64-v4
(AVX-512: ``libslotopt_kernels_avx512.so.1``); the loader takes the best one the processor runs, so a wheel built
on one machine runs on any other (never ``-march=native``). Every operation is rounded separately
(``-ffp-contract=off``, no fast-math), so each variant reproduces the foreach kernels bit for bit. Each build is
allowed to fail (no C compiler, no OpenMP, a compiler without the x86-64-v3/v4 levels): slotopt then runs the
variants that were built, or its foreach kernels, with the same results, and ``slotopt info`` says which.

``slotopt/kernels/native/tensor_table.cpp`` is a small Python extension against torch's C++ API: the per-step
checks of an ordinary step (engine/plan.py) in one pass. It is built only where torch is importable at build
time (``pip install --no-build-isolation``; the Makefile does so), records the torch it was built against, and
is loaded only under that torch. It too may fail to build: the same checks then run in Python.
"""

import os
import platform
import re
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = "src/slotopt/kernels/native"
# Warnings on (as for the C++ checks): the kernels are clean under -Wall -Wextra -Werror with each variant's flags
# and OpenMP (tests/project/test_native_warnings.py proves it on every test run); -Werror is left to that test so
# that a user's newer compiler with a new warning still builds the library instead of falling back to foreach.
WARNINGS = ["-Wall", "-Wextra"]
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-std=c11", *WARNINGS]
# SLOTOPT_NATIVE_DEBUG=1 at build time: a library that checks the bounds of every call in C before the rule runs
# (slotopt_kernels.c, SLOTOPT_BOUNDS_CHECK; slower, for debugging and the test suite).
if os.environ.get("SLOTOPT_NATIVE_DEBUG", "").strip() not in ("", "0"):
    FLAGS.append("-DSLOTOPT_BOUNDS_CHECK")


TENSOR_TABLE = "slotopt.kernels.native._tensor_table"
WHEEL_CHECKS = "slotopt.kernels.native.builds"  # a wheel's checks, one folder per torch minor version
# SLOTOPT_CHECKS_TORCH=<a torch package folder>: build only the C++ checks, against that torch, into
# builds/<its tag>/ (tools/build_wheel_checks.py runs this once per torch minor version a wheel carries).
CHECKS_TORCH = os.environ.get("SLOTOPT_CHECKS_TORCH", "").strip() or None
TENSOR_TABLE_RECORD = "tensor_table_build.txt"  # why the C++ checks were not built, for `slotopt info`
_TORCH_BUILT = "?"  # the torch the C++ checks are built against
KERNELS = "slotopt.kernels.native._slotopt_kernels"
# The compiled kernels' variants: the extension's name suffix -> the instruction set it is compiled for. Only the
# baseline outside x86-64 (the compiler's default target there).
X86_64 = platform.machine().lower() in ("x86_64", "amd64")
VARIANTS = {"": ["-march=x86-64", "-mtune=generic"], "_avx2": ["-march=x86-64-v3", "-mtune=generic"],
            "_avx512": ["-march=x86-64-v4", "-mtune=generic"]} if X86_64 else {"": []}


def _torch_facts(folder):
    """``(version, git commit, cxx11 ABI)`` of the torch package in ``folder`` (its ``torch/`` directory), read from
    its files without importing it: a wheel's checks are built against torch releases other than the one (if any)
    of the build environment (tools/build_wheel_checks.py)."""
    with open(os.path.join(folder, "version.py"), encoding="utf-8") as source:
        text = source.read()
    version = re.search(r"^__version__\s*=\s*'([^']+)'", text, re.M).group(1)
    git = re.search(r"^git_version\s*=\s*'([^']*)'", text, re.M).group(1)
    # The C++ standard library ABI torch was compiled with: the new one tags std::string in mangled names
    # ("B5cxx11"); a library built for the old one has none.
    with open(os.path.join(folder, "lib", "libc10.so"), "rb") as library:
        cxx11 = b"B5cxx11" in library.read()
    return version, git, cxx11


def wheel_checks_tag(version, cxx11):
    """The folder (under kernels/native/builds/) of the checks built for one torch minor version and C++ ABI:
    what kernels/native/tensor_table.py looks for under the torch it finds."""
    major, minor = version.split("+")[0].split(".")[:2]
    return f"torch{major}_{minor}_abi{int(cxx11)}"


def _tensor_table_extension(torch_folder=None):
    """The C++ tensor-table extension, configured for the torch of the build environment (or, with
    ``torch_folder``, for the torch package in that folder, as a wheel's build for that torch minor version), or
    None without one."""
    if torch_folder is None:
        try:
            import torch
            from torch.utils.cpp_extension import include_paths, library_paths
        except Exception:  # no torch where the build runs (an isolated build): the Python checks run instead
            print("slotopt: torch not importable at build time: the tensor-table checks will run in Python")
            return None
        version, git, cxx11 = torch.__version__, torch.version.git_version, bool(torch._C._GLIBCXX_USE_CXX11_ABI)
        includes, libraries = include_paths(), library_paths()
        name, link = TENSOR_TABLE, []
    else:
        version, git, cxx11 = _torch_facts(torch_folder)
        includes = [os.path.join(torch_folder, "include"),
                    os.path.join(torch_folder, "include", "torch", "csrc", "api", "include")]
        libraries = [os.path.join(torch_folder, "lib")]
        name = f"{WHEEL_CHECKS}.{wheel_checks_tag(version, cxx11)}._tensor_table"
        os.makedirs(os.path.join(NATIVE, "builds", wheel_checks_tag(version, cxx11)), exist_ok=True)  # (--inplace)
        # Installed, it lies in site-packages/slotopt/kernels/native/builds/<tag>/, torch's libraries in
        # site-packages/torch/lib (they are loaded already when it is: torch is imported first; the path serves
        # a loader that opens it without).
        link = ["-Wl,-rpath,$ORIGIN/../../../../../torch/lib"]
    global _TORCH_BUILT
    _TORCH_BUILT = version
    # The language standard the installed torch's headers require (C++20 from torch 2.14 on), all warnings on and
    # fatal for slotopt's own code; torch's and Python's headers are system headers (-isystem: their warnings are
    # theirs; GCC then ignores the same directory given with -I).
    major, minor = (int(part) for part in version.split("+")[0].split(".")[:2])
    standard = "-std=c++20" if (major, minor) >= (2, 14) else "-std=c++17"
    return Extension(
        name,
        sources=[os.path.join(NATIVE, "tensor_table.cpp"), os.path.join(NATIVE, "tensor_checks.cpp")],
        depends=[os.path.join(NATIVE, "tensor_table.h")],
        library_dirs=libraries,
        runtime_library_dirs=libraries if torch_folder is None else [],
        libraries=["c10", "torch", "torch_cpu", "torch_python"],
        extra_compile_args=["-O2", standard, "-Wall", "-Wextra", "-Werror",
                            *[flag for path in [*includes, sysconfig.get_paths()["include"]]
                              for flag in ("-isystem", path)],
                            f'-DSLOTOPT_TORCH_VERSION="{version}+{git}"',
                            f"-D_GLIBCXX_USE_CXX11_ABI={int(cxx11)}"],
        extra_link_args=link,
        language="c++",
        optional=torch_folder is None,  # (a wheel's build for one torch fails loudly: the tool says which)
    )


class OptionalNativeBuild(build_ext):
    """Tries the best configuration first, then simpler ones; never fails the install."""

    def get_ext_filename(self, fullname):
        if fullname.split(".")[-1] == TENSOR_TABLE.split(".")[-1]:  # (also a wheel's builds/<tag>/_tensor_table)  # a Python extension module, named as Python expects
            return super().get_ext_filename(fullname)
        # A plain library name, without Python's ABI tag and not ending in ".so": it is not an extension module
        # (ctypes loads it; nothing must try to import it), and one build serves every Python version.
        parts = fullname.split(".")
        return os.path.join(*parts[:-1], f"lib{parts[-1].lstrip('_')}.so.1")

    ATTEMPTS = (["-fopenmp"], [])

    def _record_tensor_table(self, outcome):
        """Writes why the C++ checks were not built (None: they were) next to where the module goes, as text that
        ``slotopt info`` shows (tensor_table.py reads it; it is never imported)."""
        folders = {os.path.dirname(self.get_ext_fullpath(TENSOR_TABLE))}
        if self.inplace or getattr(self, "editable_mode", False):
            folders.add(os.path.join(os.path.dirname(os.path.abspath(__file__)), NATIVE))
        for folder in folders:
            path = os.path.join(folder, TENSOR_TABLE_RECORD)
            if outcome is None:
                if os.path.exists(path):
                    os.remove(path)
                continue
            os.makedirs(folder, exist_ok=True)
            with open(path, "w", encoding="utf-8") as out:
                out.write(outcome + "\n")

    def run(self):
        if not CHECKS_TORCH and not any(ext.name == TENSOR_TABLE for ext in self.extensions):
            self._record_tensor_table("torch was not importable where slotopt was built (an isolated build)")
        super().run()

    def build_extension(self, ext):
        if ext.name.startswith(WHEEL_CHECKS + "."):  # a wheel's build for one torch: no fallback, no record
            super().build_extension(ext)
            return
        if ext.name == TENSOR_TABLE:
            try:
                super().build_extension(ext)
                print("slotopt: tensor-table checks built")
                self._record_tensor_table(None)
            except Exception as error:
                print(f"slotopt: tensor-table checks NOT built ({error}); they will run in Python")
                self._record_tensor_table(f"the build against torch {_TORCH_BUILT} failed ({error}; the build log "
                                          "has the compiler's message)")
            return
        # A failed rebuild must not leave an older library to be loaded (an editable install copies the
        # library into the source tree; a wheel's build leaves the tree's libraries alone).
        stales = {self.get_ext_fullpath(ext.name)}
        if self.inplace or getattr(self, "editable_mode", False):
            stales.add(os.path.join(os.path.dirname(os.path.abspath(__file__)), "src", self.get_ext_filename(ext.name)))
        for stale in stales:
            if os.path.exists(stale):
                os.remove(stale)
        base_compile, base_link = list(ext.extra_compile_args), list(ext.extra_link_args)
        # Each variant compiles the same source: its own temporary folder, or the objects would overwrite each other.
        build_temp = self.build_temp
        self.build_temp = os.path.join(build_temp, ext.name.rsplit(".", 1)[-1])
        try:
            for extra in self.ATTEMPTS:
                ext.extra_compile_args = base_compile + extra
                ext.extra_link_args = base_link + [f for f in extra if f == "-fopenmp"]
                try:
                    super().build_extension(ext)
                except Exception as error:  # a compiler missing or refusing a flag: try the next configuration
                    print(f"slotopt: {ext.name} not built with {extra or 'plain flags'}: {error}")
                    continue
                print(f"slotopt: {ext.name} built with {' '.join(ext.extra_compile_args)}")
                return
        finally:
            self.build_temp = build_temp
        print(f"slotopt: {ext.name} NOT built; " + ("the foreach kernels will run (same results, slower)"
                                                    if ext.name == KERNELS else "the other variants will run"))


try:  # setuptools >= 70.1 has the command itself; older ones take it from the wheel package
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    try:
        from wheel.bdist_wheel import bdist_wheel
    except ImportError:  # neither: no wheel can be built here (pip says so); the other commands still run
        bdist_wheel = object


class PortableWheel(bdist_wheel):
    """A wheel whose only compiled parts are the ctypes kernels is tagged ``py3-none-<platform>``: they use no
    Python C API, so one wheel serves every Python. With the C++ tensor-table module (a build against the torch of
    a ``--no-build-isolation`` build) it keeps setuptools' CPython tag. The wheel's own C++ checks
    (kernels/native/builds/<torch tag>/, tools/build_wheel_checks.py) keep ``py3-none``: each is an optional
    part, imported only by the Python it was built for (its file name's ABI suffix) under the torch minor version
    it was built for; anywhere else the Python checks run."""

    def get_tag(self):
        python, abi, platform_tag = super().get_tag()
        if not any(ext.name == TENSOR_TABLE for ext in self.distribution.ext_modules or []):
            return "py3", "none", platform_tag
        return python, abi, platform_tag


def _all_extensions():
    return [
        *[Extension(
            KERNELS + suffix,
            sources=[os.path.join(NATIVE, "slotopt_kernels.c")],
            depends=[os.path.join(NATIVE, "rules.inc"), os.path.join(NATIVE, "rules_scalars.h"),
                     os.path.join(NATIVE, "gradient_maps.inc"), os.path.join(NATIVE, "gradient_forms.inc")],
            extra_compile_args=FLAGS + isa,
            optional=True,
        ) for suffix, isa in VARIANTS.items()],
        *[extension for extension in [_tensor_table_extension()] if extension is not None],
        # issue 40: the readers' CRC-32C (SSE4.2 chosen at run time, tables elsewhere), a library of its own so
        # that reading checkpoints never depends on the update kernels' build (slotopt/io/crc32c.py loads it).
        Extension(
            "slotopt.kernels.native._slotopt_crc32c",
            sources=[os.path.join(NATIVE, "crc32c.c")],
            extra_compile_args=["-O3", "-std=gnu11", *WARNINGS],
            optional=True,
        ),
    ]


setup(
    ext_modules=[_tensor_table_extension(CHECKS_TORCH)] if CHECKS_TORCH else _all_extensions(),
    cmdclass={"build_ext": OptionalNativeBuild, **({"bdist_wheel": PortableWheel} if bdist_wheel is not object else {})},
)
