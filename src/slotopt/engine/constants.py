"""How a Python hyperparameter becomes a number in the variable's dtype.

TensorFlow rounds constants in two ways, and the difference is visible in the results (spec §0.4):

* a Python float used directly in an op is rounded once to the variable's dtype (``literal``);
* a hyperparameter that is first turned into a tensor (Keras 3 ``ops.cast`` on the TF backend, every tf.keras
  legacy ``_set_hyper`` value, every TF1 ``convert_to_tensor``) is rounded to float32 first and then cast to the
  variable's dtype (``cast``). This only changes float64 variables.

``d_form`` and ``f_form`` are the two ways ``1 - beta`` is computed. All results are Python floats that hold the
exact value of the rounded constant, so passing them to ``torch._foreach_*`` ops introduces no further rounding.
Everything is computed on CPU scalars: no device synchronisation on the hot path.

Low precision (issue 15, ``docs/migration.md``): the reference rounds every constant to the variable's dtype.
For float16 slotopt does the same (11 significant bits keep the usual hyperparameters apart from 1). For bfloat16
(8 bits) it does not: ``0.999`` rounds to ``1.0``, so Adam never moves and Nadam/Lamb divide by zero, and no
reference data covers bfloat16 variables. Their coefficients are computed in float32 (``scalar_dtype``); the
update itself still runs on the bfloat16 tensors. torch's float32 "opmath" takes such a value as float32 in
out-of-place multiplies and in divisions, but rounds it to the tensor's dtype first in scalar additions,
subtractions and in-place multiplies (``_foreach_mul_(v, 0.9)`` multiplies by 0.8984375 in bfloat16): the
compiled kernels reproduce exactly that (``kernels/native/rules.inc``).
"""

from __future__ import annotations

import functools
import math

import torch

from .. import numerics
from ..kernels.native import tensor_table

__all__ = ["literal", "cast", "d_form", "f_form", "power", "evaluate", "scalar_dtype", "value_in"]

_HALF = (torch.float16, torch.bfloat16)


def scalar_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a hyperparameter or step counter is rounded to for variables of ``dtype``: ``dtype`` itself,
    except float32 for bfloat16 (where the usual betas round to 1), and the real dtype of the same precision for a
    complex one (the scalars are real: TensorFlow's complex ``pow`` of a real base has a zero imaginary part)."""
    if dtype == torch.bfloat16 or dtype == torch.complex64:
        return torch.float32
    return torch.float64 if dtype == torch.complex128 else dtype


#: Below this magnitude (float32's smallest normal number) a rounded constant depends on the thread's
#: flush-to-zero mode (a step runs flushed, numerics.fpmode), so it is not kept.
_KEEP_FROM = torch.finfo(torch.float32).tiny


@functools.lru_cache(maxsize=512)
def _kept(x: float, dtype: torch.dtype) -> float:
    return torch.tensor(x, dtype=dtype).item()


def _rounded(x: float, dtype: torch.dtype) -> float:
    """``x`` rounded once to ``dtype`` (not float64). The same hyperparameters are rounded on every step, and a
    tensor made for one number costs more than the rest of a small sparse step: values whose rounding does not
    depend on the flush-to-zero mode are kept (not 0: -0.0 and 0.0 are one key)."""
    if abs(x) >= _KEEP_FROM:  # (False for NaN)
        return _kept(x, dtype)
    return torch.tensor(x, dtype=dtype).item()


def value_in(tensor: torch.Tensor, dtype: torch.dtype) -> float:
    """The value of the one-element ``tensor`` (a learning-rate variable) cast to ``dtype``:
    ``float(tensor.detach().cpu().to(dtype))``. Read in place by the C++ table where no rounding is involved (a
    float32 value in float32 or float64, a float64 value in float64): four torch calls less on every step."""
    if dtype is torch.float32 or dtype is torch.float64:
        if tensor.dtype is torch.float32 or tensor.dtype is dtype:
            value = tensor_table.scalar(tensor)
            if value is not None:
                return value
    return float(tensor.detach().cpu().to(dtype))


def literal(x: float, dtype: torch.dtype) -> float:
    """``x`` rounded once to ``dtype``."""
    dtype = scalar_dtype(dtype)
    if dtype == torch.float64:
        return float(x)
    return _rounded(float(x), dtype)


def cast(x: float, dtype: torch.dtype) -> float:
    """``x`` rounded to float32 (TensorFlow's default for a Python float), then to ``dtype``."""
    x32 = _rounded(float(x), torch.float32)
    return literal(x32, dtype) if scalar_dtype(dtype) in _HALF else x32


def d_form(beta: float, dtype: torch.dtype) -> float:
    """``1 - beta`` computed in float64, then rounded once to ``dtype`` (Keras 3 Adam, Lamb, RMSprop, ...)."""
    return literal(1.0 - float(beta), dtype)


def f_form(beta: float, dtype: torch.dtype) -> float:
    """``1 - cast(beta)`` computed in ``dtype`` (tf.keras legacy, Keras 3 Nadam/Lion, TF1)."""
    dtype = scalar_dtype(dtype)
    one = torch.tensor(1.0, dtype=dtype)
    return (one - torch.tensor(cast(beta, dtype), dtype=dtype)).item()


def power(base: float, exponent: float, dtype: torch.dtype) -> float:
    """``base ** exponent`` evaluated in ``dtype`` (both operands already rounded to it): the C library's
    ``powf``/``pow``, flushed to zero when subnormal, as TensorFlow's ``Pow`` of a scalar."""
    dtype = scalar_dtype(dtype)
    result = numerics.scalar_pow(float(base), float(exponent), single=dtype != torch.float64)
    return result if dtype in (torch.float32, torch.float64) else literal(result, dtype)  # float16: powf, rounded


def evaluate(fn, dtype: torch.dtype, *values: float) -> float:
    """Evaluates ``fn`` on 0-dim tensors of ``dtype`` so every intermediate is rounded as in the reference.

    ``fn`` must take roots, powers and transcendentals from :mod:`slotopt.numerics` (torch's are not
    TensorFlow's); the arithmetic operators are correctly rounded in torch."""
    dtype = scalar_dtype(dtype)
    result = fn(*(torch.tensor(v, dtype=dtype) for v in values)).item()
    if result != 0.0 and abs(result) < torch.finfo(dtype).tiny:  # TensorFlow's kernels flush subnormals to zero
        return math.copysign(0.0, result)
    return result
