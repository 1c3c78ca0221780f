"""Build of the optional compiled kernels (everything else is in pyproject.toml).

``slotopt/kernels/native/slotopt_kernels.c`` becomes a plain shared library that slotopt loads with ctypes: no
Python C API and no torch C++ ABI are involved, so one build serves every Python and torch version of the
machine. It is compiled for the building machine's processor, with every operation rounded separately
(``-ffp-contract=off``, no fast-math) so that it reproduces the foreach kernels bit for bit. The build is
allowed to fail (no C compiler, no OpenMP): slotopt then runs its foreach kernels, with the same results, and
``slotopt info`` says so.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NATIVE = "src/slotopt/kernels/native"
FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-fno-math-errno", "-std=c11"]
# SLOTOPT_NATIVE_DEBUG=1 at build time: a library that checks the bounds of every call in C before the rule runs
# (slotopt_kernels.c, SLOTOPT_BOUNDS_CHECK; slower, for debugging and the test suite).
if os.environ.get("SLOTOPT_NATIVE_DEBUG", "").strip() not in ("", "0"):
    FLAGS.append("-DSLOTOPT_BOUNDS_CHECK")


class OptionalNativeBuild(build_ext):
    """Tries the best configuration first, then simpler ones; never fails the install."""

    def get_ext_filename(self, fullname):
        # A plain library name, without Python's ABI tag and not ending in ".so": it is not an extension module
        # (ctypes loads it; nothing must try to import it), and one build serves every Python version.
        parts = fullname.split(".")
        return os.path.join(*parts[:-1], f"lib{parts[-1].lstrip('_')}.so.1")

    ATTEMPTS = (["-march=native", "-fopenmp"], ["-fopenmp"], ["-march=native"], [])

    def build_extension(self, ext):
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
        )
    ],
    cmdclass={"build_ext": OptionalNativeBuild},
)
