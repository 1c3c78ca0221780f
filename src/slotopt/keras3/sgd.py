from __future__ import annotations

from typing import Any

from ..engine import checks, registry
from ..engine import constants as K
from ..kernels import rows as sparse_rows
from ..kernels import sgd as kernels
from .optimizer import LearningRate, Optimizer


@registry.register("keras3")
class SGD(Optimizer):
    """Gradient descent with optional momentum and Nesterov momentum (Keras 3 numerics).

    ``m <- m * momentum - g * lr``; ``w <- w + m`` (or ``w <- w + m * momentum - g * lr`` with Nesterov).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0, 2.0]), name="w")
        >>> opt = slotopt.SGD(learning_rate=0.1, momentum=0.9)
        >>> _ = opt.apply_gradients([(torch.tensor([1.0, 1.0]), w)])
        >>> [round(x, 4) for x in w.tolist()]
        [0.9, 1.9]
    """

    _supports_complex = True  # TensorFlow trains complex64/complex128 variables with it (item 8, issue 24)
    _capture_rules = ("sgd", "keras_momentum")  # capturable: the rate its only per-step scalar
    _update_kernels = (kernels.sgd, kernels.keras_momentum)  # compiled: slices take one pass (engine/sparse_pass.py)

    _fused_weight_decay = True  # Keras 3's weight decay runs in the SGD kernels' pass

    def __init__(self, learning_rate: LearningRate = 0.01, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: Any = None, clipnorm: Any = None, clipvalue: Any = None, global_clipnorm: Any = None,
                 use_ema: bool = False, ema_momentum: float = 0.99, ema_overwrite_frequency: Any = None,
                 loss_scale_factor: Any = None, gradient_accumulation_steps: Any = None, name: Any = None,
                 **kwargs: Any) -> None:
        if not isinstance(momentum, float) or momentum < 0 or momentum > 1:
            raise ValueError(f"`momentum` must be a float between [0, 1]. Received: momentum={momentum}")
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.momentum = momentum
        self.nesterov = nesterov
        self._kernel_slots = ("momentum",) if momentum != 0 else ()
        self._sparse_layout = "rows" if momentum == 0 else "blocks"

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "momentum" and "_kernel_slots" in self.__dict__:
            self._check_momentum_kind(value)
        super().__setattr__(name, value)

    def _check_momentum_kind(self, value: Any) -> None:
        """Whether there is a momentum slot was decided by the constructor (Keras builds one only then): a new
        value set as an attribute may not cross between zero and non-zero. (A torch-style write into
        ``param_groups``, a scheduler cycling momentum, creates the slot instead: ``_hyperparameters_changed``.)"""
        try:
            number = checks.as_number("momentum", value)
        except TypeError:
            return  # not a number: the base class refuses it with its own message
        if (number != 0) != bool(self._kernel_slots):
            raise ValueError(
                f"Argument `momentum` decides whether SGD keeps a momentum slot, so it cannot change between zero "
                f"and non-zero after construction (this optimizer was created with momentum={self.momentum!r}). "
                f"Received: momentum={value!r}; create a new SGD instead.")

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        if self.momentum != 0 or any(g.get("momentum") for g in self.param_groups):  # (or a group's own)
            self.momentums = self.add_optimizer_variables(self._trainable_variables, "momentum")
            self._kernel_slots, self._sparse_layout = ("momentum",), "blocks"

    def _hyperparameters_changed(self) -> None:
        # A momentum written into a parameter group (a torch scheduler cycling it) after a build without
        # momentum: the slot is created at zeros, as Keras creates it when built with momentum (appended: it is
        # SGD's only slot, so Keras's variable order holds).
        if not self.built or "momentum" in self._slots or not any(g.get("momentum") for g in self.param_groups):
            return
        self.momentums = self.add_optimizer_variables(self._trainable_variables, "momentum")
        self._kernel_slots = ("momentum",)
        self._sparse_layout = "blocks"
        self._plan = None

    def _update_group(self, params, grads, slots, learning_rate, **terms) -> None:
        dtype = params[0].dtype
        lr = self._lr_for(learning_rate, dtype)
        decay = {"weight_decay": terms.get("weight_decay"), "weight_decay_lr": terms.get("weight_decay_lr", 0.0)}
        if self.momentum != 0:
            kernels.keras_momentum(params, grads, slots["momentum"], terms.get("steps"), lr=lr,
                                   momentum=K.cast(self.momentum, dtype), nesterov=self.nesterov, **decay)
        else:
            kernels.sgd(params, grads, lr=lr, **decay)

    def _update_slices(self, param, grad, slots, learning_rate) -> None:
        if self.momentum == 0:  # w[i_j] -= g_j * lr, one slice at a time: only the slices' rows change
            kernels.scatter_sgd(param, grad.indices, grad.values, lr=self._lr_for(learning_rate, param.dtype))
        else:  # the kernel reads only Σ(g * lr): no densified gradient needed
            terms = self._slice_terms(param, grad, learning_rate)
            self._update_group([param], terms["steps"], slots, learning_rate, **terms)

    def _slice_terms(self, param, grad, learning_rate):
        lr = self._lr_for(learning_rate, param.dtype)
        return {"steps": [sparse_rows.summed(grad, param, grad.values * lr)]}

    def get_config(self) -> dict[str, Any]:
        return {**super().get_config(), "momentum": self.momentum, "nesterov": self.nesterov}


__all__ = ["SGD"]
