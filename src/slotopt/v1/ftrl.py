"""TF1 ``FtrlOptimizer``."""

from __future__ import annotations

from typing import Any, Optional

import torch

from ..engine import constants as K
from ..engine import registry
from ..kernels import ftrl as kernels
from .optimizer import BuiltinOptimizer, cast


@registry.register("v1")
class FtrlOptimizer(BuiltinOptimizer):
    """FTRL-Proximal (TF ``ApplyFtrl``, or ``ApplyFtrlV2`` when ``l2_shrinkage_regularization_strength > 0``).

    With ``P(x) = sqrt(x)`` for ``learning_rate_power == -0.5`` (else ``x ** -p``), ``n`` = ``"accum"`` and
    ``z`` = ``"linear"``: ``g' = g + (2 * l2_shrinkage) * w``; ``n' = n + g*g``;
    ``z <- z + (g' - ((P(n') - P(n)) / lr) * w)``; ``w <- (clip(z, -l1, l1) - z) / (P(n') / lr + 2 * l2a)``
    (0 where ``|z| <= l1``); ``n <- n'``. ``l2a = l2 + beta / (2 * max(lr, 1e-36))`` is computed in the dtype of
    the learning-rate tensor (float32 for a Python float) before the cast. Sparse gradients update the touched
    rows; for rows of one element ``z' = (z + g') - sigma * w``. ``accum`` starts at
    ``initial_accumulator_value``. Hyperparameters are numbers or scalar tensors (no callables); sparse
    gradients need ``lr > 0`` (``InvalidArgumentError``). ``accum_name``/``linear_name`` only rename the slot
    variables; ``get_slot`` keys stay ``"accum"`` and ``"linear"``.

    With ``learning_rate_power != -0.5`` the powers are TensorFlow's ``pow`` (``slotopt.numerics.pow``: Eigen's packet
    form on each variable's whole packets, the C library's on the rest).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([0.0]), name="w")
        >>> opt = slotopt.v1.FtrlOptimizer(0.5, initial_accumulator_value=1.0)
        >>> opt.apply_gradients([(torch.tensor([-1.0]), w)])
        >>> [round(x, 6) for x in w.tolist()], opt.get_slot(w, "accum").tolist()
        ([0.353553], [2.0])
    """

    _callable_hypers = False
    _kernel_slots = ("accum", "linear")

    def __init__(self, learning_rate: Any, learning_rate_power: Any = -0.5, initial_accumulator_value: Any = 0.1,
                 l1_regularization_strength: Any = 0.0, l2_regularization_strength: Any = 0.0,
                 use_locking: bool = False, name: str = "Ftrl", accum_name: Optional[str] = None,
                 linear_name: Optional[str] = None, l2_shrinkage_regularization_strength: Any = 0.0,
                 beta: Any = None) -> None:
        beta = 0.0 if beta is None else beta
        super().__init__(use_locking, name, {
            "learning_rate": learning_rate, "learning_rate_power": learning_rate_power,
            "l1": l1_regularization_strength, "l2": l2_regularization_strength,
            "l2_shrinkage": l2_shrinkage_regularization_strength, "beta": beta})
        for value, text in (
                (initial_accumulator_value < 0.0, f"initial_accumulator_value {float(initial_accumulator_value):f} "
                                                  "needs to be positive or zero"),
                (learning_rate_power > 0.0, f"learning_rate_power {float(learning_rate_power):f} needs to be "
                                            "negative or zero"),
                (l1_regularization_strength < 0.0, f"l1_regularization_strength "
                                                   f"{float(l1_regularization_strength):f} needs to be positive or zero"),
                (l2_regularization_strength < 0.0, f"l2_regularization_strength "
                                                   f"{float(l2_regularization_strength):f} needs to be positive or zero"),
                (l2_shrinkage_regularization_strength < 0.0,
                 f"l2_shrinkage_regularization_strength {float(l2_shrinkage_regularization_strength):f} needs to "
                 "be positive or zero")):
            if value:
                raise ValueError(text)
        self._learning_rate = learning_rate
        self._learning_rate_power = learning_rate_power
        self._initial_accumulator_value = initial_accumulator_value
        self._l1_regularization_strength = l1_regularization_strength
        self._l2_regularization_strength = l2_regularization_strength
        self._l2_shrinkage_regularization_strength = l2_shrinkage_regularization_strength
        self._beta = beta
        self._accum_name = accum_name
        self._linear_name = linear_name

    def _create_slots(self, var_list) -> None:
        for v in var_list:
            self._get_or_make_slot_with_initializer(v, self._initial_accumulator_value, v.shape, v.dtype, "accum",
                                                    self._accum_name or self._name)
            self._zeros_slot(v, "linear", self._linear_name or self._name)

    def _prepare(self) -> None:
        super()._prepare()
        lr = self._prepared["learning_rate"]
        dtype = lr.dtype if lr.is_floating_point() else torch.float32

        def converted(value: Any) -> torch.Tensor:
            if isinstance(value, torch.Tensor):
                return value.detach().to("cpu", dtype)
            return torch.tensor(float(value), dtype=dtype)

        maximum = torch.maximum(converted(self._learning_rate), torch.tensor(1e-36, dtype=dtype))
        self._prepared["adjusted_l2"] = converted(self._l2_regularization_strength) + converted(self._beta) / (
            2.0 * maximum)

    def _check_prepared(self, pairs) -> None:
        sparse = [(g, v) for g, v in pairs if not isinstance(g, torch.Tensor)]
        if not sparse:
            return
        checks = [("learning_rate", "positive", "lr is not a positive scalar (or zero if multiply_linear_by_lr is "
                                                "set): "),
                  ("l1", "non-negative", "l1 regularization strength is not a non-negative scalar: "),
                  ("adjusted_l2", "non-negative", "l2 regularization strength is not a non-negative scalar: "),
                  ("learning_rate_power", "non-positive", "lr_power is not a non-positive scalar: ")]
        if self._l2_shrinkage_regularization_strength > 0.0:
            checks.append(("l2_shrinkage", "non-negative",
                           "l2 shrinkage regularization strength is not a non-negative scalar: "))
        self._check_positive(sparse, checks)

    def _update(self, params, grads, slots, scalar_rows: bool, rows: bool = False) -> None:
        dtype = params[0].dtype
        two = lambda x: 2 * x  # noqa: E731
        shrinkage = 0.0
        if self._l2_shrinkage_regularization_strength > 0.0:
            shrinkage = K.evaluate(two, dtype, self._t("l2_shrinkage", dtype))
        power = -self._t("learning_rate_power", dtype)
        kernels.ftrl(params, grads, slots["accum"], slots["linear"], lr=self._t("learning_rate", dtype),
                     power=power, root=power == 0.5, l1=self._t("l1", dtype),
                     two_l2=K.evaluate(two, dtype, cast(self._prepared["adjusted_l2"], dtype)), shrinkage=shrinkage,
                     scalar_rows=scalar_rows, rows=rows)

    def _dense_update(self, params, grads, slots) -> None:
        self._update(params, grads, slots, scalar_rows=False)

    def _sparse_update(self, params, grads, slots, scalar_rows: bool) -> None:
        self._update(params, grads, slots, scalar_rows=scalar_rows, rows=True)


__all__ = ["FtrlOptimizer"]
