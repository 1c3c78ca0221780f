"""The hand-written TensorFlow-rule kernels (see _triton_handwritten.py)."""


from __future__ import annotations

from typing import Any

#: As ``rules.RULES``: the rules with a kernel here (operands and flags: their descriptions).
RULES = ("sparse_apply_rmsprop", "apply_proximal_adagrad", "apply_adagrad_da", "apply_adagrad_da_rows")


def build(helpers: dict[str, Any]) -> dict[str, Any]:
    """Defines the kernels; ``helpers``: ``rules.build``'s jit helpers, which the kernels find among this module's
    globals (Triton resolves names there)."""
    import triton
    import triton.language as tl

    globals().update(helpers)

    @triton.jit
    def sparse_apply_rmsprop(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, CENTERED: tl.constexpr, ALIGNED: tl.constexpr,
                             BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)  # noqa: F821
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        ms_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        mom_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        lr = _sv(s_ptr, 0, S0, BY_VALUE)  # noqa: F821
        rho = _sv(s_ptr, 1, S1, BY_VALUE)  # noqa: F821
        omr = _sv(s_ptr, 2, S2, BY_VALUE)  # noqa: F821
        mu = _sv(s_ptr, 3, S3, BY_VALUE)  # noqa: F821
        eps = _sv(s_ptr, 4, S4, BY_VALUE)  # noqa: F821
        g = tl.load(g_ptr, mask=mask)
        ms = tl.load(ms_ptr, mask=mask) * rho + (g * g) * omr
        tl.store(ms_ptr, ms, mask=mask)
        d = ms + eps
        if CENTERED:
            mg_ptr = _operand(tab_ptr, 4, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
            mg = tl.load(mg_ptr, mask=mask) * rho + g * omr
            tl.store(mg_ptr, mg, mask=mask)
            d = d - mg * mg
        d = _div_rn(tl.full(d.shape, 1.0, d.dtype), _sqrt_rn(d))  # noqa: F821
        mom = tl.load(mom_ptr, mask=mask) * mu + (d * lr) * g
        tl.store(mom_ptr, mom, mask=mask)
        tl.store(w_ptr, tl.load(w_ptr, mask=mask) - mom, mask=mask)

    @triton.jit
    def apply_proximal_adagrad(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, L1_POSITIVE: tl.constexpr, ALIGNED: tl.constexpr,
                               BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)  # noqa: F821
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        acc_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        lr = _sv(s_ptr, 0, S0, BY_VALUE)  # noqa: F821
        l1 = _sv(s_ptr, 1, S1, BY_VALUE)  # noqa: F821
        l2 = _sv(s_ptr, 2, S2, BY_VALUE)  # noqa: F821
        g = tl.load(g_ptr, mask=mask)
        acc = tl.load(acc_ptr, mask=mask) + g * g
        tl.store(acc_ptr, acc, mask=mask)
        eta = _div_rn(tl.full(acc.shape, 1.0, acc.dtype), _sqrt_rn(acc)) * lr  # noqa: F821
        prox = tl.load(w_ptr, mask=mask) - g * eta
        den = eta * l2 + 1.0
        if L1_POSITIVE:
            mag = tl.abs(prox) - eta * l1
            mag = tl.where(mag < 0, 0.0, mag)
            w = _div_rn(_sign(prox) * mag, den)  # noqa: F821
        else:
            w = _div_rn(prox, den)  # noqa: F821
        tl.store(w_ptr, w, mask=mask)

    @triton.jit
    def apply_adagrad_da(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, L1_POSITIVE: tl.constexpr, ALIGNED: tl.constexpr,
                         BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)  # noqa: F821
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        ga_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        gg_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        lr = _sv(s_ptr, 0, S0, BY_VALUE)  # noqa: F821
        t_l1 = _sv(s_ptr, 1, S1, BY_VALUE)  # noqa: F821
        l2_t_lr = _sv(s_ptr, 2, S2, BY_VALUE)  # noqa: F821
        g = tl.load(g_ptr, mask=mask)
        ga = tl.load(ga_ptr, mask=mask) + g
        gg = tl.load(gg_ptr, mask=mask) + g * g
        tl.store(ga_ptr, ga, mask=mask)
        tl.store(gg_ptr, gg, mask=mask)
        den = _sqrt_rn(gg) + l2_t_lr  # noqa: F821
        if L1_POSITIVE:
            mag = tl.abs(ga) - t_l1
            mag = tl.where(mag < 0, 0.0, mag)
            num = (_sign(ga) * -lr) * mag  # noqa: F821
        else:
            num = -(ga * lr)
        tl.store(w_ptr, _div_rn(num, den), mask=mask)  # noqa: F821

    @triton.jit
    def apply_adagrad_da_rows(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, L1_POSITIVE: tl.constexpr, ALIGNED: tl.constexpr,
                              BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)  # noqa: F821
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        ga_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        gg_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)  # noqa: F821
        steps = _sv(s_ptr, 0, S0, BY_VALUE)  # noqa: F821
        l1 = _sv(s_ptr, 1, S1, BY_VALUE)  # noqa: F821
        l2 = _sv(s_ptr, 2, S2, BY_VALUE)  # noqa: F821
        t_lr = _sv(s_ptr, 3, S3, BY_VALUE)  # noqa: F821
        g = tl.load(g_ptr, mask=mask)
        ga = tl.load(ga_ptr, mask=mask) + g
        gg = tl.load(gg_ptr, mask=mask) + g * g
        tl.store(ga_ptr, ga, mask=mask)
        tl.store(gg_ptr, gg, mask=mask)
        den = _div_rn(_sqrt_rn(gg), t_lr) + l2  # noqa: F821
        if L1_POSITIVE:
            mag = _div_rn(tl.abs(ga), steps) - l1  # noqa: F821
            mag = tl.where(mag < 0, 0.0, mag)
            num = (-_sign(ga)) * mag  # noqa: F821
        else:
            num = -_div_rn(ga, steps)  # noqa: F821
        tl.store(w_ptr, _div_rn(num, den), mask=mask)  # noqa: F821

    return {name: fn for name, fn in locals().items() if name in RULES}
