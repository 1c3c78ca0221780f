"""``OptimizerCore``: variables, slots, grouping and gradient intake shared by every generation.

A face (Keras 3, legacy, TF1) subclasses this and overrides the stage methods that ``run_step`` calls. The core
owns no algorithm: it keeps track of the variables it was given, stores their state ("slots") keyed by the
variable's position, groups variables by (device, dtype) for multi-tensor kernels, normalises gradients
(torch sparse COO → ``IndexedSlices``) and validates them before anything changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, Callable, Optional, Union

import numpy as np
import torch

from ..kernels import rows as sparse_rows
from ..kernels.native import tensor_table
from ..variables import (
    IndexedSlices,
    as_indexed_slices,
    is_integer_dtype,
    is_sparse,
    named_variables,
    variable_name,
)
from . import checks, distributed, resume, torch_arguments, unchanged
from .eager import outside_dynamo
from .group_sync import check_param_groups
from .plan import Ordinary, Pair, StepPlan
from .torch_protocol import TorchProtocol, is_param_group_list

__all__ = ["OptimizerCore", "Pairs", "Pair", "count_step"]

Pairs = Iterable[Pair]

_FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_COMPLEX_TYPES = (torch.complex64, torch.complex128)


def count_step(counter: torch.Tensor) -> None:
    """``counter += 1`` (an iteration counter or global step): in place by the C++ table for a one-element int64 CPU
    counter (its version moves as with ``add_``), else torch's ``add_``."""
    if not tensor_table.increment(counter):
        counter.add_(1)


def is_plain_gradient(grad: Any, var: torch.Tensor) -> bool:
    """Whether ``grad`` needs no conversion or further check for ``var``: a dense strided float tensor of its dtype,
    shape and device (what ``OptimizerCore._check_gradient`` returns unchanged)."""
    return (type(grad) is torch.Tensor and grad.dtype is var.dtype and grad.layout is torch.strided
            and not grad.is_nested and grad.dtype in _FLOAT_TYPES and grad.shape == var.shape
            and grad.device == var.device)


class BuildsOnParams(type):
    """Takes the parameters of every optimizer (a module, tensors, named pairs or torch param-group dicts), by
    keyword ``params=`` or positionally first as torch tools pass them (``optimizer_class(params, **kwargs)``:
    ZeRO, Hugging Face's ``optimizer_cls_and_kwargs``), and builds on them once the whole constructor chain
    (subclass attributes included) has run. A first positional argument that is not parameters is the
    class's own (Keras's ``Adam(0.01)``, TF1's ``MomentumOptimizer(0.1, 0.9)``, a wrapper's inner optimizer)."""

    def __call__(cls, *args: Any, params: Any = None, gradient_aggregator: Any = None, **kwargs: Any) -> Any:
        if args and is_parameters(args[0]):
            if params is not None:
                raise TypeError(f"{cls.__name__}() got parameters both positionally and as `params=`. "
                                f"Received: {_short(args[0])} and params={_short(params)}")
            params, args = args[0], args[1:]
        if isinstance(params, Iterator):  # (read once: a composite routes them, then builds on them again)
            params = list(params)
        if gradient_aggregator is not None:
            check_gradient_aggregator(gradient_aggregator, cls)
        if "name" in kwargs:
            checks.check_name(kwargs["name"])
        kwargs = torch_arguments.translate(cls, args, kwargs)  # torch's ``lr``/``betas``; ``eps`` refused
        checks.check_argument_types(cls.__init__, args, kwargs, cls._optional_arguments, cls._own_argument_checks)
        optimizer = super().__call__(*args, **kwargs)
        checks.check_name(optimizer.__dict__.get("name", optimizer.__dict__.get("_name")))  # given by position
        optimizer._check_configuration()  # every generation's hyperparameters, by name (engine/checks.py)
        if gradient_aggregator is not None:
            optimizer.gradient_aggregator = gradient_aggregator
        if params is not None:
            optimizer.build(params)
            optimizer._hyperparameters_changed()  # a group's own values may need slots (its momentum)
        return optimizer


def is_parameters(value: Any) -> bool:
    """True for what can only be parameters: a module, a generator of tensors (``model.parameters()``), or a
    non-empty list/tuple of tensors, ``(name, tensor)`` pairs or param-group dicts. A learning rate is a
    number, a tensor, a schedule or a callable, and never one of these."""
    if isinstance(value, torch.nn.Module):
        return True
    if isinstance(value, (list, tuple)):
        return bool(value) and all(
            isinstance(item, (torch.Tensor, Mapping))
            or (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], torch.Tensor))
            for item in value)
    return isinstance(value, Iterator) and not isinstance(value, (str, bytes, Mapping, torch.Tensor))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_gradient_aggregator(value: Any, cls: type) -> None:
    """Raises unless ``value`` can aggregate gradients for optimizers of ``cls``."""
    if not cls._aggregates_gradients:
        raise ValueError(
            f"`{cls.__name__}` does not aggregate gradients itself: pass `gradient_aggregator` to the optimizer(s) "
            f"it wraps. Received: gradient_aggregator={value!r}"
        )
    if not callable(value):
        raise TypeError(
            "Argument `gradient_aggregator` must be a callable `fn(grads_and_vars) -> grads_and_vars` or None. "
            f"Received: gradient_aggregator={value!r}"
        )


class OptimizerCore(TorchProtocol, metaclass=BuildsOnParams):
    """Shared machinery; not used directly (see ``slotopt.Optimizer``, ``slotopt.legacy.Optimizer``, ...).

    Every generation is a ``torch.optim.Optimizer`` through ``TorchProtocol``: each variable the core
    registers joins a parameter group.
    """

    #: Whether the multi-tensor (``torch._foreach_*``) path runs over whole (device, dtype) groups.
    foreach: bool = True
    #: Whether ``apply_gradients`` refuses a variable listed twice (the legacy line; Keras 3 and TF1 apply
    #: each listing in turn, as the real libraries do).
    _refuses_repeated_variables: bool = False

    #: Sums or averages the gradients over processes in the aggregation stage: ``fn(grads_and_vars) ->
    #: grads_and_vars``, given as ``gradient_aggregator=`` to any optimizer's constructor (e.g.
    #: ``slotopt.distributed.all_reduce_mean``). None by default: DDP and FSDP2 have already reduced them.
    gradient_aggregator: Callable[[list[Pair]], Any] = staticmethod(distributed.no_aggregation)  # type: ignore
    #: False where the optimizers a class wraps or composes aggregate instead (they get the aggregator).
    _aggregates_gradients: bool = True
    #: Whether this face's stages take an ``Ordinary`` step's shortcuts (engine/plan.py), so that checked steps
    #: leave a plan for the next ones.
    _plans_steps: bool = False

    #: Where a class narrows the shared range of a hyperparameter (``engine.checks.RANGES``), e.g. Adam's
    #: ``beta_1`` in [0, 1): 1.0 divides by ``1 - beta_1 ** t = 0`` at the first step.
    _hyperparameter_ranges: dict[str, checks.Range] = {}
    #: Constructor arguments of ``engine.checks.RANGES`` that may be None (off, or the generation's default).
    _optional_arguments: frozenset[str] = checks.OPTIONAL
    #: Arguments a class checks itself before using them (with its library's message), not by their type first.
    _own_argument_checks: frozenset[str] = frozenset()

    def _configuration_values(self) -> dict[str, Any]:
        """The constructor's hyperparameters by argument name (callables and schedules as given)."""
        return {}

    def _check_configuration(self) -> None:
        """Raises for a hyperparameter that is not a finite number of its range, or a flag that is not a bool."""
        values = {**self._attribute_values(), **self._configuration_values()}
        checks.check_values(values, self._hyperparameter_ranges)

    def _attribute_values(self) -> dict[str, Any]:
        """Flags and plain-number attributes (``x`` or ``_x``) named like a checked hyperparameter: constants such
        as ``initial_accumulator_value`` that a generation keeps outside its hyperparameter table."""
        found: dict[str, Any] = {}
        for key, value in self.__dict__.items():
            name = key[1:] if key.startswith("_") and not key.startswith("__") else key
            name = "learning_rate" if name == "lr" else name  # (TF1 keeps the argument as ``_lr``)
            if name in checks.FLAGS or (name in checks.RANGES and isinstance(value, (int, float))):
                found.setdefault(name, value)
        return found

    def _check_hyperparameter(self, key: str, value: Any) -> None:
        checks.check_value("learning_rate" if key == "lr" else key, value, self._hyperparameter_ranges)

    def _patch_step_function(self) -> None:
        """torch wraps ``step`` in its profiler hook (``record_function`` and the step hooks); that wrapper is kept
        out of ``torch.compile`` too, so that a compiled training step breaks its graph before it (Dynamo would
        warn that it ignores the ``record_function``) and runs hooks and step eagerly."""
        super()._patch_step_function()
        cls = type(self)
        if not getattr(cls.step, "_slotopt_outside_dynamo", False):
            hooked = outside_dynamo(cls.step)
            hooked.hooked = True  # type: ignore[attr-defined]  # (what torch checks before wrapping again)
            hooked._slotopt_outside_dynamo = True  # type: ignore[attr-defined]
            cls.step = hooked  # type: ignore[method-assign]

    def _init_core(self) -> None:
        self._vars: list[torch.Tensor] = []
        self._var_names: list[str] = []
        self._taken_names: set[str] = set()
        self._var_index: dict[int, int] = {}
        self._slots: dict[str, dict[int, torch.Tensor]] = {}
        self._group_cache: dict[tuple[int, ...], list[list[int]]] = {}
        self._plan: Optional[StepPlan] = None  # what the last checked step derived from its variables
        self._originals: list[torch.Tensor] = []  # what the user gave: param_groups hold these
        self._sharded: dict[int, Any] = {}  # position -> the DTensor parameter (FSDP2) whose local shard is _vars
        self._layouts: dict[int, distributed.ShardLayout] = {}  # position -> how that shard sits in the whole
        self._init_torch_protocol()

    # ----------------------------------------------------------------------------------------- variables
    def _register(self, variables: Any) -> list[int]:
        """Adds variables (a module, tensors, (name, tensor) pairs, or torch param-group dicts) and returns
        their positions. New variables join a parameter group (a dict's own group, else the first).

        Names are made unique (``name_<position>`` for a repeat), since state is named after them.
        """
        if is_param_group_list(variables):
            positions = []
            for named, group in check_param_groups(variables):
                first_new = len(self._vars)
                positions += self._register_named(named)
                self._track(self._originals[first_new:], group)
            self._sync_param_groups()  # the first group's own values become the optimizer's
            return positions
        first_new = len(self._vars)
        positions = self._register_named(named_variables(variables))
        self._track(self._originals[first_new:])
        return positions

    def _register_named(self, named: list[tuple[str, torch.Tensor]]) -> list[int]:
        positions = []
        for name, var in named:
            pos = self._var_index.get(id(var))
            if pos is None:
                pos = len(self._vars)
                if name in self._taken_names:
                    name = f"{name}_{pos}"
                self._taken_names.add(name)
                self._originals.append(var)
                if distributed.is_dtensor(var):  # FSDP2: the rules run on the local shard
                    self._sharded[pos] = var
                    self._layouts[pos] = distributed.ShardLayout(var)
                    var = distributed.local_view(var)
                    self._var_index[id(var)] = pos
                self._vars.append(var)
                self.__dict__.setdefault("_var_kinds", {})[pos] = (var.dtype, var.device, var.shape)
                self._var_names.append(name)
                self._var_index[id(self._originals[pos])] = pos
            positions.append(pos)
        return positions

    # ----------------------------------------------------------------------------------------- sharded parameters
    def _shard_layouts(self, params: Sequence[torch.Tensor]) -> Optional[list[Optional[distributed.ShardLayout]]]:
        """For rules that are not element-wise: per parameter (a local shard the rule updates), where it sits
        in the whole FSDP2 tensor (None: not sharded). None when nothing is sharded (the single-process path)."""
        if not self._layouts:
            return None
        index, layouts = self._var_index, self._layouts
        return [layouts.get(index.get(id(p), -1)) for p in params]

    def _slot_axes(self, name: str, slot: torch.Tensor, param: torch.Tensor) -> Optional[Sequence[int]]:
        """The parameter axes behind ``slot``'s axes, for showing a sharded parameter's slot as a DTensor:
        ``None`` for a slot shaped like the parameter's shard; faces with reduced slots (Adafactor's row and
        column moments) say which axes they keep. A slot with no answer (``()`` for a scalar) is kept whole."""
        return None if slot.shape == param.shape else ()

    def _local_pairs(self, grads_and_vars: Pairs) -> Pairs:
        """FSDP2: ``(DTensor gradient, DTensor parameter)`` pairs become pairs of local shards (the pipeline's
        first stage). Without sharded parameters the pairs pass through untouched."""
        if not self._sharded:
            return grads_and_vars
        out = []
        for item in grads_and_vars:
            grad, var = item if isinstance(item, (tuple, list)) and len(item) == 2 else (None, item)
            if distributed.is_dtensor(var):
                pos = self._var_index.get(id(var))
                if pos is None:
                    raise ValueError(
                        f"Sharded (FSDP2) parameter {variable_name(var, 'variable')} is unknown to this optimizer: "
                        "pass the sharded parameters with `params=` (or `build`) before the first step.")
                if is_sparse(grad):
                    raise ValueError(
                        f"Sharded (FSDP2) parameter {self._var_names[pos]} received a row-sparse gradient "
                        f"({type(grad).__name__}); FSDP2 gradients are dense DTensors: densify it first.")
                if distributed.is_dtensor(grad):
                    if tuple(grad.placements) != tuple(var.placements):
                        grad = grad.redistribute(var.device_mesh, var.placements)
                    grad = distributed.local_view(grad)
                var = self._vars[pos]
            out.append((grad, var))
        return out

    def _shard_groups_of(self, pairs: Sequence[Pair]) -> Optional[list[list[Any]]]:
        """Per pair with a gradient: the process groups its variable is sharded over (None: nothing sharded)."""
        if not self._layouts:
            return None
        index, layouts = self._var_index, self._layouts
        groups = []
        for g, v in pairs:
            if g is None:
                continue
            layout = layouts.get(index.get(id(v), -1))
            groups.append(layout.groups() if layout is not None else [])
        return groups

    def _all_finite(self, grads: Sequence[torch.Tensor]) -> bool:
        """Every element of every gradient finite, on every shard (a loss-scale step is skipped everywhere or
        nowhere). One fused max-abs reduction per device (``torch._foreach_norm`` with ``ord=inf``: inf and NaN
        propagate and, unlike a 2-norm, it cannot overflow on large finite values), one host sync per device."""
        by_device: dict[torch.device, list[torch.Tensor]] = {}
        for g in grads:
            if g.numel():
                by_device.setdefault(g.device, []).append(g)
        # (``stack`` promotes mixed dtypes without narrowing: a huge finite float64 stays finite)
        finite = all(bool(torch.isfinite(torch.stack(torch._foreach_norm(ts, math.inf))).all())
                     for ts in by_device.values())
        flag = torch.tensor([0.0 if finite else 1.0])
        if self._sharded:
            groups = {id(gr): gr for layout in self._layouts.values() for gr in layout.groups()}
            for group in groups.values():
                torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX, group=group)
        return bool(flag.item() == 0.0)

    def _position(self, var: torch.Tensor) -> Optional[int]:
        pos = self._var_index.get(id(var))
        if pos is None or self._vars[pos] is var or self._originals[pos] is var:
            return pos
        return None  # an id of a freed object, now reused by another tensor

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        # A plan records this optimizer's variables where they are in memory (and, in C++, as objects): a copy
        # or a pickle must never take it; the copy makes its own at its first step.
        state["_plan"] = None
        state.pop("_updating_plan", None)
        state.pop("_routes", None)  # (a composite's last grouping of its variables, likewise)
        state.pop("_slot_record", None)  # (the slots as objects, in C++: the copy records its own)
        return state

    def _after_copy(self) -> None:
        super()._after_copy()
        self._plan = None
        if "_vars" not in self.__dict__:  # a wrapper that keeps no registry of its own (tf.keras's loss scaling)
            return
        # The user's tensors (param_groups) and the ones the rules update (a DTensor's local shard) are both keys.
        self._var_index = {id(v): i for i, v in enumerate(self._vars)}
        self._var_index.update({id(v): i for i, v in enumerate(self.__dict__.get("_originals", ()))})
        self._group_cache = {}
        self._plan = None
        flat = self.__dict__.get("_flat_state")
        if flat is not None:  # (a pickle writes each packed slot apart from its buffer: tied again)
            flat.relink(self._slots)
        self.__dict__.pop("_slot_record", None)

    def _name_of(self, var: torch.Tensor) -> str:
        pos = self._position(var)
        return self._var_names[pos] if pos is not None else variable_name(var, "variable")

    def _param_state(self, param: torch.Tensor, shared: Optional[dict[str, torch.Tensor]] = None) -> dict[str, Any]:
        """torch's ``state[param]``: the variable's slots under their names, then the shared scalars (``shared``:
        ``_shared_state()`` computed once by a caller that asks for every parameter). A sharded parameter's slots
        are shown as DTensors sharded like it (what ``torch.distributed.checkpoint`` saves)."""
        pos = self._position(param)
        if pos is None:
            return {}
        entry = {name: table[pos] for name, table in self._slots.items() if pos in table}
        layout = self._layouts.get(pos)
        if layout is not None:
            param = self._vars[pos]
            shown = {}
            for name, slot in entry.items():
                axes = self._slot_axes(name, slot, param)
                shown[name] = slot if axes == () else layout.wrap(slot, axes)
            entry = shown
        entry.update(self._shared_state() if shared is None else shared)
        return entry

    def _param_states(self, params: list[torch.Tensor]) -> list[dict[str, Any]]:
        shared = self._shared_state()  # the same for every parameter: computed once, not once per parameter
        return [self._param_state(p, shared) for p in params]

    def _shared_state(self) -> dict[str, torch.Tensor]:
        """Optimizer-wide state shown in every parameter's ``state``: ``step`` (the iteration counter), then every
        other optimizer variable that is not a slot, by name."""
        counter = self._state_counter()
        slots = {id(t) for table in self._slots.values() for t in table.values()}
        shared = {"step": counter} if counter is not None else {}
        for var in self._state_variables():
            if id(var) not in slots and var is not counter:
                shared[var.name] = var
        return shared

    def _state_counter(self) -> Optional[torch.Tensor]:
        """The face's iteration counter (None: the generation keeps none, as TF1)."""
        return None

    def _state_variables(self) -> list[torch.Tensor]:
        """The face's optimizer variables that belong in the state (hyperparameters are in the groups)."""
        return []

    # ----------------------------------------------------------------------------------------- slots
    def _set_slot(self, slot_name: str, pos: int, tensor: torch.Tensor) -> None:
        self._slots.setdefault(slot_name, {})[pos] = tensor
        # The kind the slot was made with: a slot resized or re-typed in place is refused before a step writes
        # (engine/unchanged.py).
        self.__dict__.setdefault("_slot_kinds", {})[(slot_name, pos)] = (tensor.dtype, tensor.shape)
        # What ``del opt.state[p]`` writes back (engine/resume.py): one number for a constant-filled slot.
        self.__dict__.setdefault("_slot_initials", {})[(slot_name, pos)] = resume.initial_fill(tensor)

    def _remember_initial_scalar(self, tensor: torch.Tensor) -> None:
        """An optimizer-wide scalar's initial value, written back when the whole state is reset."""
        if tensor.dim() == 0:
            self.__dict__.setdefault("_scalar_initials", []).append((tensor, tensor.detach().clone()))

    def _reset_slots(self, param: torch.Tensor) -> None:
        pos = self._position(param)
        if pos is None:
            return
        initials = self.__dict__.get("_slot_initials", {})
        targets = [(name, table[pos]) for name, table in self._slots.items() if pos in table]
        for name, _ in targets:
            if initials.get((name, pos)) is None:
                raise RuntimeError(f"The initial value of state {name!r} of {self._var_names[pos]} is unknown: it "
                                   "cannot be reset.")
        with torch.no_grad():
            for name, slot in targets:
                initial = initials[(name, pos)]
                if isinstance(initial, torch.Tensor):
                    slot.copy_(initial)
                else:
                    slot.fill_(initial)
        self._plan = None

    def _reset_shared_state(self) -> None:
        counter = self._state_counter()
        with torch.no_grad():
            if counter is not None:
                counter.zero_()
            for tensor, initial in self.__dict__.get("_scalar_initials", ()):
                tensor.copy_(initial)
        self._plan = None

    def _get_slot(self, slot_name: str, pos: int) -> Optional[torch.Tensor]:
        return self._slots.get(slot_name, {}).get(pos)

    def _slot_lists(self, names: Sequence[str], positions: Sequence[int]) -> dict[str, list[torch.Tensor]]:
        plan = self.__dict__.get("_updating_plan")  # an ordinary step's group (engine/plan.py): addresses kept
        if plan is not None and positions and type(positions) is list:
            return {n: plan.state_operands(n, positions, plan.entries(self._slots[n], positions)) for n in names}
        return {n: [self._slots[n][p] for p in positions] for n in names}

    # ----------------------------------------------------------------------------------------- grouping
    def _groups(self, positions: Sequence[int]) -> list[list[int]]:
        """Positions split into (device, dtype) groups, or one group per variable when ``foreach`` is off."""
        key = tuple(positions)
        cached = self._group_cache.get(key)
        if cached is not None:
            return cached
        if not self.foreach:
            groups = [[p] for p in positions]
        else:
            by_kind: dict[tuple[torch.device, torch.dtype], list[int]] = {}
            for p in positions:
                v = self._vars[p]
                by_kind.setdefault((v.device, v.dtype), []).append(p)
            groups = list(by_kind.values())
        if len(self._group_cache) > 64:
            self._group_cache.clear()
        self._group_cache[key] = groups
        return groups

    # ----------------------------------------------------------------------------------------- gradients
    def _current_plan(self) -> Optional[StepPlan]:
        """The last step's plan while it still holds for this optimizer (engine/plan.py), else None."""
        plan = self.__dict__.get("_plan")  # (a wrapper that forwards to its inner optimizer has none)
        return plan if plan is not None and plan.valid_for(self) else None

    def _planned_step(self, pairs: Sequence[Pair]) -> Optional[Ordinary]:
        """``pairs`` as an ``Ordinary`` step of the last step's plan, or None (engine/plan.py)."""
        plan = self._current_plan()
        if plan is None:
            return None
        if type(pairs) is Ordinary and pairs.plan is plan:
            return pairs  # checked by this plan in this very step (a composite validates its groups first)
        ordinary = plan.fits(pairs)
        # The slots too are proven unchanged before anything is written (else the full path checks and refuses).
        return ordinary if ordinary is not None and self._slots_hold() else None

    def _planned_params_step(self, params: list[torch.Tensor]) -> Optional[Ordinary]:
        """``step()``'s parameters with their ``.grad`` as an ``Ordinary`` step of the last step's plan, or None."""
        plan = self._current_plan()
        ordinary = None if plan is None else plan.fits_params(params)
        return ordinary if ordinary is not None and self._slots_hold() else None

    def _checked_pairs(self, pairs: Sequence[Pair]) -> list[Pair]:
        """``_check_gradient`` for every pair; ordinary dense gradients (a strided float tensor of the variable's
        shape, dtype and device) are recognised inline, without the call. A step that fits the plan of the last
        one (engine/plan.py) is recognised in one pass and returned as ``Ordinary``."""
        ordinary = self._planned_step(pairs)
        if ordinary is not None:
            return ordinary
        self._check_variables_unchanged(pairs)
        out: list[Pair] = []
        for pair in pairs:
            grad, var = pair
            if is_plain_gradient(grad, var):
                out.append(pair if type(pair) is tuple else (grad, var))
            else:
                out.append((self._check_gradient(grad, var, lambda var=var: self._name_of(var)), var))
                if var.is_complex():
                    self._check_complex_support(var)
        return out

    #: Whether the optimizer trains complex64/complex128 variables (TensorFlow has complex kernels for it).
    _supports_complex: bool = False

    def _check_complex_support(self, var: torch.Tensor) -> None:
        """Raises (before anything changes) where TensorFlow has no complex kernel: the optimizer itself, AMSGrad's
        running maximum, and clipping (TensorFlow's clipping compares values, which complex numbers do not have)."""
        reason = None
        if not self._supports_complex:
            reason = "TensorFlow has no complex kernel for this optimizer"
        elif getattr(self, "amsgrad", False) is True:
            reason = "amsgrad takes a running maximum, which TensorFlow does not define for complex values"
        elif any(getattr(self, name, None) for name in ("clipnorm", "clipvalue", "global_clipnorm")):
            reason = "gradient clipping compares values, which TensorFlow does not do for complex gradients"
        if reason is not None:
            raise TypeError(
                f"{type(self).__name__} cannot update the complex variable {self._name_of(var)} (dtype {var.dtype}): "
                f"{reason} (it raises too)."
            )

    def _slots_hold(self) -> bool:
        """Whether every slot is unchanged since it was checked (engine/unchanged.py)."""
        return unchanged.slots_hold(self)

    def _check_variables_unchanged(self, pairs: Sequence[Pair]) -> None:
        """A variable whose dtype, device or shape changed since its state was made (``model.double()`` after
        the build) would be updated with state of the old kind: refused, as ``torch.optim`` refuses it. So is a
        variable no kernel may write, and a slot changed in kind (engine/unchanged.py)."""
        unchanged.check_writable(self, pairs)
        unchanged.check_slots(self)
        kinds = self.__dict__.get("_var_kinds")
        if not kinds:
            return
        index = self._var_index
        for _, var in pairs:
            pos = index.get(id(var))
            if pos is None or pos not in kinds or pos >= len(self._vars) or self._vars[pos] is not var:
                continue
            dtype, device, shape = kinds[pos]
            same = tensor_table.same_kind(var, dtype, device, shape)  # (one C++ call; None: compared here)
            if same is False or (same is None and (var.dtype != dtype or var.device != device or var.shape != shape)):
                raise ValueError(
                    f"Variable {self._var_names[pos]} is now {var.dtype} of shape {tuple(var.shape)} on {var.device}"
                    f"; the optimizer built its state for {dtype} of shape {tuple(shape)} on {device}. Create the "
                    "optimizer after converting or moving the model (torch.optim refuses this too).")

    @staticmethod
    def _check_gradient(grad: Any, var: torch.Tensor, name: Union[str, Callable[[], str]]) -> Any:
        """Converts a gradient to a dense tensor or ``IndexedSlices`` and checks it fits ``var``; raises if not.

        ``name`` may be a callable, so that the variable's name is only looked up for an error message.
        """
        if grad is None:
            return None
        if type(grad) is IndexedSlices and tensor_table.slices_fit(grad.values, grad.indices, grad.dense_shape, var):
            return grad  # every check below, read in one C++ call (it leaves anything unusual to them)
        where = name() if callable(name) else name
        if is_sparse(grad):
            grad = as_indexed_slices(grad)
            values = grad.values
            if not is_integer_dtype(grad.indices.dtype) and grad.indices.numel():  # set after construction
                raise TypeError(
                    f"Sparse gradient indices for variable {where} must be integers. Received: "
                    f"indices={grad.indices.tolist()[:20]} (dtype {grad.indices.dtype})"
                )
            if values.dim() == 0 or values.shape[0] != grad.indices.numel():  # (attributes set after construction)
                raise ValueError(
                    f"Sparse gradient for variable {where} must have one row of values per index. Received: "
                    f"values of shape {tuple(values.shape)} and {grad.indices.numel()} indices"
                )
            if tuple(values.shape[1:]) != tuple(var.shape[1:]) or var.dim() == 0:
                raise ValueError(
                    f"Sparse gradient rows of shape {tuple(values.shape[1:])} do not fit variable {where} of "
                    f"shape {tuple(var.shape)}."
                )
            if sparse_rows.first_out_of_range(grad.indices, var.shape[0]) >= 0:
                raise ValueError(
                    f"Sparse gradient indices for variable {where} must be in [0, {var.shape[0]}). "
                    f"Received: indices={grad.indices.tolist()[:20]}"
                )
            if grad.dense_shape is not None and tuple(grad.dense_shape) != tuple(var.shape):
                raise ValueError(
                    f"Sparse gradient for variable {where} has dense_shape {tuple(grad.dense_shape)}, which does "
                    f"not match the variable's shape {tuple(var.shape)}."
                )
        else:
            if isinstance(grad, torch.Tensor) and (grad.layout is not torch.strided or grad.is_nested):
                # CSR/CSC/BSR/BSC, mkldnn, nested: no rule of any generation takes them, and their memory is not
                # the variable's layout; refused before anything changes.
                kind = "nested" if grad.is_nested else str(grad.layout)
                raise TypeError(
                    f"Gradient for variable {where} must be a dense (strided) tensor, a sparse COO row gradient "
                    f"or an IndexedSlices. Received: a {kind} tensor of shape "
                    f"{tuple(grad.shape) if not grad.is_nested else '(nested)'}; convert it first (e.g. "
                    "grad.to_dense() or grad.to_sparse_coo()).")
            if not isinstance(grad, torch.Tensor):
                try:
                    grad = torch.as_tensor(grad, dtype=var.dtype, device=var.device)
                except (TypeError, ValueError, RuntimeError) as err:
                    raise TypeError(
                        f"Gradient for variable {where} must be a tensor, an IndexedSlices or None. "
                        f"Received: {grad!r}"
                    ) from err
            if grad.shape != var.shape:
                raise ValueError(
                    f"Gradient for variable {where} has shape {tuple(grad.shape)}, which does not match the "
                    f"variable's shape {tuple(var.shape)}."
                )
            values = grad
        if var.dtype in _COMPLEX_TYPES:  # TensorFlow's complex64/complex128 variables take gradients of their dtype
            if values.dtype != var.dtype:
                raise ValueError(
                    f"Gradient for complex variable {where} must have its dtype {var.dtype}. Received: "
                    f"dtype={values.dtype}"
                )
        elif values.dtype not in _FLOAT_TYPES:
            raise ValueError(
                f"Gradient for variable {where} must be a floating-point tensor. Received: dtype={values.dtype}"
            )
        if var.dtype not in _FLOAT_TYPES and var.dtype not in _COMPLEX_TYPES:
            raise ValueError(
                f"Variable {where} has dtype {var.dtype}; only float16, bfloat16, float32, float64, complex64 and "
                "complex128 variables can be optimized."
            )
        if values.device != var.device:
            raise ValueError(
                f"Gradient for variable {where} is on {values.device} but the variable is on {var.device}."
            )
        return grad

    @staticmethod
    def _dense(grad: Any, var: torch.Tensor) -> torch.Tensor:
        """The dense gradient in the variable's dtype (duplicates of a sparse gradient summed)."""
        if isinstance(grad, IndexedSlices):
            return sparse_rows.densify(grad, var)
        return grad if grad.dtype == var.dtype else grad.to(var.dtype)

    # ----------------------------------------------------------------------------------------- constraints
    def _apply_constraints(self, pairs: Sequence[Pair]) -> None:
        variables = [pair[1] for pair in pairs]
        if not any(map(getattr, variables, repeat("constraint"), repeat(None))):
            return  # (one C-level pass: most steps have no constraint at all)
        for var in variables:
            if getattr(var, "constraint", None) is not None:
                self._constrain(var)

    def _constrain(self, var: torch.Tensor) -> None:
        """``var = var.constraint(var)``, once the result is checked: a tensor of the variable's shape (a scalar
        is not spread over the tensor), on its device, of a dtype that casts safely to the variable's. A bad
        result raises (the step then puts every value back, see ``engine/pipeline.py``)."""
        constraint = var.constraint
        result = constraint(var)
        if isinstance(result, np.ndarray):
            result = torch.from_numpy(result)
        where = self._name_of(var)
        if not isinstance(result, torch.Tensor):
            raise TypeError(
                f"The constraint of variable {where} must return a tensor of the variable's shape "
                f"{tuple(var.shape)}. Received: {result!r} (of type {type(result).__name__}) from "
                f"constraint={constraint!r}")
        if result.shape != var.shape:
            raise ValueError(
                f"The constraint of variable {where} must return a tensor of the variable's shape "
                f"{tuple(var.shape)}. Received: a tensor of shape {tuple(result.shape)} from constraint={constraint!r}")
        if result.dtype == torch.bool or not torch.can_cast(result.dtype, var.dtype):
            raise TypeError(
                f"The constraint of variable {where} must return a tensor of a dtype that casts safely to the "
                f"variable's {var.dtype}. Received: dtype={result.dtype} from constraint={constraint!r}")
        if result.device != var.device:
            raise ValueError(
                f"The constraint of variable {where} must return a tensor on the variable's device {var.device}. "
                f"Received: device={result.device} from constraint={constraint!r}")
        with torch.no_grad():
            var.copy_(result)

    def _update_touched_rows(
        self,
        var: torch.Tensor,
        grad: IndexedSlices,
        slots: Sequence[torch.Tensor],
        update: Callable[[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]], None],
        deduplicate: bool = True,
    ) -> None:
        """Runs ``update([rows of var], [row gradients], [rows of each slot])`` on the touched rows only.

        Time and memory are proportional to the number of touched rows, whatever the size of the table.
        """
        if deduplicate:
            rows, values = sparse_rows.deduplicate(grad)
        else:
            rows, values = grad.indices, grad.values
        targets = [var, *slots]
        gathered = sparse_rows.gather_rows(targets, rows)
        update(gathered[:1], [values.to(var.dtype)], gathered[1:])
        sparse_rows.scatter_rows(targets, rows, gathered)

    @staticmethod
    def _reject_sparse_constraints(pairs: Sequence[Pair], message: Callable[[Any, Any], str]) -> None:
        for grad, var in pairs:
            if isinstance(grad, IndexedSlices) and getattr(var, "constraint", None) is not None:
                raise RuntimeError(message(grad, var.constraint))

    # ----------------------------------------------------------------------------------------- stages
    # Defaults are the identity; each face overrides what its generation does (see engine/pipeline.py).
    def _prepare_pairs(self, grads_and_vars: Pairs, **options: Any) -> Optional[list[Pair]]:
        raise NotImplementedError

    def _empty_step_result(self) -> Any:
        return None

    def _ordinary(self, pairs: list[Pair]) -> list[Pair]:
        """Checked ``pairs`` as an ``Ordinary`` step when they can be, leaving a plan for the next steps."""
        if type(pairs) is Ordinary or len(pairs) < 2 or not self._plans_steps or not StepPlan.possible(self, pairs):
            return pairs
        self._plan = StepPlan(self, pairs)
        ordinary = self._plan.fits(pairs)  # fits: ``possible`` checked what ``fits`` does
        return ordinary if ordinary is not None else pairs

    def _drop_missing_gradients(self, pairs: list[Pair]) -> list[Pair]:
        if type(pairs) is Ordinary:
            return pairs
        return [pair for pair in pairs if pair[0] is not None]

    def _overwrite_with_gradients(self, pairs: list[Pair]) -> list[Pair]:
        return pairs

    def _unscale_gradients(self, pairs: list[Pair]) -> list[Pair]:
        return pairs

    def _accumulate_gradients(self, pairs: list[Pair]) -> Optional[list[Pair]]:
        return pairs

    def _aggregate_across_processes(self, pairs: list[Pair], **options: Any) -> list[Pair]:
        """``_transform_unaggregated_gradients`` then ``_aggregate_gradients``, unless the call says the gradients
        are aggregated already: ``experimental_aggregate_gradients=False`` (tf.keras) or
        ``skip_gradients_aggregation=True`` (TF1, Keras 3)."""
        if options.get("skip_gradients_aggregation") or options.get("experimental_aggregate_gradients") is False:
            return pairs
        if self._aggregates_nothing():
            return pairs  # as they are (an ``Ordinary`` step stays one)
        return list(self._aggregate_gradients(list(self._transform_unaggregated_gradients(pairs))))

    def _aggregates_nothing(self) -> bool:
        cls = type(self)
        return (self.gradient_aggregator is distributed.no_aggregation
                and cls._transform_unaggregated_gradients is OptimizerCore._transform_unaggregated_gradients
                and cls._aggregate_gradients is OptimizerCore._aggregate_gradients)

    def _transform_unaggregated_gradients(self, grads_and_vars: list[Pair]) -> list[Pair]:
        """Hook run on each process's own gradients before they are aggregated (identity)."""
        return grads_and_vars

    def _aggregate_gradients(self, grads_and_vars: list[Pair]) -> list[Pair]:
        """Aggregates gradients across processes with ``gradient_aggregator`` (subclasses may override)."""
        return self.gradient_aggregator(grads_and_vars)

    def _transform_gradients(self, pairs: list[Pair]) -> list[Pair]:
        return pairs

    def _start_updates(self) -> Optional[Callable[[], None]]:
        """Runs once before the updates; may return a function that the pipeline calls after them."""
        return None

    def _apply_weight_decay(self, pairs: list[Pair]) -> None:
        return None

    def _apply_updates(self, pairs: list[Pair]) -> None:
        raise NotImplementedError

    def _update_moving_averages(self) -> None:
        return None

    def _finish_step(self, pairs: list[Pair], **options: Any) -> Any:
        return None
