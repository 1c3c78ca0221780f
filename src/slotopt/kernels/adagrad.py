"""Adagrad and its proximal and dual-averaging relatives."""

from __future__ import annotations

import torch

from .. import numerics
from . import native, roots
from . import rows as sparse_rows
from .blocks import elementwise
from .native import Flag, Integer, Scalar, compiled

__all__ = ["adagrad", "adagrad_slices"]

Tensors = list[torch.Tensor]


def _adagrad_steps(grads: Tensors, accumulators: Tensors, *, lr: float, epsilon: float,
                   epsilon_inside_root: bool) -> Tensors:
    """``(lr * g) / sqrt(acc + eps)`` (or ``/ (sqrt(acc) + eps)``) with the updated accumulators (new tensors)."""
    if epsilon_inside_root:
        denom = torch._foreach_add(accumulators, epsilon)
        roots.sqrt_(denom)
    else:
        denom = roots.sqrt(accumulators)
        torch._foreach_add_(denom, epsilon)
    step = torch._foreach_mul(grads, lr)
    torch._foreach_div_(step, denom)
    return step


@compiled("adagrad", 3, (Scalar("lr"), Scalar("epsilon"), Flag("epsilon_inside_root")))
@elementwise
def adagrad(params: Tensors, grads: Tensors, accumulators: Tensors, *, lr: float, epsilon: float,
            epsilon_inside_root: bool = True) -> None:
    """Adagrad: ``acc += g*g``; ``w -= (lr * g) / sqrt(acc + eps)``.

    ``epsilon_inside_root=True`` is Keras 3; ``False`` gives ``w -= (g * lr) / (sqrt(acc) + eps)``
    (tf.keras legacy ``ApplyAdagradV2``). A row whose gradient is zero is left unchanged whenever the
    denominator is positive, so the rule may run on the touched rows of a sparse gradient only.
    """
    torch._foreach_add_(accumulators, torch._foreach_mul(grads, grads))
    torch._foreach_sub_(params, _adagrad_steps(grads, accumulators, lr=lr, epsilon=epsilon,
                                               epsilon_inside_root=epsilon_inside_root))


#: The scalar vector of the compiled rule on slices ``adagrad_slices`` (and of its Triton twin).
_ADAGRAD_SLICES = native.slices("adagrad_slices", True, (Scalar("lr"), Scalar("epsilon")), __name__)


def adagrad_slices(param: torch.Tensor, indices: torch.Tensor, values: torch.Tensor, accumulator: torch.Tensor, *,
                   lr: float, epsilon: float) -> None:
    """Keras 3 ``Adagrad`` on slices (TensorFlow backend, keras3_sparse.md §4.6), touching only their rows:
    ``acc[i_j] += g_j*g_j`` one slice at a time; then, with the accumulator after all of them,
    ``w[i_j] -= (lr * g_j) / sqrt(acc[i_j] + eps)`` one slice at a time (repeats are not summed first).
    Valid while ``acc + eps > 0`` on every row (else Keras divides densely, see the caller).

    An index outside the table raises ``ValueError`` before anything changes. Contiguous CPU tensors of a compiled
    dtype run the compiled twin (``adagrad_slices`` in native/rules.inc: one serial pass in slice order, the same
    bits), CUDA float32/float64 tensors its Triton twin (``kernels.triton.apply_slices``); this torch code is the
    specification and the fallback.
    """
    if native.apply_slices("adagrad_slices", param, indices, values, accumulator,
                           _ADAGRAD_SLICES.vector(lr=lr, epsilon=epsilon)):
        return
    sparse_rows.check_rows(indices, param.shape[0])
    sparse_rows.scatter_add_(accumulator, indices, values * values)
    steps = _adagrad_steps([values], [accumulator.index_select(0, indices)], lr=lr, epsilon=epsilon,
                           epsilon_inside_root=True)
    sparse_rows.scatter_add_(param, indices, steps[0].neg_())


def packet_row(tensors: Tensors, rows: bool) -> int:
    """The row length TensorFlow's sparse kernels start their packets at (``rows``), else 0: the whole tensor."""
    if not rows or not tensors or tensors[0].dim() == 0 or tensors[0].shape[0] == 0:
        return 0
    return tensors[0].numel() // tensors[0].shape[0]


def _rsqrt(tensors: Tensors, rows: bool = False) -> Tensors:
    """``1 / sqrt(x)`` with two roundings, as TensorFlow's CPU ``rsqrt`` evaluates in float64."""
    return numerics.rsqrt(tensors, rows=rows)


def _scalar_over(scalar: float, tensors: Tensors) -> Tensors:
    """``scalar / x`` with ONE rounding (``scalar / tensor`` in torch is ``reciprocal(x) * scalar``)."""
    out = [torch.full_like(t, scalar) for t in tensors]
    torch._foreach_div_(out, tensors)
    return out


@compiled("apply_adagrad", 3, (Scalar("lr"), Flag("scalar_rows"),
                               Integer("packet_row", packet_row, ("params", "rows"))))
def apply_adagrad(params: Tensors, grads: Tensors, accumulators: Tensors, *, lr: float,
                  scalar_rows: bool = False, rows: bool = False) -> None:
    """TensorFlow's ``ApplyAdagrad`` / ``SparseApplyAdagrad`` (no epsilon; TF1 ``AdagradOptimizer``).

    ``acc <- acc + g * g``; ``w <- w - (g * lr) * rsqrt(acc)`` with ``rsqrt(a) = 1 / sqrt(a)``. The sparse kernel
    for rows of one element (``scalar_rows``) divides instead: ``w <- w - (lr * g) / sqrt(acc)``.
    ``rsqrt`` is TensorFlow's (``numerics.rsqrt``: the packet estimate in float32), its packets starting at each
    tensor's element 0, or at each row of gathered rows (``rows``, the sparse kernel). Not cut into blocks: the
    result depends on each element's position in its tensor.
    """
    torch._foreach_add_(accumulators, torch._foreach_mul(grads, grads))
    step = torch._foreach_mul(grads, lr)
    if scalar_rows:
        torch._foreach_div_(step, roots.sqrt(accumulators))
    else:
        torch._foreach_mul_(step, _rsqrt(accumulators, rows))
    torch._foreach_sub_(params, step)


@compiled("apply_proximal_adagrad", 3, (Scalar("lr"), Scalar("l1"), Scalar("l2"), Flag("l1_positive"),
                                        Integer("packet_row", packet_row, ("params", "rows"))),
          foreach_if="scalar_rows")  # scalar rows divide in float64
def apply_proximal_adagrad(params: Tensors, grads: Tensors, accumulators: Tensors, *, lr: float, l1: float,
                           l2: float, l1_positive: bool, scalar_rows: bool = False, rows: bool = False) -> None:
    """TensorFlow's ``ApplyProximalAdagrad`` / ``SparseApplyProximalAdagrad`` (TF1 ``ProximalAdagradOptimizer``).

    ``acc <- acc + g * g``; ``eta = lr * rsqrt(acc)``; ``prox = w - g * eta``; then the FOBOS step
    ``w <- sign(prox) * max(|prox| - eta * l1, 0) / (1 + l2 * eta)`` (``prox / (1 + l2 * eta)`` when l1 <= 0).
    ``scalar_rows`` (sparse rows of one element): ``eta = lr / sqrt(acc)`` and the denominator and division
    in float64.
    """
    from .sgd import fobos_shrink

    torch._foreach_add_(accumulators, torch._foreach_mul(grads, grads))
    if scalar_rows:
        eta = _scalar_over(lr, roots.sqrt(accumulators))
    else:
        eta = _rsqrt(accumulators, rows)
        torch._foreach_mul_(eta, lr)
    torch._foreach_sub_(params, torch._foreach_mul(grads, eta))
    threshold = torch._foreach_mul(eta, l1) if l1_positive else 0.0
    l2_eta = torch._foreach_mul(eta, l2)
    if scalar_rows:
        l2_eta = [x.double() for x in l2_eta]
    denominator = torch._foreach_add(l2_eta, 1.0)
    fobos_shrink(params, threshold, denominator, l1_positive=l1_positive, widen=scalar_rows)


@compiled("apply_adagrad_da", 4, (Scalar("lr"), Scalar("t_l1"), Scalar("l2_t_lr"), Flag("l1_positive")))
@elementwise
def apply_adagrad_da(params: Tensors, grads: Tensors, grad_sums: Tensors, squared_sums: Tensors, *, lr: float,
                     t_l1: float, l2_t_lr: float, l1_positive: bool) -> None:
    """TensorFlow's dense ``ApplyAdagradDA`` (TF1 ``AdagradDAOptimizer``); the old ``w`` is not used.

    ``ga <- ga + g``; ``gg <- gg + g * g``; ``den = l2 * (t * lr) + sqrt(gg)``;
    ``w <- ((-lr) * sign(ga)) * max(|ga| - t * l1, 0) / den`` if l1 > 0, else ``w <- -(lr * ga) / den``.
    ``t_l1`` and ``l2_t_lr`` are rounded by the caller in the variable dtype (``t`` goes through float32).
    """
    torch._foreach_add_(grad_sums, grads)
    torch._foreach_add_(squared_sums, torch._foreach_mul(grads, grads))
    denominator = roots.sqrt(squared_sums)
    torch._foreach_add_(denominator, l2_t_lr)
    if l1_positive:
        numerator = torch._foreach_sign(grad_sums)
        torch._foreach_mul_(numerator, -lr)
        magnitude = torch._foreach_abs(grad_sums)
        torch._foreach_sub_(magnitude, t_l1)
        torch._foreach_clamp_min_(magnitude, 0.0)
        torch._foreach_mul_(numerator, magnitude)
    else:
        numerator = torch._foreach_mul(grad_sums, lr)
        torch._foreach_neg_(numerator)
    torch._foreach_div_(numerator, denominator)
    torch._foreach_copy_(params, numerator)


@compiled("apply_adagrad_da_rows", 4, (Scalar("t"), Scalar("l1"), Scalar("l2"), Scalar("t_lr"), Flag("l1_positive")))
@elementwise
def apply_adagrad_da_rows(params: Tensors, grads: Tensors, grad_sums: Tensors, squared_sums: Tensors, *,
                          t: float, l1: float, l2: float, t_lr: float, l1_positive: bool) -> None:
    """TensorFlow's ``SparseApplyAdagradDA`` on rows of more than one element (same math, other rounding):

    ``den = l2 + sqrt(gg) / (t * lr)``; ``w <- (-sign(ga)) * max(|ga| / t - l1, 0) / den`` if l1 > 0, else
    ``w <- -(ga / t) / den``. ``t`` is the step converted straight to the variable dtype.
    """
    torch._foreach_add_(grad_sums, grads)
    torch._foreach_add_(squared_sums, torch._foreach_mul(grads, grads))
    denominator = roots.sqrt(squared_sums)
    numerics.div_scalar_(denominator, t_lr)  # (CUDA's division by a number is a product)
    torch._foreach_add_(denominator, l2)
    if l1_positive:
        numerator = torch._foreach_sign(grad_sums)
        torch._foreach_neg_(numerator)
        magnitude = torch._foreach_abs(grad_sums)
        numerics.div_scalar_(magnitude, t)
        torch._foreach_sub_(magnitude, l1)
        torch._foreach_clamp_min_(magnitude, 0.0)
        torch._foreach_mul_(numerator, magnitude)
    else:
        numerator = numerics.div_scalar(grad_sums, t)
        torch._foreach_neg_(numerator)
    torch._foreach_div_(numerator, denominator)
    torch._foreach_copy_(params, numerator)


@elementwise
def apply_adagrad_da_scalar_rows(params: Tensors, grads: Tensors, grad_sums: Tensors, squared_sums: Tensors, *,
                                 lr: float, t_l1: float, t_l2_lr: float, l1_positive: bool) -> None:
    """TensorFlow's ``SparseApplyAdagradDA`` on rows of one element, evaluated in float64 and rounded back:

    ``ga <- ga + g``, ``gg <- gg + g * g`` (each in float64, rounded once); ``sqrt(gg)`` in the variable dtype;
    ``w <- (sign(-ga) * lr) * max(|ga| - t * l1, 0) / (t * l2 * lr + sqrt(gg))`` if l1 > 0, else
    ``w <- ((-ga) * lr) / (t * l2 * lr + sqrt(gg))``. ``t_l1`` and ``t_l2_lr`` are float64 products.
    """
    for w, g, ga, gg in zip(params, grads, grad_sums, squared_sums):
        wide = g.double()
        ga.copy_(ga.double().add_(wide))
        gg.copy_(gg.double().add_(wide * wide))
        denominator = roots.sqrt([gg])[0].double().add_(t_l2_lr)
        if l1_positive:
            numerator = torch.sign(torch.neg(ga)).double().mul_(lr)
            numerator.mul_(torch.abs(ga).double().sub_(t_l1).clamp_min_(0.0))
        else:
            numerator = torch.neg(ga).double().mul_(lr)
        w.copy_(numerator.div_(denominator))


__all__ += ["apply_adagrad", "apply_proximal_adagrad", "apply_adagrad_da", "apply_adagrad_da_rows",
            "apply_adagrad_da_scalar_rows"]
