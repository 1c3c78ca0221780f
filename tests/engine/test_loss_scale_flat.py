"""The loss-scale wrappers' flat path on ordinary steps (engine/loss_scaling.py): the same bits and the same skips
as the per-tensor path, every gradient checked on every step, bad input refused with nothing changed."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import slotopt
from slotopt import legacy
from slotopt.engine import loss_scaling
from slotopt.kernels import native
from slotopt.kernels.native import tensor_table
from slotopt.variables import IndexedSlices

INF, NAN = float("inf"), float("nan")
SHAPES = [(5,), (3, 4), (), (7,), (2, 3, 2), (1,)]


@pytest.fixture(params=[(True, "auto"), (False, "auto"), (True, "foreach")],
                ids=["cpp-checks", "python-checks", "no-compiled-kernels"])
def checks(request):
    """The step checks in C++ or Python; the finite check compiled (reading the gradients in place) or not (a
    flat copy's ``aminmax``)."""
    table, kernels = request.param
    previous = tensor_table.use(table), native.use(kernels)
    yield request.param
    tensor_table.use(previous[0])
    native.use(previous[1])


@pytest.fixture(autouse=True)
def quiet_legacy_warning():
    logging.disable(logging.WARNING)  # (the legacy wrapper warns once about unscaled gradients)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def flat_calls(monkeypatch):
    """Counts the steps that took the flat path."""
    calls = []
    original = loss_scaling.ordinary_step

    def counted(opt, pairs):
        step = original(opt, pairs)
        if step is not None:
            calls.append(len(step))
        return step
    monkeypatch.setattr(loss_scaling, "ordinary_step", counted)
    return calls


def per_tensor_path(monkeypatch):
    """The wrappers' per-tensor path only (what every step took before the flat path)."""
    monkeypatch.setattr(loss_scaling, "ordinary_step", lambda opt, pairs: None)


def make_params(dtypes=(torch.float32,), seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(shape, generator=g, dtype=torch.float64).to(dtypes[i % len(dtypes)]))
            for i, shape in enumerate(SHAPES)]


def random_grads(params, step, poison=None):
    """Scaled-looking gradients; ``poison=(tensor index, flat element index, value)`` plants one value."""
    g = torch.Generator().manual_seed(1000 + step)
    grads = [(torch.randn(p.shape, generator=g, dtype=torch.float64) * 3000.0).to(p.dtype) for p in params]
    if poison is not None:
        index, element, value = poison
        grads[index].view(-1)[element] = value
    return grads


def make(kind, params, **options):
    if kind == "keras3":
        return slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.01), initial_scale=64.0,
                                          dynamic_growth_steps=3, **options)
    return legacy.LossScaleOptimizer(legacy.Adam(learning_rate=0.01), initial_scale=64.0, dynamic_growth_steps=3)


def scale_of(opt):
    return float(opt.dynamic_scale if isinstance(opt, slotopt.LossScaleOptimizer) else opt.loss_scale)


def run(kind, steps, dtypes=(torch.float32,), api="apply"):
    """Values, scale and iterations after each step; the gradients of ``steps`` (a list of poisons or None)."""
    params = make_params(dtypes)
    opt = make(kind, params)
    if api == "step":
        opt.build(params)
    history = []
    for i, poison in enumerate(steps):
        grads = random_grads(params, i, poison)
        given = [g.clone() for g in grads]
        if api == "step":
            for p, g in zip(params, grads):
                p.grad = g
            opt.step()
        else:
            opt.apply_gradients(list(zip(grads, params)))
        assert all(same_bits(a, b) for a, b in zip(grads, given))  # the caller's gradients are left as they were
        history.append(([p.detach().clone() for p in params], scale_of(opt), int(opt.iterations)))
    return history


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8) if a.dim() else
                                                                   a.reshape(1).view(torch.uint8),
                                                                   b.view(-1).view(torch.uint8) if b.dim() else
                                                                   b.reshape(1).view(torch.uint8))


def assert_same_history(fast, slow):
    assert len(fast) == len(slow)
    for (values, scale, iterations), (ref_values, ref_scale, ref_iterations) in zip(fast, slow):
        assert (scale, iterations) == (ref_scale, ref_iterations)
        assert all(same_bits(a, b) for a, b in zip(values, ref_values))


# Steps: finite, then inf/NaN in the first element of the first tensor, the last element of the last tensor and one
# element in the middle; huge but finite gradients (no overflow in the check); enough finite steps to grow.
POISONS = [None, None, (0, 0, INF), None, (5, 0, NAN), (1, 6, -INF), None, (3, 6, NAN), None, None, None,
           (4, 5, 3.0e38), None]


@pytest.mark.parametrize("kind", ["keras3", "legacy"])
@pytest.mark.parametrize("api", ["apply", "step"])
@pytest.mark.parametrize("dtypes", [(torch.float32,), (torch.float32, torch.float64),
                                    (torch.float32,) * 5 + (torch.float64,), (torch.float32, torch.float64) + (torch.float32,) * 4],
                         ids=["f32", "f32+f64", "lone-f64-vector", "lone-f64-matrix"])
def test_flat_path_gives_the_per_tensor_bits(kind, api, dtypes, checks, flat_calls, monkeypatch):
    fast = run(kind, POISONS, dtypes, api)
    # Keras 3: every step went flat (the wrapper's first checked step leaves its plan and is ordinary); legacy:
    # every step after the first (which leaves the inner optimizer's plan).
    assert len(flat_calls) == len(POISONS) - (kind == "legacy")
    skipped = [i for i, (_, _, it) in enumerate(fast) if i and it == fast[i - 1][2]]
    assert skipped == ([2, 4, 5, 7] if kind == "keras3" else [])  # legacy: iterations advance on a skip too
    scales = [s for _, s, _ in fast]
    assert scales[:6] == [64.0, 64.0, 32.0, 32.0, 16.0, 8.0]
    per_tensor_path(monkeypatch)
    assert_same_history(fast, run(kind, POISONS, dtypes, api))


def test_keras3_unscale_is_a_true_division_per_gradient(checks):
    """Independent of either path: the inner optimizer applies exactly ``g / scale`` (not ``g * (1 / scale)``)."""
    params = make_params()
    reference = [p.detach().clone().requires_grad_() for p in params]
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=1.0), initial_scale=3.0, dynamic_growth_steps=100)
    inner = slotopt.SGD(learning_rate=1.0)
    for step in range(3):
        grads = random_grads(params, step)
        opt.apply_gradients(list(zip(grads, params)))
        scale = torch.tensor(3.0)
        inner.apply_gradients([(g / scale, r) for g, r in zip(grads, reference)])
        assert any(not torch.equal(g / scale, g * (1.0 / scale)) for g in grads)  # the formulas differ here
    assert all(same_bits(p.detach(), r.detach()) for p, r in zip(params, reference))


@pytest.mark.parametrize("kind", ["keras3", "legacy"])
def test_huge_finite_float64_gradients_are_finite(kind, flat_calls, monkeypatch):
    """1e300 is finite in float64 (no narrowing to float32 in either path)."""
    steps = [None, None, (1, 2, 1e300), None]
    fast = run(kind, steps, (torch.float64,))
    assert len(flat_calls) == len(steps) - (kind == "legacy")
    assert [s for _, s, _ in fast] == [64.0, 64.0, 128.0, 128.0]  # grown after 3 finite steps: none skipped
    per_tensor_path(monkeypatch)
    assert_same_history(fast, run(kind, steps, (torch.float64,)))


def test_keras3_float16_variables_are_unscaled_in_float32(flat_calls, monkeypatch):
    steps = [None, None, (0, 1, INF), None, (2, 0, 60000.0), None]
    fast = run("keras3", steps, (torch.float16,))
    assert len(flat_calls) == len(steps)
    per_tensor_path(monkeypatch)
    assert_same_history(fast, run("keras3", steps, (torch.float16,)))


@pytest.mark.parametrize("kind", ["keras3", "legacy"])
def test_every_gradient_is_checked_on_every_step(kind, checks):
    """One inf anywhere skips the step, whatever the tensor and element, on a long run of ordinary steps."""
    params = make_params()
    opt = make(kind, params)
    opt.apply_gradients(list(zip(random_grads(params, 0), params)))
    for index, p in enumerate(params):
        for element in sorted({0, p.numel() - 1}):
            before = [q.detach().clone() for q in params]
            scale = scale_of(opt)
            opt.apply_gradients(list(zip(random_grads(params, 1, (index, element, NAN)), params)))
            assert scale_of(opt) == max(scale / 2, 1.0 if kind == "legacy" else 0.0)
            assert all(torch.equal(a, b) for a, b in zip(before, params))


def test_keras3_sparse_gradients_take_the_full_path_with_the_last_repeat_rule(flat_calls):
    table = torch.nn.Parameter(torch.ones(4, 2))
    dense = torch.nn.Parameter(torch.ones(3))
    opt = slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=1.0), initial_scale=2.0)
    for _ in range(2):
        opt.apply_gradients([(torch.full((3,), 2.0), dense), (torch.full((4, 2), 2.0), table)])
    calls = len(flat_calls)
    assert calls == 2
    # Row 1 twice: the first repeat is inf, the last is finite: Keras 3's isfinite sees only the last (§3.8).
    slices = IndexedSlices(torch.tensor([[INF, INF], [4.0, 4.0]]), torch.tensor([1, 1]), (4, 2))
    opt.apply_gradients([(torch.full((3,), 2.0), dense), (slices, table)])
    assert len(flat_calls) == calls and float(opt.dynamic_scale) == 2.0  # not skipped, not flat
    slices = IndexedSlices(torch.tensor([[4.0, 4.0], [NAN, 4.0]]), torch.tensor([1, 1]), (4, 2))
    opt.apply_gradients([(torch.full((3,), 2.0), dense), (slices, table)])
    assert float(opt.dynamic_scale) == 1.0  # the last repeat is NaN: skipped


def test_legacy_sparse_gradients_take_the_full_path(flat_calls):
    table = torch.nn.Parameter(torch.ones(4, 2))
    dense = torch.nn.Parameter(torch.ones(3))
    opt = legacy.LossScaleOptimizer(legacy.SGD(1.0), initial_scale=2.0)
    for _ in range(2):
        opt.apply_gradients([(torch.full((3,), 2.0), dense), (torch.full((4, 2), 2.0), table)])
    assert len(flat_calls) == 1
    slices = IndexedSlices(torch.tensor([[INF, INF], [4.0, 4.0]]), torch.tensor([1, 1]), (4, 2))
    opt.apply_gradients([(torch.full((3,), 2.0), dense), (slices, table)])
    assert len(flat_calls) == 1 and float(opt.loss_scale) == 1.0  # tf-keras checks every value: skipped


# (tf-keras optimizers take new variables at any step, creating their slots then: an unknown variable is
# refused by Keras 3 only.)
BAD_INPUTS = [(kind, bad) for kind in ("keras3", "legacy") for bad in ("shape", "dtype", "list", "unknown", "none-only")
              if not (kind == "legacy" and bad == "unknown")]


@pytest.mark.parametrize("kind,bad", BAD_INPUTS)
def test_bad_input_after_ordinary_steps_raises_and_changes_nothing(kind, bad, checks):
    params = make_params()
    opt = make(kind, params)
    for step in range(2):
        opt.apply_gradients(list(zip(random_grads(params, step), params)))
    grads = random_grads(params, 5)
    pairs = list(zip(grads, params))
    if bad == "shape":
        pairs[3] = (torch.ones(8), params[3])
    elif bad == "dtype":
        pairs[0] = (torch.ones(5, dtype=torch.int64), params[0])
    elif bad == "list":
        pairs[2] = [grads[2]]
    elif bad == "unknown":
        pairs[4] = (grads[4], torch.nn.Parameter(torch.ones(2, 3, 2)))
    else:
        pairs = [(None, p) for p in params]
    before = [p.detach().clone() for p in params]
    state = [w.detach().clone() for w in (opt.variables if kind == "keras3" else opt.variables())]
    scale, iterations = scale_of(opt), int(opt.iterations)
    with pytest.raises((TypeError, ValueError, KeyError)):
        opt.apply_gradients(pairs)
    assert all(torch.equal(a, b) for a, b in zip(before, params))
    after = opt.variables if kind == "keras3" else opt.variables()
    assert all(torch.equal(a, b) for a, b in zip(state, after))
    assert (scale_of(opt), int(opt.iterations)) == (scale, iterations)


def test_keras3_gradients_handed_to_a_custom_update_step_are_not_reused():
    """A subclass may keep the gradients it is given: those are then new tensors on every step."""
    kept = []

    class Keeping(slotopt.SGD):
        def update_step(self, gradient, variable, learning_rate):
            kept.append(gradient)
            super().update_step(gradient, variable, learning_rate)

    params = make_params((torch.float32, torch.float64) + (torch.float32,) * 4)  # a lone float64 matrix
    opt = slotopt.LossScaleOptimizer(Keeping(learning_rate=0.1), initial_scale=4.0)
    first = None
    for step in range(3):
        grads = random_grads(params, step)
        given = [g.clone() for g in grads]
        opt.apply_gradients(list(zip(grads, params)))
        assert all(same_bits(a, b) for a, b in zip(grads, given))  # unscaled into new tensors, never in place
        if step == 1:
            first = [g.clone() for g in kept[-len(params):]]
            held = kept[-len(params):]
    assert all(torch.equal(a, b) for a, b in zip(first, held))


def test_keras3_built_in_inner_reuses_its_buffer_and_user_gradients_are_untouched(flat_calls):
    params = make_params()
    opt = slotopt.LossScaleOptimizer(slotopt.Adam(), initial_scale=8.0)
    grads = random_grads(params, 0)
    copies = [g.clone() for g in grads]
    for _ in range(3):
        opt.apply_gradients(list(zip(grads, params)))
    assert all(same_bits(a, b) for a, b in zip(grads, copies))
    buffers = [v for k, v in opt._plan.memo.items() if k[:2] == ("loss_scaling", "buffer")]
    assert len(buffers) == 1 and buffers[0][0].numel() == sum(p.numel() for p in params)


def test_all_finite_edge_cases():
    assert loss_scaling.all_finite([torch.empty(0), torch.tensor([3.0e38, -3.0e38])])
    assert loss_scaling.all_finite([torch.tensor([1e308, -1e308], dtype=torch.float64)])
    assert loss_scaling.all_finite([torch.tensor([65504.0], dtype=torch.float16)])
    for bad in (INF, -INF, NAN):
        for position in (0, 16, 32):  # first, inside a vector block, the scalar tail
            values = torch.zeros(33)
            values[position] = bad
            assert not loss_scaling.all_finite([values])
            assert not loss_scaling.all_finite([torch.ones(3), values.to(torch.bfloat16)])


def test_legacy_fixed_scale_applies_ordinary_steps_as_the_full_path(monkeypatch):
    def fixed_run():
        params = make_params()
        opt = legacy.LossScaleOptimizer(legacy.Adam(learning_rate=0.01), dynamic=False, initial_scale=8.0)
        out = []
        for step, poison in enumerate([None, None, (2, 0, INF), None]):
            opt.apply_gradients(list(zip(random_grads(params, step, poison), params)))
            out.append(([p.detach().clone() for p in params], float(opt.loss_scale), int(opt.iterations)))
        return out

    fast = fixed_run()
    assert [s for _, s, _ in fast] == [8.0] * 4 and [it for _, _, it in fast] == [1, 2, 3, 4]
    assert torch.isnan(fast[2][0][2]).any()  # a fixed scale checks nothing: the inf is applied, as tf-keras does
    per_tensor_path(monkeypatch)
    assert_same_history(fast, fixed_run())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_compiled_finite_check_reads_the_exponent_bits(dtype):
    if native.first_nonfinite(np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64), dtype, lambda: []) is None:
        pytest.skip("compiled kernels not built")
    info = torch.finfo(dtype)
    edge = torch.tensor([0.0, -0.0, info.max, -info.max, info.tiny, info.tiny / 2, 1.0], dtype=dtype)
    tensors = [torch.randn(37).to(dtype), edge, torch.zeros(0, dtype=dtype), torch.randn(2, 9).to(dtype)]

    def first(ts):
        addresses = np.array([t.data_ptr() for t in ts], dtype=np.uint64)
        offsets = np.concatenate([[0], np.cumsum([t.numel() for t in ts])]).astype(np.int64)
        return native.first_nonfinite(addresses, offsets, dtype, lambda: ts)

    assert first(tensors) == -1  # max, subnormals, signed zeros: all finite
    for bad in (INF, -INF, NAN):
        for index, position in ((0, 0), (0, 36), (0, 17), (1, 6), (3, 17)):
            planted = [t.clone() for t in tensors]
            planted[index].view(-1)[position] = bad
            assert first(planted) == index
