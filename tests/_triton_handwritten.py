"""The hand-written Triton kernels that ``kernels/triton/generate.py`` replaced (issue 48), kept as the reference
``tests/kernels/test_triton_generated.py`` checks each generated kernel against, bit for bit, under the interpreter. Not
used by slotopt. (As they were in kernels/triton/rules.py and rules_tf.py before the generator.)"""


from __future__ import annotations

from typing import Any

import _triton_handwritten_tf as rules_tf

#: The rules with a Triton kernel, each in multi-tensor form. A kernel's operand lists and scalar vector are the
#: compiled CPU rule's, described once next to its foreach kernel (``kernels/native/scalars.py``): each ``Flag`` of
#: the description is the kernel's ``constexpr`` parameter of its name in capitals, and each number the kernel
#: reads is ``_sv(s_ptr, k, Sk, BY_VALUE)`` at its position ``k`` (``tests/kernels/test_rule_scalars.py`` checks both).
RULES = ("sgd", "keras_momentum", "momentum", "decoupled_weight_decay", "adam", "rmsprop", "apply_rmsprop", "adagrad",
         "apply_adagrad", "proximal_gradient_descent", "moving_average", "adam_variable_update", "adamax", "nadam",
         "nadam_cached", "lion", "adadelta", "apply_adadelta", "ftrl_root", *rules_tf.RULES)
#: The rules on slices with a Triton kernel (whether each has a state tensor: their descriptions,
#: ``native.scalars.SLICE_RULES``).
SLICE_RULES = ("sgd_slices", "adagrad_slices")


def build() -> dict[str, Any]:
    """Defines the kernels (called on first use, after ``TRITON_INTERPRET`` is read)."""
    import triton
    import triton.language as tl

    # Correctly rounded division and root: float32 needs the _rn forms (the defaults are approximate); float64
    # division and root are IEEE-rounded already (and the _rn forms take float32 only). The dtype test is
    # resolved at compile time. The kernels find these helpers among the module's globals, as Triton resolves
    # names.
    @triton.jit
    def _div_rn(a, b):
        if a.dtype == tl.float32:
            return tl.math.div_rn(a, b)
        else:
            return a / b

    @triton.jit
    def _sqrt_rn(x):
        if x.dtype == tl.float32:
            return tl.math.sqrt_rn(x)
        else:
            return tl.sqrt(x)

    # The program's chunk: its tensor's index in the group and its elements' offsets (int64: a tensor may hold
    # more than 2**31 elements) with their mask. ALIGNED: runs of 16 elements share their mask (every bound is a
    # multiple of 16), which lets the compiler vectorise the masked loads and stores.
    @triton.jit
    def _chunk(meta_ptr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        row = meta_ptr + 3 * tl.program_id(0).to(tl.int64)
        t = tl.load(row)
        offs = tl.load(row + 1) + tl.arange(0, BLOCK)
        mask = offs < tl.load(row + 2)
        if ALIGNED:
            mask = tl.max_constancy(mask, 16)
        return t, offs, mask

    # Operand ``k`` of tensor ``t`` at ``offs``: its address from the table, cast to a pointer of the scalar
    # vector's dtype. ALIGNED: the address is 16-byte aligned and the chunk starts at a multiple of 16 elements,
    # so each run of 16 pointers is contiguous and starts on 16 bytes.
    @triton.jit
    def _operand(tab_ptr, k: tl.constexpr, T, t, s_ptr, offs, ALIGNED: tl.constexpr):
        pointers = tl.load(tab_ptr + k * T + t).to(s_ptr.dtype) + offs
        if ALIGNED:
            pointers = tl.max_contiguous(tl.multiple_of(pointers, 16), 16)
        return pointers

    # A scalar of the rule: float32 scalars come by value, as kernel arguments (a step's new scalars travel in
    # the launch itself, no copy); float64 ones from the scalar vector on the device (a Python float argument
    # would be a float32 parameter).
    @triton.jit
    def _sv(s_ptr, k: tl.constexpr, value, BY_VALUE: tl.constexpr):
        if BY_VALUE:
            return value
        else:
            return tl.load(s_ptr + k)

    globals().update(_div_rn=_div_rn, _sqrt_rn=_sqrt_rn, _chunk=_chunk, _operand=_operand, _sv=_sv)

    @triton.jit
    def sgd(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, DECAY: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        w = tl.load(w_ptr, mask=mask)
        if DECAY:  # Keras 3's decoupled weight decay first, in the same pass
            wd = _sv(s_ptr, 2, S2, BY_VALUE)
            wd_lr = _sv(s_ptr, 3, S3, BY_VALUE)
            w = w - (w * wd) * wd_lr
        g = tl.load(g_ptr, mask=mask)
        tl.store(w_ptr, w - g * lr, mask=mask)

    @triton.jit
    def keras_momentum(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, NESTEROV: tl.constexpr, DECAY: tl.constexpr,
                       ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        m_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        mu = _sv(s_ptr, 1, S1, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        step = g * lr
        m = tl.load(m_ptr, mask=mask) * mu - step
        tl.store(m_ptr, m, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        if DECAY:
            wd = _sv(s_ptr, 4, S4, BY_VALUE)
            wd_lr = _sv(s_ptr, 5, S5, BY_VALUE)
            w = w - (w * wd) * wd_lr
        if NESTEROV:
            w = w + (m * mu - step)
        else:
            w = w + m
        tl.store(w_ptr, w, mask=mask)

    @triton.jit
    def momentum(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, NESTEROV: tl.constexpr, FUSED_PRODUCT: tl.constexpr,
                 ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        a_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        mu = _sv(s_ptr, 1, S1, BY_VALUE)
        lr_mu = _sv(s_ptr, 4, S4, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        a = tl.load(a_ptr, mask=mask) * mu + g
        tl.store(a_ptr, a, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        if NESTEROV:
            if FUSED_PRODUCT:
                look = a * lr_mu
            else:
                look = (a * mu) * lr
            w = w - (g * lr + look)
        else:
            w = w - a * lr
        tl.store(w_ptr, w, mask=mask)

    @triton.jit
    def decoupled_weight_decay(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        wd = _sv(s_ptr, 0, S0, BY_VALUE)
        lr = _sv(s_ptr, 1, S1, BY_VALUE)
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - (w * wd) * lr, mask=mask)

    @triton.jit
    def adam(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, AMSGRAD: tl.constexpr, DECAY: tl.constexpr, ALIGNED: tl.constexpr,
             BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        m_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        v_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        alpha = _sv(s_ptr, 0, S0, BY_VALUE)
        omb1 = _sv(s_ptr, 1, S1, BY_VALUE)
        omb2 = _sv(s_ptr, 2, S2, BY_VALUE)
        eps = _sv(s_ptr, 3, S3, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        m = tl.load(m_ptr, mask=mask)
        v = tl.load(v_ptr, mask=mask)
        m = m + (g - m) * omb1
        v = v + (g * g - v) * omb2
        tl.store(m_ptr, m, mask=mask)
        tl.store(v_ptr, v, mask=mask)
        if AMSGRAD:
            vh_ptr = _operand(tab_ptr, 4, T, t, s_ptr, offs, ALIGNED)
            v = tl.maximum(tl.load(vh_ptr, mask=mask), v, propagate_nan=tl.PropagateNan.ALL)
            tl.store(vh_ptr, v, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        if DECAY:  # AdamW: the decoupled weight decay first, in the same pass
            wd = _sv(s_ptr, 6, S6, BY_VALUE)
            wd_lr = _sv(s_ptr, 7, S7, BY_VALUE)
            w = w - (w * wd) * wd_lr
        tl.store(w_ptr, w - _div_rn(m * alpha, _sqrt_rn(v) + eps), mask=mask)

    @triton.jit
    def rmsprop(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, EPSILON_INSIDE_ROOT: tl.constexpr, HAS_MOMENTUM: tl.constexpr,
                CENTERED: tl.constexpr,
                ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        vel_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        rho = _sv(s_ptr, 1, S1, BY_VALUE)
        omr = _sv(s_ptr, 2, S2, BY_VALUE)
        mu = _sv(s_ptr, 3, S3, BY_VALUE)
        eps = _sv(s_ptr, 4, S4, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        vel = tl.load(vel_ptr, mask=mask) * rho + (g * g) * omr
        tl.store(vel_ptr, vel, mask=mask)
        if CENTERED:
            avg_ptr = _operand(tab_ptr, 4, T, t, s_ptr, offs, ALIGNED)
            avg = tl.load(avg_ptr, mask=mask) * rho + g * omr
            tl.store(avg_ptr, avg, mask=mask)
            d = vel - avg * avg
            if EPSILON_INSIDE_ROOT:
                d = d + eps
            d = _sqrt_rn(d)
        elif EPSILON_INSIDE_ROOT:
            d = _sqrt_rn(vel + eps)
        else:
            d = _sqrt_rn(vel)
        if not EPSILON_INSIDE_ROOT:
            d = d + eps
        inc = _div_rn(g * lr, d)
        w = tl.load(w_ptr, mask=mask)
        if HAS_MOMENTUM:
            mom_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
            mom = tl.load(mom_ptr, mask=mask) * mu + inc
            tl.store(mom_ptr, mom, mask=mask)
            w = w - mom
        else:
            w = w - inc
        tl.store(w_ptr, w, mask=mask)

    @triton.jit
    def apply_rmsprop(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, CENTERED: tl.constexpr, ALIGNED: tl.constexpr,
                      BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        ms_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        mom_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        omr = _sv(s_ptr, 1, S1, BY_VALUE)
        mu = _sv(s_ptr, 2, S2, BY_VALUE)
        eps = _sv(s_ptr, 3, S3, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        ms = tl.load(ms_ptr, mask=mask)
        ms = ms + (g * g - ms) * omr
        tl.store(ms_ptr, ms, mask=mask)
        if CENTERED:
            mg_ptr = _operand(tab_ptr, 4, T, t, s_ptr, offs, ALIGNED)
            mg = tl.load(mg_ptr, mask=mask)
            mg = mg + (g - mg) * omr
            tl.store(mg_ptr, mg, mask=mask)
            d = (ms - mg * mg) + eps
        else:
            d = ms + eps
        mom = tl.load(mom_ptr, mask=mask) * mu + _div_rn(g * lr, _sqrt_rn(d))
        tl.store(mom_ptr, mom, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - mom, mask=mask)

    @triton.jit
    def adagrad(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, EPSILON_INSIDE_ROOT: tl.constexpr, ALIGNED: tl.constexpr,
                BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        acc_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        eps = _sv(s_ptr, 1, S1, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        acc = tl.load(acc_ptr, mask=mask) + g * g
        tl.store(acc_ptr, acc, mask=mask)
        if EPSILON_INSIDE_ROOT:
            d = _sqrt_rn(acc + eps)
        else:
            d = _sqrt_rn(acc) + eps
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - _div_rn(g * lr, d), mask=mask)

    @triton.jit
    def apply_adagrad(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, SCALAR_ROWS: tl.constexpr, ALIGNED: tl.constexpr,
                      BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        acc_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        acc = tl.load(acc_ptr, mask=mask) + g * g
        tl.store(acc_ptr, acc, mask=mask)
        step = g * lr
        if SCALAR_ROWS:
            step = _div_rn(step, _sqrt_rn(acc))
        else:
            step = step * _div_rn(tl.full(acc.shape, 1.0, acc.dtype), _sqrt_rn(acc))
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - step, mask=mask)

    # The rules below follow kernels/native/rules.inc operation for operation (float32/float64: every operator
    # there is one rounded operation here).
    @triton.jit
    def _sign(x):  # torch.sign as the compiled rules take it: -1, 0 or 1, and 0 for NaN
        return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)

    globals().update(_sign=_sign)

    @triton.jit
    def proximal_gradient_descent(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, L1_POSITIVE: tl.constexpr, ALIGNED: tl.constexpr,
                                  BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        lr_l1 = _sv(s_ptr, 1, S1, BY_VALUE)
        den = _sv(s_ptr, 2, S2, BY_VALUE)
        prox = tl.load(w_ptr, mask=mask) - tl.load(g_ptr, mask=mask) * lr
        if L1_POSITIVE:
            mag = tl.abs(prox) - lr_l1
            mag = tl.where(mag < 0, 0.0, mag)
            w = _div_rn(_sign(prox) * mag, den)
        else:
            w = _div_rn(prox, den)
        tl.store(w_ptr, w, mask=mask)

    @triton.jit
    def moving_average(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        avg_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        mu = _sv(s_ptr, 0, S0, BY_VALUE)
        omm = _sv(s_ptr, 1, S1, BY_VALUE)
        avg = tl.load(avg_ptr, mask=mask) * mu + tl.load(w_ptr, mask=mask) * omm
        tl.store(avg_ptr, avg, mask=mask)

    @triton.jit
    def adam_variable_update(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, AMSGRAD: tl.constexpr, ALIGNED: tl.constexpr,
                             BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        m_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        v_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        alpha = _sv(s_ptr, 0, S0, BY_VALUE)
        eps = _sv(s_ptr, 1, S1, BY_VALUE)
        v = tl.load(v_ptr, mask=mask)
        if AMSGRAD:
            vh_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
            v = tl.maximum(tl.load(vh_ptr, mask=mask), v, propagate_nan=tl.PropagateNan.ALL)
            tl.store(vh_ptr, v, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - _div_rn(tl.load(m_ptr, mask=mask) * alpha, _sqrt_rn(v) + eps), mask=mask)

    @triton.jit
    def adamax(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, SCALED: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        m_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        u_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        omb1 = _sv(s_ptr, 1, S1, BY_VALUE)
        b2 = _sv(s_ptr, 2, S2, BY_VALUE)
        eps = _sv(s_ptr, 3, S3, BY_VALUE)
        omb1p = _sv(s_ptr, 4, S4, BY_VALUE)
        scaled_lr = _sv(s_ptr, 6, S6, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        m = tl.load(m_ptr, mask=mask)
        m = m + (g - m) * omb1
        u = tl.maximum(tl.load(u_ptr, mask=mask) * b2, tl.abs(g), propagate_nan=tl.PropagateNan.ALL)
        tl.store(m_ptr, m, mask=mask)
        tl.store(u_ptr, u, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        if SCALED:
            w = w - _div_rn(m, u + eps) * scaled_lr
        else:
            w = w - _div_rn(m * lr, (u + eps) * omb1p)
        tl.store(w_ptr, w, mask=mask)

    @triton.jit
    def nadam(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        m_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        v_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        omb1 = _sv(s_ptr, 1, S1, BY_VALUE)
        omb2 = _sv(s_ptr, 2, S2, BY_VALUE)
        mu_next = _sv(s_ptr, 3, S3, BY_VALUE)
        omu = _sv(s_ptr, 4, S4, BY_VALUE)
        omp = _sv(s_ptr, 5, S5, BY_VALUE)
        ompn = _sv(s_ptr, 6, S6, BY_VALUE)
        omb2p = _sv(s_ptr, 7, S7, BY_VALUE)
        eps = _sv(s_ptr, 8, S8, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        m = tl.load(m_ptr, mask=mask)
        v = tl.load(v_ptr, mask=mask)
        m = m + (g - m) * omb1
        v = v + (g * g - v) * omb2
        tl.store(m_ptr, m, mask=mask)
        tl.store(v_ptr, v, mask=mask)
        m_hat = _div_rn(m * mu_next, ompn) + _div_rn(g * omu, omp)
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - _div_rn(m_hat * lr, _sqrt_rn(_div_rn(v, omb2p)) + eps), mask=mask)

    @triton.jit
    def nadam_cached(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        m_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        v_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        b1 = _sv(s_ptr, 1, S1, BY_VALUE)
        b2 = _sv(s_ptr, 2, S2, BY_VALUE)
        omb1 = _sv(s_ptr, 3, S3, BY_VALUE)
        omb2 = _sv(s_ptr, 4, S4, BY_VALUE)
        omu = _sv(s_ptr, 5, S5, BY_VALUE)
        mu_next = _sv(s_ptr, 6, S6, BY_VALUE)
        omp = _sv(s_ptr, 7, S7, BY_VALUE)
        ompn = _sv(s_ptr, 8, S8, BY_VALUE)
        omb2p = _sv(s_ptr, 9, S9, BY_VALUE)
        eps = _sv(s_ptr, 10, S10, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        m = tl.load(m_ptr, mask=mask) * b1 + g * omb1
        v = tl.load(v_ptr, mask=mask) * b2 + (g * g) * omb2
        tl.store(m_ptr, m, mask=mask)
        tl.store(v_ptr, v, mask=mask)
        m_bar = _div_rn(g, omp) * omu + _div_rn(m, ompn) * mu_next
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - _div_rn(m_bar * lr, _sqrt_rn(_div_rn(v, omb2p)) + eps), mask=mask)

    @triton.jit
    def lion(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        m_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        b1 = _sv(s_ptr, 1, S1, BY_VALUE)
        omb1 = _sv(s_ptr, 2, S2, BY_VALUE)
        b2 = _sv(s_ptr, 3, S3, BY_VALUE)
        omb2 = _sv(s_ptr, 4, S4, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        m = tl.load(m_ptr, mask=mask)
        direction = m * b1 + g * omb1
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - _sign(direction) * lr, mask=mask)
        tl.store(m_ptr, m * b2 + g * omb2, mask=mask)

    @triton.jit
    def adadelta(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        eg_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        ed_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        rho = _sv(s_ptr, 1, S1, BY_VALUE)
        omr = _sv(s_ptr, 2, S2, BY_VALUE)
        eps = _sv(s_ptr, 3, S3, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        eg = tl.load(eg_ptr, mask=mask) * rho + (g * g) * omr
        tl.store(eg_ptr, eg, mask=mask)
        ed = tl.load(ed_ptr, mask=mask)
        delta = -_div_rn(_sqrt_rn(ed + eps) * g, _sqrt_rn(eg + eps))
        tl.store(ed_ptr, ed * rho + (delta * delta) * omr, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w + delta * lr, mask=mask)

    @triton.jit
    def apply_adadelta(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr):
        # TensorFlow's rsqrt as its GPU kernel takes it: 1 / sqrt(x), two roundings (no CPU packet estimate)
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        acc_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        au_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        rho = _sv(s_ptr, 1, S1, BY_VALUE)
        omr = _sv(s_ptr, 2, S2, BY_VALUE)
        eps = _sv(s_ptr, 3, S3, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        acc = tl.load(acc_ptr, mask=mask) * rho + (g * g) * omr
        tl.store(acc_ptr, acc, mask=mask)
        au = tl.load(au_ptr, mask=mask)
        rsqrt = _div_rn(tl.full(acc.shape, 1.0, acc.dtype), _sqrt_rn(acc + eps))
        update = (_sqrt_rn(au + eps) * rsqrt) * g
        w = tl.load(w_ptr, mask=mask)
        tl.store(w_ptr, w - update * lr, mask=mask)
        tl.store(au_ptr, au * rho + (update * update) * omr, mask=mask)

    @triton.jit
    def ftrl_root(tab_ptr, meta_ptr, s_ptr, T, S0, S1, S2, S3, S4, S5, S6, S7, S8, S9, S10,
            BY_VALUE: tl.constexpr, SCALAR_ROWS: tl.constexpr, ALIGNED: tl.constexpr,
                  BLOCK: tl.constexpr):
        t, offs, mask = _chunk(meta_ptr, ALIGNED, BLOCK)
        w_ptr = _operand(tab_ptr, 0, T, t, s_ptr, offs, ALIGNED)
        g_ptr = _operand(tab_ptr, 1, T, t, s_ptr, offs, ALIGNED)
        acc_ptr = _operand(tab_ptr, 2, T, t, s_ptr, offs, ALIGNED)
        lin_ptr = _operand(tab_ptr, 3, T, t, s_ptr, offs, ALIGNED)
        lr = _sv(s_ptr, 0, S0, BY_VALUE)
        l1 = _sv(s_ptr, 1, S1, BY_VALUE)
        two_l2 = _sv(s_ptr, 2, S2, BY_VALUE)
        shrinkage = _sv(s_ptr, 3, S3, BY_VALUE)
        g = tl.load(g_ptr, mask=mask)
        w = tl.load(w_ptr, mask=mask)
        acc = tl.load(acc_ptr, mask=mask)
        adjusted = w * shrinkage + g
        new_acc = g * g + acc
        new_power = _sqrt_rn(new_acc)
        sigma = _div_rn(new_power - _sqrt_rn(acc), lr) * w
        if SCALAR_ROWS:
            z = (tl.load(lin_ptr, mask=mask) + adjusted) - sigma
        else:
            adjusted = adjusted - sigma
            z = tl.load(lin_ptr, mask=mask) + adjusted
        tl.store(lin_ptr, z, mask=mask)
        q = _div_rn(new_power, lr) + two_l2
        clipped = tl.where(z < -l1, -l1, z)
        clipped = tl.where(clipped > l1, l1, clipped)
        tl.store(w_ptr, _div_rn(clipped - z, q), mask=mask)
        tl.store(acc_ptr, new_acc, mask=mask)

    # Rules on slices: each program owns a block of columns and walks the k slices serially in slice order, so a
    # repeated row takes each slice's update in turn (the compiled rules' order) and no two programs share an
    # element. Row offsets are int64 (``row`` is loaded from int64 indices); the slices' pointers advance by a row
    # per slice (a 64-bit pointer: no ``j * width`` that could overflow 32 bits).
    @triton.jit
    def sgd_slices(w_ptr, g_ptr, idx_ptr, s_ptr, k, width, BLOCK: tl.constexpr):
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < width
        lr = tl.load(s_ptr)
        g_row = g_ptr + cols
        for j in range(0, k):
            at = tl.load(idx_ptr + j) * width + cols
            g = tl.load(g_row, mask=mask)
            g_row += width
            w = tl.load(w_ptr + at, mask=mask)
            tl.store(w_ptr + at, w - g * lr, mask=mask)

    @triton.jit
    def adagrad_slices(w_ptr, g_ptr, acc_ptr, idx_ptr, s_ptr, k, width, BLOCK: tl.constexpr):
        cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = cols < width
        lr = tl.load(s_ptr)
        eps = tl.load(s_ptr + 1)
        g_row = g_ptr + cols
        for j in range(0, k):  # every slice's square first ...
            at = tl.load(idx_ptr + j) * width + cols
            g = tl.load(g_row, mask=mask)
            g_row += width
            tl.store(acc_ptr + at, tl.load(acc_ptr + at, mask=mask) + g * g, mask=mask)
        g_row = g_ptr + cols
        for j in range(0, k):  # ... then the steps, with the accumulator after all of them
            at = tl.load(idx_ptr + j) * width + cols
            g = tl.load(g_row, mask=mask)
            g_row += width
            d = _sqrt_rn(tl.load(acc_ptr + at, mask=mask) + eps)
            w = tl.load(w_ptr + at, mask=mask)
            tl.store(w_ptr + at, w - _div_rn(g * lr, d), mask=mask)

    kernels = {name: fn for name, fn in locals().items() if name in RULES or name in SLICE_RULES}
    kernels.update(rules_tf.build({"_div_rn": _div_rn, "_sqrt_rn": _sqrt_rn, "_chunk": _chunk, "_operand": _operand,
                                   "_sign": _sign, "_sv": _sv}))
    return kernels
