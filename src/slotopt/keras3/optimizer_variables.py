"""The Keras 3 optimizer's own variables: ``iterations``, ``add_variable`` / ``add_variable_from_reference`` /
``add_optimizer_variables`` (the slots of small variables packed into one buffer per slot), ``assign*``,
``stateless_apply``, and ``get_weights`` / ``set_weights`` / ``save_own_variables`` / ``load_own_variables``
(values given before ``build`` are kept and applied when it builds). Functions of the optimizer (``self``)
that ``slotopt.keras3.Optimizer`` (keras3/optimizer.py) binds as its methods, not a base class.

Example:
    >>> import torch, slotopt
    >>> from slotopt.keras3 import optimizer_variables
    >>> opt = slotopt.SGD(momentum=0.9, name="sgd")
    >>> opt.build([slotopt.Variable(torch.zeros(2), name="w")])
    >>> type(opt).add_variable is optimizer_variables.add_variable, [v.path for v in opt.variables]
    (True, ['sgd/iteration', 'sgd/learning_rate', 'sgd/w_momentum'])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

import numpy as np
import torch

from ..engine import adopt, checks, state_io
from ..engine import constants as K
from ..engine.proof import weights as weights_io
from ..engine.state import constant_fill, initial_value
from ..engine.writing import transaction
from ..variables import IndexedSlices, Variable

__all__: list[str] = []


def _initial_value(initializer: Any, shape: Sequence[int], dtype: torch.dtype, device: Any) -> torch.Tensor:
    return initial_value(initializer, shape, dtype, device, round_number=K.cast)  # Keras's Constant


def _replaced_shape_error(argument: str) -> weights_io.ShapeError:
    return lambda i, target, shape: (f"Argument `{argument}` entry {i} has shape {shape}; the variable it replaces "
                                     f"has shape {tuple(target.shape)}.")


def _write(variable: torch.Tensor, value: Any, how: str) -> None:
    """Keras's ``assign`` / ``assign_add`` / ``assign_sub`` (``how``: copy, add, sub); row slices write their rows."""
    with torch.no_grad():
        if isinstance(value, IndexedSlices):
            rows = value.values.to(variable.dtype)
            if how == "copy":
                variable.index_copy_(0, value.indices, rows)
            else:
                variable.index_add_(0, value.indices, rows if how == "add" else -rows)
        else:
            getattr(variable, how + "_")(torch.as_tensor(value, dtype=variable.dtype, device=variable.device))


def _own_variable(self, value: torch.Tensor, name: str) -> Variable:
    var = Variable._adopt(value, name=name, trainable=False)
    var._variable_path = f"{self.name}/{name}"
    self._variables.append(var)
    if name != "learning_rate":  # a hyperparameter, not state: a reset keeps it
        self._remember_initial_scalar(var)
    return var


@property
def variables(self) -> list[Variable]:
    """Every optimizer variable, in Keras order: iteration, learning_rate, averages, accumulators, slots."""
    self._restore_pending_state()
    return list(self._variables)


@property
def iterations(self) -> torch.Tensor:
    """Number of updates applied (calls divided by ``gradient_accumulation_steps`` when accumulating)."""
    self._restore_pending_state()
    if self.gradient_accumulation_steps:
        return torch.div(self._iterations, self.gradient_accumulation_steps, rounding_mode="floor")
    return self._iterations


@iterations.setter
def iterations(self, value: Any) -> None:
    self._iterations.assign(checks.check_step_count("iterations", value))


def add_variable(
    self,
    shape: Sequence[int],
    initializer: Any = "zeros",
    dtype: Optional[torch.dtype] = None,
    aggregation: str = "none",
    name: Optional[str] = None,
    device: Any = None,
) -> Variable:
    """Creates and tracks an optimizer variable (dtype defaults to float32)."""
    dtype = dtype or torch.float32
    var = self._own_variable(_initial_value(initializer, shape, dtype, device), name or "variable")
    return var


def add_variable_from_reference(
    self, reference_variable: torch.Tensor, name: Optional[str] = None, initializer: Any = "zeros"
) -> Variable:
    """Creates a variable with the shape, dtype and device of ``reference_variable``, named after it."""
    fill = constant_fill(initializer, K.cast)
    # A reader building this optimizer on a file's state offers it the file's tensor (engine/adopt.py).
    value = adopt.take(self, reference_variable, str(name), reference_variable.shape, reference_variable.dtype,
                       reference_variable.device, None if fill is None else fill(reference_variable.dtype))
    if value is None:
        value = _initial_value(initializer, reference_variable.shape, reference_variable.dtype,
                               reference_variable.device)
    return _slot_from(self, reference_variable, name, value)


def _slot_from(self, reference_variable: torch.Tensor, name: Optional[str], value: torch.Tensor) -> Variable:
    ref_name = self._name_of(reference_variable).replace("/", "_").replace(":", "_")
    var = self._own_variable(value, f"{ref_name}_{name}")
    pos = self._position(reference_variable)
    if pos is not None and name is not None:
        self._set_slot(name, pos, var)
    return var


def add_optimizer_variables(
    self, trainable_variables: Sequence[torch.Tensor], name: Union[str, Sequence[str]], initializer: Any = "zeros"
) -> Any:
    """One variable per name for each trainable variable, interleaved per variable (Keras order).

    ``initializer`` applies to every name, or is a list with one initializer per name. With constant
    initializers, the state of small variables is packed into one buffer per name (each slot is a view of
    it), so that element-wise updates run over many small tensors in one call.
    """
    names = [name] if isinstance(name, str) else list(name)
    initializers = list(initializer) if isinstance(initializer, (list, tuple)) else [initializer] * len(names)
    if len(initializers) != len(names):
        raise ValueError(
            f"Expected one initializer per name ({len(names)}). Received: initializer={initializer!r}"
        )
    positions = [self._position(v) for v in trainable_variables]
    packed: dict[str, dict[int, torch.Tensor]] = {}
    if None not in positions:
        refs = list(zip(positions, trainable_variables))
        for n, init in zip(names, initializers):
            fill = constant_fill(init, K.cast)
            if fill is not None:
                packed[n] = self._flat_state.allocate(n, refs, fill)
                # (a reader's offer: the packed slots filled from the file's tensors, engine/adopt.py)
                adopt.fill_packed(self, n, packed[n], refs, fill)
    lists: list[list[Variable]] = [[] for _ in names]
    for var, pos in zip(trainable_variables, positions):
        for i, (n, init) in enumerate(zip(names, initializers)):
            view = packed.get(n, {}).get(pos)  # type: ignore[arg-type]
            if view is not None:
                lists[i].append(_slot_from(self, var, n, view))
            else:
                lists[i].append(self.add_variable_from_reference(var, n, init))
    return lists[0] if isinstance(name, str) else lists


# ------------------------------------------------------------------------------------------ assign
def assign(variable: torch.Tensor, value: Any) -> None:
    _write(variable, value, "copy")


def assign_add(variable: torch.Tensor, value: Any) -> None:
    _write(variable, value, "add")


def assign_sub(variable: torch.Tensor, value: Any) -> None:
    _write(variable, value, "sub")


# ------------------------------------------------------------------------------------------ stateless
def stateless_apply(
    self, optimizer_variables: Sequence[Any], grads: Sequence[Any], trainable_variables: Sequence[Any]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Pure step: returns ``(new trainable values, new optimizer variable values)`` and changes nothing."""
    if not self.built:
        raise ValueError(
            f"To call `stateless_apply`, {type(self).__name__} must be built (i.e. its variables must have been "
            "created). You can build it via `optimizer.build(trainable_variables)`."
        )
    own = self.variables
    if len(optimizer_variables) != len(own):
        raise ValueError(
            "Argument `optimizer_variables` must be a list of tensors corresponding 1:1 to "
            f"{type(self).__name__}().variables. Received list with length {len(optimizer_variables)}, but "
            f"expected {len(own)} variables."
        )
    model = self._trainable_variables
    if len(trainable_variables) != len(model):
        raise ValueError(
            "Argument `trainable_variables` must be a list of tensors corresponding 1:1 to the variables the "
            f"optimizer was built with. Received list with length {len(trainable_variables)}, but expected "
            f"{len(model)} variables."
        )
    targets = own + model
    values = weights_io.checked_values(own, optimizer_variables, argument="optimizer_variables",
                                       shape_error=_replaced_shape_error("optimizer_variables")) + \
        weights_io.checked_values(model, trainable_variables, argument="trainable_variables",
                                  shape_error=_replaced_shape_error("trainable_variables"))
    saved = transaction.copy_values(targets)
    try:
        weights_io.assign_values(targets, values)
        with torch.no_grad():
            self.apply(grads)
        new_model, new_own = transaction.copy_values(model), transaction.copy_values(self.variables)
    finally:
        transaction.put_values(targets, saved)
    return new_model, new_own


# ------------------------------------------------------------------------------------------ weights I/O
def get_weights(self) -> list[np.ndarray]:
    """The values of ``variables`` as numpy arrays (Keras 3 removed this; its users asked for it back).
    Before the build, weights given to ``set_weights`` are still the optimizer's: they are returned."""
    if not self.built and self._pending_state is not None:
        return weights_io.arrays(self._pending_state)
    if not self.built and "_pending_torch_state" in self.__dict__:
        raise RuntimeError(
            f"{type(self).__name__} holds a state dict loaded before its build; it is matched to variables when "
            "it builds. Build it first (`optimizer.build(variables)`) to read it as weights, or save it with "
            "`state_dict()`.")
    return weights_io.arrays(self.variables)


def _has_pending_weights(self) -> bool:
    return not self.built and self._pending_state is not None


def set_weights(self, weights: Sequence[Any]) -> None:
    """Assigns ``weights`` to ``variables`` in order. As in Keras 3, the optimizer must be built first (a
    checkpoint read before the build, by ``load_own_variables`` or ``load_state_dict``, waits for it)."""
    if not self.built:
        raise ValueError(
            "You are calling `set_weights()` on an optimizer that has not yet been built. Please call "
            "`optimizer.build(trainable_variables)` to create the optimizer weights before calling "
            "`set_weights()`.")
    # Copies: a weight may be a view of a variable this call writes.
    weights = [weights_io.as_numbers(w, "weights", i).clone() for i, w in enumerate(weights_io.entries(weights))]
    own = self._variables
    values = weights_io.checked_values(own, weights, count=weights_io.count_error(self.name, len(weights),
                                                                                 len(own)))
    weights_io.assign_values(own, values)
    self._show_current_learning_rate()


def _set_or_keep_weights(self, weights: Sequence[Any]) -> None:
    """``set_weights`` once built; before, ``weights`` are kept (checked to be numbers, copied: kept values
    must not alias the caller's) and applied at the build."""
    if self.built:
        self.set_weights(weights)
        return
    self._pending_state = [weights_io.as_numbers(w, "weights", i).clone()
                           for i, w in enumerate(weights_io.entries(weights))]


def _restore_pending_state(self) -> None:
    if self._pending_state is not None and self.built:
        pending, self._pending_state = self._pending_state, None
        try:
            self.set_weights(pending)  # checks every length and shape first; kept pending if not
        except BaseException:
            self._pending_state = pending
            raise
    if self.built and "_pending_torch_state" in self.__dict__:
        state_io.apply_pending_torch_state(self)


def save_own_variables(self, store: dict) -> None:
    """Writes ``store["0"], store["1"], ...`` (numpy arrays), as Keras saves an optimizer."""
    for i, var in enumerate(self.variables):
        store[str(i)] = var.detach().cpu().numpy().copy()


def load_own_variables(self, store: Mapping[str, Any]) -> None:
    """Reads what ``save_own_variables`` wrote. Before ``build``, the state is kept until the build."""
    self._set_or_keep_weights([store[str(i)] for i in range(len(store))])
