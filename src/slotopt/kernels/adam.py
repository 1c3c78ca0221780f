"""Adam and AMSGrad."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

import torch

from .. import numerics
from . import roots
from .blocks import elementwise
from .native import Flag, Scalar, compiled
from .shards import ShardLayout, sum_over_layouts
from .weight_decay import decoupled_weight_decay

__all__ = ["adam", "adam_variable_update", "adam_moments", "second_moment", "adamax", "nadam",
           "nadam_gradient_terms", "lamb"]

Tensors = list[torch.Tensor]


def adam_moments(grads: Tensors, m: Tensors, v: Optional[Tensors], squares: Optional[Tensors] = None, *,
                 one_minus_beta_1: float, one_minus_beta_2: float = 0.0) -> None:
    """The moving averages of Adam-style optimizers, in the reference's order (no fused multiply-add).

    ``m += (g - m) * (1 - b1)``; and, when ``v`` is given, ``v += (g*g - v) * (1 - b2)``. ``squares`` replaces
    ``g*g`` (Keras 3 on slices: the squares are taken per slice, then the repeats summed).
    """
    delta = torch._foreach_sub(grads, m)
    torch._foreach_mul_(delta, one_minus_beta_1)
    torch._foreach_add_(m, delta)
    if v is not None:
        second_moment(grads, v, squares, one_minus_beta_2=one_minus_beta_2)


def second_moment(grads: Tensors, v: Tensors, squares: Optional[Tensors] = None, *,
                  one_minus_beta_2: float) -> None:
    """``v += (g*g - v) * (1 - b2)``: Adam's second moment alone (also schedule-free AdamW's); ``squares``
    replaces ``g*g``."""
    delta = torch._foreach_mul(grads, grads) if squares is None else torch._foreach_sub(squares, v)
    if squares is None:
        torch._foreach_sub_(delta, v)
    torch._foreach_mul_(delta, one_minus_beta_2)
    torch._foreach_add_(v, delta)


@compiled("adam", 5, (Scalar("alpha"), Scalar("one_minus_beta_1"), Scalar("one_minus_beta_2"), Scalar("epsilon"),
                      Flag("amsgrad", given="v_hat"), Flag("decay", given="weight_decay"),
                      Scalar("weight_decay", absent=0.0), Scalar("weight_decay_lr")))
@elementwise
def adam(params: Tensors, grads: Tensors, m: Tensors, v: Tensors, v_hat: Optional[Tensors],
         squares: Optional[Tensors] = None, *, alpha: float, one_minus_beta_1: float, one_minus_beta_2: float,
         epsilon: float, weight_decay: Optional[float] = None, weight_decay_lr: float = 0.0) -> None:
    """Adam as Keras 3 and the tf.keras ``ApplyAdam`` kernel evaluate it.

    ``m += (g - m) * (1 - b1)``; ``v += (g*g - v) * (1 - b2)``; with AMSGrad ``v_hat = max(v_hat, v)``;
    ``w -= (m * alpha) / (sqrt(v or v_hat) + eps)`` where ``alpha = lr * sqrt(1 - b2^t) / (1 - b1^t)``.
    The caller rounds ``1 - b`` in its generation's form (D-form for Keras 3, F-form for legacy).
    ``squares`` (optional) replaces ``g*g``, see ``adam_moments``. With ``weight_decay``, Keras 3's decoupled
    weight decay ``w -= (w * weight_decay) * weight_decay_lr`` comes first, in the same pass (AdamW).
    """
    if weight_decay is not None:
        decoupled_weight_decay(params, weight_decay=weight_decay, lr=weight_decay_lr)
    adam_moments(grads, m, v, squares, one_minus_beta_1=one_minus_beta_1, one_minus_beta_2=one_minus_beta_2)
    adam_variable_update(params, m, v, v_hat, alpha=alpha, epsilon=epsilon)


@compiled("adam_variable_update", 4, (Scalar("alpha"), Scalar("epsilon"), Flag("amsgrad", given="v_hat")),
          read_only=(1, 2))
@elementwise
def adam_variable_update(params: Tensors, m: Tensors, v: Tensors, v_hat: Optional[Tensors], *, alpha: float,
                         epsilon: float) -> None:
    """The variable step of Adam, given updated moments: with AMSGrad ``v_hat = max(v_hat, v)`` replaces
    ``v``; then ``w -= (m * alpha) / (sqrt(v) + eps)``."""
    if v_hat is not None:
        torch._foreach_maximum_(v_hat, v)
        v = v_hat
    denom = roots.sqrt(v)
    torch._foreach_add_(denom, epsilon)
    step = torch._foreach_mul(m, alpha)
    torch._foreach_div_(step, denom)
    torch._foreach_sub_(params, step)


@compiled("adamax", 4, (Scalar("lr"), Scalar("one_minus_beta_1"), Scalar("beta_2"), Scalar("epsilon"),
                        Scalar("one_minus_beta_1_power"), Flag("scaled", given="scaled_lr"),
                        Scalar("scaled_lr", absent=0.0)))
@elementwise
def adamax(params: Tensors, grads: Tensors, m: Tensors, u: Tensors, abs_grads: Optional[Tensors] = None, *,
           lr: float, one_minus_beta_1: float, beta_2: float, epsilon: float, one_minus_beta_1_power: float,
           scaled_lr: Optional[float] = None) -> None:
    """Adamax (Adam with the infinity norm) as Keras 3 evaluates it.

    ``m += (g - m) * (1 - b1)``; ``u = max(b2 * u, |g|)``; ``w -= (lr * m) / ((1 - b1^t) * (u + eps))``.

    ``scaled_lr = lr / (1 - b1^t)`` (rounded by the caller) selects the association of TensorFlow's
    ``ApplyAdaMax`` kernel (tf.keras legacy ``Adamax``): ``w -= scaled_lr * (m / (u + eps))``; ``lr`` and
    ``one_minus_beta_1_power`` are then unused. ``abs_grads`` (optional) replaces ``|g|`` (Keras 3 on slices:
    absolute values per slice, then the repeats summed).
    """
    adam_moments(grads, m, None, one_minus_beta_1=one_minus_beta_1)
    torch._foreach_mul_(u, beta_2)
    torch._foreach_maximum_(u, torch._foreach_abs(grads) if abs_grads is None else abs_grads)
    if scaled_lr is not None:
        ratio = torch._foreach_div(m, torch._foreach_add(u, epsilon))
        torch._foreach_mul_(ratio, scaled_lr)
        torch._foreach_sub_(params, ratio)
        return
    step = torch._foreach_mul(m, lr)
    denom = torch._foreach_add(u, epsilon)
    torch._foreach_mul_(denom, one_minus_beta_1_power)
    torch._foreach_div_(step, denom)
    torch._foreach_sub_(params, step)


@compiled("nadam", 4, (Scalar("lr"), Scalar("one_minus_beta_1"), Scalar("one_minus_beta_2"), Scalar("mu_next"),
                       Scalar("one_minus_mu"), Scalar("one_minus_product"), Scalar("one_minus_product_next"),
                       Scalar("one_minus_beta_2_power"), Scalar("epsilon")))
@elementwise
def nadam(params: Tensors, grads: Tensors, m: Tensors, v: Tensors, squares: Optional[Tensors] = None,
          gradient_terms: Optional[Tensors] = None, *, lr: float, one_minus_beta_1: float,
          one_minus_beta_2: float, mu_next: float, one_minus_mu: float, one_minus_product: float,
          one_minus_product_next: float, one_minus_beta_2_power: float, epsilon: float) -> None:
    """Nadam as Keras 3 evaluates it (Dozat's momentum schedule ``mu_t = b1 * (1 - 0.5 * 0.96^t)``).

    With ``P_t`` the running product of the ``mu`` (``u_product``) and ``P_{t+1} = P_t * mu_{t+1}``:
    ``m += (g - m) * (1 - b1)``; ``v += (g*g - v) * (1 - b2)``;
    ``m_hat = (mu_{t+1} * m) / (1 - P_{t+1}) + ((1 - mu_t) * g) / (1 - P_t)``; ``v_hat = v / (1 - b2^t)``;
    ``w -= (m_hat * lr) / (sqrt(v_hat) + eps)``.

    Keras 3 on slices passes ``squares`` (replaces ``g*g``) and ``gradient_terms`` (replaces
    ``((1 - mu_t) * g) / (1 - P_t)``), each computed per slice with ``nadam_gradient_terms`` and then summed.
    """
    adam_moments(grads, m, v, squares, one_minus_beta_1=one_minus_beta_1, one_minus_beta_2=one_minus_beta_2)
    m_hat = torch._foreach_mul(m, mu_next)
    numerics.div_scalar_(m_hat, one_minus_product_next)  # (CUDA's division by a number is a product)
    if gradient_terms is None:
        gradient_terms = nadam_gradient_terms(grads, one_minus_mu=one_minus_mu, one_minus_product=one_minus_product)
    torch._foreach_add_(m_hat, gradient_terms)
    denom = numerics.div_scalar(v, one_minus_beta_2_power)
    roots.sqrt_(denom)
    torch._foreach_add_(denom, epsilon)
    torch._foreach_mul_(m_hat, lr)
    torch._foreach_div_(m_hat, denom)
    torch._foreach_sub_(params, m_hat)


def nadam_gradient_terms(grads: Tensors, *, one_minus_mu: float, one_minus_product: float) -> Tensors:
    """Nadam's gradient term of ``m_hat``: ``((1 - mu_t) * g) / (1 - P_t)`` (new tensors)."""
    terms = torch._foreach_mul(grads, one_minus_mu)
    numerics.div_scalar_(terms, one_minus_product)
    return terms


def lamb(params: Tensors, grads: Tensors, m: Tensors, v: Tensors, squares: Optional[Tensors] = None, *, lr: float,
         one_minus_beta_1: float,
         one_minus_beta_2: float, one_minus_beta_1_power: float, one_minus_beta_2_power: float,
         epsilon: float, layouts: Optional[Sequence[Optional[ShardLayout]]] = None) -> None:
    """LAMB (Adam direction scaled by a per-tensor trust ratio) as Keras 3 evaluates it.

    ``m += (g - m) * (1 - b1)``; ``v += (g*g - v) * (1 - b2)``;
    ``u = (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``; ``r = ||w|| / ||u||`` (1 when either norm is 0,
    norms over the whole tensor); ``w -= (r * lr) * u``. ``squares`` (optional) replaces ``g*g``.
    ``layouts`` (FSDP2): the tensors are local shards; their squared norms are summed over the shards.
    """
    adam_moments(grads, m, v, squares, one_minus_beta_1=one_minus_beta_1, one_minus_beta_2=one_minus_beta_2)
    updates = numerics.div_scalar(m, one_minus_beta_1_power)  # (CUDA's division by a number is not correctly rounded)
    denom = numerics.div_scalar(v, one_minus_beta_2_power)
    roots.sqrt_(denom)
    torch._foreach_add_(denom, epsilon)
    torch._foreach_div_(updates, denom)
    # Keras squares with ``ops.power(x, 2)`` (Eigen's packet pow: not always x*x) and sums in Eigen's order, over
    # the row-major values: the sums do not depend on the layout of the tensors.
    w_squares = [numerics.sum(numerics.pow(param.contiguous(), 2)) for param in params]
    u_squares = [numerics.sum(numerics.pow(update.contiguous(), 2)) for update in updates]
    if layouts is not None:
        both = sum_over_layouts(w_squares + u_squares, list(layouts) * 2)
        w_squares, u_squares = both[:len(params)], both[len(params):]
    for param, update, w_square, u_square in zip(params, updates, w_squares, u_squares):
        w_norm, u_norm = numerics.sqrt(w_square), numerics.sqrt(u_square)
        ratio = torch.where(w_norm > 0, torch.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
        param.sub_(update.mul_(ratio * lr))


def sparse_apply_adam(params: Tensors, rows: Tensors, grads: Tensors, m: Tensors, v: Tensors, *, alpha: float,
                      beta_1: float, beta_2: float, one_minus_beta_1: float, one_minus_beta_2: float,
                      epsilon: float, graph_form: bool = False, v_hat: Optional[Tensors] = None) -> None:
    """TF1 ``AdamOptimizer`` on a sparse gradient (``_apply_sparse_shared``; rows unique, values summed):

    ``m <- m * b1`` and ``v <- v * b2`` on ALL rows; ``m[u] += g * (1 - b1)``; ``v[u] += (g*g) * (1 - b2)``
    (``graph_form``: ``g * (g * (1 - b2))``, what Grappler makes of it in a TF1 Session / ``tf.function``);
    ``w <- w - (alpha * m) / (sqrt(v) + eps)`` on ALL rows.

    Also the tf.keras legacy ``Adam`` sparse path, with ``alpha = lr * (sqrt(1 - b2^t) / (1 - b1^t))``; its
    AMSGrad variant passes ``v_hat``: ``v_hat <- max(v_hat, v)`` on ALL rows and ``v_hat`` replaces ``v`` in ``w``.
    """
    torch._foreach_mul_(m, beta_1)
    torch._foreach_mul_(v, beta_2)
    for m_i, v_i, r, g in zip(m, v, rows, grads):
        m_i.index_add_(0, r, g * one_minus_beta_1)
        squared = g * (g * one_minus_beta_2) if graph_form else (g * g).mul_(one_minus_beta_2)
        v_i.index_add_(0, r, squared)
    adam_variable_update(params, m, v, v_hat, alpha=alpha, epsilon=epsilon)  # blocked: small temporaries


__all__ += ["sparse_apply_adam"]


def decayed_moment(grads: Tensors, m: Tensors, *, beta: float, one_minus_beta: float,
                   square: bool = False) -> None:
    """The "scale, then add" moving average: ``m <- m * b + x * (1 - b)`` with ``x = g`` (or ``g*g``).

    The other evaluation order than ``adam_moments``; TensorFlow's sparse kernels and the tf.keras legacy
    Nadam use it.
    """
    scaled = torch._foreach_mul(grads, grads) if square else list(grads)
    scaled = torch._foreach_mul(scaled, one_minus_beta)
    torch._foreach_mul_(m, beta)
    torch._foreach_add_(m, scaled)


def adamax_rows(params: Tensors, grads: Tensors, m: Tensors, u: Tensors, *, neg_scaled_lr: float, beta_1: float,
                one_minus_beta_1: float, beta_2: float, epsilon: float) -> None:
    """tf.keras legacy ``Adamax`` on the touched rows of a sparse gradient (lazy; rows unique, values summed):

    ``m <- m * b1 + g * (1 - b1)``; ``u <- max(u * b2, |g|)``; ``w <- w + neg_scaled_lr * (m / (u + eps))`` with
    ``neg_scaled_lr = -lr / (1 - b1^t)``.
    """
    decayed_moment(grads, m, beta=beta_1, one_minus_beta=one_minus_beta_1)
    torch._foreach_mul_(u, beta_2)
    torch._foreach_maximum_(u, torch._foreach_abs(grads))
    ratio = torch._foreach_div(m, torch._foreach_add(u, epsilon))
    torch._foreach_mul_(ratio, neg_scaled_lr)
    torch._foreach_add_(params, ratio)


def _nadam_momentum_term(grads: Tensors, m_rows: Tensors, *, one_minus_product: float, one_minus_mu: float,
                         one_minus_product_next: float, mu_next: float) -> Tensors:
    """``(1 - mu_t) * (g / (1 - P_t)) + mu_{t+1} * (m / (1 - P_{t+1}))`` (new tensors)."""
    m_bar = numerics.div_scalar(grads, one_minus_product)  # (CUDA's division by a number is a product)
    torch._foreach_mul_(m_bar, one_minus_mu)
    m_prime = numerics.div_scalar(m_rows, one_minus_product_next)
    torch._foreach_mul_(m_prime, mu_next)
    torch._foreach_add_(m_bar, m_prime)
    return m_bar


def _nadam_denominator(v_rows: Tensors, *, one_minus_beta_2_power: float, epsilon: float) -> Tensors:
    """``sqrt(v / (1 - b2^t)) + eps`` (new tensors)."""
    denom = numerics.div_scalar(v_rows, one_minus_beta_2_power)
    roots.sqrt_(denom)
    torch._foreach_add_(denom, epsilon)
    return denom


@compiled("nadam_cached", 4, (Scalar("lr"), Scalar("beta_1"), Scalar("beta_2"), Scalar("one_minus_beta_1"),
                              Scalar("one_minus_beta_2"), Scalar("one_minus_mu"), Scalar("mu_next"),
                              Scalar("one_minus_product"), Scalar("one_minus_product_next"),
                              Scalar("one_minus_beta_2_power"), Scalar("epsilon")))
@elementwise
def nadam_cached(params: Tensors, grads: Tensors, m: Tensors, v: Tensors, *, lr: float, beta_1: float,
                 beta_2: float, one_minus_beta_1: float, one_minus_beta_2: float, one_minus_mu: float,
                 mu_next: float, one_minus_product: float, one_minus_product_next: float,
                 one_minus_beta_2_power: float, epsilon: float) -> None:
    """tf.keras legacy ``Nadam`` (dense), with ``P_t`` its ``momentum_cache`` after this step's update:

    ``m <- b1 * m + (1 - b1) * g``; ``v <- b2 * v + (1 - b2) * g*g``;
    ``m_bar = (1 - mu_t) * (g / (1 - P_t)) + mu_{t+1} * (m / (1 - P_{t+1}))``;
    ``w <- w - (lr * m_bar) / (sqrt(v / (1 - b2^t)) + eps)``.
    """
    decayed_moment(grads, m, beta=beta_1, one_minus_beta=one_minus_beta_1)
    decayed_moment(grads, v, beta=beta_2, one_minus_beta=one_minus_beta_2, square=True)
    step = _nadam_momentum_term(grads, m, one_minus_product=one_minus_product, one_minus_mu=one_minus_mu,
                                one_minus_product_next=one_minus_product_next, mu_next=mu_next)
    torch._foreach_mul_(step, lr)
    torch._foreach_div_(step, _nadam_denominator(v, one_minus_beta_2_power=one_minus_beta_2_power,
                                                 epsilon=epsilon))
    torch._foreach_sub_(params, step)


def sparse_nadam_cached(params: Tensors, rows: Tensors, grads: Tensors, m: Tensors, v: Tensors, *, lr: float,
                        beta_1: float, beta_2: float, one_minus_beta_1: float, one_minus_beta_2: float,
                        one_minus_mu: float, mu_next: float, one_minus_product: float,
                        one_minus_product_next: float, one_minus_beta_2_power: float, epsilon: float) -> None:
    """tf.keras legacy ``Nadam`` on a sparse gradient (rows unique, values summed): the moments decay on ALL
    rows, the variable moves on the touched rows only.

    ``m <- m * b1``, ``v <- v * b2`` (all rows); ``m[u] += g * (1 - b1)``; ``v[u] += (g*g) * (1 - b2)``;
    ``m_bar`` as in ``nadam_cached`` from ``m[u]``; ``w[u] <- w[u] + ((-lr) * m_bar) / (sqrt(v[u] / (1 - b2^t)) + eps)``.
    """
    torch._foreach_mul_(m, beta_1)
    torch._foreach_mul_(v, beta_2)
    for m_i, v_i, r, g in zip(m, v, rows, grads):
        m_i.index_add_(0, r, g * one_minus_beta_1)
        v_i.index_add_(0, r, (g * g).mul_(one_minus_beta_2))
    m_rows = [m_i.index_select(0, r) for m_i, r in zip(m, rows)]
    v_rows = [v_i.index_select(0, r) for v_i, r in zip(v, rows)]
    step = _nadam_momentum_term(grads, m_rows, one_minus_product=one_minus_product, one_minus_mu=one_minus_mu,
                                one_minus_product_next=one_minus_product_next, mu_next=mu_next)
    torch._foreach_mul_(step, -lr)
    torch._foreach_div_(step, _nadam_denominator(v_rows, one_minus_beta_2_power=one_minus_beta_2_power,
                                                 epsilon=epsilon))
    for w, r, s in zip(params, rows, step):
        w.index_add_(0, r, s)


__all__ += ["decayed_moment", "adamax_rows", "nadam_cached", "sparse_nadam_cached"]
