"""Keras 3 Adagrad."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import adagrad as kernels
from .optimizer import LearningRate, Optimizer


@registry.register("keras3")
class Adagrad(Optimizer):
    """Adagrad (Keras 3 numerics: epsilon inside the square root).

    ``acc += g*g``; ``w -= (lr * g) / sqrt(acc + epsilon)``, with ``acc`` starting at
    ``initial_accumulator_value`` (state: ``accumulator`` per variable). A sparse gradient updates only the rows
    it touches; as in Keras 3 (TensorFlow backend), a repeated row gets each slice's square added to its accumulator
    and each slice's step subtracted in turn (with unique rows this is the dense result).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.Adagrad(learning_rate=0.5, initial_accumulator_value=0.0, epsilon=0.0)
        >>> _ = opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> w.item()
        0.5
    """

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    _kernel_slots = ("accumulator",)
    _capture_rules = ("adagrad",)  # capturable: the rate its only per-step scalar

    def __init__(self, learning_rate: LearningRate = 0.001, initial_accumulator_value: float = 0.1,
                 epsilon: float = 1e-7, weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False, ema_momentum: float = 0.99,
                 ema_overwrite_frequency: Any = None, loss_scale_factor: Any = None,
                 gradient_accumulation_steps: Any = None, name: Any = None, **kwargs: Any) -> None:
        checks.check_values({"initial_accumulator_value": initial_accumulator_value, "epsilon": epsilon})
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.initial_accumulator_value = initial_accumulator_value
        self.epsilon = epsilon

    @property
    def _sparse_layout(self) -> Optional[str]:  # type: ignore[override]
        # Keras divides the slices by sqrt(acc + eps) gathered per row; when that can be 0 (both 0 even in
        # float16) it takes a dense path, which for unique indices is the dense result: densify then.
        if K.literal(self.initial_accumulator_value, torch.float16) > 0 or K.literal(self.epsilon, torch.float16) > 0:
            return "rows"
        return None

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._accumulators = self.add_optimizer_variables(
            self._trainable_variables, "accumulator", initializer=self.initial_accumulator_value)

    def _update_group(self, params, grads, slots, learning_rate) -> None:
        dtype = params[0].dtype
        kernels.adagrad(params, grads, slots["accumulator"], lr=self._lr_for(learning_rate, dtype),
                        epsilon=K.literal(self.epsilon, dtype))

    def _update_slices(self, param, grad, slots, learning_rate) -> None:
        kernels.adagrad_slices(param, grad.indices, grad.values, slots["accumulator"][0],
                               lr=self._lr_for(learning_rate, param.dtype), epsilon=K.literal(self.epsilon, param.dtype))

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "initial_accumulator_value": self.initial_accumulator_value,
                "epsilon": self.epsilon}


__all__ = ["Adagrad"]
