"""FTRL-Proximal (l1, l2, l2 shrinkage, beta, learning-rate power)."""

from __future__ import annotations

from typing import Optional

import torch

from .. import numerics
from . import roots
from .native import Flag, Scalar, compiled

__all__ = ["ftrl"]

Tensors = list[torch.Tensor]


@compiled("ftrl_root", 4, (Scalar("lr"), Scalar("l1"), Scalar("two_l2"), Scalar("shrinkage"), Flag("scalar_rows")),
          foreach_if="not root")  # pow: numerics.pow on both paths
def ftrl(params: Tensors, grads: Tensors, accumulators: Tensors, linears: Tensors,
         squares: Optional[Tensors] = None, *, lr: float, power: float, l1: float, two_l2: float, shrinkage: float,
         scalar_rows: bool = False, root: bool = False, rows: bool = False) -> None:
    """FTRL-Proximal as Keras 3 evaluates it (``power = -learning_rate_power``).

    ``g' = g + shrinkage * w`` (``shrinkage = 2 * l2_shrinkage``); ``n' = n + g*g`` (plain g);
    ``z += g' - ((n'^power - n^power) / lr) * w``; ``q = n'^power / lr + two_l2`` where
    ``two_l2 = 2 * (l2 + beta / (2 * lr))``; ``w = (clip(z, -l1, l1) - z) / q``; ``n = n'``.

    This is also TensorFlow's ``ApplyFtrl``/``ApplyFtrlV2`` and row-sparse ``SparseApplyFtrl(V2)`` kernel
    (TF1 ``FtrlOptimizer``, tf.keras legacy ``Ftrl``; ``pow(x, 0.5)`` is ``sqrt`` in torch). ``scalar_rows``:
    TensorFlow's sparse kernel for rows of one element associates ``z' = (z + g') - sigma * w``. ``root``:
    TensorFlow's kernels take an IEEE ``sqrt`` for ``learning_rate_power == -0.5`` (pass ``power=0.5``) where a
    Python ``tf.pow`` would use Eigen's ``pow``. ``squares`` (optional) replaces ``g*g`` (Keras 3 on slices:
    squares per slice, then the repeats summed). Otherwise ``n^power`` is TensorFlow's ``pow``
    (``numerics.pow``: Eigen's packet ``pow`` on the whole packets of each tensor, or of each row with ``rows``,
    the sparse kernels). Not cut into blocks: the result depends on each element's position in its tensor.
    """
    adjusted = torch._foreach_mul(params, shrinkage)
    torch._foreach_add_(adjusted, grads)
    new_accumulators = torch._foreach_mul(grads, grads) if squares is None else [s.clone() for s in squares]
    torch._foreach_add_(new_accumulators, accumulators)
    new_power = roots.sqrt(new_accumulators) if root else [numerics.pow(n, power, rows) for n in new_accumulators]
    old_power = roots.sqrt(accumulators) if root else [numerics.pow(n, power, rows) for n in accumulators]
    sigma = torch._foreach_sub(new_power, old_power)
    numerics.div_scalar_(sigma, lr)  # (CUDA divides by a number as a product with its reciprocal)
    torch._foreach_mul_(sigma, params)
    if scalar_rows:
        torch._foreach_add_(linears, adjusted)
        torch._foreach_sub_(linears, sigma)
    else:
        torch._foreach_sub_(adjusted, sigma)
        torch._foreach_add_(linears, adjusted)
    quadratic = numerics.div_scalar(new_power, lr)
    torch._foreach_add_(quadratic, two_l2)
    clipped = torch._foreach_clamp_min(linears, -l1)
    torch._foreach_clamp_max_(clipped, l1)
    torch._foreach_sub_(clipped, linears)
    torch._foreach_div_(clipped, quadratic)
    torch._foreach_copy_(params, clipped)
    torch._foreach_copy_(accumulators, new_accumulators)
