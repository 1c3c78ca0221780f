"""tf.keras OptimizerV2's weights: the iteration counter, ``add_weight``, slots by name (``add_slot`` /
``get_slot``, created per variable by ``_create_slots`` on first use), and ``weights`` / ``get_weights`` /
``set_weights`` in creation order (the iteration count first). Functions of the optimizer (``self``) that
``slotopt.legacy.Optimizer`` (legacy/optimizer.py) binds as its methods, not a base class.

Example:
    >>> import torch, slotopt
    >>> opt = slotopt.legacy.Adam(learning_rate=0.1, name="adam")
    >>> w = slotopt.Variable(torch.zeros(2), name="w")
    >>> _ = opt.apply_gradients([(torch.ones(2), w)])
    >>> [v.path for v in opt.weights], opt.get_slot_names()
    (['adam/iter', 'adam/w/m', 'adam/w/v'], ['m', 'v'])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Optional

import numpy as np
import torch

from ..engine import adopt, checks, state_io
from ..engine import constants as K
from ..engine.proof import weights as weights_io
from ..engine.state import constant_fill
from ..engine.writing import transaction
from ..variables import Variable, variable_name
from .hyperparameters import initial_value, is_number

__all__: list[str] = []


def _new_variable(self, value: torch.Tensor, name: str, trainable: bool = False) -> Variable:
    var = Variable(value, name=name, trainable=trainable)
    var._variable_path = f"{self._name}/{name}"
    return var


@property
def iterations(self) -> torch.Tensor:
    """The number of steps applied (an int64 CPU variable, created on first use as ``<name>/iter``)."""
    if self._iterations is None:
        self._iterations = _new_variable(self, torch.zeros((), dtype=torch.int64), "iter")
        self._weights.append(self._iterations)
    return self._iterations


@iterations.setter
def iterations(self, variable: Any) -> None:
    if self._iterations is not None:
        raise RuntimeError(
            "Cannot set `iterations` to a new Variable after the Optimizer weights have been created. Here it "
            f"is attempting to set `iterations` to {variable}."
        )
    if is_number(variable) and float(variable).is_integer():
        count = checks.check_step_count("iterations", int(variable))
        variable = _new_variable(self, torch.tensor(count, dtype=torch.int64), "iter")
    elif isinstance(variable, torch.Tensor) and variable.numel() == 1 and variable.dtype == torch.bool:
        raise TypeError(f"Argument `iterations` must be an integer tensor, not a boolean one. Received: "
                        f"iterations={variable!r}")
    elif not (isinstance(variable, torch.Tensor) and variable.numel() == 1 and not variable.is_floating_point()
              and not variable.is_complex() and variable.device.type == "cpu"):
        raise TypeError(
            "Argument `iterations` must be an integer or a 0-dim integer tensor on the CPU (e.g. "
            f"`slotopt.Variable(0, dtype=torch.int64)`). Received: iterations={variable!r}"
        )
    checks.check_step_count("iterations", variable)  # a counter below 0 is refused
    self._iterations = variable
    self._weights.append(variable)


def add_weight(
    self,
    name: str,
    shape: Sequence[int] = (),
    dtype: Optional[torch.dtype] = None,
    initializer: Any = "zeros",
    trainable: Optional[bool] = None,
    synchronization: Any = None,
    aggregation: Any = None,
) -> Variable:
    """Creates an optimizer variable on the CPU (float32 unless ``dtype`` is given). It is not added to
    ``weights``: append it to ``self._weights`` to checkpoint it with ``get_weights``."""
    dtype = dtype or torch.float32
    value = initial_value(initializer, shape, dtype, "cpu")
    return _new_variable(self, value, name, trainable=bool(trainable) if trainable is not None else False)


def add_slot(self, var: torch.Tensor, slot_name: str, initializer: Any = "zeros",
             shape: Optional[Sequence[int]] = None) -> Variable:
    """Creates (once) the slot ``slot_name`` of ``var``: a variable on ``var``'s device, with its dtype and
    shape (or ``shape``), appended to ``weights``. Returns the existing slot on later calls."""
    if not isinstance(slot_name, str):
        raise TypeError(f"Argument `slot_name` must be a string. Received: slot_name={slot_name!r}")
    if not isinstance(var, torch.Tensor):
        raise TypeError(f"Argument `var` must be a tensor. Received: var={var!r}")
    pos = self._position(var)
    if pos is None:
        pos = self._register([var])[0]
    slot = self._get_slot(slot_name, pos)
    if slot is None:
        size = var.shape if shape is None else shape
        fill = constant_fill(initializer, K.literal)
        # A reader building this optimizer on a file's state offers the file's tensor (engine/adopt.py).
        value = adopt.take(self, var, slot_name, size, var.dtype, var.device, None if fill is None else fill(var.dtype))
        if value is None:
            value = initial_value(initializer, size, var.dtype, var.device)
        var_name = self._var_names[pos]
        slot = Variable._adopt(value, name=f"{var_name}/{slot_name}", trainable=False)
        slot._variable_path = f"{self._name}/{var_name}/{slot_name}"
        self._set_slot(slot_name, pos, slot)
        self._weights.append(slot)
    if slot_name not in self._slot_names:
        self._slot_names.append(slot_name)
    return slot


def get_slot(self, var: torch.Tensor, slot_name: str) -> Variable:
    """The slot ``slot_name`` of ``var``; ``KeyError`` if it does not exist."""
    pos = self._position(var)
    slot = self._get_slot(slot_name, pos) if pos is not None else None
    if slot is None:
        what = variable_name(var, "<unnamed>") if pos is None else self._var_names[pos]
        raise KeyError(
            f"Optimizer {self._name} has no slot {slot_name!r} for variable {what}. Slot names: "
            f"{self._slot_names}."
        )
    return slot


def get_slot_names(self) -> list[str]:
    """The slot names, in creation order."""
    return list(self._slot_names)


def _create_slots(self, var_list: list[torch.Tensor]) -> None:
    """Subclasses create their slots here with ``add_slot`` (called at every step; ``add_slot`` is
    idempotent)."""


def _create_all_weights(self, var_list: Sequence[torch.Tensor]) -> None:
    """Creates ``iterations``, the hyperparameter variables and the slots of ``var_list``. With a checkpoint
    loaded before the build that does not fit, nothing is created and the checkpoint stays pending."""
    if "_pending_torch_state" not in self.__dict__:
        _create_weights_for(self, var_list)
        return
    saved = transaction.snapshot(self)
    try:
        _create_weights_for(self, var_list)
    except BaseException:
        transaction.restore(self, saved)
        raise


def _create_weights_for(self, var_list: Sequence[torch.Tensor]) -> None:
    _ = self.iterations
    self._create_hypers()
    var_list = list(var_list)
    index = self._var_index
    positions = tuple(index.get(id(v)) for v in var_list)
    if None in positions:
        positions = tuple(self._register(var_list))
    if positions not in self._slots_created_for:
        self._create_slots(var_list)
        if len(self._slots_created_for) > 64:
            self._slots_created_for.clear()
        self._slots_created_for.add(positions)
    state_io.apply_pending_torch_state(self)


def build(self, var_list: Any) -> None:
    """Creates every weight for ``var_list`` (a module, tensors, ``(name, tensor)`` pairs or torch param-group
    dicts) now, so that slots are named after the module's parameters and ``set_weights`` can run before the
    first step."""
    positions = self._register(var_list)
    self._create_all_weights([self._vars[p] for p in positions])


@property
def weights(self) -> list[torch.Tensor]:
    """``[iterations] + extra weights + slots``, in creation order."""
    return list(self._weights)


def variables(self) -> list[torch.Tensor]:
    """Same as ``weights`` (a method, as in tf.keras)."""
    return list(self._weights)


def get_weights(self) -> list[np.ndarray]:
    """The weights' values as numpy arrays: the iteration count first, then the state in creation order."""
    return weights_io.arrays(self._weights)


def set_weights(self, weights: Sequence[Any]) -> None:
    """Assigns ``weights`` (from ``get_weights``) to the weights, after checking every length and shape."""
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Iterable):
        raise TypeError(f"Argument `weights` must be a list of arrays. Received: weights={weights!r}")
    weights = list(weights)
    params = self._weights
    count = weights_io.count_error(self._name, len(weights), len(params), spacing="  ",
                                   shown=f" Provided weights: {str(weights)[:50]}...")
    values = weights_io.checked_values(params, weights, count=count, shape_error=lambda i, param, shape: (
        f"Optimizer weight shape {tuple(param.shape)} not compatible with provided weight shape {shape}."))
    weights_io.assign_values(params, values)
