"""One optimizer step: the frame every generation's step runs in, and the step's declared shape.

A face declares its step as data, an ordered tuple of stages (``Step``: optax's ``chain``, Keras 3's ``apply()``
order, read top to bottom in the face that owns it), and ``run_step`` runs that tuple in one all-or-nothing frame.
A stage is a function ``stage(opt, pairs, call) -> pairs``: ``pairs`` the step's ``(gradient, variable)`` pairs as
the stage before left them, ``call`` what this call was given (``Call``: its keywords, and whether the step kept
the values it may write). Shared stages are functions of the engine that faces list; where generations differ it
is a different stage in the tuple, or a parameter of one. Three markers of the frame cut the tuple:

* the stages before ``UPDATE`` run on every call, and what they return is the call's pairs (what the stages after
  ``AFTER`` see); a stage from there on that returns None or nothing (an accumulate-only call) ends the update;
* ``first_write(evaluate)``: this update's values are evaluated (``evaluate(opt)``: a schedule's learning rate,
  callable hyperparameters; it may return the function that puts them back after the update), then everything
  the step checked is proven again before its first write (engine/proof/unchanged.py); the stages from there to
  ``AFTER`` run once per parameter group with its own hyperparameters (one partition per such group);
* ``AFTER``: the stages after it see the call's pairs (constraints, moving averages, the step count). ``result(opt)``
  is what the call returns.

Validation happens entirely in the face's ``_prepare_pairs``, before the tuple runs: when it raises, nothing has
changed. From there to the end no finalizer or SIGINT handler runs (engine/writing/atomic.py), so a step is refused with
nothing written or completes. A step whose variables have a constraint first copies the values it may write
(``engine/writing/undo.py``; ``Call.kept``), so that a constraint that raises or returns a bad value leaves everything as it
was. Values written into ``param_groups`` since the last step (a torch LR scheduler's ``lr``) are applied first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, NamedTuple, Optional

import torch

from ..kernels.native import tensor_table
from ..numerics import fpmode
from ..numerics.device import NotCapturable
from ..variables import IndexedSlices
from . import capture, distributed
from .eager import outside_dynamo
from .plan import StepPairs, proof_mark
from .proof.unchanged import proven_again
from .writing import atomic
from .writing.undo import StepValues, constrained_step, guarded

#: (the optimizer and its pairs are ``engine.core``'s ``OptimizerCore`` and ``Pair``s; the core builds on this module)
OptimizerCore = Any
Pair = tuple[Any, Any]
Given = Any  # (the pairs a caller hands a step: any iterable of them)

__all__ = ["run_step", "Step", "Call", "Stage", "UPDATE", "AFTER", "FIRST_WRITE", "first_write",
           "drop_missing_gradients", "negate_gradients", "aggregate_across_processes", "aggregates_nothing", "none"]


class Call(NamedTuple):
    """What one call of a step was given: its keywords (``skip_gradients_aggregation``, TF1's ``global_step``...)
    and whether the step kept the values it may write (``kept``: a variable has a constraint, or a write may run
    code that is not slotopt's; a step that kept nothing has no constraint to apply)."""

    options: Mapping[str, Any]
    kept: bool


Stage = Callable[[Any, Any, Call], Any]


class _Marker:
    """A cut of the frame in a step's tuple (``UPDATE``, ``first_write(...)``, ``AFTER``), not a stage."""

    def __init__(self, name: str, evaluate: Optional[Callable[[Any], Optional[Callable[[], None]]]] = None) -> None:
        self.name, self.evaluate = name, evaluate

    def __repr__(self) -> str:
        return f"pipeline.{self.name}" + (f"({self.evaluate.__qualname__})" if self.evaluate else "")


UPDATE = _Marker("UPDATE")
AFTER = _Marker("AFTER")


def first_write(evaluate: Optional[Callable[[Any], Optional[Callable[[], None]]]] = None) -> _Marker:
    """The marker before a step's first write, with the face's evaluation of this update's values (or none)."""
    return _Marker("first_write", evaluate) if evaluate is not None else FIRST_WRITE


FIRST_WRITE = _Marker("FIRST_WRITE")


def none(opt: Any) -> None:
    """A step's ``result`` when the call returns nothing (TF1 in eager mode)."""
    return None


class Step(tuple):  # type: ignore[type-arg]
    """A face's step: its stages and the frame's three markers in order (see the module docstring), and
    ``result(opt)``, what the call returns. A tuple, so it reads, compares and permutes as one; ``replace`` gives
    a subclass's step with one stage changed."""

    result: Callable[[Any], Any]

    def __new__(cls, *entries: Any, result: Callable[[Any], Any] = none) -> Step:
        step = super().__new__(cls, entries)
        markers = [e for e in entries if isinstance(e, _Marker)]
        if [m.name for m in markers] not in (["UPDATE", "FIRST_WRITE", "AFTER"], ["UPDATE", "first_write", "AFTER"]):
            raise TypeError(f"A step holds UPDATE, first_write(...) and AFTER in this order, once each. Received: "
                            f"{[m for m in markers]}")
        for entry in entries:
            if not isinstance(entry, _Marker) and not callable(entry):
                raise TypeError(f"A stage of a step is a function (opt, pairs, call) -> pairs. Received: {entry!r}")
        update, write, after = (entries.index(m) for m in markers)
        step.result = result
        step.every_call = entries[:update]
        step.gradients = entries[update + 1:write]
        step.evaluate = markers[1].evaluate
        step.writes = entries[write + 1:after]
        step.after = entries[after + 1:]
        return step

    def replace(self, old: Any, new: Any) -> Step:
        """This step with the stage ``old`` replaced by ``new`` (a marker by a marker)."""
        if old not in self:
            raise ValueError(f"{old!r} is not a stage of this step")
        return Step(*(new if entry is old else entry for entry in self), result=self.result)

    def without(self, *stages: Any) -> Step:
        """This step without ``stages``."""
        return Step(*(entry for entry in self if entry not in stages), result=self.result)

    def stages(self) -> list[Any]:
        """The stages in order (the markers left out)."""
        return [entry for entry in self if not isinstance(entry, _Marker)]

    def __reduce__(self) -> Any:
        return (_rebuild, (tuple(self), self.result))


def _rebuild(entries: tuple[Any, ...], result: Callable[[Any], Any]) -> Step:
    return Step(*entries, result=result)


# ----------------------------------------------------------------------------------------- shared stages
def drop_missing_gradients(opt: Any, pairs: Any, call: Call) -> Any:
    """The pairs that have a gradient (an ordinary step has one for every variable)."""
    if pairs.plan is not None:
        return pairs
    return [pair for pair in pairs if pair[0] is not None]


def negate_gradients(opt: Any, pairs: Any, call: Call) -> Any:
    """torch's ``maximize=True``: each gradient negated, as TensorFlow sees the gradients of the negated loss (the
    stages after it and the kernels see ``-g``: the same bits as a step given ``-g``, a negation being exact). The
    pairs have a gradient each (after ``drop_missing_gradients``). An ordinary step stays one: its negated
    gradients are proven against its plan in one pass (engine/plan.py)."""
    if not opt.maximize:
        return pairs
    if pairs.plan is not None and type(pairs.grads) is list:
        variables = [pair[1] for pair in pairs]
        # (a capturable step on the device: the negation's launches are recorded with the step's)
        negated = list(zip(capture.negated(opt, pairs.grads) or torch._foreach_neg(pairs.grads), variables))
        again = pairs.plan.fits(negated)  # (fresh dense tensors of the gradients' kinds: fits, unless moved)
        return again if again is not None else negated
    return [(_negated(g), v) for g, v in pairs]


def _negated(grad: Any) -> Any:
    if isinstance(grad, IndexedSlices):
        return IndexedSlices(-grad.values, grad.indices, grad.dense_shape)
    return -grad  # (a torch sparse COO gradient negates as one; a missing gradient is not a stage's input here)


def _aggregating(opt: Any) -> Any:
    """The optimizer whose hooks aggregate ``opt``'s gradients: a wrapper's (a LossScaleOptimizer's) inner one."""
    while not opt._aggregates_gradients and "_protocol_inner" in dir(type(opt)):
        opt = opt._protocol_inner
    return opt


def transform_unaggregated_gradients(self: Any, grads_and_vars: list[Pair]) -> list[Pair]:
    """Hook run on each process's own gradients before they are aggregated (identity; ``OptimizerCore`` binds it
    as ``_transform_unaggregated_gradients``, TensorFlow's name, which subclasses override)."""
    return grads_and_vars


def aggregate_gradients(self: Any, grads_and_vars: list[Pair]) -> list[Pair]:
    """Aggregates gradients across processes with ``gradient_aggregator`` (``_aggregate_gradients``, the hook
    subclasses override)."""
    return self.gradient_aggregator(grads_and_vars)


def aggregates_nothing(opt: Any) -> bool:
    """Whether ``opt``'s aggregation leaves the gradients as they are: no ``gradient_aggregator``, and neither
    ``_transform_unaggregated_gradients`` nor ``_aggregate_gradients`` overridden (a wrapper's: its inner one's;
    a composite's: each of its optimizers')."""
    opt = _aggregating(opt)
    inner = opt.__dict__.get("_inner_optimizers")
    if not opt._aggregates_gradients and inner is not None:
        return all(map(aggregates_nothing, inner))
    cls = type(opt)
    return (opt.gradient_aggregator is distributed.no_aggregation
            and cls._transform_unaggregated_gradients is transform_unaggregated_gradients
            and cls._aggregate_gradients is aggregate_gradients)


def aggregate_across_processes(opt: Any, pairs: Any, call: Call) -> Any:
    """``_transform_unaggregated_gradients`` then ``_aggregate_gradients`` (a wrapper's inner optimizer's), unless
    the call says the gradients are aggregated already: ``experimental_aggregate_gradients=False`` (tf.keras) or
    ``skip_gradients_aggregation=True`` (TF1, Keras 3)."""
    options = call.options
    if options.get("skip_gradients_aggregation") or options.get("experimental_aggregate_gradients") is False:
        return pairs
    if aggregates_nothing(opt):
        return pairs  # as they are (an ``Ordinary`` step stays one)
    opt = _aggregating(opt)
    return list(opt._aggregate_gradients(list(opt._transform_unaggregated_gradients(pairs))))


# ----------------------------------------------------------------------------------------- the frame
@outside_dynamo  # exact steps run eagerly under torch.compile (engine/eager.py, TorchProtocol.step)
def run_step(opt: OptimizerCore, grads_and_vars: Given, **options: Any) -> Any:
    # TensorFlow's kernels flush subnormal numbers to zero (slotopt.numerics.fpmode); so does the whole step, run
    # without autograd (what ``torch.no_grad()`` and ``flush_to_zero()`` do, as plain calls: see fpmode), both at
    # once in C++ where it is built.
    # No finalizer or SIGINT handler runs until the step ends (engine/writing/atomic.py): a step is refused with nothing
    # written, or completes; a KeyboardInterrupt meanwhile is raised after it.
    enter, leave = tensor_table.step_mode() or _STEP_MODE
    held = atomic.hold()
    try:
        token = enter()
        try:
            # A CUDA graph capture refused before anything is written, or a capturable step's scalars on the
            # device (engine/capture.py)
            frame = capture.step(opt)
            if frame is None:
                return _step(opt, grads_and_vars, options)
            with frame:
                return _step(opt, grads_and_vars, options)
        except NotCapturable as error:  # numerics: a value with no device kernel, met during a capture
            raise capture.refused(opt, error) from error
        finally:
            leave(token)
    finally:
        atomic.release(held)


def _enter_step_mode() -> tuple[bool, Any]:
    """Autograd off and subnormals flushed on this thread; returns what ``_leave_step_mode`` puts back. (Out of
    reach of a torch function mode around the step: one that raised here would leave autograd off.)"""
    with _NO_TORCH_FUNCTION():
        grad_enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        return grad_enabled, fpmode.enter_flush_to_zero()


def _leave_step_mode(token: tuple[bool, Any]) -> None:
    grad_enabled, previous_mode = token
    with _NO_TORCH_FUNCTION():
        fpmode.leave_flush_to_zero(previous_mode)
        torch._C._set_grad_enabled(grad_enabled)


_NO_TORCH_FUNCTION = torch._C.DisableTorchFunction


#: ``tensor_table.step_mode()``'s pair, in Python: where the C++ table is off or was built without it.
_STEP_MODE = (_enter_step_mode, _leave_step_mode)


def _step(opt: OptimizerCore, grads_and_vars: Given, options: dict[str, Any]) -> Any:
    opt._sync_param_groups()  # torch side: what a scheduler wrote into param_groups
    grads_and_vars = opt._local_pairs(grads_and_vars)  # FSDP2: the local shards of sharded parameters
    since = proof_mark()  # (an ordinary step proven after this, in ``_prepare_pairs``, may be proven once)
    pairs = opt._prepare_pairs(grads_and_vars, **options)  # validate, build; raises before any change
    if pairs is None:
        return None
    pairs = opt._ordinary(pairs, since)  # a step like the last one: its plan serves the stages (engine/plan.py)
    # With constraints, the values to put back if the step fails; marked for the steps a wrapper runs inside this
    # one (their variables are among these), which then need not look again (None inside such a step).
    guard = constrained_step(opt, pairs)
    if guard is None:
        return _run(opt, opt._stages, pairs, None, options)
    try:
        return _run(opt, opt._stages, pairs, guard.values, options)
    except BaseException:
        guard.restore()  # a constraint raised or returned a bad value: the whole step is undone
        raise
    finally:
        guard.release()


def _as_pairs(out: Any) -> Optional[StepPairs]:
    """A stage's result as the next stage receives it: a ``StepPairs`` (or None: the update ends)."""
    return out if out is None or isinstance(out, StepPairs) else StepPairs(out)


def _run(opt: OptimizerCore, step: Step, pairs: StepPairs, undo: Optional[StepValues],
         options: dict[str, Any]) -> Any:
    call = Call(options, undo is not None or guarded())  # (no variable of this step has a constraint otherwise)
    # Each stage receives a ``StepPairs`` (engine/plan.py), which says whether a plan serves it (``pairs.plan``); a
    # stage (or a hook it runs) that returns another sequence hands on unplanned pairs.
    for stage in step.every_call:
        out = stage(opt, pairs, call)
        if out is not pairs:  # (the common case: a stage with nothing to do hands its pairs on as they are)
            pairs = _as_pairs(out)
    update = pairs
    for stage in step.gradients:
        if not update:
            break
        out = stage(opt, update, call)
        if out is not update:
            update = _as_pairs(out)
    if update:
        restore = step.evaluate(opt) if step.evaluate is not None else None
        try:
            # What the code called so far (callables, schedules, transformers) may have moved, proven again
            # before the first write.
            update = proven_again(opt, update)
            for part, group_values in opt._param_group_partitions(update):
                if not group_values:  # (the common case: no group differs from the first)
                    for stage in step.writes:
                        stage(opt, part, call)
                    continue
                with opt._group_scope(group_values):
                    for stage in step.writes:
                        stage(opt, part, call)
        finally:
            if restore is not None:
                restore()  # the callables back in place of this update's values
    for stage in step.after:
        stage(opt, pairs, call)
    result = step.result(opt)
    opt._publish_param_groups()  # a schedule's new learning rate shows in param_groups
    return result
