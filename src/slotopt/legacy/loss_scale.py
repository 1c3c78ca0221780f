"""tf.keras ``mixed_precision.LossScaleOptimizer`` for the legacy optimizers (dynamic or fixed loss scaling)."""

from __future__ import annotations

import inspect
import logging
import math
from typing import Any, Optional

import torch

from ..engine import limits, loss_scaling, pipeline, plan_cache, registry, shards, state_io
from ..engine.composed import WrapsInnerOptimizer
from ..engine.core import Pair, count_step
from ..engine.proof import validation
from ..engine.writing import transaction
from ..variables import IndexedSlices, Variable, as_indexed_slices, is_sparse
from .hyperparameters import is_number
from .optimizer import Optimizer

__all__ = ["LossScaleOptimizer"]

_logger = logging.getLogger(__name__)

_DEFAULT_INITIAL_SCALE = 2.0**15
_DEFAULT_GROWTH_STEPS = 2000
_MULTIPLIER = 2.0


@registry.register("legacy", old_names=("LossScaleOptimizerV1",), files=False)
class LossScaleOptimizer(WrapsInnerOptimizer, Optimizer):
    """Wraps a legacy optimizer with loss scaling, to keep small float16 gradients from underflowing.

    The caller multiplies the loss by ``loss_scale`` (``get_scaled_loss``) and the gradients by
    ``1 / loss_scale`` (``get_unscaled_gradients``); ``minimize`` does both. ``apply_gradients`` then, with a
    dynamic scale:

    * all gradients finite: the inner optimizer applies them; after ``dynamic_growth_steps`` such steps in a
      row the scale doubles (if the doubled scale is finite) and the counter restarts;
    * any gradient inf/NaN: nothing is applied, the scale halves (never below 1), the counter restarts, and the
      inner optimizer's ``iterations`` still advances by one.

    Hyperparameters (``learning_rate``, ``lr``, ``beta_1``...), ``iterations``, clipping attributes, slots and
    weights are the inner optimizer's. The scale and counter are not part of ``weights``.

    Args:
        inner_optimizer: a ``slotopt.legacy`` optimizer (not already wrapped).
        dynamic: adjust the scale as above (True) or keep ``initial_scale`` fixed (False).
        initial_scale: starting scale (default 2**15 when dynamic; required when not).
        dynamic_growth_steps: finite steps before the scale doubles (default 2000; only when dynamic).

    Example:
        >>> import torch, slotopt
        >>> w = slotopt.Variable(torch.tensor([1.0]), name="w")
        >>> opt = slotopt.legacy.LossScaleOptimizer(slotopt.legacy.SGD(0.5), initial_scale=4.0,
        ...                                         dynamic_growth_steps=2)
        >>> _ = opt.apply_gradients([(torch.tensor([float("inf")]), w)])
        >>> float(opt.loss_scale), int(opt.iterations), w.item()
        (2.0, 1, 1.0)
        >>> _ = opt.minimize(lambda: (w * 3.0).sum(), [w])  # gradient 3, scaled by 2 and back
        >>> float(opt.loss_scale), int(opt.iterations), w.item()
        (2.0, 2, -0.5)
    """

    _own_argument_checks = frozenset({"dynamic"})  # tf.keras's own message: The "dynamic" argument must be...
    _supports_complex = True  # complex variables: the optimizer(s) it wraps decide (issue 24 item 8)

    def __init__(self, inner_optimizer: Optimizer, dynamic: bool = True, initial_scale: Optional[float] = None,
                 dynamic_growth_steps: Optional[int] = None) -> None:
        if isinstance(inner_optimizer, LossScaleOptimizer):
            raise TypeError(f"LossScaleOptimizer cannot wrap another LossScaleOptimizer, but got: {inner_optimizer}")
        if not isinstance(inner_optimizer, Optimizer):
            # tf.keras's texts (its suite matches them), then the slotopt classes they mean.
            if _is_keras3_optimizer(inner_optimizer):
                raise TypeError(
                    "You passed an instance of the new experimental optimizer, `optimizer.Optimizer`, to "
                    "LossScaleOptimizer, but only the classic optimizers subclassing from "
                    "`tf.keras.optimizers.Optimizer` can be passed. Please use `slotopt.LossScaleOptimizer` (tf.keras's "
                    "`LossScaleOptimizerV3`) to wrap a Keras 3 slotopt optimizer, or wrap a `slotopt.legacy` one. "
                    f"Got optimizer: {inner_optimizer!r}"
                )
            raise TypeError(
                '"inner_optimizer" must be an instance of `tf.keras.optimizers.Optimizer`, but got: '
                f"{inner_optimizer!r}. (In slotopt: a `slotopt.legacy.Optimizer`.)"
            )
        if not isinstance(dynamic, bool):
            raise TypeError(f'"dynamic" argument to LossScaleOptimizer.__init__ must be a bool, but got: {dynamic!r}')
        if getattr(inner_optimizer, "_is_wrapped_by_loss_scale_optimizer", False):
            raise ValueError(
                '"inner_optimizer" is already wrapped by a LossScaleOptimizer. An optimizer can only be wrapped by a '
                "single LossScaleOptimizer"
            )
        if dynamic:
            initial_scale = _DEFAULT_INITIAL_SCALE if initial_scale is None else initial_scale
            dynamic_growth_steps = _DEFAULT_GROWTH_STEPS if dynamic_growth_steps is None else dynamic_growth_steps
            if isinstance(dynamic_growth_steps, float) and dynamic_growth_steps.is_integer():
                dynamic_growth_steps = int(dynamic_growth_steps)  # tf-keras keeps 3.0 as the step count 3
            if isinstance(dynamic_growth_steps, bool) or not isinstance(dynamic_growth_steps, int) or \
                    dynamic_growth_steps < 1:
                raise ValueError(
                    "`dynamic_growth_steps` must be an integer >= 1. "
                    f"Received: dynamic_growth_steps={dynamic_growth_steps!r}"
                )
        else:
            if initial_scale is None:
                raise ValueError('"initial_scale" must be specified if "dynamic" is False')
            if dynamic_growth_steps is not None:
                raise ValueError(
                    f'"dynamic_growth_steps" must be None if "dynamic" is False, but got: {dynamic_growth_steps}'
                )
        if not is_number(initial_scale) or not math.isfinite(initial_scale) or initial_scale <= 0:
            raise ValueError(f"`initial_scale` must be a finite number > 0. Received: initial_scale={initial_scale!r}")
        d = self.__dict__
        d["_optimizer"] = inner_optimizer
        d["_dynamic"] = dynamic
        d["_initial_scale"] = float(initial_scale)
        d["_dynamic_growth_steps"] = dynamic_growth_steps
        d["_current_scale"] = Variable(torch.tensor(float(initial_scale), dtype=torch.float32),
                                       name="current_loss_scale", trainable=False)
        d["_good_steps"] = Variable(torch.zeros((), dtype=torch.int64), name="good_steps", trainable=False)
        d["_loss_has_been_scaled"] = False
        d["_gradients_have_been_unscaled"] = False
        d["_warned"] = False
        inner_optimizer.__dict__["_is_wrapped_by_loss_scale_optimizer"] = True
        self._init_torch_protocol()
        self._share_param_groups(inner_optimizer)

    # ------------------------------------------------------------------------------------------ delegation
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_optimizer", "_hyper"):
            raise AttributeError(name)
        inner = self.__dict__.get("_optimizer")
        key = "learning_rate" if name == "lr" else name
        if inner is not None and key in inner._hyper:
            return inner._get_hyper(key)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "lr":
            name = "learning_rate"
        inner = self.__dict__.get("_optimizer")
        # As tf-keras: a hyperparameter of the inner optimizer is set there unless the wrapper has the attribute
        # itself (a read-only property such as ``loss_scale`` then raises AttributeError).
        own = name in self.__dict__ or hasattr(type(self), name)
        if inner is not None and name in inner._hyper and not own:
            inner._set_hyper(name, value)
        else:
            object.__setattr__(self, name, value)

    @property
    def learning_rate(self) -> Any:
        """The inner optimizer's ``learning_rate`` (its hyperparameter or its own property)."""
        return self._optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._optimizer.learning_rate = value

    lr = learning_rate

    @property
    def inner_optimizer(self) -> Optimizer:
        return self._optimizer

    @property
    def name(self) -> str:
        return self._optimizer.name

    @property
    def _name(self) -> str:
        return self._optimizer._name

    def __repr__(self) -> str:
        return f"<slotopt.legacy.LossScaleOptimizer inner={self._optimizer!r}>"

    @property
    def _hyper(self) -> dict[str, Any]:
        return self._optimizer._hyper

    @property
    def iterations(self) -> torch.Tensor:
        return self._optimizer.iterations

    @iterations.setter
    def iterations(self, variable: Any) -> None:
        self._optimizer.iterations = variable

    @property
    def clipnorm(self) -> Optional[float]:
        return self._optimizer.clipnorm

    @clipnorm.setter
    def clipnorm(self, value: Optional[float]) -> None:
        self._optimizer.clipnorm = value

    @property
    def global_clipnorm(self) -> Optional[float]:
        return self._optimizer.global_clipnorm

    @global_clipnorm.setter
    def global_clipnorm(self, value: Optional[float]) -> None:
        self._optimizer.global_clipnorm = value

    @property
    def clipvalue(self) -> Optional[float]:
        return self._optimizer.clipvalue

    @clipvalue.setter
    def clipvalue(self, value: Optional[float]) -> None:
        self._optimizer.clipvalue = value

    @property
    def weights(self) -> list[torch.Tensor]:
        return self._optimizer.weights

    def variables(self) -> list[torch.Tensor]:
        return self._optimizer.variables()

    def get_weights(self) -> list[Any]:
        return self._optimizer.get_weights()

    def set_weights(self, weights: Any) -> None:
        self._optimizer.set_weights(weights)

    def add_slot(self, var: torch.Tensor, slot_name: str, initializer: Any = "zeros", shape: Any = None) -> Variable:
        return self._optimizer.add_slot(var, slot_name, initializer, shape)

    def get_slot(self, var: torch.Tensor, slot_name: str) -> Variable:
        return self._optimizer.get_slot(var, slot_name)

    def get_slot_names(self) -> list[str]:
        return self._optimizer.get_slot_names()

    def build(self, var_list: Any) -> None:
        self._optimizer.build(var_list)

    def _create_all_weights(self, var_list: Any) -> None:
        self._optimizer._create_all_weights(var_list)

    def zero_grad(self, set_to_none: bool = True) -> None:
        with torch.autograd.profiler.record_function(self._zero_grad_profile_name):  # under the wrapper's name
            self._optimizer.zero_grad(set_to_none)

    # ------------------------------------------------------------------------------------------ torch protocol
    @property
    def _protocol_inner(self) -> Optimizer:
        return self._optimizer

    def _wrapper_state(self) -> dict[str, torch.Tensor]:
        return {"current_loss_scale": self._current_scale, "good_steps": self._good_steps}

    # ------------------------------------------------------------------------------------------ loss scale
    @property
    def dynamic(self) -> bool:
        return self._dynamic

    @property
    def loss_scale(self) -> torch.Tensor:
        """The current loss scale (a float32 CPU scalar)."""
        return self._current_scale

    @property
    def dynamic_counter(self) -> Optional[torch.Tensor]:
        """Finite steps since the scale last changed (None for a fixed scale)."""
        return self._good_steps if self._dynamic else None

    @property
    def initial_scale(self) -> float:
        return self._initial_scale

    @property
    def dynamic_growth_steps(self) -> Optional[int]:
        return self._dynamic_growth_steps

    def get_scaled_loss(self, loss: Any) -> Any:
        """``loss * loss_scale`` (a callable loss gives a callable)."""
        self.__dict__["_loss_has_been_scaled"] = True
        if callable(loss) and not isinstance(loss, torch.Tensor):
            def scaled_loss() -> Any:
                value = loss()
                return value * self._current_scale.detach().to(value.dtype)
            return scaled_loss
        if not isinstance(loss, torch.Tensor):
            raise TypeError(f"Argument `loss` must be a tensor or a no-argument callable. Received: loss={loss!r}")
        return loss * self._current_scale.detach().to(loss.dtype)

    def get_unscaled_gradients(self, grads: list[Any]) -> list[Any]:
        """Each gradient times ``1 / loss_scale`` (None stays None; sparse gradients keep their indices)."""
        self.__dict__["_gradients_have_been_unscaled"] = True
        reciprocal = 1.0 / self._current_scale.detach()
        out = []
        for g in grads:
            if g is None:
                out.append(None)
            elif is_sparse(g):
                g = as_indexed_slices(g)
                out.append(IndexedSlices(g.values * reciprocal.to(g.values.dtype), g.indices, g.dense_shape))
            else:
                out.append(g * reciprocal.to(g.dtype))
        return out

    def _compute_gradients(self, loss: Any, var_list: Any, grad_loss: Optional[torch.Tensor] = None,
                           tape: Any = None) -> list[tuple[Any, torch.Tensor]]:
        pairs = self._optimizer._compute_gradients(self.get_scaled_loss(loss), var_list, grad_loss, tape)
        grads = self.get_unscaled_gradients([g for g, _ in pairs])
        return list(zip(grads, [v for _, v in pairs]))

    def minimize(self, loss: Any, var_list: Any, grad_loss: Optional[torch.Tensor] = None,
                 name: Optional[str] = None, tape: Any = None) -> Optional[torch.Tensor]:
        """Scales the loss, computes and unscales the gradients, and applies them (see ``apply_gradients``)."""
        pairs = self._compute_gradients(loss, var_list, grad_loss, tape)
        return self.apply_gradients(pairs, name=name)

    def apply_gradients(self, grads_and_vars: Any, name: Optional[str] = None,
                        experimental_aggregate_gradients: bool = True) -> Optional[torch.Tensor]:
        """Applies the (already unscaled) gradients if they are all finite, then updates the loss scale."""
        inner = self._optimizer
        if not (self._loss_has_been_scaled and self._gradients_have_been_unscaled) and not self._warned:
            self.__dict__["_warned"] = True  # (tf.keras warns at every call; once is enough to be told)
            _logger.warning(_scaling_warning(self._loss_has_been_scaled, self._gradients_have_been_unscaled))
        pairs = list(grads_and_vars)
        if "_pending_torch_state" not in self.__dict__:
            # A step like the inner optimizer's last one (every pair a 2-tuple of a known variable and a dense
            # gradient of its kind) is checked in one pass and its gradients checked for inf/NaN flat.
            step = loss_scaling.ordinary_step(inner, plan_cache.planned_step(inner, pairs))
            if step is not None and (not experimental_aggregate_gradients or pipeline.aggregates_nothing(inner)):
                finite = not self._dynamic or loss_scaling.gradients_finite(step)
                return self._apply_if_finite(step, finite, name, moves_scale=self._dynamic)
        checked = []
        for i, item in enumerate(pairs):
            if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], torch.Tensor)):
                raise TypeError(
                    f"Argument `grads_and_vars` must hold (gradient, variable) pairs. Received at index {i}: {item!r}"
                )
            checked.append(tuple(item))
        checked = validation.checked_pairs(inner, checked)
        if "_pending_torch_state" in self.__dict__:  # loaded before the build: in place before the scale is used
            saved = [transaction.snapshot(inner), transaction.snapshot(self)]
            try:
                self._create_all_weights([v for _, v in checked])
                state_io.apply_pending_torch_state(self)
            except BaseException:
                transaction.restore(inner, saved[0])
                transaction.restore(self, saved[1])
                raise
        present: list[Pair] = [(g, v) for g, v in checked if g is not None]
        if checked and not present:
            raise ValueError(
                f"No gradients provided for any variable: {([inner._name_of(v) for _, v in checked],)}. "
                f"Provided `grads_and_vars` is {tuple((g, inner._name_of(v)) for g, v in checked)}."
            )
        if experimental_aggregate_gradients and present:
            present = list(inner._transform_unaggregated_gradients(present))
            present = list(inner._aggregate_gradients(present))
        finite = True
        if self._dynamic and present:
            finite = shards.all_finite(inner, [g.values if isinstance(g, IndexedSlices) else g for g, _ in present])
        return self._apply_if_finite(present, finite, name, moves_scale=self._dynamic and bool(present))

    def _apply_if_finite(self, pairs: list[Pair], finite: bool, name: Any, moves_scale: bool) -> Any:
        """The inner optimizer applies ``pairs`` (aggregated already) when their gradients are finite; otherwise the
        step only counts (tf-keras skips it). Then a dynamic scale moves."""
        inner = self._optimizer
        if finite:
            result = inner.apply_gradients(pairs, name=name, experimental_aggregate_gradients=False)
        else:
            with torch.no_grad():
                count_step(inner.iterations)
            result = inner.iterations
        if moves_scale:
            self._update_scale(finite)
        return result

    def _update_scale(self, finite: bool) -> None:
        with torch.no_grad():
            if finite:
                if int(self._good_steps) + 1 >= self._dynamic_growth_steps:
                    grown = self._current_scale * _MULTIPLIER
                    if bool(torch.isfinite(grown)):
                        self._current_scale.copy_(grown)
                    self._good_steps.zero_()
                else:
                    self._good_steps.add_(1)
            else:
                self._good_steps.zero_()
                self._current_scale.copy_(torch.clamp(self._current_scale / _MULTIPLIER, min=1.0))

    # ------------------------------------------------------------------------------------------ config
    def get_config(self) -> dict[str, Any]:
        inner = self._optimizer
        return {
            "inner_optimizer": registry.serialized(inner),
            "dynamic": self._dynamic,
            "initial_scale": self._initial_scale,
            "dynamic_growth_steps": self._dynamic_growth_steps,
        }

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Optional[dict[str, Any]] = None) -> Any:
        """Accepts ``get_config()`` output, and the older ``{"optimizer", "loss_scale"}`` format."""
        limits.check_config_entries(config)  # each entry named, before any repr of it
        config = dict(config)
        if "loss_scale" in config:
            loss_scale = config.pop("loss_scale")
            if is_number(loss_scale):
                config.update(dynamic=False, initial_scale=loss_scale)
            elif isinstance(loss_scale, dict) and loss_scale.get("class_name") == "FixedLossScale":
                config.update(dynamic=False, initial_scale=loss_scale["config"]["loss_scale_value"])
            elif isinstance(loss_scale, dict) and loss_scale.get("class_name") == "DynamicLossScale":
                scale_config = dict(loss_scale.get("config") or {})
                # TF1's DynamicLossScale defaults (2**15, 2000, 2.0) stand for the keys a config leaves out.
                if scale_config.get("multiplier", 2.0) != 2:
                    raise ValueError(
                        "Cannot deserialize LossScaleOptimizer with a DynamicLossScale whose multiplier is not 2. "
                        f"Got DynamicLossScale: {_dynamic_loss_scale_repr(scale_config)}")
                config.update(dynamic=True, initial_scale=scale_config.get("initial_loss_scale", 2**15),
                              dynamic_growth_steps=scale_config.get("increment_period", 2000))
            else:
                raise ValueError(
                    "Serialized LossScaleOptimizers with a LossScale that is neither a FixedLossScale nor a "
                    f"DynamicLossScale can no longer be deserialized. Received: loss_scale={loss_scale!r}")
        if "optimizer" in config:
            config["inner_optimizer"] = config.pop("optimizer")
        inner = config.pop("inner_optimizer")
        if isinstance(inner, dict):
            inner = _deserialize_inner(inner, custom_objects)
        return cls(inner, **config)


_EXAMPLE = ("\n    with tf.GradientTape() as tape:\n      loss = loss_fn()\n      scaled_loss = opt.get_scaled_loss(loss)"
            "\n    scaled_grads = tape.gradient(scaled_loss, vars)\n    grads = opt.get_unscaled_gradients(scaled_grads)"
            "\n    opt.apply_gradients([(grads, var)])\nFor more information, see "
            "https://www.tensorflow.org/api_docs/python/tf/keras/mixed_precision/LossScaleOptimizer")


def _scaling_warning(loss_scaled: bool, gradients_unscaled: bool) -> str:
    """tf.keras's warning (its text) for an ``apply_gradients`` without ``get_scaled_loss`` and/or
    ``get_unscaled_gradients``."""
    if not loss_scaled and not gradients_unscaled:
        return ("You forgot to call LossScaleOptimizer.get_scaled_loss() and LossScaleOptimizer.get_unscaled_gradients() "
                "before calling LossScaleOptimizer.apply_gradients(). This will likely result in worse model quality, "
                f"so please call them in the correct places! For example:{_EXAMPLE}")
    missing, done = (("get_scaled_loss", "get_unscaled_gradients") if not loss_scaled
                     else ("get_unscaled_gradients", "get_scaled_loss"))
    return (f"You forgot to call LossScaleOptimizer.{missing}() before calling LossScaleOptimizer.apply_gradients() "
            f"(you did call {done}() however). This will likely result in worse model quality, so please call "
            f"{missing}() in the correct place! For example:{_EXAMPLE}")


def _is_keras3_optimizer(value: Any) -> bool:
    try:
        return isinstance(value, registry.base_class("keras3"))
    except KeyError:  # slotopt.keras3 not imported: the value cannot be one of its optimizers
        return False


def _dynamic_loss_scale_repr(config: dict[str, Any]) -> str:
    """TF1's eager ``repr`` of the ``DynamicLossScale`` a config describes (as tf.keras's error prints it); a value
    that is not a number is shown as given."""
    def number(key: str, default: float, kind: type) -> Any:
        value = config.get(key, default)
        return kind(value) if is_number(value) else repr(value)

    initial = number("initial_loss_scale", 2.0**15, float)
    return (f"DynamicLossScale(current_loss_scale={initial}, num_good_steps=0, initial_loss_scale={initial}, "
            f"increment_period={number('increment_period', 2000, int)}, "
            f"multiplier={number('multiplier', 2.0, float)})")


def _deserialize_inner(spec: dict[str, Any], custom_objects: Optional[dict[str, Any]]) -> Optimizer:
    """The inner optimizer of a serialized tf-keras LossScaleOptimizer, through slotopt's registry only."""
    if not isinstance(spec, dict):
        raise ValueError(f"`inner_optimizer` must be a serialized optimizer dict. Received: {spec!r}")
    klass = registry.resolve_class(spec.get("class_name"), spec.get("module"), custom_objects,
                                   spec.get("registered_name"), default_generation="legacy")
    inner_config = spec.get("config") or {}
    if not isinstance(inner_config, dict):
        raise ValueError(f"`inner_optimizer['config']` must be a dict. Received: {spec!r}")
    from_config = getattr(klass, "from_config", None)
    if not callable(from_config):
        raise ValueError(f"`inner_optimizer`: {klass.__name__} has no `from_config`, so it is not an optimizer.")
    if "custom_objects" in inspect.signature(from_config).parameters:
        return from_config(dict(inner_config), custom_objects)
    return from_config(dict(inner_config))
