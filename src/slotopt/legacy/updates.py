"""How the legacy face updates variables: ``apply_state`` (``_prepare_local`` per (device, dtype)), the dense and
sparse update hooks of OptimizerV2 (``_resource_apply_dense``, ``_resource_apply_sparse``...) and the grouped
multi-tensor path of the built-ins (``grouped_dense``).

Functions of the optimizer (``self``) that ``slotopt.legacy.Optimizer`` (legacy/optimizer.py) binds as
its methods, not a base class; ``apply_updates`` is the update stage its step lists."""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

import torch

from ..engine.core import Pair
from ..kernels import rows as sparse_rows
from ..variables import IndexedSlices, as_indexed_slices, is_sparse

#: ``{(device, dtype): {coefficient name: 0-dim CPU tensor in that dtype}}``, built once per step.
ApplyState = dict[tuple[torch.device, torch.dtype], dict[str, Any]]

_GROUPED = "_slotopt_grouped"
#: Per-class cache: does a method accept ``apply_state``?
_accepts_apply_state: dict[tuple[type, str], bool] = {}


def grouped_dense(method: Callable[..., Any]) -> Callable[..., Any]:
    """Marks a built-in ``_resource_apply_dense`` whose class also runs dense gradients by (device, dtype) group
    through ``_apply_dense_group``. A subclass that overrides ``_resource_apply_dense`` loses the mark, and its
    own per-variable method is called instead."""
    setattr(method, _GROUPED, True)
    return method


def _prepare(self, var_list: Sequence[torch.Tensor]) -> ApplyState:
    """``apply_state`` for this step: ``_prepare_local`` once per (device, dtype) of ``var_list``."""
    return self._prepare_kinds(dict.fromkeys((v.device, v.dtype) for v in var_list))


def _prepare_kinds(self, kinds: Iterable[tuple[torch.device, torch.dtype]]) -> ApplyState:
    """``apply_state`` for the (device, dtype) pairs ``kinds``."""
    apply_state: ApplyState = {}
    for key in kinds:
        apply_state[key] = {}
        self._prepare_local(key[0], key[1], apply_state)
    return apply_state


def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
    """Per-(device, dtype) coefficients of this step; the base sets ``lr_t`` (see ``_decayed_lr``)."""
    if "learning_rate" in self._hyper:
        apply_state[(var_device, var_dtype)]["lr_t"] = self._decayed_lr(var_dtype)


def _fallback_apply_state(self, var_device: torch.device, var_dtype: torch.dtype) -> dict[str, Any]:
    """Coefficients computed on demand, for a ``_resource_apply_*`` called without ``apply_state``."""
    apply_state: ApplyState = {(var_device, var_dtype): {}}
    self._prepare_local(var_device, var_dtype, apply_state)
    return apply_state[(var_device, var_dtype)]


def _coefficients(self, var: torch.Tensor, apply_state: Optional[ApplyState]) -> dict[str, Any]:
    key = (var.device, var.dtype)
    return (apply_state or {}).get(key) or self._fallback_apply_state(*key)


def apply_updates(self, pairs: list[Pair], call: Any) -> None:
    """The update stage: each (device, dtype) group of a grouped built-in in one multi-tensor call, every other
    variable through its ``_resource_apply_dense`` / ``_resource_apply_sparse`` hook."""
    apply_state = self._apply_state
    plan = pairs.plan
    if plan is not None and getattr(type(self)._resource_apply_dense, _GROUPED, False):
        # its groups, their variables and the gradients' addresses, read once, and the slots' (``_slot_lists``)
        self.__dict__["_updating_plan"] = plan
        try:
            for group in plan.groups:
                params = plan.group_params(group, self._vars)
                key = (params[0].device, params[0].dtype)
                coefficients = (apply_state or {}).get(key) or self._fallback_apply_state(*key)
                self._apply_dense_group(params, pairs.gradients(group), group, coefficients)
        finally:
            self.__dict__["_updating_plan"] = None
        return
    dense: list[Pair] = []
    for grad, var in pairs:
        if grad is None:
            continue
        if is_sparse(grad):
            grad = as_indexed_slices(grad)
            values = grad.values if grad.values.dtype == var.dtype else grad.values.to(var.dtype)
            _call_with_state(self, "_resource_apply_sparse", self._resource_apply_sparse_duplicate_indices,
                                  (values, var, grad.indices), apply_state)
        else:
            dense.append((grad if grad.dtype == var.dtype else grad.to(var.dtype), var))
    if not dense:
        return
    if getattr(type(self)._resource_apply_dense, _GROUPED, False):
        by_pos = {self._position(v): g for g, v in dense}
        for group in self._groups(list(by_pos)):
            params = [self._vars[p] for p in group]
            key = (params[0].device, params[0].dtype)
            coefficients = (apply_state or {}).get(key) or self._fallback_apply_state(*key)
            self._apply_dense_group(params, [by_pos[p] for p in group], group, coefficients)
    else:
        for grad, var in dense:
            _call_with_state(self, "_resource_apply_dense", self._resource_apply_dense, (grad, var), apply_state)


def _call_with_state(self, hook_name: str, fn: Callable[..., Any], args: tuple, apply_state: Any) -> Any:
    """Calls ``fn(*args)``, adding ``apply_state=`` when ``hook_name`` accepts it (as tf.keras does)."""
    key = (type(self), hook_name)
    accepts = _accepts_apply_state.get(key)
    if accepts is None:
        try:
            params = inspect.signature(getattr(self, hook_name)).parameters
            accepts = "apply_state" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())
        except (TypeError, ValueError):
            accepts = False
        _accepts_apply_state[key] = accepts
    return fn(*args, apply_state=apply_state) if accepts else fn(*args)


# -------------------------------------------------------------------------------------------- update hooks
def _apply_dense_group(self, params: list[torch.Tensor], grads: list[torch.Tensor], positions: list[int],
                       coefficients: dict[str, Any]) -> None:
    """Built-ins: one multi-tensor update of a (device, dtype) group of dense gradients."""
    raise NotImplementedError


def _resource_apply_dense(self, grad: torch.Tensor, var: torch.Tensor,
                          apply_state: Optional[ApplyState] = None) -> Any:
    """Updates ``var`` in place with the dense gradient ``grad``. Subclasses implement this."""
    raise NotImplementedError("Must be implemented in subclasses.")


def _resource_apply_sparse_duplicate_indices(self, grad: torch.Tensor, handle: torch.Tensor,
                                             indices: torch.Tensor, **kwargs: Any) -> Any:
    """Sums the rows of repeated ``indices``, then calls ``_resource_apply_sparse`` with unique indices."""
    unique_indices, summed = sparse_rows.deduplicate(IndexedSlices(grad, indices))
    return self._resource_apply_sparse(summed, handle, unique_indices, **kwargs)


def _resource_apply_sparse(self, grad: torch.Tensor, handle: torch.Tensor, indices: torch.Tensor,
                           apply_state: Optional[ApplyState] = None) -> Any:
    """Updates rows ``indices`` (unique) of ``handle`` with ``grad[i]``. Subclasses implement this."""
    raise NotImplementedError("Must be implemented in subclasses.")


def _resource_scatter_add(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``x[i] += v`` in place; returns ``x``."""
    return x.index_add_(0, i, v.to(x.dtype))


def _resource_scatter_update(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``x[i] = v`` in place; returns ``x``."""
    return x.index_copy_(0, i, v.to(x.dtype))


def _lazy_rows(self, var: torch.Tensor, grad: torch.Tensor, indices: torch.Tensor,
               slots: Sequence[torch.Tensor], update: Callable[..., None]) -> None:
    """Built-ins: ``update`` on the touched rows only (``indices`` already unique)."""
    self._update_touched_rows(var, IndexedSlices(grad, indices), slots, update, deduplicate=False)
