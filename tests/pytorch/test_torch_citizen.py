"""slotopt as a complete torch.optim citizen (issue 23): torch.compile, schedulers that cycle momentum, torch's
hyperparameter names, parameters passed positionally (ZeRO, Hugging Face), copies, public ``update_step``.

Every comparison is bit for bit against the same optimizer run without the tool (eager, uncompiled, or driven by
hand through the Keras attributes).
"""

import copy
import os

import pytest
import torch
import torch._dynamo
import torch.distributed as dist
import torch.multiprocessing as mp
from _processes import free_port, init_gloo, run_processes

import slotopt
from slotopt.kernels import native

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def net(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 2))


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)


def loss_of(model, step):
    x, y = batch(step)
    return torch.nn.functional.mse_loss(model(x), y)


EVERY_GENERATION = {
    "keras3-adam": lambda m: slotopt.Adam(learning_rate=0.01, params=m),
    "keras3-sgd-momentum": lambda m: slotopt.SGD(learning_rate=0.05, momentum=0.9, params=m),
    "keras3-loss-scale": lambda m: slotopt.LossScaleOptimizer(slotopt.Adam(learning_rate=0.01), params=m),
    "keras3-multi": lambda m: slotopt.MultiOptimizer(
        slotopt.OptimizerMap(slotopt.AdamW(learning_rate=0.01), {r"0\.weight": slotopt.Muon(learning_rate=0.02)}),
        params=m),
    "legacy-adam": lambda m: slotopt.legacy.Adam(learning_rate=0.01, params=m),
    "legacy-loss-scale": lambda m: slotopt.legacy.LossScaleOptimizer(slotopt.legacy.Adam(learning_rate=0.01),
                                                                     params=m),
    "v1-adam": lambda m: slotopt.v1.AdamOptimizer(0.01, params=m),
    "v1-momentum": lambda m: slotopt.v1.MomentumOptimizer(0.05, 0.9, params=m),
    "composite": lambda m: slotopt.CompositeOptimizer(
        [(slotopt.Adagrad(learning_rate=0.1), ["0.*"]), (slotopt.legacy.Adam(learning_rate=0.01), ["2.*"])],
        params=m),
}


def train(make, steps=3, compile_as=None, backend="eager"):
    model = net()
    opt = make(model)

    def training_step(step):
        opt.zero_grad()
        loss = loss_of(model, step)
        loss.backward()
        opt.step()
        return loss

    step_fn = opt.step
    if compile_as == "step":
        step_fn = torch.compile(opt.step, backend=backend, fullgraph=False)
    elif compile_as == "training step":
        training_step = torch.compile(training_step, backend=backend, fullgraph=False)
    for step in range(steps):
        if compile_as == "step":
            opt.zero_grad()
            loss_of(model, step).backward()
            step_fn()
        else:
            training_step(step)
    return [p.detach().clone() for p in model.parameters()]


def assert_same_bits(a, b):
    a, b = list(a), list(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert torch.equal(x, y), (x - y).abs().max()


# ------------------------------------------------------------------------------------------------ 1. torch.compile
TRAINING_STEP_COMPILED = {"keras3-adam", "legacy-adam", "v1-adam", "composite"}  # one each (compiling is slow)


@pytest.mark.parametrize("name,compile_as", [(n, "step") for n in sorted(EVERY_GENERATION)]
                         + [(n, "training step") for n in sorted(TRAINING_STEP_COMPILED)])
def test_compiled_step_gives_the_eager_bits_in_every_generation(name, compile_as):
    torch._dynamo.reset()
    make = EVERY_GENERATION[name]
    assert_same_bits(train(make, compile_as=compile_as), train(make))


@pytest.mark.parametrize("name", ["keras3-adam", "legacy-adam", "v1-adam", "composite"])
def test_a_compiled_keras_style_step_with_apply_gradients_gives_the_eager_bits(name):
    results = []
    for compiled in (False, True):
        torch._dynamo.reset()
        model = net()
        opt = EVERY_GENERATION[name](model)

        def keras_step(step, model=model, opt=opt):
            grads = torch.autograd.grad(loss_of(model, step), list(model.parameters()))
            opt.apply_gradients(list(zip(grads, model.parameters())))

        run = torch.compile(keras_step, backend="eager") if compiled else keras_step
        for step in range(3):
            run(step)
        results.append([p.detach().clone() for p in model.parameters()])
    assert_same_bits(*results)


def test_the_step_runs_outside_the_graph_whole():
    model = net()
    opt = slotopt.Adam(learning_rate=0.01, params=model)
    loss_of(model, 0).backward()
    torch._dynamo.reset()
    explained = torch._dynamo.explain(opt.step)()
    assert explained.graph_count == 0  # nothing of the step is traced: it runs eagerly, whole
    assert int(opt.iterations) == 1


def test_no_frame_of_a_step_is_compiled_and_its_entries_call_through_only_when_dynamo_runs():
    # engine/eager.py: the entries (``step``, ``run_step``...) are skipped by Dynamo's frame hook and not inlined;
    # with no frame-evaluation callback they call the step directly, else through torch's disable wrapper.
    from torch._C._dynamo import eval_frame

    from slotopt.engine import eager, pipeline

    torch._dynamo.reset()
    model = net()
    opt = slotopt.Adam(learning_rate=0.01, params=model)

    def training_step(step):
        opt.zero_grad()
        loss_of(model, step).backward()
        opt.step()
        opt.apply_gradients([(torch.ones_like(p), p) for p in model.parameters()])

    compiled = torch.compile(training_step, backend="eager")
    for step in range(2):
        compiled(step)
    assert int(opt.iterations) == 4
    entry_code = pipeline.run_step.__code__
    assert eval_frame._debug_get_cache_entry_list(entry_code) == []  # never compiled
    assert pipeline.run_step._torchdynamo_disable is True
    calls = []
    probe = eager.outside_dynamo(lambda: calls.append(eval_frame.get_eval_frame_callback()))
    probe()
    torch.compile(lambda: probe(), backend="eager")()
    assert calls == [None, None]  # run eagerly both times, with no callback inside


def test_inductor_compiled_training_step_gives_the_eager_bits():
    """Inductor fuses the model's forward and backward (gradients differ in the last bits from eager autograd):
    the optimizer's part is checked by applying the gradients the compiled step produced, eagerly."""
    torch._dynamo.reset()
    make = EVERY_GENERATION["keras3-adam"]
    model = net()
    opt = make(model)
    seen = []
    opt.register_step_pre_hook(lambda o, args, kwargs: seen.append([p.grad.clone() for p in model.parameters()]))

    @torch.compile(backend="inductor")
    def training_step(step):
        opt.zero_grad()
        loss = loss_of(model, step)
        loss.backward()
        opt.step()
        return loss

    for step in range(3):
        training_step(step)
    replay = net()
    opt2 = make(replay)
    for grads in seen:
        for p, g in zip(replay.parameters(), grads):
            p.grad = g
        opt2.step()
    assert len(seen) == 3
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in replay.parameters()])


# ------------------------------------------------------------------------------------------------ 2. schedulers
CYCLED = {
    "keras3-adam": lambda m: slotopt.Adam(learning_rate=0.01, params=m),
    "keras3-sgd": lambda m: slotopt.SGD(learning_rate=0.05, momentum=0.9, params=m),
    "keras3-loss-scale": lambda m: slotopt.LossScaleOptimizer(slotopt.Nadam(learning_rate=0.01), params=m),
    "keras3-multi": lambda m: slotopt.MultiOptimizer(
        slotopt.OptimizerMap(slotopt.AdamW(learning_rate=0.01), {r"2\..*": slotopt.Lion(learning_rate=0.001)}),
        params=m),
    "legacy-adam": lambda m: slotopt.legacy.Adam(learning_rate=0.01, params=m),
    "legacy-sgd": lambda m: slotopt.legacy.SGD(learning_rate=0.05, momentum=0.5, params=m),
    "v1-adam": lambda m: slotopt.v1.AdamOptimizer(0.01, params=m),
    "v1-rmsprop": lambda m: slotopt.v1.RMSPropOptimizer(0.01, momentum=0.5, params=m),
    "composite": lambda m: slotopt.CompositeOptimizer(
        [(slotopt.Adamax(learning_rate=0.01), ["0.*"]), (slotopt.legacy.Adam(learning_rate=0.01), ["2.*"])],
        params=m),
}
SCHEDULERS = {
    "OneCycleLR": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.02, total_steps=6),
    "CyclicLR": lambda o: torch.optim.lr_scheduler.CyclicLR(o, base_lr=0.001, max_lr=0.02, step_size_up=2),
}


def face_keys(group):
    """The group's own (Keras) names for the cycled momentum: beta_1/beta_2, beta1/beta2 or momentum."""
    for pair in (("beta_1", "beta_2"), ("beta1", "beta2")):
        if pair[0] in group:
            return pair
    return ("momentum",)


@pytest.mark.parametrize("scheduler", sorted(SCHEDULERS))
@pytest.mark.parametrize("name", sorted(CYCLED))
def test_schedulers_that_cycle_momentum_drive_every_generation_and_wrapper(name, scheduler):
    model = net()
    opt = CYCLED[name](model)
    sched = SCHEDULERS[scheduler](opt)
    assert sched.cycle_momentum
    written = []
    for step in range(5):
        written.append([(g["lr"], *(g["betas"] if "betas" in g else (g["momentum"],))) for g in opt.param_groups])
        opt.zero_grad()
        loss_of(model, step).backward()
        opt.step()  # applies what the scheduler wrote; torch's name and the Keras names show the same values
        for g in opt.param_groups:
            assert (g["betas"][0] if "betas" in g else g["momentum"]) == g[face_keys(g)[0]]
        sched.step()
    cycled = [values[0][1] for values in written]
    assert len(set(cycled)) > 2, cycled  # the momentum (or beta_1) really moved

    # The same values written under the Keras names, by hand: the same bits.
    replay = net()
    opt2 = CYCLED[name](replay)
    for step, values in enumerate(written):
        for g, (lr, *cycled_values) in zip(opt2.param_groups, values):
            g["lr"] = lr
            for key, value in zip(face_keys(g), cycled_values):
                g[key] = value
        opt2.zero_grad()
        loss_of(replay, step).backward()
        opt2.step()
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in replay.parameters()])


def test_a_scheduled_beta_1_is_the_keras_attribute_set_by_hand():
    model, replay = net(), net()
    opt, opt2 = slotopt.Adam(learning_rate=0.01, params=model), slotopt.Adam(learning_rate=0.01, params=replay)
    sched = SCHEDULERS["OneCycleLR"](opt)
    for step in range(5):
        lr, beta_1 = opt.param_groups[0]["lr"], opt.param_groups[0]["betas"][0]
        opt2.learning_rate, opt2.beta_1 = lr, beta_1  # Keras's way
        for o, m in ((opt, model), (opt2, replay)):
            o.zero_grad()
            loss_of(m, step).backward()
            o.step()
        assert opt.beta_1 == opt.param_groups[0]["beta_1"] == opt.param_groups[0]["betas"][0] == beta_1
        sched.step()
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in replay.parameters()])


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "LambdaLR", "ExponentialLR"])
@pytest.mark.parametrize("wrapper", ["keras3-loss-scale", "keras3-multi", "composite", "legacy-loss-scale"])
def test_every_lr_scheduler_drives_the_wrappers(wrapper, name):
    make_scheduler = {
        "StepLR": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5),
        "CosineAnnealingLR": lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4),
        "LambdaLR": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda s: 1.0 / (s + 1)),
        "ExponentialLR": lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.7),
    }[name]
    make = EVERY_GENERATION[wrapper]
    model, replay = net(), net()
    opt, opt2 = make(model), make(replay)
    assert "lr" in opt.defaults
    initial = [g["lr"] for g in opt.param_groups]
    sched = make_scheduler(opt)
    for step in range(4):
        for g, g2 in zip(opt.param_groups, opt2.param_groups):
            g2["lr"] = g["lr"]
        for o, m in ((opt, model), (opt2, replay)):
            o.zero_grad()
            loss_of(m, step).backward()
            o.step()
        sched.step()
    assert all(g["lr"] < lr for g, lr in zip(opt.param_groups, initial))  # every group's rate was driven
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in replay.parameters()])


def test_wrappers_show_the_names_every_sub_optimizer_has():
    model = net()
    mixed = slotopt.CompositeOptimizer(
        [(slotopt.SGD(learning_rate=0.1, momentum=0.9), ["0.*"]), (slotopt.Adam(learning_rate=0.1), ["2.*"])],
        params=model)
    assert "betas" not in mixed.defaults and "momentum" not in mixed.defaults and "lr" in mixed.defaults
    with pytest.raises(ValueError, match="momentum or beta1"):  # torch's own refusal: it cannot cycle both
        torch.optim.lr_scheduler.OneCycleLR(mixed, max_lr=0.1, total_steps=4)
    assert slotopt.LossScaleOptimizer(slotopt.Adam(), params=net()).defaults["betas"] == (0.9, 0.999)


def test_torch_style_groups_and_bad_writes():
    w, b = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(1))
    opt = slotopt.Adam(learning_rate=0.1, params=[{"params": [w]}, {"params": [b], "betas": (0.5, 0.75)}])
    assert (opt.param_groups[1]["beta_1"], opt.param_groups[1]["beta_2"]) == (0.5, 0.75)
    opt.param_groups[0]["eps"] = 1e-3
    w.grad, b.grad = torch.ones(3), torch.ones(1)
    opt.step()
    assert opt.epsilon == 1e-3 and opt.param_groups[0]["epsilon"] == 1e-3
    before = [w.detach().clone(), b.detach().clone(), opt.iterations.clone()]
    for key, value, match in (("betas", 0.5, "betas` must be a tuple of 2"), ("betas", (0.9, float("nan")), "beta_2"),
                              ("weight_decay", float("inf"), "weight_decay")):
        opt.param_groups[0][key] = value
        with pytest.raises(ValueError, match=match):
            opt.step()
        assert_same_bits(before, [w.detach(), b.detach(), opt.iterations])
        opt.param_groups[0][key] = opt.defaults[key]
        opt.param_groups[0]["beta_2"] = opt.beta_2
    opt.param_groups[0]["betas"], opt.param_groups[0]["beta_1"] = (0.8, 0.999), 0.7
    with pytest.raises(ValueError, match="both written, differently"):
        opt.step()
    legacy = slotopt.legacy.SGD(learning_rate=0.1, params=[torch.nn.Parameter(torch.ones(2))])
    legacy.param_groups[0]["params"][0].grad = torch.ones(2)
    legacy.param_groups[0]["weight_decay"] = 0.01
    with pytest.raises(ValueError, match="has no `weight_decay` in its generation"):
        legacy.step()
    with pytest.raises(ValueError, match="has no `weight_decay`"):
        slotopt.v1.GradientDescentOptimizer(0.1, params=[{"params": [torch.nn.Parameter(torch.ones(2))],
                                                          "weight_decay": 0.1}])


# ------------------------------------------------------------------------------------------------ 3. momentum slots
@pytest.mark.parametrize("generation", ["keras3", "legacy"])
def test_a_momentum_written_into_plain_sgd_creates_its_slot_at_zeros(generation):
    cls = slotopt.SGD if generation == "keras3" else slotopt.legacy.SGD
    model = net()
    opt = cls(learning_rate=0.05, params=model)
    for step in range(4):
        if step == 2:
            opt.param_groups[0]["momentum"] = 0.9
        opt.zero_grad()
        loss_of(model, step).backward()
        opt.step()
    assert sorted(opt.state[model[0].weight]) == ["momentum", "step"]
    # Reference: two plain steps, then an optimizer built with momentum 0.9 (its slots at zeros).
    replay = net()
    plain = cls(learning_rate=0.05, params=replay)
    for step in range(4):
        if step == 2:
            plain = cls(learning_rate=0.05, momentum=0.9, params=replay)
        plain.zero_grad()
        loss_of(replay, step).backward()
        plain.step()
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in replay.parameters()])
    assert len(opt.get_weights()) == len(plain.get_weights())  # the same weights, in the same order


@pytest.mark.parametrize("cls", [slotopt.SGD, slotopt.legacy.SGD, slotopt.RMSprop])
def test_groups_with_their_own_momentum_get_slots_in_an_optimizer_without_momentum(cls):
    model = net()
    first, last = list(model[0].parameters()), list(model[2].parameters())
    opt = cls(learning_rate=0.05, params=[{"params": first}])
    opt.add_param_group({"params": last, "momentum": 0.5})
    reference = net()
    plain = cls(learning_rate=0.05, params=list(reference[0].parameters()))
    with_momentum = cls(learning_rate=0.05, momentum=0.5, params=list(reference[2].parameters()))
    for step in range(3):
        for o in (opt, plain, with_momentum):
            o.zero_grad()
        loss_of(model, step).backward()
        loss_of(reference, step).backward()
        for o in (opt, plain, with_momentum):
            o.step()
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in reference.parameters()])


def test_a_momentum_written_into_keras_rmsprop_creates_its_slot_at_zeros():
    model = net()
    opt = slotopt.RMSprop(learning_rate=0.01, params=model)
    for step in range(4):
        if step == 2:
            opt.param_groups[0]["momentum"] = 0.9
        opt.zero_grad()
        loss_of(model, step).backward()
        opt.step()
    assert sorted(opt.state[model[0].weight]) == ["momentum", "step", "velocity"]
    assert [v.path.split("_")[-1] for v in opt.variables[2:]] == ["velocity"] * 4 + ["momentum"] * 4  # Keras's order
    # Reference: two steps without momentum, then an RMSprop built with momentum 0.9 that takes the velocities.
    replay = net()
    first = slotopt.RMSprop(learning_rate=0.01, params=replay)
    for step in range(2):
        first.zero_grad()
        loss_of(replay, step).backward()
        first.step()
    second = slotopt.RMSprop(learning_rate=0.01, momentum=0.9, params=replay)
    with torch.no_grad():
        for p in replay.parameters():
            second.state[p]["velocity"].copy_(first.state[p]["velocity"])
    for step in range(2, 4):
        second.zero_grad()
        loss_of(replay, step).backward()
        second.step()
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in replay.parameters()])


@pytest.mark.parametrize("make", [lambda m: slotopt.RMSprop(learning_rate=0.01, centered=True, params=m),
                                  lambda m: slotopt.legacy.RMSprop(learning_rate=0.01, params=m)])
def test_rmsprop_that_cannot_take_a_momentum_slot_refuses_one_at_once(make):
    model = net()
    opt = make(model)
    loss_of(model, 0).backward()
    before = [p.detach().clone() for p in model.parameters()]
    opt.param_groups[0]["momentum"] = 0.9
    with pytest.raises(ValueError, match="built (centered )?without momentum"):
        opt.step()
    assert_same_bits(before, [p.detach() for p in model.parameters()])
    assert int(opt.iterations) == 0


# ------------------------------------------------------------------------------------------------ 4. positional
@pytest.mark.parametrize("make", [
    lambda m: slotopt.Adam(m.parameters(), 0.01),
    lambda m: slotopt.Adam(m, learning_rate=0.01),
    lambda m: slotopt.legacy.Adam(list(m.parameters()), 0.01),
    lambda m: slotopt.v1.AdamOptimizer(list(m.named_parameters()), 0.01),
    lambda m: slotopt.v1.AdamOptimizer([{"params": list(m.parameters())}], learning_rate=0.01),
])
def test_parameters_are_taken_positionally_first(make):
    model, replay = net(), net()
    opt = make(model)
    keras_order = {slotopt.Adam: lambda: slotopt.Adam(0.01, params=replay),  # Keras's and TF1's orders hold
                   slotopt.legacy.Adam: lambda: slotopt.legacy.Adam(0.01, params=replay),
                   slotopt.v1.AdamOptimizer: lambda: slotopt.v1.AdamOptimizer(0.01, params=replay)}[type(opt)]()
    for o, m in ((opt, model), (keras_order, replay)):
        o.zero_grad()
        loss_of(m, 0).backward()
        o.step()
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in replay.parameters()])


def test_parameters_given_twice_are_refused():
    model = net()
    with pytest.raises(TypeError, match="both positionally and as `params=`"):
        slotopt.Adam(model, params=model)
    w = torch.nn.Parameter(torch.ones(2))
    groups = slotopt.v1.MomentumOptimizer(0.1, 0.9, params=[w]).param_groups  # TF1's order holds
    assert (groups[0]["lr"], groups[0]["momentum"]) == (0.1, 0.9)


def _zero_worker(rank, world, port, results):
    from torch.distributed.optim import ZeroRedundancyOptimizer

    init_gloo(rank, world, port)
    try:
        for name, (cls, kwargs) in ZERO_OPTIMIZERS.items():
            for sharded in (True, False):
                model = net()
                ddp = torch.nn.parallel.DistributedDataParallel(model)
                if sharded:  # ZeRO calls cls(params_of_this_rank, **kwargs)
                    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, **kwargs)
                    local = sum(len(g["params"]) for g in opt.optim.param_groups)
                else:
                    opt = cls(model.parameters(), **kwargs)
                for step in range(3):
                    x, y = batch(step)
                    opt.zero_grad()
                    torch.nn.functional.mse_loss(ddp(x[rank::world]), y[rank::world]).backward()
                    opt.step()
                results[(name, sharded, rank)] = [p.detach().clone() for p in model.parameters()]
            results[(name, "local", rank)] = local
    finally:
        dist.barrier()
        dist.destroy_process_group()


ZERO_OPTIMIZERS = {
    "keras3": (slotopt.Adam, {"learning_rate": 0.01}),
    "legacy": (slotopt.legacy.Adam, {"learning_rate": 0.01}),
    "v1": (slotopt.v1.AdamOptimizer, {"learning_rate": 0.01}),
}


def test_zero_redundancy_optimizer_with_slotopt_classes_equals_the_unsharded_optimizer():
    results = mp.Manager().dict()
    run_processes(_zero_worker, (2, free_port(), results), 2)
    for name in ZERO_OPTIMIZERS:
        assert results[(name, "local", 0)] + results[(name, "local", 1)] == 4  # each rank optimizes its share
        assert 0 < results[(name, "local", 0)] < 4
        for rank in range(2):
            assert_same_bits(results[(name, True, rank)], results[(name, False, rank)])


@pytest.mark.parametrize("cls", [slotopt.Adam, slotopt.legacy.Adam])
def test_hugging_face_optimizer_cls_and_kwargs(cls, tmp_path):
    from transformers import Trainer, TrainingArguments

    class Wrapped(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = net()

        def forward(self, inputs, labels):
            return {"loss": torch.nn.functional.mse_loss(self.model(inputs), labels)}

    x, y = batch(0)
    rows = [{"inputs": a, "labels": b} for a, b in zip(x, y)]
    wrapped = Wrapped()
    weight_decay = 0.01 if cls is slotopt.Adam else 0.0  # tf.keras's Adam has no weight decay
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, num_train_epochs=1,
                             report_to=[], save_strategy="no", logging_strategy="no", use_cpu=True,
                             max_grad_norm=0.0, lr_scheduler_type="constant", seed=0, weight_decay=weight_decay,
                             train_sampling_strategy="sequential")
    trainer = Trainer(model=wrapped, args=args, train_dataset=rows,
                      optimizer_cls_and_kwargs=(cls, {"learning_rate": 0.01}))
    trainer.train()
    assert isinstance(trainer.optimizer.optimizer, cls)
    # Reference: Hugging Face's two groups (decay for weights, none for biases) by hand.
    replay = net()
    weights = [p for n, p in replay.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in replay.named_parameters() if n.endswith("bias")]
    opt = cls([{"params": weights, "weight_decay": weight_decay}, {"params": biases, "weight_decay": 0.0}],
              learning_rate=0.01)
    for i in range(0, 8, 4):
        opt.zero_grad()
        torch.nn.functional.mse_loss(replay(x[i:i + 4]), y[i:i + 4]).backward()
        opt.step()
    assert_same_bits([p.detach() for p in wrapped.model.parameters()], [p.detach() for p in replay.parameters()])
    if weight_decay:  # the weights decayed, the biases did not: not the same as plain Adam
        plain = net()
        adam = slotopt.Adam(plain, learning_rate=0.01)
        for i in range(0, 8, 4):
            adam.zero_grad()
            torch.nn.functional.mse_loss(plain(x[i:i + 4]), y[i:i + 4]).backward()
            adam.step()
        assert not torch.equal(plain[0].weight, replay[0].weight)


# ------------------------------------------------------------------------------------------------ 5. copies
def test_a_deep_copy_of_model_and_composite_with_a_callable_trains_like_the_original():
    model = net()
    dense = list(model[2].parameters())
    opt = slotopt.CompositeOptimizer(
        [(slotopt.Adagrad(learning_rate=0.1), ["0.*"]), (slotopt.Adam(learning_rate=1e-2), lambda: dense)],
        params=model)
    loss_of(model, 0).backward()
    opt.step()
    model2, opt2 = copy.deepcopy((model, opt))
    for m, o in ((model, opt), (model2, opt2)):
        for step in (1, 2):
            o.zero_grad()
            loss_of(m, step).backward()
            o.step()
    assert_same_bits([p.detach() for p in model.parameters()], [p.detach() for p in model2.parameters()])
    assert all(p is not q for p, q in zip(model.parameters(), model2.parameters()))


def test_the_profiler_records_a_composites_zero_grad_under_its_own_name():
    model = net()
    opt = slotopt.CompositeOptimizer([(slotopt.Adam(learning_rate=0.01), ["*"])], params=model)
    loss_of(model, 0).backward()
    with torch.profiler.profile() as prof:
        opt.zero_grad()
    names = [e.name for e in prof.events()]
    assert "Optimizer.zero_grad#CompositeOptimizer.zero_grad" in names


# ------------------------------------------------------------------------------------------------ 6. update_step
BUILT_INS = sorted(n for n in dir(slotopt) if isinstance(getattr(slotopt, n), type)
                   and issubclass(getattr(slotopt, n), slotopt.Optimizer)
                   and n not in ("Optimizer", "LossScaleOptimizer", "MultiOptimizer"))


@pytest.mark.parametrize("path", ["foreach", "native"])
@pytest.mark.parametrize("name", BUILT_INS)
def test_public_update_step_updates_a_leaf_parameter_like_apply(name, path):
    if path == "native" and native._library is None:
        pytest.skip("compiled kernels unavailable")
    previous = native.use(path)
    try:
        results = []
        for how in ("update_step", "apply"):
            torch.manual_seed(0)
            p = torch.nn.Parameter(torch.randn(4, 4))
            opt = getattr(slotopt, name)(learning_rate=0.1, params=[p])
            grad = torch.full((4, 4), 0.5)
            if how == "update_step":
                opt.update_step(grad, p, opt.learning_rate)
            else:  # what ``apply`` runs for it, without autograd
                with torch.no_grad():
                    opt._update_group([p], [grad], opt._slot_lists(opt._kernel_slots, [0]), opt.learning_rate)
            results.append(p.detach().clone())
    finally:
        native.use(previous)
    assert_same_bits(results[:1], results[1:])
    assert p.requires_grad and p.grad is None
