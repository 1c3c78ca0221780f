"""TF1 ``AdagradDAOptimizer`` (Adagrad dual averaging)."""

from __future__ import annotations

from typing import Any

import torch

from ..engine import constants as K
from ..engine import registry
from ..kernels import adagrad as kernels
from .optimizer import BuiltinOptimizer, InvalidArgumentError


@registry.register("v1")
class AdagradDAOptimizer(BuiltinOptimizer):
    """Adagrad dual averaging (TF ``ApplyAdagradDA``), float32/float64 only; the old ``w`` is not used.

    With ``t = global_step + 1`` read before the update (through float32, as the kernel does):
    ``ga <- ga + g``; ``gg <- gg + g*g``; ``den = l2 * (t * lr) + sqrt(gg)``;
    ``w <- ((-lr) * sign(ga)) * max(|ga| - t * l1, 0) / den`` when ``l1 > 0``, else ``w <- -(lr * ga) / den``.
    Sparse gradients update the touched rows with the sparse kernel's forms (see ``kernels.adagrad``).

    ``global_step`` must be an int64 scalar tensor; the optimizer never increments it, so pass the same tensor
    to ``apply_gradients(..., global_step=global_step)``. Slots ``"gradient_accumulator"`` (0) and
    ``"gradient_squared_accumulator"`` (``initial_gradient_squared_accumulator_value``, > 0). No callables.

    Example:
        >>> import torch, slotopt
        >>> step = slotopt.Variable(0, name="global_step", dtype=torch.int64)
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.v1.AdagradDAOptimizer(0.5, step, initial_gradient_squared_accumulator_value=3.0)
        >>> opt.apply_gradients([(torch.tensor([1.0]), w)], global_step=step)
        >>> w.tolist(), int(step)
        ([-0.25], 1)
    """

    _callable_hypers = False
    _supported_dtypes = (torch.float32, torch.float64)
    _kernel_slots = ("gradient_accumulator", "gradient_squared_accumulator")

    def __init__(self, learning_rate: Any, global_step: torch.Tensor,
                 initial_gradient_squared_accumulator_value: Any = 0.1, l1_regularization_strength: Any = 0.0,
                 l2_regularization_strength: Any = 0.0, use_locking: bool = False, name: str = "AdagradDA") -> None:
        if initial_gradient_squared_accumulator_value <= 0:
            raise ValueError("initial_gradient_squared_accumulator_value must be positive: "
                             f"{initial_gradient_squared_accumulator_value}")
        super().__init__(use_locking, name, {"learning_rate": learning_rate, "l1": l1_regularization_strength,
                                             "l2": l2_regularization_strength})
        if not (isinstance(global_step, torch.Tensor) and global_step.dtype == torch.int64
                and global_step.dim() == 0):
            got = f"a {global_step.dtype} tensor of shape {tuple(global_step.shape)}" \
                if isinstance(global_step, torch.Tensor) else (
                    "a int32 tensor" if isinstance(global_step, int) else f"{type(global_step).__name__}")
            raise InvalidArgumentError(
                "Argument `global_step` of AdagradDAOptimizer was expected to be a int64 scalar tensor (e.g. "
                f"slotopt.Variable(0, dtype=torch.int64)) but is {got}. Received: global_step={global_step!r}")
        self._learning_rate = learning_rate
        self._global_step = global_step
        self._initial_gradient_squared_accumulator_value = initial_gradient_squared_accumulator_value
        self._l1_regularization_strength = l1_regularization_strength
        self._l2_regularization_strength = l2_regularization_strength

    def _create_slots(self, var_list) -> None:
        for v in var_list:
            self._zeros_slot(v, "gradient_accumulator", self._name)
            self._get_or_make_slot_with_initializer(v, self._initial_gradient_squared_accumulator_value, v.shape,
                                                    v.dtype, "gradient_squared_accumulator", self._name)

    def _prepare(self) -> None:
        super()._prepare()
        self._step = int(self._global_step) + 1

    def _dense_update(self, params, grads, slots) -> None:
        dtype = params[0].dtype
        lr, l1, l2 = self._t("learning_rate", dtype), self._t("l1", dtype), self._t("l2", dtype)
        t = float(torch.tensor(self._step, dtype=torch.float32).to(dtype))
        mul = lambda a, b: a * b  # noqa: E731
        kernels.apply_adagrad_da(params, grads, slots["gradient_accumulator"], slots["gradient_squared_accumulator"],
                                 lr=lr, t_l1=K.evaluate(mul, dtype, t, l1),
                                 l2_t_lr=K.evaluate(mul, dtype, l2, K.evaluate(mul, dtype, t, lr)), l1_positive=l1 > 0)

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        dtype = params[0].dtype
        lr, l1, l2 = self._t("learning_rate", dtype), self._t("l1", dtype), self._t("l2", dtype)
        ga, gg = slots["gradient_accumulator"], slots["gradient_squared_accumulator"]
        if scalar_rows:
            step = float(self._step)
            kernels.apply_adagrad_da_scalar_rows(params, grads, ga, gg, lr=lr, t_l1=step * l1,
                                                 t_l2_lr=(step * l2) * lr, l1_positive=l1 > 0)
            return
        t = float(torch.tensor(self._step, dtype=dtype))
        kernels.apply_adagrad_da_rows(params, grads, ga, gg, t=t, l1=l1, l2=l2,
                                      t_lr=K.evaluate(lambda a, b: a * b, dtype, t, lr), l1_positive=l1 > 0)


__all__ = ["AdagradDAOptimizer"]
