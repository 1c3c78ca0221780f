"""Dynamic loss scaling around another Keras 3 optimizer (spec §5.1)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import torch

from ..engine import limits, loss_scaling, pipeline, registry, shards
from ..engine.clipping import map_gradient_values
from ..engine.composed import WrapsInnerOptimizer
from ..engine.core import Pair
from ..engine.group_sync import check_param_groups, is_param_group_list
from ..engine.pipeline import Call, Step
from ..engine.routing import set_weights_all_or_nothing, split_weights
from ..engine.stages import overwrites_with_gradient
from ..kernels.rows import last_repeats
from ..variables import IndexedSlices, named_variables
from .optimizer import Optimizer

__all__ = ["LossScaleOptimizer"]

# Base-class arguments a LossScaleOptimizer config may carry (older Keras wrote them): accepted only with
# their default values.
_BASE_DEFAULTS: dict[str, Any] = {
    "weight_decay": None,
    "clipnorm": None,
    "global_clipnorm": None,
    "clipvalue": None,
    "use_ema": False,
    "ema_momentum": 0.99,
    "ema_overwrite_frequency": None,
    "loss_scale_factor": None,
    "gradient_accumulation_steps": None,
}


def _finite_update(self: Any, pairs: list[Pair], call: Call) -> None:
    """The inner optimizer's step on the unscaled gradients when they are all finite; then the scale moves."""
    self._apply_if_finite(pairs)


def _inner_iterations(self: Any) -> torch.Tensor:
    return self.inner_optimizer._iterations


@registry.register("keras3")
class LossScaleOptimizer(WrapsInnerOptimizer, Optimizer):
    """Dynamic loss scaling for mixed-precision training, wrapping a Keras 3 optimizer.

    The loss is multiplied by ``dynamic_scale`` before the backward pass (``scale_loss``), so small float16
    gradients do not underflow. Each step then looks at the scaled gradients:

    * all finite: the inner optimizer applies ``g / dynamic_scale``; after ``dynamic_growth_steps`` finite steps in
      a row the scale doubles (``step_counter`` counts them and is reset to 0);
    * any inf or NaN: the step is skipped (variables, inner state and inner ``iterations`` unchanged),
      ``dynamic_scale`` halves (there is no lower bound) and ``step_counter`` is reset to 0.

    ``variables`` is ``[iteration, learning_rate, step_counter, dynamic_scale]`` followed by the inner optimizer's
    variables. ``iterations`` and ``learning_rate`` are the inner optimizer's. The wrapper's own ``iteration`` is
    never incremented (as in Keras). With the PyTorch-style ``step()``, the ``.grad`` tensors must come from
    ``scale_loss(loss).backward()``; ``minimize`` scales the loss itself.

    Args:
        inner_optimizer: the Keras 3 optimizer that applies the unscaled gradients (its ``loss_scale_factor`` is
            set to None so that gradients are not unscaled twice).
        initial_scale: starting value of ``dynamic_scale`` (kept in float32).
        dynamic_growth_steps: number of consecutive finite steps after which the scale doubles.
        name: defaults to a unique name such as ``"loss_scale_optimizer"``.
        params: variables to build on right away, so that ``step()`` can apply their ``.grad``. When omitted and
            the inner optimizer is already built, the wrapper builds on the inner optimizer's variables.

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.5), initial_scale=4.0)
        >>> loss = opt.scale_loss((w * 2.0).sum())
        >>> loss.backward()
        >>> _ = opt.apply_gradients([(w.grad, w)])       # applies 8 / 4 = 2
        >>> w.tolist(), float(opt.dynamic_scale)
        ([0.0], 4.0)
        >>> _ = opt.apply_gradients([(torch.tensor([float("inf")]), w)])   # skipped, scale halves
        >>> w.tolist(), float(opt.dynamic_scale), int(opt.iterations)
        ([0.0], 2.0, 1)
    """

    _supports_complex = True  # complex variables: the optimizer(s) it wraps decide (issue 24 item 8)
    # A checked step leaves a plan of the wrapper's own, so that the next one is checked in one pass (C++ where
    # built) and its gradients checked and unscaled flat (engine/loss_scaling.py); the inner optimizer plans its
    # own steps as well.
    _plans_steps = True

    #: Its step: validation and the build come from the base class (``_prepare_pairs``); the inner optimizer's
    #: aggregator runs before the finiteness check (every process then skips or applies the same step, as
    #: tf.keras's does), then the inner optimizer's own step on the unscaled gradients when they are all finite
    #: (it overwrites, clips, decays, constrains and counts), and the scale moves.
    _stages = Step(
        pipeline.drop_missing_gradients,
        pipeline.UPDATE,
        pipeline.aggregate_across_processes,  # (the inner optimizer's aggregator)
        pipeline.FIRST_WRITE,
        _finite_update,
        pipeline.AFTER,
        result=_inner_iterations,
    )

    def __init__(
        self,
        inner_optimizer: Optimizer,
        initial_scale: float = 2.0**15,
        dynamic_growth_steps: int = 2000,
        name: Optional[str] = None,
        **kwargs: Any,
    ) -> None:
        if not kwargs.pop("dynamic", True):
            raise ValueError(
                "LossScaleOptimizer no longer supports `dynamic=False`. Instead, simply set `loss_scale_factor` "
                "directly on the `inner_optimizer`."
            )
        for arg, default in _BASE_DEFAULTS.items():
            if arg in kwargs and kwargs.pop(arg) != default:
                raise ValueError(
                    f"LossScaleOptimizer does not support `{arg}`. Instead, set `{arg}` on the `inner_optimizer`."
                )
        if kwargs:
            raise ValueError(f"LossScaleOptimizer does not support arguments: `{'`, `'.join(kwargs)}`.")
        if not isinstance(inner_optimizer, Optimizer):
            raise TypeError(
                "Argument `inner_optimizer` must be a Keras 3 slotopt optimizer (an instance of "
                f"`slotopt.Optimizer`). Received: inner_optimizer={inner_optimizer!r}"
            )
        if (
            isinstance(initial_scale, bool)
            or not isinstance(initial_scale, (int, float))
            or not (math.isfinite(initial_scale) and initial_scale > 0)
        ):
            raise ValueError(
                f"Argument `initial_scale` must be a finite number > 0. Received: initial_scale={initial_scale!r}"
            )
        if isinstance(dynamic_growth_steps, bool) or not isinstance(dynamic_growth_steps, int) or (
            dynamic_growth_steps < 1
        ):
            raise ValueError(
                "Argument `dynamic_growth_steps` must be an integer >= 1. "
                f"Received: dynamic_growth_steps={dynamic_growth_steps!r}"
            )
        super().__init__(learning_rate=0.0, name=name)
        self.inner_optimizer = inner_optimizer
        self.initial_scale = float(initial_scale)
        self.dynamic_growth_steps = dynamic_growth_steps
        self.inner_optimizer.loss_scale_factor = None
        self._share_param_groups(inner_optimizer)
        if inner_optimizer.built:
            self.build([(inner_optimizer._name_of(v), v) for v in inner_optimizer._trainable_variables])

    # ------------------------------------------------------------------------------------------ state
    def build(self, variables: Any) -> None:
        """Creates ``step_counter`` (int64) and ``dynamic_scale`` (float32), then builds the inner optimizer."""
        if self.built:
            return
        if is_param_group_list(variables):  # torch's group dicts: the inner optimizer keeps each group's values
            groups = check_param_groups(variables)
            inner: Any = [{**group, "params": named} for named, group in groups]
            variables = [pair for named, _ in groups for pair in named]
        else:
            variables = inner = named_variables(variables)
        self._step_counter = self.add_variable((), "zeros", torch.int64, name="step_counter")
        self._dynamic_scale = self.add_variable((), self.initial_scale, torch.float32, name="dynamic_scale")
        self.inner_optimizer.build(inner)
        super().build(variables)

    @property
    def _protocol_inner(self) -> Optimizer:
        return self.inner_optimizer

    def _wrapper_state(self) -> dict[str, torch.Tensor]:
        return {"step_counter": self._step_counter, "dynamic_scale": self._dynamic_scale} if self.built else {}

    @property
    def dynamic_scale(self) -> torch.Tensor:
        """The current loss scale (a float32 CPU scalar; ``initial_scale`` before the build)."""
        if not self.built:
            return torch.tensor(self.initial_scale, dtype=torch.float32)
        self._restore_pending_state()
        return self._dynamic_scale

    @property
    def step_counter(self) -> torch.Tensor:
        """Consecutive finite steps since the scale last changed (an int64 CPU scalar)."""
        if not self.built:
            return torch.zeros((), dtype=torch.int64)
        self._restore_pending_state()
        return self._step_counter

    @property
    def variables(self) -> list[Any]:
        """``[iteration, learning_rate, step_counter, dynamic_scale]`` + the inner optimizer's variables."""
        self._restore_pending_state()
        return list(self._variables) + self.inner_optimizer.variables

    @property
    def iterations(self) -> torch.Tensor:
        self._restore_pending_state()
        return self.inner_optimizer.iterations

    @iterations.setter
    def iterations(self, value: Any) -> None:
        self.inner_optimizer.iterations = value

    @property
    def learning_rate(self) -> Any:
        self._restore_pending_state()
        return self.inner_optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self.inner_optimizer.learning_rate = value

    def set_weights(self, weights: Sequence[Any]) -> None:
        """Assigns the wrapper's four variables and then the inner optimizer's, in ``variables`` order."""
        weights = list(weights)
        if not self.built:
            super().set_weights(weights)  # kept until the build
            return
        own_part, inner_part = split_weights([self.inner_optimizer], weights, self.name, leading=len(self._variables))
        set_weights_all_or_nothing([self.inner_optimizer], [inner_part], self._variables, own_part)

    # ------------------------------------------------------------------------------------------ steps
    def scale_loss(self, loss: Any) -> Any:
        """``loss * dynamic_scale`` (the scale cast to the loss dtype; ``initial_scale`` before the build)."""
        if isinstance(loss, torch.Tensor):
            return loss * self.dynamic_scale.detach().to(loss.dtype)
        return loss * float(self.dynamic_scale)

    def apply_gradients(self, grads_and_vars: Any, *, skip_gradients_aggregation: bool = False) -> torch.Tensor:
        """Applies scaled ``(gradient, variable)`` pairs and returns the inner optimizer's iteration counter."""
        super().apply_gradients(grads_and_vars, skip_gradients_aggregation=skip_gradients_aggregation)
        return self.inner_optimizer._iterations

    def minimize(self, loss: Any, var_list: Any, tape: Any = None) -> torch.Tensor:
        """Scales ``loss`` by ``dynamic_scale``, differentiates it and applies the gradients."""
        if callable(loss) and not isinstance(loss, torch.Tensor):
            scaled: Any = lambda: self.scale_loss(loss())  # noqa: E731 - evaluated after the build
        else:
            scaled = self.scale_loss(loss)
        return super().minimize(scaled, var_list, tape)

    def zero_grad(self, set_to_none: bool = True) -> None:
        super().zero_grad(set_to_none)
        self.inner_optimizer.zero_grad(set_to_none)

    def finalize_variable_values(self, var_list: Sequence[torch.Tensor]) -> None:
        self.inner_optimizer.finalize_variable_values(var_list)

    def _apply_if_finite(self, pairs: list[Pair]) -> None:
        step = loss_scaling.ordinary_step(self, pairs)
        if step is not None:  # every gradient dense, of its variable's kind: checked and unscaled flat
            inner = self.inner_optimizer
            grads = loss_scaling.finite_unscaled(step, self._dynamic_scale.detach(),
                                                 keep=loss_scaling.keeps_no_gradients(inner))
            finite = grads is not None
            if grads is not None:
                unscaled = loss_scaling.handed_on(step, grads, inner)  # (2-tuples of a tensor and a variable)
                if type(inner).apply_gradients is Optimizer.apply_gradients:
                    inner._apply_pairs(unscaled, skip_gradients_aggregation=True)  # (no check of them again)
                else:  # a subclass's own ``apply_gradients`` sees the call
                    inner.apply_gradients(unscaled, skip_gradients_aggregation=True)
            self._update_scale(finite)
            return
        # Keras's `isfinite` on slices sees only the last repeat of each row (keras3_sparse.md §3.8).
        finite = shards.all_finite(self, [last_repeats(g) if isinstance(g, IndexedSlices) else g for g, _ in pairs])
        if finite:
            scale = self._dynamic_scale.detach()
            # Keras: a variable flagged `overwrite_with_gradient` takes its gradient as it is (not unscaled).
            scaled = [i for i, (_, v) in enumerate(pairs) if not overwrites_with_gradient(v)]
            unscaled = list(pairs)
            for i, pair in zip(scaled, map_gradient_values(
                    [pairs[i] for i in scaled],
                    lambda grads: [g.to(torch.promote_types(g.dtype, torch.float32)) / scale for g in grads])):
                unscaled[i] = pair
            self.inner_optimizer.apply_gradients(unscaled, skip_gradients_aggregation=True)  # aggregated above
        self._update_scale(finite)

    def _update_scale(self, finite: bool) -> None:
        if finite:
            if int(self._step_counter) == self.dynamic_growth_steps - 1:
                self._step_counter.zero_()
                self._dynamic_scale.mul_(2.0)
            else:
                self._step_counter.add_(1)
        else:
            self._step_counter.zero_()
            self._dynamic_scale.mul_(0.5)

    # ------------------------------------------------------------------------------------------ config
    def get_config(self) -> dict[str, Any]:
        from .serialization import serialize

        return {
            "name": self.name,
            "inner_optimizer": serialize(self.inner_optimizer),
            "initial_scale": self.initial_scale,
            "dynamic_growth_steps": self.dynamic_growth_steps,
        }

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], custom_objects: Optional[Mapping[str, Any]] = None
    ) -> LossScaleOptimizer:
        limits.check_config_entries(config)  # each entry named, before any repr of it
        from .serialization import deserialize

        config = dict(config)
        if "inner_optimizer" not in config:
            raise ValueError(f"A LossScaleOptimizer config needs `inner_optimizer`. Received: config={config}")
        inner = deserialize(config.pop("inner_optimizer"), custom_objects=custom_objects)
        return cls(inner, **config)
