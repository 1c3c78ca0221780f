"""Capturable steps (issue 48, engine/capture.py) under Triton's interpreter, CPU tensors standing in for a GPU's:
the device scalars' bits (glibc's powf, each per-step program) against the host's evaluation of the same recipes,
and the recipes against the faces' host arithmetic; capturable steps bit for bit against the host path on the
device (the Triton kernels, scalars by value); a step's recorded launches replayed (what a CUDA graph does)
giving the bits of steps run anew, with no per-step number in any launch and no read of a device tensor;
refusals by name."""

from __future__ import annotations

import struct

import pytest
import torch

pytest.importorskip("triton")

import slotopt  # noqa: E402
from slotopt.engine import capture  # noqa: E402
from slotopt.engine import constants as K  # noqa: E402
from slotopt.engine import step_recipes as R  # noqa: E402
from slotopt.keras3.adam import adam_alpha  # noqa: E402
from slotopt.kernels import native  # noqa: E402
from slotopt.kernels import triton as kt  # noqa: E402
from slotopt.kernels.triton import step_scalars  # noqa: E402
from slotopt.numerics import libm  # noqa: E402

if not step_scalars.available():
    pytest.skip("glibc's powf tables not found in this C library", allow_module_level=True)


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """Triton's interpreter for these tests only (the kernels defined under it; other modules compile them)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(kt, "_kernels", None)
    monkeypatch.setattr(step_scalars, "_kernels", None)
    monkeypatch.setattr(step_scalars, "_programs", {})
    yield


S = slotopt.schedules
F64 = {"dtype": torch.float64}
CASES = {
    "adam": (slotopt.Adam, {"learning_rate": 0.01}),
    "adamw": (slotopt.AdamW, {"learning_rate": 0.01, "weight_decay": 0.1}),
    "amsgrad": (slotopt.Adam, {"learning_rate": 0.01, "amsgrad": True}),
    "sgd-momentum": (slotopt.SGD, {"learning_rate": 0.1, "momentum": 0.9}),
    "sgd": (slotopt.SGD, {"learning_rate": 0.1}),
    "rmsprop": (slotopt.RMSprop, {"learning_rate": 0.01}),
    "adagrad-decay": (slotopt.Adagrad, {"learning_rate": 0.1, "weight_decay": 0.01}),
    # the other Keras 3 rules with a Triton kernel
    "adamax": (slotopt.Adamax, {"learning_rate": 0.01}),
    "lion-decay": (slotopt.Lion, {"learning_rate": 0.01, "weight_decay": 0.05}),
    "adadelta": (slotopt.Adadelta, {"learning_rate": 0.5}),
    "nadam": (slotopt.Nadam, {"learning_rate": 0.01}),
    # tf.keras (OptimizerV2) and TF1
    "legacy-adam-decay": (slotopt.legacy.Adam, {"learning_rate": 0.01, "decay": 0.1}),
    "legacy-amsgrad": (slotopt.legacy.Adam, {"learning_rate": 0.01, "amsgrad": True}),
    "legacy-sgd-nesterov": (slotopt.legacy.SGD, {"learning_rate": 0.1, "momentum": 0.9, "nesterov": True,
                                                 "decay": 0.05}),
    "legacy-rmsprop-momentum": (slotopt.legacy.RMSprop, {"learning_rate": 0.01, "momentum": 0.5}),
    "legacy-rmsprop-centered": (slotopt.legacy.RMSprop, {"learning_rate": 0.01, "centered": True}),
    "legacy-adagrad": (slotopt.legacy.Adagrad, {"learning_rate": 0.1}),
    "legacy-adamax": (slotopt.legacy.Adamax, {"learning_rate": 0.01}),
    "legacy-adadelta-decay": (slotopt.legacy.Adadelta, {"learning_rate": 0.5, "decay": 0.2}),
    "legacy-sgd-exponential": (slotopt.legacy.SGD, {"learning_rate": S.ExponentialDecay(0.1, 2, 0.7)}),
    "v1-sgd": (slotopt.v1.GradientDescentOptimizer, {"learning_rate": 0.1}),
    "v1-momentum": (slotopt.v1.MomentumOptimizer, {"learning_rate": 0.1, "momentum": 0.9, "use_nesterov": True}),
    "v1-rmsprop": (slotopt.v1.RMSPropOptimizer, {"learning_rate": 0.01, "centered": True}),
    "v1-adagrad": (slotopt.v1.AdagradOptimizer, {"learning_rate": 0.1}),
    "v1-adam": (slotopt.v1.AdamOptimizer, {"learning_rate": 0.01}),
    "v1-adadelta": (slotopt.v1.AdadeltaOptimizer, {"learning_rate": 0.5}),
    "v1-proximal-sgd": (slotopt.v1.ProximalGradientDescentOptimizer, {"learning_rate": 0.1,
                                                                      "l1_regularization_strength": 0.01,
                                                                      "l2_regularization_strength": 0.1}),
    "v1-proximal-adagrad": (slotopt.v1.ProximalAdagradOptimizer, {"learning_rate": 0.1,
                                                                  "l1_regularization_strength": 0.01}),
    # float64 (no pow on the device's float64 yet: the rate-only rules)
    "sgd-momentum-f64": (slotopt.SGD, {"learning_rate": 0.1, "momentum": 0.9, **F64}),
    "legacy-rmsprop-f64": (slotopt.legacy.RMSprop, {"learning_rate": 0.01, "decay": 0.1, **F64}),
    "v1-adagrad-f64": (slotopt.v1.AdagradOptimizer, {"learning_rate": 0.1, **F64}),
    # maximize: the negated gradients by a device kernel recorded with the step
    "adam-maximize": (slotopt.Adam, {"learning_rate": 0.01, "maximize": True}),
    "legacy-sgd-maximize": (slotopt.legacy.SGD, {"learning_rate": 0.1, "momentum": 0.5, "maximize": True}),
    "v1-rmsprop-maximize": (slotopt.v1.RMSPropOptimizer, {"learning_rate": 0.01, "maximize": True}),
    # schedules computed on the device
    "adam-exponential": (slotopt.Adam, {"learning_rate": S.ExponentialDecay(0.01, 3, 0.5)}),
    "sgd-exponential-staircase": (slotopt.SGD, {"learning_rate": S.ExponentialDecay(0.1, 2, 0.7, staircase=True)}),
    "sgd-inverse-time": (slotopt.SGD, {"learning_rate": S.InverseTimeDecay(0.1, 2, 0.7), **F64}),
    "rmsprop-piecewise": (slotopt.RMSprop, {"learning_rate": S.PiecewiseConstantDecay([1, 3], [0.1, 0.05, 0.01])}),
    "adagrad-polynomial": (slotopt.Adagrad, {"learning_rate": S.PolynomialDecay(0.1, 4, 0.01, power=0.5)}),
    "sgd-polynomial-cycle": (slotopt.SGD, {"learning_rate": S.PolynomialDecay(0.1, 2, 0.01, power=2.0, cycle=True)}),
}
#: float64 ``pow`` on the device: glibc's double pow from kernels/triton/libm.py, where it is (else refused by
#: name: test_a_float64_step_needing_pow_is_refused_by_name_during_a_capture)
POW64 = {
    "adam-f64": (slotopt.Adam, {"learning_rate": 0.01, **F64}),
    "legacy-adam-decay-f64": (slotopt.legacy.Adam, {"learning_rate": 0.01, "decay": 0.1, **F64}),
}
#: float32 ``cos`` on the device: glibc's cosf from kernels/triton/libm.py, where it is (else refused by name)
COSF = {
    "sgd-cosine": (slotopt.SGD, {"learning_rate": S.CosineDecay(0.1, 4, alpha=0.1)}),
    "adam-cosine-warmup": (slotopt.Adam, {"learning_rate": S.CosineDecay(0.01, 3, warmup_target=0.05,
                                                                          warmup_steps=2)}),
}


def _has_cosf():
    libm = step_scalars._libm()
    return libm is not None and "cosf" in libm.FUNCTIONS
IDS = list(CASES)


def _bits(values):
    return [struct.pack("<f", float(v)) for v in values]


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # (1.25 ** 77777: inf, as powf's)
def test_device_powf_has_the_c_library_s_bits():
    betas = [0.9, 0.99, 0.999, 0.9999, 0.95, 0.5, 1.25, 3.0e-30, 0.0, -0.0, -2.0, -0.75, 1.0, -1.0, 1e-40,
             float("inf"), -float("inf"), float("nan")]
    steps = [1, 2, 3, 10, 99, 1000, 4096, 77777, -3, 0.5, 150.25, 0.0, float("inf"), -float("inf"), float("nan")]
    x = torch.tensor([b for b in betas for _ in steps], dtype=torch.float32)
    y = torch.tensor([float(s) for _ in betas for s in steps], dtype=torch.float32)
    out = step_scalars.powf(x, y)
    expected = [libm.scalar_pow(a, b, single=True) for a, b in zip(x.tolist(), y.tolist())]
    nan = out.isnan() & torch.tensor(expected).isnan()  # (a NaN's payload is the device's)
    assert _bits(out[~nan].tolist()) == _bits(torch.tensor(expected)[~nan].tolist())  # (underflows flushed)
    assert step_scalars.powf(torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64)) is None


def _programs():
    """Recipes of every operation, float32 and float64, with constants that reach the edges (a subnormal
    product flushed, a root of a negative, a division by zero)."""
    out = []
    for dtype in (torch.float32, torch.float64):
        t, c = R.step(dtype), (lambda x, d=dtype: R.const(x, d))
        out.append({0: (c(0.25) * R.sqrt(1 - t / 64.0)) / (1 + c(0.001) * R.step(dtype, -1)),
                    1: R.floor(t / 3.0) - R.minimum(t, 7.0), 2: -(c(1e-30) * c(1e-10)) * t,
                    3: R.less_equal(t, 5.0, dtype) * 0.5 + R.greater(t, 9.0, dtype) * c(0.1),
                    4: R.sqrt(c(-1.0) + t * 0.0), 5: c(1.0) / (t - 3.0), 6: R.cast(R.step(torch.float32) / 7.0, dtype)})
    f32, t = torch.float32, R.step(torch.float32)
    out.append({0: R.adam_alpha(R.const(3e-4, f32), K.cast(0.9, f32), K.cast(0.999, f32), t),
                1: 1 - R.pow(K.cast(0.95, f32), t), 2: R.pow(R.const(0.5, f32), t * 9.0),  # (underflows: flushed)
                3: R.const(0.1, f32) * R.pow(0.96, R.floor(t / 2.0))})
    return out


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
@pytest.mark.parametrize("k", range(3), ids=["float32", "float64", "powf"])
def test_each_program_s_device_bits_are_the_host_s_evaluation(k):
    entries = _programs()[k]
    program = R.program(entries)
    dtype = next(iter(entries.values())).dtype
    scalars = step_scalars.Scalars(torch.device("cpu"), 0, program.inputs)
    vector = torch.full((8,), 7.0, dtype=dtype)
    fmt = "<f" if dtype == torch.float32 else "<d"
    for t in range(1, 13):
        step_scalars.run(program, scalars, vector)
        assert int(scalars.count) == t
        flat = program.host(t)[0]  # (the capturable step's check: the program as the device runs it)
        for position, expr in entries.items():
            device, host = vector[position].item(), R.evaluate(expr, t)
            assert struct.pack(fmt, device) == struct.pack(fmt, host) or (host != host and device != device), \
                (position, t, device, host)
            assert struct.pack(fmt, flat[position]) == struct.pack(fmt, host) or (host != host and flat[position] != flat[position])
    assert vector[7] == 7.0  # an entry not in the program is left alone


def test_a_program_s_state_advances_on_the_device_as_on_the_host():
    """A state slot (TF1's beta powers): read, then written with its next value, step after step, with the bits
    of the host's running product."""
    f32 = torch.float32
    host = K.cast(0.9, f32)
    slot = R.state(0, host, f32)
    program = R.program({1: 1 - slot}, {0: slot * R.const(K.cast(0.9, f32), f32)})
    scalars = step_scalars.Scalars(torch.device("cpu"), 0, program.inputs, program, [host])
    vector = torch.zeros(2)
    for t in range(1, 30):
        step_scalars.run(program, scalars, vector)
        expected = K.evaluate(lambda p: 1 - p, f32, host)
        host = K.evaluate(lambda p, b: p * b, f32, host, K.cast(0.9, f32))
        assert _bits([vector[1], scalars.state[0]]) == _bits([expected, host]), t


def test_a_recipe_built_again_is_the_same_tree_and_program_but_a_signed_zero_is_not_zero():
    f32, t = torch.float32, R.step(torch.float32)
    alpha = R.adam_alpha(R.const(3e-4, f32), 0.9, 0.999, t)
    assert R.adam_alpha(R.const(3e-4, f32), 0.9, 0.999, t) is alpha
    assert R.program({0: alpha}) is R.program({0: alpha}) and R.program({1: alpha}) is not R.program({0: alpha})
    negative = t * R.const(-0.0, f32)
    assert negative is not t * R.const(0.0, f32) and _bits([R.evaluate(negative, 3)]) == _bits([-0.0])
    assert _bits([R.program({0: negative}).host(3)[0][0]]) == _bits([-0.0])


def test_recipes_are_the_faces_host_arithmetic():
    """The recipes the faces give against the host functions they stand for, over many steps (the capturable
    steps compare them at each step too, before the first launch)."""
    f32, t = torch.float32, R.step(torch.float32)
    lr, b1, b2 = (K.cast(v, f32) for v in (3e-4, 0.9, 0.999))
    alpha = R.adam_alpha(R.const(lr, f32), b1, b2, t)
    correction = 1 - R.pow(R.const(b1, f32), t)
    for step in [*range(1, 200), 1000, 4096, 77777]:
        assert _bits([R.evaluate(alpha, step)]) == _bits([adam_alpha(lr, b1, b2, step, f32)])
        assert _bits([R.evaluate(correction, step)]) == _bits(
            [K.evaluate(lambda p: 1 - p, f32, K.power(b1, float(step), f32))])
    schedules = [S.ExponentialDecay(0.01, 3, 0.5), S.ExponentialDecay(0.1, 7, 0.9, staircase=True),
                 S.InverseTimeDecay(0.1, 2, 0.7), S.InverseTimeDecay(0.1, 5, 0.3, staircase=True),
                 S.PiecewiseConstantDecay([1, 3, 10], [0.1, 0.05, 0.01, 0.002]),
                 S.PiecewiseConstantDecay([2.7], [1.0, 0.5]), S.PolynomialDecay(0.1, 40, 0.01, power=0.5),
                 S.PolynomialDecay(0.1, 30), S.PolynomialDecay(0.1, 7, 0.01, power=2.0, cycle=True),
                 S.CosineDecay(0.1, 10, alpha=0.1), S.CosineDecay(0.1, 7, warmup_target=0.5, warmup_steps=3)]
    for schedule in schedules:
        recipe = schedule._capture_recipe(lambda dtype: R.step(dtype, -1))
        for step in range(0, 60):
            assert _bits([R.evaluate(recipe, step + 1)]) == _bits([float(schedule(torch.tensor(step)))]), \
                (schedule.get_config(), step)


def _model(cls, kwargs, capturable):
    kwargs = dict(kwargs)
    dtype = kwargs.pop("dtype", torch.float32)
    torch.manual_seed(0)
    ws = [torch.nn.Parameter(torch.randn(n, dtype=dtype)) for n in (5, 33, 64)]
    return ws, cls(ws, capturable=capturable, **kwargs)


def _gradients(ws, step):
    g = torch.Generator().manual_seed(100 + step)
    return [torch.randn(w.shape, generator=g, dtype=w.dtype) for w in ws]


def _by_value(rule, lists, values, read_only):
    return kt.apply(rule, lists, values, read_only)


def _host_step(opt):
    """A step of the host path as a CUDA device takes it: the Triton kernels, the scalars by value in each launch
    (CPU tensors otherwise take the C kernels: TF1's rsqrt rules differ from the GPU's there, as in TensorFlow)."""
    previous = native.capturable_launcher(_by_value)
    try:
        opt.step()
    finally:
        native.capturable_launcher(previous)


@pytest.mark.parametrize("case", IDS + list(POW64) + list(COSF))
def test_capturable_steps_have_the_host_path_s_bits(case):
    if case in POW64 and step_scalars._libm_pow() is None:
        pytest.skip("no device float64 pow here (kernels/triton/libm.py)")
    if case in COSF and not _has_cosf():
        pytest.skip("no device cosf here (kernels/triton/libm.py)")
    cls, kwargs = {**CASES, **POW64, **COSF}[case]
    a, opt_a = _model(cls, kwargs, True)
    b, opt_b = _model(cls, kwargs, False)
    for step in range(5):
        for ws in (a, b):
            for w, g in zip(ws, _gradients(ws, step)):
                w.grad = g
        opt_a.step()
        _host_step(opt_b)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    counts = capture.device_step(opt_a)
    assert counts and all(int(c) == 5 for c in counts.values())  # the device's step count, one per step
    assert capture.refusal(opt_a) is None


def _set_gradients(ws, step):
    for w, g in zip(ws, _gradients(ws, step)):
        w.grad.copy_(g)  # in place: a graph's gradients stay at their addresses


class _HostReads(torch.utils._python_dispatch.TorchDispatchMode):
    """Every read of a tensor's value by the host (``.item()``, ``float(t)``, ``bool(t)``): the storages read."""

    def __init__(self):
        super().__init__()
        self.read = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            self.read.append(args[0].untyped_storage().data_ptr())
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("case", IDS)
def test_recorded_launches_replayed_give_the_bits_of_steps_run_anew(case):
    cls, kwargs = CASES[case]
    a, opt_a = _model(cls, kwargs, True)
    b, opt_b = _model(cls, kwargs, False)
    for ws in (a, b):
        for w in ws:
            w.grad = torch.zeros_like(w)
    for step in range(2):  # warm-up steps (torch's advice before a capture): the device scalars are made
        _set_gradients(a, step)
        _set_gradients(b, step)
        opt_a.step()
        _host_step(opt_b)
    _set_gradients(a, 2)
    _set_gradients(b, 2)
    variables = opt_a.variables() if callable(opt_a.variables) else opt_a.variables
    device = {t.untyped_storage().data_ptr() for t in [*a, *(w.grad for w in a)]}
    device |= {t.untyped_storage().data_ptr() for t in variables if t.shape == a[0].shape}  # (the slots)
    device |= {t.untyped_storage().data_ptr() for t in [opt_a.__dict__.get("_u_product")] if t is not None}
    device |= {t.untyped_storage().data_ptr() for g in opt_a._capturable_groups.values()
               for t in (g.vector, g.scalars.count, g.scalars.inputs)}
    with kt.recording() as launches, _HostReads() as reads:
        opt_a.step()  # the "capture": the step's launches and their arguments
    assert not set(reads.read) & device  # no value of a device tensor read by the host in the step
    assert len(launches) >= 2 and all(options.get("BY_VALUE", False) is False for _, _, _, options in launches)
    numbers = [x for _, _, arguments, _ in launches for x in arguments if isinstance(x, float)]
    assert all(x == 0.0 for x in numbers)  # no scalar of the step in a launch: each is read from the device
    _host_step(opt_b)
    for step in range(3, 6):  # replays, new gradients written in place, against steps run anew
        _set_gradients(a, step)
        _set_gradients(b, step)
        kt.replay(launches)
        _host_step(opt_b)
        assert all(torch.equal(x, y) for x, y in zip(a, b)), step


def test_a_replayed_host_path_launch_would_freeze_adam_s_alpha():
    """The test above can fail: a launch with Adam's alpha as an argument (the host path's), replayed, applies
    the recorded alpha again, where the next step's is another."""
    torch.manual_seed(1)
    w, g = torch.randn(40), torch.randn(40)
    m, v = torch.zeros(40), torch.zeros(40)
    lists = ([w], [g], [m], [v], None)
    values = [adam_alpha(0.01, 0.9, 0.999, 1, torch.float32), 0.1, 0.001, 1e-7]
    twin = [t.clone() for t in (w, m, v)]
    with kt.recording() as launches:
        assert kt.apply("adam", lists, values)
    assert kt.apply("adam", ([twin[0]], [g], [twin[1]], [twin[2]], None), values)
    kt.replay(launches)  # step 2 as a replay: alpha of step 1
    assert kt.apply("adam", ([twin[0]], [g], [twin[1]], [twin[2]], None),
                    [adam_alpha(0.01, 0.9, 0.999, 2, torch.float32), 0.1, 0.001, 1e-7])
    assert torch.equal(m, twin[1]) and not torch.equal(w, twin[0])


def _refusal(cls, *args, **kwargs):
    w = torch.nn.Parameter(torch.ones(3, dtype=kwargs.pop("dtype", torch.float32)))
    return capture.refusal(cls([w], *args, **kwargs))


def test_refusals_name_the_class_the_option_or_the_dtype():
    assert _refusal(slotopt.Adam, lr=0.1) is None
    assert _refusal(slotopt.Lamb).startswith("slotopt.Lamb: its step computes")
    assert _refusal(slotopt.Nadam) is None
    assert _refusal(slotopt.legacy.Nadam).startswith("slotopt.legacy.Nadam: its step computes")
    assert _refusal(slotopt.legacy.Ftrl).startswith("slotopt.legacy.Ftrl: its step computes")
    assert _refusal(slotopt.v1.AdamOptimizer) is None
    assert _refusal(slotopt.v1.FtrlOptimizer, 0.1).startswith("slotopt.v1.FtrlOptimizer: its step computes")
    assert "slotopt.legacy.Adam" in capture.CAPTURABLE and "slotopt.v1.AdagradDAOptimizer" not in capture.CAPTURABLE

    class Custom(slotopt.SGD):  # (a subclass is its own class: its step is not the face's)
        pass

    assert "Custom: its step computes" in _refusal(Custom)
    assert "`learning_rate=CosineDecayRestarts`" in _refusal(slotopt.Adam, learning_rate=S.CosineDecayRestarts(0.1, 9))

    class Halved(S.ExponentialDecay):  # (a subclass's arithmetic is its own: no device form)
        pass

    assert "`learning_rate=Halved`" in _refusal(slotopt.SGD, learning_rate=Halved(0.1, 10, 0.5))
    assert "`learning_rate=function`" in _refusal(slotopt.SGD, learning_rate=lambda: 0.1)
    assert "`learning_rate=CosineDecayRestarts`" in _refusal(slotopt.legacy.SGD, S.CosineDecayRestarts(0.1, 9))
    assert "`clipnorm=1.0`" in _refusal(slotopt.Adam, clipnorm=1.0)
    assert "`use_ema=True`" in _refusal(slotopt.SGD, use_ema=True)
    assert "`gradient_accumulation_steps=2`" in _refusal(slotopt.RMSprop, gradient_accumulation_steps=2)
    assert _refusal(slotopt.legacy.Adagrad, maximize=True) is None
    assert "torch.float16 variable" in _refusal(slotopt.Adagrad, dtype=torch.float16)
    assert _refusal(slotopt.Adagrad, dtype=torch.float64) is None
    assert _refusal(slotopt.Adam, clipnorm=0.0) is None  # (a disabled clipping is no clipping)


def test_a_cosine_schedule_without_a_device_cosf_is_refused_by_name_during_a_capture(monkeypatch):
    """CosineDecay's rate needs glibc's cosf on the device (kernels/triton/libm.py): where it is not there the
    host path runs the step (same bits) and a capture is refused naming it."""
    monkeypatch.setattr(step_scalars, "_libm", lambda: None)
    kwargs = {"learning_rate": S.CosineDecay(0.1, 4)}
    ws, opt = _model(slotopt.SGD, kwargs, True)
    ref_ws, ref = _model(slotopt.SGD, kwargs, False)
    for w, g in zip([*ws, *ref_ws], _gradients(ws, 0) * 2):
        w.grad = g
    opt.step()
    _host_step(ref)
    assert all(torch.equal(x, y) for x, y in zip(ws, ref_ws)) and not capture.device_step(opt)
    monkeypatch.setattr(capture, "capturing", lambda: True)
    with pytest.raises(capture.CaptureRefused, match=r"slotopt\.SGD .*float32 cos needs the C library's cosf"):
        opt.step()
    assert int(opt.iterations) == 1


def test_what_is_capturable_derives_from_the_registry_and_names_rules_with_a_triton_kernel():
    from slotopt.engine import registry
    from slotopt.kernels.native.scalars import DESCRIPTIONS

    classes = capture.capturable_classes()
    assert tuple(classes) == capture.CAPTURABLE
    assert set(classes.values()) == {r.cls for r in registry.registered() if getattr(r.cls, "_capture_rules", ())}
    assert {"slotopt.Nadam", "slotopt.legacy.Adamax", "slotopt.v1.AdamOptimizer"} <= set(classes)
    for name, cls in classes.items():  # (each names its rules: an unknown one would never launch)
        assert cls._capture_rules and all(rule in kt.RULES and rule in DESCRIPTIONS for rule in cls._capture_rules), name


def test_a_float64_step_needing_pow_is_refused_by_name_during_a_capture(monkeypatch):
    """float64 Adam: its alpha needs glibc's double pow on the device (kernels/triton/libm.py's, not there yet):
    outside a capture the host path runs it (same bits); a capture is refused, naming it, and nothing changes."""
    monkeypatch.setattr(step_scalars, "_libm", lambda: None)
    ws, opt = _model(slotopt.Adam, {"learning_rate": 0.01, **F64}, True)
    ref_ws, ref = _model(slotopt.Adam, {"learning_rate": 0.01, **F64}, False)
    for w, g in zip([*ws, *ref_ws], _gradients(ws, 0) * 2):
        w.grad = g
    opt.step()
    _host_step(ref)
    assert all(torch.equal(x, y) for x, y in zip(ws, ref_ws)) and not capture.device_step(opt)
    before = [w.detach().clone() for w in ws]
    monkeypatch.setattr(capture, "capturing", lambda: True)
    with pytest.raises(capture.CaptureRefused, match=r"slotopt\.Adam .*float64 pow needs the C library's pow as a "
                                                     r"device function"):
        opt.step()
    assert all(torch.equal(w, x) for w, x in zip(ws, before)) and int(opt.iterations) == 1


def test_a_capture_before_any_step_or_after_a_host_change_is_refused_and_changes_nothing(monkeypatch):
    ws, opt = _model(slotopt.Adam, {"learning_rate": 0.01}, True)
    for w, g in zip(ws, _gradients(ws, 0)):
        w.grad = g
    before = [w.detach().clone() for w in ws]
    monkeypatch.setattr(capture, "capturing", lambda: True)
    with pytest.raises(capture.CaptureRefused, match=r"slotopt\.Adam .*no capturable step ran before the capture"):
        opt.step()
    assert all(torch.equal(w, x) for w, x in zip(ws, before)) and int(opt.iterations) == 0
    monkeypatch.setattr(capture, "capturing", lambda: False)
    opt.step()  # a warm-up step
    opt.learning_rate = 0.02  # changed on the host: a captured step could not copy it to the device
    monkeypatch.setattr(capture, "capturing", lambda: True)
    before = [w.detach().clone() for w in ws]
    with pytest.raises(capture.CaptureRefused, match=r"slotopt\.Adam .*the constants of its per-step scalars "
                                                     r"changed on the host"):
        opt.step()
    assert all(torch.equal(w, x) for w, x in zip(ws, before)) and int(opt.iterations) == 1
    monkeypatch.setattr(capture, "capturing", lambda: False)
    ref_ws, ref = _model(slotopt.Adam, {"learning_rate": 0.01}, False)
    for w, g in zip(ref_ws, _gradients(ref_ws, 0)):
        w.grad = g
    ref.step()
    ref.learning_rate = 0.02
    opt.step()  # outside a capture the new rate is copied to the device: the host path's bits
    ref.step()
    assert all(torch.equal(x, y) for x, y in zip(ws, ref_ws))


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("n", [1, 7, 13, 1003])
def test_packet_pow_with_a_partial_packet_has_numerics_bits_on_the_device(n):
    """Ftrl's and Lamb's ``pow`` of a float32 tensor whose size is not whole packets: Eigen's packets and glibc's
    powf on the rest, all on the device (numerics computes it on the host: the reference)."""
    from slotopt import numerics
    from slotopt.kernels.triton import eigen_pow

    monkey = pytest.MonkeyPatch()
    monkey.setattr(eigen_pow, "_kernels", None)
    try:
        g = torch.Generator().manual_seed(n)
        x = torch.randn(n, generator=g) * 3
        x[: min(n, 6)] = torch.tensor([0.0, -0.0, float("inf"), -2.0, 1e-40, float("nan")])[: min(n, 6)]
        for exponent in (2.0, -0.5, 3.0, 0.5, -1.5, 0.0):
            base = x.abs() if exponent in (-0.5, 0.5, -1.5) else x
            assert eigen_pow.applies(base, exponent, False)
            out = eigen_pow.pow_packets(base, exponent)
            want = numerics.pow(base, exponent)  # (the CPU: Eigen's packets, the C library's powf on the tail)
            same = (out.view(torch.int32) == want.view(torch.int32)) | (out.isnan() & want.isnan())
            assert bool(same.all()), (n, exponent)
    finally:
        monkey.undo()


def test_the_step_scalar_kernels_compile_for_a_hopper_gpu_without_contraction(monkeypatch):
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    f32, t = torch.float32, R.step(torch.float32)
    program = R.program({0: R.adam_alpha(R.const(3e-4, f32), 0.9, 0.999, t), 1: R.floor(t / 3.0)})
    kernel = step_scalars._program_kernel(program)
    signature = {"count_ptr": "*i64", "in_ptr": "*fp64", "vec_ptr": "*fp32", "d_ptr": "*fp64", "e_ptr": "*i64",
                 "ld_ptr": "*fp64", "le_ptr": "*i64", "x_ptr": "*fp32", "st_ptr": "*fp64"}
    compiled = triton.compile(ASTSource(kernel, signature), target=GPUTarget("cuda", 90, 32),
                              options={"enable_fp_fusion": False})
    ptx = compiled.asm["ptx"]
    assert not re.search(r"\bfma\.", ptx) and "approx" not in ptx
    assert "div.rn.f32" in ptx and "sqrt.rn.f32" in ptx and "cvt.rn.f32.f64" in ptx


def test_capturable_is_the_default_during_a_capture_and_false_refuses_it(monkeypatch):
    ws, opt = _model(slotopt.SGD, {"learning_rate": 0.1}, None)  # (not given: torch's default)
    off_ws, off = _model(slotopt.SGD, {"learning_rate": 0.1}, False)
    for w, g in zip([*ws, *off_ws], _gradients(ws, 0) * 2):
        w.grad = g
    opt.step()
    off.step()  # uncaptured: the host path for both
    assert not opt.__dict__.get("_capturable_groups")
    monkeypatch.setattr(capture, "capturing", lambda: True)
    with pytest.raises(capture.CaptureRefused, match=r"slotopt\.SGD .*construct it with `capturable=True`"):
        opt.step()  # taken as capturable, but no capturable step made its device scalars
    with pytest.raises(capture.CaptureRefused, match=r"slotopt\.SGD .*constructed with `capturable=False`"):
        off.step()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_param_groups_of_their_own_rate_and_a_float64_group(dtype):
    """Each (rule, group) keeps its own device scalars (two rates: two vectors); float64 Adam, whose alpha needs
    float64 pow on the device (kernels/triton/libm.py), takes the host path outside a capture where that is not
    there: the same bits either way."""
    def run(capturable):
        torch.manual_seed(0)
        ws = [torch.nn.Parameter(torch.randn(9, dtype=dtype)), torch.nn.Parameter(torch.randn(17, dtype=dtype))]
        opt = slotopt.Adam([{"params": [ws[0]]}, {"params": [ws[1]], "lr": 0.05}], lr=0.01, capturable=capturable)
        for step in range(3):
            for w, g in zip(ws, _gradients(ws, step)):
                w.grad = g.to(dtype)
            opt.step()
        return ws, opt

    (a, opt), (b, _) = run(True), run(False)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    counts = sorted(int(c) for c in capture.device_step(opt).values())
    assert counts == ([3, 3] if dtype == torch.float32 or step_scalars._libm_pow() is not None else [])
