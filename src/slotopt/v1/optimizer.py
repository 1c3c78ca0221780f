"""The TF1 ``tf.compat.v1.train.Optimizer`` face, run by the shared pipeline (``engine/pipeline.py``).

TF1 semantics kept here (spec ``tf1_optimizers.md`` §1):

* no step counter of its own; an optional user ``global_step`` (an integer tensor) is incremented after every
  update and after ``_finish``;
* hyperparameters are converted on every ``apply_gradients`` call (``_prepare``): a Python float becomes a
  float32 scalar first, so a float64 variable sees ``float64(float32(x))`` (§0.4);
* slots are created lazily, only for variables that have a gradient in the current call;
* the subclass contract is TF1's: ``_create_slots``, ``_prepare``, ``_apply_dense``, ``_apply_sparse`` (and the
  ``_resource_apply_*`` twins), ``_finish``.

Everything is validated before anything changes: a call that raises leaves variables, slots and
``global_step`` as they were.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional, Union

import numpy as np
import torch

from ..engine import (
    as_written,
    checks,
    constraints,
    gradients,
    limits,
    pipeline,
    plan_cache,
    state_io,
    step_recipes,
)
from ..engine.core import OptimizerCore, Pair, Pairs, count_step
from ..engine.eager import outside_dynamo
from ..engine.pipeline import Call, Step, run_step
from ..engine.plan import plan_of
from ..engine.proof import unchanged, validation
from ..engine.writing import transaction
from ..variables import IndexedSlices, Variable, as_indexed_slices, is_sparse, variable_name
from . import hooks, torch_hooks
from . import state as named_state
from .config import constructor_config, from_constructor_config
from .state import cast, check_hyperparameter, convert_to_tensor
from .torch_hooks import argument_name

__all__ = ["Optimizer", "InvalidArgumentError", "GATE_NONE", "GATE_OP", "GATE_GRAPH"]

GATE_NONE = 0
GATE_OP = 1
GATE_GRAPH = 2

_VALID_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_VALID_DTYPES_TEXT = "[torch.float32, torch.float64, torch.float16, torch.bfloat16]"

Loss = Union[Callable[[], torch.Tensor], torch.Tensor]


class InvalidArgumentError(ValueError):
    """TensorFlow's ``tf.errors.InvalidArgumentError``: a kernel rejected an argument's value at apply time."""


class Optimizer(OptimizerCore):
    """Base class of the TF1 optimizers (``tf.compat.v1.train.Optimizer``), on PyTorch tensors.

    Subclasses implement TF1's hooks. ``_create_slots(var_list)`` creates per-variable state with
    ``_zeros_slot`` / ``_get_or_make_slot``; ``_prepare()`` converts hyperparameters once per call;
    ``_apply_dense(grad, var)`` updates one variable in place from a dense gradient and
    ``_apply_sparse(grad, var)`` from an ``IndexedSlices`` whose indices are unique (duplicates are summed
    first). ``_resource_apply_dense(grad, handle)`` / ``_resource_apply_sparse(grad, handle, indices)`` are
    the resource-variable spellings; by default they call the former, so either family is enough.
    ``_finish(update_ops, name)`` runs once after every variable of a call was updated.

    ``apply_gradients(grads_and_vars, global_step=None)`` runs one step: validation, slot creation,
    ``_prepare``, the update of every variable that has a gradient (in order), its constraint (dense
    gradients only), ``_finish``, then ``global_step += 1``.

    Args:
        use_locking: accepted for compatibility; it has no effect (updates are never concurrent here).
        name: non-empty; used to name slot variables (``"<var>/<name>"``).
        use_own_namescope_for_non_slot_vars: name non-slot variables ``"<name>/<var>"`` (names only).

    Example:
        >>> import torch, slotopt
        >>> class PlainSGD(slotopt.v1.Optimizer):
        ...     def __init__(self, lr):
        ...         super().__init__(False, "PlainSGD")
        ...         self._lr = lr
        ...     def _apply_dense(self, grad, var):
        ...         var.sub_(grad * self._lr)
        >>> w = slotopt.Variable(torch.ones(2), name="w")
        >>> step = slotopt.Variable(0, name="global_step", dtype=torch.int64)
        >>> PlainSGD(0.5).apply_gradients([(torch.ones(2), w)], global_step=step)
        >>> w.tolist(), int(step)
        ([0.5, 0.5], 1)
    """

    # The face's parts are modules of functions of the optimizer (``self``), not base classes: the class names
    # them as its methods here, and a subclass overrides any of them as usual.
    # v1/hooks.py: TF1's subclass hooks and their defaults
    _create_slots = hooks._create_slots
    _prepare = hooks._prepare
    _finish = hooks._finish
    _resource_apply_dense = hooks._resource_apply_dense
    _apply_dense = hooks._apply_dense
    _resource_apply_sparse_duplicate_indices = hooks._resource_apply_sparse_duplicate_indices
    _apply_sparse_duplicate_indices = hooks._apply_sparse_duplicate_indices
    _resource_apply_sparse = hooks._resource_apply_sparse
    _apply_sparse = hooks._apply_sparse
    _dense_update = hooks._dense_update
    _sparse_update = hooks._sparse_update
    # v1/torch_hooks.py: the torch protocol's hooks
    _add_variables = torch_hooks._add_variables
    _configuration_values = torch_hooks._configuration_values
    _check_configuration = torch_hooks._check_configuration
    _check_hyperparameter = torch_hooks._check_hyperparameter
    _has_learning_rate = torch_hooks._has_learning_rate
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
    _state_variables = torch_hooks._state_variables
    _call_if_callable = staticmethod(torch_hooks._call_if_callable)
    # v1/state.py: slots and non-slot variables named the TF1 way
    _zeros_slot = named_state._zeros_slot
    _get_or_make_slot = named_state._get_or_make_slot
    _get_or_make_slot_with_initializer = named_state._get_or_make_slot_with_initializer
    get_slot = named_state.get_slot
    get_slot_names = named_state.get_slot_names
    _create_non_slot_variable = named_state._create_non_slot_variable
    _get_non_slot_variable = named_state._get_non_slot_variable
    _non_slot_variables = named_state._non_slot_variables
    variables = named_state.variables
    _load_legacy_format = named_state._load_legacy_format

    _negative_lr_allowed = True  # TF1 applies a negative rate as given (gradient ascent)

    GATE_NONE = GATE_NONE
    GATE_OP = GATE_OP
    GATE_GRAPH = GATE_GRAPH

    #: Names of the slots a built-in's kernel reads, in kernel argument order (built-ins only).
    _kernel_slots: tuple[str, ...] = ()
    _plans_steps = True  # a checked step leaves a plan; the stages above take an ordinary step's shortcuts
    #: Variable dtypes TensorFlow registers the optimizer's kernels for.
    _supported_dtypes: tuple[torch.dtype, ...] = _VALID_DTYPES

    def __init__(self, use_locking: bool, name: str, use_own_namescope_for_non_slot_vars: bool = False) -> None:
        if not name:
            raise ValueError("Must specify the optimizer name")
        self._init_core()
        self._use_locking = use_locking
        self._name = name
        self._use_own_namescope_for_non_slot_vars = use_own_namescope_for_non_slot_vars
        self._non_slot_dict: dict[str, Variable] = {}
        self._state_names: set[str] = set()
        self._unnamed_count = 0
        self._update_ops: list[Any] = []
        self._constraints_done = False
        self._pending_state: dict[str, torch.Tensor] = {}

    def get_name(self) -> str:
        return self._name

    # ------------------------------------------------------------------------------------------ minimize
    def minimize(
        self,
        loss: Loss,
        global_step: Optional[torch.Tensor] = None,
        var_list: Any = None,
        gate_gradients: int = GATE_OP,
        aggregation_method: Any = None,
        colocate_gradients_with_ops: bool = False,
        name: Optional[str] = None,
        grad_loss: Any = None,
    ) -> None:
        """``compute_gradients`` then ``apply_gradients``. Returns None (TF1 eager behaviour)."""
        grads_and_vars = self.compute_gradients(loss, var_list=var_list, gate_gradients=gate_gradients,
                                                aggregation_method=aggregation_method,
                                                colocate_gradients_with_ops=colocate_gradients_with_ops,
                                                grad_loss=grad_loss)
        if not [v for g, v in grads_and_vars if g is not None]:
            raise ValueError(
                "No gradients provided for any variable, check your graph for ops that do not support gradients, "
                f"between variables {[str(v) for _, v in grads_and_vars]} and loss {loss}.")
        return self.apply_gradients(grads_and_vars, global_step=global_step, name=name)

    def compute_gradients(
        self,
        loss: Loss,
        var_list: Any = None,
        gate_gradients: int = GATE_OP,
        aggregation_method: Any = None,
        colocate_gradients_with_ops: bool = False,
        grad_loss: Any = None,
    ) -> list[tuple[Optional[torch.Tensor], torch.Tensor]]:
        """``[(gradient, variable), ...]`` for ``loss``; the gradient is ``None`` for a variable it does not use.

        ``loss`` is a no-argument callable (TF1 eager) or a tensor computed with autograd on (TF1 graph mode).
        Without ``var_list``: for a callable, the trainable tensors it reads, in first-access order (TF's
        ``tape.watched_variables()``); for a tensor, the trainable leaves of its autograd graph in the order the
        forward pass first used them (TF1 graph mode takes every trainable variable of the graph; variables the
        loss does not use cannot be seen from a tensor, so they are not listed). ``grad_loss`` is the output
        gradient (``grad_loss=3.0`` triples every gradient).
        ``aggregation_method`` and ``colocate_gradients_with_ops`` have no effect; ``gate_gradients`` must be
        ``GATE_NONE``, ``GATE_OP`` or ``GATE_GRAPH`` (TF1 checks it for a tensor loss only). A tensor loss's
        graph is freed by the call.
        """
        # TF1 checks ``gate_gradients`` in graph mode only (eager accepts 7); slotopt refuses it on both paths,
        # with TF1's graph-mode message, rather than accept a value that means nothing.
        if gate_gradients not in (GATE_NONE, GATE_OP, GATE_GRAPH):
            raise ValueError(
                "gate_gradients must be one of: Optimizer.GATE_NONE, Optimizer.GATE_OP, "
                f"Optimizer.GATE_GRAPH.  Not {gate_gradients}")
        is_function = callable(loss) and not isinstance(loss, torch.Tensor)
        if not is_function:
            if not isinstance(loss, torch.Tensor) or loss.grad_fn is None:
                raise RuntimeError(
                    "`loss` passed to Optimizer.compute_gradients should be a function when eager execution is "
                    "enabled. (A tensor is accepted only when it was computed with autograd recording, i.e. "
                    f"it has a grad_fn.) Received: loss={loss!r}")
            self._assert_valid_dtypes([loss], "loss")
            if isinstance(grad_loss, torch.Tensor):
                self._assert_valid_dtypes([grad_loss], "grad_loss")

        variables = None if var_list is None else gradients.resolve_var_list(var_list)
        with gradients.watching(variables if is_function else None):  # TF's tape.watch(var_list)
            if is_function:
                if variables is None:
                    value, variables = gradients.run_watching(loss)
                else:
                    with torch.enable_grad():
                        value = loss()
            else:
                value = loss
                if variables is None:
                    variables = gradients.graph_leaves(value)
                if not variables:
                    raise ValueError("No variables to optimize.")
            grads_by_id = gradients.differentiate(value, variables, grad_loss)
        pairs = [(grads_by_id.get(id(v)), v) for v in variables]
        if not is_function:
            self._assert_valid_dtypes([v for g, v in pairs if g is not None], "variable")
        return pairs

    @staticmethod
    def _assert_valid_dtypes(tensors: Sequence[torch.Tensor], what: str) -> None:
        for t in tensors:
            if t.dtype not in _VALID_DTYPES:
                label = variable_name(t, what)
                raise ValueError(f"Invalid type {t.dtype} for {label}, expected: {_VALID_DTYPES_TEXT}.")

    # ------------------------------------------------------------------------------------------ apply
    @outside_dynamo  # eager under torch.compile, as run_step (it sets the apply name)
    def apply_gradients(self, grads_and_vars: Pairs, global_step: Optional[torch.Tensor] = None,
                        name: Optional[str] = None, skip_gradients_aggregation: bool = False) -> None:
        """Applies one step of ``(gradient, variable)`` pairs; ``None`` gradients are skipped.

        ``global_step`` (an integer scalar tensor, e.g. ``slotopt.Variable(0, dtype=torch.int64)``) is
        incremented by one after every update and after ``_finish``. Returns None (TF1 eager behaviour).
        ``skip_gradients_aggregation=True``: the gradients are aggregated across processes already (the
        optimizer's ``gradient_aggregator``, if it was given one, does not run for this call).
        """
        self._apply_name = name or self._name
        return run_step(self, grads_and_vars, global_step=global_step,
                        skip_gradients_aggregation=skip_gradients_aggregation)

    def _prepare_pairs(self, grads_and_vars: Pairs, global_step: Optional[torch.Tensor] = None,
                       **options: Any) -> Optional[list[Pair]]:
        pairs = grads_and_vars if plan_of(grads_and_vars) is not None else tuple(grads_and_vars)
        if not pairs:
            raise ValueError("No variables provided.")
        ordinary = plan_cache.planned_step(self, pairs)
        if ordinary is not None and not self._pending_state and "_pending_torch_state" not in self.__dict__:
            # The variables and gradients of the last step's kind (engine/plan.py): registered, with their slots
            # and a dense gradient of their dtype, shape and device; what remains is this call's own checks.
            self._check_global_step(global_step)
            self._prepare()
            self._check_prepared(ordinary)
            self._update_ops = []
            self._constraints_done = False
            return ordinary
        converted: list[Pair] = []
        for i, item in enumerate(pairs):
            if not (isinstance(item, (tuple, list)) and len(item) == 2):
                raise TypeError(
                    f"`grads_and_vars` must contain (gradient, variable) pairs. Received at position {i}: {item!r}")
            grad, var = item
            if not isinstance(var, torch.Tensor):
                raise NotImplementedError("Trying to optimize unsupported type ", var)
            if grad is not None:
                if not var.is_leaf:
                    raise NotImplementedError("Trying to update a Tensor ", var)
                grad = self._convert_gradient(grad, var)
            converted.append((grad, var))
        var_list = [v for g, v in converted if g is not None]
        if not var_list:
            raise ValueError(f"No gradients provided for any variable: {[str(v) for _, v in converted]}.")
        unchanged.check_variables_unchanged(self, converted)
        for i, (grad, var) in enumerate(converted):
            if grad is None:
                continue
            where = variable_name(var, "variable")
            self._assert_valid_dtypes([var], "variable")
            if var.dtype not in self._supported_dtypes:
                raise TypeError(
                    f"{type(self).__name__} supports variables of dtype {list(self._supported_dtypes)} only "
                    f"(TensorFlow registers no kernel for others). Received: variable {where} of dtype {var.dtype}")
            converted[i] = (validation.check_gradient(grad, var, where), var)
        constraints.reject_sparse_constraints(
            converted, lambda g, c: "Cannot use a constraint function on a sparse variable.")
        self._check_global_step(global_step)

        saved = self._snapshot()
        try:
            for var in var_list:
                self._register_variable(var)
            self._create_slots(var_list)
            state_io.apply_pending_torch_state(self)
            self._prepare()
            self._check_prepared([(g, v) for g, v in converted if g is not None])
        except BaseException:
            self._restore(saved)
            raise
        self._update_ops = []
        self._constraints_done = False
        return converted

    def _convert_gradient(self, grad: Any, var: torch.Tensor) -> Any:
        if isinstance(grad, IndexedSlices):
            return grad
        if isinstance(grad, torch.Tensor):
            return as_indexed_slices(grad) if is_sparse(grad) else grad
        try:
            dtype = var.dtype if var.dtype in _VALID_DTYPES else None
            return torch.as_tensor(np.asarray(grad), dtype=dtype, device=var.device)
        except (TypeError, ValueError, RuntimeError) as err:
            raise TypeError(f"Gradient must be convertible to a Tensor or IndexedSlices, or None: {grad}") from err

    @staticmethod
    def _check_global_step(global_step: Any) -> None:
        if global_step is None:
            return
        if not isinstance(global_step, torch.Tensor) or global_step.dtype.is_floating_point \
                or global_step.dtype.is_complex or global_step.dtype == torch.bool or global_step.dim() != 0:
            raise TypeError(
                "Argument `global_step` must be an integer scalar tensor that can be incremented in place, e.g. "
                "slotopt.Variable(0, name='global_step', dtype=torch.int64). "
                f"Received: global_step={global_step!r}")

    def _check_prepared(self, pairs: list[Pair]) -> None:
        """Hook: validates the converted hyperparameters against this call's gradients (kernel checks)."""

    def _register_variable(self, var: torch.Tensor) -> int:
        pos = self._position(var)
        if pos is not None:
            return pos
        name = getattr(var, "name", None)
        if not (isinstance(name, str) and name):
            name = "Variable" if self._unnamed_count == 0 else f"Variable_{self._unnamed_count}"
            self._unnamed_count += 1
        return self._register([(name.split(":")[0], var)])[0]

    def _snapshot(self) -> tuple[Any, ...]:
        groups = [dict(g, params=list(g["params"])) for g in self._param_groups]
        return ({k: dict(d) for k, d in self._slots.items()}, dict(self._non_slot_dict), set(self._state_names),
                len(self._vars), self._unnamed_count, dict(self._pending_state),
                (groups, [dict(p) for p in self._published], self.__dict__.get("_pending_torch_state")))

    def _restore(self, saved: tuple[Any, ...]) -> None:
        slots, non_slot, names, count, unnamed, pending, (groups, published, pending_torch) = saved
        self._pending_state = pending
        self._param_groups[:] = groups  # the same list object: a composite's view of it stays valid
        self._published[:] = published
        if pending_torch is not None:
            self.__dict__["_pending_torch_state"] = pending_torch
        self._slots = slots
        self._non_slot_dict = non_slot
        self._state_names = names
        for var in self._vars[count:]:
            self._var_index.pop(id(var), None)
        del self._vars[count:]
        self._taken_names.difference_update(self._var_names[count:])
        del self._var_names[count:]
        self._unnamed_count = unnamed
        self._group_cache.clear()

    # ------------------------------------------------------------------------------------------ update stages
    def _apply_updates(self, pairs: list[Pair], call: Call) -> None:
        ops = self._update_ops
        vars_seen: set[int] = set()
        repeated = False
        plan = pairs.plan
        if plan is None:  # (an ordinary step lists each variable once)
            for _, v in pairs:
                repeated = repeated or id(v) in vars_seen
                vars_seen.add(id(v))
        fused = (not repeated and type(self)._dense_update is not Optimizer._dense_update
                 and type(self)._apply_dense is Optimizer._apply_dense
                 and type(self)._resource_apply_dense is Optimizer._resource_apply_dense)
        if fused and plan is not None:
            # its groups, their variables and the gradients' addresses, read once, and the slots' (``_slot_lists``)
            self.__dict__["_updating_plan"] = plan
            try:
                for group in plan.groups:
                    self._dense_update(plan.group_params(group, self._vars), pairs.gradients(group),
                                       self._slot_lists(self._kernel_slots, group))
            finally:
                self.__dict__["_updating_plan"] = None
            return
        if fused:
            by_pos = {self._position(v): validation.dense(g, v) for g, v in pairs if not isinstance(g, IndexedSlices)}
            for group in self._groups(list(by_pos)):
                self._dense_update([self._vars[p] for p in group], [by_pos[p] for p in group],
                                   self._slot_lists(self._kernel_slots, group))
            for g, v in pairs:
                if isinstance(g, IndexedSlices):
                    ops.append(self._resource_apply_sparse_duplicate_indices(g.values, v, g.indices))
            return
        for g, v in pairs:
            if isinstance(g, IndexedSlices):
                ops.append(self._resource_apply_sparse_duplicate_indices(g.values, v, g.indices))
                continue
            ops.append(self._resource_apply_dense(validation.dense(g, v), v))
            if repeated and getattr(v, "constraint", None) is not None:
                constraints.constrain(self, v)
        self._constraints_done = repeated

    def _apply_constraints(self, pairs: Sequence[Pair], call: Call) -> None:
        if not self._constraints_done:  # (a variable listed twice was constrained after each of its updates)
            constraints.apply_constraints(self, pairs, call)

    def _finish_step(self, pairs: list[Pair], call: Call) -> None:
        global_step = call.options.get("global_step")
        if global_step is None:
            self._finish(self._update_ops, self._apply_name)
        else:
            self._finish(self._update_ops, "update")
            count_step(global_step)
        self._update_ops = []

    #: One step, in TF1's ``apply_gradients`` order (engine/pipeline.py runs it in one all-or-nothing frame).
    _stages = Step(
        pipeline.drop_missing_gradients,
        pipeline.negate_gradients,  # maximize=True (torch's): the gradients of the negated loss
        pipeline.UPDATE,
        pipeline.aggregate_across_processes,
        pipeline.FIRST_WRITE,  # (the hyperparameters were converted by ``_prepare`` with the checks)
        _apply_updates,  # each variable in order (a variable listed twice: twice)
        pipeline.AFTER,
        _apply_constraints,
        _finish_step,  # ``_finish``, then global_step += 1
        result=pipeline.none,
    )

    # ------------------------------------------------------------------------------------------ torch protocol
    # The hooks of ``engine/torch_protocol.py``: a group carries the constructor's hyperparameters (TF1 names).
    def build(self, var_list: Any) -> None:
        """Creates the slots of ``var_list`` (a module, tensors, named pairs or torch param-group dicts) now, as
        the first ``apply_gradients`` would; ``step()`` then applies their ``.grad``."""
        saved = transaction.snapshot(self)
        try:
            positions = self._register(var_list)
            variables = [self._vars[p] for p in positions]
            self._assert_valid_dtypes(variables, "variable")
            self._create_slots(variables)
            state_io.apply_pending_torch_state(self)
        except BaseException:
            transaction.restore(self, saved)  # no slot is left behind by a build that raised
            raise

    def __repr__(self) -> str:
        return as_written.describe(self, f"slotopt.v1.{type(self).__name__}", self._name)


class BuiltinOptimizer(Optimizer):
    """Shared plumbing of the built-in TF1 optimizers: hyperparameter conversion and per-dtype constants.

    ``_hyper`` maps each hyperparameter name to its constructor value; ``_callable_hypers`` says whether
    callables are allowed (TF1 calls them in ``_prepare``). ``_prepare`` converts every value with
    ``convert_to_tensor``; ``self._t(name, dtype)`` is the converted value cast to ``dtype``.
    """

    _callable_hypers: bool = True

    def __init__(self, use_locking: bool, name: str, hyper: dict[str, Any], **kwargs: Any) -> None:
        super().__init__(use_locking, name, **kwargs)
        for key, value in hyper.items():
            check_hyperparameter(value, argument_name(key), self._callable_hypers)
        self._hyper = dict(hyper)
        self._prepared: dict[str, torch.Tensor] = {}
        self._cast_cache: dict[tuple[str, torch.dtype], float] = {}

    def _prepare(self) -> None:
        prepared = {}
        for key, value in self._hyper.items():
            if self._callable_hypers and callable(value) and not isinstance(value, torch.Tensor):
                value = value()
                checks.check_result(key, value, {key: self._hyperparameter_ranges.get(key, checks.ANY)})
            prepared[key] = convert_to_tensor(value, key)
        self._prepared = prepared
        if self._lr_is_driven():
            self._remember_lr(prepared["learning_rate"])
        self._cast_cache = {}

    def _t(self, key: str, dtype: torch.dtype) -> float:
        """The hyperparameter converted in ``_prepare`` and cast to ``dtype`` (TF's ``math_ops.cast``)."""
        cached = self._cast_cache.get((key, dtype))
        if cached is None:
            cached = self._cast_cache[(key, dtype)] = cast(self._prepared[key], dtype)
        return cached

    def get_config(self) -> dict[str, Any]:
        """The constructor arguments (``slotopt.v1.config``; TF1 has no config: a slotopt extension)."""
        return constructor_config(self)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], custom_objects: Optional[Mapping[str, Any]] = None) -> Any:
        """The optimizer ``get_config()`` describes (plain data only; nothing in it is imported or called)."""
        limits.check_config_entries(config)  # each entry named, before any repr of it
        return from_constructor_config(cls, config)

    def _check_positive(self, pairs: list[Pair], checks: Sequence[tuple[str, str, str]]) -> None:
        """Kernel-side checks ``(hyper, 'positive' | 'non-negative' | 'non-positive', message)`` per dtype."""
        for dtype in {v.dtype for _, v in pairs}:
            for key, kind, message in checks:
                value = self._t(key, dtype)
                ok = {"positive": value > 0, "non-negative": value >= 0, "non-positive": value <= 0}[kind]
                if not ok:
                    raise InvalidArgumentError(f"{message}[] (received {argument_name(key)}={value})")
