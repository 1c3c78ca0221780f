"""One optimizer step, top to bottom.

Every generation (Keras 3, tf.keras legacy, TF1) runs exactly this function. A generation decides what each
stage does by overriding the stage methods of ``OptimizerCore``; stages a generation does not have are no-ops
there (TF1 has no clipping, only Keras 3 has accumulation, weight decay and moving averages).

Validation happens entirely in ``_prepare_pairs``: when it raises, nothing has changed. What the step itself calls
before its first write (learning-rate callables, transformers) may move what was validated: the pairs are proven
again just before that write (engine/unchanged.py), and from there to the end no finalizer or SIGINT handler runs
(engine/atomic.py), so a step is refused with nothing written or completes. Constraints run after
the update: a step whose variables have one first copies the values it may write (``engine/undo.py``),
so that a constraint that raises or returns a bad value leaves everything as it was. Values written into
``param_groups`` since the last step (a torch LR scheduler's ``lr``) are checked and applied first; parameter
groups with their own hyperparameters are updated with those values (one partition per such group).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import torch

from ..kernels.native import tensor_table
from ..numerics import fpmode
from ..numerics.device import NotCapturable
from . import atomic, capture
from .eager import outside_dynamo
from .plan import proof_mark
from .unchanged import proven_again
from .undo import StepValues, constrained_step, guarded

if TYPE_CHECKING:
    from .core import OptimizerCore, Pairs

__all__ = ["run_step"]


@outside_dynamo  # exact steps run eagerly under torch.compile (engine/eager.py, TorchProtocol.step)
def run_step(opt: OptimizerCore, grads_and_vars: Pairs, **options: Any) -> Any:
    # TensorFlow's kernels flush subnormal numbers to zero (slotopt.numerics.fpmode); so does the whole step, run
    # without autograd (what ``torch.no_grad()`` and ``flush_to_zero()`` do, as plain calls: see fpmode), both at
    # once in C++ where it is built.
    # No finalizer or SIGINT handler runs until the step ends (engine/atomic.py): a step is refused with nothing
    # written, or completes; a KeyboardInterrupt meanwhile is raised after it.
    enter, leave = tensor_table.step_mode() or _STEP_MODE
    held = atomic.hold()
    try:
        token = enter()
        try:
            capture.check(opt)  # a CUDA graph capture is refused before anything is written (engine/capture.py)
            return _step(opt, grads_and_vars, **options)
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


def _step(opt: OptimizerCore, grads_and_vars: Pairs, **options: Any) -> Any:
    opt._sync_param_groups()  # torch side: what a scheduler wrote into param_groups
    grads_and_vars = opt._local_pairs(grads_and_vars)  # FSDP2: the local shards of sharded parameters
    since = proof_mark()  # (an ordinary step proven after this, in ``_prepare_pairs``, may be proven once)
    pairs = opt._prepare_pairs(grads_and_vars, **options)  # validate, build; raises before any change
    if pairs is None:
        return opt._empty_step_result()
    pairs = opt._ordinary(pairs, since)  # a step like the last one: its plan serves the stages (engine/plan.py)
    # With constraints, the values to put back if the step fails; marked for the steps a wrapper runs inside this
    # one (their variables are among these), which then need not look again (None inside such a step).
    guard = constrained_step(opt, pairs)
    if guard is None:
        return _update(opt, pairs, None, **options)
    try:
        return _update(opt, pairs, guard.values, **options)
    except BaseException:
        guard.restore()  # a constraint raised or returned a bad value: the whole step is undone
        raise
    finally:
        guard.release()


def _update(opt: OptimizerCore, pairs: Pairs, undo: Optional[StepValues], **options: Any) -> Any:
    pairs = opt._drop_missing_gradients(pairs)
    pairs = opt._overwrite_with_gradients(pairs)  # Keras 3: flagged variables take their gradient and leave
    pairs = opt._unscale_gradients(pairs)
    update = opt._accumulate_gradients(pairs)  # None on an accumulate-only call
    if update:
        update = opt._aggregate_across_processes(update, **options)
        update = opt._transform_gradients(update)  # clipping, gradient transformers
        # Per-step scalars (Nadam's momentum product), once; callable hyperparameters evaluated for this update.
        restore = opt._start_updates()
        try:
            # What the code called so far (callables, schedules, transformers) may have moved, proven again
            # before the first write.
            update = proven_again(opt, update)
            for part, group_values in opt._param_group_partitions(update):
                if not group_values:  # (the common case: no group differs from the first)
                    opt._apply_weight_decay(part)
                    opt._apply_updates(part)
                    continue
                with opt._group_scope(group_values):
                    opt._apply_weight_decay(part)
                    opt._apply_updates(part)
        finally:
            if restore is not None:
                restore()  # the callables back in place of this update's values
    if undo is not None or guarded():  # (no variable of this step has a constraint otherwise)
        opt._apply_constraints(pairs)
    opt._update_moving_averages()
    result = opt._finish_step(pairs, **options)  # iterations += 1 / global_step += 1
    opt._publish_param_groups()  # a schedule's new learning rate shows in param_groups
    return result
