"""Gradient validation: every gradient converted (torch sparse COO -> ``IndexedSlices``) and checked against its
variable, and the variables and slots checked unchanged in kind, before anything of a step changes.

Functions of the optimizer (or of a gradient and its variable), not a base class: the faces call them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Union

import torch

from ...kernels import rows as sparse_rows
from ...kernels.native import tensor_table
from ...variables import IndexedSlices, as_indexed_slices, is_integer_dtype, is_sparse
from .. import plan_cache
from ..plan import Pair, StepPairs
from . import unchanged

__all__ = ["is_plain_gradient", "checked_pairs", "check_gradient", "dense"]


_FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COMPLEX_TYPES = (torch.complex64, torch.complex128)


def is_plain_gradient(grad: Any, var: torch.Tensor) -> bool:
    """Whether ``grad`` needs no conversion or further check for ``var``: a dense strided float tensor of its dtype,
    shape and device (what ``check_gradient`` returns unchanged)."""
    return (type(grad) is torch.Tensor and grad.dtype is var.dtype and grad.layout is torch.strided
            and not grad.is_nested and grad.dtype in _FLOAT_TYPES and grad.shape == var.shape
            and grad.device == var.device)


def checked_pairs(self, pairs: Sequence[Pair]) -> StepPairs:
    """``check_gradient`` for every pair; ordinary dense gradients (a strided float tensor of the variable's
    shape, dtype and device) are recognised inline, without the call. A step that fits the plan of the last
    one (engine/plan.py) is recognised in one pass and returned as ``Ordinary``."""
    ordinary = plan_cache.planned_step(self, pairs)
    if ordinary is not None:
        return ordinary
    unchanged.check_variables_unchanged(self, pairs)
    out = StepPairs()  # (the pairs a step's stages receive, engine/plan.py)
    for pair in pairs:
        grad, var = pair
        if is_plain_gradient(grad, var):
            out.append(pair if type(pair) is tuple else (grad, var))
        else:
            out.append((check_gradient(grad, var, lambda var=var: self._name_of(var)), var))
            if var.is_complex():
                _check_complex_support(self, var)
    return out


def _check_complex_support(self, var: torch.Tensor) -> None:
    """Raises (before anything changes) where TensorFlow has no complex kernel: the optimizer itself, AMSGrad's
    running maximum, and clipping (TensorFlow's clipping compares values, which complex numbers do not have)."""
    reason = None
    if not self._supports_complex:
        reason = "TensorFlow has no complex kernel for this optimizer"
    elif getattr(self, "amsgrad", False) is True:
        reason = "amsgrad takes a running maximum, which TensorFlow does not define for complex values"
    elif any(getattr(self, name, None) for name in ("clipnorm", "clipvalue", "global_clipnorm")):
        reason = "gradient clipping compares values, which TensorFlow does not do for complex gradients"
    if reason is not None:
        raise TypeError(
            f"{type(self).__name__} cannot update the complex variable {self._name_of(var)} (dtype {var.dtype}): "
            f"{reason} (it raises too)."
        )


def check_gradient(grad: Any, var: torch.Tensor, name: Union[str, Callable[[], str]]) -> Any:
    """Converts a gradient to a dense tensor or ``IndexedSlices`` and checks it fits ``var``; raises if not.

    ``name`` may be a callable, so that the variable's name is only looked up for an error message.
    """
    if grad is None:
        return None
    if type(grad) is IndexedSlices and tensor_table.slices_fit(grad.values, grad.indices, grad.dense_shape, var):
        return grad  # every check below, read in one C++ call (it leaves anything unusual to them)
    where = name() if callable(name) else name
    if is_sparse(grad):
        grad = as_indexed_slices(grad)
        values = grad.values
        if not is_integer_dtype(grad.indices.dtype) and grad.indices.numel():  # set after construction
            raise TypeError(
                f"Sparse gradient indices for variable {where} must be integers. Received: "
                f"indices={grad.indices.tolist()[:20]} (dtype {grad.indices.dtype})"
            )
        if values.dim() == 0 or values.shape[0] != grad.indices.numel():  # (attributes set after construction)
            raise ValueError(
                f"Sparse gradient for variable {where} must have one row of values per index. Received: "
                f"values of shape {tuple(values.shape)} and {grad.indices.numel()} indices"
            )
        if tuple(values.shape[1:]) != tuple(var.shape[1:]) or var.dim() == 0:
            raise ValueError(
                f"Sparse gradient rows of shape {tuple(values.shape[1:])} do not fit variable {where} of "
                f"shape {tuple(var.shape)}."
            )
        if sparse_rows.first_out_of_range(grad.indices, var.shape[0]) >= 0:
            raise ValueError(
                f"Sparse gradient indices for variable {where} must be in [0, {var.shape[0]}). "
                f"Received: indices={grad.indices.tolist()[:20]}"
            )
        if grad.dense_shape is not None and tuple(grad.dense_shape) != tuple(var.shape):
            raise ValueError(
                f"Sparse gradient for variable {where} has dense_shape {tuple(grad.dense_shape)}, which does "
                f"not match the variable's shape {tuple(var.shape)}."
            )
    else:
        if isinstance(grad, torch.Tensor) and (grad.layout is not torch.strided or grad.is_nested):
            # CSR/CSC/BSR/BSC, mkldnn, nested: no rule of any generation takes them, and their memory is not
            # the variable's layout; refused before anything changes.
            kind = "nested" if grad.is_nested else str(grad.layout)
            raise TypeError(
                f"Gradient for variable {where} must be a dense (strided) tensor, a sparse COO row gradient "
                f"or an IndexedSlices. Received: a {kind} tensor of shape "
                f"{tuple(grad.shape) if not grad.is_nested else '(nested)'}; convert it first (e.g. "
                "grad.to_dense() or grad.to_sparse_coo()).")
        if not isinstance(grad, torch.Tensor):
            try:
                grad = torch.as_tensor(grad, dtype=var.dtype, device=var.device)
            except (TypeError, ValueError, RuntimeError) as err:
                raise TypeError(
                    f"Gradient for variable {where} must be a tensor, an IndexedSlices or None. "
                    f"Received: {grad!r}"
                ) from err
        if grad.shape != var.shape:
            raise ValueError(
                f"Gradient for variable {where} has shape {tuple(grad.shape)}, which does not match the "
                f"variable's shape {tuple(var.shape)}."
            )
        values = grad
    if var.dtype in _COMPLEX_TYPES:  # TensorFlow's complex64/complex128 variables take gradients of their dtype
        if values.dtype != var.dtype:
            raise ValueError(
                f"Gradient for complex variable {where} must have its dtype {var.dtype}. Received: "
                f"dtype={values.dtype}"
            )
    elif values.dtype not in _FLOAT_TYPES:
        raise ValueError(
            f"Gradient for variable {where} must be a floating-point tensor. Received: dtype={values.dtype}"
        )
    if var.dtype not in _FLOAT_TYPES and var.dtype not in _COMPLEX_TYPES:
        raise ValueError(
            f"Variable {where} has dtype {var.dtype}; only float16, bfloat16, float32, float64, complex64 and "
            "complex128 variables can be optimized."
        )
    if values.device != var.device:
        raise ValueError(
            f"Gradient for variable {where} is on {values.device} but the variable is on {var.device}."
        )
    return grad


def dense(grad: Any, var: torch.Tensor) -> torch.Tensor:
    """The dense gradient in the variable's dtype (duplicates of a sparse gradient summed)."""
    if isinstance(grad, IndexedSlices):
        return sparse_rows.densify(grad, var)
    return grad if grad.dtype == var.dtype else grad.to(var.dtype)
