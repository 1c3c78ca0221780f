"""Issue 42: what a PyTorch user and a Keras user meet first. torch's spellings (``lr``, ``betas`` taken, ``eps``
refused with the difference), a ``repr`` listing the hyperparameters, values shown as written, and the Keras
behaviours the upstream suites found different (Lamb from its config, MultiOptimizer given one optimizer,
tf-keras's CosineDecay warm-up alone, its LossScaleOptimizer's warning and config check, updating a tensor)."""

import logging
import warnings

import pytest
import torch

import slotopt
from slotopt import legacy, v1
from slotopt.engine.torch_arguments import TorchSpellingError


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


# ------------------------------------------------------------------------------------------- torch spellings
@pytest.mark.parametrize("make, deprecated", [
    (lambda m, **kw: slotopt.AdamW(m.parameters(), **kw), False),
    (lambda m, **kw: legacy.Adam(m.parameters(), **kw), True),  # tf.keras takes ``lr`` itself, with its warning
    (lambda m, **kw: v1.AdamOptimizer(params=m.parameters(), **kw), False),
], ids=["keras3", "legacy", "v1"])
def test_lr_and_betas_are_taken_in_every_generation(make, deprecated):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        opt = make(_model(), lr=3e-3, betas=(0.8, 0.99))
    assert any("`lr` argument is deprecated" in str(w.message) for w in caught) == deprecated
    group = opt.param_groups[0]
    assert group["lr"] == 3e-3 and group["betas"] == (0.8, 0.99)
    assert opt.defaults["lr"] == 3e-3  # as written; the variable still holds float32(0.003)


def test_lr_means_learning_rate_and_trains_the_same_bits():
    a, b = _model(), _model()
    one = slotopt.Adam(a.parameters(), lr=0.01, betas=(0.5, 0.9))
    two = slotopt.Adam(b.parameters(), learning_rate=0.01, beta_1=0.5, beta_2=0.9)
    for opt, model in ((one, a), (two, b)):
        model(torch.ones(4, 3)).square().sum().backward()
        opt.step()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert float(one.learning_rate) == float(torch.tensor(0.01, dtype=torch.float32))  # float32 in the step


@pytest.mark.parametrize("cls", [slotopt.Adam, legacy.Adam, v1.AdamOptimizer, slotopt.RMSprop])
def test_eps_is_refused_naming_epsilon_and_the_difference(cls):
    with pytest.raises(TorchSpellingError, match=r"`epsilon=`.*bias-corrected root") as err:
        cls(_model().parameters(), eps=1e-8)
    assert isinstance(err.value, TypeError) and isinstance(err.value, ValueError)
    with pytest.raises(ValueError, match="has no epsilon"):
        slotopt.SGD(_model().parameters(), eps=1e-8)


def test_a_value_under_both_names_or_a_bad_pair_is_refused():
    with pytest.raises(TypeError, match="`lr`.*`learning_rate`"):
        slotopt.Adam(_model().parameters(), lr=0.1, learning_rate=0.2)
    with pytest.raises(TypeError, match="`lr`.*`learning_rate`"):
        slotopt.Adam(_model().parameters(), 0.1, lr=0.2)  # the learning rate given by position
    with pytest.raises(TypeError, match="`betas`.*`beta_1`"):
        slotopt.Adam(betas=(0.9, 0.99), beta_1=0.8)
    # (issue 50: an argument at its declared default next to the torch spelling is not a second value: tools
    # that build the call from the signature, jsonargparse for LightningCLI, pass every default)
    assert slotopt.Adam(betas=(0.8, 0.99), beta_1=0.9).beta_1 == 0.8
    with pytest.raises(ValueError, match=r"`betas` must be a pair \(beta1, beta2\)"):
        v1.AdamOptimizer(betas=0.9)


def test_repr_lists_the_hyperparameters_as_torch_does():
    opt = slotopt.AdamW(_model().parameters(), lr=3e-3)
    lines = repr(opt).splitlines()
    assert lines[0].startswith("AdamW (name='adam_w")  # (a unique name: adam_w, adam_w_1, ...)
    assert lines[1] == "Parameter Group 0" and lines[-1] == ")"
    shown = dict(line.strip().split(": ", 1) for line in lines[2:-1])
    assert shown["lr"] == "0.003" and shown["betas"] == "(0.9, 0.999)" and shown["weight_decay"] == "0.004"
    assert list(shown) == sorted(shown)
    unbuilt = repr(slotopt.SGD(learning_rate=0.5)).splitlines()
    assert unbuilt[1] == "Defaults" and "    lr: 0.5" in unbuilt and "    fused: True" in unbuilt
    assert repr(legacy.SGD(_model().parameters(), 0.5)).startswith("slotopt.legacy.SGD (name='SGD'\n")
    assert repr(v1.GradientDescentOptimizer(0.5)).startswith("slotopt.v1.GradientDescentOptimizer (name=")


def test_values_are_shown_as_written_until_the_variable_holds_another():
    opt = slotopt.Adam(_model().parameters(), learning_rate=1e-3)
    assert opt.defaults["lr"] == 1e-3 and opt.param_groups[0]["lr"] == 1e-3
    assert opt.get_config()["learning_rate"] == 0.0010000000474974513  # Keras 3's config: the variable's value
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    opt.step()
    sched.step()
    assert opt.param_groups[0]["lr"] == 0.0005
    opt.learning_rate.assign(0.25)  # written another way: shown as the variable holds it
    assert opt.defaults["lr"] == 0.25
    old = legacy.Adam(_model().parameters(), learning_rate=3e-3, beta_1=0.8)
    assert old.defaults["lr"] == 3e-3 and old.defaults["beta_1"] == 0.8
    old.apply_gradients([(torch.ones_like(p), p) for p in old.param_groups[0]["params"]])  # variables now exist
    assert old.defaults["beta_1"] == 0.8 and float(old.beta_1) == float(torch.tensor(0.8))


# ------------------------------------------------------------------------------------------- item 7
def test_lamb_is_found_from_its_serialized_config_but_not_by_bare_name():
    config = slotopt.serialize(slotopt.Lamb(learning_rate=0.5, beta_1=0.5))
    assert config["module"] == "keras.optimizers" and config["registered_name"] is None
    again = slotopt.deserialize(config)
    assert type(again) is slotopt.Lamb and again.beta_1 == 0.5
    with pytest.raises(ValueError, match="Unknown optimizer: 'lamb'"):
        slotopt.get("lamb")


def test_multi_optimizer_takes_one_optimizer_for_every_variable():
    w = slotopt.Variable(torch.ones(2), name="w")
    sgd = slotopt.SGD(learning_rate=0.5)
    opt = slotopt.MultiOptimizer(sgd)
    opt.apply_gradients([(torch.ones(2), w)])
    assert w.tolist() == [0.5, 0.5] and opt.optimizers == [sgd] and int(sgd.iterations) == 1


def test_tf_keras_cosine_decay_warm_up_alone_takes_zero_decay_steps():
    schedule = slotopt.schedules.CosineDecay(0.0, 0, warmup_target=10.0, warmup_steps=1500)
    assert [float(schedule(s)) for s in (0, 750)] == [0.0, 5.0]
    with pytest.raises(ValueError, match="decay_steps"):
        slotopt.schedules.CosineDecay(0.1, 0)  # without a warm-up it still must be > 0


@pytest.mark.parametrize("scaled, unscaled, text", [
    (False, False, "You forgot to call LossScaleOptimizer.get_scaled_loss() and "
                   "LossScaleOptimizer.get_unscaled_gradients() before"),
    (True, False, "You forgot to call LossScaleOptimizer.get_unscaled_gradients() before"),
    (False, True, "You forgot to call LossScaleOptimizer.get_scaled_loss() before"),
])
def test_tf_keras_loss_scale_optimizer_warns_with_its_text(scaled, unscaled, text, caplog):
    var = torch.nn.Parameter(torch.tensor(1.0))
    lso = legacy.LossScaleOptimizer(legacy.SGD(0.1))
    if scaled:
        lso.get_scaled_loss(torch.tensor(1.0))
    if unscaled:
        lso.get_unscaled_gradients([torch.tensor(1.0)])
    with caplog.at_level(logging.WARNING):
        lso.apply_gradients([(torch.tensor(1.0), var)])
    assert text in caplog.text


def test_tf_keras_loss_scale_config_with_another_multiplier_is_refused():
    config = {"optimizer": slotopt.serialize(legacy.SGD(0.1)),
              "loss_scale": {"class_name": "DynamicLossScale",
                             "config": {"initial_loss_scale": 2.0, "increment_period": 3, "multiplier": 4.0}}}
    with pytest.raises(ValueError, match="DynamicLossScale whose multiplier is not 2"):
        legacy.LossScaleOptimizer.from_config(config)
    config["loss_scale"]["config"] = {"initial_loss_scale": 2.0}  # TF1's defaults for the rest
    lso = legacy.LossScaleOptimizer.from_config(config)
    assert lso.dynamic and lso.dynamic_growth_steps == 2000 and float(lso.loss_scale) == 2.0


@pytest.mark.parametrize("make", [lambda: legacy.SGD(3.0), lambda: v1.GradientDescentOptimizer(3.0)],
                         ids=["legacy", "v1"])
def test_gradients_for_a_tensor_are_computed_but_it_is_not_updated(make):
    # TF1 and tf-keras optimizer tests, testComputeGradientsWithTensors: a constant is watched and differentiated
    x = torch.tensor(1.0)
    opt = make()
    compute = getattr(opt, "compute_gradients", None) or opt._compute_gradients
    (grad, var), = compute(lambda: x * x, [x])
    assert var is x and float(grad) == 2.0 and not x.requires_grad
    # a computed (non-leaf) tensor gets its gradient, and is refused by the update, as TensorFlow refuses a Tensor
    y = torch.tensor(1.0, requires_grad=True) * 1.0
    pairs = compute(lambda: y * y, [y])
    assert float(pairs[0][0]) == 2.0
    with pytest.raises(NotImplementedError, match="(Trying to update a |Updating a `)Tensor"):
        opt.apply_gradients(pairs)


# ------------------------------------------------------------------------------------------- item 6
def test_inspect_names_a_file_that_is_no_checkpoint_once(capsys):
    from slotopt.cli import command

    assert command.main(["inspect", "README.md"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("slotopt inspect: README.md: is neither") and err.count("README.md") == 1
