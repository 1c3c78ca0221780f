"""Helpers shared by the ports of TensorFlow-style test suites (tf-keras legacy, TF1).

``close_by_type`` is TensorFlow's ``assertAllCloseAccordingToType``: the given tolerances, widened to 1e-3 for
float16 and to at least 1e-6 for float32.
"""

from __future__ import annotations

import numpy as np
import torch

import slotopt

DTYPES = [torch.float16, torch.float32, torch.float64]
NP = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}


def close(actual, expected, rtol=1e-6, atol=1e-6):
    if isinstance(actual, torch.Tensor):
        actual = actual.detach().to(torch.float64).numpy()
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64),
                               rtol=rtol, atol=atol)


def close_by_type(actual, expected, rtol=1e-6, atol=1e-6, dtype=None):
    dtype = dtype if dtype is not None else (actual.dtype if isinstance(actual, torch.Tensor) else torch.float64)
    if dtype == torch.float16:
        rtol, atol = max(rtol, 1e-3), max(atol, 1e-3)
    elif dtype == torch.float32:
        rtol, atol = max(rtol, 1e-6), max(atol, 1e-6)
    close(actual, expected, rtol=rtol, atol=atol)


def var(values, dtype=torch.float32, name=None):
    kwargs = {"name": name} if name else {}
    return slotopt.Variable(torch.tensor(np.asarray(values), dtype=dtype), **kwargs)


def const(values, dtype=torch.float32):
    return torch.tensor(np.asarray(values), dtype=dtype)


def slices(values, indices, dense_shape, dtype=torch.float32):
    return slotopt.IndexedSlices(const(values, dtype), torch.tensor(indices), tuple(dense_shape))
