"""``OptimizerCore``: the variable and slot store and grouping shared by every generation.

A face (Keras 3, legacy, TF1) subclasses this and declares its step as data (``_stages``, an
``engine.pipeline.Step``: the ordered stages ``run_step`` runs) and its validation (``_prepare_pairs``). The core
owns no algorithm: it keeps track of the variables it was given, stores their state ("slots") keyed by the
variable's position, and groups variables by (device, dtype) for multi-tensor kernels. Its other parts are mixins
of their own modules: construction (engine/construction.py), FSDP2 shards (engine/shards.py), the plan cache
(engine/plan_cache.py), gradient validation (engine/proof/validation.py) and constraints (engine/constraints.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Callable, Optional

import torch

from ..kernels import rows as sparse_rows
from ..kernels.native import tensor_table
from ..variables import IndexedSlices, named_variables, variable_name
from . import adopt, checks, distributed, group_sync, plan_cache, shards, torch_arguments
from .construction import BuildsOnParams, check_gradient_aggregator, is_parameters
from .eager import outside_dynamo
from .group_sync import check_param_groups
from .pipeline import Step, aggregate_gradients, transform_unaggregated_gradients
from .plan import Pair, StepPlan
from .proof.validation import is_plain_gradient
from .torch_protocol import TorchProtocol, is_param_group_list

__all__ = ["OptimizerCore", "Pairs", "Pair", "count_step", "BuildsOnParams", "is_parameters",
           "check_gradient_aggregator", "is_plain_gradient"]

Pairs = Iterable[Pair]


def count_step(counter: torch.Tensor) -> None:
    """``counter += 1`` (an iteration counter or global step): in place by the C++ table for a one-element int64 CPU
    counter (its version moves as with ``add_``), else torch's ``add_``."""
    if not tensor_table.increment(counter):
        counter.add_(1)


class OptimizerCore(TorchProtocol, metaclass=BuildsOnParams):
    """Shared machinery; not used directly (see ``slotopt.Optimizer``, ``slotopt.legacy.Optimizer``, ...).

    Every generation is a ``torch.optim.Optimizer`` through ``TorchProtocol``: each variable the core
    registers joins a parameter group.
    """

    # Its other parts are modules of functions of the optimizer (engine/shards.py, plan_cache.py,
    # validation.py, constraints.py), called as functions; bound here as methods are only what ``run_step``
    # calls (engine/pipeline.py), the hooks a class overrides, and what wrappers look for on the optimizers they
    # hold. The step itself is data: each face's ``_stages``.
    _local_pairs = shards._local_pairs  # FSDP2: a sharded parameter's gradient made local
    _slot_axes = shards._slot_axes  # (Adafactor overrides it)
    _ordinary = plan_cache._ordinary
    _current_plan = plan_cache.current_plan
    _planned_step = plan_cache.planned_step
    _planned_params_step = plan_cache._planned_params_step
    # TensorFlow's aggregation hooks, which the shared stage ``pipeline.aggregate_across_processes`` calls
    _transform_unaggregated_gradients = transform_unaggregated_gradients
    _aggregate_gradients = aggregate_gradients

    #: The face's step: its stages in order, run by ``engine.pipeline.run_step`` (each face declares its own).
    _stages: Step
    #: Whether the multi-tensor (``torch._foreach_*``) path runs over whole (device, dtype) groups.
    foreach: bool = True
    #: Whether the optimizer trains complex64/complex128 variables (TensorFlow has complex kernels for it).
    _supports_complex: bool = False
    #: Whether ``apply_gradients`` refuses a variable listed twice (the legacy line; Keras 3 and TF1 apply
    #: each listing in turn, as the real libraries do).
    _refuses_repeated_variables: bool = False

    #: Sums or averages the gradients over processes in the aggregation stage: ``fn(grads_and_vars) ->
    #: grads_and_vars``, given as ``gradient_aggregator=`` to any optimizer's constructor (e.g.
    #: ``slotopt.distributed.all_reduce_mean``). None by default: DDP and FSDP2 have already reduced them.
    gradient_aggregator: Callable[[list[Pair]], Any] = staticmethod(distributed.no_aggregation)  # type: ignore
    #: False where the optimizers a class wraps or composes aggregate instead (they get the aggregator).
    _aggregates_gradients: bool = True
    #: Whether ``maximize=`` is the class's own (False where the optimizers it wraps or composes take it).
    _maximizes: bool = True

    @property
    def maximize(self) -> bool:
        """torch's ``maximize``: steps follow the gradient upwards, as for the negated loss (every generation,
        given as ``maximize=True`` to the constructor; shown in ``param_groups``, ``defaults`` and ``state_dict``)."""
        return self.__dict__.get("_maximize", False)

    @maximize.setter
    def maximize(self, value: bool) -> None:
        flag = checks.check_flag("maximize", value)
        self.__dict__["_maximize"] = flag
        group_sync.broadcast(self, "maximize", flag)
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
                added = self._register_named(named)
                positions += added
                self._track(self._originals[first_new:], group, _given_names(group["params"], named, added, first_new))
            self._sync_param_groups()  # the first group's own values become the optimizer's
            return positions
        first_new = len(self._vars)
        given = variables if isinstance(variables, (torch.nn.Module, list, tuple)) else list(variables)
        named = named_variables(given)
        positions = self._register_named(named)
        self._track(self._originals[first_new:], None, _given_names(given, named, positions, first_new))
        return positions

    def _register_named(self, named: list[tuple[str, torch.Tensor]]) -> list[int]:
        flags = self.__dict__.get("_torch_flags")
        if flags:  # capturable=True: checked on every variable that joins, not only those of the constructor
            torch_arguments.check_capturable(self, flags, [var for _, var in named])
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
        # (engine/proof/unchanged.py).
        self.__dict__.setdefault("_slot_kinds", {})[(slot_name, pos)] = (tensor.dtype, tensor.shape)
        # What ``del opt.state[p]`` writes back (engine/resume.py): one number for a constant-filled slot (for a
        # slot taken from a file, engine/adopt.py, the number the face would have filled it with).
        self.__dict__.setdefault("_slot_initials", {})[(slot_name, pos)] = adopt.taken_fill(self, tensor)

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


def _given_names(source: Any, named: list[tuple[str, torch.Tensor]], positions: list[int],
                 first_new: int) -> Optional[list[str]]:
    """The names the caller gave to the variables of ``source`` that are new (torch 2.6+'s ``param_names``: a
    module's parameter names, or ``(name, tensor)`` pairs), or None where they came as bare tensors (slotopt's
    own names for those are positions, not names to load state by)."""
    if not isinstance(source, torch.nn.Module) and not (isinstance(source, (list, tuple)) and source and all(
            isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) for item in source)):
        return None
    names: dict[int, str] = {}
    for (name, _), pos in zip(named, positions):
        if pos >= first_new:
            names.setdefault(pos, name)  # (a tensor given twice is one parameter)
    return [names[pos] for pos in sorted(names)]
