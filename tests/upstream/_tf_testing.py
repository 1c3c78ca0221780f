"""Helpers shared by the ports of TensorFlow-style test suites (tf-keras legacy, TF1).

``close_by_type`` is TensorFlow's ``assertAllCloseAccordingToType``: the given tolerances, widened to 1e-3 for
float16 and to at least 1e-6 for float32.
"""

from __future__ import annotations

import numpy as np
import torch

import slotopt

DTYPES = [torch.float16, torch.float32, torch.float64]
#: tf-keras's ``_DATA_TYPES`` (adagrad, adadelta, rmsprop and optimizer_v2 tests): the real types and complex.
DATA_TYPES = DTYPES + [torch.complex64, torch.complex128]
NP = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64, torch.complex64: np.complex64,
      torch.complex128: np.complex128}


def close(actual, expected, rtol=1e-6, atol=1e-6):
    if isinstance(actual, torch.Tensor):
        wide = torch.complex128 if actual.is_complex() else torch.float64
        actual = actual.detach().to(wide).numpy()
    wide_np = np.complex128 if np.iscomplexobj(actual) or np.iscomplexobj(expected) else np.float64
    np.testing.assert_allclose(np.asarray(actual, dtype=wide_np), np.asarray(expected, dtype=wide_np),
                               rtol=rtol, atol=atol)


def close_by_type(actual, expected, rtol=1e-6, atol=1e-6, dtype=None):
    dtype = dtype if dtype is not None else (actual.dtype if isinstance(actual, torch.Tensor) else torch.float64)
    if dtype == torch.float16:
        rtol, atol = max(rtol, 1e-3), max(atol, 1e-3)
    elif dtype in (torch.float32, torch.complex64):  # TF: complex64 takes float32's tolerances
        rtol, atol = max(rtol, 1e-6), max(atol, 1e-6)
    close(actual, expected, rtol=rtol, atol=atol)


def var(values, dtype=torch.float32, name=None):
    kwargs = {"name": name} if name else {}
    return slotopt.Variable(torch.tensor(np.asarray(values), dtype=dtype), **kwargs)


def const(values, dtype=torch.float32):
    return torch.tensor(np.asarray(values), dtype=dtype)


def slices(values, indices, dense_shape, dtype=torch.float32):
    return slotopt.IndexedSlices(const(values, dtype), torch.tensor(indices), tuple(dense_shape))
