"""One optimizer step, top to bottom.

Every generation (Keras 3, tf.keras legacy, TF1) runs exactly this function. A generation decides what each
stage does by overriding the stage methods of ``OptimizerCore``; stages a generation does not have are no-ops
there (TF1 has no clipping, only Keras 3 has accumulation, weight decay and moving averages).

Validation happens entirely in ``_prepare_pairs``: when it raises, nothing has changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .core import OptimizerCore, Pairs

__all__ = ["run_step"]


def run_step(opt: OptimizerCore, grads_and_vars: Pairs, **options: Any) -> Any:
    with torch.no_grad():
        return _step(opt, grads_and_vars, **options)


def _step(opt: OptimizerCore, grads_and_vars: Pairs, **options: Any) -> Any:
    pairs = opt._prepare_pairs(grads_and_vars, **options)  # validate, build; raises before any change
    if pairs is None:
        return opt._empty_step_result()
    pairs = opt._drop_missing_gradients(pairs)
    pairs = opt._unscale_gradients(pairs)
    update = opt._accumulate_gradients(pairs)  # None on an accumulate-only call
    if update:
        update = opt._aggregate_across_processes(update, **options)
        update = opt._transform_gradients(update)  # clipping, gradient transformers
        opt._apply_weight_decay(update)
        opt._apply_updates(update)
    opt._apply_constraints(pairs)
    opt._update_moving_averages()
    return opt._finish_step(pairs, **options)  # iterations += 1 / global_step += 1
