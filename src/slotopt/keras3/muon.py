"""Keras 3.15 Muon: orthogonalised momentum for matrices, AdamW for every other variable."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch

from ..engine import checks, registry, shards, stages
from ..engine import constants as K
from ..engine.core import Pair
from ..engine.pattern import compile_pattern
from ..engine.routing import variable_path
from ..kernels import adam as adam_kernels
from ..kernels import muon as kernels
from ..kernels.weight_decay import decoupled_weight_decay
from .adam import adam_alpha
from .optimizer import LearningRate, Optimizer


def _number(name: str, value: Any, *, optional: bool = False, minimum: Optional[float] = None) -> None:
    if not (optional and value is None):
        checks.check_number(name, value, checks.Range(minimum) if minimum is not None else checks.ANY)


def apply_weight_decay(self: Any, pairs: list[Pair], call: Any) -> None:
    """Muon's weight decay stage: ``adam_weight_decay`` on the AdamW path, ``weight_decay`` on the Muon path."""
    decayed: dict[tuple[torch.dtype, torch.device, float], list[torch.Tensor]] = {}
    for _, var in pairs:
        if not self._use_weight_decay(var):
            continue
        adamw = self._get_slot("velocity", self._position(var)) is not None
        value = self.adam_weight_decay if adamw else self.weight_decay
        if value is not None:
            decayed.setdefault((var.dtype, var.device, float(value)), []).append(var)
    if not decayed:
        return
    learning_rate = self.learning_rate
    for (dtype, _, value), params in decayed.items():
        decoupled_weight_decay(params, weight_decay=K.cast(value, dtype), lr=self._lr_for(learning_rate, dtype))


@registry.register("keras3", files=False)
class Muon(Optimizer):
    """Muon (Keras 3.15): momentum orthogonalised by Newton–Schulz for 2-D variables, AdamW for the others.

    A variable takes the **AdamW path** when it is not 2-D, when ``exclude_embeddings`` is set and its path
    contains ``"embedding"`` (any case), or when any ``exclude_layers`` regex is found in its path (``re.search``);
    every other variable takes the **Muon path**. A variable's path is its ``Variable.path`` (its name), or for a
    plain tensor the name it was registered under (e.g. ``"0.weight"`` from ``named_parameters``).

    * Muon path: ``m += g + m * (momentum - 1)``; ``u = g + momentum * m`` (``nesterov``) or ``m``;
      ``o`` = ``ns_steps`` quintic Newton–Schulz iterations on ``u`` with coefficients ``muon_a/b/c``;
      ``w -= ((lr * o) * sqrt(max(rows, cols))) * rms_rate`` (``w -= lr * o`` when ``rms_rate`` is None).
    * AdamW path: the Adam kernel with ``adam_beta_1``, ``adam_beta_2``, ``epsilon`` and the learning rate
      ``lr * adam_lr_ratio``.
    * Weight decay, before either step: ``w -= w * wd * lr`` with the full learning rate and
      ``wd = adam_weight_decay`` on the AdamW path, ``weight_decay`` on the Muon path (``None`` skips it);
      ``exclude_from_weight_decay`` applies.

    Slots, per variable in build order: ``momentum`` for every variable, then ``velocity`` for AdamW-path
    variables. Sparse gradients are densified (Newton–Schulz needs whole matrices). ``sqrt(max(rows, cols))`` is
    a float32 square root, as in Keras (``ops.sqrt`` of an integer), then cast to the variable's dtype (float64
    variables: Keras's JAX/torch backends promote it; its TensorFlow backend refuses the mixed product). The
    matrix products of
    Newton–Schulz follow the BLAS library's summation order: results agree with Keras to ~1e-6 relative in
    float32, not bit for bit.

    Example:
        >>> import torch, slotopt
        >>> kernel = slotopt.Variable(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]), name="kernel")
        >>> bias = slotopt.Variable(torch.zeros(2), name="bias")
        >>> opt = slotopt.Muon(learning_rate=0.01)
        >>> _ = opt.apply_gradients([(torch.ones(3, 2), kernel), (torch.ones(2), bias)])
        >>> [v.path for v in opt.variables]
        ['muon/iteration', 'muon/learning_rate', 'muon/kernel_momentum', 'muon/bias_momentum', 'muon/bias_velocity']
        >>> [round(x, 5) for x in bias.tolist()]
        [-0.01, -0.01]
    """

    _kernel_slots = ("momentum",)
    _sums_whole_tensors = True  # (engine/summation.refuse_unordered: not on a converted layout)
    _elementwise_update = False  # whole-matrix products (gathered from FSDP2 shards)

    _stages = Optimizer._stages.replace(stages.apply_weight_decay, apply_weight_decay)  # its own decay stage

    def __init__(self, learning_rate: LearningRate = 0.001, adam_beta_1: float = 0.9, adam_beta_2: float = 0.999,
                 adam_weight_decay: Optional[float] = 0.004, epsilon: float = 1e-7,
                 weight_decay: Optional[float] = 0.004, clipnorm: Any = None, clipvalue: Any = None,
                 global_clipnorm: Any = None, use_ema: bool = False, ema_momentum: float = 0.99,
                 ema_overwrite_frequency: Any = None, loss_scale_factor: Any = None,
                 gradient_accumulation_steps: Any = None, name: Optional[str] = "muon",
                 exclude_layers: Optional[Sequence[str]] = None, exclude_embeddings: bool = True,
                 muon_a: float = 3.4445, muon_b: float = -4.7750, muon_c: float = 2.0315,
                 adam_lr_ratio: float = 1, momentum: float = 0.95, ns_steps: int = 5, nesterov: bool = True,
                 rms_rate: Optional[float] = 0.2, **kwargs: Any) -> None:
        checks.check_values({"adam_beta_1": adam_beta_1, "adam_beta_2": adam_beta_2, "epsilon": epsilon,
                             "momentum": momentum, "nesterov": nesterov, "exclude_embeddings": exclude_embeddings})
        _number("adam_weight_decay", adam_weight_decay, optional=True, minimum=0)
        _number("adam_lr_ratio", adam_lr_ratio, minimum=0)
        _number("rms_rate", rms_rate, optional=True, minimum=0)
        for key, value in (("muon_a", muon_a), ("muon_b", muon_b), ("muon_c", muon_c)):
            _number(key, value)
        if isinstance(ns_steps, bool) or not isinstance(ns_steps, int) or ns_steps < 0:
            raise ValueError(f"Argument `ns_steps` must be an integer >= 0. Received: ns_steps={ns_steps!r}")
        layers = [] if exclude_layers is None else exclude_layers
        if isinstance(layers, str) or not all(isinstance(p, str) for p in layers):
            raise ValueError(
                f"Argument `exclude_layers` must be a list of strings (regular expressions). "
                f"Received: exclude_layers={exclude_layers!r}")
        for pattern in layers:
            try:
                re.compile(pattern)
            except re.error as err:
                raise ValueError(
                    f"Argument `exclude_layers` holds an invalid regular expression {pattern!r}: {err}") from None
            compile_pattern(pattern)  # refuses what cannot be matched without backtracking
        super().__init__(learning_rate, weight_decay, clipnorm, clipvalue, global_clipnorm, use_ema, ema_momentum,
                         ema_overwrite_frequency, loss_scale_factor, gradient_accumulation_steps, name, **kwargs)
        self.adam_beta_1 = adam_beta_1
        self.adam_beta_2 = adam_beta_2
        self.adam_weight_decay = adam_weight_decay
        self.epsilon = epsilon
        self.exclude_layers = list(layers)
        self.exclude_embeddings = exclude_embeddings
        self.muon_a = muon_a
        self.muon_b = muon_b
        self.muon_c = muon_c
        self.adam_lr_ratio = adam_lr_ratio
        self.momentum = momentum
        self.ns_steps = ns_steps
        self.nesterov = nesterov
        self.rms_rate = rms_rate

    def _should_use_adamw(self, variable: torch.Tensor) -> bool:
        """Keras's rule (see the class docstring): True for the AdamW path."""
        if variable.dim() != 2:
            return True
        path = variable_path(variable, self._name_of(variable))
        if self.exclude_embeddings and "embedding" in path.lower():
            return True
        # Matched without backtracking (engine/pattern.py): a pattern from a config cannot stall a step.
        return any(compile_pattern(pattern).search(path) for pattern in self.exclude_layers)

    def build(self, variables: Any) -> None:
        if self.built:
            return
        super().build(variables)
        self.momentums: list[Any] = []
        self.adam_velocities: list[Any] = []
        for var in self._trainable_variables:
            self.momentums.append(self.add_variable_from_reference(var, "momentum"))
            adamw = self._should_use_adamw(var)
            self.adam_velocities.append(self.add_variable_from_reference(var, "velocity") if adamw else None)

    def _update_group(self, params, grads, slots, learning_rate) -> None:
        dtype = params[0].dtype
        positions = [self._position(p) for p in params]
        velocities = [self._get_slot("velocity", p) for p in positions]
        adamw = [i for i, v in enumerate(velocities) if v is not None]
        matrices = [i for i, v in enumerate(velocities) if v is None]
        momentums = slots["momentum"]
        if adamw:
            # ``learning_rate * adam_lr_ratio`` is a float32 product, then cast to the variable's dtype.
            lr = float(np.float32(self._lr_for(learning_rate, torch.float32)) * np.float32(self.adam_lr_ratio))
            alpha = adam_alpha(K.cast(lr, dtype), K.cast(self.adam_beta_1, dtype), K.cast(self.adam_beta_2, dtype),
                               self._step_count(), dtype)
            adam_kernels.adam([params[i] for i in adamw], [grads[i] for i in adamw], [momentums[i] for i in adamw],
                              [velocities[i] for i in adamw], None, alpha=alpha,
                              one_minus_beta_1=K.d_form(self.adam_beta_1, dtype),
                              one_minus_beta_2=K.d_form(self.adam_beta_2, dtype),
                              epsilon=K.literal(self.epsilon, dtype))
        if matrices:
            chosen = [params[i] for i in matrices]
            layouts = shards.shard_layouts(self, chosen)  # FSDP2: the shapes are the whole matrices'
            shapes = [p.shape if layouts is None or layouts[k] is None else layouts[k].global_shape
                      for k, p in enumerate(chosen)]
            # ``sqrt(max(rows, cols))`` is a float32 square root in Keras (ops.sqrt of an integer).
            scales = [K.cast(float(np.sqrt(np.float32(max(shape[0], shape[1])))), dtype) for shape in shapes]
            kernels.muon(chosen, [grads[i] for i in matrices], [momentums[i] for i in matrices],
                         lr=self._lr_for(learning_rate, dtype), momentum=K.literal(self.momentum, dtype),
                         momentum_minus_one=K.literal(self.momentum - 1, dtype), nesterov=self.nesterov,
                         steps=self.ns_steps, a=K.literal(self.muon_a, dtype), b=K.literal(self.muon_b, dtype),
                         c=K.literal(self.muon_c, dtype), norm_epsilon=K.literal(1e-7, dtype), rms_scales=scales,
                         rms_rate=None if self.rms_rate is None else K.literal(self.rms_rate, dtype),
                         layouts=layouts)

    def get_config(self) -> dict[str, Any]:
        return {
            **super().get_config(),
            "adam_beta_1": self.adam_beta_1,
            "adam_beta_2": self.adam_beta_2,
            "epsilon": self.epsilon,
            "exclude_layers": list(self.exclude_layers),
            "muon_a": self.muon_a,
            "muon_b": self.muon_b,
            "muon_c": self.muon_c,
            "adam_lr_ratio": self.adam_lr_ratio,
            "momentum": self.momentum,
            "ns_steps": self.ns_steps,
            "nesterov": self.nesterov,
            "exclude_embeddings": self.exclude_embeddings,
            "adam_weight_decay": self.adam_weight_decay,
            "rms_rate": self.rms_rate,
        }


__all__ = ["Muon"]
