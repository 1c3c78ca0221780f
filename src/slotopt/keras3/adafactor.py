"""Keras 3 Adafactor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

import torch

from .. import numerics
from ..engine import checks, registry, shards
from ..engine import constants as K
from ..kernels import adafactor as kernels
from .optimizer import LearningRate, Optimizer


@registry.register("keras3")
class Adafactor(Optimizer):
    """Adafactor: factored second moments for matrices (Keras 3 numerics).

    With ``t`` the 1-based step: ``rho = min(lr, 1/sqrt(t))``; ``alpha = max(epsilon_2, RMS(w)) * rho``;
    ``G = g*g + epsilon_1``; ``b = 1 - t^beta_2_decay`` (0 on the first step). For a variable of rank >= 2
    (factored over its last two axes): ``r = b * r + (1 - b) * mean(G, -1)``, ``c = b * c + (1 - b) * mean(G, -2)``
    and ``v = (r / mean(r, -1))[..., None] * c[..., None, :]``; for rank < 2: ``v = b * v + (1 - b) * G``.
    Then ``u = g / sqrt(v)``, ``u /= max(1, RMS(u) / clip_threshold)`` and ``w -= alpha * u``, where
    ``RMS(x) = sqrt(mean(x*x))`` over the whole tensor. State per variable: ``[r, c, velocity]``; ``r`` and ``c`` are
    named after the variable, and for rank < 2 they are int32 scalar placeholders (kept so the variable list
    matches Keras). ``relative_step`` is stored for the config; as in Keras it does not change the result.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([[1.0, -1.0], [1.0, -1.0]]), name="kernel")
        >>> opt = slotopt.Adafactor(learning_rate=0.5, name="adafactor")
        >>> _ = opt.apply_gradients([(torch.tensor([[1.0, 1.0], [1.0, 1.0]]), w)])
        >>> [[round(x, 4) for x in row] for row in w.tolist()]
        [[0.5, -1.5], [0.5, -1.5]]
        >>> [v.path for v in opt.variables][2:]
        ['adafactor/kernel', 'adafactor/kernel', 'adafactor/kernel_velocity']
    """

    _sums_whole_tensors = True  # (engine/summation.refuse_unordered: not on a converted layout)
    _elementwise_update = False  # per-tensor norms and factored means (summed over FSDP2 shards)

    _kernel_slots = ("r", "c", "velocity")
    _sparse_layout = "whole"

    def __init__(self, learning_rate: LearningRate = 0.001, beta_2_decay: float = -0.8, epsilon_1: float = 1e-30,
                 epsilon_2: float = 1e-3, clip_threshold: float = 1.0, relative_step: bool = True,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None,
                 use_ema: bool = False, ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None, name: Any = None,
                 **kwargs: Any) -> None:
        checks.check_values({"beta_2_decay": beta_2_decay, "epsilon_1": epsilon_1, "epsilon_2": epsilon_2,
                             "clip_threshold": clip_threshold, "relative_step": relative_step})
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.beta_2_decay = beta_2_decay
        self.epsilon_1 = epsilon_1
        self.epsilon_2 = epsilon_2
        self.clip_threshold = clip_threshold
        self.relative_step = relative_step

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._r, self._c, self._v = [], [], []
        for var in self._trainable_variables:
            pos = self._position(var)
            name = self._name_of(var)
            if var.dim() < 2:  # not factored: int32 placeholders keep Keras's variable list
                r = self.add_variable((), dtype=torch.int32, name=name)
                c = self.add_variable((), dtype=torch.int32, name=name)
            else:
                shape = tuple(var.shape)
                r = self.add_variable(shape[:-1], dtype=var.dtype, name=name, device=var.device)
                c = self.add_variable(shape[:-2] + shape[-1:], dtype=var.dtype, name=name, device=var.device)
            self._set_slot("r", pos, r)
            self._set_slot("c", pos, c)
            self._r.append(r)
            self._c.append(c)
            self._v.append(self.add_variable_from_reference(var, "velocity"))

    def _update_slices(self, param, grad, slots, learning_rate) -> None:
        self._update_group([param], [grad.values], slots, learning_rate, indices=[grad.indices])

    def _update_group(self, params, grads, slots, learning_rate, indices=None) -> None:
        dtype = params[0].dtype
        t = float(self._step_count())
        lr = self._lr_for(learning_rate, dtype)
        rho = K.evaluate(lambda lr, t: torch.minimum(lr, 1 / numerics.sqrt(t)), dtype, lr, t)
        beta_2 = K.evaluate(lambda t, d: 1 - numerics.libm.pow(t, d), dtype, t, K.literal(self.beta_2_decay, dtype))
        kernels.adafactor(params, grads, slots["r"], slots["c"], slots["velocity"], indices, rho=rho,
                          epsilon_1=K.literal(self.epsilon_1, dtype), epsilon_2=K.cast(self.epsilon_2, dtype),
                          beta_2=beta_2, one_minus_beta_2=K.evaluate(lambda b: 1 - b, dtype, beta_2),
                          clip_threshold=K.literal(self.clip_threshold, dtype),
                          layouts=None if indices is not None else shards.shard_layouts(self, params))

    def _slot_axes(self, name: str, slot: torch.Tensor, param: torch.Tensor) -> Optional[Sequence[int]]:
        """``r`` keeps every axis but the last and ``c`` every axis but the second-to-last (rank >= 2)."""
        rank = param.dim()
        if name == "r" and rank >= 2:
            return tuple(range(rank - 1))
        if name == "c" and rank >= 2:
            return tuple(range(rank - 2)) + (rank - 1,)
        return super()._slot_axes(name, slot, param)

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "beta_2_decay": self.beta_2_decay, "epsilon_1": self.epsilon_1,
                "epsilon_2": self.epsilon_2, "clip_threshold": self.clip_threshold,
                "relative_step": self.relative_step}


__all__ = ["Adafactor"]
