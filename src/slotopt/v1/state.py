"""TF1 optimizer state: hyperparameters converted as ``convert_to_tensor`` does, slots created by name (``_zeros_slot``,
``_get_or_make_slot``...), optimizer-wide non-slot variables (Adam's ``beta1_power``), and restoring slotopt 0.1's
name-keyed state, including values for slots not created yet (TF1's deferred slot restoration). Functions of
the optimizer (``self``) that ``slotopt.v1.Optimizer`` (v1/optimizer.py) binds as its methods, not a base class.

Example:
    >>> import torch, slotopt
    >>> from slotopt.v1 import state
    >>> state.convert_to_tensor(0.1, "learning_rate").dtype, slotopt.v1.AdamOptimizer.get_slot is state.get_slot
    (torch.float32, True)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch

from ..engine import adopt, checks, resume
from ..engine import constants as K
from ..variables import Variable

__all__ = ["convert_to_tensor", "check_hyperparameter", "cast", "is_number"]


def is_number(value: Any) -> bool:
    """A real number or a 0-dim real numpy array (not a tensor)."""
    return isinstance(value, (int, float, np.integer, np.floating)) or (
        isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "biuf")


def convert_to_tensor(value: Any, name: str) -> torch.Tensor:
    """A hyperparameter as TensorFlow's ``convert_to_tensor`` makes it: a 0-dim CPU tensor.

    Python floats and ``np.float32`` become float32, Python ints int32, ``np.float64`` float64; tensors keep
    their dtype. This is what decides the rounding of a Python-float hyperparameter used on float64 variables.
    """
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise ValueError(f"Argument `{name}` must be a scalar. Received a tensor of shape {tuple(value.shape)}.")
        if value.dtype.is_complex or value.dtype == torch.bool:
            raise TypeError(f"Argument `{name}` must be a real number. Received: dtype={value.dtype}")
        return value.detach()
    if isinstance(value, (bool, np.bool_)):
        return torch.tensor(int(value), dtype=torch.int32)
    if isinstance(value, (np.generic, np.ndarray)) and is_number(value):  # before float: np.float64 is a float
        return torch.from_numpy(np.array(value)).reshape(())
    if isinstance(value, int):
        return torch.tensor(value, dtype=torch.int32 if -2**31 <= value < 2**31 else torch.int64)
    if isinstance(value, float):
        return torch.tensor(value, dtype=torch.float32)
    if callable(value):
        raise ValueError(
            f"Attempt to convert a value ({value!r}) with an unsupported type ({type(value)}) to a Tensor. "
            f"Argument `{name}` does not accept callables in this optimizer.")
    raise TypeError(f"Argument `{name}` must be a number or a scalar tensor. Received: {name}={value!r}")


def check_hyperparameter(value: Any, name: str, allow_callable: bool) -> None:
    """Raises now (at construction) for a value that ``convert_to_tensor`` would reject at apply time."""
    if allow_callable and callable(value) and not isinstance(value, torch.Tensor):
        # TF1 calls it with no arguments at each step: a Keras schedule (which takes the step) cannot work.
        checks.check_no_argument_callable(name, value, "a callable with no arguments (TF1 optimizers take no "
                                                       "Keras learning-rate schedule)")
        return
    convert_to_tensor(value, name)


def cast(tensor: torch.Tensor, dtype: torch.dtype) -> float:
    """``math_ops.cast(tensor, dtype)`` as a Python float holding the exact value in ``dtype`` (float32 for
    bfloat16 variables: see ``engine/constants.py``)."""
    dtype = K.scalar_dtype(dtype)
    if tensor.dtype != dtype:
        tensor = tensor.to(dtype)
    return float(tensor)


def _unique_state_name(self, base: str) -> str:
    name, k = base, 0
    while name in self._state_names:
        k += 1
        name = f"{base}_{k}"
    self._state_names.add(name)
    return name


def _make_slot(self, var: torch.Tensor, value: torch.Tensor, slot_name: str, op_name: str,
               fill: Optional[float] = None) -> Variable:
    """``fill``: the number a constant ``value`` holds, when the slot may be the file's tensor that a reader
    building this optimizer offers (engine/adopt.py): it is taken as it is, without a copy."""
    pos = self._register_variable(var)
    existing = self._get_slot(slot_name, pos)
    if existing is not None:
        return existing  # type: ignore[return-value]
    name = _unique_state_name(self, f"{self._var_names[pos]}/{op_name}")
    taken = adopt.take(self, var, slot_name, value.shape, value.dtype, var.device, fill)
    if taken is not None:
        slot = Variable._adopt(taken, name=name, trainable=False)
    elif value.device.type == "meta":  # a constant slot made once where it lives (no second copy)
        slot = Variable._adopt(torch.full(value.shape, fill, dtype=value.dtype, device=var.device), name=name,
                               trainable=False)
    else:
        slot = Variable(value.to(device=var.device), name=name, trainable=False)
    self._set_slot(slot_name, pos, slot)  # first: it records the initial value (what a reset writes back)
    _restore_pending(self, slot)
    return slot


def _zeros_slot(self, var: torch.Tensor, slot_name: str, op_name: str) -> Variable:
    """A slot of zeros shaped like ``var`` (created once per ``(slot_name, var)``)."""
    if self._get_slot(slot_name, self._register_variable(var)) is not None:
        return self._get_slot(slot_name, self._position(var))  # type: ignore[return-value]
    # (a meta tensor of the slot's shape: the slot is the file's tensor, or zeros made once where it lives)
    return _make_slot(self, var, torch.empty(var.shape, dtype=var.dtype, device="meta"), slot_name, op_name,
                      fill=0.0)


def _get_or_make_slot(self, var: torch.Tensor, val: Any, slot_name: str, op_name: str) -> Variable:
    """A slot whose initial value is ``val`` (its dtype is ``val``'s)."""
    if self._get_slot(slot_name, self._register_variable(var)) is not None:
        return self._get_slot(slot_name, self._position(var))  # type: ignore[return-value]
    return _make_slot(self, var, torch.as_tensor(val), slot_name, op_name)


def _get_or_make_slot_with_initializer(self, var: torch.Tensor, initializer: Any, shape: Sequence[int],
                                       dtype: torch.dtype, slot_name: str, op_name: str) -> Variable:
    """A slot made by ``initializer(shape, dtype)`` (or filled with a number)."""
    if self._get_slot(slot_name, self._register_variable(var)) is not None:
        return self._get_slot(slot_name, self._position(var))  # type: ignore[return-value]
    if callable(initializer):
        value = torch.as_tensor(initializer(tuple(shape), dtype), dtype=dtype)
        return _make_slot(self, var, value, slot_name, op_name)
    fill = torch.tensor(float(initializer), dtype=dtype).item()  # the number rounded to the slot's dtype
    return _make_slot(self, var, torch.empty(tuple(shape), dtype=dtype, device="meta"), slot_name, op_name,
                      fill=fill)


def get_slot(self, var: torch.Tensor, name: str) -> Optional[Variable]:
    """The slot ``name`` of ``var``, or None if it was not created (yet)."""
    pos = self._position(var)
    if pos is None:
        return None
    return self._get_slot(name, pos)  # type: ignore[return-value]


def get_slot_names(self) -> list[str]:
    """Names of the slots created so far, sorted."""
    return sorted(name for name, table in self._slots.items() if table)


def _create_non_slot_variable(self, initial_value: Any, name: str, colocate_with: Any = None) -> Variable:
    """One variable per name for the whole optimizer (e.g. Adam's ``beta1_power``); kept on the CPU."""
    var = self._non_slot_dict.get(name)
    if var is None:
        full = f"{self._name}/{name}" if self._use_own_namescope_for_non_slot_vars else name
        value = convert_to_tensor(initial_value, name) if not isinstance(initial_value, torch.Tensor) \
            else initial_value.detach().to("cpu")
        var = Variable._adopt(value, name=_unique_state_name(self, full), trainable=False)
        self._remember_initial_scalar(var)
        _restore_pending(self, var)
        self._non_slot_dict[name] = var
    return var


def _get_non_slot_variable(self, name: str, graph: Any = None) -> Optional[Variable]:
    return self._non_slot_dict.get(name)


def _non_slot_variables(self) -> list[Variable]:
    return list(self._non_slot_dict.values())


def variables(self) -> list[Variable]:
    """Every optimizer variable (non-slot variables and slots), sorted by name as TF sorts ``v.name``."""
    state = self._non_slot_variables() + [s for table in self._slots.values() for s in table.values()]
    return sorted(state, key=lambda v: f"{v.name}:0")  # type: ignore[return-value]


# ------------------------------------------------------------------------------------------ checkpoints
def _load_legacy_format(self, state_dict: Any) -> bool:
    """Restores slotopt 0.1's ``{"name", "variables": {name: tensor}}``. Values for slots that do not exist yet
    are kept and applied when the slot is created (TF1's deferred slot restoration)."""
    values = state_dict.get("variables") if hasattr(state_dict, "get") else None
    if not isinstance(values, dict):
        return False
    existing = {v.name: v for v in self.variables()}
    # Copies: a value kept for a slot created later must not follow the caller's later changes.
    tensors = {name: torch.as_tensor(value).detach().clone() for name, value in values.items()}
    unknown = sorted(name for name in tensors if name not in existing)
    if existing and unknown:  # built: every saved variable must be one of this optimizer's
        raise ValueError(
            f"Loaded state has variables {unknown[:10]} that {type(self).__name__} {self._name!r} does not have "
            f"(it has {sorted(existing)[:10]}): the state was saved by another optimizer class, name or set of "
            "variables.")
    for name, value in tensors.items():
        if name in existing and tuple(existing[name].shape) != tuple(value.shape):
            raise ValueError(f"Optimizer variable {name} has shape {tuple(existing[name].shape)}; the state has "
                             f"shape {tuple(value.shape)}.")
    for name, value in tensors.items():  # dense real values, scalars in range (engine/resume.py)
        resume.check_fits(f"Loaded state {name!r}", name, value, existing.get(name, value))
    for name, value in tensors.items():
        if name in existing:
            with torch.no_grad():
                existing[name].copy_(value)
        else:
            self._pending_state[name] = value
    return True


def _restore_pending(self, var: Variable) -> None:
    value = self._pending_state.pop(var.name, None) if var.name is not None else None
    if value is not None:
        if tuple(value.shape) != tuple(var.shape):
            raise ValueError(f"Optimizer variable {var.name} has shape {tuple(var.shape)}; the restored state "
                             f"has shape {tuple(value.shape)}.")
        with torch.no_grad():
            var.copy_(value)
