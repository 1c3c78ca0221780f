"""TensorFlow's CPU arithmetic, in one place: every value slotopt computes that must match TensorFlow's bits and
that torch would compute differently goes through this package.

What torch does differently, on the CPU, and what is used instead:

* square roots: torch's CPU ``sqrt`` is not correctly rounded (about 20% of float32 inputs on AVX512 builds,
  0-d tensors included); :func:`sqrt` and :mod:`.roots` give the IEEE root (Adam's step size, clip norms, ...);
* ``cos``, ``exp``, ``log`` and ``pow`` of scalars (schedules, bias corrections): TensorFlow calls the C
  library's ``cosf``/``cos``...; :func:`cos`, :func:`exp`, :func:`log` and :func:`.libm.scalar_pow` do too;
* reductions: TensorFlow sums in Eigen's packet order; :func:`sum`, :func:`mean` and :func:`norm` follow it;
* ``pow`` of tensors: Eigen's ``generic_pow`` on whole packets and the C library's ``pow`` on the rest
  (:func:`pow`);
* the fused float32 Adagrad/ProximalAdagrad/Adadelta kernels' ``rsqrt``: the CPU's ``rsqrtps`` estimate plus one
  Newton step (:func:`rsqrt`; the compiled kernels have their own copy, in ``kernels/native``), whose bits are
  the processor vendor's (:func:`.cpu.vendor`: the same bits as TensorFlow on the same vendor's processors);
* subnormal numbers are flushed to zero during a step (:func:`flush_to_zero`; :func:`.libm.flush_subnormal`
  for values computed outside it), as TensorFlow's kernels run.

Division and the basic operations are correctly rounded in torch already, except CUDA's division by a Python
number (a multiplication by its reciprocal): :func:`div_scalar` divides there. On a GPU, ``sum``, ``mean`` and
whole-packet ``pow`` run device kernels with these bits (:mod:`.device`); the rest computes on a host copy (see
``ops``). See ``docs/exactness.md``.
"""

from __future__ import annotations

from . import cpu, device, eigen, libm, roots
from .fpmode import flush_to_zero
from .libm import flush_subnormal, scalar_pow
from .ops import cos, div_scalar, div_scalar_, exp, fused_rsqrt_exact, log, mean, norm, pow, rsqrt, sqrt, sum

__all__ = ["sqrt", "pow", "sum", "mean", "norm", "rsqrt", "fused_rsqrt_exact", "cos", "exp", "log", "scalar_pow",
           "flush_subnormal", "flush_to_zero", "cpu", "eigen", "libm", "roots", "div_scalar", "div_scalar_", "device"]
