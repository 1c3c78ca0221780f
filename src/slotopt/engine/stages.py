"""The Keras 3 stages of the step (``slotopt.Optimizer._stages`` lists them, ``engine/pipeline.py`` runs them in
order): overwrite with gradient, unscaling, gradient accumulation, clipping, the update's values, decoupled weight
decay with exclusions, the grouped update (dense groups through the multi-tensor kernels, row slices with Keras 3's
TensorFlow-backend semantics, repeats of a variable in order), the moving averages of ``use_ema`` and the count.

Each stage is a function ``(opt, pairs, call) -> pairs`` (engine/pipeline.py), not a method: the face lists it in
its step. The helpers a stage calls are methods only where a subclass overrides them (``update_step``,
``_update_group``, ``_before_updates``...).

Example:
    >>> import torch, slotopt
    >>> from slotopt.engine import stages
    >>> stages.apply_weight_decay in slotopt.AdamW._stages
    True
    >>> stages.rounds([(1, "a"), (2, "b"), (3, "a")])
    [[(1, 'a'), (2, 'b')], [(3, 'a')]]
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
import torch

from ..kernels import native
from ..kernels import rows as sparse_rows
from ..kernels.ema import moving_average
from ..kernels.native import tensor_table
from ..kernels.weight_decay import decoupled_weight_decay
from ..variables import IndexedSlices, variable_name
from . import (
    checks,
    clipping,
    compiled_maps,
    gradient_maps,
    plan_cache,
    shards,
    sparse_pass,
    summation,
)
from . import constants as K
from .core import Pair, count_step
from .pipeline import Call
from .plan import GradientsByPosition, Ordinary, StepPairs
from .proof import validation

__all__ = ["rounds", "overwrites_with_gradient", "check_update_kernels"]


def rounds(pairs: list[Pair]) -> list[list[Pair]]:
    """Splits pairs so that each part holds a variable at most once, in the order listed.

    Keras 3 (TensorFlow backend) applies the pairs one after the other, with no check for repeats: a variable
    listed twice in one call is decayed twice and updated twice, the second time from the first result (with the
    same step count). Distinct variables do not interact, so running the k-th listing of every variable together
    gives the same result. Almost always there is one part.
    """
    if getattr(pairs, "plan", None) is not None or len(pairs) == 1 or len({id(v) for _, v in pairs}) == len(pairs):
        return [pairs]  # (an ordinary step lists each variable once)
    seen: dict[int, int] = {}
    parts: list[StepPairs] = []
    for pair in pairs:
        k = seen.get(id(pair[1]), 0)
        seen[id(pair[1])] = k + 1
        if k == len(parts):
            parts.append(StepPairs())
        parts[k].append(pair)
    return parts


def check_update_kernels(cls: type) -> None:
    """What a class's ``_update_kernels`` can do, read when the class is defined: ``_sparse_one_pass`` is
    derived from them, and a class that sets it True with a kernel lacking the compiled form is refused."""
    kernels = cls._update_kernels  # type: ignore[attr-defined]
    compiled = bool(kernels) and all(getattr(k, "rule", None) is not None for k in kernels)
    if "_sparse_one_pass" in cls.__dict__:
        if cls._sparse_one_pass and not compiled:  # type: ignore[attr-defined]
            lacking = [getattr(k, "__qualname__", repr(k)) for k in kernels
                       if getattr(k, "rule", None) is None] or ["no `_update_kernels` declared"]
            raise TypeError(
                f"{cls.__qualname__} sets `_sparse_one_pass = True`, but its dense update is not one compiled "
                f"rule ({', '.join(lacking)}): the one-pass sparse update would hand the foreach kernel pieces of "
                "a table. Leave the flag out: it is derived from `_update_kernels`.")
    elif "_update_kernels" in cls.__dict__:
        cls._sparse_one_pass = compiled  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------- gradient accumulation
# ``gradient_accumulation_steps``: gradients are summed into a ``gradient_accumulator`` slot and every
# ``steps``-th call applies their mean (the accumulators are cleared when that step finishes).
def accumulate_gradients(self, pairs: list[Pair], call: Call) -> Optional[list[Pair]]:
    steps = self.gradient_accumulation_steps
    if not steps:
        return pairs
    plan = pairs.plan
    if plan is not None:  # every gradient dense, of its variable's kind: the lists taken through the plan
        table = self._slots.get("gradient_accumulator", {})
        try:
            accumulators: Optional[list[torch.Tensor]] = list(plan.entries(table, plan.positions))
        except KeyError:  # (a variable without an accumulator: the per-pair path below says which)
            accumulators = None
        if accumulators is not None:
            if (int(self._iterations) + 1) % steps != 0:
                torch._foreach_add_(accumulators, pairs.grads)
                return None
            mean = compiled_maps.accumulated(self, pairs, accumulators, steps)  # (one compiled pass)
            if mean is not None:
                return mean
            # (the same two ops per tensor as below, as one foreach call each)
            return gradient_maps.replaced(pairs, torch._foreach_div(torch._foreach_add(pairs.grads, accumulators),
                                                                    steps))
    dense = [(validation.dense(g, v), v) for g, v in pairs]
    accumulators = [self._get_slot("gradient_accumulator", self._position(v)) for _, v in dense]
    if (int(self._iterations) + 1) % steps != 0:
        torch._foreach_add_(accumulators, [g for g, _ in dense])
        return None
    # The accumulators are cleared in ``count_iterations``: an error in this update keeps them.
    return gradient_maps.replaced(pairs, [(g + acc) / steps for (g, _), acc in zip(dense, accumulators)])


def overwrites_with_gradient(variable: Any) -> bool:
    """Whether ``variable`` is flagged ``overwrite_with_gradient = True`` (Keras 3: set to its gradient)."""
    return getattr(variable, "overwrite_with_gradient", False) is True


# ----------------------------------------------------------------------------- overwrite with gradient
# Keras 3's ``overwrite_with_gradient`` variables (float8 scales and histories): such a variable is set to
# its gradient, before unscaling, clipping, weight decay and constraints, and leaves the step. With
# ``gradient_accumulation_steps`` its accumulator keeps the running maximum of the gradients (starting from
# 0) and the variable takes ``max(gradient, accumulator)`` on the update call. A step whose variables carry the
# flag takes the full path (no step plan), so the flag is read on every such step.
def overwrite_with_gradients(self, pairs: list[Pair], call: Call) -> list[Pair]:
    if pairs.plan is not None or not any(overwrites_with_gradient(v) for _, v in pairs):
        return pairs
    steps = self.gradient_accumulation_steps
    update_call = not steps or (int(self._iterations) + 1) % steps == 0
    kept: list[Pair] = []
    for g, v in pairs:
        if not overwrites_with_gradient(v):
            kept.append((g, v))
            continue
        dense = validation.dense(g, v).to(v.dtype)
        if steps:
            accumulator = self._get_slot("gradient_accumulator", self._position(v))
            running = torch.maximum(dense, accumulator.to(dense.dtype))
            if update_call:
                v.copy_(running)
                accumulator.zero_()
            else:
                accumulator.copy_(running)
        else:
            v.copy_(dense)
    return kept


# ----------------------------------------------------------------------------------- unscale and clip
def unscale_gradients(self, pairs: list[Pair], call: Call) -> list[Pair]:
    """``g / loss_scale_factor`` (Keras 3 unscales before accumulating and clipping); one compiled pass on an
    ordinary step (engine/compiled_maps.py), the same bits as the foreach division."""
    if self.loss_scale_factor is None:
        return pairs
    factor = self.loss_scale_factor
    return compiled_maps.mapped(self, pairs, "unscale", divisor=factor) or clipping.map_gradient_values(
        pairs, lambda grads: [g / factor for g in grads])


def clip_gradients(self, pairs: list[Pair], call: Call) -> list[Pair]:
    """Keras 3 clipping: clipnorm, else global_clipnorm, else clipvalue; a value <= 0 disables it. An ordinary
    step's norms and clipped gradients come from compiled passes in TensorFlow's order (engine/compiled_maps.py);
    the foreach forms below are the reference and take every other step. A tf-keras 2.11+ run then sums each
    sparse gradient's repeated rows (``_deduplicate_sparse``, set by the readers)."""
    pairs = _clipped(self, pairs)
    return self._deduplicated_sparse(pairs) if self._deduplicate_sparse else pairs


def _clipped(self: Any, pairs: list[Pair]) -> list[Pair]:
    # A variable held in another layout than TensorFlow's (``load_module``) is summed in TF's order of its layout
    # (engine/summation.py); the compiled passes sum in the layout's own order, so they do not take such a step.
    orders = summation.orders_of(self, pairs)
    if self.clipnorm and self.clipnorm > 0:
        clip, limit = clipping.clip_by_norm, self.clipnorm
        if (done := compiled_maps.mapped(self, pairs, "clip", clipnorm=limit)) is not None:
            return done
    elif self.global_clipnorm and self.global_clipnorm > 0:
        if (done := compiled_maps.mapped(self, pairs, "clip", global_clipnorm=self.global_clipnorm)) is not None:
            return done
        # The norm sees each slice's squares (summed per row); the scaled gradients are dense (§3.5).
        every = summation.orders_of(self, [(True, v) for _, v in pairs]) or [None] * len(pairs)
        norm = clipping.norm_of_sums([clipping.sum_of_squares(g, v.shape[0] if v.dim() else 1, order)
                                      for (g, v), order in zip(pairs, every)], shards.shard_groups_of(self, pairs))
        grads = clipping.clip_by_global_norm(
            [validation.dense(g, v) if isinstance(g, IndexedSlices) else g for g, v in pairs], self.global_clipnorm,
            norm=norm)
        return gradient_maps.replaced(pairs, grads)  # (an ordinary step stays one)
    elif self.clipvalue and self.clipvalue > 0:
        return compiled_maps.mapped(self, pairs, "clip", clipvalue=self.clipvalue) or clipping.map_gradient_values(
            pairs, lambda grads: clipping.clip_by_value(grads, self.clipvalue))
    else:
        return pairs
    spans = shards.shard_groups_of(self, pairs)
    return clipping.map_gradient_values(pairs, lambda grads: clip(grads, limit, spans, orders))


# ------------------------------------------------------------------------------------ the update's values
def evaluate_update(self) -> Optional[Any]:
    """The update's values, once before its first write: the learning rate (a schedule evaluated once per
    update), each callable hyperparameter, then the per-step scalars of ``_before_updates`` (Nadam's product).
    Returns the function that puts the callables back after the update (None: none to put back)."""
    self.__dict__["_step_learning_rate"] = self.learning_rate
    restore = None
    if self.__dict__.get("_callable_hyperparameters"):
        restore = _evaluate_callable_hyperparameters(self)
    try:
        self._before_updates(self._step_learning_rate)
    except BaseException:
        if restore is not None:
            restore()
        raise
    return restore


def _evaluate_callable_hyperparameters(self) -> Any:
    """Calls each callable hyperparameter once (no arguments, as Keras documents), checks its value, and puts the
    number in the attribute for this update, rounded as a constant of that value would be. Returns the function
    that puts the callables back."""
    values = {}
    for name in sorted(self._callable_hyperparameters):
        fn = self.__dict__[name]
        result = fn()
        checks.check_result(name, result, self._hyperparameter_ranges)
        values[name] = checks.as_number(name, result)
    saved = {name: self.__dict__[name] for name in values}
    self.__dict__.update(values)
    return lambda: self.__dict__.update(saved)


# ------------------------------------------------------------------------------------------ the count
def count_iterations(self, pairs: list[Pair], call: Call) -> None:
    """``iterations += 1``, the accumulators cleared first on an update call (this update used them)."""
    steps = self.gradient_accumulation_steps
    if steps and (int(self._iterations) + 1) % steps == 0:
        torch._foreach_zero_(self._accumulated_gradients)
    count_step(self._iterations)


def iterations(self) -> torch.Tensor:
    """What a Keras 3 step returns: the iteration counter."""
    return self._iterations


# ------------------------------------------------------------------------------ decoupled weight decay
# Keras 3's ``weight_decay``: ``w -= (w * weight_decay) * lr`` before the update, except for the variables
# ``exclude_from_weight_decay`` names. Rules whose kernel takes the decay (``_fused_weight_decay``) apply it in
# their own pass for dense gradients.
def exclude_from_weight_decay(
    self, var_list: Optional[Sequence[torch.Tensor]] = None, var_names: Optional[Sequence[str]] = None
) -> None:
    """Skips weight decay for these variables, or for variables whose name matches any ``var_names`` regex."""
    # The variables themselves are kept (not only their ids): an id is only meaningful while its object lives,
    # and a copy of (model, optimizer) maps them to the copied variables.
    # Keras joins ``var_names`` into one regex: a bare string would become one alternative per character
    # ("bias" -> "b|i|a|s", which excludes almost everything), so it is refused here, as is a bad regex.
    excluded = checks.check_tensor_list("var_list", var_list)
    pattern = checks.check_regex_list("var_names", var_names)
    self._exclude_vars = excluded
    self._exclude_ids = {id(v) for v in self._exclude_vars}
    self._exclude_pattern = pattern


def _use_weight_decay(self, var: torch.Tensor) -> bool:
    if id(var) in self._exclude_ids:
        return False
    return not (self._exclude_pattern is not None and self._exclude_pattern.search(self._name_of(var)))


def apply_weight_decay(self, pairs: list[Pair], call: Call) -> None:
    self.__dict__["_decay_in_update"] = None
    if not self.weight_decay:
        return
    learning_rate = _learning_rate_of_step(self)
    listed = rounds(pairs)  # a variable listed twice decays twice before its updates, as in Keras
    fused: set[int] = set()
    plan = pairs.plan
    exclusions = (self._exclude_ids, self._exclude_pattern)
    if self._fused_weight_decay and len(listed) == 1 and not self._has_custom_update():
        # The update kernel decays dense-gradient variables in its own pass (one pass over memory): the
        # same operations on each element, and each element's decay still precedes its update.
        remembered = plan.memo.get("decayed") if plan is not None else None
        if remembered is not None and all(map(operator.is_, remembered[0], exclusions)):
            fused = remembered[1]  # an ordinary step: every gradient dense, the same exclusions
        else:
            # (slices decay in the one-pass sparse update's pass too, engine/sparse_pass.py)
            one_pass = self._sparse_one_pass and self._sparse_layout == "blocks"
            fused = {self._var_index[id(v)] for g, v in pairs
                     if (one_pass or not isinstance(g, IndexedSlices)) and self._use_weight_decay(v)}
            if plan is not None:
                plan.memo["decayed"] = (exclusions, fused)
        self.__dict__["_decay_in_update"] = fused
        if plan is not None:
            return  # every decayed variable of an ordinary step is decayed by the update kernel
    for round_pairs in listed:
        decayed = [v for _, v in round_pairs if self._use_weight_decay(v)]
        positions = [p for p in (self._position(v) for v in decayed) if p not in fused]
        for group in self._groups(positions):
            params = [self._vars[p] for p in group]
            dtype = params[0].dtype
            decoupled_weight_decay(params, **_decay_terms(self, learning_rate, dtype, "lr"))


def _decay_terms(self, learning_rate: Any, dtype: torch.dtype, lr_key: str) -> dict[str, float]:
    """The decoupled weight decay's constants in ``dtype`` (``lr_key`` names the learning rate argument)."""
    return {"weight_decay": K.cast(self.weight_decay, dtype), lr_key: self._lr_for(learning_rate, dtype)}


# ------------------------------------------------------------------------------------ grouped updates
# The update stage: each (device, dtype) group of dense gradients in one multi-tensor kernel call (the
# small variables' state packed), row slices with Keras 3's TensorFlow-backend semantics, and a variable
# listed twice updated twice, in order. A subclass that overrides ``update_step`` is updated one variable at a
# time through it.
def _has_custom_update(self) -> bool:
    """Whether a subclass overrides ``update_step`` (then every variable goes through it)."""
    return type(self).update_step is not update_step


def _learning_rate_of_step(self) -> Any:
    """This update's learning rate: the schedule's value from ``evaluate_update``, or the (group's) variable."""
    return self._step_learning_rate if self._lr_is_driven() else self.learning_rate


def apply_updates(self, pairs: list[Pair], call: Call) -> None:
    learning_rate = _learning_rate_of_step(self)
    fused = self.__dict__.pop("_decay_in_update", None) or set()  # decayed by the update kernel
    for round_pairs in rounds(pairs):
        _apply_round(self, round_pairs, learning_rate, fused)


def _apply_round(self, pairs: list[Pair], learning_rate: Any, fused: set[int]) -> None:
    """Updates variables that each appear once in ``pairs``; those in ``fused`` also get their weight decay
    from the update kernel."""
    custom = self._has_custom_update()
    plan = pairs.plan
    if plan is not None and not custom:
        _update_groups(self, plan.groups, GradientsByPosition(pairs), learning_rate, fused, pairs)
        return
    dense: list[Pair] = []
    for pair in pairs:
        g, v = pair
        if type(g) is torch.Tensor and g.dtype is v.dtype:
            dense.append(pair)  # the common case: no new objects per pair (the GC's work grows with them)
        elif isinstance(g, IndexedSlices) and not custom and self._sparse_layout is not None:
            _apply_slices(self, v, g, learning_rate, decay=self._var_index[id(v)] in fused)
        else:
            dense.append((validation.dense(g, v), v))
    if custom:
        for g, v in dense:
            self.update_step(g, v, learning_rate)
        return
    index = self._var_index
    by_pos = {index[id(v)]: g for g, v in dense}
    _update_groups(self, self._groups(list(by_pos)), by_pos, learning_rate, fused)


def _update_groups(self, groups: list[list[int]], by_pos: Mapping[int, Any], learning_rate: Any, fused: set[int],
                   step: Optional[Ordinary] = None) -> None:
    """The rule over each (device, dtype) group of positions (``by_pos``: their dense gradients), the
    variables in ``fused`` decayed by the rule's own pass; an ordinary ``step``'s plan keeps the split."""
    plan = step.plan if step is not None else None
    for whole_group in groups:
        parts = [(whole_group, {})]
        if fused:
            terms = _decay_terms(self, learning_rate, self._vars[whole_group[0]].dtype, "weight_decay_lr")
            split = plan.memo.get(("fused split", id(whole_group))) if plan is not None else None
            if split is None or split[0] is not fused:
                split = (fused, [p for p in whole_group if p in fused], [p for p in whole_group if p not in fused])
                if plan is not None:
                    plan.memo[("fused split", id(whole_group))] = split
            parts = [(split[1], terms), (split[2], {})]
        for group, terms in parts:
            if self._elementwise_update and self._kernel_slots and group:
                group = self._flat_state.update_packed(
                    group, self._vars, by_pos, self._kernel_slots,
                    lambda params, grads, slots, terms=terms: self._update_group(params, grads, slots,
                                                                                 learning_rate, **terms),
                    step)
            if group and step is not None:  # an ordinary step: the variables, gradients and slots with the
                # addresses its plan proved in this step (``_slot_lists``: ``StepPlan.state_operands``)
                self.__dict__["_updating_plan"] = plan
                try:
                    self._update_group(plan.group_params(group, self._vars), step.gradients(group),
                                       self._slot_lists(self._kernel_slots, group), learning_rate, **terms)
                finally:
                    self.__dict__["_updating_plan"] = None
            elif group:  # the gradients were checked against their variables this step (Matched)
                params = [self._vars[p] for p in group]
                self._update_group(params, native.Matched([by_pos[p] for p in group]),
                                   self._slot_lists(self._kernel_slots, group), learning_rate, **terms)


def _apply_slices(self, var: torch.Tensor, grad: IndexedSlices, learning_rate: Any, decay: bool = False) -> None:
    """Keras 3 on its TensorFlow backend keeps a sparse gradient as slices through element-wise ops: repeats
    of a row are summed only where the rule densifies (keras3_sparse.md §2). ``cast`` keeps slices, so the
    values are cast to the variable's dtype first; the rule then sees the whole variable, or a block of its
    rows with the slices of that block (``"blocks"``), so that no table-sized temporary is made."""
    pos = self._position(var)
    indices = grad.indices
    if grad.values.dtype is not var.dtype or indices.dtype is not torch.int64 or indices.dim() != 1:
        # (checked against the variable already; the rules below read only the values and indices)
        grad = IndexedSlices(grad.values.to(var.dtype), indices, tuple(var.shape))
    names = self._kernel_slots

    def update(param: torch.Tensor, slices: IndexedSlices, slots: list[torch.Tensor]) -> None:
        self._update_slices(param, slices, {n: [s] for n, s in zip(names, slots)}, learning_rate)

    slots = [self._slots[n][pos] for n in names]
    # ``decay``: the weight decay stage left this variable's decay to this pass (Keras decays every row
    # first, then updates; the fused rule does both per element, the touched rows' copies are decayed first).
    terms = _decay_terms(self, learning_rate, var.dtype, "weight_decay_lr") if decay else {}

    def decayed_update(param: torch.Tensor, slices: IndexedSlices, state: list[torch.Tensor]) -> None:
        if decay:
            decoupled_weight_decay([param], weight_decay=terms["weight_decay"], lr=terms["weight_decay_lr"])
        update(param, slices, state)

    if self._sparse_layout == "blocks" and self._sparse_one_pass and sparse_pass.update(
            var, grad, slots, decayed_update,
            lambda params, grads, state: self._update_group(params, grads, dict(zip(names, state)),
                                                            learning_rate, **terms)):
        return
    if decay:  # the one pass did not apply: the decay stage's own pass, then the rows
        decoupled_weight_decay([var], **_decay_terms(self, learning_rate, var.dtype, "lr"))
    if self._sparse_layout == "blocks":
        sparse_rows.update_by_row_blocks(var, grad, slots, update)
    else:
        update(var, grad, slots)


def _update_slices(self, param: torch.Tensor, grad: IndexedSlices, slots: dict[str, list[torch.Tensor]],
                   learning_rate: Any) -> None:
    """The rule on slices. Default: the dense kernel on ``Σg`` with the per-slice terms of ``_slice_terms``."""
    self._update_group([param], [sparse_rows.summed(grad, param)], slots, learning_rate,
                       **self._slice_terms(param, grad, learning_rate))


def _slice_terms(self, param: torch.Tensor, grad: IndexedSlices, learning_rate: Any) -> dict[str, Any]:
    """The kernel inputs that Keras computes per slice and then sums (``Σ(f(g))`` where the dense rule has
    ``f(Σg)``), as one-element lists keyed by the kernel's argument name."""
    return {}


def _before_updates(self, learning_rate: Any) -> None:
    """Runs once per update step, before any variable is updated (per-step scalars such as Nadam's product)."""


def update_step(self, gradient: torch.Tensor, variable: torch.Tensor, learning_rate: Any) -> None:
    """Updates one variable. Custom optimizers override this; built-ins run their multi-tensor kernel.

    Called directly (outside ``apply``), it runs without autograd, as Keras variables are not autograd
    leaves: a parameter that requires grad is updated in place like in a step."""
    pos = self._position(variable)
    with torch.no_grad():
        self._update_group([variable], [gradient], self._slot_lists(self._kernel_slots, [pos]), learning_rate)


def _update_group(
    self,
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    slots: dict[str, list[torch.Tensor]],
    learning_rate: Any,
    **terms: Any,
) -> None:
    raise NotImplementedError(
        f"{type(self).__name__} must implement `update_step(gradient, variable, learning_rate)`."
    )


# ------------------------------------------------------------------------------------- moving averages
# ``use_ema``: an ``average`` slot per variable follows it after every update (``ema_momentum``; the first
# update copies it), overwriting the variables every ``ema_overwrite_frequency`` updates;
# ``finalize_variable_values`` overwrites them once at the end of training.
def update_moving_averages(self, pairs: list[Pair], call: Call) -> None:
    if not self.use_ema:
        return
    it = int(self.iterations)
    plan = _ema_plan(self)
    for group in self._groups(self._trainable_positions) if plan is None else plan.groups:
        operands = None if plan is None else _ema_operands(self, plan, group)
        if operands is None:
            params, averages = [self._vars[p] for p in group], [self._slots["average"][p] for p in group]
        else:
            params, averages = operands
        dtype = params[0].dtype
        momentum = K.literal(self.ema_momentum, dtype) if it != 0 else 0.0
        one_minus = K.evaluate(lambda one, m: one - m, dtype, 1.0, momentum)
        moving_average(params, averages, momentum=momentum, one_minus_momentum=one_minus)
    if self.ema_overwrite_frequency and (it + 1) % self.ema_overwrite_frequency == 0:
        _overwrite_with_averages(self, self._trainable_variables)


def _ema_plan(self) -> Optional[Any]:
    """The last step's plan when it records exactly the trainable variables, in order, and the C++ checks run (they
    prove its operands again here, after the update and any constraint), else None. Its groups are then the
    moving averages' groups, and their operands are proven in one pass each instead of read per tensor."""
    plan = plan_cache.current_plan(self)
    if plan is None or not tensor_table.active() or plan.table is None:
        return None
    trainable = self._trainable_positions
    kept = plan.memo.get(("ema", "trainable"))
    if kept is None or kept[0] is not trainable:
        kept = (trainable, plan.positions == list(trainable))
        plan.memo[("ema", "trainable")] = kept
    return plan if kept[1] else None


def _ema_operands(self, plan: Any, group: list[int]) -> Optional[tuple[Any, Any]]:
    """The variables and averages of ``group`` (one of ``plan.groups``) for the compiled moving average, each list
    proven now in one C++ pass (``state_operands``: the same objects at the same addresses, of their dtype and
    sizes, contiguous, inside their storage); None when they are not (the caller reads them per tensor)."""
    params = plan.group_params(group, self._vars)
    if type(params) is not native.Verified:
        return None
    proven = plan.state_operands("ema variables", group, list(params))
    averages = plan.state_operands("average", group, plan.entries(self._slots["average"], group))
    if type(proven) is not native.Matched or type(averages) is not native.Matched:
        return None
    kept = plan.memo.get(("ema", "same", id(group)))
    if kept is None or kept[0] is not proven or kept[1] is not params:
        kept = (proven, params, bool(np.array_equal(proven.addresses, params.addresses)))
        plan.memo[("ema", "same", id(group))] = kept
    return (params, averages) if kept[2] else None


def _overwrite_with_averages(self, variables: Sequence[torch.Tensor]) -> None:
    with torch.no_grad():
        torch._foreach_copy_(list(variables), list(self._model_variables_moving_average))


def finalize_variable_values(self, var_list: Sequence[torch.Tensor]) -> None:
    """With ``use_ema``, sets each variable to its moving average (call once after training)."""
    var_list = checks.check_tensor_list("var_list", var_list)
    if not self.use_ema:
        return
    if not self.built:
        raise ValueError(
            "`finalize_variable_values(var_list)` overwrites the variables with their moving averages, which "
            "exist once the optimizer is built (by `build` or its first step). Received: "
            f"var_list={[variable_name(v, 'variable') for v in var_list]} on an unbuilt optimizer.")
    averages = self._model_variables_moving_average
    if len(var_list) != len(averages):
        raise ValueError(
            f"The length of model variables ({len(var_list)}) to override does not match the length of model "
            f"variables stored in the optimizer ({len(averages)}). Please check if the optimizer was called "
            "on your model."
        )
    for i, (var, average) in enumerate(zip(var_list, averages)):
        if var.shape != average.shape:
            raise ValueError(
                f"Argument `var_list` entry {i} has shape {tuple(var.shape)} but its moving average has shape "
                f"{tuple(average.shape)}: pass the variables in the order the optimizer was built on. Received: "
                f"var_list[{i}]={variable_name(var, 'variable')}")
    _overwrite_with_averages(self, var_list)
