"""Keras 3 Nadam."""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.graph import increment_version as _increment_version

from .. import numerics
from ..engine import capture, registry
from ..engine import constants as K
from ..engine import step_recipes as R
from ..kernels import adam as kernels
from ..kernels import rows as sparse_rows
from .adam import MomentOptimizer, square_terms


def _momentum_schedule(beta_1: float, decay: float, t: float, dtype: torch.dtype) -> float:
    """``beta_1 * (1 - 0.5 * decay^t)`` evaluated in ``dtype``."""
    return K.evaluate(lambda b, d, t: b * (1.0 - 0.5 * numerics.libm.pow(d, t)), dtype, beta_1, decay, t)


@registry.register("keras3")
class Nadam(MomentOptimizer):
    """Nadam: Adam with Nesterov momentum and Dozat's momentum schedule (Keras 3 numerics).

    With ``t`` the 1-based step and ``mu_t = beta_1 * (1 - 0.5 * 0.96^t)``, the optimizer keeps the running
    product ``P_t = mu_1 * ... * mu_t`` in the scalar variable ``u_product`` (created last, path
    ``<name>/variable``, updated once per step before the variables). Per variable, with ``P' = P_t * mu_{t+1}``:
    ``m += (g - m) * (1 - beta_1)``; ``v += (g*g - v) * (1 - beta_2)`` (``1 - beta`` computed in the variable's
    dtype, F-form); ``m_hat = (mu_{t+1} * m) / (1 - P') + ((1 - mu_t) * g) / (1 - P_t)``;
    ``v_hat = v / (1 - beta_2^t)``; ``w -= (m_hat * lr) / (sqrt(v_hat) + epsilon)``.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.Nadam(learning_rate=0.1, name="nadam")
        >>> _ = opt.apply_gradients([(torch.tensor([1.0]), w)])
        >>> round(w.item(), 4)
        0.8937
        >>> [v.path for v in opt.variables][-1], round(float(opt.variables[-1]), 4)
        ('nadam/variable', 0.468)
    """


    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)
    _update_kernels = (kernels.nadam,)  # compiled: slices take one pass (engine/sparse_pass.py)

    _kernel_slots = ("momentum", "velocity")
    _sparse_layout = "blocks"

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        trainable = self._trainable_variables
        self._momentums, self._velocities = self.add_optimizer_variables(trainable, ["momentum", "velocity"])
        dtype = trainable[0].dtype if trainable else torch.float32
        self._u_product = self.add_variable((), initializer="ones", dtype=dtype, name="variable")

    def _before_updates(self, learning_rate: Any) -> None:
        # P_t = (P_{t-1} * beta_1) * (1 - 0.5 * 0.96^t): bare Python literals, in u_product's dtype.
        product = self._u_product
        dtype = product.dtype
        b, d, t = K.literal(self.beta_1, dtype), K.literal(0.96, dtype), self._step_count()
        before = self._product(t, before=True)
        value = K.evaluate(lambda p, b, d, t: (p * b) * (1.0 - 0.5 * numerics.libm.pow(d, t)), dtype, before, b, d,
                           float(t))
        if capture.active(self) and capture.device_state(
                self, product, t, value,
                (R.loaded(product, before, dtype) * b) * (1.0 - 0.5 * R.pow(R.const(d, dtype), R.step(dtype)))):
            _increment_version([product])  # (written on the device by the capturable step's program)
            # (the step's values before and after: a step refused after this, during a capture, runs again at
            # the same t from the same value)
            self.__dict__["_u_product_host"] = (t, before, value, product._version, product)
            return
        product.fill_(value)
        self.__dict__.pop("_u_product_host", None)

    def _product(self, t: Any = None, before: bool = False) -> float:
        """``u_product``'s value at step ``t`` (``before``: before this step's update): in a capturable step the
        host's copy, where nothing wrote the variable since a capturable step wrote it on the device (no read
        of the device: a capture forbids one), else read."""
        product = self._u_product
        held = self.__dict__.get("_u_product_host")
        if held is not None and held[4] is product and held[3] == product._version:
            t = self._step_count() if t is None else t
            if held[0] == t:
                return held[1] if before else held[2]
            if held[0] == t - 1 and before:
                return held[2]
        return float(product)

    #: Capturable (engine/capture.py): u_product set on the device by its own program, the schedule's entries
    #: computed from it there.
    _capture_rules = ("nadam",)

    def _capture_terms(self, rule, dtype, t, lr):
        """``_schedule``'s arithmetic over the step count and ``u_product`` read on the device."""
        if rule != "nadam":
            return super()._capture_terms(rule, dtype, t, lr)
        product = self._u_product
        beta_1, decay = R.const(K.cast(self.beta_1, dtype), dtype), R.const(K.cast(0.96, dtype), dtype)
        mu = beta_1 * (1.0 - 0.5 * R.pow(decay, t))
        mu_next = beta_1 * (1.0 - 0.5 * R.pow(decay, R.step(dtype, 1)))
        p = R.cast(R.loaded(product, self._product(), product.dtype), dtype)  # (after this step's update)
        return dict(mu_next=mu_next, one_minus_mu=1 - mu, one_minus_product=1 - p,
                    one_minus_product_next=1 - p * mu_next,
                    one_minus_beta_2_power=1 - R.pow(R.const(K.cast(self.beta_2, dtype), dtype), t))

    def _schedule(self, dtype: torch.dtype) -> dict[str, float]:
        """This step's momentum-schedule scalars, rounded in ``dtype``."""
        t = float(self._step_count())
        beta_1 = K.cast(self.beta_1, dtype)
        decay = K.cast(0.96, dtype)
        mu = _momentum_schedule(beta_1, decay, t, dtype)
        mu_next = _momentum_schedule(beta_1, decay, t + 1, dtype)
        product = K.literal(self._product(), dtype)
        product_next = K.evaluate(lambda p, m: p * m, dtype, product, mu_next)
        beta_2_power = K.power(K.cast(self.beta_2, dtype), t, dtype)

        def one_minus(x: float) -> float:
            return K.evaluate(lambda y: 1 - y, dtype, x)

        return dict(mu_next=mu_next, one_minus_mu=one_minus(mu), one_minus_product=one_minus(product),
                    one_minus_product_next=one_minus(product_next), one_minus_beta_2_power=one_minus(beta_2_power))

    def _slice_terms(self, param, grad, learning_rate):
        s = self._schedule(param.dtype)
        terms = kernels.nadam_gradient_terms([grad.values], one_minus_mu=s["one_minus_mu"],
                                             one_minus_product=s["one_minus_product"])
        return {**square_terms(param, grad), "gradient_terms": [sparse_rows.summed(grad, param, terms[0])]}

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        kernels.nadam(params, grads, slots["momentum"], slots["velocity"], terms.get("squares"),
                      terms.get("gradient_terms"), lr=self._lr_for(learning_rate, dtype),
                      one_minus_beta_1=K.f_form(self.beta_1, dtype), one_minus_beta_2=K.f_form(self.beta_2, dtype),
                      epsilon=K.literal(self.epsilon, dtype), **self._schedule(dtype))



__all__ = ["Nadam"]
