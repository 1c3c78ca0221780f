"""The tf.keras legacy ``OptimizerV2`` face: TensorFlow's contract, run by the shared pipeline.

Everything OptimizerV2 users rely on is here: hyperparameters set with ``_set_hyper`` (numbers become float32
"variables"; tensors and callables are read at every step) and readable/assignable as attributes; ``iterations``
created lazily; slots (``add_slot``/``get_slot``); ``weights`` / ``get_weights`` / ``set_weights``;
``minimize`` / ``apply_gradients``; ``get_config`` / ``from_config``; the ``decay`` argument; clipping by value,
norm and global norm followed by ``gradient_transformers``; and the subclassing hooks ``_create_slots``,
``_prepare_local`` (``apply_state``), ``_resource_apply_dense``, ``_resource_apply_sparse``,
``_transform_unaggregated_gradients``, ``_aggregate_gradients`` and ``_transform_gradients``.

One step is ``engine.pipeline.run_step`` running this class's ``_stages``: its stages in order (validation is
``_prepare_pairs``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

import torch
from torch import nn

from .. import schedules as schedules_module
from ..engine import (
    as_written,
    checks,
    clipping,
    compiled_maps,
    constraints,
    gradient_maps,
    gradients,
    group_sync,
    pipeline,
    plan_cache,
    shards,
    step_recipes,
    summation,
)
from ..engine.core import OptimizerCore, Pair, check_gradient_aggregator, count_step
from ..engine.naming import unique_name
from ..engine.pipeline import Call, Step, run_step
from ..engine.plan import Ordinary, plan_of
from ..engine.proof import validation
from ..variables import IndexedSlices, Variable, named_variables
from . import hyperparameters, torch_hooks, updates
from . import weights as slot_weights
from .hyperparameters import (
    Hyperparameter,
    as_scalar,
    is_hyper_value,
    is_number,
    step_scalar,
)
from .updates import ApplyState, grouped_dense

__all__ = ["Optimizer", "OptimizerV2", "ApplyState", "Hyperparameter", "grouped_dense"]

_ALLOWED_KWARGS = ("clipnorm", "clipvalue", "lr", "decay", "global_clipnorm")


def _clip_argument(key: str, doc: str) -> Any:
    """The property of a clip argument (``clipnorm``, ``global_clipnorm``, ``clipvalue``), checked when set."""

    def get(self: Any) -> Optional[float]:
        return self.__dict__.get("_" + key)

    def set_checked(self: Any, value: Optional[float]) -> None:
        self._check_clip(key, value)
        self.__dict__["_" + key] = value

    get.__doc__ = doc
    return property(get, set_checked, doc=doc)


def _clip_and_transform(self: Any, pairs: list[Pair], call: Call) -> list[Pair]:
    """The clipping stage: OptimizerV2's ``_transform_gradients`` hook (subclasses override it)."""
    return self._transform_gradients(pairs)


def _count_iterations(self: Any, pairs: list[Pair], call: Call) -> None:
    self._apply_state = None
    count_step(self.iterations)


def _iterations(self: Any) -> torch.Tensor:
    return self.iterations


class Optimizer(OptimizerCore):
    """Base class of the tf.keras legacy optimizers (``tf.keras.optimizers.legacy.Optimizer``, OptimizerV2).

    A custom optimizer implements ``_create_slots(var_list)`` (calling ``add_slot``), optionally
    ``_prepare_local(var_device, var_dtype, apply_state)`` for per-step coefficients, and
    ``_resource_apply_dense(grad, var, apply_state)`` / ``_resource_apply_sparse(grad, var, indices,
    apply_state)``, which update ``var`` in place (they run under ``torch.no_grad()``). Hyperparameters are
    declared with ``self._set_hyper(name, value)`` and read with ``self._get_hyper(name, dtype)``.

    One ``apply_gradients`` call: drop pairs without a gradient → create ``iterations``, the hyperparameter
    variables and the slots → ``_prepare`` (``lr_t`` = the learning rate, from a schedule called with
    ``float(iterations)`` and divided by ``1 + decay * iterations``) → ``_transform_unaggregated_gradients`` →
    ``_aggregate_gradients`` (``gradient_aggregator``: sums over ``torch.distributed`` processes) →
    ``_transform_gradients`` (clip by value, then norm, then global norm, then each of
    ``gradient_transformers``) → one update per variable (sparse gradients have their duplicate indices summed
    first) → constraints → ``iterations += 1``. Invalid input raises before anything changes.

    Args:
        name: the optimizer's name (its weights are called ``<name>/iter``, ``<name>/<var>/<slot>``).
        gradient_aggregator: ``fn(grads_and_vars) -> grads_and_vars`` run before clipping (default: sum over
            processes when ``torch.distributed`` is initialised with more than one process).
        gradient_transformers: functions ``fn(grads_and_vars) -> grads_and_vars`` run after clipping.
        clipvalue: clips each gradient element to ``[-clipvalue, clipvalue]`` (no clipping may be combined with
            ``gradient_transformers``).
        clipnorm: clips each gradient to this norm (exclusive with ``global_clipnorm``).
        global_clipnorm: clips all gradients together to this global norm.
        decay: inverse-time decay of the learning rate, ``lr / (1 + decay * iterations)``.
        lr: deprecated alias of ``learning_rate`` (read by the subclasses).

    Example:
        >>> import torch, slotopt
        >>> class HalfStep(slotopt.legacy.Optimizer):
        ...     def __init__(self, learning_rate=0.5, name="HalfStep", **kwargs):
        ...         super().__init__(name, **kwargs)
        ...         self._set_hyper("learning_rate", learning_rate)
        ...     def _create_slots(self, var_list):
        ...         for var in var_list:
        ...             self.add_slot(var, "last_step")
        ...     def _resource_apply_dense(self, grad, var, apply_state=None):
        ...         lr = apply_state[(var.device, var.dtype)]["lr_t"]
        ...         step = self.get_slot(var, "last_step")
        ...         step.copy_(grad * lr)
        ...         var.sub_(step)
        >>> w = slotopt.Variable(torch.tensor([1.0, 2.0]), name="w")
        >>> opt = HalfStep()
        >>> int(opt.apply_gradients([(torch.tensor([1.0, 1.0]), w)]))
        1
        >>> w.tolist(), [v.path for v in opt.weights]
        ([0.5, 1.5], ['HalfStep/iter', 'HalfStep/w/last_step'])
    """

    # The face's parts are modules of functions of the optimizer (``self``), not base classes: the class names
    # them as its methods here, and a subclass overrides any of them as usual.
    # legacy/torch_hooks.py: the torch protocol's hooks
    _has_learning_rate = torch_hooks._has_learning_rate
    _configuration_values = torch_hooks._configuration_values
    _hyperparameter_keys = torch_hooks._hyperparameter_keys
    _read_hyperparameter = torch_hooks._read_hyperparameter
    _write_hyperparameter = torch_hooks._write_hyperparameter
    _current_lr = torch_hooks._current_lr
    _write_learning_rate = torch_hooks._write_learning_rate
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
    _load_legacy_format = torch_hooks._load_legacy_format
    # legacy/updates.py: apply_state and the update hooks
    _prepare = updates._prepare
    _prepare_kinds = updates._prepare_kinds
    _prepare_local = updates._prepare_local
    _fallback_apply_state = updates._fallback_apply_state
    _coefficients = updates._coefficients
    _apply_dense_group = updates._apply_dense_group
    _resource_apply_dense = updates._resource_apply_dense
    _resource_apply_sparse_duplicate_indices = updates._resource_apply_sparse_duplicate_indices
    _resource_apply_sparse = updates._resource_apply_sparse
    _resource_scatter_add = staticmethod(updates._resource_scatter_add)
    _resource_scatter_update = staticmethod(updates._resource_scatter_update)
    _lazy_rows = updates._lazy_rows
    # legacy/weights.py: slots and weights
    iterations = slot_weights.iterations
    add_weight = slot_weights.add_weight
    add_slot = slot_weights.add_slot
    get_slot = slot_weights.get_slot
    get_slot_names = slot_weights.get_slot_names
    _create_slots = slot_weights._create_slots
    _create_all_weights = slot_weights._create_all_weights
    build = slot_weights.build
    weights = slot_weights.weights
    variables = slot_weights.variables
    get_weights = slot_weights.get_weights
    set_weights = slot_weights.set_weights
    # legacy/hyperparameters.py: named hyperparameters
    __getattr__ = hyperparameters._hyperparameter_attribute
    __dir__ = hyperparameters._dir_with_hyperparameters
    _set_hyper = hyperparameters._set_hyper
    _get_hyper = hyperparameters._get_hyper
    _create_hypers = hyperparameters._create_hypers
    _serialize_hyperparameter = hyperparameters._serialize_hyperparameter
    _call_if_callable = staticmethod(hyperparameters._call_if_callable)

    #: tf.keras sets this on every built-in optimizer but Ftrl; nothing reads it any more.
    _HAS_AGGREGATE_GRAD = False
    _refuses_repeated_variables = True
    _optional_arguments = checks.OPTIONAL | {"epsilon"}  # tf.keras: ``epsilon or 1e-7``
    _native_torch_spellings = frozenset({"lr"})
    #: Keywords the constructor takes through ``**kwargs`` (its signature shows them: engine/construction.py).
    _keyword_arguments = dict.fromkeys(_ALLOWED_KWARGS)  # tf.keras takes ``lr`` itself (with its deprecation warning)
    _plans_steps = True  # a checked step leaves a plan; the stages above take an ordinary step's shortcuts

    def __init__(
        self,
        name: Optional[str],
        gradient_aggregator: Optional[Callable[[list[Pair]], Any]] = None,
        gradient_transformers: Optional[Sequence[Callable[[list[Pair]], Any]]] = None,
        **kwargs: Any,
    ) -> None:
        object.__setattr__(self, "_hyper", {})
        for key, value in kwargs.items():
            if key not in _ALLOWED_KWARGS:
                raise TypeError(
                    f"Unexpected keyword argument passed to optimizer: {key}. Allowed kwargs are "
                    f"{set(_ALLOWED_KWARGS)}."
                )
            if value is None:
                continue
            if key == "lr":
                if not is_hyper_value(value):
                    raise TypeError(
                        "Argument `lr` must be a number, a scalar tensor, a LearningRateSchedule or a callable. "
                        f"Received: lr={value!r}"
                    )
            elif not is_number(value):
                raise TypeError(f"Argument `{key}` must be a number or None. Received: {key}={value!r}")
            if is_number(value) and value < 0:
                raise ValueError(f"Expected {key} >= 0, received: {value}")
            if is_number(value) or isinstance(value, torch.Tensor):
                checks.check_number(key, value, checks.NONNEGATIVE)
            if key == "lr":
                warnings.warn("The `lr` argument is deprecated, use `learning_rate` instead.", UserWarning,
                              stacklevel=3)
        if gradient_aggregator is not None:  # (through the constructor chain, not the engine's metaclass)
            check_gradient_aggregator(gradient_aggregator, type(self))
        transformers = list(gradient_transformers) if gradient_transformers is not None else []
        if not all(callable(fn) for fn in transformers):
            raise TypeError(
                "Argument `gradient_transformers` must be a list of callables `fn(grads_and_vars) -> "
                f"grads_and_vars`. Received: gradient_transformers={gradient_transformers!r}"
            )
        clipnorm = kwargs.pop("clipnorm", None)
        global_clipnorm = kwargs.pop("global_clipnorm", None)
        clipvalue = kwargs.pop("clipvalue", None)
        if clipnorm is not None and global_clipnorm is not None:
            raise ValueError(
                "Cannot accept both `clipnorm` and `global_clipnorm`. Received: "
                f"`clipnorm`={clipnorm}, `global_clipnorm`={global_clipnorm}."
            )
        for key, value in (("clipnorm", clipnorm), ("global_clipnorm", global_clipnorm), ("clipvalue", clipvalue)):
            if value is not None and transformers:
                self._raise_clip_with_transformers(key, value, transformers)
        decay = kwargs.pop("decay", 0.0)
        decay = 0.0 if decay is None else decay
        if is_number(decay) and decay < 0.0:
            raise ValueError(f"decay cannot be less than 0. Received: decay={decay}.")
        checks.check_number("decay", decay, checks.NONNEGATIVE)

        self._init_core()
        self._name = name if name else unique_name(type(self).__name__)
        self._initial_decay = decay
        self._weights: list[torch.Tensor] = []
        self._slot_names: list[str] = []
        self._iterations: Optional[torch.Tensor] = None
        self._hypers_created = False
        self._hyper_variables: dict[str, Variable] = {}
        self._slots_created_for: set[tuple[int, ...]] = set()
        self._apply_state: Optional[ApplyState] = None
        if gradient_aggregator is not None:
            self.gradient_aggregator = gradient_aggregator
        self.gradient_transformers = transformers
        self._clipnorm = clipnorm
        self._global_clipnorm = global_clipnorm
        self._clipvalue = clipvalue

    # -------------------------------------------------------------------------------------------- attributes
    def __setattr__(self, name: str, value: Any) -> None:
        """``opt.<hyperparameter> = value`` (and ``opt.lr = value``) goes through ``_set_hyper``."""
        if name == "lr":
            name = "learning_rate"
        hyper = self.__dict__.get("_hyper")
        if hyper is not None and name in hyper:
            self._set_hyper(name, value)
            if name == "learning_rate" and self._lr_is_driven():
                self._publish_param_groups()
            elif is_number(value) or isinstance(value, torch.Tensor):
                group_sync.broadcast(self, "lr" if name == "learning_rate" else name, float(value))
            return
        if name == "foreach":
            self.__dict__.get("_group_cache", {}).clear()
        object.__setattr__(self, name, value)
        if name == "epsilon" and "_param_groups" in self.__dict__ and is_number(value):
            group_sync.broadcast(self, name, value)

    @property
    def name(self) -> str:
        return self._name

    # -------------------------------------------------------------------------------------------- clipping
    @staticmethod
    def _raise_clip_with_transformers(key: str, value: Any, transformers: Any) -> None:
        raise ValueError(
            f"`{key}` cannot be set when `gradient_transformers` is set. Instead, use the `gradient_transformers` "
            "to specify clipping and other transformations. Received: "
            f"val={value}, gradient_transformers={transformers}."
        )

    def _check_clip(self, key: str, value: Any) -> None:
        if value is None:
            return
        if self.gradient_transformers:
            self._raise_clip_with_transformers(key, value, self.gradient_transformers)
        if not is_number(value):
            raise TypeError(f"Argument `{key}` must be a number or None. Received: {key}={value!r}")
        if value < 0:
            raise ValueError(f"Expected {key} >= 0, received: {value}")
        checks.check_number(key, value, checks.NONNEGATIVE)

    clipnorm = _clip_argument("clipnorm", "Clips each gradient to this norm (``g * c / max(||g||, c)``); None disables it.")
    global_clipnorm = _clip_argument(
        "global_clipnorm", "Scales all gradients so that their global norm is at most this value; None disables it.")
    clipvalue = _clip_argument("clipvalue", "Clips every gradient element to ``[-clipvalue, clipvalue]``; None disables it.")

    # -------------------------------------------------------------------------------------------- hyperparameters
    def _decayed_lr(self, var_dtype: torch.dtype) -> torch.Tensor:
        """This step's learning rate in ``var_dtype``: the schedule at ``float(iterations)`` (first step: 0),
        then divided by ``1 + decay * iterations`` when ``decay > 0``."""
        lr_t = self._get_hyper("learning_rate", var_dtype)
        if isinstance(lr_t, schedules_module.LearningRateSchedule):
            local_step = step_scalar(self.iterations, var_dtype)
            value = lr_t(local_step)
            checks.check_result("learning_rate", value, self._hyperparameter_ranges)
            lr_t = as_scalar(value, var_dtype)
            self._remember_lr(lr_t)
        if self._initial_decay > 0.0:
            local_step = step_scalar(self.iterations, var_dtype)
            decay_t = as_scalar(self._initial_decay, var_dtype)
            lr_t = lr_t / (1.0 + decay_t * local_step)
        return lr_t

    # -------------------------------------------------------------------------------------------- config
    def get_config(self) -> dict[str, Any]:
        """``{"name"}`` plus the clip arguments that are set; subclasses add their hyperparameters."""
        config: dict[str, Any] = {"name": self._name}
        if self.clipnorm is not None:
            config["clipnorm"] = self.clipnorm
        if self.clipvalue is not None:
            config["clipvalue"] = self.clipvalue
        if self.global_clipnorm is not None:
            config["global_clipnorm"] = self.global_clipnorm
        if self.maximize:  # (torch's; tf.keras has none, and refuses such a config rather than descend)
            config["maximize"] = True
        return config

    #: One step, in OptimizerV2's ``apply_gradients`` order (engine/pipeline.py runs it in one all-or-nothing frame).
    _stages = Step(
        pipeline.drop_missing_gradients,
        pipeline.negate_gradients,  # maximize=True (torch's): the gradients of the negated loss
        pipeline.UPDATE,
        pipeline.aggregate_across_processes,  # _transform_unaggregated_gradients, _aggregate_gradients
        _clip_and_transform,  # the hook _transform_gradients: clip by value, norm, global norm, transformers
        pipeline.FIRST_WRITE,  # (the learning rate and ``apply_state`` were prepared with the checks)
        updates.apply_updates,
        pipeline.AFTER,
        constraints.apply_constraints,
        _count_iterations,
        result=_iterations,
    )

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects: Optional[dict[str, Any]] = None) -> Optimizer:
        """Recreates an optimizer from ``get_config()`` (``lr`` is renamed, a schedule dict deserialized)."""
        checks.check_config_dict(config)
        config = dict(config)
        if "lr" in config:
            config["learning_rate"] = config.pop("lr")
        if isinstance(config.get("learning_rate"), dict):
            config["learning_rate"] = schedules_module.deserialize(config["learning_rate"],
                                                                   custom_objects=custom_objects)
        return cls(**config)

    # -------------------------------------------------------------------------------------------- apply
    def apply_gradients(self, grads_and_vars: Iterable[tuple[Any, torch.Tensor]], name: Optional[str] = None,
                        experimental_aggregate_gradients: bool = True) -> Optional[torch.Tensor]:
        """Applies ``(gradient, variable)`` pairs and returns ``iterations`` (None when the list is empty).

        Gradients may be dense tensors, ``IndexedSlices``, torch sparse COO row gradients or None (skipped).
        With ``experimental_aggregate_gradients=False`` the gradients are taken as already aggregated across
        processes (``_transform_unaggregated_gradients`` and ``_aggregate_gradients`` are skipped).
        """
        return run_step(self, grads_and_vars, name=name,
                        experimental_aggregate_gradients=bool(experimental_aggregate_gradients))

    def minimize(self, loss: Any, var_list: Any, grad_loss: Optional[torch.Tensor] = None,
                 name: Optional[str] = None, tape: Any = None) -> Optional[torch.Tensor]:
        """Computes the gradients of ``loss`` for ``var_list`` and applies them.

        ``loss`` is a no-argument callable or a tensor computed with autograd (the graph plays the role of
        TensorFlow's tape; ``tape`` is accepted and ignored). ``var_list`` is a list of variables, a module, or a
        no-argument callable returning them (called after ``loss``).
        """
        grads_and_vars = self._compute_gradients(loss, var_list=var_list, grad_loss=grad_loss, tape=tape)
        return self.apply_gradients(grads_and_vars, name=name)

    def _compute_gradients(self, loss: Any, var_list: Any, grad_loss: Optional[torch.Tensor] = None,
                           tape: Any = None) -> list[tuple[Optional[torch.Tensor], torch.Tensor]]:
        is_function = callable(loss) and not isinstance(loss, torch.Tensor)
        # tf-keras watches a var_list given as a list (a callable one is called after the loss, which may create
        # its variables).
        given = not (callable(var_list) and not isinstance(var_list, (nn.Module, torch.Tensor)))
        with gradients.watching([v for _, v in named_variables(var_list)] if is_function and given else None):
            if is_function:
                with torch.enable_grad():
                    loss = loss()
            if not given:
                var_list = var_list()
            named = named_variables(var_list)
            self._register(named)
            variables = [v for _, v in named]
            loss = self._transform_loss(loss)
            if isinstance(loss, torch.Tensor) and loss.grad_fn is None:
                # A loss with no graph does not depend on any variable: tf-keras's tape gives None for each (and
                # apply_gradients then says no gradient was provided, or does nothing for an empty var_list).
                return [(None, v) for v in variables]
            grads = gradients.gradients_of(loss, variables, grad_loss)
        return list(zip(grads, variables))

    def _transform_loss(self, loss: Any) -> Any:
        """Called by ``minimize`` on the loss before differentiating it."""
        return loss


    # -------------------------------------------------------------------------------------------- stages
    def _prepare_pairs(self, grads_and_vars: Any, **options: Any) -> Optional[list[Pair]]:
        """Validates every pair, creates the weights and computes ``apply_state``; raises before any change."""
        if isinstance(grads_and_vars, (torch.Tensor, str, bytes)) or not isinstance(grads_and_vars, Iterable):
            raise TypeError(
                "Argument `grads_and_vars` must be an iterable of (gradient, variable) pairs. "
                f"Received: grads_and_vars={grads_and_vars!r}"
            )
        pairs = grads_and_vars if plan_of(grads_and_vars) is not None else list(grads_and_vars)
        ordinary = plan_cache.planned_step(self, pairs) if "_pending_torch_state" not in self.__dict__ else None
        if ordinary is not None:  # the variables and gradients of the last step's kind (engine/plan.py)
            return self._prepare_ordinary(ordinary)
        checked: list[Pair] = []
        seen: set[int] = set()
        for i, item in enumerate(pairs):
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise TypeError(
                    f"Argument `grads_and_vars` must hold (gradient, variable) pairs. Received at index {i}: {item!r}"
                )
            grad, var = item
            if not isinstance(var, torch.Tensor):
                raise TypeError(
                    f"Argument `grads_and_vars` holds a variable that is not a tensor at index {i}: {var!r}"
                )
            if grad is not None and not var.is_leaf:  # a computed tensor, not a variable: tf.keras's error
                raise NotImplementedError(f"Updating a `Tensor` is not implemented. Received: var={var}.")
            if id(var) in seen:
                raise ValueError(
                    f"Variable {self._name_of(var)} appears more than once in `grads_and_vars`; sum its "
                    "gradients first."
                )
            seen.add(id(var))
            checked.append((grad, var))
        checked = validation.checked_pairs(self, checked)
        present = [(g, v) for g, v in checked if g is not None]
        if checked and not present:
            raise ValueError(
                f"No gradients provided for any variable: {([self._name_of(v) for _, v in checked],)}. "
                f"Provided `grads_and_vars` is {tuple((g, self._name_of(v)) for g, v in checked)}."
            )
        constraints.reject_sparse_constraints(
            present,
            lambda grad, constraint: "Cannot use a constraint function on a sparse variable. Received: "
                                     f"grad={grad}, var.constraint={constraint}.",
        )
        self._check_supported(present)
        if len(present) != len(checked):
            missing = [self._name_of(v) for g, v in checked if g is None]
            warnings.warn(
                f"Gradients do not exist for variables {missing} when minimizing the loss. If you're using "
                "`model.compile()`, did you forget to provide a `loss` argument?",
                stacklevel=4,
            )
        # The callables' values first: one that raises or returns NaN leaves no slot or iteration behind.
        self.__dict__["_step_values"] = self._evaluate_callable_hypers()
        try:
            self._create_all_weights([v for _, v in present])
            if not present:
                return None
            self._apply_state = self._prepare([v for _, v in present])
        finally:
            self.__dict__["_step_values"] = None
        return checked

    def _prepare_ordinary(self, ordinary: Ordinary) -> Ordinary:
        """What the full path does after its checks, for a step its plan vouches for: every variable known, listed
        once, with a dense gradient of its dtype, shape and device (so no warning, no sparse refusal)."""
        plan = ordinary.plan
        self.__dict__["_step_values"] = self._evaluate_callable_hypers()
        try:
            _ = self.iterations  # (what ``_create_all_weights`` does for variables whose slots exist)
            self._create_hypers()
            # (a subclass's own ``_prepare``, as Nadam's, sees the variables as on the full path)
            self._apply_state = self._prepare_kinds(plan.kinds) if type(self)._prepare is Optimizer._prepare \
                else self._prepare(plan.variables)
        finally:
            self.__dict__["_step_values"] = None
        return ordinary

    def _evaluate_callable_hypers(self) -> dict[str, Any]:
        """Each no-argument callable hyperparameter called once and its value checked (``_get_hyper`` reuses it
        for this step's coefficients)."""
        values = {}
        for name, value in self._hyper.items():
            if callable(value) and not isinstance(value, (torch.Tensor, schedules_module.LearningRateSchedule)):
                result = value()
                checks.check_result(name, result, self._hyperparameter_ranges)
                values[name] = result
        return values

    def _check_supported(self, pairs: list[Pair]) -> None:
        """A subclass without ``_resource_apply_sparse`` (or ``_dense``) cannot take such gradients."""
        cls = type(self)
        for grad, var in pairs:
            sparse = isinstance(grad, IndexedSlices)
            if sparse and cls._resource_apply_sparse is Optimizer._resource_apply_sparse and \
                    cls._resource_apply_sparse_duplicate_indices is Optimizer._resource_apply_sparse_duplicate_indices:
                raise NotImplementedError(
                    f"{cls.__name__} does not implement `_resource_apply_sparse`, so it cannot apply the sparse "
                    f"gradient of variable {self._name_of(var)}."
                )
            if not sparse and cls._resource_apply_dense is Optimizer._resource_apply_dense:
                raise NotImplementedError(
                    f"{cls.__name__} does not implement `_resource_apply_dense`, so it cannot apply the dense "
                    f"gradient of variable {self._name_of(var)}."
                )

    def _transform_gradients(self, grads_and_vars: list[Pair]) -> list[Pair]:
        """Clips by value, then by norm, then by global norm, then runs each ``gradient_transformers`` fn."""
        if self._clipvalue is None and self._clipnorm is None and self._global_clipnorm is None \
                and not self.gradient_transformers:
            return grads_and_vars  # as they are (an ``Ordinary`` step stays one)
        pairs = grads_and_vars
        done = compiled_maps.mapped(self, pairs, "clip", clipvalue=self._clipvalue, clipnorm=self._clipnorm,
                                    global_clipnorm=self._global_clipnorm)  # (an ordinary step: compiled passes)
        if done is not None:
            pairs = done
        elif self._clipvalue is not None:
            pairs = clipping.map_gradient_values(pairs, lambda grads: clipping.clip_by_value(grads, self._clipvalue))
        orders = summation.orders_of(self, pairs)  # issue 49: sums in TF's order of a variable's layout
        if self._clipnorm is not None and done is None:
            spans = shards.shard_groups_of(self, pairs)
            pairs = clipping.map_gradient_values(
                pairs, lambda grads: clipping.clip_by_norm(grads, self._clipnorm, spans, orders))
        if self._global_clipnorm is not None and done is None:
            pairs = clipping.map_gradient_values(
                pairs, lambda grads: clipping.clip_by_global_norm(grads, self._global_clipnorm,
                                                                  shards.shard_groups_of(self, pairs), orders=orders))
        for fn in self.gradient_transformers:
            # (a transformer's result is checked as any step's: an ordinary step of the plan only where it fits)
            pairs = gradient_maps.replaced_pairs(pairs, fn(list(pairs)))
        return pairs

    def __repr__(self) -> str:
        return as_written.describe(self, f"slotopt.legacy.{type(self).__name__}", self._name)


#: tf.keras's name for the same class.
OptimizerV2 = Optimizer
