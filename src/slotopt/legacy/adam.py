"""tf.keras legacy ``Adam`` (with AMSGrad), ``Adamax`` and ``Nadam``."""

from __future__ import annotations

from typing import Any, Optional

import torch

from .. import numerics
from .. import schedules as schedules_module
from ..engine import checks, registry
from ..engine import step_recipes as R
from ..kernels import adam as kernels
from .hyperparameters import as_scalar, epsilon_or_default, floats, literal_scalar, step_scalar
from .optimizer import ApplyState, Hyperparameter, Optimizer, grouped_dense

__all__ = ["Adam", "Adamax", "Nadam"]


class _AdamBase(Optimizer):
    """Shared constructor pieces: ``learning_rate``, ``decay``, ``beta_1``, ``beta_2`` hyperparameters."""

    _HAS_AGGREGATE_GRAD = True
    #: ``1 - beta ** t`` divides the update (bias correction): a beta of 1 gives NaN or no movement at step 1.
    _hyperparameter_ranges = {"beta_1": checks.UNIT_OPEN, "beta_2": checks.UNIT_OPEN}

    def _set_adam_hypers(self, learning_rate: Any, beta_1: Any, beta_2: Any, epsilon: Any, kwargs: dict) -> None:
        self._set_hyper("learning_rate", kwargs.get("lr", learning_rate))
        self._set_hyper("decay", self._initial_decay)
        self._set_hyper("beta_1", beta_1)
        self._set_hyper("beta_2", beta_2)
        self.epsilon = epsilon_or_default(epsilon)

    def _betas(self, var_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(t, beta_1, beta_2)`` in the variable dtype, with ``t = iterations + 1``."""
        local_step = step_scalar(self.iterations.detach() + 1, var_dtype)
        return local_step, self._get_hyper("beta_1", var_dtype), self._get_hyper("beta_2", var_dtype)

    def _config(self, **extra: Any) -> dict[str, Any]:
        config = super().get_config()
        config.update({
            "learning_rate": self._serialize_hyperparameter("learning_rate"),
            "decay": self._initial_decay,
            "beta_1": self._serialize_hyperparameter("beta_1"),
            "beta_2": self._serialize_hyperparameter("beta_2"),
            "epsilon": self.epsilon,
            **extra,
        })
        return config


@registry.register("legacy")
class Adam(_AdamBase):
    """Adam, optionally AMSGrad (tf.keras legacy numerics: hyperparameters are float32, ``1 - beta`` is computed
    in the variable dtype).

    ``m += (g - m) * (1 - b1)``; ``v += (g*g - v) * (1 - b2)``; AMSGrad: ``v_hat = max(v_hat, v)``;
    ``w -= (m * alpha) / (sqrt(v or v_hat) + epsilon)`` with ``alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)``.
    ``epsilon`` 0 or None means 1e-7. Slots: ``m`` for every variable, then ``v``, then ``vhat`` (AMSGrad).

    Sparse gradients (duplicates summed): ``m`` and ``v`` decay on every row, the touched rows get the gradient
    terms, and ``w`` moves on every row (``w -= (lr * (sqrt(1 - b2^t) / (1 - b1^t))) * m / (sqrt(v) + eps)``).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, -1.0]), name="w")
        >>> opt = slotopt.legacy.Adam(learning_rate=0.1)
        >>> _ = opt.apply_gradients([(torch.tensor([0.5, -0.5]), w)])
        >>> [round(x, 4) for x in w.tolist()], [v.path for v in opt.weights]
        ([0.9, -0.9], ['Adam/iter', 'Adam/w/m', 'Adam/w/v'])
    """

    _capture_rules = ("adam",)

    def _capture_terms(self, rule, dtype, t, lr):
        """A capturable step's alpha on the device: the dense update's ``lr_t * sqrt(1 - b2p) / (1 - b1p)``."""
        if rule != "adam":
            return super()._capture_terms(rule, dtype, t, lr)
        beta_1, beta_2 = (float(self._get_hyper(name, dtype)) for name in ("beta_1", "beta_2"))
        return {"alpha": R.adam_alpha(lr, beta_1, beta_2, t)}

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    def __init__(self, learning_rate: Hyperparameter = 0.001, beta_1: Hyperparameter = 0.9,
                 beta_2: Hyperparameter = 0.999, epsilon: Optional[float] = 1e-7, amsgrad: bool = False,
                 name: Optional[str] = "Adam", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_adam_hypers(learning_rate, beta_1, beta_2, epsilon, kwargs)
        self.amsgrad = amsgrad

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        for var in var_list:
            self.add_slot(var, "m")
        for var in var_list:
            self.add_slot(var, "v")
        if self.amsgrad:
            for var in var_list:
                self.add_slot(var, "vhat")

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        coefficients = apply_state[(var_device, var_dtype)]
        local_step, beta_1, beta_2 = self._betas(var_dtype)
        beta_1_power = numerics.libm.pow(beta_1, local_step)
        beta_2_power = numerics.libm.pow(beta_2, local_step)
        coefficients.update(
            lr=coefficients["lr_t"] * (numerics.sqrt(1 - beta_2_power) / (1 - beta_1_power)),
            epsilon=literal_scalar(self.epsilon, var_dtype),
            beta_1_t=beta_1, beta_1_power=beta_1_power, one_minus_beta_1_t=1 - beta_1,
            beta_2_t=beta_2, beta_2_power=beta_2_power, one_minus_beta_2_t=1 - beta_2,
        )

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        c = coefficients
        alpha = float(c["lr_t"] * numerics.sqrt(1 - c["beta_2_power"]) / (1 - c["beta_1_power"]))
        omb1, omb2, eps = floats(c, "one_minus_beta_1_t", "one_minus_beta_2_t", "epsilon")
        slots = self._slot_lists(("m", "v", "vhat") if self.amsgrad else ("m", "v"), positions)
        kernels.adam(params, grads, slots["m"], slots["v"], slots.get("vhat"), alpha=alpha,
                     one_minus_beta_1=omb1, one_minus_beta_2=omb2, epsilon=eps)

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        c = self._coefficients(var, apply_state)
        lr, beta_1, beta_2, omb1, omb2, eps = floats(c, "lr", "beta_1_t", "beta_2_t", "one_minus_beta_1_t",
                                                     "one_minus_beta_2_t", "epsilon")
        kernels.sparse_apply_adam([var], [indices], [grad], [self.get_slot(var, "m")], [self.get_slot(var, "v")],
                                  alpha=lr, beta_1=beta_1, beta_2=beta_2, one_minus_beta_1=omb1,
                                  one_minus_beta_2=omb2, epsilon=eps,
                                  v_hat=[self.get_slot(var, "vhat")] if self.amsgrad else None)

    def set_weights(self, weights) -> None:
        """Also loads the weights of an AMSGrad Adam (with ``vhat``) into a plain Adam, dropping ``vhat``."""
        if isinstance(weights, (list, tuple)):
            num_vars = int((len(self._weights) - 1) / 2)
            if len(weights) == 3 * num_vars + 1:
                weights = list(weights)[: len(self._weights)]
        super().set_weights(weights)

    def get_config(self) -> dict[str, Any]:
        return self._config(amsgrad=self.amsgrad)


@registry.register("legacy")
class Adamax(_AdamBase):
    """Adamax, Adam with the infinity norm (tf.keras legacy numerics).

    ``m += (g - m) * (1 - b1)``; ``v = max(b2 * v, |g|)``; ``w -= (lr / (1 - b1^t)) * (m / (v + epsilon))``.
    Slots: ``m`` for every variable, then ``v``. Sparse gradients update the touched rows only (lazily):
    ``m <- m * b1 + g * (1 - b1)``, ``v <- max(v * b2, |g|)``, ``w += (-lr / (1 - b1^t)) * (m / (v + eps))``.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.legacy.Adamax(learning_rate=0.5)
        >>> _ = opt.apply_gradients([(torch.tensor([2.0]), w)])
        >>> round(w.item(), 4)
        0.5
    """

    _capture_rules = ("adamax",)

    def _capture_terms(self, rule, dtype, t, lr):
        """A capturable step's scaled rate on the device: the dense update's ``lr_t / (1 - beta_1**t)``."""
        if rule != "adamax":
            return super()._capture_terms(rule, dtype, t, lr)
        beta_1 = R.const(float(self._get_hyper("beta_1", dtype)), dtype)
        return {"lr": R.const(0.0, dtype), "scaled_lr": lr / (1 - R.pow(beta_1, t))}

    _hyperparameter_ranges = {"beta_1": checks.UNIT_OPEN}  # beta_2 = 1 keeps the running maximum

    def __init__(self, learning_rate: Hyperparameter = 0.001, beta_1: Hyperparameter = 0.9,
                 beta_2: Hyperparameter = 0.999, epsilon: Optional[float] = 1e-7, name: Optional[str] = "Adamax",
                 **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self._set_adam_hypers(learning_rate, beta_1, beta_2, epsilon, kwargs)

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        for var in var_list:
            self.add_slot(var, "m")
        for var in var_list:
            self.add_slot(var, "v")

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        super()._prepare_local(var_device, var_dtype, apply_state)
        coefficients = apply_state[(var_device, var_dtype)]
        local_step, beta_1, beta_2 = self._betas(var_dtype)
        beta_1_power = numerics.libm.pow(beta_1, local_step)
        coefficients.update(
            neg_scaled_lr=-coefficients["lr_t"] / (1 - beta_1_power),
            epsilon=literal_scalar(self.epsilon, var_dtype),
            beta_1_t=beta_1, beta_1_power=beta_1_power, one_minus_beta_1_t=1 - beta_1, beta_2_t=beta_2,
        )

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        c = coefficients
        scaled_lr = float(c["lr_t"] / (1 - c["beta_1_power"]))
        omb1, beta_2, eps = floats(c, "one_minus_beta_1_t", "beta_2_t", "epsilon")
        slots = self._slot_lists(("m", "v"), positions)
        kernels.adamax(params, grads, slots["m"], slots["v"], lr=0.0, one_minus_beta_1=omb1, beta_2=beta_2,
                       epsilon=eps, one_minus_beta_1_power=1.0, scaled_lr=scaled_lr)

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        c = self._coefficients(var, apply_state)
        neg_scaled_lr, beta_1, omb1, beta_2, eps = floats(c, "neg_scaled_lr", "beta_1_t", "one_minus_beta_1_t",
                                                          "beta_2_t", "epsilon")
        self._lazy_rows(var, grad, indices, [self.get_slot(var, "m"), self.get_slot(var, "v")],
                        lambda p, g, s: kernels.adamax_rows(p, g, [s[0]], [s[1]], neg_scaled_lr=neg_scaled_lr,
                                                            beta_1=beta_1, one_minus_beta_1=omb1, beta_2=beta_2,
                                                            epsilon=eps))

    def get_config(self) -> dict[str, Any]:
        return self._config()


@registry.register("legacy")
class Nadam(_AdamBase):
    """Nadam, Adam with Nesterov momentum, with tf.keras legacy's momentum schedule.

    ``mu_t = b1 * (1 - 0.5 * 0.96^(schedule_decay * t))`` (``schedule_decay`` 0.004, stored as ``decay``; the
    learning rate itself is never decayed, and schedules are not accepted). The scalar weight
    ``momentum_cache`` holds ``P_t = mu_1 * ... * mu_t``. Per step:
    ``m = b1 * m + (1 - b1) * g``; ``v = b2 * v + (1 - b2) * g*g``;
    ``m_bar = (1 - mu_t) * g / (1 - P_t) + mu_{t+1} * m / (1 - P_t * mu_{t+1})``;
    ``w -= (lr * m_bar) / (sqrt(v / (1 - b2^t)) + epsilon)``.
    Weights: ``iter``, ``momentum_cache``, ``m`` for every variable, then ``v``. Sparse gradients: the moments
    decay on every row, ``w`` moves on the touched rows only.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([10.0]), name="w")
        >>> opt = slotopt.legacy.Nadam(learning_rate=0.2)
        >>> _ = opt.minimize(lambda: (w ** 2).sum() / 2.0, [w])
        >>> f"{w.item():.1f}", [v.path for v in opt.weights][:2]
        ('9.8', ['Nadam/iter', 'Nadam/momentum_cache'])
    """

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)

    def __init__(self, learning_rate: Hyperparameter = 0.001, beta_1: Hyperparameter = 0.9,
                 beta_2: Hyperparameter = 0.999, epsilon: Optional[float] = 1e-7, name: Optional[str] = "Nadam",
                 **kwargs: Any) -> None:
        kwargs["decay"] = kwargs.pop("schedule_decay", 0.004)
        learning_rate = kwargs.get("lr", learning_rate)
        self._reject_schedule(learning_rate)
        super().__init__(name, **kwargs)
        self._set_adam_hypers(learning_rate, beta_1, beta_2, epsilon, kwargs)
        self._m_cache: Optional[torch.Tensor] = None
        self._m_cache_read: Optional[torch.Tensor] = None

    @staticmethod
    def _reject_schedule(learning_rate: Any) -> None:
        if isinstance(learning_rate, schedules_module.LearningRateSchedule):
            raise ValueError(
                "The Nadam optimizer does not support tf.keras.optimizers.LearningRateSchedules as the learning rate."
            )

    def _set_hyper(self, name: str, value: Any) -> None:
        if name == "learning_rate":
            self._reject_schedule(value)
        super()._set_hyper(name, value)

    def _create_slots(self, var_list: list[torch.Tensor]) -> None:
        if self._m_cache is None and var_list:
            self._m_cache = self.add_weight("momentum_cache", shape=[], dtype=var_list[0].dtype,
                                            initializer="ones", trainable=False)
            self._weights.append(self._m_cache)
        for var in var_list:
            self.add_slot(var, "m")
        for var in var_list:
            self.add_slot(var, "v")

    def _prepare(self, var_list):
        self._m_cache_read = self._m_cache.detach().clone()
        return super()._prepare(var_list)

    def _prepare_local(self, var_device: torch.device, var_dtype: torch.dtype, apply_state: ApplyState) -> None:
        lr_t = self._get_hyper("learning_rate", var_dtype)
        local_step, beta_1, beta_2 = self._betas(var_dtype)
        next_step = step_scalar(self.iterations.detach() + 2, var_dtype)
        decay_base = as_scalar(0.96, var_dtype)
        psi = self._initial_decay
        m_t = beta_1 * (1.0 - 0.5 * numerics.libm.pow(decay_base, psi * local_step))
        m_t_1 = beta_1 * (1.0 - 0.5 * numerics.libm.pow(decay_base, psi * next_step))
        cache = self._m_cache_read if self._m_cache_read is not None else self._m_cache.detach()
        m_schedule_new = numerics.flush_subnormal(cache.to(var_dtype) * m_t)  # TensorFlow flushes to zero
        if var_dtype == self._m_cache.dtype:
            with torch.no_grad():
                self._m_cache.copy_(m_schedule_new)
        m_schedule_next = numerics.flush_subnormal(m_schedule_new * m_t_1)
        apply_state[(var_device, var_dtype)] = dict(
            lr_t=lr_t, neg_lr_t=-lr_t, epsilon=literal_scalar(self.epsilon, var_dtype),
            beta_1_t=beta_1, beta_2_t=beta_2, m_t=m_t, m_t_1=m_t_1, one_minus_beta_1_t=1 - beta_1,
            one_minus_beta_2_t=1 - beta_2, one_minus_m_t=1.0 - m_t, one_minus_m_schedule_new=1.0 - m_schedule_new,
            one_minus_m_schedule_next=1.0 - m_schedule_next,
            v_t_prime_denominator=1.0 - numerics.libm.pow(beta_2, local_step),
        )

    def _kernel_constants(self, c: dict[str, Any]) -> dict[str, float]:
        names = dict(beta_1="beta_1_t", beta_2="beta_2_t", one_minus_beta_1="one_minus_beta_1_t",
                     one_minus_beta_2="one_minus_beta_2_t", one_minus_mu="one_minus_m_t", mu_next="m_t_1",
                     one_minus_product="one_minus_m_schedule_new", one_minus_product_next="one_minus_m_schedule_next",
                     one_minus_beta_2_power="v_t_prime_denominator", epsilon="epsilon", lr="lr_t")
        return {arg: float(c[key]) for arg, key in names.items()}

    def _apply_dense_group(self, params, grads, positions, coefficients) -> None:
        slots = self._slot_lists(("m", "v"), positions)
        kernels.nadam_cached(params, grads, slots["m"], slots["v"], **self._kernel_constants(coefficients))

    @grouped_dense
    def _resource_apply_dense(self, grad, var, apply_state=None):
        self._apply_dense_group([var], [grad], [self._position(var)], self._coefficients(var, apply_state))

    def _resource_apply_sparse(self, grad, var, indices, apply_state=None):
        constants = self._kernel_constants(self._coefficients(var, apply_state))
        kernels.sparse_nadam_cached([var], [indices], [grad], [self.get_slot(var, "m")], [self.get_slot(var, "v")],
                                    **constants)

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Optional[dict[str, Any]] = None) -> Nadam:
        """The config's ``decay`` is the ``schedule_decay`` it was made with (the constructor would otherwise
        replace it with 0.004)."""
        config = dict(config)
        if "decay" in config and "schedule_decay" not in config:
            config["schedule_decay"] = config.pop("decay")
        return super().from_config(config, custom_objects)

    def get_config(self) -> dict[str, Any]:
        return self._config()
