"""The Triton kernels themselves: every rule of ``RULES`` in multi-tensor form, and the rules on slices.

A dense rule is written here as its arithmetic only (``_b_<rule>``: loaded operands and named scalars in, new
values out); its kernel's prologue and epilogue (the chunk, each operand's pointers, masked loads and stores, the
scalars at their positions) are generated from the rule's scalar description by ``generate.py``. The kernel runs one launch over a whole group (``table.py`` builds its launch table): program ``p``
reads its row of the table (its chunk's element count and each operand's address of the chunk: the ``rows``
layout; or, in the ``table`` layout, which tensor and the chunk's bounds, then that tensor's operand addresses
from the address table), casts the addresses to pointers of the variables' dtype (the scalar vector's pointer
type), and updates its chunk in exactly the foreach kernel's evaluation order. A single large tensor is the table
of one.
With ``ALIGNED`` (every address 16-byte aligned, every chunk bound a multiple of 16 elements, checked on the
host) the kernel is told so, which lets the compiler use vector loads and stores; the arithmetic is the same.

Three things that would break bit-exactness on a GPU are turned off or replaced: fused multiply-adds (launched
with ``enable_fp_fusion=False``), the approximate division and the approximate square root (Triton's ``/`` and
``tl.sqrt`` on float32 are not correctly rounded; ``div_rn`` and ``sqrt_rn`` are).
"""

from __future__ import annotations

import inspect
from typing import Any

from ..native.scalars import DESCRIPTIONS
from . import generate, rules_tf

#: The rules with a Triton kernel, each in multi-tensor form. A kernel's operand lists and scalar vector are the
#: compiled CPU rule's, described once next to its foreach kernel (``kernels/native/scalars.py``): each ``Flag`` of
#: the description is the kernel's ``constexpr`` parameter of its name in capitals, and each number the body
#: names is read at its position (``generate.py`` writes both; ``tests/kernels/test_rule_scalars.py`` checks them).
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

    # The program's chunk, in one of two layouts of the launch table (``table.py``):
    # * ROW > 0, the rows layout: program p's row of ROW int64 holds its element count and, for each operand,
    #   the address of its chunk's first element (padded to a power of two). Every load of the prologue depends
    #   only on the program's id, so they are in flight together: one memory round trip before the data loads.
    #   The offsets within a chunk are int32 (< BLOCK); the addresses carry the chunk's start, so a tensor of more
    #   than 2**31 elements needs no 64-bit offset arithmetic.
    # * ROW == 0, the table layout: program p's meta row (tensor, start, end), then each operand's address from
    #   the address table indexed by that tensor: two round trips, the second on the first's result. The offsets
    #   are int64 (a tensor may hold more than 2**31 elements).
    # ``t`` is the row's pointer (rows) or the tensor's index (table). ALIGNED: runs of 16 elements share their
    # mask (every bound is a multiple of 16), which lets the compiler vectorise the masked loads and stores.
    @triton.jit
    def _chunk(meta_ptr, ALIGNED: tl.constexpr, BLOCK: tl.constexpr, ROW: tl.constexpr):
        if ROW > 0:
            t = meta_ptr + ROW * tl.program_id(0).to(tl.int64)
            offs = tl.arange(0, BLOCK)
            mask = offs < tl.load(t)
        else:
            row = meta_ptr + 3 * tl.program_id(0).to(tl.int64)
            t = tl.load(row)
            offs = tl.load(row + 1) + tl.arange(0, BLOCK)
            mask = offs < tl.load(row + 2)
        if ALIGNED:
            mask = tl.max_constancy(mask, 16)
        return t, offs, mask

    # Operand ``k`` of the program's chunk at ``offs``: its address (from the program's row, or from the address
    # table by the tensor's index), cast to a pointer of the scalar vector's dtype. ALIGNED: the address is 16-byte
    # aligned and the chunk starts at a multiple of 16 elements, so each run of 16 pointers is contiguous and
    # starts on 16 bytes.
    @triton.jit
    def _operand(tab_ptr, k: tl.constexpr, T, t, s_ptr, offs, ALIGNED: tl.constexpr, ROW: tl.constexpr):
        if ROW > 0:
            pointers = tl.load(t + 1 + k).to(s_ptr.dtype) + offs
        else:
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

    # The rules' arithmetic. Each body takes the loaded operands (in the description's order), the numbers it reads
    # (named as their description entries) and its flags (in capitals), and returns the new values of the operands
    # the rule writes, in operand order; ``generate.py`` writes the kernel around it. Each follows the foreach
    # kernel's evaluation order, the TensorFlow rules ``kernels/native/rules.inc`` operation for operation.
    @triton.jit
    def _sign(x):  # torch.sign as the compiled rules take it: -1, 0 or 1, and 0 for NaN
        return (x > 0).to(x.dtype) - (x < 0).to(x.dtype)

    @triton.jit
    def _decayed(w, weight_decay, weight_decay_lr, DECAY: tl.constexpr):  # Keras 3's decoupled weight decay
        if DECAY:
            w = w - (w * weight_decay) * weight_decay_lr
        return w

    @triton.jit
    def _b_sgd(w, g, lr, weight_decay, weight_decay_lr, DECAY: tl.constexpr):
        return _decayed(w, weight_decay, weight_decay_lr, DECAY) - g * lr

    @triton.jit
    def _b_keras_momentum(w, g, m, lr, momentum, weight_decay, weight_decay_lr, NESTEROV: tl.constexpr,
                          DECAY: tl.constexpr):
        step = g * lr
        m = m * momentum - step
        w = _decayed(w, weight_decay, weight_decay_lr, DECAY)
        if NESTEROV:
            w = w + (m * momentum - step)
        else:
            w = w + m
        return w, m

    @triton.jit
    def _b_momentum(w, g, a, lr, momentum, lr_times_momentum, NESTEROV: tl.constexpr, FUSED_PRODUCT: tl.constexpr):
        a = a * momentum + g
        if NESTEROV:
            if FUSED_PRODUCT:
                look = a * lr_times_momentum
            else:
                look = (a * momentum) * lr
            w = w - (g * lr + look)
        else:
            w = w - a * lr
        return w, a

    @triton.jit
    def _b_decoupled_weight_decay(w, weight_decay, lr):
        return w - (w * weight_decay) * lr

    @triton.jit
    def _b_adam(w, g, m, v, vh, alpha, one_minus_beta_1, one_minus_beta_2, epsilon, weight_decay, weight_decay_lr,
                AMSGRAD: tl.constexpr, DECAY: tl.constexpr):
        m = m + (g - m) * one_minus_beta_1
        v = v + (g * g - v) * one_minus_beta_2
        root = v
        if AMSGRAD:
            vh = tl.maximum(vh, v, propagate_nan=tl.PropagateNan.ALL)
            root = vh
        w = _decayed(w, weight_decay, weight_decay_lr, DECAY)  # AdamW: the decay first, in the same pass
        return w - _div_rn(m * alpha, _sqrt_rn(root) + epsilon), m, v, vh

    @triton.jit
    def _b_rmsprop(w, g, vel, mom, avg, lr, rho, one_minus_rho, momentum_decay, epsilon,
                   EPSILON_INSIDE_ROOT: tl.constexpr, HAS_MOMENTUM: tl.constexpr, CENTERED: tl.constexpr):
        vel = vel * rho + (g * g) * one_minus_rho
        if CENTERED:
            avg = avg * rho + g * one_minus_rho
            d = vel - avg * avg
            if EPSILON_INSIDE_ROOT:
                d = d + epsilon
            d = _sqrt_rn(d)
        elif EPSILON_INSIDE_ROOT:
            d = _sqrt_rn(vel + epsilon)
        else:
            d = _sqrt_rn(vel)
        if not EPSILON_INSIDE_ROOT:
            d = d + epsilon
        inc = _div_rn(g * lr, d)
        if HAS_MOMENTUM:
            mom = mom * momentum_decay + inc
            w = w - mom
        else:
            w = w - inc
        return w, vel, mom, avg

    @triton.jit
    def _b_apply_rmsprop(w, g, ms, mom, mg, lr, one_minus_rho, momentum, epsilon, CENTERED: tl.constexpr):
        ms = ms + (g * g - ms) * one_minus_rho
        if CENTERED:
            mg = mg + (g - mg) * one_minus_rho
            d = (ms - mg * mg) + epsilon
        else:
            d = ms + epsilon
        mom = mom * momentum + _div_rn(g * lr, _sqrt_rn(d))
        return w - mom, ms, mom, mg

    @triton.jit
    def _b_adagrad(w, g, acc, lr, epsilon, EPSILON_INSIDE_ROOT: tl.constexpr):
        acc = acc + g * g
        if EPSILON_INSIDE_ROOT:
            d = _sqrt_rn(acc + epsilon)
        else:
            d = _sqrt_rn(acc) + epsilon
        return w - _div_rn(g * lr, d), acc

    @triton.jit
    def _b_apply_adagrad(w, g, acc, lr, SCALAR_ROWS: tl.constexpr):
        acc = acc + g * g
        step = g * lr
        if SCALAR_ROWS:
            step = _div_rn(step, _sqrt_rn(acc))
        else:
            step = step * _div_rn(tl.full(acc.shape, 1.0, acc.dtype), _sqrt_rn(acc))
        return w - step, acc

    @triton.jit
    def _b_proximal_gradient_descent(w, g, lr, lr_l1, denominator, L1_POSITIVE: tl.constexpr):
        prox = w - g * lr
        if L1_POSITIVE:
            mag = tl.abs(prox) - lr_l1
            mag = tl.where(mag < 0, 0.0, mag)
            w = _div_rn(_sign(prox) * mag, denominator)
        else:
            w = _div_rn(prox, denominator)
        return w

    @triton.jit
    def _b_moving_average(w, avg, momentum, one_minus_momentum):
        return avg * momentum + w * one_minus_momentum

    @triton.jit
    def _b_adam_variable_update(w, m, v, vh, alpha, epsilon, AMSGRAD: tl.constexpr):
        if AMSGRAD:
            vh = tl.maximum(vh, v, propagate_nan=tl.PropagateNan.ALL)
            v = vh
        return w - _div_rn(m * alpha, _sqrt_rn(v) + epsilon), vh

    @triton.jit
    def _b_adamax(w, g, m, u, lr, one_minus_beta_1, beta_2, epsilon, one_minus_beta_1_power, scaled_lr,
                  SCALED: tl.constexpr):
        m = m + (g - m) * one_minus_beta_1
        u = tl.maximum(u * beta_2, tl.abs(g), propagate_nan=tl.PropagateNan.ALL)
        if SCALED:
            w = w - _div_rn(m, u + epsilon) * scaled_lr
        else:
            w = w - _div_rn(m * lr, (u + epsilon) * one_minus_beta_1_power)
        return w, m, u

    @triton.jit
    def _b_nadam(w, g, m, v, lr, one_minus_beta_1, one_minus_beta_2, mu_next, one_minus_mu, one_minus_product,
                 one_minus_product_next, one_minus_beta_2_power, epsilon):
        m = m + (g - m) * one_minus_beta_1
        v = v + (g * g - v) * one_minus_beta_2
        m_hat = _div_rn(m * mu_next, one_minus_product_next) + _div_rn(g * one_minus_mu, one_minus_product)
        return w - _div_rn(m_hat * lr, _sqrt_rn(_div_rn(v, one_minus_beta_2_power)) + epsilon), m, v

    @triton.jit
    def _b_nadam_cached(w, g, m, v, lr, beta_1, beta_2, one_minus_beta_1, one_minus_beta_2, one_minus_mu, mu_next,
                        one_minus_product, one_minus_product_next, one_minus_beta_2_power, epsilon):
        m = m * beta_1 + g * one_minus_beta_1
        v = v * beta_2 + (g * g) * one_minus_beta_2
        m_bar = _div_rn(g, one_minus_product) * one_minus_mu + _div_rn(m, one_minus_product_next) * mu_next
        return w - _div_rn(m_bar * lr, _sqrt_rn(_div_rn(v, one_minus_beta_2_power)) + epsilon), m, v

    @triton.jit
    def _b_lion(w, g, m, lr, beta_1, one_minus_beta_1, beta_2, one_minus_beta_2):
        direction = m * beta_1 + g * one_minus_beta_1
        return w - _sign(direction) * lr, m * beta_2 + g * one_minus_beta_2

    @triton.jit
    def _b_adadelta(w, g, eg, ed, lr, rho, one_minus_rho, epsilon):
        eg = eg * rho + (g * g) * one_minus_rho
        delta = -_div_rn(_sqrt_rn(ed + epsilon) * g, _sqrt_rn(eg + epsilon))
        return w + delta * lr, eg, ed * rho + (delta * delta) * one_minus_rho

    @triton.jit
    def _b_apply_adadelta(w, g, acc, au, lr, rho, one_minus_rho, epsilon):
        # TensorFlow's rsqrt as its GPU kernel takes it: 1 / sqrt(x), two roundings (no CPU packet estimate)
        acc = acc * rho + (g * g) * one_minus_rho
        rsqrt = _div_rn(tl.full(acc.shape, 1.0, acc.dtype), _sqrt_rn(acc + epsilon))
        update = (_sqrt_rn(au + epsilon) * rsqrt) * g
        return w - update * lr, acc, au * rho + (update * update) * one_minus_rho

    @triton.jit
    def _b_ftrl_root(w, g, acc, lin, lr, l1, two_l2, shrinkage, SCALAR_ROWS: tl.constexpr):
        adjusted = w * shrinkage + g
        new_acc = g * g + acc
        new_power = _sqrt_rn(new_acc)
        sigma = _div_rn(new_power - _sqrt_rn(acc), lr) * w
        if SCALAR_ROWS:
            z = (lin + adjusted) - sigma
        else:
            adjusted = adjusted - sigma
            z = lin + adjusted
        q = _div_rn(new_power, lr) + two_l2
        clipped = tl.where(z < -l1, -l1, z)
        clipped = tl.where(clipped > l1, l1, clipped)
        return _div_rn(clipped - z, q), new_acc, z

    globals().update(_sign=_sign, _decayed=_decayed)

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

    # (tl among the modules' globals too: the interpreter looks for triton.language there)
    helpers = {"tl": tl, "_div_rn": _div_rn, "_sqrt_rn": _sqrt_rn, "_chunk": _chunk, "_operand": _operand, "_sign": _sign,
               "_sv": _sv}
    kernels = {name: fn for name, fn in locals().items() if name in SLICE_RULES or name.startswith("_b_")}
    kernels.update(rules_tf.build(helpers))
    globals().update(tl=tl)
    kernels["_namespace"] = {**helpers, **{k: v for k, v in kernels.items() if k.startswith("_b_")}}
    for rule in RULES:
        if rule in DESCRIPTIONS:  # (a rule's description registers when its family's module is imported)
            generated(rule, kernels)
    return kernels


def generated(rule: str, kernels: dict[str, Any]) -> Any:
    """The multi-tensor kernel of ``rule``, generated around its body from its description (``generate.py``) and
    kept in ``kernels`` (``build``'s dictionary)."""
    import triton

    kernel = kernels.get(rule)
    if kernel is None:
        body = kernels[f"_b_{rule}"]
        parameters = list(inspect.signature(getattr(body, "fn", body)).parameters)
        text = generate.source(DESCRIPTIONS[rule], f"_b_{rule}", parameters)
        generate.register(rule, text)
        namespace = kernels["_namespace"]
        exec(compile(text, generate.filename(rule), "exec"), namespace)  # noqa: S102 (our own source)
        kernel = kernels[rule] = triton.jit(namespace.pop(rule))
        kernels[f"_unread_{rule}"] = generate.unread(DESCRIPTIONS[rule], parameters)
    return kernel


def source(rule: str) -> str:
    """The generated source of ``rule``'s kernel (after ``build``)."""
    import linecache

    return "".join(linecache.getlines(generate.filename(rule)))
