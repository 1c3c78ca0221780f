"""Gradient descent with (Keras) momentum and Nesterov momentum."""

from __future__ import annotations

from typing import Optional

import torch

from . import native
from . import rows as sparse_rows
from .blocks import elementwise
from .native import Flag, Scalar, compiled
from .weight_decay import decoupled_weight_decay

__all__ = ["sgd", "keras_momentum"]

Tensors = list[torch.Tensor]


@compiled("sgd", 2, (Scalar("lr"), Flag("decay", given="weight_decay"), Scalar("weight_decay", absent=0.0),
                     Scalar("weight_decay_lr")))
@elementwise(scale=2)
def sgd(params: Tensors, grads: Tensors, *, lr: float, weight_decay: Optional[float] = None,
        weight_decay_lr: float = 0.0) -> None:
    """``w <- w - g * lr``; with ``weight_decay``, Keras 3's decoupled weight decay first, in the same pass."""
    if weight_decay is not None:
        decoupled_weight_decay(params, weight_decay=weight_decay, lr=weight_decay_lr)
    torch._foreach_sub_(params, torch._foreach_mul(grads, lr))


@compiled("keras_momentum", 3, (Scalar("lr"), Scalar("momentum"), Flag("nesterov"), Flag("decay", given="weight_decay"),
                                Scalar("weight_decay", absent=0.0), Scalar("weight_decay_lr")))
@elementwise(scale=2)
def keras_momentum(params: Tensors, grads: Tensors, momenta: Tensors, steps: Optional[Tensors] = None, *,
                   lr: float, momentum: float, nesterov: bool, weight_decay: Optional[float] = None,
                   weight_decay_lr: float = 0.0) -> None:
    """Keras momentum (Keras 3 and tf.keras legacy):

    ``m <- m * mu - g * lr``; then ``w <- w + (m * mu - g * lr)`` (Nesterov, with the new m) or ``w <- w + m``.
    ``steps`` (optional) replaces ``g * lr`` (Keras 3 on slices: products per slice, then the repeats summed).
    With ``weight_decay``, Keras 3's decoupled weight decay runs first, in the same pass.
    """
    if weight_decay is not None:
        decoupled_weight_decay(params, weight_decay=weight_decay, lr=weight_decay_lr)
    step = torch._foreach_mul(grads, lr) if steps is None else steps
    torch._foreach_mul_(momenta, momentum)
    torch._foreach_sub_(momenta, step)
    if nesterov:
        lookahead = torch._foreach_mul(momenta, momentum)
        torch._foreach_sub_(lookahead, step)
        torch._foreach_add_(params, lookahead)
    else:
        torch._foreach_add_(params, momenta)



@compiled("momentum", 3, (Scalar("lr"), Scalar("momentum"), Flag("nesterov"),
                          Flag("fused_product", given="lr_times_momentum"), Scalar("lr_times_momentum", absent=0.0)))
@elementwise(scale=2)
def momentum(params: Tensors, grads: Tensors, accumulators: Tensors, *, lr: float, momentum: float,
             nesterov: bool, lr_times_momentum: float | None = None) -> None:
    """TensorFlow's ``ApplyMomentum`` / ``SparseApplyMomentum`` (TF1 ``MomentumOptimizer``).

    ``a <- a * mu + g``; then ``w <- w - a * lr``, or with Nesterov ``w <- w - (g * lr + (a * mu) * lr)`` (new a).
    The sparse kernel associates the Nesterov term as ``a * (lr * mu)``: pass ``lr_times_momentum`` (rounded
    in the variable dtype) to get that form.
    """
    torch._foreach_mul_(accumulators, momentum)
    torch._foreach_add_(accumulators, grads)
    if not nesterov:
        torch._foreach_sub_(params, torch._foreach_mul(accumulators, lr))
        return
    step = torch._foreach_mul(grads, lr)
    if lr_times_momentum is None:
        lookahead = torch._foreach_mul(accumulators, momentum)
        torch._foreach_mul_(lookahead, lr)
    else:
        lookahead = torch._foreach_mul(accumulators, lr_times_momentum)
    torch._foreach_add_(step, lookahead)
    torch._foreach_sub_(params, step)


#: The scalar vector of the compiled rule on slices ``sgd_slices`` (and of its Triton twin).
_SGD_SLICES = native.slices("sgd_slices", False, (Scalar("lr"),), __name__)


def scatter_sgd(param: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, *, lr: float) -> None:
    """``w[i_k] <- w[i_k] + (-g_k) * lr`` for every row k in order, duplicates NOT summed first.

    TensorFlow's sparse gradient descent (``resource_scatter_add``); with a repeated index the rows are added
    one at a time, which rounds differently from ``w - (g_a + g_b) * lr``.

    An index outside the table raises ``ValueError`` before anything changes. Contiguous CPU tensors of a compiled
    dtype run the compiled twin (``sgd_slices`` in native/rules.inc: one serial pass in slice order, the same bits),
    CUDA float32/float64 tensors its Triton twin (``kernels.triton.apply_slices``); this torch code is the
    specification and the fallback.
    """
    if native.apply_slices("sgd_slices", param, indices, values, None, _SGD_SLICES.vector(lr=lr)):
        return
    sparse_rows.check_rows(indices, param.shape[0])
    sparse_rows.scatter_add_(param, indices, torch.neg(values).mul_(lr))


def fobos_shrink(prox: Tensors, threshold: float | Tensors, denominator: float | Tensors, *,
                 l1_positive: bool, widen: bool = False) -> None:
    """The FOBOS proximal step, in place on ``prox``:

    ``prox <- sign(prox) * max(|prox| - threshold, 0) / denominator`` (``prox / denominator`` when l1 is not
    positive), where ``threshold`` is ``lr * l1`` (or ``eta * l1`` per element) and ``denominator`` is
    ``1 + l2 * lr`` (or ``1 + l2 * eta``), both rounded by the caller. With ``widen`` the denominator is float64
    and the division is done in float64 and rounded back once, as TensorFlow's scalar-row sparse kernels do.
    """
    if l1_positive:
        magnitude = torch._foreach_abs(prox)
        torch._foreach_sub_(magnitude, threshold)
        torch._foreach_clamp_min_(magnitude, 0.0)
        numerator = torch._foreach_sign(prox)
        torch._foreach_mul_(numerator, magnitude)
    elif not widen:
        torch._foreach_div_(prox, denominator)
        return
    else:
        numerator = list(prox)
    if widen:
        numerator = [n.double() for n in numerator]
    torch._foreach_div_(numerator, denominator)
    torch._foreach_copy_(prox, numerator)


@compiled("proximal_gradient_descent", 2, (Scalar("lr"), Scalar("lr_l1"), Scalar("denominator"), Flag("l1_positive")),
          foreach_if="widen")
@elementwise
def proximal_gradient_descent(params: Tensors, grads: Tensors, *, lr: float, lr_l1: float, denominator: float,
                              l1_positive: bool, widen: bool = False) -> None:
    """TensorFlow's ``ApplyProximalGradientDescent`` (FOBOS): ``prox = w - g * lr``; then
    ``w <- sign(prox) * max(|prox| - lr * l1, 0) / (1 + l2 * lr)`` (``prox / (1 + l2 * lr)`` when l1 <= 0).

    ``lr_l1`` and ``denominator`` (``1 + l2 * lr``) are rounded by the caller: in the variable dtype for the
    dense and row-sparse kernels, in float64 for the scalar-row sparse kernel (then pass ``widen=True``).
    """
    torch._foreach_sub_(params, torch._foreach_mul(grads, lr))
    fobos_shrink(params, lr_l1, denominator, l1_positive=l1_positive, widen=widen)


__all__ += ["momentum", "scatter_sgd", "fobos_shrink", "proximal_gradient_descent"]
