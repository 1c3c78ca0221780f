"""TF1's subclass contract, the defaults of ``tf.compat.v1.train.Optimizer``: ``_create_slots``, ``_prepare``,
``_finish``, ``_apply_dense`` / ``_apply_sparse`` and their ``_resource_apply_*`` twins, and the multi-tensor
updates (``_dense_update``, ``_sparse_update``) through which the built-ins implement them.

Functions of the optimizer (``self``) that ``slotopt.v1.Optimizer`` (v1/optimizer.py) binds as
its methods, not a base class."""

from __future__ import annotations

import math
from typing import Any

import torch

from ..kernels import rows as sparse_rows
from ..variables import IndexedSlices


def _create_slots(self, var_list: list[torch.Tensor]) -> None:
    """Creates the slots of the variables that have a gradient in this call (idempotent)."""


def _prepare(self) -> None:
    """Converts hyperparameters (called once per ``apply_gradients``, after ``_create_slots``)."""


def _finish(self, update_ops: list[Any], name_scope: str) -> Any:
    """Runs after every variable of the call was updated (Adam advances its beta powers here)."""
    return None


def _resource_apply_dense(self, grad: torch.Tensor, handle: torch.Tensor) -> Any:
    """Updates ``handle`` in place from a dense gradient. Defaults to ``_apply_dense``."""
    return self._apply_dense(grad, handle)


def _apply_dense(self, grad: torch.Tensor, var: torch.Tensor) -> Any:
    """Updates ``var`` in place from a dense gradient (built-ins: their kernel on a one-element list)."""
    if type(self)._dense_update is _dense_update:
        raise NotImplementedError(
            f"{type(self).__name__} must implement `_apply_dense(grad, var)` or "
            "`_resource_apply_dense(grad, handle)`.")
    pos = self._position(var)
    self._dense_update([var], [grad], self._slot_lists(self._kernel_slots, [pos]))
    return None


def _resource_apply_sparse_duplicate_indices(self, grad: torch.Tensor, handle: torch.Tensor,
                                             indices: torch.Tensor) -> Any:
    """Sums the rows of repeated indices, then calls ``_resource_apply_sparse``."""
    if type(self)._apply_sparse_duplicate_indices is not _apply_sparse_duplicate_indices:
        return self._apply_sparse_duplicate_indices(IndexedSlices(grad, indices, tuple(handle.shape)), handle)
    unique, summed = sparse_rows.deduplicate(IndexedSlices(grad, indices, tuple(handle.shape)))
    return self._resource_apply_sparse(summed, handle, unique)


def _apply_sparse_duplicate_indices(self, grad: IndexedSlices, var: torch.Tensor) -> Any:
    """Sums the rows of repeated indices, then calls ``_apply_sparse``."""
    unique, summed = sparse_rows.deduplicate(grad)
    return self._apply_sparse(IndexedSlices(summed, unique, tuple(var.shape)), var)


def _resource_apply_sparse(self, grad: torch.Tensor, handle: torch.Tensor, indices: torch.Tensor) -> Any:
    """Updates the rows ``indices`` (unique) of ``handle``. Defaults to ``_apply_sparse``; built-ins update
    only the touched rows of the variable and its slots."""
    if type(self)._sparse_update is _sparse_update:
        return self._apply_sparse(IndexedSlices(grad, indices, tuple(handle.shape)), handle)
    pos = self._position(handle)
    names = self._kernel_slots
    scalar_rows = math.prod(handle.shape[1:]) == 1
    self._update_touched_rows(
        handle, IndexedSlices(grad, indices, tuple(handle.shape)), [self._slots[n][pos] for n in names],
        lambda params, grads, slots: self._sparse_update(
            params, grads, {n: [s] for n, s in zip(names, slots)}, scalar_rows=scalar_rows),
        deduplicate=False)
    return None


def _apply_sparse(self, grad: IndexedSlices, var: torch.Tensor) -> Any:
    """Updates ``var`` from an ``IndexedSlices`` gradient with unique indices."""
    if type(self)._sparse_update is _sparse_update:
        raise NotImplementedError(
            f"{type(self).__name__} must implement `_apply_sparse(grad, var)` or "
            "`_resource_apply_sparse(grad, handle, indices)` to take sparse gradients.")
    return self._resource_apply_sparse(grad.values, var, grad.indices)


# Built-in optimizers implement these two with their multi-tensor kernels.
def _dense_update(self, params: list[torch.Tensor], grads: list[torch.Tensor],
                  slots: dict[str, list[torch.Tensor]]) -> None:
    raise NotImplementedError


def _sparse_update(self, params: list[torch.Tensor], grads: list[torch.Tensor],
                   slots: dict[str, list[torch.Tensor]], scalar_rows: bool) -> None:
    raise NotImplementedError
