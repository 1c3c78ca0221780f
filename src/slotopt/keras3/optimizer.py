"""The Keras 3 ``Optimizer`` face: Keras's contract, run by the shared pipeline (``engine/pipeline.py``)."""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any, Callable, Optional, Union

import numpy as np
import torch

from .. import schedules as schedules_module
from ..engine import (
    as_written,
    checks,
    constraints,
    gradients,
    group_sync,
    pipeline,
    plan_cache,
    stages,
    step_recipes,
)
from ..engine import constants as K
from ..engine.core import OptimizerCore, Pair, Pairs
from ..engine.eager import outside_dynamo
from ..engine.naming import unique_name
from ..engine.pipeline import Step, run_step
from ..engine.plan import StepPairs
from ..engine.proof import validation
from ..engine.state import FlatState
from ..engine.writing import transaction
from ..kernels import rows as sparse_rows
from ..variables import IndexedSlices, Variable, named_variables
from . import optimizer_variables, torch_hooks
from .torch_hooks import _floatx

__all__ = ["Optimizer"]

LearningRate = Union[float, schedules_module.LearningRateSchedule, Callable[[], Any]]

def _constructed_by_a_subclass(cls: type) -> bool:
    """Whether ``cls``'s constructor is an optimizer's (not, e.g., Lightning's wrapper that subclasses the optimizer's
    class to pass ``isinstance`` checks and forwards attributes to the real optimizer)."""
    owner = next(c for c in cls.__mro__ if "__init__" in c.__dict__)
    return issubclass(owner, Optimizer)


class Optimizer(OptimizerCore):
    """The Keras 3 optimizer base class, on PyTorch tensors.

    A custom optimizer overrides ``build`` (to create its state with ``add_variable_from_reference``) and
    ``update_step(gradient, variable, learning_rate)``; everything else (clipping, weight decay, gradient
    accumulation, loss-scale unscaling, constraints, EMA, ``iterations``) comes from the base class.

    Args:
        learning_rate: a float, a ``LearningRateSchedule`` or a no-argument callable.
        weight_decay: decoupled weight decay ``w -= w * weight_decay * lr`` before each update.
        clipnorm: clips each gradient to this norm (at most one of the three clippings; <= 0 disables it).
        clipvalue: clips each gradient element to ``[-clipvalue, clipvalue]``.
        global_clipnorm: clips all gradients together to this global norm.
        use_ema: keeps an exponential moving average of the variables.
        ema_momentum: the moving average's momentum.
        ema_overwrite_frequency: every this many steps, the variables are overwritten with their average.
        loss_scale_factor: gradients are divided by it (``scale_loss`` multiplies the loss by it).
        gradient_accumulation_steps: average gradients over this many calls before each update.
        name: defaults to a unique snake-case name such as ``"adam_1"``.
        params: variables to build on right away (a module, tensors or ``(name, tensor)`` pairs), so that
            ``step()`` can apply their ``.grad``.
        foreach: run each update over whole (device, dtype) groups with ``torch._foreach_*`` (default True).

    Example:
        >>> import torch, slotopt
        >>> class PlainSGD(slotopt.Optimizer):
        ...     def update_step(self, gradient, variable, learning_rate):
        ...         self.assign_sub(variable, gradient * learning_rate)
        >>> w = slotopt.Variable(torch.ones(2), name="w")
        >>> opt = PlainSGD(learning_rate=0.5)
        >>> int(opt.apply_gradients([(torch.ones(2), w)]))
        1
        >>> w.tolist()
        [0.5, 0.5]
    """

    # The face's parts are modules of functions of the optimizer (``self``), not base classes: the class names
    # as its methods here what the torch protocol and subclasses call or override; its step is data (``_stages``:
    # the stages, functions of ``engine/stages.py`` and ``engine/pipeline.py``, in order).
    # keras3/torch_hooks.py: the torch protocol's hooks
    _hyperparameter_keys = torch_hooks._hyperparameter_keys
    _read_hyperparameter = torch_hooks._read_hyperparameter
    _configuration_values = torch_hooks._configuration_values
    _write_hyperparameter = torch_hooks._write_hyperparameter
    _current_lr = torch_hooks._current_lr
    _lr_is_driven = torch_hooks._lr_is_driven
    # engine/capture.py: a capturable step's scalars (a class is capturable where it names its rules)
    _capture_rules: tuple[str, ...] = ()
    _capture_scalars = step_recipes.scalars_of
    _capture_count = torch_hooks._capture_count
    _capture_rate = torch_hooks._capture_rate
    _capture_terms = torch_hooks._capture_terms
    _capture_learning_rate_refusal = torch_hooks._capture_learning_rate_refusal
    _swap_hyperparameters = torch_hooks._swap_hyperparameters
    _state_counter = torch_hooks._state_counter
    _state_variables = torch_hooks._state_variables
    _add_variables = torch_hooks._add_variables
    _apply_step = torch_hooks._apply_step
    _before_state_io = torch_hooks._before_state_io
    _after_state_load = torch_hooks._after_state_load
    _load_legacy_format = torch_hooks._load_legacy_format
    # keras3/optimizer_variables.py: the optimizer's variables
    _own_variable = optimizer_variables._own_variable
    variables = optimizer_variables.variables
    iterations = optimizer_variables.iterations
    add_variable = optimizer_variables.add_variable
    add_variable_from_reference = optimizer_variables.add_variable_from_reference
    add_optimizer_variables = optimizer_variables.add_optimizer_variables
    assign = staticmethod(optimizer_variables.assign)
    assign_add = staticmethod(optimizer_variables.assign_add)
    assign_sub = staticmethod(optimizer_variables.assign_sub)
    stateless_apply = optimizer_variables.stateless_apply
    get_weights = optimizer_variables.get_weights
    _has_pending_weights = optimizer_variables._has_pending_weights
    set_weights = optimizer_variables.set_weights
    _set_or_keep_weights = optimizer_variables._set_or_keep_weights
    _restore_pending_state = optimizer_variables._restore_pending_state
    save_own_variables = optimizer_variables.save_own_variables
    load_own_variables = optimizer_variables.load_own_variables
    # engine/stages.py: what Keras 3's stages call that a subclass may override, and its public methods
    _has_custom_update = stages._has_custom_update
    _update_slices = stages._update_slices
    _slice_terms = stages._slice_terms
    _before_updates = stages._before_updates
    update_step = stages.update_step
    _update_group = stages._update_group
    exclude_from_weight_decay = stages.exclude_from_weight_decay
    _use_weight_decay = stages._use_weight_decay
    finalize_variable_values = stages.finalize_variable_values

    #: One step, in Keras 3's ``apply()`` order (engine/pipeline.py runs it in one all-or-nothing frame).
    _stages = Step(
        pipeline.drop_missing_gradients,
        pipeline.negate_gradients,  # maximize=True (torch's): the gradients of the negated loss
        stages.overwrite_with_gradients,  # flagged variables take their gradient as it is, and leave the step
        stages.unscale_gradients,  # g / loss_scale_factor
        pipeline.UPDATE,  # (the call's pairs above; below, the update, which an accumulate-only call skips)
        stages.accumulate_gradients,  # None on an accumulate-only call
        pipeline.aggregate_across_processes,
        stages.clip_gradients,  # clipnorm, else global_clipnorm, else clipvalue
        pipeline.first_write(stages.evaluate_update),  # learning rate, callables; proven again; per param group:
        stages.apply_weight_decay,
        stages.apply_updates,
        pipeline.AFTER,  # (the call's pairs)
        stages.update_moving_averages,  # use_ema: Keras averages the variables before their constraints run
        constraints.apply_constraints,
        stages.count_iterations,
        result=stages.iterations,
    )

    #: Built-ins whose kernel takes ``weight_decay`` / ``weight_decay_lr`` and decays in its own pass.
    _fused_weight_decay: bool = False
    #: Names of the per-variable state a built-in optimizer's kernel reads, in kernel argument order.
    _kernel_slots: tuple[str, ...] = ()
    #: Built-ins whose update is element-wise (no whole-tensor norms) may run over packed or cut tensors.
    _elementwise_update: bool = True
    #: How a built-in applies an ``IndexedSlices`` gradient with Keras 3's TensorFlow-backend semantics
    #: (keras3_sparse.md): ``"rows"``: the rule only scatters into the slices' rows; ``"blocks"``: element-wise
    #: rule that rewrites every row, run a block of rows at a time; ``"whole"``: needs whole-tensor norms;
    #: ``None``: the gradient is densified first (custom optimizers, and rules whose divisor may be 0).
    _sparse_layout: Optional[str] = None
    #: The kernels ``_update_group`` calls for a dense update (one of them per step). What the class can do is
    #: read from them, not promised by a flag: see ``stages.check_update_kernels``.
    _update_kernels: tuple[Callable[..., None], ...] = ()
    #: Whether the dense update is one compiled rule (every one of ``_update_kernels`` has a compiled twin), so
    #: that a ``"blocks"`` rule's slices can take one pass over the table (engine/sparse_pass.py). Derived from
    #: ``_update_kernels``; a class that sets it True with a kernel lacking the compiled form is refused.
    _sparse_one_pass: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        stages.check_update_kernels(cls)

    _plans_steps = True  # the stages below take an ordinary step's shortcuts (engine/plan.py)

    def __setattr__(self, name: str, value: Any) -> None:
        if "_super_init_called" not in self.__dict__ and _constructed_by_a_subclass(type(self)):
            raise RuntimeError(
                f"In optimizer '{type(self).__name__}', you forgot to call `super().__init__()` as the first "
                "statement in the `__init__()` method. Go add it!"
            )
        hyper_keys = self.__dict__.get("_hyper_keys_cache", ())
        if name in hyper_keys:
            checks.check_value(name, value, self._hyperparameter_ranges)
        if name in checks.RANGES and name not in ("learning_rate", "lr"):
            self._track_callable_hyperparameter(name, value)
        object.__setattr__(self, name, value)
        if name in hyper_keys:
            group_sync.broadcast(self, name, value)  # an attribute set applies to every parameter group

    def __init__(
        self,
        learning_rate: LearningRate,
        weight_decay: Optional[float] = None,
        clipnorm: Optional[float] = None,
        clipvalue: Optional[float] = None,
        global_clipnorm: Optional[float] = None,
        use_ema: bool = False,
        ema_momentum: float = 0.99,
        ema_overwrite_frequency: Optional[int] = None,
        loss_scale_factor: Optional[float] = None,
        gradient_accumulation_steps: Optional[int] = None,
        name: Optional[str] = None,
        *,
        foreach: Optional[bool] = None,
        **kwargs: Any,
    ) -> None:
        object.__setattr__(self, "_super_init_called", True)
        self._init_core()
        self._flat_state = FlatState()
        if "decay" in kwargs:
            if kwargs.pop("decay") is not None:
                warnings.warn("Argument `decay` is no longer supported and will be ignored.", stacklevel=2)
        if kwargs:
            raise ValueError(f"Argument(s) not recognized: {kwargs}")
        if not (gradient_accumulation_steps is None or (type(gradient_accumulation_steps) is int
                                                        and gradient_accumulation_steps == 0)):
            # Keras: 0 and None both mean no accumulation; anything else must be an integer >= 2.
            checks.check_integer("gradient_accumulation_steps", gradient_accumulation_steps, 2)
        checks.check_values({"weight_decay": weight_decay, "clipnorm": clipnorm, "clipvalue": clipvalue,
                             "global_clipnorm": global_clipnorm, "use_ema": use_ema,
                             "loss_scale_factor": loss_scale_factor}, self._hyperparameter_ranges)
        if use_ema:
            if not 0 <= ema_momentum <= 1:
                raise ValueError(f"`ema_momentum` must be in the range [0, 1]. Received: ema_momentum={ema_momentum}")
            checks.check_number("ema_momentum", ema_momentum, checks.UNIT)
            if ema_overwrite_frequency and (
                not isinstance(ema_overwrite_frequency, int) or ema_overwrite_frequency < 1
            ):
                raise ValueError(
                    "`ema_overwrite_frequency` must be an integer >= 1 or None. "
                    f"Received: ema_overwrite_frequency={ema_overwrite_frequency}"
                )
        if sum(x is not None for x in (clipnorm, clipvalue, global_clipnorm)) > 1:
            raise ValueError(
                "Only one of `clipnorm`, `clipvalue` and `global_clipnorm` can be set. "
                f"Received: clipnorm={clipnorm}, clipvalue={clipvalue}, global_clipnorm={global_clipnorm}"
            )
        self.name = name if name else unique_name(type(self).__name__)
        self.weight_decay = weight_decay
        self.clipnorm = clipnorm
        self.clipvalue = clipvalue
        self.global_clipnorm = global_clipnorm
        self.use_ema = use_ema
        self.ema_momentum = ema_momentum
        self.ema_overwrite_frequency = ema_overwrite_frequency
        self.loss_scale_factor = loss_scale_factor
        self.gradient_accumulation_steps = gradient_accumulation_steps
        if foreach is not None:
            self.foreach = bool(foreach)
        self.built = False
        self._variables: list[Variable] = []
        self._trainable_positions: list[int] = []
        self._trainable_index: dict[int, int] = {}  # position -> index in the built variable list
        self._exclude_ids: set[int] = set()
        self._exclude_pattern: Optional[re.Pattern[str]] = None
        self._pending_state: Optional[list[torch.Tensor]] = None
        self._iterations = self._own_variable(torch.zeros((), dtype=torch.int64), "iteration")
        self._learning_rate = self._build_learning_rate(learning_rate)

    # ------------------------------------------------------------------------------------------ variables
    def _build_learning_rate(self, learning_rate: Any) -> Any:
        if isinstance(learning_rate, schedules_module.LearningRateSchedule) or callable(learning_rate):
            return learning_rate
        if isinstance(learning_rate, torch.Tensor) and learning_rate.dim() == 0 and learning_rate.is_floating_point():
            learning_rate = float(learning_rate)
        if not isinstance(learning_rate, float):
            raise ValueError(
                "Argument `learning_rate` should be float, or an instance of LearningRateSchedule, or a callable "
                "(that takes in the current iteration value and returns the corresponding learning rate value). "
                f"Received instead: learning_rate={learning_rate}"
            )
        checks.check_number("learning_rate", learning_rate, checks.range_of("learning_rate",
                                                                            self._hyperparameter_ranges))
        as_written.remember(self.__dict__.setdefault("_as_written", {}), "lr", learning_rate)
        return self._own_variable(torch.tensor(learning_rate, dtype=_floatx()), "learning_rate")

    @property
    def learning_rate(self) -> Any:
        self._restore_pending_state()
        lr = self._learning_rate
        if isinstance(lr, Variable):
            return lr
        value = lr(self._iterations) if isinstance(lr, schedules_module.LearningRateSchedule) else lr()
        checks.check_result("learning_rate", value, self._hyperparameter_ranges)
        self._remember_lr(value)
        return value

    @learning_rate.setter
    def learning_rate(self, value: Any) -> None:
        self._write_learning_rate(value)
        if not self._lr_is_driven():
            group_sync.broadcast(self, "lr", float(value))
        else:
            self._publish_param_groups()

    def _write_learning_rate(self, value: Any) -> None:
        """``learning_rate = value`` for this optimizer only (group 0 of ``param_groups`` is written by torch
        tools; the other groups keep their own values)."""
        current = self._learning_rate
        if isinstance(value, schedules_module.LearningRateSchedule) or callable(value):
            if isinstance(current, Variable):
                self._variables = [v for v in self._variables if v is not current]
            self._learning_rate = value
            return
        if isinstance(current, schedules_module.LearningRateSchedule):
            raise TypeError(
                "This optimizer was created with a `LearningRateSchedule` object as its `learning_rate` constructor "
                "argument, hence its learning rate is not settable. If you need the learning rate to be settable, "
                "you should instantiate the optimizer with a float `learning_rate` argument."
            )
        if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.dtype.is_complex:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise TypeError(
                "Argument `learning_rate` must be a float, a LearningRateSchedule or a callable. "
                f"Received: learning_rate={value!r}"
            )
        value = checks.check_number("learning_rate", value, checks.range_of("learning_rate",
                                                                            self._hyperparameter_ranges))
        as_written.remember(self.__dict__.setdefault("_as_written", {}), "lr", value)
        if isinstance(current, Variable):
            current.assign(value)
        else:  # a callable was set before: go back to a variable at its old place
            self._learning_rate = self._own_variable(torch.tensor(value, dtype=_floatx()), "learning_rate")
            self._variables.insert(1, self._variables.pop())

    @property
    def lr(self) -> Any:
        return self.learning_rate

    @lr.setter
    def lr(self, value: Any) -> None:
        self.learning_rate = value

    # ------------------------------------------------------------------------------------------ build
    def build(self, variables: Any) -> None:
        """Creates the optimizer state for ``variables`` (a module, tensors or ``(name, tensor)`` pairs)."""
        if self.built:
            return
        self._trainable_positions = self._register(variables)
        self._trainable_index = {p: i for i, p in enumerate(self._trainable_positions)}
        trainable = self._trainable_variables
        if self.use_ema:
            self._model_variables_moving_average = self.add_optimizer_variables(trainable, "average")
        if self.gradient_accumulation_steps:
            self._accumulated_gradients = self.add_optimizer_variables(trainable, "gradient_accumulator")
        self.built = True

    @property
    def _trainable_variables(self) -> list[torch.Tensor]:
        return [self._vars[p] for p in self._trainable_positions]

    def _get_variable_index(self, variable: torch.Tensor) -> int:
        """Index of ``variable`` in the list the optimizer was built on (how a custom ``update_step`` finds the
        slots it created with ``add_optimizer_variables``)."""
        return self._trainable_index[self._position(variable)]

    # ------------------------------------------------------------------------------------------ apply
    def apply(self, grads: Sequence[Any], trainable_variables: Optional[Sequence[torch.Tensor]] = None, *,
              skip_gradients_aggregation: bool = False) -> None:
        """Applies one step of ``grads`` to ``trainable_variables`` (default: the variables built on).

        ``skip_gradients_aggregation=True``: the gradients are aggregated across processes already, so the
        ``gradient_aggregator`` (if the optimizer was given one) does not run for this call.
        """
        grads = list(grads)
        if trainable_variables is None:
            if not self.built:
                raise ValueError(
                    "When passing `grads` without `variables`, the optimizer must already be built on a list of "
                    "variables. Call `optimizer.build(trainable_variables)` first. "
                )
            if len(grads) != len(self._trainable_positions):
                raise ValueError(
                    "When passing `grads` as a list of gradient tensors, the gradients must match "
                    f"`optimizer.variables` one-to-on. Received a list of {len(grads)} gradients, but the "
                    f"optimizer is tracking {len(self._trainable_positions)} trainable variables."
                )
            trainable_variables = self._trainable_variables
        else:
            trainable_variables = [v for _, v in named_variables(trainable_variables)] if not isinstance(
                trainable_variables, (list, tuple)) else list(trainable_variables)
            if not all(map(isinstance, trainable_variables, repeat(torch.Tensor))):
                for i, v in enumerate(trainable_variables):
                    checks.check_variable(v, f"trainable_variables[{i}]")
            if len(grads) != len(trainable_variables):
                raise ValueError(
                    f"Received {len(grads)} gradients for {len(trainable_variables)} variables; "
                    "`grads` and `trainable_variables` must have the same length."
                )
        run_step(self, list(zip(grads, trainable_variables)), skip_gradients_aggregation=skip_gradients_aggregation)

    @outside_dynamo  # eager under torch.compile, whole: the plan's check of the pairs included (one break)
    def apply_gradients(self, grads_and_vars: Pairs, *, skip_gradients_aggregation: bool = False) -> torch.Tensor:
        """Applies ``(gradient, variable)`` pairs and returns ``iterations`` (see ``apply``)."""
        # (an ``Ordinary`` group is one a composite had this optimizer check in this very step, engine/routing.py;
        # a list like the last step's is recognised by its plan, which checks every pair, in one pass)
        pairs: Optional[list[Pair]] = grads_and_vars if isinstance(grads_and_vars, StepPairs) and grads_and_vars.plan else (
            plan_cache.planned_step(self, grads_and_vars) if type(grads_and_vars) is list else None)
        if pairs is None:
            pairs = checks.check_pairs(grads_and_vars)
        self._apply_pairs(pairs, skip_gradients_aggregation)
        return self._iterations

    def _apply_pairs(self, pairs: list[Pair], skip_gradients_aggregation: bool = False) -> None:
        """What ``apply_gradients`` does with ``pairs`` once they are known to be 2-tuples of a gradient and a
        tensor (``checks.check_pairs``): the step, through a subclass's own ``apply`` where it has one."""
        if type(self).apply is Optimizer.apply:  # what ``apply`` comes to for checked pairs, without re-pairing
            run_step(self, pairs, skip_gradients_aggregation=skip_gradients_aggregation)
        else:  # a subclass's own ``apply`` sees the call
            self.apply([g for g, _ in pairs], [v for _, v in pairs],
                       skip_gradients_aggregation=skip_gradients_aggregation)

    def minimize(self, loss: Any, var_list: Any, tape: Any = None) -> torch.Tensor:
        """Computes the gradients of ``loss`` (callable or tensor with a graph) for ``var_list`` and applies them."""
        variables = gradients.resolve_var_list(var_list)
        if not self.built:
            self.build(var_list if not callable(var_list) or isinstance(var_list, torch.nn.Module) else variables)
        grads = gradients.gradients_of(loss, variables)
        return self.apply_gradients(zip(grads, variables))

    def scale_loss(self, loss: Any) -> Any:
        """``loss * loss_scale_factor`` when a factor is set (gradients are divided by it in ``apply``)."""
        return loss * self.loss_scale_factor if self.loss_scale_factor is not None else loss


    # ------------------------------------------------------------------------------------------ stages
    def _prepare_pairs(self, grads_and_vars: Pairs, **options: Any) -> Optional[list[Pair]]:
        # (``plan_of``, inline: what a caller hands may be its own sequence)
        pairs = grads_and_vars if isinstance(grads_and_vars, StepPairs) and grads_and_vars.plan else list(grads_and_vars)
        if not pairs:
            return None
        checked = validation.checked_pairs(self, pairs)
        if checked.plan is not None:  # the variables and gradients of the last step's kind (engine/plan.py)
            self._restore_pending_state()
            return checked
        if self.built:
            index, trainable = self._var_index, self._trainable_index
            for _, v in checked:
                if index.get(id(v), -1) not in trainable:
                    raise ValueError(
                        f"Unknown variable: {self._name_of(v)}. This optimizer can only be called for the variables "
                        "it was originally built with. When working with a new set of variables, you should "
                        "recreate a new optimizer instance."
                    )
        if all(g is None for g, _ in checked):
            raise ValueError("No gradients provided for any variable.")
        if self.loss_scale_factor is not None:
            sparse = next((g for g, _ in checked if isinstance(g, IndexedSlices)), None)
            if sparse is not None:  # Keras 3 (TF backend) unscales with `g / factor`, which slices do not support
                raise TypeError(
                    "`loss_scale_factor` cannot unscale a sparse gradient (Keras 3 raises here too: "
                    "unsupported operand type(s) for /: 'IndexedSlices' and 'float'); wrap the optimizer in "
                    f"`LossScaleOptimizer` instead. Received: loss_scale_factor={self.loss_scale_factor}, "
                    f"grad={sparse}"
                )
        # A constraint rewrites the whole variable: with a sparse gradient slotopt refuses it in every generation.
        constraints.reject_sparse_constraints(
            checked, lambda grad, constraint: "Cannot use a constraint function on a sparse variable. Received: "
                                              f"grad={grad}, var.constraint={constraint}.")
        if not self.built:
            # A checkpoint loaded before the build is checked once the variables exist: if it does not fit, the
            # optimizer is left unbuilt with the checkpoint still pending (nothing changed).
            pending = self._pending_state is not None or "_pending_torch_state" in self.__dict__
            saved = transaction.snapshot(self) if pending else None
            self.build([v for _, v in checked])
            try:
                self._restore_pending_state()
            except BaseException:
                if saved is not None:
                    transaction.restore(self, saved)
                raise
        self._restore_pending_state()
        missing = [self._name_of(v) for g, v in checked if g is None]
        if missing:
            warnings.warn(
                f"Gradients do not exist for variables {missing} when minimizing the loss. If using "
                "`model.compile()`, did you forget to provide a `loss` argument?",
                stacklevel=4,
            )
        return checked

    #: tf-keras 2.11+'s ``Optimizer`` (issue 49): a sparse gradient's repeated rows are summed (unique rows, then
    #: a segment sum) after clipping and before the update, where Keras 3 updates row by row. Set by the readers
    #: for a tf-keras 2.11+ file; the rest of its arithmetic is the Keras 3 class's (``stages.clip_gradients``).
    _deduplicate_sparse: bool = False

    def _deduplicated_sparse(self, pairs: list[Pair]) -> list[Pair]:
        out = []
        for g, v in pairs:
            if isinstance(g, IndexedSlices) and not _tfkeras_sparse_exact(self):
                raise ValueError(
                    f"A sparse gradient for {self._name_of(v)!r}: this {type(self).__name__} continues a tf-keras "
                    f"2.11+ run, whose sparse update ({type(self).__name__}'s row scatter) slotopt does not "
                    "reproduce bit for bit (checked against tf-keras 2.21: Adagrad and SGD without Nesterov do). "
                    "Pass the gradient dense (`grad.to_dense()`: tf-keras's dense update, the same values up to "
                    "rounding) to continue.")
            if isinstance(g, IndexedSlices):
                rows, values = sparse_rows.deduplicate(g)
                g = IndexedSlices(values, rows, g.dense_shape)
            out.append((g, v))
        return out

    #: Hyperparameters whose value decides which slots the build makes (Keras 3 tests them then, as numbers):
    #: a callable there is refused.
    _decided_at_build: frozenset[str] = frozenset({"momentum"})

    def _track_callable_hyperparameter(self, name: str, value: Any) -> None:
        """Keeps the names of the hyperparameters that hold a callable (``beta_1=lambda: 0.9``), so that a step
        evaluates them without looking at every attribute."""
        callables = self.__dict__.setdefault("_callable_hyperparameters", set())
        if callable(value) and not isinstance(value, torch.Tensor):
            checks.check_callable_allowed(name, value, self._decided_at_build)
            checks.check_no_argument_callable(name, value)  # Keras calls it with no arguments at each update
            callables.add(name)
        else:
            callables.discard(name)

    def _lr_for(self, learning_rate: Any, dtype: torch.dtype) -> float:
        """``cast(learning_rate, var.dtype)``: the learning rate (a floatx tensor, or a Python float taken as
        float32) in the variable's dtype."""
        if isinstance(learning_rate, torch.Tensor):
            return K.value_in(learning_rate, dtype)
        return K.cast(float(learning_rate), dtype)

    def _step_count(self) -> int:
        """``it + 1``: the bias-correction step of this update (a group added with its own step count counts
        from when it was added: ``add_param_group(..., step_count="own")``)."""
        return int(self.iterations) + 1 - self.__dict__.get("_group_step_offset", 0)

    #: ``add_param_group(..., step_count="own")`` is applied: every rule's step count is ``_step_count``.
    _group_step_counts = True

    def _after_copy(self) -> None:
        super()._after_copy()
        self._exclude_ids = {id(v) for v in self.__dict__.get("_exclude_vars", [])}

    # ------------------------------------------------------------------------------------------ config
    def get_config(self) -> dict[str, Any]:
        lr = self._learning_rate
        if isinstance(lr, schedules_module.LearningRateSchedule):
            lr_config: Any = schedules_module.serialize(lr)
        elif isinstance(lr, Variable):
            lr_config = float(lr)
        else:
            lr_config = lr
        return {
            "name": self.name,
            "learning_rate": lr_config,
            "weight_decay": self.weight_decay,
            "clipnorm": self.clipnorm,
            "global_clipnorm": self.global_clipnorm,
            "clipvalue": self.clipvalue,
            "use_ema": self.use_ema,
            "ema_momentum": self.ema_momentum,
            "ema_overwrite_frequency": self.ema_overwrite_frequency,
            "loss_scale_factor": self.loss_scale_factor,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            **({"maximize": True} if self.maximize else {}),  # (torch's: Keras refuses it rather than descend)
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any], custom_objects: Optional[Mapping[str, Any]] = None) -> Optimizer:
        checks.check_config_dict(config)
        config = dict(config)
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = schedules_module.deserialize(config["learning_rate"], custom_objects)
        return cls(**config)

    def __repr__(self) -> str:
        return as_written.describe(self, type(self).__name__, self.name)


def _tfkeras_sparse_exact(opt: Any) -> bool:
    """Whether tf-keras 2.11+'s sparse update of ``opt``'s class is, once deduplicated, the Keras 3 class's
    (tests/data/migration4 ``t*``: Adagrad, SGD without Nesterov)."""
    name = type(opt).__name__
    return name == "Adagrad" or (name == "SGD" and not getattr(opt, "nesterov", False))

