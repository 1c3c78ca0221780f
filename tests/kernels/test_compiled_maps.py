"""The compiled gradient maps (``kernels/native/gradient_maps.inc``, ``engine/compiled_maps.py``) against the
foreach path they replace (``engine/clipping.py``, ``numerics.sum``), bit for bit: the sums of squares in Eigen's
order over sizes that take every branch of the reduction (leftover elements, whole packets, four-packet blocks,
the tree of halves), the global sum, and whole steps of every face with every option, on the compiled path and
on the foreach one."""

import numpy as np
import pytest
import torch

import slotopt
from slotopt import numerics
from slotopt.engine import clipping
from slotopt.kernels import native
from slotopt.kernels.native import maps
from slotopt.numerics import eigen

pytestmark = pytest.mark.skipif(not native.dtypes(), reason="the compiled kernels are not built here")

SIZES = [1, 3, 7, 8, 9, 31, 32, 33, 63, 64, 100, 1000, 4095, 4096, 4097, 8191, 8192, 8193, 9000, 20001, 70000]


def _raw(t):
    return t.contiguous().view(-1).view({4: torch.int32, 8: torch.int64}[t.element_size()])


def _same(a, b):
    return len(a) == len(b) and all(x.dtype == y.dtype and x.shape == y.shape and torch.equal(_raw(x), _raw(y))
                                    for x, y in zip(a, b))


def _tensors(dtype, sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(sizes):
        t = torch.randn(n, generator=g, dtype=torch.float64) * 10.0 ** ((i % 7) - 3)
        out.append(t.to(dtype))
    return out


def _group(tensors):
    addresses = np.array([t.data_ptr() for t in tensors], dtype=np.uint64)
    offsets = np.concatenate([[0], np.cumsum([t.numel() for t in tensors])]).astype(np.int64)
    return addresses, offsets


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("flags", [0, 1, 2, 3])
def test_square_sums_are_numerics_sum_of_the_squares(dtype, flags):
    tensors = _tensors(dtype, SIZES)
    addresses, offsets = _group(tensors)
    divisor, c = 3.0, 0.05
    sums = maps.square_sums(addresses, offsets, dtype, lambda: tensors, flags, divisor, -c, c)
    for t, got in zip(tensors, sums):
        x = t / divisor if flags & 1 else t
        x = torch.clamp(x, -c, c) if flags & 2 else x
        want = numerics.sum(x * x)
        assert np.asarray(got).tobytes() == want.numpy().tobytes(), (t.numel(), got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_global_sum_is_eigens_full_sum(dtype):
    rng = np.random.default_rng(1)
    for n in SIZES:
        values = (rng.standard_normal(n) * 1e3).astype(dtype) ** 2
        assert maps.eigen_sum(values).tobytes() == eigen.full_sum(values).tobytes(), n


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_special_values_keep_the_foreach_bits(dtype):
    """inf, NaN, zeros, subnormals and huge values: every map gives the bits torch's ops give."""
    tensors = _tensors(dtype, [40, 17, 9000])
    info = torch.finfo(dtype)
    tensors[0][:6] = torch.tensor([0.0, -0.0, info.tiny / 4, -info.tiny / 3, info.max / 2, -info.max], dtype=dtype)
    tensors[1][3] = float("inf")
    for case in ("clean", "inf", "nan"):
        grads = [t.clone() for t in tensors]
        if case == "clean":
            grads[1][3] = 1.0
        if case == "nan":
            grads[2][100] = float("nan")
        addresses, offsets = _group(grads)
        def held(grads=grads):
            return grads

        for clip in (0.5, 1e30):
            expected = {
                "clipnorm": clipping.clip_by_norm(grads, clip),
                "global": clipping.clip_by_global_norm(grads, clip),
                "clipvalue": clipping.clip_by_value(grads, clip),
                "unscale": [g / clip for g in grads]}
            for name, want in expected.items():
                out = torch.empty(int(offsets[-1]), dtype=dtype)
                if name in ("clipnorm", "global"):
                    sums = maps.square_sums(addresses, offsets, dtype, held)
                    f = maps.DTYPES[dtype]
                    with np.errstate(all="ignore"):
                        if name == "clipnorm":
                            norms = np.where(sums > 0, np.sqrt(np.where(sums > 0, sums, f(1))), sums)
                            maps.gradient_map(addresses, offsets, dtype, held, out, 4, clip=clip,
                                              denominators=np.maximum(norms, f(clip)))
                        else:
                            norm = np.sqrt(maps.eigen_sum(sums))
                            scale = f(clip) * np.minimum(f(1) / norm, f(1.0 / clip)) + (norm - norm)
                            maps.gradient_map(addresses, offsets, dtype, held, out, 8, scale=float(scale))
                elif name == "clipvalue":
                    maps.gradient_map(addresses, offsets, dtype, held, out, 2, lo=-clip, hi=clip)
                else:
                    maps.gradient_map(addresses, offsets, dtype, held, out, 1, divisor=clip)
                got = list(out.split([g.numel() for g in grads]))
                assert _same(got, want), (case, clip, name)


# ------------------------------------------------------------------------------------ whole steps, every face
KERAS3 = {"clipnorm": {"clipnorm": 0.02}, "global_clipnorm": {"global_clipnorm": 0.03},
          "clipvalue": {"clipvalue": 0.01}, "loss_scale_factor": {"loss_scale_factor": 3.0},
          "loss_scale_factor+clipnorm": {"loss_scale_factor": 3.0, "clipnorm": 0.02},
          "loss_scale_factor+global_clipnorm": {"loss_scale_factor": 0.5, "global_clipnorm": 0.03},
          "use_ema": {"use_ema": True}, "weight_decay": {"weight_decay": 0.01},
          "gradient_accumulation_steps": {"gradient_accumulation_steps": 2}}
LEGACY = {"clipnorm": {"clipnorm": 0.02}, "global_clipnorm": {"global_clipnorm": 0.03},
          "clipvalue": {"clipvalue": 0.01}, "clipvalue+clipnorm": {"clipvalue": 0.01, "clipnorm": 0.015},
          "clipvalue+global_clipnorm": {"clipvalue": 0.01, "global_clipnorm": 0.02}}
FACES = {
    "keras3": (KERAS3, lambda kw: lambda p: slotopt.Adam(p, learning_rate=0.01, **kw)),
    "keras3-amsgrad": (KERAS3, lambda kw: lambda p: slotopt.Adam(p, learning_rate=0.01, amsgrad=True, **kw)),
    "keras3-sgd": (KERAS3, lambda kw: lambda p: slotopt.SGD(p, learning_rate=0.05, momentum=0.9, **kw)),
    "keras3-lso": ({k: v for k, v in KERAS3.items() if "loss_scale_factor" not in k}, lambda kw: lambda p:
                   slotopt.LossScaleOptimizer(slotopt.Adam(p, learning_rate=0.01, **kw), initial_scale=8.0)),
    "multi": ({k: v for k, v in KERAS3.items() if "loss_scale_factor" not in k}, lambda kw: lambda p:
              slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.Adam(learning_rate=0.01, **kw)), params=p)),
    "legacy": (LEGACY, lambda kw: lambda p: slotopt.legacy.Adam(p, learning_rate=0.01, **kw)),
    "legacy-rmsprop": (LEGACY, lambda kw: lambda p: slotopt.legacy.RMSprop(p, learning_rate=0.01, **kw)),
    "legacy-lso": (LEGACY, lambda kw: lambda p: slotopt.legacy.LossScaleOptimizer(
        slotopt.legacy.Adam(p, learning_rate=0.01, **kw), initial_scale=8.0)),
}
CASES = [pytest.param(face, name, id=f"{face}-{name}") for face, (options, _) in FACES.items() for name in options]


@pytest.fixture
def kernel_mode():
    previous = native.use("auto")
    yield native.use
    native.use(previous)


def _run(make, dtype, steps=4):
    g = torch.Generator().manual_seed(5)
    params = [torch.nn.Parameter(torch.randn(n, generator=g, dtype=dtype)) for n in (300, 9000, 5, 64, 8200)]
    opt = make(params)
    for step in range(steps):
        gen = torch.Generator().manual_seed(50 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=dtype) * (1 + step)
        opt.step()
    return [p.detach().clone() for p in params], opt


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("face,name", CASES)
def test_every_option_gives_the_same_bits_compiled_and_foreach(face, name, dtype, kernel_mode):
    options, maker = FACES[face]
    runs = []
    for mode in ("foreach", "native"):
        kernel_mode(mode)
        runs.append(_run(maker(options[name]), dtype)[0])
    assert _same(*runs)


@pytest.mark.parametrize("face,name", [c for c in CASES if "clip" in c.id or "loss_scale" in c.id])
def test_the_map_runs_compiled_on_an_ordinary_step(face, name, kernel_mode):
    """The observable: a clipped or unscaled step either makes more compiled calls than the same step without the
    option (its map passes), or as many, its update rules mapping the gradients as they load them."""
    options, maker = FACES[face]
    kernel_mode("native")
    counts = []
    for kw in ({}, options[name]):
        _, opt = _run(maker(kw), torch.float32, steps=2)
        before, mapped_before = native.calls(), native.mapped_calls()
        gen = torch.Generator().manual_seed(9)
        for p in opt.param_groups[0]["params"]:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()
        counts.append((native.calls() - before, native.mapped_calls() - mapped_before))
    (plain, plain_mapped), (calls, mapped) = counts
    assert plain_mapped == 0 and (calls > plain or (calls >= plain and mapped > 0)), counts


# ------------------------------------------------- the map inside the update rules (no buffer of mapped gradients)
KERAS3_RULES = {
    "adam": lambda p, kw: slotopt.Adam(p, learning_rate=0.01, **kw),
    "adam-amsgrad": lambda p, kw: slotopt.Adam(p, learning_rate=0.01, amsgrad=True, **kw),
    "adamw": lambda p, kw: slotopt.AdamW(p, learning_rate=0.01, weight_decay=0.05, **kw),
    "adamax": lambda p, kw: slotopt.Adamax(p, learning_rate=0.01, **kw),
    "nadam": lambda p, kw: slotopt.Nadam(p, learning_rate=0.01, **kw),
    "sgd": lambda p, kw: slotopt.SGD(p, learning_rate=0.05, **kw),
    "sgd-nesterov-decay": lambda p, kw: slotopt.SGD(p, learning_rate=0.05, momentum=0.9, nesterov=True,
                                                    weight_decay=0.01, **kw),
    "rmsprop-centered": lambda p, kw: slotopt.RMSprop(p, learning_rate=0.01, momentum=0.5, centered=True, **kw),
    "adagrad": lambda p, kw: slotopt.Adagrad(p, learning_rate=0.05, **kw),
    "adadelta": lambda p, kw: slotopt.Adadelta(p, learning_rate=0.5, **kw),
    "lion": lambda p, kw: slotopt.Lion(p, learning_rate=0.01, **kw),
}
LEGACY_RULES = {
    "adam": lambda p, kw: slotopt.legacy.Adam(p, learning_rate=0.01, **kw),
    "adam-amsgrad": lambda p, kw: slotopt.legacy.Adam(p, learning_rate=0.01, amsgrad=True, **kw),
    "adamax": lambda p, kw: slotopt.legacy.Adamax(p, learning_rate=0.01, **kw),
    "nadam": lambda p, kw: slotopt.legacy.Nadam(p, learning_rate=0.01, **kw),
    "sgd-momentum": lambda p, kw: slotopt.legacy.SGD(p, learning_rate=0.05, momentum=0.9, **kw),
    "rmsprop-momentum": lambda p, kw: slotopt.legacy.RMSprop(p, learning_rate=0.01, momentum=0.5, **kw),
    "adagrad": lambda p, kw: slotopt.legacy.Adagrad(p, learning_rate=0.05, **kw),
    "adadelta": lambda p, kw: slotopt.legacy.Adadelta(p, learning_rate=0.5, **kw),
    "ftrl": lambda p, kw: slotopt.legacy.Ftrl(p, learning_rate=0.05, **kw),
}
KERAS3_MAPS = {"clipnorm": {"clipnorm": 0.02}, "global_clipnorm": {"global_clipnorm": 0.03},
               "clipvalue": {"clipvalue": 0.01}, "loss_scale_factor": {"loss_scale_factor": 3.0},
               "lsf+clipvalue": {"loss_scale_factor": 3.0, "clipvalue": 0.004},
               "lsf+clipnorm": {"loss_scale_factor": 3.0, "clipnorm": 0.02},
               "lsf+global_clipnorm-maximize": {"loss_scale_factor": 0.5, "global_clipnorm": 0.03, "maximize": True}}
LEGACY_MAPS = {"clipnorm": {"clipnorm": 0.02}, "global_clipnorm": {"global_clipnorm": 0.03},
               "clipvalue-maximize": {"clipvalue": 0.01, "maximize": True},
               "clipvalue+clipnorm": {"clipvalue": 0.01, "clipnorm": 0.015},
               "clipvalue+global_clipnorm": {"clipvalue": 0.01, "global_clipnorm": 0.02}}
FUSED = ([pytest.param(KERAS3_RULES[r], KERAS3_MAPS[m], id=f"keras3-{r}-{m}") for r in KERAS3_RULES for m in KERAS3_MAPS]
         + [pytest.param(LEGACY_RULES[r], LEGACY_MAPS[m], id=f"legacy-{r}-{m}") for r in LEGACY_RULES
            for m in LEGACY_MAPS])


def _fused_run(make, options, dtype, steps=3):
    g = torch.Generator().manual_seed(7)
    params = [torch.nn.Parameter(torch.randn(n, generator=g, dtype=dtype)) for n in (300, 9000, 5, 64, 40000)]
    opt = make(params, options)
    for step in range(steps):
        gen = torch.Generator().manual_seed(70 + step)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen, dtype=dtype) * 10.0 ** (step - 1)
        opt.step()
    return [p.detach().clone() for p in params] + [s.clone() for s in _slots(opt)], opt


def _slots(opt):
    variables = opt.variables() if callable(opt.variables) else opt.variables  # (legacy: a method)
    return [torch.as_tensor(v).detach() for v in variables]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("make,options", FUSED)
def test_the_update_rules_map_the_gradients_with_the_foreach_bits(make, options, dtype, kernel_mode):
    """Every rule with a mapped form, every map (unscale, clipvalue, clip by norm per tensor and global, and their
    combinations), several steps, maximize: the rules that map as they load (no buffer) give the foreach path's
    bits, variables and slots."""
    kernel_mode("foreach")
    want, _ = _fused_run(make, options, dtype)
    kernel_mode("native")
    before = native.mapped_calls()
    got, _ = _fused_run(make, options, dtype)
    assert native.mapped_calls() - before >= 2  # (the first step builds; the later ones take the plan)
    assert _same(got, want)


@pytest.mark.parametrize("name", ["clipnorm", "global_clipnorm", "clipvalue", "loss_scale_factor"])
def test_no_gradient_buffer_is_written_on_the_fused_path(name, kernel_mode):
    """The mapped gradients are never written: no map buffer is made with the step plan, no map pass runs (each
    compiled call of the step is an update rule, one per group, or the norms' sum), and the user's gradients keep
    their values and versions."""
    kernel_mode("native")
    _, opt = _fused_run(KERAS3_RULES["adam"], KERAS3_MAPS[name], torch.float32)
    params = opt.param_groups[0]["params"]
    gen = torch.Generator().manual_seed(3)
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen)
    kept = [p.grad.clone() for p in params]
    versions = [p.grad._version for p in params]
    calls, mapped = native.calls(), native.mapped_calls()
    opt.step()
    assert native.mapped_calls() - mapped >= 1
    plan = opt.__dict__["_plan"]  # (engine/plan_cache.py: the step plan the step took)
    assert plan.memo.get(("gradient maps", "offsets")) is not None  # (the map ran on this plan)
    assert not [k for k in plan.memo if isinstance(k, tuple) and k[:2] == ("gradient maps", "buffer")]
    assert native.calls() - calls == native.mapped_calls() - mapped  # (no map pass: only the mapped update)
    assert _same([p.grad for p in params], kept) and [p.grad._version for p in params] == versions


def test_a_user_update_reads_the_gradients_mapped(kernel_mode):
    """A subclass that overrides the update gets the mapped gradients (the buffer path), the foreach bits."""

    class Halved(slotopt.Adam):
        def _update_group(self, params, grads, slots, learning_rate, **terms):
            super()._update_group(params, [g * 0.5 for g in grads], slots, learning_rate, **terms)

    make = lambda p, kw: Halved(p, learning_rate=0.01, **kw)  # noqa: E731
    kernel_mode("foreach")
    want, _ = _fused_run(make, {"clipnorm": 0.02}, torch.float32)
    kernel_mode("native")
    before = native.mapped_calls()
    got, _ = _fused_run(make, {"clipnorm": 0.02}, torch.float32)
    assert native.mapped_calls() == before and _same(got, want)


def test_the_options_benchmark_measures_every_option_of_a_face():
    """``slotopt bench --workload options`` (cli/bench_options.py): a row per option of the face, each against the
    face's plain step, and the torch rows against torch's fused Adam."""
    from slotopt.cli.bench_options import FACE_OPTIONS, format_options, measure_options

    rows = measure_options(("small",), steps=1, warmup=0, faces=["Keras 3 Adam"])
    options = [r["option"] for r in rows if r["face"] == "Keras 3 Adam"]
    assert options == ["plain", *FACE_OPTIONS["Keras 3 Adam"]]
    assert all(r["ms"] > 0 for r in rows) and [r["ratio"] for r in rows if r["option"] == "plain"] == [1.0]
    assert {r["option"] for r in rows if r["face"] == "torch"} == {"fused Adam",
                                                                   "clip_grad_norm_(foreach=True) + fused Adam"}
    table = format_options(rows)
    assert "| Keras 3 Adam | global_clipnorm=1.0 |" in table and "× plain" in table


def test_a_learning_rate_callable_keeps_the_buffer_path(kernel_mode):
    """User code between the map and the update (a learning-rate callable) could change a gradient under the map:
    the map is written first then (no mapped rule runs), the foreach bits."""
    make = lambda p, kw: slotopt.Adam(p, learning_rate=lambda: 0.01, **kw)  # noqa: E731
    kernel_mode("foreach")
    want, _ = _fused_run(make, {"global_clipnorm": 0.03}, torch.float32)
    kernel_mode("native")
    before = native.mapped_calls()
    got, _ = _fused_run(make, {"global_clipnorm": 0.03}, torch.float32)
    assert native.mapped_calls() == before and _same(got, want)
