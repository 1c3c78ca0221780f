"""Every slotopt optimizer is a ``torch.optim.Optimizer`` (issue 9): protocol, schedulers, AMP, checkpoints."""

import io

import pytest
import torch

import slotopt

F64 = torch.float64


def model(seed=0, dtype=torch.float32):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1)).to(dtype)


def batch(step, dtype=torch.float32):
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, 4, generator=g, dtype=dtype), torch.randn(8, 1, generator=g, dtype=dtype)


# One factory per generation: (name, make(params) -> optimizer). Every one takes params= by keyword.
FACTORIES = {
    "keras3-adam": lambda p: slotopt.Adam(learning_rate=0.01, params=p),
    "keras3-sgd": lambda p: slotopt.SGD(learning_rate=0.1, momentum=0.9, params=p),
    "keras3-nadam-ema": lambda p: slotopt.Nadam(learning_rate=0.01, use_ema=True, params=p),
    "keras3-loss-scale": lambda p: slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.01), params=p),
    "legacy-adam": lambda p: slotopt.legacy.Adam(learning_rate=0.01, params=p),
    "legacy-rmsprop": lambda p: slotopt.legacy.RMSprop(learning_rate=0.01, momentum=0.5, params=p),
    "legacy-loss-scale": lambda p: _legacy_lso(p),
    "v1-adam": lambda p: slotopt.v1.AdamOptimizer(0.01, params=p),
    "v1-momentum": lambda p: slotopt.v1.MomentumOptimizer(0.1, 0.9, params=p),
    "composite": lambda p: slotopt.CompositeOptimizer(
        [(slotopt.Adagrad(learning_rate=0.1), ["0.*"]), (slotopt.legacy.Adam(learning_rate=0.01), ["2.*"])],
        params=p),
}


def _legacy_lso(p):
    opt = slotopt.legacy.LossScaleOptimizer(slotopt.legacy.SGD(learning_rate=0.1, momentum=0.9))
    opt.build(p)
    return opt


def train(opt, net, steps, start=0, scheduler=None):
    for step in range(start, start + steps):
        x, y = batch(step, next(net.parameters()).dtype)
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
        if scheduler is not None:
            scheduler.step()


def snapshot(net, opt):
    return [p.detach().clone() for p in net.parameters()], {
        i: {k: v.detach().clone() for k, v in entry.items()} for i, entry in enumerate(opt.state.values())}


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_every_generation_is_a_torch_optimizer_with_groups_and_state(kind):
    net = model()
    opt = FACTORIES[kind](net)
    assert isinstance(opt, torch.optim.Optimizer)
    params = [p for g in opt.param_groups for p in g["params"]]
    assert {id(p) for p in params} == {id(p) for p in net.parameters()}
    train(opt, net, 2)
    assert set(opt.state) and all(isinstance(v, dict) for v in opt.state.values())
    loss = opt.step(lambda: torch.tensor(3.0))
    assert float(loss) == 3.0


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_torch_format_checkpoint_resumes_bit_for_bit(kind):
    net_a, net_b = model(), model()
    opt_a = FACTORIES[kind](net_a)
    train(opt_a, net_a, 3)
    buffer = io.BytesIO()
    torch.save({"model": net_a.state_dict(), "optimizer": opt_a.state_dict()}, buffer)
    buffer.seek(0)
    checkpoint = torch.load(buffer, weights_only=True)
    assert set(checkpoint["optimizer"]) == {"state", "param_groups"}
    net_b.load_state_dict(checkpoint["model"])
    opt_b = FACTORIES[kind](net_b)
    opt_b.load_state_dict(checkpoint["optimizer"])
    train(opt_a, net_a, 3, start=3)
    train(opt_b, net_b, 3, start=3)
    for a, b in zip(net_a.parameters(), net_b.parameters()):
        assert torch.equal(a, b)
    assert [torch.equal(x, y) for x, y in zip(snapshot(net_a, opt_a)[1].values(), [])] == []
    for (ka, va), (kb, vb) in zip(sorted(opt_a.state_dict()["state"].items()),
                                  sorted(opt_b.state_dict()["state"].items())):
        assert ka == kb and set(va) == set(vb)
        assert all(torch.equal(va[n], vb[n]) for n in va)


def test_state_dict_is_a_snapshot():
    net = model()
    opt = slotopt.Adam(learning_rate=0.01, params=net)
    train(opt, net, 1)
    saved = opt.state_dict()
    before = {k: {n: t.clone() for n, t in v.items()} for k, v in saved["state"].items()}
    train(opt, net, 2, start=1)
    assert all(torch.equal(saved["state"][k][n], before[k][n]) for k in before for n in before[k])
    assert int(saved["state"][0]["step"]) == 1


def test_iterations_are_the_shared_step_of_every_parameter():
    net = model()
    opt = slotopt.legacy.Adam(learning_rate=0.01, params=net)
    train(opt, net, 4)
    steps = {int(v["step"]) for v in opt.state.values()}
    assert steps == {4} and int(opt.iterations) == 4


# ------------------------------------------------------------------------------------------- learning rates
@pytest.mark.parametrize("make", [
    lambda p: slotopt.SGD(learning_rate=0.1, momentum=0.9, params=p),
    lambda p: slotopt.legacy.SGD(learning_rate=0.1, momentum=0.9, params=p),
    lambda p: slotopt.v1.MomentumOptimizer(0.1, 0.9, params=p),
], ids=["keras3", "legacy", "v1"])
@pytest.mark.parametrize("scheduler", ["step", "onecycle", "cosine"])
def test_torch_scheduler_equals_setting_the_learning_rate_by_hand(make, scheduler):
    net_a, net_b = model(dtype=F64), model(dtype=F64)
    opt_a, opt_b = make(net_a), make(net_b)
    sched = {
        "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
        "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.2, total_steps=10),
        "cosine": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5),
    }[scheduler](opt_a)
    lrs = []  # OneCycleLR also cycles the group's "momentum": that must apply too
    for step in range(6):
        lrs.append((opt_a.param_groups[0]["lr"], opt_a.param_groups[0]["momentum"]))
        train(opt_a, net_a, 1, start=step, scheduler=sched)
    for step, (lr, momentum) in enumerate(lrs):
        if isinstance(opt_b, slotopt.v1.Optimizer):
            opt_b._hyper.update(learning_rate=lr, momentum=momentum)  # TF1 has no setters
        else:
            opt_b.learning_rate, opt_b.momentum = lr, momentum
        train(opt_b, net_b, 1, start=step)
    for a, b in zip(net_a.parameters(), net_b.parameters()):
        assert torch.equal(a, b)
    assert len(set(lrs)) > 1


def test_group_lr_write_rounds_like_the_learning_rate_setter():
    net = model()
    opt = slotopt.Adam(learning_rate=0.01, params=net)
    opt.param_groups[0]["lr"] = 0.1
    train(opt, net, 1)
    assert float(opt.learning_rate) == float(torch.tensor(0.1, dtype=torch.float32))
    opt.learning_rate = 0.05
    assert opt.param_groups[0]["lr"] == 0.05


def test_keras_schedule_owns_the_learning_rate():
    schedule = slotopt.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    net = model()
    opt = slotopt.SGD(learning_rate=schedule, params=net)
    train(opt, net, 2)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)  # the rate the last step used
    before = snapshot(net, opt)
    opt.param_groups[0]["lr"] = 0.3
    with pytest.raises(TypeError, match="driven by a Keras schedule"):
        train(opt, net, 1, start=2)
    after = snapshot(net, opt)
    assert all(torch.equal(a, b) for a, b in zip(before[0], after[0]))
    assert int(opt.iterations) == 2


def test_param_group_with_its_own_lr_and_beta_updates_like_a_separate_optimizer():
    w1 = torch.nn.Parameter(torch.ones(3, dtype=F64))
    w2 = torch.nn.Parameter(torch.ones(2, dtype=F64))
    opt = slotopt.Adam(learning_rate=0.01, params=[w1])
    opt.add_param_group({"params": [w2], "lr": 0.1, "beta_1": 0.5})
    r1 = torch.nn.Parameter(torch.ones(3, dtype=F64))
    r2 = torch.nn.Parameter(torch.ones(2, dtype=F64))
    ref1 = slotopt.Adam(learning_rate=0.01, params=[r1])
    ref2 = slotopt.Adam(learning_rate=0.1, beta_1=0.5, params=[r2])
    for step in range(3):
        g1, g2 = torch.full((3,), 0.3 * step + 0.1, dtype=F64), torch.full((2,), -0.2 * step - 0.4, dtype=F64)
        w1.grad, w2.grad, r1.grad, r2.grad = g1, g2, g1.clone(), g2.clone()
        opt.step()
        ref1.step()
        ref2.step()
    assert torch.equal(w1, r1) and torch.equal(w2, r2)
    assert opt.param_groups[1]["lr"] == 0.1 and opt.param_groups[0]["beta_1"] == 0.9


def test_add_param_group_rejects_bad_groups_without_change():
    w1 = torch.nn.Parameter(torch.ones(3))
    opt = slotopt.Adam(learning_rate=0.01, amsgrad=False, params=[w1])
    with pytest.raises(ValueError, match="more than one parameter group"):
        opt.add_param_group({"params": [w1]})
    with pytest.raises(ValueError, match="amsgrad"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))], "amsgrad": True})
    with pytest.raises(ValueError, match="lr"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.ones(1))], "lr": float("nan")})
    assert len(opt.param_groups) == 1 and len(opt.variables) == 4


# ------------------------------------------------------------------------------------------- AMP
@pytest.mark.parametrize("kind", ["keras3-adam", "legacy-adam", "v1-adam"])
def test_grad_scaler_unscales_and_skips_non_finite_steps(kind):
    net_a, net_b = model(), model()
    opt_a, opt_b = FACTORIES[kind](net_a), FACTORIES[kind](net_b)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x, y = batch(0)
    loss = torch.nn.functional.mse_loss(net_a(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt_a)
    scaler.update()
    torch.nn.functional.mse_loss(net_b(x), y).backward()
    opt_b.step()
    for a, b in zip(net_a.parameters(), net_b.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    before = snapshot(net_a, opt_a)
    opt_a.zero_grad()
    loss = torch.nn.functional.mse_loss(net_a(x), y) * float("inf")
    scaler.scale(loss).backward()
    scaler.step(opt_a)  # non-finite: skipped
    scaler.update()
    after = snapshot(net_a, opt_a)
    assert all(torch.equal(a, b) for a, b in zip(before[0], after[0]))
    assert all(torch.equal(before[1][i][k], after[1][i][k]) for i in before[1] for k in before[1][i])
    assert scaler.get_scale() == 512.0


def test_autocast_training_runs():
    net = model()
    opt = slotopt.AdamW(learning_rate=0.01, params=net)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = torch.nn.functional.mse_loss(net(batch(0)[0]), batch(0)[1])
    loss.backward()
    before = [p.detach().clone() for p in net.parameters()]
    opt.step()
    assert all(not torch.equal(a, b) for a, b in zip(before, net.parameters()))


# ------------------------------------------------------------------------------------------- hooks
def test_step_and_state_dict_hooks_run():
    net = model()
    opt = slotopt.legacy.Adam(learning_rate=0.01, params=net)
    calls = []
    opt.register_step_pre_hook(lambda o, a, k: calls.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: calls.append("post"))
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "extra": 1})
    opt.register_load_state_dict_pre_hook(lambda o, sd: {k: v for k, v in sd.items() if k != "extra"})
    train(opt, net, 1)
    assert calls == ["pre", "post"]
    sd = opt.state_dict()
    assert sd["extra"] == 1
    opt.load_state_dict(sd)


def test_profiler_sees_the_step():
    net = model()
    opt = slotopt.SGD(learning_rate=0.1, params=net)
    with torch.profiler.profile() as prof:
        train(opt, net, 1)
    assert any("Optimizer.step#SGD.step" in e.name for e in prof.events())


# ------------------------------------------------------------------------------------------- loading errors
def test_loading_another_class_or_other_parameters_is_refused_without_change():
    net = model()
    adam = slotopt.Adam(learning_rate=0.01, params=net)
    train(adam, net, 1)
    rms = slotopt.RMSprop(learning_rate=0.01, momentum=0.9, params=net)
    before = {k: {n: t.clone() for n, t in v.items()} for k, v in rms.state_dict()["state"].items()}
    with pytest.raises(ValueError, match="another optimizer class"):
        rms.load_state_dict(adam.state_dict())
    after = rms.state_dict()["state"]
    assert all(torch.equal(before[k][n], after[k][n]) for k in before for n in before[k])
    small = slotopt.Adam(learning_rate=0.01, params=list(net.parameters())[:2])
    with pytest.raises(ValueError, match="parameters"):
        small.load_state_dict(adam.state_dict())
    with pytest.raises(ValueError, match="'state'"):
        small.load_state_dict({})


def test_lazily_built_optimizer_takes_a_state_dict_before_its_build():
    net_a, net_b = model(), model()
    opt_a = slotopt.Adam(learning_rate=0.01, params=net_a)
    train(opt_a, net_a, 2)
    net_b.load_state_dict(net_a.state_dict())
    opt_b = slotopt.Adam(learning_rate=0.01)
    opt_b.load_state_dict(opt_a.state_dict())
    opt_b.build(net_b)
    assert int(opt_b.iterations) == 2
    train(opt_a, net_a, 1, start=2)
    train(opt_b, net_b, 1, start=2)
    assert all(torch.equal(a, b) for a, b in zip(net_a.parameters(), net_b.parameters()))


# ------------------------------------------------------------------------------------------- distributed checkpoint
@pytest.mark.parametrize("kind", ["keras3-sgd", "keras3-adam", "legacy-adam", "v1-momentum", "composite"])
def test_dcp_state_dict_round_trip_and_no_initialising_step(kind):
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    net_a, net_b = model(), model()
    opt_a = FACTORIES[kind](net_a)
    opt_b = FACTORIES[kind](net_b)
    fresh = get_optimizer_state_dict(net_b, opt_b)  # must not take a step
    assert all(torch.equal(a, b) for a, b in zip(model().parameters(), net_b.parameters()))
    assert all(int(v.get("step", 0)) == 0 for v in fresh["state"].values())
    train(opt_a, net_a, 2)
    osd = get_optimizer_state_dict(net_a, opt_a)
    net_b.load_state_dict(net_a.state_dict())
    set_optimizer_state_dict(net_b, opt_b, osd)
    train(opt_a, net_a, 2, start=2)
    train(opt_b, net_b, 2, start=2)
    assert all(torch.equal(a, b) for a, b in zip(net_a.parameters(), net_b.parameters()))
