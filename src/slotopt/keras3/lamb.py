"""Keras 3 Lamb."""

from __future__ import annotations

from typing import Any

from ..engine import constants as K
from ..engine import registry, shards
from ..kernels import adam as kernels
from .adam import MomentOptimizer, square_terms


@registry.register("keras3", by_name=False)
class Lamb(MomentOptimizer):
    """LAMB: the Adam direction rescaled per variable by a trust ratio (Keras 3 numerics).

    ``m += (g - m) * (1 - beta_1)``; ``v += (g*g - v) * (1 - beta_2)`` (both ``1 - beta`` rounded once, D-form);
    ``u = (m / (1 - beta_1^t)) / (sqrt(v / (1 - beta_2^t)) + epsilon)``;
    ``r = ||w|| / ||u||`` (1 if either norm is 0; norms over the whole variable); ``w -= (r * lr) * u``.
    As in Keras, ``Lamb`` is exported but not registered for ``slotopt.get("lamb")``.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([3.0, 4.0]), name="w")
        >>> opt = slotopt.Lamb(learning_rate=0.1)
        >>> _ = opt.apply_gradients([(torch.tensor([1.0, 1.0]), w)])
        >>> [round(x, 3) for x in w.tolist()]
        [2.646, 3.646]
    """

    _sums_whole_tensors = True  # (engine/summation.refuse_unordered: not on a converted layout)
    _elementwise_update = False  # per-tensor norms (summed over the shards of an FSDP2 parameter)

    _kernel_slots = ("momentum", "velocity")
    _sparse_layout = "whole"

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self._momentums, self._velocities = self.add_optimizer_variables(
            self._trainable_variables, ["momentum", "velocity"])

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        t = float(self._step_count())
        b1p = K.power(K.cast(self.beta_1, dtype), t, dtype)
        b2p = K.power(K.cast(self.beta_2, dtype), t, dtype)
        kernels.lamb(params, grads, slots["momentum"], slots["velocity"], terms.get("squares"),
                     lr=self._lr_for(learning_rate, dtype),
                     one_minus_beta_1=K.d_form(self.beta_1, dtype), one_minus_beta_2=K.d_form(self.beta_2, dtype),
                     one_minus_beta_1_power=K.evaluate(lambda p: 1 - p, dtype, b1p),
                     one_minus_beta_2_power=K.evaluate(lambda p: 1 - p, dtype, b2p),
                     epsilon=K.literal(self.epsilon, dtype), layouts=shards.shard_layouts(self, params))

    def _slice_terms(self, param, grad, learning_rate):
        return square_terms(param, grad)


__all__ = ["Lamb"]
