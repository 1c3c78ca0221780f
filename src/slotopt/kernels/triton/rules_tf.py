"""TensorFlow's own fused rules as Triton bodies (the TF1 proximal and dual-averaging Adagrad rules and
``SparseApplyRMSProp``'s dense form), beside ``rules.py``'s, in the same form and under the same rules: each
follows ``kernels/native/rules.inc`` operation for operation, and TensorFlow's ``rsqrt`` is taken as its GPU
kernels take it, ``1 / sqrt(x)`` with two roundings (the CPU's packet estimate is a CPU thing). Each multi-tensor
kernel is generated around its body (``generate.py``).
"""

from __future__ import annotations

from typing import Any

#: As ``rules.RULES``: the rules with a kernel here (operands and flags: their descriptions).
RULES = ("sparse_apply_rmsprop", "apply_proximal_adagrad", "apply_adagrad_da", "apply_adagrad_da_rows")


def build(helpers: dict[str, Any]) -> dict[str, Any]:
    """Defines the bodies (``_b_<rule>``); ``helpers``: ``rules.build``'s jit helpers, which the bodies find among
    this module's globals (Triton resolves names there)."""
    import triton
    import triton.language as tl

    globals().update(helpers)

    @triton.jit
    def _b_sparse_apply_rmsprop(w, g, ms, mom, mg, lr, rho, one_minus_rho, momentum, epsilon,
                                CENTERED: tl.constexpr):
        ms = ms * rho + (g * g) * one_minus_rho
        d = ms + epsilon
        if CENTERED:
            mg = mg * rho + g * one_minus_rho
            d = d - mg * mg
        d = _div_rn(tl.full(d.shape, 1.0, d.dtype), _sqrt_rn(d))  # noqa: F821
        mom = mom * momentum + (d * lr) * g
        return w - mom, ms, mom, mg

    @triton.jit
    def _b_apply_proximal_adagrad(w, g, acc, lr, l1, l2, L1_POSITIVE: tl.constexpr):
        acc = acc + g * g
        eta = _div_rn(tl.full(acc.shape, 1.0, acc.dtype), _sqrt_rn(acc)) * lr  # noqa: F821
        prox = w - g * eta
        den = eta * l2 + 1.0
        if L1_POSITIVE:
            mag = tl.abs(prox) - eta * l1
            mag = tl.where(mag < 0, 0.0, mag)
            w = _div_rn(_sign(prox) * mag, den)  # noqa: F821
        else:
            w = _div_rn(prox, den)  # noqa: F821
        return w, acc

    @triton.jit
    def _b_apply_adagrad_da(w, g, ga, gg, lr, t_l1, l2_t_lr, L1_POSITIVE: tl.constexpr):
        ga = ga + g
        gg = gg + g * g
        den = _sqrt_rn(gg) + l2_t_lr  # noqa: F821
        if L1_POSITIVE:
            mag = tl.abs(ga) - t_l1
            mag = tl.where(mag < 0, 0.0, mag)
            num = (_sign(ga) * -lr) * mag  # noqa: F821
        else:
            num = -(ga * lr)
        return _div_rn(num, den), ga, gg  # noqa: F821

    @triton.jit
    def _b_apply_adagrad_da_rows(w, g, ga, gg, t, l1, l2, t_lr, L1_POSITIVE: tl.constexpr):
        ga = ga + g
        gg = gg + g * g
        den = _div_rn(_sqrt_rn(gg), t_lr) + l2  # noqa: F821
        if L1_POSITIVE:
            mag = _div_rn(tl.abs(ga), t) - l1  # noqa: F821
            mag = tl.where(mag < 0, 0.0, mag)
            num = (-_sign(ga)) * mag  # noqa: F821
        else:
            num = -_div_rn(ga, t)  # noqa: F821
        return _div_rn(num, den), ga, gg  # noqa: F821

    return {name: fn for name, fn in locals().items() if name.startswith("_b_")}
