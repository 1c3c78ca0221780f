"""Keras 3.15 ScheduleFreeAdamW, with its train/eval switch."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import schedule_free as kernels
from .optimizer import LearningRate, Optimizer


@registry.register("keras3", files=False)
class ScheduleFreeAdamW(Optimizer):
    """Schedule-free AdamW (Defazio et al., 2024) with Keras 3.15's arguments and numerics.

    No learning-rate schedule is needed: the optimizer keeps ``z`` (its ``momentum`` slot, initialised to the
    variable at build) where Adam-normalised gradient steps land, and the model variable holds
    ``y = (1 - beta_1) * z + beta_1 * x``, an interpolation with the running average ``x`` of the ``z`` iterates.
    One step at ``t = iterations + 1``, every constant in the variable's dtype:

    ``v += (g*g - v) * (1 - beta_2)``; ``z -= (lr * g) / (sqrt(v / (1 - beta_2^t)) + epsilon)``;
    ``x = (y - (1 - beta_1) * z) / beta_1``; ``x = (1 - 1/t) * x + (1/t) * z``; ``y = (1 - beta_1) * z + beta_1 * x``.
    As in Keras 3.15 (TensorFlow backend, the recorded reference), ``x`` is recovered with the updated ``z``.

    With ``warmup_steps > 0`` the learning rate is multiplied by ``min(t / warmup_steps, 1)``. ``weight_decay``
    is the base class's decoupled decay (default None, as in Keras).

    **Train/eval switch** (as in Keras): gradients must be taken at ``y``, but the point to evaluate is ``x``.
    ``swap_to_eval()`` (alias ``eval()``) rewrites each variable from ``y`` to ``x = (y - (1 - beta_1) * z) /
    beta_1``; ``swap_to_train()`` (alias ``train()``) rewrites it back to ``y``. ``is_training_mode`` tells which
    one the variables hold; each swap does nothing when already in that mode or before the build. Call
    ``swap_to_train()`` before applying gradients again: like Keras, ``apply`` does not check the mode, and the
    mode is not part of the saved state (``variables`` / ``state_dict``), so save in training mode.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, 2.0]), name="w")
        >>> opt = slotopt.ScheduleFreeAdamW(learning_rate=0.1)
        >>> _ = opt.apply_gradients([(torch.tensor([1.0, -1.0]), w)])
        >>> [round(x, 4) for x in w.tolist()]
        [0.9, 2.1]
        >>> opt.swap_to_eval()
        >>> opt.is_training_mode, [round(x, 4) for x in w.tolist()]
        (False, [0.9, 2.1])
        >>> opt.swap_to_train()
        >>> opt.is_training_mode
        True
    """

    _kernel_slots = ("momentum", "velocity")
    #: ``sqrt(1 - beta_2 ** t)`` scales the step: a beta_2 of 1 never moves.
    _hyperparameter_ranges = {"beta_2": checks.UNIT_OPEN}

    def __init__(self, learning_rate: LearningRate = 0.0025, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-8, warmup_steps: int = 0, weight_decay: Any = None, clipnorm: Any = None,
                 clipvalue: Any = None, global_clipnorm: Any = None, use_ema: bool = False,
                 ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None, loss_scale_factor: Any = None,
                 gradient_accumulation_steps: Any = None, name: Optional[str] = None, **kwargs: Any) -> None:
        checks.check_values({"beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon}, self._hyperparameter_ranges)
        if beta_1 == 0:
            raise ValueError(f"Argument `beta_1` must be > 0 (x is recovered by dividing by it). Received: "
                             f"beta_1={beta_1!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ValueError(f"Argument `warmup_steps` must be an integer >= 0. Received: warmup_steps={warmup_steps!r}")
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.warmup_steps = warmup_steps
        self._is_training_mode = True

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        trainable = self._trainable_variables
        self._momentums, self._velocities = self.add_optimizer_variables(trainable, ["momentum", "velocity"])
        with torch.no_grad():
            for z, var in zip(self._momentums, trainable):
                z.copy_(var)  # z starts at the initial point

    def _constants(self, dtype: torch.dtype) -> dict[str, float]:
        beta_1 = K.cast(self.beta_1, dtype)
        return {"beta_1": beta_1, "one_minus_beta_1": K.f_form(self.beta_1, dtype)}

    def _update_group(self, params, grads, slots, learning_rate) -> None:
        dtype = params[0].dtype
        t = float(self._step_count())
        lr = self._lr_for(learning_rate, dtype)
        if self.warmup_steps > 0:
            lr = K.evaluate(lambda lr, t, n: lr * torch.minimum(t / n, torch.ones((), dtype=dtype)), dtype,
                            lr, t, float(self.warmup_steps))
        weight = K.evaluate(lambda t: 1.0 / t, dtype, t)
        kernels.schedule_free_adamw(
            params, grads, slots["momentum"], slots["velocity"], lr=lr, **self._constants(dtype),
            one_minus_beta_2=K.f_form(self.beta_2, dtype),
            bias_correction_2=K.evaluate(lambda p: 1 - p, dtype, K.power(K.cast(self.beta_2, dtype), t, dtype)),
            epsilon=K.cast(self.epsilon, dtype), weight=weight,
            one_minus_weight=K.evaluate(lambda w: 1 - w, dtype, weight))

    # ------------------------------------------------------------------------------------------ train / eval
    @property
    def is_training_mode(self) -> bool:
        """True while the variables hold ``y`` (the training point), False after ``swap_to_eval()``."""
        return self._is_training_mode

    def _swap(self, to_train: bool) -> None:
        if self._is_training_mode == to_train or not self.built:
            return
        for group in self._groups(self._trainable_positions):
            params = [self._vars[p] for p in group]
            z = [self._slots["momentum"][p] for p in group]
            constants = self._constants(params[0].dtype)
            new = kernels.interpolate(params, z, **constants) if to_train else kernels.extrapolate(params, z, **constants)
            with torch.no_grad():
                torch._foreach_copy_(params, new)
        self._is_training_mode = to_train

    def swap_to_train(self) -> None:
        """Sets every variable to ``y = (1 - beta_1) * z + beta_1 * x`` (where gradients are taken)."""
        self._swap(True)

    def swap_to_eval(self) -> None:
        """Sets every variable to the average ``x = (y - (1 - beta_1) * z) / beta_1`` (the point to evaluate)."""
        self._swap(False)

    def train(self) -> None:
        """Alias of ``swap_to_train()``."""
        self.swap_to_train()

    def eval(self) -> None:
        """Alias of ``swap_to_eval()``."""
        self.swap_to_eval()

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_1": self.beta_1, "beta_2": self.beta_2, "epsilon": self.epsilon,
                "warmup_steps": self.warmup_steps}


__all__ = ["ScheduleFreeAdamW"]
