"""Keras 3.15's newer members: Muon, ScheduleFreeAdamW, MultiOptimizer / OptimizerMap.

The recorded reference cases (``keras3/muon``, ``keras3/schedule_free_adamw``, ``keras3/multi_optimizer``) are
replayed here too. Beyond them, numerics are checked on float64 variables against numpy float64 formulas written
out below, with hyperparameters exactly representable in float32 (0.5, 0.75, 0.25, ...), so the constant rounding
rules cannot blur the comparison. Expected values from Keras's own tests are marked as such.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import slotopt
from slotopt.cli.reference import load_cases, replay
from slotopt.engine import registry

F64 = torch.float64
CASES = {c["id"]: c for c in load_cases()}


def make_variables(inits, dtype=F64, names=("kernel", "bias", "extra")):
    return [slotopt.Variable(torch.tensor(x, dtype=dtype), name=n) for x, n in zip(inits, names)]


def steps_for(shapes, steps=4, seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=s) for s in shapes] for _ in range(steps)]


def run(opt, variables, steps):
    for grads in steps:
        opt.apply_gradients([(torch.tensor(g, dtype=v.dtype), v) for g, v in zip(grads, variables)])
    return variables


def snapshot(*tensor_lists):
    return [t.detach().clone() for ts in tensor_lists for t in ts]


def assert_unchanged(before, *tensor_lists):
    after = [t for ts in tensor_lists for t in ts]
    assert len(before) == len(after)
    for b, a in zip(before, after):
        assert torch.equal(b, a)


@pytest.mark.parametrize("case_id", ["keras3/muon", "keras3/schedule_free_adamw", "keras3/multi_optimizer"])
def test_recorded_case_replays(case_id):
    result = replay(CASES[case_id])
    assert result.ok, result.failures
    if case_id != "keras3/muon":  # element-wise rules: bit for bit
        assert result.max_abs_error == 0.0


def test_muon_case_uses_the_blas_tolerance_and_is_well_inside_it():
    result = replay(CASES["keras3/muon"])
    assert result.tolerances["float32"] == (1e-4, 1e-5)
    assert result.max_abs_error < 1e-6


# ==================================================================================================== Muon
def newton_schulz_reference(x, steps, a, b, c):
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.T
    x = x / (np.sqrt(np.sum(x * x)) + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + (c * gram) @ gram) @ x
    return x.T if tall else x


def muon_reference(inits, steps, *, lr, momentum, nesterov, ns_steps, a, b, c, rms_rate, wd, adam_wd, ratio,
                   b1, b2, eps, adamw_names=("bias",), names=("kernel", "bias")):
    ws = [np.array(x, dtype=np.float64) for x in inits]
    ms = [np.zeros_like(w) for w in ws]
    vs = [np.zeros_like(w) for w in ws]
    for t, grads in enumerate(steps, start=1):
        for i, (name, g) in enumerate(zip(names, grads)):
            adamw = name in adamw_names
            decay = adam_wd if adamw else wd
            if decay is not None:
                ws[i] = ws[i] - ws[i] * decay * lr
            if adamw:
                alpha = (lr * ratio) * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
                ms[i] = ms[i] + (g - ms[i]) * (1 - b1)
                vs[i] = vs[i] + (g * g - vs[i]) * (1 - b2)
                ws[i] = ws[i] - (ms[i] * alpha) / (np.sqrt(vs[i]) + eps)
            else:
                ms[i] = ms[i] + (g + ms[i] * (momentum - 1))
                u = g + momentum * ms[i] if nesterov else ms[i]
                update = lr * newton_schulz_reference(u, ns_steps, a, b, c)
                if rms_rate is not None:  # Keras: ops.sqrt of an integer is a float32 square root
                    update = update * float(np.sqrt(np.float32(max(g.shape)))) * rms_rate
                ws[i] = ws[i] - update
    return ws, ms, vs


@pytest.mark.parametrize("nesterov,rms_rate,ns_steps", [(True, 0.25, 5), (False, None, 3), (True, 0.5, 0)])
def test_muon_matches_float64_reference_for_every_argument(nesterov, rms_rate, ns_steps):
    kwargs = dict(lr=0.25, momentum=0.75, nesterov=nesterov, ns_steps=ns_steps, a=3.5, b=-4.75, c=2.0,
                  rms_rate=rms_rate, wd=0.125, adam_wd=0.0625, ratio=0.5, b1=0.5, b2=0.75, eps=0.125)
    shapes = [(3, 2), (2,)]
    inits = [np.random.default_rng(0).normal(size=s) for s in shapes]
    steps = steps_for(shapes)
    opt = slotopt.Muon(learning_rate=0.25, momentum=0.75, nesterov=nesterov, ns_steps=ns_steps, muon_a=3.5,
                       muon_b=-4.75, muon_c=2.0, rms_rate=rms_rate, weight_decay=0.125, adam_weight_decay=0.0625,
                       adam_lr_ratio=0.5, adam_beta_1=0.5, adam_beta_2=0.75, epsilon=0.125)
    variables = run(opt, make_variables(inits), steps)
    ws, ms, vs = muon_reference(inits, steps, **kwargs)
    for var, w in zip(variables, ws):
        np.testing.assert_allclose(var.detach().numpy(), w, rtol=1e-10, atol=1e-12)
    paths = {v.path: v for v in opt.variables}
    np.testing.assert_allclose(paths["muon/kernel_momentum"].numpy(), ms[0], rtol=1e-12)
    np.testing.assert_allclose(paths["muon/bias_momentum"].numpy(), ms[1], rtol=1e-12)
    np.testing.assert_allclose(paths["muon/bias_velocity"].numpy(), vs[1], rtol=1e-12)
    assert "muon/kernel_velocity" not in paths


def test_muon_newton_schulz_matches_keras_test_values():
    # keras/src/optimizers/muon_test.py::test_Newton_Schulz (rtol/atol 1e-3 there).
    from slotopt.kernels.muon import newton_schulz5

    x = torch.tensor([[0.2499, 0.9105], [0.2655, 0.8824]])
    out = newton_schulz5(x, steps=5, a=3.4445, b=-4.7750, c=2.0315, norm_epsilon=1e-7)
    np.testing.assert_allclose(out.numpy(), [[-0.4422, 0.6457], [0.7285, 0.2968]], rtol=1e-3, atol=1e-3)


def test_muon_adamw_path_is_the_adam_kernel_bit_for_bit():
    for dtype in (torch.float32, F64):
        a = slotopt.Variable(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=dtype), name="bias")
        b = slotopt.Variable(torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=dtype), name="bias")
        muon = slotopt.Muon(learning_rate=0.3, adam_beta_1=0.8, adam_beta_2=0.95, epsilon=1e-6,
                            adam_weight_decay=None, weight_decay=None)
        adam = slotopt.Adam(learning_rate=0.3, beta_1=0.8, beta_2=0.95, epsilon=1e-6)
        for g in ([1.0, 6.0, 7.0, 2.0], [-0.5, 0.25, 3.0, -1.0], [0.1, 0.2, 0.3, 0.4]):
            muon.apply_gradients([(torch.tensor(g, dtype=dtype), a)])
            adam.apply_gradients([(torch.tensor(g, dtype=dtype), b)])
        assert torch.equal(a, b)


def test_muon_adamw_single_step_matches_keras_test():
    # keras/src/optimizers/muon_test.py::test_adamw_single_step: lr 0.5 moves every element by 0.5.
    var = slotopt.Variable(torch.tensor([1.0, 2.0, 3.0, 4.0]), name="test_vars")
    opt = slotopt.Muon(learning_rate=0.5, adam_weight_decay=None)
    opt.apply_gradients([(torch.tensor([1.0, 6.0, 7.0, 2.0]), var)])
    np.testing.assert_allclose(var.numpy(), [0.5, 1.5, 2.5, 3.5], rtol=1e-4, atol=1e-4)


def test_muon_single_step_matches_keras_test():
    # keras/src/optimizers/muon_test.py::test_muon_single_step (rtol/atol 1e-2 there).
    var = slotopt.Variable(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), name="dense_kernel")
    opt = slotopt.Muon(learning_rate=0.5, weight_decay=0)
    opt.apply_gradients([(torch.tensor([[1.0, 6.0], [7.0, 2.0]]), var)])
    np.testing.assert_allclose(var.numpy(), [[0.988775, 1.887053], [2.873428, 3.97035]], rtol=1e-2, atol=1e-2)


def test_muon_path_choice_follows_rank_embeddings_and_exclude_layers():
    shapes = {"dense/kernel": (2, 2), "token_embedding/embeddings": (4, 2), "output_dense/kernel": (2, 3),
              "bias": (2,), "conv/kernel": (2, 2, 2)}
    variables = [slotopt.Variable(torch.ones(s), name=n) for n, s in shapes.items()]
    opt = slotopt.Muon(exclude_layers=["output_.*"])
    opt.build(variables)
    with_velocity = {v.path[len("muon/"):-len("_velocity")] for v in opt.variables if v.path.endswith("_velocity")}
    assert with_velocity == {"token_embedding_embeddings", "output_dense_kernel", "bias", "conv_kernel"}
    opt2 = slotopt.Muon(exclude_embeddings=False)
    opt2.build(variables)
    assert not any("embedding" in v.path and v.path.endswith("_velocity") for v in opt2.variables)
    # a plain Parameter's path is the name it was registered under
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Embedding(3, 2))
    opt3 = slotopt.Muon(exclude_layers=[r"0\.weight"], exclude_embeddings=False, params=module)
    assert sorted(p.path for p in opt3.variables if p.path.endswith("velocity")) == [
        "muon/0.bias_velocity", "muon/0.weight_velocity"]


def test_muon_weight_decay_uses_each_path_its_own_rate_and_the_full_learning_rate():
    # keras/src/optimizers/muon_test.py::test_muon_weight_decay / test_adamw_weight_decay, with zero gradients
    matrix = slotopt.Variable(torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=F64), name="kernel")
    scalar = slotopt.Variable(torch.tensor(2.0, dtype=F64), name="scale")
    opt = slotopt.Muon(learning_rate=0.5, weight_decay=0.25, adam_weight_decay=0.125, adam_lr_ratio=0.5)
    opt.apply_gradients([(torch.zeros(2, 2, dtype=F64), matrix), (torch.zeros((), dtype=F64), scalar)])
    np.testing.assert_array_equal(matrix.numpy(), np.array([[1.0, 2.0], [3.0, 4.0]]) * (1 - 0.25 * 0.5))
    assert float(scalar.detach()) == 2.0 * (1 - 0.125 * 0.5)
    kept = slotopt.Variable(torch.ones(2, 2), name="kernel")
    none = slotopt.Muon(weight_decay=None, adam_weight_decay=None)
    none.apply_gradients([(torch.zeros(2, 2), kept)])
    assert torch.equal(kept, torch.ones(2, 2))
    excluded = slotopt.Variable(torch.ones(2, 2), name="kernel")
    ex = slotopt.Muon(weight_decay=0.5)
    ex.exclude_from_weight_decay(var_names=["kern"])
    ex.apply_gradients([(torch.zeros(2, 2), excluded)])
    assert torch.equal(excluded, torch.ones(2, 2))


@pytest.mark.parametrize("kwargs,argument", [
    ({"momentum": 1.5}, "momentum"), ({"momentum": -0.1}, "momentum"), ({"ns_steps": -1}, "ns_steps"),
    ({"ns_steps": 2.5}, "ns_steps"), ({"adam_beta_1": 1.5}, "adam_beta_1"), ({"epsilon": -1.0}, "epsilon"),
    ({"rms_rate": -0.2}, "rms_rate"), ({"adam_lr_ratio": "x"}, "adam_lr_ratio"),
    ({"adam_weight_decay": -1.0}, "adam_weight_decay"), ({"muon_a": float("nan")}, "muon_a"),
    ({"exclude_layers": "dense"}, "exclude_layers"), ({"exclude_layers": ["("]}, "exclude_layers"),
    ({"weight_decay": -1.0}, "weight_decay"), ({"bogus": 1}, "bogus"),
])
def test_muon_rejects_bad_arguments_by_name(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        slotopt.Muon(**kwargs)


def test_muon_bad_gradient_changes_nothing():
    kernel = slotopt.Variable(torch.ones(3, 2), name="kernel")
    bias = slotopt.Variable(torch.ones(2), name="bias")
    opt = slotopt.Muon()
    opt.apply_gradients([(torch.ones(3, 2), kernel), (torch.ones(2), bias)])
    before = snapshot([kernel, bias], opt.variables)
    with pytest.raises(ValueError):
        opt.apply_gradients([(torch.ones(3, 2), kernel), (torch.ones(3), bias)])
    assert_unchanged(before, [kernel, bias], opt.variables)


def test_muon_config_round_trip_and_keras_names():
    opt = slotopt.Muon(learning_rate=0.5, epsilon=1e-5, exclude_layers=["head"], rms_rate=None, ns_steps=4)
    config = opt.get_config()
    assert set(config) >= {"adam_beta_1", "adam_beta_2", "epsilon", "exclude_layers", "muon_a", "muon_b", "muon_c",
                           "adam_lr_ratio", "momentum", "ns_steps", "nesterov", "exclude_embeddings",
                           "adam_weight_decay", "rms_rate"}
    assert slotopt.Muon.from_config(config).get_config() == config
    serialized = slotopt.serialize(opt)
    assert (serialized["module"], serialized["class_name"]) == ("keras.optimizers", "Muon")
    assert slotopt.deserialize(serialized).get_config() == config
    assert type(slotopt.get("muon")) is slotopt.Muon
    assert slotopt.get("muon").get_config()["weight_decay"] == 0.004  # Keras 3.15 defaults
    assert slotopt.Muon().name == "muon"


# ==================================================================================================== ScheduleFreeAdamW
def schedule_free_reference(inits, steps, *, lr, b1, b2, eps, warmup, wd=None):
    ys = [np.array(x, dtype=np.float64) for x in inits]
    zs = [y.copy() for y in ys]
    vs = [np.zeros_like(y) for y in ys]
    for t, grads in enumerate(steps, start=1):
        rate = lr * min(t / warmup, 1.0) if warmup else lr
        for i, g in enumerate(grads):
            if wd is not None:  # decoupled decay of y, before the step
                ys[i] = ys[i] - ys[i] * wd * lr
            vs[i] = vs[i] + (g * g - vs[i]) * (1 - b2)
            zs[i] = zs[i] - (rate * g) / (np.sqrt(vs[i] / (1 - b2 ** t)) + eps)
            x = (ys[i] - (1 - b1) * zs[i]) / b1  # Keras 3.15 recovers x with the updated z (see the kernel)
            x = (1 - 1 / t) * x + (1 / t) * zs[i]
            ys[i] = (1 - b1) * zs[i] + b1 * x
    return ys, zs, vs


@pytest.mark.parametrize("warmup", [0, 3])
def test_schedule_free_matches_float64_reference_for_every_argument(warmup):
    shapes = [(3, 2), (2,)]
    inits = [np.random.default_rng(0).normal(size=s) for s in shapes]
    steps = steps_for(shapes, steps=5)
    opt = slotopt.ScheduleFreeAdamW(learning_rate=0.25, beta_1=0.75, beta_2=0.5, epsilon=0.125,
                                    warmup_steps=warmup)
    variables = run(opt, make_variables(inits), steps)
    ys, zs, vs = schedule_free_reference(inits, steps, lr=0.25, b1=0.75, b2=0.5, eps=0.125, warmup=warmup)
    paths = {v.path: v for v in opt.variables}
    for var, y, z, v in zip(variables, ys, zs, vs):
        np.testing.assert_allclose(var.detach().numpy(), y, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(paths[f"{opt.name}/{var.name}_momentum"].numpy(), z, rtol=1e-12)
        np.testing.assert_allclose(paths[f"{opt.name}/{var.name}_velocity"].numpy(), v, rtol=1e-12)


def test_schedule_free_train_eval_switch():
    var = slotopt.Variable(torch.tensor([1.0, 2.0, 3.0], dtype=F64), name="w")
    opt = slotopt.ScheduleFreeAdamW(learning_rate=0.1, beta_1=0.75)
    opt.swap_to_eval()  # before the build: nothing to do
    assert opt.is_training_mode and torch.equal(var, torch.tensor([1.0, 2.0, 3.0], dtype=F64))
    for _ in range(5):
        opt.apply_gradients([(torch.tensor([0.1, 0.2, 0.3], dtype=F64), var)])
    y = var.detach().clone()
    z = {v.path: v for v in opt.variables}[f"{opt.name}/w_momentum"].detach().clone()
    opt.swap_to_eval()
    assert not opt.is_training_mode
    np.testing.assert_allclose(var.numpy(), ((y - 0.25 * z) / 0.75).numpy(), rtol=1e-15)
    x = var.detach().clone()
    opt.eval()  # already in eval mode: unchanged
    assert torch.equal(var, x)
    assert not torch.allclose(x, y)
    opt.train()
    assert opt.is_training_mode
    np.testing.assert_allclose(var.numpy(), y.numpy(), rtol=1e-14)
    opt.swap_to_train()
    np.testing.assert_allclose(var.numpy(), y.numpy(), rtol=1e-14)


def test_schedule_free_warmup_scales_the_first_step():
    # keras/src/optimizers/schedule_free_adamw_test.py::test_warmup, exactly: step 1 moves by lr * t / warmup.
    plain = slotopt.Variable(torch.tensor([1.0, 2.0, 3.0], dtype=F64), name="w")
    warm = slotopt.Variable(torch.tensor([1.0, 2.0, 3.0], dtype=F64), name="w")
    slotopt.ScheduleFreeAdamW(learning_rate=0.5).apply_gradients([(torch.ones(3, dtype=F64), plain)])
    slotopt.ScheduleFreeAdamW(learning_rate=0.5, warmup_steps=10).apply_gradients([(torch.ones(3, dtype=F64), warm)])
    start = np.array([1.0, 2.0, 3.0])
    np.testing.assert_allclose(start - warm.numpy(), (start - plain.numpy()) * 0.1, rtol=1e-12)


@pytest.mark.parametrize("cls", [slotopt.ScheduleFreeAdamW, slotopt.Muon])
def test_sparse_gradient_with_unique_rows_moves_like_its_dense_equivalent(cls):
    sparse_var, dense_var = (slotopt.Variable(torch.ones(4, 3), name="table") for _ in range(2))
    sparse_opt, dense_opt = cls(), cls()
    for row, values in ((2, [1.0, 2.0, 3.0]), (0, [-0.5, 0.25, 1.0]), (2, [0.5, 0.5, -2.0])):
        dense = torch.zeros(4, 3)
        dense[row] = torch.tensor(values)
        sparse_opt.apply_gradients([(slotopt.IndexedSlices(torch.tensor([values]), torch.tensor([row]), (4, 3)),
                                     sparse_var)])
        dense_opt.apply_gradients([(dense, dense_var)])
    assert torch.equal(sparse_var, dense_var)
    assert not torch.equal(sparse_var, torch.ones(4, 3))


@pytest.mark.parametrize("cls", [slotopt.ScheduleFreeAdamW, slotopt.Muon])
@pytest.mark.parametrize("clip,clipped", [({"clipnorm": 1.0}, [2 ** 0.5 / 2, 2 ** 0.5 / 2]),
                                          ({"clipvalue": 1.0}, [1.0, 1.0])])
def test_base_clipping_runs_before_the_update(cls, clip, clipped):
    # keras/src/optimizers/{muon,schedule_free_adamw}_test.py::test_clip_norm / test_clip_value
    var, ref = (slotopt.Variable(torch.tensor([1.0, 2.0], dtype=F64), name="w") for _ in range(2))
    cls(**clip).apply_gradients([(torch.tensor([100.0, 100.0], dtype=F64), var)])
    cls().apply_gradients([(torch.tensor(clipped, dtype=F64), ref)])
    assert torch.equal(var, ref)


@pytest.mark.parametrize("factory", [
    lambda: slotopt.Muon(learning_rate=0.01), lambda: slotopt.ScheduleFreeAdamW(learning_rate=0.01, warmup_steps=3),
    lambda: slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.ScheduleFreeAdamW(), {"kernel": slotopt.Muon()})),
], ids=["Muon", "ScheduleFreeAdamW", "MultiOptimizer"])
def test_checkpoint_resume_is_bit_exact(factory):
    shapes = [(3, 2), (2,)]
    inits = [np.random.default_rng(5).normal(size=s) for s in shapes]
    steps = steps_for(shapes, steps=4)
    straight = make_variables(inits, dtype=torch.float32)
    run(factory(), straight, steps)
    resumed = make_variables(inits, dtype=torch.float32)
    first = factory()
    run(first, resumed, steps[:2])
    state = first.state_dict()
    second = factory()
    second.load_state_dict(state)
    run(second, resumed, steps[2:])
    for a, b in zip(straight, resumed):
        assert torch.equal(a, b)


def test_schedule_free_weight_decay_and_exclusion():
    # keras/src/optimizers/schedule_free_adamw_test.py::test_weight_decay; the decay acts on y, before the step
    var1 = slotopt.Variable(torch.tensor(2.0, dtype=F64), name="keep")
    var2 = slotopt.Variable(torch.tensor(2.0, dtype=F64), name="exclude")
    opt = slotopt.ScheduleFreeAdamW(learning_rate=0.5, weight_decay=0.25, beta_1=0.75, beta_2=0.5, epsilon=0.125)
    opt.exclude_from_weight_decay(var_names=["exclude"])
    steps = [[np.zeros(())] * 2, [np.full((), 0.5)] * 2, [np.full((), -1.0)] * 2]
    run(opt, [var1, var2], steps)
    kept, = schedule_free_reference([2.0], [s[:1] for s in steps], lr=0.5, b1=0.75, b2=0.5, eps=0.125, warmup=0,
                                    wd=0.25)[0]
    plain, = schedule_free_reference([2.0], [s[:1] for s in steps], lr=0.5, b1=0.75, b2=0.5, eps=0.125, warmup=0)[0]
    np.testing.assert_allclose(float(var1.detach()), kept, rtol=1e-14)
    np.testing.assert_allclose(float(var2.detach()), plain, rtol=1e-14)
    assert kept != plain


@pytest.mark.parametrize("kwargs,argument", [
    ({"beta_1": 0.0}, "beta_1"), ({"beta_1": 1.5}, "beta_1"), ({"beta_2": -0.5}, "beta_2"),
    ({"epsilon": float("inf")}, "epsilon"), ({"warmup_steps": -1}, "warmup_steps"),
    ({"warmup_steps": 1.5}, "warmup_steps"), ({"learning_rate": "fast"}, "learning_rate"),
])
def test_schedule_free_rejects_bad_arguments_by_name(kwargs, argument):
    with pytest.raises(ValueError, match=argument):
        slotopt.ScheduleFreeAdamW(**kwargs)


def test_schedule_free_bad_gradient_changes_nothing():
    var = slotopt.Variable(torch.ones(3), name="w")
    opt = slotopt.ScheduleFreeAdamW()
    opt.apply_gradients([(torch.ones(3), var)])
    before = snapshot([var], opt.variables)
    with pytest.raises(ValueError):
        opt.apply_gradients([(torch.ones(4), var)])
    assert_unchanged(before, [var], opt.variables)


def test_schedule_free_config_round_trip_and_keras_names():
    # keras/src/optimizers/schedule_free_adamw_test.py::test_config
    opt = slotopt.ScheduleFreeAdamW(learning_rate=0.005, beta_1=0.95, beta_2=0.99, epsilon=1e-6, warmup_steps=100)
    config = opt.get_config()
    assert {k: config[k] for k in ("beta_1", "beta_2", "epsilon", "warmup_steps")} == {
        "beta_1": 0.95, "beta_2": 0.99, "epsilon": 1e-6, "warmup_steps": 100}
    assert slotopt.ScheduleFreeAdamW.from_config(config).get_config() == config
    serialized = slotopt.serialize(opt)
    assert (serialized["module"], serialized["class_name"]) == ("keras.optimizers", "ScheduleFreeAdamW")
    assert slotopt.deserialize(serialized).get_config() == config
    assert type(slotopt.get("schedulefreeadamw")) is slotopt.ScheduleFreeAdamW


# ==================================================================================================== OptimizerMap
def test_optimizer_map_exact_key_then_full_regex_then_default():
    # the example of keras/src/optimizers/multi_optimizer.py OptimizerMap.__getitem__
    adam, sgd, rmsprop = slotopt.Adam(name="adam"), slotopt.SGD(name="sgd"), slotopt.RMSprop(name="rmsprop")
    opt_map = slotopt.OptimizerMap(default_optimizer=rmsprop)
    opt_map["encoder/layer_0/dense"] = adam
    opt_map["encoder/.*"] = sgd
    opt_map["decoder"] = adam
    assert opt_map["decoder"] is adam
    assert opt_map["encoder/layer_0/dense"] is adam  # exact key first, although "encoder/.*" also matches
    assert opt_map["encoder/layer_0/attention/query"] is sgd
    assert opt_map["decoder/layer_0/dense"] is rmsprop  # "decoder" must match the whole path
    assert opt_map["xdecoder"] is rmsprop
    assert opt_map(slotopt.Variable(torch.ones(1), name="encoder/x")) is sgd
    assert len(opt_map) == 3 and list(opt_map) == ["encoder/layer_0/dense", "encoder/.*", "decoder"]
    del opt_map["decoder"]
    assert opt_map["decoder"] is rmsprop


def test_optimizer_map_ambiguity_and_entry_errors():
    opt_map = slotopt.OptimizerMap(slotopt.SGD(), {".*kernel.*": slotopt.Adam(), ".*dense.*": slotopt.Adam()})
    with pytest.raises(ValueError, match="Multiple optimizers assigned to variable dense/kernel"):
        opt_map["dense/kernel"]
    with pytest.raises(ValueError, match="already exists"):
        opt_map[".*kernel.*"] = slotopt.SGD()
    with pytest.raises(ValueError, match="key must be a string"):
        opt_map[3] = slotopt.SGD()
    with pytest.raises(ValueError, match="optimizer must be a Keras Optimizer"):
        opt_map["x"] = slotopt.legacy.SGD()
    with pytest.raises(ValueError, match="optimizer cannot be MultiOptimizer"):
        opt_map["y"] = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD()))
    with pytest.raises(ValueError, match="regular expression"):
        opt_map["(unclosed"] = slotopt.SGD()
    assert len(opt_map) == 2
    with pytest.raises(TypeError, match="default_optimizer"):
        slotopt.OptimizerMap("sgd")
    with pytest.raises(TypeError, match="optimizer_map must be a dictionary"):
        slotopt.OptimizerMap(slotopt.SGD(), [("a", slotopt.SGD())])
    with pytest.raises(ValueError, match="optimizer must be a Keras Optimizer"):
        slotopt.OptimizerMap(slotopt.SGD(), {"a": slotopt.SGD(), "b": "adam"})


def test_optimizer_map_config_round_trip():
    opt_map = slotopt.OptimizerMap(slotopt.SGD(learning_rate=0.5), {"enc.*": slotopt.Adam(learning_rate=0.25)})
    again = slotopt.OptimizerMap.from_config(opt_map.get_config())
    assert type(again.default_optimizer) is slotopt.SGD and float(again.default_optimizer.learning_rate) == 0.5
    assert type(again["encoder"]) is slotopt.Adam and float(again["encoder"].learning_rate) == 0.25
    assert slotopt.serialize(opt_map)["class_name"] == "OptimizerMap"
    assert type(slotopt.deserialize(slotopt.serialize(opt_map))) is slotopt.OptimizerMap
    with pytest.raises(ValueError, match="default_optimizer"):
        slotopt.OptimizerMap.from_config({})


# ==================================================================================================== MultiOptimizer
def two_variables(dtype=torch.float32):
    rng = np.random.default_rng(3)
    return make_variables([rng.normal(size=(3, 2)), rng.normal(size=(2,))], dtype=dtype)


def test_multi_optimizer_equals_its_sub_optimizers_run_alone():
    kernel, bias = two_variables()
    k2, b2 = (slotopt.Variable(v.detach().clone(), name=v.name) for v in (kernel, bias))
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(learning_rate=0.1, momentum=0.5),
                                                        {"kern.*": slotopt.Adam(learning_rate=0.01)}))
    sgd, adam = slotopt.SGD(learning_rate=0.1, momentum=0.5), slotopt.Adam(learning_rate=0.01)
    for grads in steps_for([(3, 2), (2,)]):
        gk, gb = (torch.tensor(g, dtype=torch.float32) for g in grads)
        multi.apply_gradients([(gk, kernel), (gb, bias)])
        adam.apply_gradients([(gk, k2)])
        sgd.apply_gradients([(gb, b2)])
    assert torch.equal(kernel, k2) and torch.equal(bias, b2)
    assert [type(o).__name__ for o in multi.optimizers] == ["Adam", "SGD"]  # Keras 3.15: the default last
    assert int(multi.iterations) == 4 and [int(o.iterations) for o in multi.optimizers] == [4, 4]
    own = [v.path for v in multi.variables[:2]]
    assert own == [f"{multi.name}/iteration", f"{multi.name}/learning_rate"]
    assert len(multi.variables) == 2 + len(multi.optimizers[0].variables) + len(multi.optimizers[1].variables)


#: Every registered Keras 3 optimizer with its defaults (from the registry: a new one is covered by registering
#: it), then configured variants and the wrapper.
KERAS3_OPTIMIZERS = [
    *(e.cls for e in registry.registered("keras3") if issubclass(e.cls, slotopt.Optimizer)
      and e.cls not in (slotopt.LossScaleOptimizer, slotopt.MultiOptimizer)),
    lambda: slotopt.SGD(learning_rate=0.1, momentum=0.9, nesterov=True), lambda: slotopt.Adam(amsgrad=True),
    lambda: slotopt.RMSprop(momentum=0.5, centered=True),
    lambda: slotopt.Adam(use_ema=True, clipnorm=0.5, weight_decay=0.1),
    lambda: slotopt.LossScaleOptimizer(slotopt.SGD(learning_rate=0.1)),
]


@pytest.mark.parametrize("factory", KERAS3_OPTIMIZERS, ids=lambda f: getattr(f, "__name__", "configured"))
def test_multi_optimizer_works_with_every_keras3_optimizer(factory):
    if isinstance(factory(), slotopt.LossScaleOptimizer):
        with pytest.raises(ValueError, match="optimizer cannot be LossScaleOptimizer"):
            slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(), {"kernel": factory()}))
        return
    kernel, bias = two_variables(F64)
    k2 = slotopt.Variable(kernel.detach().clone(), name="kernel")
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(), {"kernel": factory()}))
    alone = factory()
    for grads in steps_for([(3, 2), (2,)], steps=3):
        gk, gb = (torch.tensor(g, dtype=F64) for g in grads)
        multi.apply_gradients([(gk, kernel), (gb, bias)])
        alone.apply_gradients([(gk, k2)])
    assert torch.equal(kernel, k2)
    assert not torch.equal(kernel, torch.tensor(np.random.default_rng(3).normal(size=(3, 2))))


def test_multi_optimizer_callable_form_and_discovery_order():
    adam, sgd = slotopt.Adam(learning_rate=0.1), slotopt.SGD(learning_rate=0.5)

    def selector(variable):
        return adam if "kernel" in variable.path else sgd

    bias, kernel = slotopt.Variable(torch.ones(2), name="bias"), slotopt.Variable(torch.ones(2, 2), name="kernel")
    multi = slotopt.MultiOptimizer(selector)
    assert multi.optimizers == []
    multi.apply_gradients([(torch.ones(2), bias), (torch.ones(2, 2), kernel)])
    assert multi.optimizers == [sgd, adam]  # in the order the build meets them
    assert bias.tolist() == [0.5, 0.5]
    with pytest.raises(ValueError, match="is not an Optimizer instance"):
        slotopt.MultiOptimizer(lambda v: "adam").build([kernel])


def test_multi_optimizer_has_no_learning_rate():
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD()))
    with pytest.raises(AttributeError, match="Learning rate cannot be accessed"):
        _ = multi.learning_rate
    with pytest.raises(AttributeError, match="Learning rate cannot be set"):
        multi.learning_rate = 0.1
    assert not hasattr(multi, "lr")
    assert float(multi.optimizers[0].learning_rate) == pytest.approx(0.01)


def test_multi_optimizer_loss_scale_factor_overrides_the_sub_optimizers():
    sgd, adam = slotopt.SGD(learning_rate=1.0, loss_scale_factor=8.0), slotopt.Adam(loss_scale_factor=2.0)
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(sgd, {"k": adam}), loss_scale_factor=4.0)
    assert sgd.loss_scale_factor == adam.loss_scale_factor == 4.0
    assert multi.scale_loss(torch.tensor(2.0)).item() == 8.0
    var = slotopt.Variable(torch.tensor([10.0]), name="w")
    multi.apply_gradients([(torch.tensor([4.0]), var)])
    assert var.tolist() == [9.0]  # 10 - 1.0 * (4 / 4): unscaled once, by the sub-optimizer
    multi.loss_scale_factor = None
    assert sgd.loss_scale_factor is None and adam.loss_scale_factor is None
    assert slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(loss_scale_factor=3.0))).optimizers[
        0].loss_scale_factor is None
    with pytest.raises(ValueError, match="loss_scale_factor"):
        slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD()), loss_scale_factor=-1.0)


def test_multi_optimizer_sub_optimizer_steps_only_when_it_gets_gradients():
    kernel, bias = two_variables()
    adam = slotopt.Adam()
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(), {"kernel": adam}))
    multi.build([kernel, bias])
    multi.apply_gradients([(torch.ones(2), bias)])
    with pytest.warns(UserWarning, match="Gradients do not exist for variables"):
        multi.apply_gradients([(torch.ones(2), bias), (None, kernel)])
    assert int(multi.iterations) == 2 and int(multi.optimizers[-1].iterations) == 2 and int(adam.iterations) == 0


def test_multi_optimizer_errors_change_nothing():
    kernel, bias = two_variables()
    ambiguous = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(), {"k.*": slotopt.Adam(),
                                                                             ".*l": slotopt.Adam()}))
    with pytest.raises(ValueError, match="Multiple optimizers assigned to variable kernel"):
        ambiguous.apply_gradients([(torch.ones(3, 2), kernel), (torch.ones(2), bias)])
    assert not ambiguous.built and not any(o.built for o in ambiguous.optimizers)

    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(momentum=0.5), {"kernel": slotopt.Adam()}))
    multi.apply_gradients([(torch.ones(3, 2), kernel), (torch.ones(2), bias)])
    before = snapshot([kernel, bias], multi.variables)
    for bad in ([(torch.ones(3, 2), kernel), (torch.ones(3), bias)],               # wrong shape, second optimizer
                [(torch.ones(3, 2), kernel), (torch.ones(2, 2), bias)],            # wrong rank
                [(torch.ones(3, 2), kernel), (torch.ones(2), slotopt.Variable(torch.ones(2), name="new"))]):
        with pytest.raises(ValueError):
            multi.apply_gradients(bad)
        assert_unchanged(before, [kernel, bias], multi.variables)
    with pytest.raises(TypeError, match="optimizer_map"):
        slotopt.MultiOptimizer("adam")
    with pytest.raises(TypeError, match="weight_decay"):  # Keras's signature: the sub-optimizers hold these
        slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD()), weight_decay=0.1)


def test_multi_optimizer_weights_state_dict_and_finalize():
    kernel, bias = two_variables()
    make = lambda: slotopt.MultiOptimizer(slotopt.OptimizerMap(  # noqa: E731
        slotopt.SGD(momentum=0.5), {"kernel": slotopt.Adam(use_ema=True)}))
    multi = make()
    run(multi, [kernel, bias], steps_for([(3, 2), (2,)], steps=2))
    state = multi.state_dict()
    other = make()
    other.load_state_dict(state)  # kept until the build
    other.build([kernel, bias])
    for a, b in zip(multi.variables, other.variables):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="expecting"):
        other.set_weights(multi.get_weights()[:-1])
    with pytest.raises(ValueError, match="not compatible"):
        other.set_weights([np.zeros(5) if i == 4 else w for i, w in enumerate(multi.get_weights())])
    for a, b in zip(multi.variables, other.variables):
        assert torch.equal(a, b)
    average = multi.optimizers[0]._model_variables_moving_average[0].detach().clone()
    multi.finalize_variable_values([kernel, bias])
    assert torch.equal(kernel, average)


def test_multi_optimizer_stateless_apply_changes_nothing():
    kernel, bias = two_variables()
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(learning_rate=0.5), {"kernel": slotopt.Adam()}))
    multi.build([kernel, bias])
    before = snapshot([kernel, bias], multi.variables)
    new_vars, new_opt = multi.stateless_apply(multi.variables, [torch.ones(3, 2), torch.ones(2)], [kernel, bias])
    assert_unchanged(before, [kernel, bias], multi.variables)
    np.testing.assert_allclose(new_vars[1].numpy(), bias.detach().numpy() - 0.5)
    assert int(new_opt[0]) == 1


def selector_for_config(variable):
    return slotopt.Adam() if "kernel" in variable.path else slotopt.SGD()


def test_multi_optimizer_config_round_trip():
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(slotopt.SGD(learning_rate=0.5),
                                                        {"enc.*": slotopt.Adam(learning_rate=0.25)}),
                                   loss_scale_factor=2.0, name="multi")
    serialized = slotopt.serialize(multi)
    assert (serialized["module"], serialized["class_name"]) == ("keras.optimizers", "MultiOptimizer")
    assert set(serialized["config"]) == {"optimizer_map", "loss_scale_factor", "name"}
    assert serialized["config"]["optimizer_map"]["class_name"] == "OptimizerMap"
    again = slotopt.deserialize(serialized)
    assert type(again) is slotopt.MultiOptimizer and again.name == "multi" and again.loss_scale_factor == 2.0
    assert [type(o).__name__ for o in again.optimizers] == ["Adam", "SGD"]
    assert [o.loss_scale_factor for o in again.optimizers] == [2.0, 2.0]
    assert slotopt.serialize(again) == serialized
    assert type(slotopt.get(serialized)) is slotopt.MultiOptimizer

    function_config = slotopt.serialize(slotopt.MultiOptimizer(selector_for_config))
    with pytest.raises(ValueError, match="never imported or called.*custom_objects"):
        slotopt.deserialize(function_config)  # a routing function named in a config is never imported
    by_function = slotopt.deserialize(function_config, custom_objects={"selector_for_config": selector_for_config})
    by_function.build([slotopt.Variable(torch.ones(2, 2), name="kernel")])
    assert [type(o).__name__ for o in by_function.optimizers] == ["Adam"]
    lambda_config = slotopt.serialize(slotopt.MultiOptimizer(lambda v: slotopt.SGD()))
    with pytest.raises(ValueError, match="custom_objects"):
        slotopt.deserialize(lambda_config)
    chosen = slotopt.deserialize(lambda_config, custom_objects={"<lambda>": selector_for_config})
    assert chosen._optimizer_map is selector_for_config


def test_multi_optimizer_on_a_torch_module_with_step():
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    torch.manual_seed(0)
    adam, sgd = slotopt.Adam(learning_rate=0.01), slotopt.SGD(learning_rate=0.1)
    multi = slotopt.MultiOptimizer(slotopt.OptimizerMap(sgd, {r"0\..*": adam}), params=model)
    before = [p.detach().clone() for p in model.parameters()]
    model(torch.ones(4, 3)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    multi.step()
    assert int(adam.iterations) == 1 and int(sgd.iterations) == 1
    np.testing.assert_allclose(model[1].bias.detach().numpy(), (before[3] - 0.1 * grads[3]).numpy(), rtol=1e-6)
    assert [v.path for v in adam.variables][2:] == [f"{adam.name}/0.weight_momentum", f"{adam.name}/0.weight_velocity",
                                                    f"{adam.name}/0.bias_momentum", f"{adam.name}/0.bias_velocity"]
    multi.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_composite_and_multi_share_the_routing_engine():
    import slotopt.keras3.multi_optimizer as multi_optimizer
    import slotopt.tfrs.composite as composite
    from slotopt.engine import routing

    assert composite.dispatch is routing.dispatch is multi_optimizer.dispatch
    assert composite.group_by_owner is routing.group_by_owner is multi_optimizer.group_by_owner
