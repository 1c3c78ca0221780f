"""Adadelta."""

from __future__ import annotations

import torch

from .. import numerics
from ..variables import IndexedSlices
from . import roots
from . import rows as sparse_rows
from .adagrad import packet_row
from .blocks import elementwise
from .native import Integer, Scalar, compiled

__all__ = ["adadelta", "adadelta_slices"]

Tensors = list[torch.Tensor]


def _decay_add(accumulators: Tensors, terms: Tensors, *, rho: float) -> None:
    """``acc <- rho * acc + terms``."""
    torch._foreach_mul_(accumulators, rho)
    torch._foreach_add_(accumulators, terms)


def _scaled_squares(x: Tensors, one_minus_rho: float) -> Tensors:
    """``(1 - rho) * x*x`` (new tensors)."""
    scaled = torch._foreach_mul(x, x)
    torch._foreach_mul_(scaled, one_minus_rho)
    return scaled


def _adadelta_deltas(grads: Tensors, accumulated_grad: Tensors, accumulated_delta: Tensors, *,
                     epsilon: float) -> Tensors:
    """``delta = -((sqrt(Ed + eps) * g) / sqrt(Eg + eps))`` (new tensors)."""
    delta = torch._foreach_add(accumulated_delta, epsilon)
    roots.sqrt_(delta)
    torch._foreach_mul_(delta, grads)
    denom = torch._foreach_add(accumulated_grad, epsilon)
    roots.sqrt_(denom)
    torch._foreach_div_(delta, denom)
    torch._foreach_neg_(delta)
    return delta


@compiled("adadelta", 4, (Scalar("lr"), Scalar("rho"), Scalar("one_minus_rho"), Scalar("epsilon")))
@elementwise
def adadelta(params: Tensors, grads: Tensors, accumulated_grad: Tensors, accumulated_delta: Tensors, *,
             lr: float, rho: float, one_minus_rho: float, epsilon: float) -> None:
    """Adadelta as Keras 3 evaluates it.

    ``Eg = rho * Eg + (1 - rho) * g*g``; ``delta = -((sqrt(Ed + eps) * g) / sqrt(Eg + eps))`` (new Eg, old Ed);
    ``Ed = rho * Ed + (1 - rho) * delta*delta``; ``w += lr * delta``.
    """
    _decay_add(accumulated_grad, _scaled_squares(grads, one_minus_rho), rho=rho)
    delta = _adadelta_deltas(grads, accumulated_grad, accumulated_delta, epsilon=epsilon)
    _decay_add(accumulated_delta, _scaled_squares(delta, one_minus_rho), rho=rho)
    torch._foreach_mul_(delta, lr)
    torch._foreach_add_(params, delta)


def adadelta_slices(param: torch.Tensor, grad: IndexedSlices, accumulated_grad: torch.Tensor,
                    accumulated_delta: torch.Tensor, *, lr: float, rho: float, one_minus_rho: float,
                    epsilon: float) -> None:
    """Keras 3 ``Adadelta`` on slices (TensorFlow backend, keras3_sparse.md §4.7): ``Eg`` takes the per-slice
    ``(1 - rho) * g*g`` summed per row; ``delta_j`` is per slice from the rows of ``Ed`` (old) and ``Eg`` (new);
    ``Ed`` takes ``(1 - rho) * delta_j*delta_j`` summed per row; ``w[i_j] += lr * delta_j`` one slice at a time.
    The tensors may be a block of rows (``grad`` then holds that block's slices with local indices).
    """
    indices, rows = grad.indices, param.shape[0]
    squares = _scaled_squares([grad.values], one_minus_rho)[0]
    _decay_add([accumulated_grad], [sparse_rows.segment_sum(squares, indices, rows)], rho=rho)
    delta = _adadelta_deltas([grad.values], [accumulated_grad.index_select(0, indices)],
                             [accumulated_delta.index_select(0, indices)], epsilon=epsilon)
    squares = _scaled_squares(delta, one_minus_rho)[0]
    _decay_add([accumulated_delta], [sparse_rows.segment_sum(squares, indices, rows)], rho=rho)
    sparse_rows.scatter_add_(param, indices, delta[0].mul_(lr))


@compiled("apply_adadelta", 4, (Scalar("lr"), Scalar("rho"), Scalar("one_minus_rho"), Scalar("epsilon"),
                                Integer("packet_row", packet_row, ("params", "rows"))))
def apply_adadelta(params: Tensors, grads: Tensors, accum: Tensors, accum_update: Tensors, *, lr: float,
                   rho: float, one_minus_rho: float, epsilon: float, rows: bool = False) -> None:
    """TensorFlow's ``ApplyAdadelta`` / ``SparseApplyAdadelta`` kernel (TF1 ``AdadeltaOptimizer`` and the
    tf.keras legacy ``Adadelta``), with ``rsqrt(x) = 1 / sqrt(x)``:

    ``accum <- accum * rho + (g*g) * (1 - rho)``; ``upd = (sqrt(accum_update + eps) * rsqrt(accum + eps)) * g``
    (new accum, old accum_update); ``w <- w - upd * lr``;
    ``accum_update <- accum_update * rho + (upd*upd) * (1 - rho)``. ``rsqrt`` is TensorFlow's
    (``numerics.rsqrt``), packets from each tensor's element 0 or each row (``rows``, the sparse kernel); not cut
    into blocks, since the result depends on each element's position.
    """
    torch._foreach_mul_(accum, rho)
    scaled = torch._foreach_mul(grads, grads)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(accum, scaled)
    update = torch._foreach_add(accum_update, epsilon)
    roots.sqrt_(update)
    inverse_root = numerics.rsqrt(torch._foreach_add(accum, epsilon), rows=rows)
    torch._foreach_mul_(update, inverse_root)
    torch._foreach_mul_(update, grads)
    torch._foreach_sub_(params, torch._foreach_mul(update, lr))
    torch._foreach_mul_(accum_update, rho)
    scaled = torch._foreach_mul(update, update)
    torch._foreach_mul_(scaled, one_minus_rho)
    torch._foreach_add_(accum_update, scaled)


__all__ += ["apply_adadelta"]
